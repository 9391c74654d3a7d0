"""Regions: one trace of ``build``/``forward`` per control-flow region (:func:`_run`), and the
exploration that traces until every configuration is covered (:func:`_explore`, :class:`_Gates`)."""

from __future__ import annotations

import builtins
import math
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
import torch.nn as nn

from ..expr import Const, Expr, all_, any_, compile_vectorized
from ..graph import Check, Network
from ._capture import _Mode, _SkippedInit, _to_meta, _Trace
from ._errors import TraceError
from ._modules import _CURRENT, _FORWARD, _ORIGINAL_CALL, _call, _module_call
from ._symbolic import REAL_RANGE, SymFloat, SymInt, SymStr, activate, as_expr_like, expr_of, guarded_range
from ._tensor import OpaqueUsed, STensor, _Opaque

_GRID_LIMIT = 1 << 20  # combinations of guarded parameters enumerated to find uncovered configurations


@dataclass
class _Region:
    cond: Expr
    guards: list[tuple[Expr, str]]
    net: Network | None = None
    outputs: tuple[int, ...] = ()
    binds: dict[int, list[Check]] = field(default_factory=dict)  # node index -> input rules
    held: dict[int, int] = field(default_factory=dict)  # tensor -> last node Python holds it (past its uses)
    error: str = ""
    slots: dict[str, str] = field(default_factory=dict)  # module path -> its slot (see _slots)


# ------------------------------------------------------------------------------------------------
# one region


def _wrap_param(tr: _Trace, param: Any, var: Expr, encoded: Any) -> Any:
    value = param.decode(encoded)
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        tr.guard(var == value, True)  # pinned: a region per choice
        return value
    if isinstance(value, str):
        return SymStr(value, var)
    if isinstance(value, int):
        return SymInt(value, var)
    return SymFloat(float(value), var)


def _run(
    build: Callable[[dict[str, Any]], nn.Module],
    inputs: Callable[[dict[str, Any]], Any],
    space: Any,
    env: Mapping[str, Any],
    box: Mapping[str, tuple[Any, Any]],
    finite: set[str],
    cache: dict[Any, Any],
) -> _Region:
    tr = _Trace(env, box, finite, cache)
    region = _Region(Const(True), [])
    activate(tr)
    _CURRENT.append(tr)
    builtins.range = guarded_range  # type: ignore[misc]
    init = _SkippedInit()
    try:
        cfg = {name: _wrap_param(tr, space[name], space.vars[name], env[name]) for name in space}
        with _Mode(tr), init:
            nn.Module.__call__ = _build_call  # type: ignore[method-assign]
            try:
                module = build(cfg)
            finally:
                nn.Module.__call__ = _ORIGINAL_CALL  # type: ignore[method-assign]
            if not isinstance(module, nn.Module):
                raise TraceError(f"build must return an nn.Module, got {type(module).__name__}")
            tr.settle()
            _to_meta(module)
            args, kwargs = forward_arguments(inputs(cfg))
            xs = [_input(tr, x, i) for i, x in enumerate(args)]
            kws = {k: _input(tr, x, k) for k, x in kwargs.items()}
            tr.names = {
                id(m): n or "model" for n, m in reversed(list(module.named_modules(remove_duplicate=False)))
            }
            tr.param_names = {
                id(p): n for n, p in reversed(list(module.named_parameters(remove_duplicate=False)))
            }
            tr.buffer_names = {id(b): n for n, b in module.named_buffers(remove_duplicate=False)}
            tr.forward = True
            nn.Module.__call__ = _module_call  # type: ignore[method-assign]
            try:
                out = module(*xs, **kws)
            finally:
                nn.Module.__call__ = _ORIGINAL_CALL  # type: ignore[method-assign]
                tr.forward = False
        outs = _outputs(tr, out)
        if not outs:
            raise TraceError(
                f"forward must return tensors (or a dict or tuple of them), got {type(out).__name__}"
            )
        for name, p in module.named_parameters():
            if id(p) not in tr.counted:  # built but not used by forward: PyTorch counts it all the same
                tr.tensor(p, f"parameter {name}, which forward does not use,")
        region.net, region.outputs, region.binds = tr.net, tuple(o._t.index for o in outs), tr.binds
        region.held = _past_uses(tr.net, tr.held, region.outputs)
        region.slots = _slots(tr, module)
    except TraceError:
        raise
    except Exception as err:  # the module rejects this configuration
        if isinstance(err, AssertionError | TypeError | AttributeError | KeyError) and _raised_here(err):
            raise
        region.error = f"{type(err).__name__}: {err}".splitlines()[0][:200]
    finally:
        builtins.range = REAL_RANGE  # type: ignore[misc]
        _CURRENT.pop()
        activate(None)
    region.guards = list(tr.guards.values())
    region.cond = all_(g for g, _ in region.guards)
    return region


def _outputs(tr: _Trace, out: Any) -> list[STensor]:
    """The tensors of ``forward``'s result in order: a tensor, or those of a tuple, list or dict (a
    Hugging Face ``ModelOutput``: ``last_hidden_state`` / ``logits`` first), nested; ``None`` and other
    values (a key/value cache object) are left out. The first is the model's output (the loss's input)."""
    if isinstance(out, STensor):
        return [out]
    if isinstance(out, torch.Tensor):
        return [tr.tensor(out, "the model's output")]
    if isinstance(out, Mapping):
        out = list(out.values())
    if isinstance(out, tuple | list):
        return [t for o in out for t in _outputs(tr, o)]
    if isinstance(out, _Opaque):
        out._used()
    return []


def _build_call(mod: nn.Module, *args: Any, **kwargs: Any) -> Any:
    """``nn.Module.__call__`` while building: a call on a tensor made from symbolic sizes or on the
    result of such a call (a dummy forward computing a flatten size) runs in a scratch trace
    (:meth:`_Trace.scratch`), whose results are symbolic tensors; other calls run as usual."""
    tr = _CURRENT[-1] if _CURRENT else None
    if tr is None or tr.forward:  # no trace, or a module called inside a scratch trace (a forward)
        return _module_call(mod, *args, **kwargs)
    given = [*args, *kwargs.values()]
    scratch = next((a._trace for a in given if isinstance(a, STensor)), None)
    if scratch is None:
        made = [a for a in given if isinstance(a, torch.Tensor) and not isinstance(a, nn.Parameter)]
        if not any(tr.shape_of(a) is not None for a in made):  # (a parametrization checks a weight)
            return _ORIGINAL_CALL(mod, *args, **kwargs)
        scratch = tr.scratch()
    _CURRENT.append(scratch)
    try:
        out = _call(
            scratch, mod, *scratch.symbolic(args), **{k: scratch.symbolic(v) for k, v in kwargs.items()}
        )
    finally:
        _CURRENT.pop()
    tr.settle()
    return out


def _past_uses(net: Network, held: dict[int, int], outputs: tuple[int, ...]) -> dict[int, int]:
    """The facts of ``held`` that keep a tensor past its last consumer (outputs live to the end anyway)."""
    last = {}
    for node in net.nodes:
        for i in node.inputs:
            last[i] = node.index
    return {t: h for t, h in held.items() if h > last.get(t, net.producer[t]) and t not in outputs}


# the trace's own code: a bug raised there is not the model's verdict (see _raised_here)
_OWN_FILES = frozenset(
    os.path.join(os.path.dirname(__file__), f"{name}.py")
    for name in ("_errors", "_tensor", "_capture", "_functions", "_modules", "_regions", "_aten")
)


def _raised_here(err: BaseException) -> bool:
    """True when ``err`` comes from the trace's own code (``_OWN_FILES``: a bug, not the model's verdict)."""
    tb = err.__traceback__
    last = None
    while tb is not None:
        last = tb.tb_frame.f_code.co_filename
        tb = tb.tb_next
    return last in _OWN_FILES


def forward_arguments(example: Any) -> tuple[list[Any], dict[str, Any]]:
    """``inputs(cfg)``'s result as ``forward``'s positional and keyword arguments: one input (a tensor
    or a shape), a tuple/list of them, or a dict of keyword arguments (``model(**batch)``, as Hugging
    Face models are called). ``None`` stands for an optional argument left out (an all-ones attention
    mask, which Hugging Face models treat as no mask)."""
    if isinstance(example, Mapping):
        if not all(isinstance(k, str) for k in example):
            raise TraceError("inputs(cfg) gave a dict with keys that are not forward's argument names")
        return [], dict(example)
    return list(example) if isinstance(example, tuple | list) else [example], {}


def _input(tr: _Trace, x: Any, i: int | str) -> STensor | None:
    if x is None:
        return None
    if isinstance(x, torch.Tensor):
        shape = tr.shape_of(x) or tuple(Const(d) for d in x.shape)
        dtype = "int64" if x.dtype in (torch.int64, torch.int32) else "float32"
    elif isinstance(x, tuple | list | torch.Size):
        shape, dtype = tuple(expr_of(d) for d in x), "float32"
    else:
        where = f"at position {i}" if isinstance(i, int) else f"for {i}="
        raise TraceError(f"inputs(cfg) must give tensors, shapes or None, got {type(x).__name__} {where}")
    out = STensor(tr, tr.net.input([as_expr_like(_lit(d)) for d in shape], dtype=dtype, name=f"input#{i}"))
    out.is_bool = isinstance(x, torch.Tensor) and x.dtype == torch.bool  # an attention mask
    return out


def _lit(e: Any) -> Any:
    return e.value if isinstance(e, Expr) and e.is_const else e


def _slots(tr: _Trace, root: nn.Module) -> dict[str, str]:
    """Module path (as in op labels, ``7/conv1``) -> its *slot*: the path with each list position
    replaced by the module's class, first parameter's symbolic shape and rank among the earlier
    siblings alike (``Basic('conv1.weight', (w1, w0, k, k))#0/conv1``). A loop's k-th block sits at
    another position of a ``Sequential`` in another region; its slot is the same, so the regions' ops
    match. (Slots only decide which ops are shared: the merge stays exact for any matching.)"""
    out = {"model": "model"}
    todo = [(root, "", "model")]
    while todo:
        mod, path, slot = todo.pop()
        seen: dict[str, int] = {}
        for name, child in mod.named_children():
            part = name
            if name.isdigit():
                first = next(iter(child.named_parameters()), None)  # optional parts come later
                shape = first and (first[0], tr.shape_of(first[1]) or tuple(first[1].shape))
                part = f"{type(child).__qualname__}{shape}"
                seen[part] = seen.get(part, -1) + 1
                part = f"{part}#{seen[part]}"
            cpath = f"{path}/{name}" if path else name
            out[cpath] = f"{slot}/{part}"
            todo.append((child, cpath, out[cpath]))
    return out


# ------------------------------------------------------------------------------------------------
# exploring the regions


def _explore(
    build: Any, inputs: Any, space: Any, max_regions: int, cache: dict[Any, Any]
) -> tuple[list[_Region], _Gates]:
    """Trace until every combination of the guarded parameters' values is in some region."""
    box = {n: space[n].bounds() for n in space}
    finite = {n for n in space if space[n].is_finite}
    default = {n: space[n].encoded()[0].item() if n in finite else float(space[n].low) for n in space}
    regions: list[_Region] = []
    names: list[str] = []
    cols: dict[str, np.ndarray] = {}
    covered = np.zeros(1, dtype=bool)
    fresh: list[_Region] = []
    while True:
        want = sorted(set().union(*(r.cond.variables() for r in regions)))
        if want != names:
            names = want
            sizes = [len(space[n].encoded()) for n in names]
            if math.prod(sizes) > _GRID_LIMIT:
                raise TraceError(
                    f"the guarded parameters {names} have {math.prod(sizes)} combinations (more than "
                    f"{_GRID_LIMIT}): the model's control flow depends on too many values"
                )
            grids = np.meshgrid(*(space[n].encoded() for n in names), indexing="ij")
            cols = {n: g.ravel() for n, g in zip(names, grids)}
            covered = np.zeros(math.prod(sizes), dtype=bool)
            fresh = regions
        for r in fresh:
            (hit,) = compile_vectorized([r.cond], box)(cols)
            covered |= np.broadcast_to(np.asarray(hit, dtype=bool), covered.shape)
        left = np.flatnonzero(~covered)
        if not len(left):
            return regions, _Gates(space, names, cols, regions, box)
        if len(regions) >= max_regions:
            lines = sorted({line for r in regions for _, line in r.guards})
            raise TraceError(
                f"more than max_regions={max_regions} control-flow regions; the guards come from:\n  "
                + "\n  ".join(lines[:20])
            )
        env = dict(default)
        env.update({n: cols[n][left[0]].item() for n in names})
        region = _traced(build, inputs, space, env, box, finite, cache)
        regions.append(region)
        fresh = [region]


def _traced(
    build: Any, inputs: Any, space: Any, env: Any, box: Any, finite: set[str], cache: dict[Any, Any]
) -> _Region:
    """:func:`_run`; where the model uses a secondary output a module's op does not make
    (``MultiheadAttention``'s weights), again with that module traced through its ``forward`` (in this
    region and the next)."""
    forward = cache.setdefault(_FORWARD, set())
    while True:
        try:
            return _run(build, inputs, space, env, box, finite, cache)
        except OpaqueUsed as used:
            if used.path in forward:
                raise
            forward.add(used.path)


class _Gates:
    """Sets of regions as simple exact conditions, read off the grid of the guarded parameters: a
    product of per-parameter value sets (``2 < depth``, ``act == 'relu'``) when it matches the set's
    points, else the union of the regions' own conditions."""

    def __init__(
        self, space: Any, names: list[str], cols: dict[str, np.ndarray], regions: list[_Region], box: Any
    ) -> None:
        self.space, self.names, self.cols, self.regions = space, names, cols, regions
        n = len(next(iter(cols.values()))) if cols else 1
        self.owner = np.full(n, -1)
        for i, r in enumerate(regions):
            (hit,) = compile_vectorized([r.cond], box)(cols)
            self.owner[np.broadcast_to(np.asarray(hit, dtype=bool), (n,))] = i
        self.valid = np.isin(self.owner, [i for i, r in enumerate(regions) if r.net is not None])
        self.cache: dict[tuple[frozenset[int], bool], Expr] = {}

    def of(self, members: frozenset[int], exact: bool) -> Expr:
        """The condition of being in one of the regions ``members`` (indices into ``regions``);
        ``exact=False``: anything goes on invalid regions' configurations."""
        key = (members, exact)
        if key not in self.cache:
            self.cache[key] = self._build(members, exact)
        return self.cache[key]

    def _build(self, members: frozenset[int], exact: bool) -> Expr:
        pts = np.isin(self.owner, list(members))
        care = np.ones_like(pts) if exact else self.valid
        if pts[care].all():
            return Const(True)
        lits: list[Expr] = []
        mask = np.ones_like(pts)
        for n in self.names:
            vals = np.unique(self.cols[n][pts])
            domain = self.space[n].encoded()
            if len(vals) < len(domain):
                lits.append(self._literal(n, vals, domain))
                mask &= np.isin(self.cols[n], vals)
        if np.array_equal(mask & care, pts & care):
            return all_(lits)
        if len(members) == 1:
            return self.regions[next(iter(members))].cond
        return any_(self.of(frozenset([i]), exact) for i in sorted(members))

    def _literal(self, name: str, vals: np.ndarray, domain: np.ndarray) -> Expr:
        param, var = self.space[name], self.space.vars[name]
        if param.labels is not None:
            return any_(var == param.decode(v.item()) for v in vals)
        pos = np.searchsorted(domain, vals)
        lo, hi = int(pos.min()), int(pos.max())
        if hi - lo + 1 != len(vals):
            return any_(var == v.item() for v in vals)
        parts = []
        if lo > 0:
            parts.append(var > domain[lo - 1].item())
        if hi < len(domain) - 1:
            parts.append(var < domain[hi + 1].item())
        return all_(parts)
