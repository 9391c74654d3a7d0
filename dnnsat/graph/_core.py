"""The core of the network builder: its state, applying a catalog operator, inputs, gated branches.

:class:`_NetworkCore` is the base of every op-method group (``_ops_*.py``) and of :class:`Network`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

from ..expr import Const, Expr, ExprLike, as_expr
from ._args import _int_expr
from ._catalog import CATALOG, Attrs, Check, OpInfo, Shape, shared_use
from ._gates import _merge_dim
from ._tensor import GraphError, Node, Tensor

if TYPE_CHECKING:
    from ._network import Network, _RepeatBlock


@dataclass
class _Built:
    """Cached concrete evaluator for a network (used by the PyTorch bridge)."""

    fn: Callable[[Mapping[str, Any]], tuple[Any, ...]]
    layout: list[tuple[str, Any]] = field(default_factory=list)


def _attrs_key(value: Any) -> Any:
    """A hashable key of attribute values (expressions by identity: they are interned)."""
    if isinstance(value, Expr):
        return ("e", id(value))
    if isinstance(value, tuple | list):
        return ("t", tuple(_attrs_key(v) for v in value))
    if isinstance(value, Mapping):
        return ("d", tuple((k, _attrs_key(v)) for k, v in sorted(value.items())))
    return ("v", type(value).__name__, value)


class _NetworkCore:
    """Builder state and the primitives every operator method uses (see :class:`Network`)."""

    def __init__(self, name: str = "network", infer_cache: dict[Any, OpInfo] | None = None) -> None:
        self.name = name
        # ``infer_cache``: OpInfo by (op, input shapes, attributes), shared by networks built from the
        # same expressions (``dnnsat.torch.from_torch`` builds one per control-flow region)
        self._infer_cache = infer_cache
        self.nodes: list[Node] = []
        self.tensors: list[Tensor] = []
        self.producer: list[int] = []  # tensor index -> node index
        self.inputs: list[Tensor] = []
        self.outputs: list[Tensor] = []
        self.extra_checks: list[tuple[str, Check]] = []  # (label, check) not tied to a catalog op
        self.repeat_blocks: list[_RepeatBlock] = []  # shape rules of repeat bodies, in build order
        # (tensor index, node index, condition): the model's Python code holds the tensor (a local
        # variable of a traced ``forward``) until that node has run, where the condition holds; the
        # memory model counts it as a use there (``dnnsat.torch.from_torch`` fills it, DSL networks not)
        self.held: list[tuple[int, int, Expr]] = []
        # ``permute`` ops are a torch model's transposes, strided views (``dnnsat.torch.from_torch``), not
        # the contiguous copies a DSL network's make
        self.permute_views = False
        self._gate: Expr = Const(True)
        self._counts: dict[str, int] = {}
        self._built: _Built | None = None
        self.check_sources: dict[str, list[str]] = {}  # constraint name -> ops it covers (see checks())

    # -- core -------------------------------------------------------------------------------------
    @property
    def last(self) -> Tensor:
        """The most recently produced tensor."""
        if not self.tensors:
            raise GraphError("the network has no tensor yet: start with net.input(shape)")
        return self.tensors[-1]

    def _new_tensor(self, shape: Shape, dtype: str, node_index: int) -> Tensor:
        t = Tensor(cast("Network", self), len(self.tensors), tuple(shape), dtype)
        self.tensors.append(t)
        self.producer.append(node_index)
        return t

    def __getstate__(self) -> dict[str, Any]:
        """Pickled without the build-time caches (the shared infer cache, the compiled evaluator)."""
        state = dict(self.__dict__)
        state["_infer_cache"] = None
        state["_built"] = None
        return state

    def _label(self, op: str, name: str | None) -> str:
        return name or f"{op}#{len(self.nodes)}"

    def _check_tensor(self, x: Any, where_: str) -> Tensor:
        if not isinstance(x, Tensor):
            raise GraphError(f"{where_}: expected a Tensor of this network, got {type(x).__name__}")
        if x.net is not self:
            raise GraphError(f"{where_}: the tensor belongs to another Network")
        return x

    def apply(self, op: str, inputs: Sequence[Tensor], name: str | None = None, **attrs: Any) -> Tensor:
        """Apply catalog operator ``op`` to ``inputs`` with already normalised ``attrs``."""
        if op not in CATALOG:
            raise GraphError(f"unknown operator {op!r}; the catalog has {sorted(CATALOG)}")
        entry = CATALOG[op]
        label = self._label(op, name)
        if entry.arity is not None and len(inputs) != entry.arity:
            raise GraphError(f"{label}: takes {entry.arity} input tensor(s), got {len(inputs)}")
        ins = [self._check_tensor(x, label) for x in inputs]
        a = Attrs(attrs)
        cache = self._infer_cache
        key = (
            (op, tuple(tuple(map(id, x.shape)) for x in ins), _attrs_key(attrs))
            if cache is not None
            else None
        )
        info = cache.get(key) if cache is not None else None
        if info is None:
            try:
                info = entry.infer([x.shape for x in ins], a)
            except GraphError:
                raise
            except (IndexError, KeyError, AttributeError, TypeError, ValueError) as err:
                raise GraphError(
                    f"{label}: cannot apply to inputs of shapes {[x.shape for x in ins]}: {err}"
                ) from err
            if "shared" in a:
                info = shared_use(info, as_expr(a.shared))
            if cache is not None:
                cache[key] = info
        index = len(self.nodes)
        dtype = _out_dtype(op, attrs, ins)
        out = self._new_tensor(info.outputs[0], dtype, index)
        node = Node(index, op, label, tuple(x.index for x in ins), out.index, a, self._gate, info)
        self.nodes.append(node)
        self._built = None
        for check in info.checks:
            self._static_check(label, check, self._gate)
        return out

    def _static_check(self, label: str, check: Check, gate: Expr) -> None:
        if check.expr.is_const and not check.expr.value and gate.is_const and gate.value:
            raise GraphError(f"{label}: rule '{check.rule}' can never hold")

    # -- sources ----------------------------------------------------------------------------------
    def input(self, shape: Sequence[ExprLike], dtype: str = "float32", name: str | None = None) -> Tensor:
        """A network input of the given shape (``dtype`` ``"float32"`` or ``"int64"`` for token ids)."""
        if dtype not in ("float32", "int64"):
            raise GraphError(f"input: dtype must be 'float32' or 'int64', got {dtype!r}")
        shp = tuple(_int_expr(d, "shape", self._label("input", name), low=1) for d in shape)
        t = self.apply("input", [], name=name, shape=shp, dtype=dtype)
        self.inputs.append(t)
        return t

    def share(self, t: Tensor, elements: ExprLike, pairs: tuple[tuple[str, str, str], ...]) -> None:
        """Mark the op that produced ``t`` as using parameters of earlier ops (a module called again, a
        weight tied to another module's): ``elements`` of them in all, counted there; ``pairs``:
        ``(its name, owner's path, owner's name)`` per shared parameter tensor, the owner being the
        first op whose label ends with that module path (``embedding#1 shared``)."""
        node = self.nodes[self.producer[t.index]]
        if node.info is None:
            raise GraphError(f"{node.label}: a select has no parameters to share")
        node.attrs = Attrs({**node.attrs, "shared": as_expr(elements), "shared_names": pairs})
        node.info = shared_use(node.info, as_expr(elements))
        self._built = None

    def parameter(self, shape: Sequence[ExprLike], name: str | None = None) -> Tensor:
        """A learned tensor of the given shape (counted in params)."""
        where_ = self._label("parameter", name)
        shp = tuple(_int_expr(d, "shape", where_, low=1) for d in shape)
        return self.apply("parameter", [], name=name, shape=shp)

    # -- control: branches and op choices ---------------------------------------------------------
    def _select(
        self, cases: list[tuple[Expr, Tensor]], same_shape: bool = False, label: str = "select"
    ) -> Tensor:
        """Merge branch outputs: the first case whose condition holds (last case is the fallback)."""
        ranks = {t.ndim for _, t in cases}
        if len(ranks) != 1:
            raise GraphError(f"{label}: branches produce tensors of different ranks {sorted(ranks)}")
        if len(cases) == 1:
            return cases[0][1]
        shape = list(cases[-1][1].shape)
        for cond, t in reversed(cases[:-1]):
            shape = [_merge_dim(cond, d, s) for d, s in zip(t.shape, shape)]
        index = len(self.nodes)
        out = self._new_tensor(tuple(shape), cases[0][1].dtype, index)
        node = Node(
            index,
            "select",
            f"select#{index}",
            tuple(t.index for _, t in cases),
            out.index,
            Attrs(),
            self._gate,
            None,
            tuple((c, t.index) for c, t in cases),
            same_shape,
        )
        self.nodes.append(node)
        return out

    def _gated(self, cond: Expr, fn: Callable[[], Tensor]) -> Tensor:
        outer = self._gate
        self._gate = outer & cond
        try:
            return fn()
        finally:
            self._gate = outer

    def branch(self, cases: Sequence[tuple[ExprLike, Callable[..., Tensor]]], *args: Tensor) -> Tensor:
        """Alternative sub-networks: ``[(condition, body), ...]``; the first true condition is taken.

        Each body is called with ``*args``; costs of a branch count only when its condition holds
        (and no earlier one does). If no condition holds, the configuration is invalid.
        """
        return self._branch(cases, args, False)

    def _branch(
        self,
        cases: Sequence[tuple[ExprLike, Callable[..., Tensor]]],
        args: Sequence[Tensor],
        exhaustive: bool,
        exclusive: bool = False,
    ) -> Tensor:
        label = f"branch#{len(self.nodes)}"
        if not cases:
            raise GraphError(f"{label}: needs at least one case")
        outs: list[tuple[Expr, Tensor]] = []
        taken: Expr = Const(False)
        for cond_like, body in cases:
            cond = as_expr(cond_like)
            if cond.sort != "bool":
                raise GraphError(f"{label}: conditions must be boolean expressions, got {cond}")
            active = cond if exclusive else cond & ~taken
            if active.is_const and not active.value:
                continue
            y = self._gated(active, lambda body=body: body(*args))  # type: ignore[misc]
            outs.append((active, self._check_tensor(y, label)))
            taken = taken | cond
        if not outs:
            raise GraphError(f"{label}: no case can ever be taken")
        if not exhaustive and not (taken.is_const and taken.value):
            self.extra_checks.append((label, Check("some case applies", (~self._gate) | taken)))
        return self._select(outs, label=label)

    def choose(self, var: Expr, options: Mapping[Any, Callable[..., Tensor]], *args: Tensor) -> Tensor:
        """Categorical op choice: ``{value: body}``, ``body(*args)`` used when ``var == value``."""
        if not isinstance(var, Expr):
            if var in options:
                return options[var](*args)
            raise GraphError(f"choose: {var!r} is not one of the options {list(options)}")
        labels = var.payload[1] if var.op == "var" else None
        exhaustive = labels is not None and set(labels) <= set(options)  # every label has a branch
        cases = [(var == value, body) for value, body in options.items()]
        return self._branch(cases, args, exhaustive, exclusive=True)  # distinct values: exclusive cases

    def _per_value(
        self, args: Mapping[str, tuple[Any, Sequence[Any]]], make: Callable[..., Tensor]
    ) -> Tensor:
        """``make(**values)``; an argument given as an expression (a boolean condition, a variable of a
        ``Categorical([False, True])``, an integer variable with its ``domain``) is a hyperparameter:
        the op is made once per value of ``domain`` (a :meth:`branch`), each taken where the
        expression has that value. Plain values go to ``make`` as they are."""
        values = {k: v for k, (v, _) in args.items()}
        for key, (value, domain) in args.items():
            if isinstance(value, Expr) and not value.is_const:
                labels = value.payload[1] if value.op == "var" else None
                flag = value.sort == "bool" or (labels is not None and set(labels) <= {False, True})

                def case(v: Any, key: str = key, domain: Sequence[Any] = domain) -> Callable[[], Tensor]:
                    return lambda: self._per_value({**args, key: (v, domain)}, make)

                conds = [(value if v else ~value) if value.sort == "bool" else value == v for v in domain]
                return self._branch([(c, case(v)) for c, v in zip(conds, domain)], [], flag, exclusive=True)
        return make(**{k: v.value if isinstance(v, Expr) else v for k, v in values.items()})


_FLOAT_OUT = frozenset({"embedding"})  # ops with an index input and a floating output
_WIDTH = ("bool", "int64", "float32")  # type promotion: the widest input's dtype


def _out_dtype(op: str, attrs: dict[str, Any], ins: Sequence[Tensor]) -> str:
    """The dtype of an op's output: an input's, a constant's, a cast's or an ATen op's declared one
    (``float32`` by default); an op of tensors that of its widest input (as PyTorch promotes: shape ops
    keep int64 indices int64), except lookups, whose output is ``float32``."""
    if op in ("input", "constant", "cast") or (op == "aten" and "dtype" in attrs):
        return str(attrs.get("dtype", "float32"))
    if not ins or op in _FLOAT_OUT:
        return "float32"
    return max((x.dtype for x in ins), key=_WIDTH.index)
