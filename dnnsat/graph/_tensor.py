"""The records of a symbolic network: tensors, operator nodes, a network evaluated at one configuration.

:class:`GraphError` is raised by every builder method; :func:`encode_config` gives the encoded assignment
:meth:`Network.concretize <dnnsat.graph.Network.concretize>` evaluates.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..expr import Expr
from ._catalog import Attrs, OpInfo, Shape, prod

if TYPE_CHECKING:
    from ._network import Network

__all__ = ["GraphError", "Tensor", "Node", "Concrete", "encode_config"]


class GraphError(ValueError):
    """A network that cannot be built: the message names the operator, its position and the rule."""


@dataclass(frozen=True, eq=False)
class Tensor:
    """A symbolic tensor: ``shape`` is a tuple of integer expressions."""

    net: Network
    index: int
    shape: Shape
    dtype: str = "float32"

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def numel(self) -> Expr:
        return prod(self.shape)

    def __add__(self, other: Tensor) -> Tensor:
        return self.net.add(self, other)

    def __mul__(self, other: Tensor) -> Tensor:
        return self.net.mul(self, other)

    def __repr__(self) -> str:
        return f"Tensor(#{self.index}, shape=({', '.join(str(d) for d in self.shape)}))"


@dataclass(eq=False)
class Node:
    """One operator application (or a ``select`` merging branches) in execution order."""

    index: int
    op: str
    label: str  # "conv2d#3": op name and position, used in constraint names
    inputs: tuple[int, ...]
    output: int
    attrs: Attrs
    gate: Expr
    info: OpInfo | None  # None for "select"
    cases: tuple[tuple[Expr, int], ...] = ()  # select: (condition, tensor index), first true wins
    same_shape: bool = False  # select made by repeat: active body output must keep the shape


@dataclass
class Concrete:
    """A network evaluated at one configuration: which nodes run, their attributes and shapes."""

    net: Network
    gates: dict[int, bool]
    attrs: dict[int, Attrs]
    cases: dict[int, list[bool]]
    shapes: dict[int, tuple[int, ...]]


def encode_config(space: Any, config: Mapping[str, Any]) -> dict[str, Any]:
    """Validate ``config`` against ``space`` and return the encoded env (inactive params: first value)."""
    cfg = space.validate(config)
    env: dict[str, Any] = {}
    for name in space:
        p = space[name]
        if name in cfg and space.is_active(name, cfg):
            env[name] = p.encode(cfg[name])
        elif p.is_finite:
            env[name] = p.encoded()[0].item()
        else:
            env[name] = float(p.low)
    return env
