"""Materialize a symbolic network at one configuration as a runnable ``torch.nn.Module``.

The module is interpreted from the same :class:`~dnnsat.graph.Network` the cost model reads (one
source of truth): every active catalog node becomes the module its catalog entry builds, selects
(depth and op choices) pick their branch, inactive nodes are skipped. With ``device="meta"`` no weight
memory is allocated.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping
from typing import Any

import torch
import torch.nn as nn

from ..graph import CATALOG, Concrete, GraphError, Network, encode_config

__all__ = ["GraphModule", "to_torch", "example_inputs", "resolve_network", "concretize"]


class GraphModule(nn.Module):
    """An ``nn.Module`` interpreting a concretized network; ``forward(*inputs)`` in input order.

    Like hand-written ``x = layer(x)`` code, ``forward`` drops each intermediate tensor after its last
    consumer, so peak memory is what the memory model predicts.
    """

    def __init__(self, conc: Concrete) -> None:
        super().__init__()
        net = conc.net
        self.layers = nn.ModuleDict()
        self._plan: list[tuple[str, Any]] = []
        self._n_inputs = len(net.inputs)
        self._outputs = [t.index for t in (net.outputs or [net.last])]
        self.input_shapes = [conc.shapes[t.index] for t in net.inputs]
        self.input_dtypes = [t.dtype for t in net.inputs]
        input_pos = {t.index: i for i, t in enumerate(net.inputs)}
        for node in net.nodes:
            if not conc.gates[node.index]:
                continue
            if node.op == "select":
                flags = conc.cases[node.index]
                pick = next((i for i, f in enumerate(flags) if f), None)
                chosen = None if pick is None else node.cases[pick][1]
                other = node.cases[-1][1] if node.same_shape else None
                self._plan.append(("select", (node.output, chosen, other, node.label)))
            elif node.op == "input":
                self._plan.append(("input", (node.output, input_pos[node.output])))
            else:
                entry = CATALOG[node.op]
                if entry.build is None:
                    raise GraphError(f"{node.label}: operator {node.op!r} has no PyTorch materializer")
                in_shapes = [conc.shapes[i] for i in node.inputs]
                self.layers[node.label] = entry.build(conc.attrs[node.index], in_shapes)
                self._plan.append(("op", (node.output, node.label, node.inputs)))
                if isinstance(conc.attrs[node.index].get("tied"), str):
                    self._tie(node.label, conc.attrs[node.index].tied)
                self._share(node.label, conc.attrs[node.index].get("shared_names", ()))
        last_use: dict[int, int] = {}
        for pos, (kind, data) in enumerate(self._plan):
            uses = data[2] if kind == "op" else data[1:3] if kind == "select" else ()
            last_use.update((i, pos) for i in uses if i is not None)
        last_use.update((i, len(self._plan)) for i in self._outputs)
        self._drop: dict[int, list[int]] = {}
        for i, pos in last_use.items():
            self._drop.setdefault(pos, []).append(i)

    def _tie(self, label: str, owner: str, name: str = "weight", theirs: str = "weight") -> None:
        """Share parameter ``name`` of ``label`` (a tied linear's weight, a module called again) with
        parameter ``theirs`` of the first active op labelled or placed at ``owner`` (``"embedding#1"``,
        or the module path ``"emb"`` of a ``from_torch`` network)."""
        layer: Any = self.layers[label]
        mine = getattr(layer, name)
        for other, module in self.layers.items():
            if other != label and (other == owner or other.endswith(" " + owner)):
                source = getattr(module, theirs, None)
                if source is not None and source.shape == mine.shape:
                    setattr(layer, name, source)
                    return
        raise GraphError(
            f"{label}: no active op {owner!r} with a parameter {theirs!r} of shape {tuple(mine.shape)}"
        )

    def _share(self, label: str, pairs: tuple[tuple[str, str, str], ...]) -> None:
        """Tie the parameters a traced op shares (``Network.share``) to their owners' by name; where
        the materializer names them otherwise (a module called again, e.g. an attention), all of them
        to the owner's, which is built alike, in order."""
        layer: Any = self.layers[label]
        for owner in dict.fromkeys(path for _, path, _ in pairs):
            names = [(mine, theirs) for mine, path, theirs in pairs if path == owner]
            owners = (m for other, m in self.layers.items() if other != label and other.endswith(" " + owner))
            source = next(owners, None)
            if source is not None and all(hasattr(layer, a) and hasattr(source, b) for a, b in names):
                for mine, theirs in names:
                    self._tie(label, owner, mine, theirs)
            elif source is not None and _shapes(source) == _shapes(layer):
                for (name, _), param in zip(list(layer.named_parameters()), source.parameters()):
                    module, _, attr = name.rpartition(".")
                    setattr(layer.get_submodule(module), attr, param)
            else:
                raise GraphError(f"{label}: no active op {owner!r} to share its parameters with")

    def forward(self, *inputs: Any) -> Any:
        if len(inputs) != self._n_inputs:
            raise TypeError(f"the network takes {self._n_inputs} input(s), got {len(inputs)}")
        values: dict[int, Any] = {}
        for pos, (kind, data) in enumerate(self._plan):
            if kind == "op":
                out, label, ins = data
                values[out] = self.layers[label](*(values[i] for i in ins))
            elif kind == "input":
                out, index = data
                values[out] = inputs[index]
            else:
                out, chosen, other, label = data
                if chosen is None:
                    raise RuntimeError(f"{label}: no branch applies to this configuration")
                if other is not None and chosen != other and values[chosen].shape != values[other].shape:
                    raise RuntimeError(
                        f"{label}: a repeated block changes the shape {tuple(values[other].shape)} -> "
                        f"{tuple(values[chosen].shape)}"
                    )
                values[out] = values[chosen]
            for i in self._drop.get(pos, ()):
                del values[i]
        outs = [values[i] for i in self._outputs]
        return outs[0] if len(outs) == 1 else tuple(outs)


def _shapes(module: nn.Module) -> list[tuple[int, ...]]:
    return [tuple(p.shape) for p in module.parameters()]


def resolve_network(obj: Any, space: Any = None) -> tuple[Network, Any]:
    """``(network, space)`` from a Network, a Problem (``.network``/``.space``) or a build function."""
    if isinstance(obj, Network):
        return obj, space
    net = getattr(obj, "network", None)
    if isinstance(net, Network):
        return net, getattr(obj, "space", space)
    if hasattr(obj, "space") and hasattr(obj, "model") and callable(obj.model):
        return _call_build(obj.model, obj.space), obj.space
    if callable(obj):
        if space is None:
            raise TypeError("to_torch(build, config) needs space= to create the variables build() takes")
        return _call_build(obj, space), space
    raise TypeError(f"expected a Network, a Problem or a build function, got {type(obj).__name__}")


def _call_build(build: Callable[..., Any], space: Any) -> Network:
    net = build(space.vars)
    if not isinstance(net, Network):
        raise TypeError(
            f"the model function must return a dnnsat Network (net.output(x)), got {type(net).__name__}"
        )
    return net


def concretize(net: Network, config: Mapping[str, Any], space: Any = None) -> Concrete:
    """Evaluate ``net`` at a user ``config`` (validated and encoded with ``space`` when given)."""
    if space is not None:
        env = encode_config(space, config)
    else:
        env = {}
        for k, v in config.items():
            if isinstance(v, str | bool) or v is None:
                raise TypeError(f"parameter {k!r} = {v!r}: pass space= to encode categorical values")
            env[k] = v
    return net.concretize(env)


def to_torch(
    network_or_build: Any, config: Mapping[str, Any], space: Any = None, device: str | torch.device = "cpu"
) -> GraphModule:
    """A runnable ``nn.Module`` for ``config`` on ``device`` (``"meta"`` allocates no weights).

    ``network_or_build`` is a :class:`~dnnsat.graph.Network`, a Problem built with a model, or a
    build function (then ``space`` is required). Inputs: :func:`example_inputs`.
    """
    net, space = resolve_network(network_or_build, space)
    conc = concretize(net, config, space)
    with torch.device(device):
        return GraphModule(conc)


def _module_device(module: torch.nn.Module) -> torch.device:
    """The device of ``module``'s first parameter or buffer (``cpu`` when it has none)."""
    for tensor in itertools.chain(module.parameters(), module.buffers()):
        return tensor.device
    return torch.device("cpu")


def example_inputs(module: GraphModule, device: str | torch.device | None = None) -> tuple[Any, ...]:
    """Input tensors of the right shapes and dtypes for ``module`` (floats: standard normal, token ids: 0).

    ``device`` defaults to the module's own device (of its first parameter or buffer), so
    ``module(*example_inputs(module))`` runs as is: on the CPU for a default :func:`to_torch`, without
    allocating anything for ``to_torch(..., device="meta")``.
    """
    device = _module_device(module) if device is None else torch.device(device)
    out = []
    for shape, dtype in zip(module.input_shapes, module.input_dtypes):
        if dtype == "int64":
            out.append(torch.zeros(shape, dtype=torch.long, device=device))
        elif device.type == "meta":
            out.append(torch.empty(shape, device=device))
        else:
            out.append(torch.randn(shape, device=device))
    return tuple(out)
