"""Memory layouts of a traced network's tensors as the CPU kernels see them: strided (transposed) views,
channels-last results, gradients that reach their producer as strided views. Each decides a copy a
kernel makes (see ``_peak._Model.working_sets``)."""

from __future__ import annotations

from ...graph import Network, Node
from ._cpu import CONV_OPS, _flash_transpose

__all__ = ["ELEMENTWISE", "strided", "grad_strided", "channels_last_tensors"]

ELEMENTWISE = frozenset(
    {"add", "sub", "mul", "dropout", "relu", "gelu", "silu", "sigmoid", "tanh", "hardswish", "hardsigmoid",
     "relu6", "leaky_relu", "elu", "mish"}
)  # fmt: skip


def strided(net: Network, ti: int) -> bool:
    """Whether tensor ``ti`` of a traced model is a strided (transposed) view or an elementwise result of
    one (TensorIterator keeps its first operand's layout)."""
    if not net.permute_views:
        return False
    p = net.nodes[net.producer[ti]]
    if p.info is None:  # a select: strided if a case may be (an upper bound)
        return any(strided(net, c) for _, c in p.cases)
    if p.op == "permute":
        return not _flash_transpose(net, p)
    return p.op in ELEMENTWISE and bool(p.inputs) and strided(net, p.inputs[0])


def grad_strided(net: Network, consumers: dict[int, list[Node]], ti: int) -> bool:
    """Whether the gradient of tensor ``ti`` of a traced model reaches its producer as a strided view:
    ``ti``'s one consumer is a permute (its backward permutes the gradient back), or a flatten (whose
    backward splits a dimension: still a view) whose output's is."""
    users = consumers.get(ti, [])
    if not net.permute_views or len(users) != 1:
        return False
    c = users[0]
    if c.op == "permute":
        return not _flash_transpose(net, c)
    return c.op == "flatten" and grad_strided(net, consumers, c.output)


def channels_last_tensors(net: Network) -> set[int]:
    """The channels-last tensors of a traced model: a permute ``(0, 3, 1, 2)`` of a 4-D tensor that is not
    strided (ConvNeXt's permute back after its channels-last LayerNorm and Linears), or a convolution's or
    an elementwise op's result where an input is (the kernels keep the layout: an upper bound where a
    contiguous input comes first)."""
    out: set[int] = set()
    for n in net.nodes if net.permute_views else ():
        if n.info is None:
            ins = [c for _, c in n.cases]
        elif n.op == "permute":
            ins = (
                [n.output] if tuple(n.attrs["dims"]) == (0, 3, 1, 2) and not strided(net, n.inputs[0]) else []
            )
        elif n.op in CONV_OPS or n.op in ELEMENTWISE or n.op in ("scale", "shift"):
            ins = list(n.inputs)
        else:
            ins = []
        if any(i in out or i == n.output for i in ins):
            out.add(n.output)
    return out
