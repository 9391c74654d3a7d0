"""Symbolic networks: tensors with expression shapes, an operator catalog, depth and op choices.

See :class:`Network` for the builder and :mod:`dnnsat.graph._catalog` for the operator entries and
their counting conventions (``flops`` = 2 x multiply-adds of matmul-like ops, as FlopCounterMode).
"""

from ._catalog import CATALOG, Check, OpDef, OpInfo, op
from ._network import Network
from ._tensor import Concrete, GraphError, Node, Tensor, encode_config

__all__ = [
    "CATALOG",
    "Check",
    "Concrete",
    "GraphError",
    "Network",
    "Node",
    "OpDef",
    "OpInfo",
    "Tensor",
    "encode_config",
    "op",
]
