"""The ATen fallback of ``from_torch``: a tensor function or method without a handler of its own
(``F.layer_norm``, ``x[..., ::2]``, ``x.unbind(0)``, what an unknown ``torch.nn`` module's ``forward``
calls) runs on PyTorch's fake tensors whose sizes are symbols of a
:class:`~torch.fx.experimental.symbolic_shapes.ShapeEnv`: one symbol per distinct dimension expression,
hinted by its value at the traced configuration. Every operator the call reaches at PyTorch's dispatch
level (where ``FlopCounterMode`` counts; composite operators decomposed by PyTorch's Python
decompositions, which keep sizes symbolic) becomes one catalog ``aten`` node per tensor output:

* its output shape is what the operator's symbolic meta kernel computes, translated back to an
  expression over the space (:func:`_translate`);
* its FLOPs are ``torch.utils.flop_counter``'s formula for the operator on those symbolic shapes, so
  they equal ``FlopCounterMode``'s on every configuration;
* the guards the kernels put on the symbols (a size compared with another, ``== 1`` for broadcasting,
  the checks that raise) become guards of the trace, so the region machinery traces the other cases; a
  kernel that raises at this configuration makes it invalid, as a handler does. An expression the
  translation does not cover (a float scale that is not a short binary fraction) is pinned: its
  symbols are guarded equal to their values here.

An operator with several outputs (``unbind``, ``var_mean``, ``native_layer_norm``'s statistics) gives
one node per output (the first carries the FLOPs); an empty placeholder output gets none. Results
reach the model's code as STensors (with their dtype), sizes as symbolic ints.

A call repeated within one trace (the same function on tensors of the same dimension expressions,
dtypes and producers, with the same other arguments: ``q`` and ``k`` normalized alike) is not run on
fake tensors again: its record (nodes, results, guards) is replayed on the new call's tensors
(:class:`_Replay`), which gives the same nodes.

Memory is conservative (an upper bound): a view or an in-place operator (by its schema's alias
annotations) allocates nothing; any other allocates its outputs and, when training, keeps its
non-parameter inputs and its output for backward; :func:`_scratch` adds the copies CPU kernels make (a
convolution's reorders, resampling, a strided input), and a strided view returned to the model counts
as a copy (:meth:`_Call.stensor`).
"""

from __future__ import annotations

import dataclasses
import functools
import math
import weakref
from collections.abc import Callable
from fractions import Fraction
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils._pytree import tree_flatten, tree_leaves, tree_map, tree_structure, tree_unflatten

from ..expr import Const, Expr, all_, any_, ceildiv, interval, maximum, minimum, sum_
from ..graph import Tensor
from ..graph._catalog import AtenArg, eq, lin
from ._errors import TraceError
from ._symbolic import SymFloat, SymInt, SymStr, fixed, plain, user_line
from ._tensor import STensor, _t, network_dtype

if TYPE_CHECKING:
    from ._capture import _Trace


@functools.cache
def _torch() -> SimpleNamespace:
    """PyTorch's symbolic-shape machinery, imported on first use (it pulls in sympy)."""
    import sympy
    import torch.utils._sympy.functions as fns
    from torch._dispatch.python import enable_python_dispatcher
    from torch._guards import GuardSource, Source
    from torch._subclasses import fake_tensor
    from torch.fx.experimental import symbolic_shapes
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils.flop_counter import flop_registry

    @dataclasses.dataclass(frozen=True)
    class Dim(Source):  # names a symbol (torch._dynamo's ConstantSource, without importing dynamo)
        label: str

        @property
        def guard_source(self) -> GuardSource:  # type: ignore[override]
            return GuardSource.CONSTANT

        @property
        def _name_template(self) -> str:
            return self.label

    class Record(TorchDispatchMode):
        """Each operator with a tensor output becomes nodes of the trace (:meth:`_Call.emit`)."""

        def __init__(self, call: _Call) -> None:
            super().__init__()
            self.call = call

        def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            kwargs = kwargs or {}
            out = func(*args, **kwargs)
            if any(isinstance(t, torch.Tensor) for t in tree_leaves(out)):
                self.call.emit(func, args, kwargs, out)
            return out

    untraceable = (
        fake_tensor.DataDependentOutputException,
        fake_tensor.DynamicOutputShapeException,
        fake_tensor.UnsupportedOperatorException,
        symbolic_shapes.GuardOnDataDependentSymNode,
    )
    return SimpleNamespace(
        sympy=sympy, fns=fns, Dim=Dim, Record=Record, ShapeEnv=symbolic_shapes.ShapeEnv,
        DimDynamic=symbolic_shapes.DimDynamic, FakeTensorMode=fake_tensor.FakeTensorMode,
        python_dispatcher=enable_python_dispatcher, flops=flop_registry, untraceable=untraceable,
    )  # fmt: skip


# ------------------------------------------------------------------------------------------------
# sympy -> Expr


class _Untranslatable(Exception):
    """A sympy expression outside :func:`_translate`'s forms (its symbols get pinned)."""


_MAX_DENOMINATOR = 1 << 16  # floats taken as exact fractions (scale factors 1.5, 0.25, ...)


def _rational(x: Any) -> Fraction:
    """A sympy number as an exact fraction (a float only when it is a short binary fraction)."""
    sp = _torch().sympy
    if isinstance(x, sp.Rational):
        return Fraction(int(x.p), int(x.q))
    if isinstance(x, sp.Float):
        f = Fraction(float(x))
        if f.denominator <= _MAX_DENOMINATOR:
            return f
    raise _Untranslatable(str(x))


def _linear(e: Any, names: dict[Any, Expr]) -> tuple[Expr, int]:
    """``e`` (a real-valued sum of rational multiples of integer terms) as ``(numerator, denominator)``."""
    sp, fns = _torch().sympy, _torch().fns
    if isinstance(e, fns.ToFloat):
        return _translate(e.args[0], names), 1
    if e.is_number:
        r = _rational(e)
        return Const(r.numerator), r.denominator
    if isinstance(e, fns.IntTrueDiv | fns.FloatTrueDiv):
        (n, q), (d, one) = _linear(e.args[0], names), _linear(e.args[1], names)
        if not (d.is_const and one == 1):
            raise _Untranslatable(str(e))
        return n, q * int(d.value)
    if isinstance(e, sp.Add):
        parts = [_linear(a, names) for a in e.args]
        den = math.lcm(*(q for _, q in parts))
        return sum_(n * (den // q) for n, q in parts), den
    if isinstance(e, sp.Mul):
        coeff, rest = e.as_coeff_Mul()
        r = _rational(coeff)
        n, q = _linear(rest, names)
        return n * r.numerator, q * r.denominator
    return _translate(e, names), 1


def _rounded(e: Any, names: dict[Any, Expr], up: bool) -> Expr:
    """``floor(e)`` (``ceil`` with ``up``) of a real expression of integer terms."""
    fns = _torch().fns
    if isinstance(e, fns.IntTrueDiv):  # a / b of integers: floor or ceiling division
        a, b = _translate(e.args[0], names), _translate(e.args[1], names)
        return ceildiv(a, b) if up else a // b
    n, q = _linear(e, names)
    return n if q == 1 else (ceildiv(n, q) if up else n // q)


def _translate(e: Any, names: dict[Any, Expr]) -> Expr:
    """The dnnsat expression of a sympy size or condition of PyTorch's symbolic shapes (``names``:
    symbol -> the dimension's expression). Integer arithmetic, ``FloorDiv``/``CeilDiv``, ``Mod``,
    ``Max``/``Min``, natural powers, rounding of rational multiples, relations and ``And``/``Or``/``Not``."""
    sp, fns = _torch().sympy, _torch().fns
    if e is sp.true or e is sp.false:
        return Const(bool(e))
    if isinstance(e, sp.Symbol):
        if e not in names:
            raise _Untranslatable(str(e))
        return names[e]
    if isinstance(e, sp.Integer):
        return Const(int(e))
    args = e.args
    if isinstance(e, sp.Add):
        return sum_(_translate(a, names) for a in args)
    if isinstance(e, sp.Mul):
        if not all(a.is_integer for a in args if a.is_number):
            raise _Untranslatable(str(e))
        out = Const(1)
        for a in args:
            out = out * _translate(a, names)
        return out
    if isinstance(e, sp.Pow | fns.PowByNatural):
        base, power = args
        if not (isinstance(power, sp.Integer) and int(power) >= 0):
            raise _Untranslatable(str(e))
        return _translate(base, names) ** int(power)
    if isinstance(e, fns.FloorDiv | fns.CleanDiv):
        return _translate(args[0], names) // _translate(args[1], names)
    if isinstance(e, fns.CeilDiv):
        return ceildiv(_translate(args[0], names), _translate(args[1], names))
    if isinstance(e, fns.Mod | fns.PythonMod | sp.Mod):
        a, b = _translate(args[0], names), _translate(args[1], names)
        return a - a // b * b
    if isinstance(e, fns.ModularIndexing):
        x, d, m = (_translate(a, names) for a in args)
        q = x // d
        return q - q // m * m
    if isinstance(e, fns.Max | sp.Max):
        return maximum(*(_translate(a, names) for a in args)) if len(args) > 1 else _translate(args[0], names)
    if isinstance(e, fns.Min | sp.Min):
        return minimum(*(_translate(a, names) for a in args)) if len(args) > 1 else _translate(args[0], names)
    if isinstance(e, fns.FloorToInt | fns.TruncToInt | sp.floor):  # sizes: >= 0, where trunc is floor
        return _rounded(args[0], names, up=False)
    if isinstance(e, fns.CeilToInt | sp.ceiling):
        return _rounded(args[0], names, up=True)
    if isinstance(e, fns.Identity):
        return _translate(args[0], names)
    relations: dict[type, Callable[[Expr, Expr], Expr]] = {
        sp.Eq: eq, sp.Ne: lambda a, b: ~eq(a, b), sp.Lt: lambda a, b: a < b, sp.Le: lambda a, b: a <= b,
        sp.Gt: lambda a, b: a > b, sp.Ge: lambda a, b: a >= b,
    }  # fmt: skip
    for kind, build in relations.items():
        if isinstance(e, kind):
            return build(lin(_translate(args[0], names)), lin(_translate(args[1], names)))
    if isinstance(e, sp.And):
        return all_(_translate(a, names) for a in args)
    if isinstance(e, sp.Or):
        return any_(_translate(a, names) for a in args)
    if isinstance(e, sp.Not):
        return ~_translate(args[0], names)
    raise _Untranslatable(str(e))


# ------------------------------------------------------------------------------------------------
# one call


class _Call:
    """One fallback call: its ShapeEnv and fake tensors, and the graph tensors the fakes stand for."""

    def __init__(self, tr: _Trace, name: str, leaves: list[Any]) -> None:
        m = _torch()
        self.tr, self.name = tr, name
        self.env = m.ShapeEnv(duck_shape=False, specialize_zero_one=False)
        self.mode = m.FakeTensorMode(shape_env=self.env)
        # PyTorch's cache of fake results lives on the ShapeEnv, fresh for each call: it would rarely
        # hit, and making its entries costs more than the meta kernels they save
        self.mode.cache_enabled = False
        self.symbols: dict[int, Any] = {}  # id(expression) -> its torch.SymInt
        self.names: dict[Any, Expr] = {}  # sympy symbol -> expression
        self.hints: dict[Any, int] = {}
        self.pinned: set[Any] = set()
        self.graph: dict[int, Tensor] = {}  # id(fake) -> the graph tensor it holds now
        self.fakes: dict[int, Any] = {}  # graph tensor index -> its fake (one per tensor)
        self.sources: dict[int, STensor] = {}  # id(fake) -> the model's STensor it came from
        self.read: set[int] = set()  # constant fakes already counted as an op's buffers
        self.keep: list[Any] = []  # every fake made or seen (their ids stay theirs)
        self.results: dict[int, STensor] = {}
        self.empties: set[int] = set()  # ids of empty outputs (no node)
        # the record for :class:`_Replay`: graph tensor index -> _Ref (the arguments' tensors as they
        # were at the call, then the nodes made), the nodes, the results and the guards
        self.refs: dict[int, _Ref] = {}
        self.positions: dict[int, int] = {}  # id(argument STensor) -> its first position in the leaves
        for i, x in enumerate(leaves):
            if isinstance(x, STensor):
                self.refs.setdefault(_t(x).index, ("arg", i))
                self.positions.setdefault(id(x), i)
        self.steps: list[_Step] = []
        self.outputs: list[_Output] = []
        self.held: list[Expr] = []  # the guards, in order
        self.replayable = True

    # symbols ---------------------------------------------------------------------------------------
    def size(self, e: Expr) -> Any:
        """A size for PyTorch: an int, or the SymInt of the dimension expression ``e``."""
        e = lin(e)
        if e.is_const:
            return int(e.value)
        if id(e) not in self.symbols:
            m = _torch()
            hint = int(plain(self.tr.sym(e)))
            source = m.Dim(f"d{len(self.symbols)}")
            s = self.env.create_symbol(hint, source, dynamic_dim=m.DimDynamic.DYNAMIC)
            key = ("aten range", id(e))  # shared by the regions (the expression kept alive with it)
            if key not in self.tr.cache:
                self.tr.cache[key] = (e, interval([e], self.tr.box)[id(e)])
            lo, hi = self.tr.cache[key][1]
            # every dimension of a valid network is >= 1: PyTorch may assume it (guards that hold for
            # all sizes >= 1 are then never raised, which is sound as the op's rule asks >= 1)
            self.env.constrain_symbol_range(s, compiler_min=max(int(lo), min(1, hint)), compiler_max=int(hi))
            self.names[s], self.hints[s] = e, hint
            self.symbols[id(e)] = self.env.create_symintnode(s, hint=hint, source=source)
        return self.symbols[id(e)]

    def expr(self, v: Any) -> Expr:
        """The expression of a size PyTorch computed (an int or a SymInt); pinned when untranslatable."""
        if not isinstance(v, torch.SymInt):
            return Const(int(v))
        e = self.env.simplify(v.node.expr)
        if not e.free_symbols <= self.names.keys():  # a size PyTorch knows only from tensor values
            raise _untraceable(self.name, f"a size that depends on tensor values ({e})")
        try:
            return lin(_translate(e, self.names))
        except _Untranslatable:
            self.pinned |= e.free_symbols
            return Const(int(v.node.hint if v.node.hint is not None else e.xreplace(self.hints)))

    # fakes -----------------------------------------------------------------------------------------
    def fake(self, x: Any) -> Any:
        """An argument of the model's call (as :func:`_settle` made it) as PyTorch's fake world sees it."""
        if isinstance(x, STensor):
            t = _t(x)
            if t.index not in self.fakes:
                f = self.empty(t.shape, x.dtype)
                self.fakes[t.index], self.graph[id(f)], self.sources[id(f)] = f, t, x
            return self.fakes[t.index]
        if isinstance(x, _Const):
            return self.empty(x.shape, x.dtype)
        if isinstance(x, SymInt):
            return self.size(x.expr)
        if isinstance(x, slice):  # x[:, :n] with a symbolic n
            return slice(self.fake(x.start), self.fake(x.stop), self.fake(x.step))
        return x

    def empty(self, shape: Any, dtype: torch.dtype) -> Any:
        with self.mode:
            f = torch.empty([self.size(d) for d in shape], dtype=dtype, device="meta")
        self.keep.append(f)
        return f

    # operators -------------------------------------------------------------------------------------
    def emit(self, func: Any, args: Any, kwargs: Any, out: Any) -> None:
        """The nodes of one operator: one per tensor output (the first carries the FLOPs and buffers)."""
        leaves = [a for a in tree_leaves((args, kwargs)) if isinstance(a, torch.Tensor)]
        ins: list[Tensor] = []
        for a in leaves:
            t = self.graph.get(id(a))
            if t is not None and all(t is not u for u in ins):
                ins.append(t)
        outs = [o for o in tree_leaves(out) if isinstance(o, torch.Tensor)]
        m = _torch()
        counter = m.flops.get(func._overloadpacket)
        flops = counter(*args, **kwargs, out_val=out) if counter is not None else 0
        macs = self.halve(flops)
        rets = func._schema.returns
        op = func._schema.name.split("::")[-1]
        for k, o in enumerate(outs):
            alias = (rets[k] if len(rets) == len(outs) else rets[0]).alias_info
            source = self.aliased(func, args, kwargs, alias) if alias is not None else None
            first = self.graph.get(id(source)) if source is not None else None
            order = [first, *(t for t in ins if t is not first)] if first is not None else ins
            view = first is not None
            saves = () if view or not o.is_floating_point() else self.saves(order)
            shape = tuple(self.expr(d) for d in o.shape)
            if any(d.is_const and d.value == 0 for d in shape):  # empty: a placeholder (eval statistics)
                self.empties.add(id(o))
                continue
            sizes: list[Expr] = []
            buffers: list[Expr] = []  # constants read (counted once per call)
            template = self.template((tuple(args), tuple(sorted(kwargs.items()))), order, sizes, buffers)
            scratch = Const(0)
            if k == 0 and not view:  # a kernel may copy a strided input to a contiguous one first
                strided = [
                    t for a in leaves if (t := self.graph.get(id(a))) is not None and self.strided(t, a)
                ]
                scratch = _scratch(op, counter is not None, order, shape) + sum_(t.numel for t in strided)
            y = self.node(
                f"aten_{op}", str(func), order, part=k, shape=shape, macs=macs if k == 0 else Const(0),
                view=view, saves=saves, buffers=sum_(buffers), workspace=scratch,
                args=template, sizes=tuple(sizes), dtype=network_dtype(o.dtype),
            )  # fmt: skip
            self.graph[id(o)] = y
            self.keep.append(o)

    def node(self, label: str, aten: str, inputs: list[Tensor], **attrs: Any) -> Tensor:
        """One catalog ``aten`` node (:func:`_node`), recorded for :class:`_Replay`."""
        refs = tuple(self.refs.get(t.index) for t in inputs)
        y = _node(self.tr, label, aten, inputs, attrs)
        if None in refs:
            self.replayable = False
        self.refs[y.index] = ("node", len(self.steps))
        self.steps.append((label, aten, refs, attrs))  # type: ignore[arg-type]
        return y

    def halve(self, flops: Any) -> Expr:
        """Multiply-adds of ``flops`` (``FlopCounterMode`` counts 2 per multiply-add)."""
        if not isinstance(flops, torch.SymInt):
            return Const(int(flops) // 2)
        half = _torch().sympy.expand(self.env.simplify(flops.node.expr) / 2)
        try:
            return lin(_translate(half, self.names))
        except _Untranslatable:
            return self.expr(flops) // 2

    def saves(self, order: list[Tensor]) -> tuple[str, ...]:
        """What the op keeps for backward, conservatively: its non-parameter inputs and its output."""
        net = self.tr.net
        kept = [f"in{k}" for k, t in enumerate(order) if net.nodes[net.producer[t.index]].op != "parameter"]
        return (*kept, "out")

    @staticmethod
    def aliased(func: Any, args: Any, kwargs: Any, alias: Any) -> Any:
        """The argument a view's or in-place op's output aliases (by the schema's alias sets)."""
        for i, arg in enumerate(func._schema.arguments):
            if arg.alias_info is not None and set(arg.alias_info.before_set) & set(alias.before_set):
                return args[i] if i < len(args) else kwargs.get(arg.name)
        return None

    def template(self, v: Any, ins: list[Tensor], sizes: list[Expr], buffers: list[Expr]) -> Any:
        """The op's arguments for the materializer: tensors and sizes as :class:`AtenArg` placeholders."""
        if isinstance(v, torch.Tensor):
            t = self.graph.get(id(v))
            if t is not None:
                return AtenArg("in", next(k for k, u in enumerate(ins) if u is t))
            shape = [self.expr(d) for d in v.shape]
            if id(v) not in self.read:  # a constant the op reads (a running statistic): kept as a buffer
                self.read.add(id(v))
                self.keep.append(v)
                buffers.append(Const(1) if not shape else lin(_prod(shape)))
            sizes.extend(shape)
            return AtenArg("const", len(sizes) - len(shape), str(v.dtype).removeprefix("torch."), len(shape))
        if isinstance(v, torch.SymInt):
            sizes.append(self.expr(v))
            return AtenArg("size", len(sizes) - 1)
        if isinstance(v, torch.SymFloat):
            return float(v)
        if isinstance(v, torch.SymBool):
            return bool(v)
        if isinstance(v, torch.device):
            return None  # the materialized op runs where its inputs are
        if isinstance(v, tuple | list):
            return tuple(self.template(u, ins, sizes, buffers) for u in v)
        return v

    # results and guards ----------------------------------------------------------------------------
    def result(self, v: Any) -> Any:
        """A value the call returns, for the model's code: tensors as STensors, sizes symbolic."""
        if isinstance(v, torch.Tensor):
            t = self.graph.get(id(v))
            if id(v) in self.empties:  # PyTorch makes it; a model with an empty tensor is invalid
                raise ValueError(f"{self.name} makes an empty tensor of shape {tuple(v.shape)} here")
            if t is None:
                raise TraceError(
                    f"{self.name} returns a tensor that depends on no input of the model (a constant; "
                    f"not supported): {user_line()}"
                )
            source = self.sources.get(id(v))
            if source is not None:  # the input itself (``contiguous``) or updated in place (``add_``)
                source._t = t
                pos, ref = self.positions.get(id(source)), self.refs.get(t.index)
                self.record(("source", pos, ref), ok=pos is not None and ref is not None)
                return source
            if t.index not in self.results:
                self.results[t.index] = self.stensor(t, v)
            st = self.results[t.index]
            ref, shown = self.refs.get(t.index), self.refs.get(_t(st).index)
            self.record(("tensor", ref, shown, st.dtype), ok=ref is not None and shown is not None)
            return st
        if isinstance(v, torch.SymInt):
            e = self.expr(v)
            self.record(("size", e))
            return self.tr.sym(e)
        if isinstance(v, torch.SymBool | torch.SymFloat):
            v = bool(v) if isinstance(v, torch.SymBool) else float(v)
        self.record(("value", v), ok=type(v) in _PLAIN)
        return v

    def record(self, output: _Output, ok: bool = True) -> None:
        """Note one result for :class:`_Replay`; one it cannot give again (not ``ok``: a tensor of no
        known reference, a value that may be mutable) makes the call not replayable."""
        self.replayable &= ok
        self.outputs.append(output)

    def stensor(self, t: Tensor, v: Any) -> STensor:
        """The model's STensor of graph tensor ``t`` (fake ``v``); a strided view (see
        :meth:`strided_view`) is counted as a copy, its storage held while the model holds the result."""
        y = t
        if self.strided_view(t, v):
            y = self.node(
                "aten_clone", "aten.clone.default", [t], part=0, shape=t.shape, macs=Const(0), view=False,
                saves=(), buffers=Const(0), workspace=Const(0), args=((AtenArg("in", 0),), ()), sizes=(),
            )  # fmt: skip
        return _stensor(self.tr, t, y, v.dtype)

    def strided(self, t: Tensor, v: Any) -> bool:
        """Whether graph tensor ``t`` (fake ``v``) may be strided in PyTorch: ``v`` is, or a handler's
        ``permute`` made it (a strided view in a traced model)."""
        net = self.tr.net
        return _strided(v) or net.nodes[net.producer[t.index]].op == "permute"

    def strided_view(self, t: Tensor, v: Any) -> bool:
        """Whether ``v`` (of graph tensor ``t``) is a view that is not contiguous. The handlers'
        reshapes and flattens are views, but PyTorch copies a strided tensor there: such a result is
        counted as a copy made here, its source held as long as the view is (an overestimate where the
        model never copies it)."""
        net = self.tr.net
        node = net.nodes[net.producer[t.index]]
        return node.op == "aten" and bool(node.attrs["view"]) and _strided(v)

    def guards(self) -> None:
        """The ShapeEnv's guards (and runtime asserts) as guards of the trace; pinned symbols last."""
        conds = [g.expr for g in self.env.guards]
        conds += [ra.expr for ras in self.env.deferred_runtime_asserts.values() for ra in ras]
        for c in conds:
            try:
                self.held.append(_translate(c, self.names))
            except _Untranslatable:
                self.pinned |= c.free_symbols
        self.held += [eq(self.names[s], Const(self.hints[s])) for s in self.pinned if s in self.names]
        for g in self.held:
            self.tr.guard(g, True)


def _scratch(op: str, counted: bool, inputs: list[Tensor], shape: tuple[Expr, ...]) -> Expr:
    """Elements of the transient copies a CPU kernel makes besides its output (allocator traces on
    this CPU): a counted kernel (convolution, matmul) reorders its inputs into blocked layouts; a
    resampling kernel (``upsample_*``, which PyTorch's decomposition turns into ``_unsafe_index``)
    works on a copy of its input and of its output."""
    ins = sum_(t.numel for t in inputs)
    if op.startswith(("upsample", "_upsample", "_unsafe_index")):
        return ins + _prod(list(shape))
    return ins if counted else Const(0)


def _strided(v: Any) -> bool:
    """Whether the fake tensor ``v`` may not be contiguous: strides other than its shape's, compared
    symbolically (no guard; forms that are equal but differ count as strided, conservatively)."""
    sp = _torch().sympy
    expected: Any = sp.Integer(1)
    for size, stride in zip(reversed(v.shape), reversed(v.stride())):
        size_e, stride_e = sp.sympify(_sym(size)), sp.sympify(_sym(stride))
        if size_e != 1 and sp.expand(stride_e - expected) != 0:
            return True
        expected = expected * size_e
    return False


def _sym(x: Any) -> Any:
    """The sympy expression of a size or stride (an int or a SymInt)."""
    return x.node.expr if isinstance(x, torch.SymInt) else x


def _prod(shape: list[Expr]) -> Expr:
    out: Expr = Const(1)
    for d in shape:
        out = out * d
    return out


def _untraceable(name: str, why: str) -> TraceError:
    return TraceError(
        f"{name}: PyTorch's symbolic shapes cannot follow it ({why}): {user_line()}; a size or a "
        f"control-flow decision that depends on tensor values cannot be traced: compute it from sizes "
        f"(x.shape) instead, or move it out of the model"
    )


def resolve(name: str, func: Any) -> Any:
    """The callable a trace intercepted: ``func`` (from ``__torch_function__``), else the tensor method
    or ``torch`` / ``torch.nn.functional`` function of that name."""
    if func is not None:
        return func
    for where in (torch.Tensor, torch, F):
        fn = getattr(where, name, None)
        if callable(fn):
            return fn
    return None


def fallback(tr: _Trace, name: str, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """``func(*args, **kwargs)`` of the model's code, traced at the ATen level (module docstring); a
    call the trace made before with the same arguments (:func:`_key`) is replayed (:class:`_Replay`)."""
    fn = resolve(name, func)
    if fn is None:
        raise TraceError(f"tensor function or method {name!r} is not supported: {user_line()}")
    m = _torch()
    with torch._C.DisableTorchFunction():
        leaves, spec = tree_flatten((tuple(args), dict(kwargs)))
        leaves = [_settle(tr, name, x) for x in leaves]
        key = _key(tr, name, fn, spec, leaves)
        known = tr.replays.get(key) if key is not None else None
        if known is not None:
            return known.run(tr, leaves)
        call = _Call(tr, name, leaves)
        fargs, fkwargs = tree_unflatten([call.fake(x) for x in leaves], spec)
        try:
            with m.python_dispatcher(), call.mode, m.Record(call):
                out = fn(*fargs, **fkwargs)
            result = tree_map(call.result, out)
        except m.untraceable as err:
            raise _untraceable(name, f"{type(err).__name__}: {str(err).splitlines()[0][:160]}") from None
        finally:
            call.guards()
    if key is not None and call.replayable:
        tr.replays[key] = _Replay(
            tuple(call.steps), tree_structure(out), tuple(call.outputs), tuple(call.held)
        )
    return result


# ------------------------------------------------------------------------------------------------
# replaying a call

_Ref = tuple[str, int]  # ("arg", position of the argument in the call's leaves) or ("node", step)
_Step = tuple[str, str, tuple[_Ref, ...], dict[str, Any]]  # a node: label, ATen op, inputs, attributes
_Output = tuple[Any, ...]  # a result: ("source", position, ref), ("tensor", ref, ref, dtype), ...
_PLAIN = (
    type(None),
    bool,
    int,
    float,
    str,
    type(...),
    torch.dtype,
    torch.device,
    torch.layout,
    torch.memory_format,
)


@dataclasses.dataclass(frozen=True)
class _Const:
    """A constant tensor argument (a buffer, a tensor made in forward): its symbolic shape and dtype."""

    shape: tuple[Any, ...]
    dtype: torch.dtype


def _settle(tr: _Trace, name: str, x: Any) -> Any:
    """An argument of the call with what the trace decides about it done: a parameter as its node
    (counted once), a constant tensor as :class:`_Const`, a float or choice pinned."""
    if isinstance(x, nn.Parameter):
        return tr.tensor(x, name)
    if isinstance(x, STensor):
        return x
    if isinstance(x, torch.Tensor):
        shape = tr.shape_of(x)
        if shape is None and x.dim() > 0:
            raise TraceError(
                f"{name}: a constant tensor of shape {tuple(x.shape)} (a buffer, or made in forward) "
                f"whose dependence on the configuration dnnsat cannot tell: {user_line()}; make it with "
                f"torch.empty/zeros/ones/full(shape...) from the configuration's values, or as a parameter"
            )
        return _Const(tuple(shape or ()), x.dtype)
    if isinstance(x, slice):
        return slice(_settle(tr, name, x.start), _settle(tr, name, x.stop), _settle(tr, name, x.step))
    if isinstance(x, SymFloat | SymStr):
        return fixed(x)
    return x


def _key(tr: _Trace, name: str, fn: Any, spec: Any, leaves: list[Any]) -> tuple[Any, ...] | None:
    """What a fallback call's nodes, results and guards depend on, within one trace (one
    configuration): the callable, the arguments' structure, and of each argument leaf: a tensor's
    dimension expressions, dtype, first position (aliasing) and whether a parameter or a ``permute``
    made it (what the call's memory rules ask); a size's expression; a plain value itself; and
    PyTorch's default dtype and autocast state. ``None`` (not replayable) for any other leaf."""
    first: dict[int, int] = {}  # graph tensor index -> its first position

    def dims(shape: tuple[Any, ...]) -> tuple[int, ...]:  # expressions by identity: they are interned
        if not all(isinstance(d, Expr) or type(d) is int for d in shape):
            raise _Unkeyable
        return tuple(id(lin(d)) for d in shape)

    def part(x: Any, i: int) -> Any:
        if isinstance(x, STensor):
            t = _t(x)
            made_by = tr.net.nodes[tr.net.producer[t.index]].op
            kind = made_by if made_by in ("parameter", "permute") else ""
            return ("tensor", first.setdefault(t.index, i), dims(t.shape), x.dtype, kind)
        if isinstance(x, _Const):
            return ("const", dims(x.shape), x.dtype)
        if isinstance(x, SymInt):
            return ("size", id(lin(x.expr)))
        if isinstance(x, slice):
            return ("slice", part(x.start, i), part(x.stop, i), part(x.step, i))
        if type(x) in _PLAIN:
            return (type(x), repr(x) if type(x) is float else x)  # repr: 0.0 and -0.0 differ
        raise _Unkeyable

    try:
        parts = tuple(part(x, i) for i, x in enumerate(leaves))
    except _Unkeyable:
        return None
    modes = tuple((torch.is_autocast_enabled(d), torch.get_autocast_dtype(d)) for d in ("cpu", "cuda"))
    return (name, fn, spec, parts, torch.get_default_dtype(), modes)


class _Unkeyable(Exception):
    """An argument :func:`_key` cannot tell apart from others by value."""


@dataclasses.dataclass(frozen=True)
class _Replay:
    """A fallback call's record: the nodes it made, its results and its guards, made again for a call
    with the same :func:`_key` (of the same trace) on that call's own arguments, without running
    PyTorch again (the same :meth:`_Call.node`, :func:`_stensor` and guard calls, in the same order)."""

    steps: tuple[_Step, ...]
    spec: Any  # the results' pytree structure
    outputs: tuple[_Output, ...]
    guards: tuple[Expr, ...]

    def run(self, tr: _Trace, leaves: list[Any]) -> Any:
        args = {i: _t(x) for i, x in enumerate(leaves) if isinstance(x, STensor)}  # as at the call
        made: list[Tensor] = []

        def get(ref: _Ref) -> Tensor:
            return args[ref[1]] if ref[0] == "arg" else made[ref[1]]

        for label, aten, refs, attrs in self.steps:
            made.append(_node(tr, label, aten, [get(r) for r in refs], attrs))
        results: dict[_Ref, STensor] = {}
        out: list[Any] = []
        for kind, *rest in self.outputs:
            if kind == "source":
                source = leaves[rest[0]]
                source._t = get(rest[1])
                out.append(source)
            elif kind == "tensor":
                ref, shown, dtype = rest
                if ref not in results:
                    results[ref] = _stensor(tr, get(ref), get(shown), dtype)
                out.append(results[ref])
            elif kind == "size":
                out.append(tr.sym(rest[0]))
            else:
                out.append(rest[0])
        for g in self.guards:
            tr.guard(g, True)
        return tree_unflatten(out, self.spec)


def _node(tr: _Trace, label: str, aten: str, inputs: list[Tensor], attrs: dict[str, Any]) -> Tensor:
    """One catalog ``aten`` node, named after the op and the current module."""
    return tr.net.apply("aten", inputs, name=tr._name(label, tr.where()), aten=aten, **attrs)


def _stensor(tr: _Trace, t: Tensor, y: Tensor, dtype: torch.dtype) -> STensor:
    """The model's STensor of ``y``, graph tensor ``t`` or its copy (whose source is held as long)."""
    st = STensor(tr, y, dtype)
    if y is not t:
        weakref.finalize(st, tr._freed, t.index)
    return st
