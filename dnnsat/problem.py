"""Problem = Space + constraints (+ named costs): the object every dnnsat operation takes."""

from __future__ import annotations

import collections
import dataclasses
import hashlib
import itertools
import logging
import math
import pickle
import threading
import time
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from .expr import (
    Expr,
    as_expr,
    compile_interval,
    compile_scalar,
    compile_vectorized,
    digest,
    interval,
    label_index,
    topological,
)
from .solver._boxes import Domain
from .solver._engine import BATCH, Decomposition, Engine, index_distance, interval_bound
from .space import Space, SpaceError
from .units import cost_kind, format_quantity

if TYPE_CHECKING:
    from ._guard import Guard

__all__ = [
    "Problem",
    "Constraint",
    "Violation",
    "Verdict",
    "Estimate",
    "Explanation",
    "Optimum",
    "InfeasibleSpaceError",
    "OpaqueConstraintWarning",
]

logger = logging.getLogger("dnnsat.problem")
#: boxes of :meth:`Problem.sample`'s decomposition (its default ``max_boxes``), kept by the problem
SAMPLE_BOXES = 20_000
#: :meth:`Problem.sample` draws up to ``max(REJECTION_DRAWS, 8 n)`` points from the whole space before it
#: decomposes (a few thousand point checks: about 15 ms on a 13.6k-node memory peak)
REJECTION_DRAWS = 4096

BATCH_ROWS = 4096  # rows per vectorized chunk in check_batch
ENUMERATE_FREE = 16_384  # feasible_values enumerates every completion when there are at most this many
FLOAT_TOL = (
    1e-9  # feasible_intervals: relative width (of the parameter's range, in its scale) of undecided ends
)
FLOAT_STEPS = 4000  # feasible_intervals: at most this many sub-intervals are examined per query


class InfeasibleSpaceError(RuntimeError):
    """No configuration satisfies the constraints; ``core`` names constraints that conflict."""

    def __init__(self, message: str, core: list[str] | None = None) -> None:
        super().__init__(message)
        self.core = list(core or [])


class OpaqueConstraintWarning(UserWarning):
    """A Python predicate constraint: checked per configuration only, never used for pruning bounds."""


@dataclass(frozen=True)
class Constraint:
    """A named requirement. ``lhs sense limit`` when it is a comparison with a constant."""

    name: str
    expr: Expr | None
    lhs: Expr | None = None
    sense: str | None = None  # "<=", "<", ">=", ">", "==" or None
    limit: float | None = None
    predicate: Callable[[dict[str, Any]], bool] | None = None
    uses: tuple[str, ...] | None = None  # parameters a predicate reads (None: possibly all of them)

    @property
    def opaque(self) -> bool:
        return self.predicate is not None

    def __str__(self) -> str:
        if self.expr is None:
            return f"{self.name}: <python predicate>"
        size = len(topological([self.expr]))
        if size > 200:  # printed as a tree, a large shared DAG would be unreadable (or exponential)
            lhs = f"<{self.name} cost, {size} expression nodes>"
            limit = _fmt(self.limit, self.name)
            return f"{self.name}: {lhs} {self.sense} {limit}" if self.limit is not None else lhs
        return f"{self.name}: {self.expr}"


@dataclass(frozen=True)
class Violation:
    """A violated constraint: ``value`` (of its left-hand side) against ``limit``, over by ``excess``."""

    name: str
    value: float | None
    limit: float | None
    excess: float | None

    def __str__(self) -> str:
        if self.value is None:
            return f"{self.name} is violated"
        rel = f" ({self.excess / abs(self.limit):+.1%})" if self.limit and self.excess is not None else ""
        value, limit, excess = (_fmt(x, self.name) for x in (self.value, self.limit, self.excess))
        return f"{self.name} = {value} exceeds the limit {limit} by {excess}{rel}"


@dataclass(frozen=True)
class Verdict:
    feasible: bool
    violations: list[Violation]
    costs: dict[str, float]

    def __bool__(self) -> bool:
        return self.feasible


@dataclass(frozen=True)
class Estimate:
    """An estimated count with a 95 % confidence interval (``low == high == value`` when exact)."""

    value: float
    low: float
    high: float
    exact: bool = False


@dataclass(frozen=True)
class Explanation:
    """Why a config is infeasible: ``core`` alone admits no feasible completion."""

    core: dict[str, Any]
    constraints: list[str]
    sentence: str

    def __str__(self) -> str:
        return self.sentence


@dataclass(frozen=True)
class Optimum:
    config: dict[str, Any]
    value: float
    proven: bool = True


@dataclass
class _Compiled:
    domain: Domain
    engine: Engine
    scalar: Callable[[Mapping[str, Any]], tuple[Any, ...]]  # constraints then costs then lhs
    n_constraints: int
    vector: Callable[[Mapping[str, Any]], tuple[Any, ...]] | None
    lhs_slots: list[int | None] = field(default_factory=list)
    #: fast path of single checks (spaces without conditions): user value -> encoded value per param
    tables: dict[str, dict[Any, Any]] | None = None
    defaults: dict[str, Any] = field(default_factory=dict)
    needed: set[str] = field(default_factory=set)
    #: engines that also search parameters no constraint reads (objectives of maximize/minimize)
    extra_engines: dict[frozenset[str], Engine] = field(default_factory=dict)
    always_feasible: bool | None = None  # cached answer of Problem.always_feasible
    #: the symbolic constraints alone (no costs): ``Problem.satisfied``, compiled on first use
    holds: Callable[[Mapping[str, Any]], tuple[Any, ...]] | None = None
    #: ``Problem.sample``'s pool per ``max_boxes``: (lo, hi, undecided) boxes of the feasible set. A
    #: property of the problem (not of a seed or a configuration), so later samples only draw from it.
    pools: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]] = field(default_factory=dict)


def _split_comparison(expr: Expr) -> tuple[Expr | None, str | None, float | None]:
    """``lhs <= c`` style constraints: (lhs, sense, limit); else (None, None, None)."""
    flip = {"<=": ">=", "<": ">", "==": "=="}
    sense = {"le": "<=", "lt": "<", "eq": "=="}.get(expr.op)
    if sense is None:
        return None, None, None
    a, b = expr.args
    if b.is_const and not a.is_const:
        return a, sense, float(b.value)
    if a.is_const and not b.is_const:
        return b, flip[sense], float(a.value)
    return None, None, None


def _proved(status: np.ndarray, operation: str) -> np.ndarray:
    """Roots of :meth:`Engine.exists` proved feasible (a witness found).

    A root the engine leaves undecided within its box budget (status -1) is not reported as feasible:
    a value a sampler is offered must have a feasible completion. Such roots are logged; prune keeps
    them (it only removes what is proved infeasible).
    """
    undecided = int((status == -1).sum())
    if undecided:
        logger.warning(
            "%s: %d box(es) undecided within the engine's box budget are treated as infeasible",
            operation,
            undecided,
        )
    return status == 1


class Problem:
    """A search space with constraints and named costs.

    Constraints are boolean :class:`~dnnsat.expr.Expr` over ``space.vars`` (exact, used for pruning)
    or Python predicates over a config dict (opaque: checked per configuration only). With ``model``
    (a function of ``space.vars`` returning a symbolic network) and ``budget``, the network's costs and
    validity rules are added automatically. Every operation is exact unless its name says estimate,
    and deterministic for a given seed.
    """

    #: Z3 time limit per decision (ms). A timeout answers "unknown", which never removes a value.
    z3_timeout_ms: int = 2000

    def __init__(self, space: Space, model: Callable[..., Any] | None = None, budget: Any = None) -> None:
        if not isinstance(space, Space):
            raise TypeError(f"Problem takes a dnnsat.Space, got {type(space).__name__}")
        self.space = space
        self.constraints: list[Constraint] = []
        self.cost_exprs: dict[str, Expr] = {}
        self._compiled: _Compiled | None = None
        self._lock = threading.RLock()
        self.network: Any = None
        if model is not None or budget is not None:
            from .cost import attach

            attach(self, model, budget)

    # -- pickling -----------------------------------------------------------------------------------
    def __getstate__(self) -> dict[str, Any]:
        for c in self.constraints:
            if c.predicate is not None:
                try:
                    pickle.dumps(c.predicate)
                except Exception as err:
                    raise TypeError(
                        f"constraint {c.name!r} is a Python predicate that cannot be pickled ({err}); define "
                        "it as a module-level function (not a lambda or a local one) to pickle the Problem"
                    ) from None
        state = dict(self.__dict__)
        state["_compiled"] = None  # generated code and solver state are rebuilt on first use
        del state["_lock"]
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.RLock()

    # -- building ---------------------------------------------------------------------------------
    def require(
        self, constraint: Any, name: str | None = None, *, uses: Iterable[str] | None = None
    ) -> Problem:
        """Add a constraint: a boolean expression (``2 * v.b * v.w <= 1e9``) or a predicate ``f(config)``.

        A predicate is evaluated on real configurations over every parameter it may read: all of them,
        unless ``uses`` names the ones it reads (smaller searches; reading another one is an error).
        Returns the problem, so calls chain. Names must be unique (default ``c0``, ``c1``, ...).
        """
        name = name or f"c{len(self.constraints)}"
        if any(c.name == name for c in self.constraints):
            raise ValueError(f"a constraint named {name!r} exists already; pass another name=")
        if callable(constraint) and not isinstance(constraint, Expr):
            declared = (
                None if uses is None else tuple(dict.fromkeys([uses] if isinstance(uses, str) else uses))
            )
            unknown = sorted(set(declared or ()) - set(self.space))
            if unknown:
                raise SpaceError(
                    f"constraint {name!r}: uses={unknown} are not parameters of the space {list(self.space)}"
                )
            continuous = sorted(n for n in declared or () if not self.space[n].is_finite)
            if continuous:
                raise SpaceError(
                    f"constraint {name!r}: a Python predicate cannot read the continuous parameter(s) "
                    f"{continuous} in searches; give them a step (Float(..., step=...)) or write the "
                    "constraint as an expression over space.vars"
                )
            warnings.warn(
                f"constraint {name!r} is a Python predicate: dnnsat checks it per configuration but cannot "
                "use it to prune ranges; write it as an expression over space.vars for full speed",
                OpaqueConstraintWarning,
                stacklevel=2,
            )
            self.constraints.append(Constraint(name, None, predicate=constraint, uses=declared))
        else:
            if uses is not None:
                raise TypeError(f"constraint {name!r}: uses= is only for Python predicates")
            if isinstance(constraint, bool | np.bool_):
                constraint = as_expr(bool(constraint))
            if not isinstance(constraint, Expr) or constraint.sort != "bool":
                raise TypeError(
                    f"constraint {name!r} must be a boolean expression such as `v.width * v.depth <= 4096` "
                    f"or a predicate function, got {constraint!r}"
                )
            outside = constraint.variables() - set(self.space)
            if outside:
                raise SpaceError(
                    f"constraint {name!r} uses {sorted(outside)}, which are not parameters of the space"
                )
            lhs, sense, limit = _split_comparison(constraint)
            if limit is not None and not math.isfinite(limit):
                raise ValueError(f"constraint {name!r}: the limit must be finite, got {limit}")
            self.constraints.append(Constraint(name, constraint, lhs, sense, limit))
        self._compiled = None
        return self

    def add_cost(self, name: str, expr: Any) -> Problem:
        """Register a named cost expression reported by :meth:`costs` and :meth:`check`."""
        expr = as_expr(expr)
        unknown = expr.variables() - set(self.space)
        if unknown:
            raise SpaceError(f"cost {name!r} uses {sorted(unknown)}, which are not parameters of the space")
        self.cost_exprs[name] = expr
        self._compiled = None
        return self

    def fingerprint(self) -> str:
        """A stable digest of the space and the constraints (cache key across processes)."""
        h = hashlib.sha256(repr(self.space).encode())
        for c in self.constraints:
            body = digest(c.expr) if c.expr is not None else getattr(c.predicate, "__qualname__", "?")
            h.update(f"|{c.name}:{body}".encode())
        return h.hexdigest()[:32]

    # -- compilation --------------------------------------------------------------------------------
    def _c(self) -> _Compiled:
        compiled = self._compiled
        if compiled is None:
            with self._lock:  # one compilation, also when threads ask at once
                if self._compiled is None:
                    self._compiled = self._compile()
                compiled = self._compiled
        return compiled

    def _opaque_reads(self) -> set[str]:
        """Parameters the Python predicates may read: their ``uses``, else every finite parameter."""
        out: set[str] = set()
        for c in self.constraints:
            if c.predicate is not None:
                out |= (
                    set(c.uses) if c.uses is not None else {n for n in self.space if self.space[n].is_finite}
                )
        return out

    def _engine(self, extra: Iterable[str] = ()) -> Engine:
        """An engine over the constrained parameters (plus ``extra`` ones)."""
        exprs = [c.expr for c in self.constraints if c.expr is not None]
        relevant = set().union(*(e.variables() for e in exprs)) if exprs else set()
        domain = Domain(self.space, relevant | self._opaque_reads() | set(extra))
        opaque = [c for c in self.constraints if c.predicate is not None]
        predicate = self._point_predicate(domain, opaque) if opaque else None
        label = "the Python predicate(s) " + ", ".join(repr(c.name) for c in opaque)
        return Engine(domain, exprs, predicate, z3_timeout_ms=self.z3_timeout_ms, opaque_label=label)

    def _compile(self) -> _Compiled:
        exprs = [c.expr for c in self.constraints if c.expr is not None]
        engine = self._engine()
        domain = engine.domain
        lhs_exprs: list[Expr] = []
        lhs_slots: list[int | None] = []
        for c in self.constraints:
            if c.lhs is not None:
                lhs_slots.append(len(exprs) + len(self.cost_exprs) + len(lhs_exprs))
                lhs_exprs.append(c.lhs)
            else:
                lhs_slots.append(None)
        roots = exprs + list(self.cost_exprs.values()) + lhs_exprs
        # every value _env passes is one of its finite parameter's encoded values: conditions constant
        # over their range fold (not Float.bounds(): a grid value may pass `high` by a rounding error)
        encoded = {n: self.space[n].encoded() for n in self.space if self.space[n].is_finite}
        box = {n: (enc.min().item(), enc.max().item()) for n, enc in encoded.items()}
        scalar = compile_scalar(roots, box=box) if roots else (lambda env: ())
        vector = compile_vectorized(exprs, box=engine._box) if exprs else None
        compiled = _Compiled(domain, engine, scalar, len(exprs), vector, lhs_slots)
        compiled.needed = set(domain.names) | set(domain.continuous) | set(domain.free)
        if not any(self.space[n].condition for n in self.space) and all(
            self.space[n].is_finite or n not in compiled.needed for n in self.space
        ):
            compiled.tables = {
                n: {v: self.space[n].encode(v) for v in self.space[n].values()}
                for n in self.space
                if self.space[n].is_finite
            }
            compiled.defaults = {
                n: float(self.space[n].bounds()[0])
                for n in self.space
                if not self.space[n].is_finite  # type: ignore[attr-defined]
            }
        return compiled

    def _point_predicate(
        self, domain: Domain, opaque: list[Constraint]
    ) -> Callable[[np.ndarray], np.ndarray]:
        space = self.space

        def test(points: np.ndarray) -> np.ndarray:
            out = np.ones(len(points), dtype=bool)
            for i, p in enumerate(points):
                config = domain.decode_point(p)
                out[i] = all(
                    bool(c.predicate(_PredicateView(config, c, space))) for c in opaque if c.predicate
                )
            return out

        return test

    # -- single configurations ------------------------------------------------------------------------
    def _env(self, config: Mapping[str, Any], partial: bool = False) -> tuple[dict[str, Any], dict[str, Any]]:
        """(validated user config, encoded env with inactive params at their first value)."""
        comp = self._c()
        if comp.tables is not None and isinstance(config, dict):
            env = dict(comp.defaults)
            tables = comp.tables
            try:
                for name, value in config.items():
                    if value.__class__ is bool:
                        raise KeyError(name)  # a dict lookup would take True for 1: validate instead
                    env[name] = tables[name][value]
            except (KeyError, TypeError):
                pass  # unknown name, continuous or out-of-domain value: the full path explains it
            else:
                if partial or comp.needed <= config.keys():
                    return config, env
        return self._env_checked(config, partial)

    def _env_checked(self, config: Mapping[str, Any], partial: bool) -> tuple[dict[str, Any], dict[str, Any]]:
        cfg = self.space.validate(config, partial=True)
        if not partial:
            needed = self._c().needed
            missing = [n for n in self.space if n in needed and n not in cfg and self.space.is_active(n, cfg)]
            if missing:
                raise SpaceError(f"configuration is missing active parameter(s) {missing}")
        env: dict[str, Any] = {}
        for name in self.space:
            p = self.space[name]
            if name in cfg and self.space.is_active(name, cfg):
                env[name] = p.encode(cfg[name])
            elif p.is_finite:
                env[name] = p.encoded()[0].item()
            else:
                env[name] = float(p.low)  # type: ignore[attr-defined]
        return cfg, env

    def _evaluate(self, config: Mapping[str, Any]) -> tuple[dict[str, Any], tuple[Any, ...]]:
        cfg, env = self._env(config)
        return cfg, self._c().scalar(env)

    def costs(self, config: Mapping[str, Any]) -> dict[str, float]:
        """Named cost values of a configuration (``params``, ``flops``, ... when a model is given)."""
        _, vals = self._evaluate(config)
        return dict(zip(self.cost_exprs, vals[self._c().n_constraints :]))  # the lhs values follow

    def check(self, config: Mapping[str, Any]) -> Verdict:
        """Exact verdict on one full configuration, with every violation and the costs."""
        cfg, vals = self._evaluate(config)
        comp = self._c()
        violations = []
        k = 0
        for c, slot in zip(self.constraints, comp.lhs_slots):
            if c.predicate is not None:
                ok = bool(c.predicate(dict(cfg)))
            else:
                ok = bool(vals[k])
                k += 1
            if not ok:
                violations.append(self._violation(c, vals[slot] if slot is not None else None))
        n = comp.n_constraints
        costs = {name: vals[n + i] for i, name in enumerate(self.cost_exprs)}
        return Verdict(not violations, violations, costs)

    def satisfied(self, config: Mapping[str, Any]) -> bool:
        """``check(config).feasible``, without computing the costs and the violations (cheaper: for a
        sampler's inner loop)."""
        cfg, env = self._env(config)
        comp = self._c()
        if comp.holds is None:
            exprs = [c.expr for c in self.constraints if c.expr is not None]
            with self._lock:  # one compilation, also when threads ask at once
                if comp.holds is None:
                    comp.holds = compile_scalar(exprs) if exprs else (lambda env: ())
        if not all(comp.holds(env)):
            return False
        return all(bool(c.predicate(dict(cfg))) for c in self.constraints if c.predicate is not None)

    @staticmethod
    def _violation(c: Constraint, value: Any) -> Violation:
        if value is None or c.limit is None:
            return Violation(c.name, None, c.limit, None)
        excess = value - c.limit if c.sense in ("<=", "<", "==") else c.limit - value
        if c.sense == "==":
            excess = abs(excess)
        return Violation(c.name, value, c.limit, excess)

    def constraint_values(self, config: Mapping[str, Any]) -> dict[str, float]:
        """One normalised value per constraint, ``<= 0`` when satisfied (Optuna's convention).

        Comparisons give ``(lhs - limit) / max(|limit|, 1)`` (sign flipped for ``>=``; strict integer
        comparisons use ``limit -/+ 1``); other constraints give ``0.0`` (satisfied) or ``1.0``.
        """
        cfg, vals = self._evaluate(config)
        comp = self._c()
        out: dict[str, float] = {}
        k = 0
        for c, slot in zip(self.constraints, comp.lhs_slots):
            if c.predicate is not None:
                out[c.name] = 0.0 if c.predicate(dict(cfg)) else 1.0
                continue
            ok = bool(vals[k])
            k += 1
            if slot is None or c.limit is None or c.sense == "==":
                out[c.name] = 0.0 if ok else 1.0
                continue
            lhs, limit = float(vals[slot]), c.limit
            scale = max(abs(limit), 1.0)
            if c.sense in ("<", ">"):
                eps = (
                    1.0
                    if (c.lhs is not None and c.lhs.sort == "int" and float(limit).is_integer())
                    else 1e-12 * scale
                )
                limit = limit - eps if c.sense == "<" else limit + eps
            v = (lhs - limit) / scale if c.sense in ("<=", "<") else (limit - lhs) / scale
            out[c.name] = min(v, 0.0) if ok else max(v, 1e-12)
        return out

    def check_batch(self, columns: Mapping[str, Any], validate: bool = True) -> np.ndarray:
        """Feasibility of many configurations given as columns ``{name: array of values}``.

        Values are user values (strings for categorical labels are mapped to their indices).
        Opaque predicates are evaluated row by row. ``validate`` checks that every value lies in its
        parameter's domain (on the step grid, inside the bounds) and raises ``SpaceError`` naming the
        first one that does not; ``validate=False`` skips that (faster, for values known to be valid).
        """
        comp = self._c()
        env: dict[str, Any] = {}
        n = None
        for name, col in columns.items():
            if name not in self.space:
                raise SpaceError(f"unknown parameter {name!r} in columns; parameters: {list(self.space)}")
            arr = np.asarray(col)
            if validate and not isinstance(col, np.ndarray) and arr.dtype != object:
                arr = np.asarray(col, dtype=object) if any(v.__class__ is bool for v in col) else arr
            n = len(arr) if n is None else n
            if len(arr) != n:
                raise ValueError(f"column {name!r} has {len(arr)} rows, expected {n}")
            p = self.space[name]
            if p.labels is not None:
                found = [label_index(p.labels, _py(x)) for x in arr]
                if None in found:
                    bad = _py(arr[found.index(None)])
                    raise SpaceError(f"parameter {name!r}: {bad!r} is not a choice of {list(p.labels)}")
                arr = np.array(found, dtype=np.int64)
            elif validate:
                _check_column(name, p, arr)
            env[name] = arr
        if n is None:
            raise ValueError("check_batch needs at least one column")
        needed = comp.domain.names + list(comp.domain.continuous)
        missing = [m for m in needed if m not in env and not self.space[m].condition]
        if missing:
            raise SpaceError(f"check_batch: missing column(s) {missing}")
        for m in needed:
            if m not in env:
                env[m] = np.full(n, self.space[m].encoded()[0])
        ok = np.ones(n, dtype=bool)
        if comp.vector is not None:
            for start in range(0, n, BATCH_ROWS):  # cache-sized chunks: ~10x faster than whole columns
                stop = min(start + BATCH_ROWS, n)
                chunk = {k: col[start:stop] for k, col in env.items()}
                part = ok[start:stop]
                for v in comp.vector(chunk):
                    part &= np.broadcast_to(v, (stop - start,))
        opaque = [c for c in self.constraints if c.predicate is not None]
        if opaque:
            names = list(columns)
            for i in np.flatnonzero(ok):
                row = {k: _py(np.asarray(columns[k])[i]) for k in names}
                ok[i] = all(bool(c.predicate(row)) for c in opaque if c.predicate is not None)
        return ok

    # -- searching ----------------------------------------------------------------------------------
    def _fixed_box(
        self, given: Mapping[str, Any] | None, dom: Domain | None = None, active: Iterable[str] = ()
    ) -> tuple[np.ndarray, np.ndarray, dict[str, Any]]:
        """Boxes fixing the ``given`` values; a given conditional parameter (and each one in ``active``)
        must be active, so its unfixed parents are restricted to activating values (one box per
        combination); no box when a given parent switches it off."""
        dom = dom or self._c().domain
        cfg = self.space.validate(dict(given or {}), partial=True)
        fixed = dom.encode_config(cfg)
        allowed: dict[str, set[int]] = {}
        todo = [n for n in [*cfg, *active] if all(q in dom.index for q in self.space[n].condition or [0])]
        while todo:
            child = todo.pop()
            for parent, values in (self.space[child].condition or {}).items():
                idx = {
                    int(np.searchsorted(dom.values[dom.index[parent]], self.space[parent].encode(v)))
                    for v in values
                }
                if parent not in allowed:
                    todo.append(parent)
                allowed[parent] = allowed.get(parent, idx) & idx
        lo, hi = dom.box_with(fixed)
        for parent, idx in allowed.items():
            if parent in fixed and fixed[parent] not in idx:
                return lo[:0], hi[:0], cfg
        free = [(dom.index[p], sorted(idx)) for p, idx in allowed.items() if p not in fixed]
        if free:
            combos = list(itertools.product(*(idx for _, idx in free)))
            lo, hi = np.repeat(lo, len(combos), axis=0), np.repeat(hi, len(combos), axis=0)
            for j, (d, _) in enumerate(free):
                lo[:, d] = hi[:, d] = [c[j] for c in combos]
        return lo, hi, cfg

    def _exists_any(self, lo: np.ndarray, hi: np.ndarray, engine: Engine | None = None) -> bool:
        """Whether some box holds a feasible configuration, proved by a witness (see :func:`_proved`)."""
        engine = engine or self._c().engine
        return bool(len(lo)) and bool(_proved(engine.exists(lo, hi)[0], "is_extendable").any())

    def _view(self, cfg: Mapping[str, Any], engine: Engine | None = None) -> Engine:
        """The engine with the continuous search variables that ``cfg`` sets (and activates) pinned."""
        engine = engine or self._c().engine
        pins = {}
        for n in engine.domain.continuous:
            if n in cfg and self.space.is_active(n, cfg):
                v = float(self.space[n].encode(cfg[n]))
                pins[n] = (v, v)
        return engine.restricted(pins)

    def is_extendable(self, partial: Mapping[str, Any]) -> bool:
        """Whether ``partial`` (some parameters set) extends to a feasible configuration.

        True only with a feasible completion found (a witness); values of continuous ``Float``
        parameters are honoured. False when none exists, or, rarely and logged as a warning, when the
        engine cannot decide within its box budget. A complete configuration gets the exact
        :meth:`check` (Python predicates included).
        """
        cfg = self.space.validate(partial, partial=True)
        if all(n in cfg or not self.space.is_active(n, cfg) for n in self.space):
            return self.check(cfg).feasible
        lo, hi, cfg = self._fixed_box(cfg)
        return self._exists_any(lo, hi, self._view(cfg))

    def feasible_values(self, name: str, given: Mapping[str, Any] | None = None) -> list[Any]:
        """Values of ``name`` that extend ``given`` to at least one feasible configuration.

        Forward checking for finite parameters: every value returned has a feasible completion (a
        witness found); a value is left out only when it has none or, rarely and logged as a warning,
        when the engine cannot decide it within its box budget. Values of continuous parameters in
        ``given`` are honoured. A continuous ``Float`` returns ``[low, high]``, the hull of
        :meth:`feasible_intervals`, or ``[]``. Values come in the parameter's own order.
        """
        p = self.space[name]
        comp = self._c()
        given = {k: v for k, v in (given or {}).items() if k != name}
        if not p.is_finite:
            spans = self.feasible_intervals(name, given)
            return [spans[0][0], spans[-1][1]] if spans else []
        lo, hi, cfg = self._fixed_box(given, active=[name])
        engine = self._view(cfg)
        d = comp.domain.index.get(name)
        if d is None:
            # not constrained: every value works if anything does
            return list(p.values()) if self._exists_any(lo, hi, engine) else []
        vals = comp.domain.values[d]
        if not engine.domain.unpinned and 0 < comp.domain.volume(lo, hi).sum() <= ENUMERATE_FREE:
            # few completions left: test them all in one vectorized call
            pts, _ = comp.domain.points(lo, hi)
            pts = comp.domain.canonical(pts)
            ok_idx = np.unique(pts[engine.feasible_points(pts), d])
            ok = {vals[j].item() for j in ok_idx}
            return [v for v in p.values() if p.encode(v) in ok]
        n, m = int(comp.domain.sizes[d]), len(lo)
        los, his = np.tile(lo, (n, 1)), np.tile(hi, (n, 1))
        values_idx = np.repeat(np.arange(n), m)
        pinned = los[:, d] == his[:, d]
        los[:, d] = his[:, d] = values_idx
        # a box that pinned `name` to an activating value only admits that value
        conflict = pinned & (lo[np.tile(np.arange(m), n), d] != values_idx) if m else pinned
        status, _ = engine.exists(los, his)
        status = np.where(conflict, 0, status)
        ok = {vals[j].item() for j in set(values_idx[_proved(status, "feasible_values")].tolist())}
        return [v for v in p.values() if p.encode(v) in ok]

    def feasible_intervals(
        self, name: str, given: Mapping[str, Any] | None = None
    ) -> list[tuple[float, float]]:
        """The values of a continuous ``Float`` that extend ``given``, as ascending disjoint closed intervals.

        An inner approximation found by bisection in the parameter's own scale (log for ``log=True``):
        every value inside is proved feasible (interval bounds over the sub-interval at a concrete
        feasible completion of the other parameters), and each end lies within ``FLOAT_TOL`` of the
        range of the exact boundary (sub-intervals the bounds cannot settle at that width are left out,
        as are the undecided rest after ``FLOAT_STEPS`` sub-intervals).
        """
        p = self.space[name]
        if p.is_finite:
            raise TypeError(f"parameter {name!r} is finite: use feasible_values({name!r}, given)")
        comp = self._c()
        given = {k: v for k, v in (given or {}).items() if k != name}
        lo, hi, cfg = self._fixed_box(given, active=[name])
        low, high = (float(b) for b in p.bounds())
        base = self._view(cfg)
        if name not in comp.domain.continuous:  # unconstrained: all or nothing
            return [(low, high)] if self._exists_any(lo, hi, base) else []
        if not len(lo):
            return []
        to_t, from_t = (math.log, math.exp) if getattr(p, "log", False) else (float, float)
        t_lo, t_hi = to_t(low), to_t(high)
        tol = FLOAT_TOL * (t_hi - t_lo)

        def x(t: float) -> float:
            return low if t == t_lo else high if t == t_hi else min(max(from_t(t), low), high)

        others = [n for n in base.domain.unpinned if n != name]  # other Floats a witness must pin too
        witnesses: list[tuple[np.ndarray, dict[str, tuple[float, float]]]] = []
        proved: list[tuple[float, float]] = []
        queue = collections.deque([(t_lo, t_hi)])  # widest sub-intervals first
        for _ in range(FLOAT_STEPS):
            if not queue:
                break
            a, b = queue.popleft()
            engine = base.restricted({name: (x(a), x(b))})
            nb = engine.domain.normalize(lo, hi)
            if not engine.bounds(nb.lo, nb.hi, None)[1].any():
                continue  # the bounds prove the whole sub-interval infeasible
            if any(_holds_on(engine.restricted(pins), w) for w, pins in witnesses[-8:]):
                proved.append((x(a), x(b)))
                continue
            mid = x((a + b) / 2)
            at_mid = base.restricted({name: (mid, mid)})
            status, found = at_mid.exists(lo, hi)
            hit = np.flatnonzero(status == 1)
            if len(hit):
                point, pins = found[hit[0]], {}
                if others:
                    cont = at_mid.domain.continuous
                    values = at_mid.z3().continuous_witness(point, cont, self.z3_timeout_ms) or {}
                    pins = {n: (values[n], values[n]) for n in others if n in values}
                witnesses.append((point, pins))
                if len(pins) == len(others) and _holds_on(engine.restricted(pins), point):
                    proved.append((x(a), x(b)))
                    continue
            elif not (engine.exists(lo, hi)[0] != 0).any():
                continue  # Z3 proves the whole sub-interval infeasible
            if b - a > tol:
                queue += [(a, (a + b) / 2), ((a + b) / 2, b)]
        spans: list[tuple[float, float]] = []
        for a2, b2 in sorted(proved):
            if spans and spans[-1][1] >= a2:
                spans[-1] = (spans[-1][0], max(spans[-1][1], b2))
            else:
                spans.append((a2, b2))
        return spans

    def nearest_feasible_value(
        self, name: str, value: Any, given: Mapping[str, Any] | None = None, *, rng: Any = None
    ) -> Any:
        """``value`` when ``given`` plus ``name=value`` extends to a feasible configuration, else the
        nearest value of ``name`` that does; None when none does.

        Nearest: by distance in the parameter's own scale (log for ``log=True``) for numbers, by rank
        for numeric categoricals, a choice drawn with ``rng`` (numpy ``Generator`` or ``RandomState``;
        default seeded 0) among unordered choices. Continuous ``Float`` values are exact: the returned
        value is re-checked.
        """
        from .space import Categorical

        p = self.space[name]
        given = {k: v for k, v in (given or {}).items() if k != name}
        if p.is_finite:
            try:
                value = p.decode(p.encode(value))
            except (SpaceError, ValueError, TypeError, KeyError):
                pass  # outside the domain: replaced by a feasible value below
            else:
                if self.is_extendable({**given, name: value}):
                    return value
            allowed = self.feasible_values(name, given)
            if not allowed:
                return None
            if isinstance(p, Categorical) and not p.numeric:
                rng = rng if rng is not None else np.random.default_rng(0)
                pick = rng.integers(len(allowed)) if hasattr(rng, "integers") else rng.randint(len(allowed))
                return allowed[int(pick)]
            if isinstance(p, Categorical) or not isinstance(value, int | float) or isinstance(value, bool):
                ranks = list(p.values())
                where = _rank(ranks, value)
                return min(allowed, key=lambda v: (abs(ranks.index(v) - where), ranks.index(v)))
            scale = _scale(p)
            return min(allowed, key=lambda v: (abs(scale(v) - scale(value)), v))
        low, high = (float(b) for b in p.bounds())
        v = (
            min(max(float(value), low), high)
            if isinstance(value, int | float) and math.isfinite(value)
            else low
        )
        if v == value and self.is_extendable({**given, name: v}):
            return v
        spans = self.feasible_intervals(name, given)
        if not spans:
            return None
        scale = _scale(p)
        best = min((min(max(v, a), b) for a, b in spans), key=lambda c: abs(scale(c) - scale(v)))
        a, b = next((a, b) for a, b in spans if a <= best <= b)
        for _ in range(60):  # the end of a proved interval is feasible; guard against rounding anyway
            if self.is_extendable({**given, name: best}):
                return best
            best = best + ((a + b) / 2 - best) / 2
        return None

    def guard(
        self,
        *,
        seed: int | None = None,
        domains: Mapping[str, Sequence[Any]] | None = None,
        witnesses: Iterable[Mapping[str, Any]] | None = None,
    ) -> Guard:
        """A :class:`~dnnsat.Guard` for per-trial decisions of a sampler or tuner wrapper.

        It answers "keep this proposed value, or which is the nearest one that still extends?"
        (``propose``), repairs and completes configurations, with the answers of this problem at the
        cost a sampler's inner loop can pay. ``seed`` seeds its choices among unordered values;
        ``domains`` (pruned values per finite parameter) and ``witnesses`` (feasible configurations)
        may come from a record another worker computed, else they are computed on first use.
        """
        from ._guard import Guard

        return Guard(self, seed=seed, domains=domains, witnesses=witnesses)

    def prune(self) -> Space:
        """A reduced space: every value that occurs in some feasible configuration, nothing else.

        Finite parameters keep their kind where the feasible values stay a contiguous run of the grid
        and become ``Categorical`` otherwise; unconstrained and continuous parameters are kept.
        Raises :class:`InfeasibleSpaceError` when nothing is feasible.
        """
        from .space import Categorical, Float, Int

        comp = self._c()
        dom = comp.domain
        if dom.ndim == 0:
            if self.is_empty():
                self._raise_empty()
            return self._narrow_floats(self.space)
        roots_lo: list[np.ndarray] = []
        roots_hi: list[np.ndarray] = []
        owner: list[tuple[int, int]] = []
        for d, name in enumerate(dom.names):
            # a conditional parameter's value occurs only where it is active: parents restricted to that
            base_lo, base_hi, _ = self._fixed_box({}, dom, active=[name])
            n, m = int(dom.sizes[d]), len(base_lo)
            lo, hi = np.repeat(base_lo, n, axis=0), np.repeat(base_hi, n, axis=0)
            lo[:, d] = hi[:, d] = np.tile(np.arange(n), m)
            roots_lo.append(lo)
            roots_hi.append(hi)
            owner.extend((d, j) for _ in range(m) for j in range(n))
        status, _ = comp.engine.exists(np.concatenate(roots_lo), np.concatenate(roots_hi))
        found = {(d, j) for (d, j), s in zip(owner, status) if s != 0}
        keep: dict[int, list[int]] = {d: sorted(j for e, j in found if e == d) for d in range(dom.ndim)}
        if not any(keep.values()) or any(not v for v in keep.values()):
            self._raise_empty()
        params: dict[str, Any] = {}
        kept_values = {name: {dom.values[d][j].item() for j in keep[d]} for name, d in dom.index.items()}
        for name in self.space.conditional_order:
            p = self.space[name]
            cond: dict[str, tuple[Any, ...]] | None = None
            if p.condition:
                cond = {  # a parent outside the search (a pass-through child's) keeps every value
                    parent: tuple(
                        v
                        for v in values
                        if parent not in kept_values or self.space[parent].encode(v) in kept_values[parent]
                    )
                    for parent, values in p.condition.items()
                }
                if any(not vals or parent not in params for parent, vals in cond.items()):
                    continue  # never active in a feasible configuration
            dim = dom.index.get(name)
            if dim is None or len(keep[dim]) == len(dom.values[dim]):
                params[name] = dataclasses.replace(p, condition=cond) if cond else p
                continue
            idx = keep[dim]
            users = [p.decode(dom.values[dim][j].item()) for j in idx]
            contiguous = idx == list(range(idx[0], idx[-1] + 1))
            if isinstance(p, Int) and contiguous:
                params[name] = Int(users[0], users[-1], step=p.step, log=p.log, condition=cond)
            elif isinstance(p, Float) and contiguous and p.step is not None:
                params[name] = Float(users[0], users[-1], step=p.step, condition=cond)
            else:
                order = [c for c in (p.choices if isinstance(p, Categorical) else users) if c in users]
                params[name] = Categorical(order, condition=cond)
        return self._narrow_floats(Space({n: params[n] for n in self.space if n in params}))

    def _narrow_floats(self, space: Space) -> Space:
        """``space`` with each constrained continuous Float narrowed to the hull of its feasible values."""
        from .space import Float

        params = {n: space[n] for n in space}
        for name in self._c().domain.continuous:
            p = params.get(name)
            spans = self.feasible_intervals(name) if p is not None else []
            if spans and isinstance(p, Float) and (spans[0][0], spans[-1][1]) != p.bounds():
                params[name] = Float(spans[0][0], spans[-1][1], log=p.log, condition=p.condition)
        return Space(params)

    def _raise_empty(self) -> None:
        core = self.unsat_core()
        raise InfeasibleSpaceError(
            f"no configuration satisfies the constraints; conflicting: {', '.join(core) or '(all)'}", core
        )

    def is_empty(self) -> bool:
        """True when no configuration is feasible (see :meth:`unsat_core` for the proof)."""
        comp = self._c()
        lo, hi = comp.domain.root()
        status, _ = comp.engine.exists(lo, hi)
        return bool(status[0] == 0)

    def unsat_core(self) -> list[str]:
        """A minimal set of constraint names that together admit no configuration ([] when feasible)."""
        comp = self._c()
        symbolic = [c for c in self.constraints if c.expr is not None]
        lo, hi = comp.domain.root()
        mask = np.ones(len(symbolic), dtype=bool)
        if comp.engine.exists(lo, hi, mask)[0][0] != 0:
            if self.is_empty():  # only the opaque predicates conflict
                return [c.name for c in self.constraints if c.predicate is not None]
            return []
        for i in range(len(symbolic)):
            mask[i] = False
            if comp.engine.exists(lo, hi, mask)[0][0] != 0:
                mask[i] = True
        return [c.name for c, m in zip(symbolic, mask) if m]

    def count(self, progress: bool | None = None, max_seconds: float | None = None) -> int:
        """Exact number of feasible configurations of the finite parameters.

        Inactive conditional parameters count once; unconstrained finite parameters multiply the
        count. A progress bar is shown on a terminal when counting takes more than a second. With
        ``max_seconds``, raises ``TimeoutError`` once counting has taken longer (then use
        :meth:`estimate_count`). The first ``SAMPLE_BOXES`` boxes are :meth:`sample`'s decomposition,
        which is kept for it; the boxes it leaves undecided are then decomposed too.
        """
        comp = self._c()
        dom = comp.domain
        total = 0
        deadline = None if max_seconds is None else time.perf_counter() + max_seconds
        done = [0.0]  # share of the space settled so far
        whole = float(dom.volume(*dom.root()).sum())
        with _progress("counting", progress) as report:

            def tick(fraction: float | None = None, settled: float = 0.0, volume: float = whole) -> None:
                if fraction is not None:  # ``fraction`` of ``volume`` after ``settled`` of the space
                    done[0] = (settled + fraction * volume) / whole if whole else 1.0
                    report(done[0])
                if deadline is not None and time.perf_counter() > deadline and done[0] < 1.0:
                    raise TimeoutError(
                        f"exact counting stopped after {max_seconds:g} s at {done[0]:.0%} of the space; "
                        "use estimate_count() (CLI: --estimate) or allow more time"
                    )

            pieces: list[Decomposition] = []
            for piece in comp.engine.decompose(max_boxes=SAMPLE_BOXES, progress=tick):
                pieces.append(piece)
                total += int(dom.volume(piece.full_lo, piece.full_hi).sum()) + len(piece.points)
                tick()
            self._keep_pool(comp, SAMPLE_BOXES, pieces)
            last = pieces[-1] if pieces else None  # the last piece holds the boxes left undecided
            empty = np.zeros((0, dom.ndim), dtype=np.int64)
            rest_lo, rest_hi = (last.rest_lo, last.rest_hi) if last is not None else (empty, empty)
            left = float(dom.volume(rest_lo, rest_hi).sum())
            for s in range(0, len(rest_lo), BATCH):
                lo, hi = rest_lo[s : s + BATCH], rest_hi[s : s + BATCH]
                volume = float(dom.volume(lo, hi).sum())

                def part(fraction: float, settled: float = whole - left, volume: float = volume) -> None:
                    tick(fraction, settled, volume)

                for piece in comp.engine.decompose(lo, hi, progress=part):
                    total += int(dom.volume(piece.full_lo, piece.full_hi).sum()) + len(piece.points)
                    tick()
                left -= volume
        return total * dom.free_size

    def always_feasible(self) -> bool:
        """True when every configuration of the space is feasible: no constraint can ever bind.

        Proved by interval bounds over the whole space, else by an exact count that may take up to a
        second (finite problems) or by Z3 (constrained Floats); False when neither settles it in time.
        Computed once.
        """
        comp = self._c()
        if comp.always_feasible is None:
            engine = comp.engine
            if engine.opaque is None and not engine._open:
                comp.always_feasible = True
            elif engine.domain.unpinned:  # continuous variables: ask Z3 for a violating configuration
                comp.always_feasible = engine.opaque is None and engine.z3().violable(2000) is False
            else:
                try:
                    comp.always_feasible = self.count(progress=False, max_seconds=1.0) == self.space.size()
                except TimeoutError:
                    comp.always_feasible = False
        return comp.always_feasible

    def estimate_count(
        self, samples: int = 20_000, seed: int | None = 0, max_boxes: int = 50_000
    ) -> Estimate:
        """Estimated number of feasible configurations with a 95 % confidence interval.

        Bounds settle most of the space exactly; the undecided rest is estimated by uniform sampling.
        """
        comp = self._c()
        exact = 0
        rest_lo, rest_hi = [], []
        for piece in comp.engine.decompose(max_boxes=max_boxes):
            exact += int(comp.domain.volume(piece.full_lo, piece.full_hi).sum()) + len(piece.points)
            if len(piece.rest_lo):
                rest_lo.append(piece.rest_lo)
                rest_hi.append(piece.rest_hi)
        f = comp.domain.free_size
        if not rest_lo:
            return Estimate(float(exact * f), float(exact * f), float(exact * f), exact=True)
        lo, hi = np.concatenate(rest_lo), np.concatenate(rest_hi)
        rng = np.random.default_rng(seed)
        hits, vol = self._rejection_hits(comp, lo, hi, samples, rng)
        p = hits / samples
        z = 1.96
        denom = 1 + z * z / samples
        centre = (p + z * z / (2 * samples)) / denom
        half = z * math.sqrt(p * (1 - p) / samples + z * z / (4 * samples * samples)) / denom
        return Estimate(
            (exact + vol * p) * f,
            (exact + vol * max(centre - half, 0.0)) * f,
            (exact + vol * (centre + half)) * f,
        )

    def _rejection_hits(
        self, comp: _Compiled, lo: np.ndarray, hi: np.ndarray, n: int, rng: np.random.Generator
    ) -> tuple[int, float]:
        """Feasible share of ``n`` points drawn uniformly from the union of the (undecided) boxes."""
        pts, _ = self._draw(comp, lo, hi, n, rng)
        hits = int(comp.engine.feasible_configurations(pts).sum())
        return hits, float(comp.domain.volume(lo, hi).sum())

    @staticmethod
    def _draw(
        comp: _Compiled, lo: np.ndarray, hi: np.ndarray, n: int, rng: np.random.Generator
    ) -> tuple[np.ndarray, np.ndarray]:
        vol = comp.domain.volume(lo, hi).astype(np.float64)
        which = rng.choice(len(vol), size=n, p=vol / vol.sum())
        return comp.domain.random_points(lo[which], hi[which], rng), which

    def enumerate(self, limit: int | None = None) -> Iterator[dict[str, Any]]:
        """Feasible configurations in a deterministic order (unconstrained finite parameters vary last).

        ``limit`` caps how many are produced (``None``: all of them).
        """
        if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 0):
            raise ValueError(f"limit must be None or an integer >= 0, got {limit!r}")
        return self._enumerate(limit)

    def _enumerate(self, limit: int | None) -> Iterator[dict[str, Any]]:
        if limit == 0:
            return
        comp = self._c()
        free = comp.domain.free
        free_values = [self.space[n].values() for n in free]
        produced = 0
        for piece in comp.engine.decompose():
            for pts in _piece_points(comp.domain, piece):
                for p in pts:
                    base = comp.domain.decode_point(p)
                    for combo in itertools.product(*free_values):
                        cfg = dict(base)
                        cfg.update(zip(free, combo))
                        yield self._ordered(cfg)
                        produced += 1
                        if limit is not None and produced >= limit:
                            return

    def _ordered(self, cfg: Mapping[str, Any]) -> dict[str, Any]:
        return {n: cfg[n] for n in self.space if n in cfg}

    def sample(self, n: int, seed: int | None = None, max_boxes: int = SAMPLE_BOXES) -> list[dict[str, Any]]:
        """``n`` feasible configurations drawn uniformly (with replacement) from the feasible finite set.

        Exact uniformity in two steps. Points are first drawn uniformly from the whole space and kept
        when feasible, up to ``max(REJECTION_DRAWS, 8 n)`` draws: the cheapest exact sampler when a fair
        share of the space is feasible (a few thousand point checks, no bounds). When that runs short,
        the rest come from a decomposition: bounds split the space into surely-feasible boxes,
        enumerated points and undecided boxes; a box is drawn by volume, a point uniformly inside it,
        and points from undecided boxes are kept only when feasible. The decomposition (per
        ``max_boxes``) is computed once, by that call or by :meth:`count`, and kept. The draws are a
        function of ``seed`` alone, whichever calls came before. Continuous parameters that no
        constraint uses are drawn uniformly (log-uniformly when ``log=True``).
        """
        if n < 0:
            raise ValueError(f"n must be >= 0, got {n}")
        comp = self._c()
        comp.engine.require_finite("sample")
        rng = np.random.default_rng(seed)
        lo, hi = comp.domain.root()
        whole = (lo, hi, np.ones(1, dtype=bool))
        points = self._feasible_draws(comp, whole, n, rng, max(REJECTION_DRAWS, 8 * n))
        if len(points) < n or not n:
            more = self._feasible_draws(comp, self._sample_pool(comp, max_boxes), n - len(points), rng)
            points = np.concatenate([points, more])
        return self._configs(comp, points, rng)

    def _sample_decomposed(self, n: int, seed: int | None) -> list[dict[str, Any]]:
        """:meth:`sample`'s draws from the decomposition alone (its behaviour before the draws from the
        whole space): the witnesses of :class:`~dnnsat.Guard` and of the Optuna adapter's pruned
        space, and the new configurations of ``dnnsat._unlaunched``, so that the adapters' trial
        sequences stay those of earlier releases."""
        comp = self._c()
        rng = np.random.default_rng(seed)
        points = self._feasible_draws(comp, self._sample_pool(comp, SAMPLE_BOXES), n, rng)
        return self._configs(comp, points, rng)

    def _feasible_draws(
        self,
        comp: _Compiled,
        pool: tuple[np.ndarray, np.ndarray, np.ndarray],
        n: int,
        rng: np.random.Generator,
        limit: int | None = None,
    ) -> np.ndarray:
        """Up to ``n`` feasible points drawn uniformly from the pool ``(lo, hi, undecided)``: a box by
        volume, a point inside it, kept when its box is surely feasible or the point is feasible.
        ``limit``: stop after that many draws (else an empty pool or no feasible point raises)."""
        lo, hi, undecided = pool
        if not len(lo) and limit is None:
            self._raise_empty()
        comp.engine.reset_opaque_count()
        chosen: list[np.ndarray] = [np.zeros((0, comp.domain.ndim), dtype=np.int64)]
        got = attempts = 0
        while got < n and (limit is None or attempts < limit):
            want = max(2 * (n - got), 64)
            if limit is not None:
                want = min(want, limit - attempts)
            cand, which = self._draw(comp, lo, hi, want, rng)
            ok = np.ones(len(cand), dtype=bool)
            u = undecided[which]
            if u.any():
                ok[np.flatnonzero(u)] = comp.engine.feasible_configurations(cand[u])
            good = cand[ok][: n - got]
            chosen.append(good)
            got += len(good)
            attempts += want
            if limit is None and attempts > 1000 * max(n, 1) + 100_000 and got == 0:
                self._raise_empty()
        return np.concatenate(chosen)

    def _configs(self, comp: _Compiled, points: np.ndarray, rng: np.random.Generator) -> list[dict[str, Any]]:
        """Configurations of domain points: unconstrained finite parameters and unconstrained active
        continuous ones drawn from ``rng``."""
        dom = comp.domain
        out = []
        for p in points:
            cfg = dom.decode_point(p)
            for name in dom.free:
                vals = self.space[name].values()
                cfg[name] = vals[int(rng.integers(len(vals)))]
            for name in self.space:
                prm = self.space[name]
                if not prm.is_finite and name not in dom.continuous and self.space.is_active(name, cfg):
                    cfg[name] = _draw_float(prm, rng)
            out.append(self._ordered(cfg))
        return out

    def _sample_pool(self, comp: _Compiled, max_boxes: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(lo, hi, undecided) of one pool of boxes covering the feasible set: surely-feasible boxes,
        single feasible points, then boxes left undecided after ``max_boxes`` (computed once)."""
        pool = comp.pools.get(max_boxes)
        if pool is not None:
            return pool
        return self._keep_pool(comp, max_boxes, comp.engine.decompose(max_boxes=max_boxes))

    @staticmethod
    def _keep_pool(
        comp: _Compiled, max_boxes: int, pieces: Iterable[Decomposition]
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The pool of :meth:`_sample_pool` from the pieces of ``decompose(max_boxes=max_boxes)``, kept."""
        dom = comp.domain
        full_lo, full_hi, points, rest_lo, rest_hi = [], [], [], [], []
        for piece in pieces:
            full_lo.append(piece.full_lo)
            full_hi.append(piece.full_hi)
            points.append(piece.points)
            rest_lo.append(piece.rest_lo)
            rest_hi.append(piece.rest_hi)
        empty = np.zeros((0, dom.ndim), dtype=np.int64)
        flo = np.concatenate(full_lo) if full_lo else empty
        fhi = np.concatenate(full_hi) if full_hi else empty
        pts = np.concatenate(points) if points else empty
        rlo = np.concatenate(rest_lo) if rest_lo else empty
        rhi = np.concatenate(rest_hi) if rest_hi else empty
        lo = np.concatenate([flo, pts, rlo])
        hi = np.concatenate([fhi, pts, rhi])
        undecided = np.concatenate([np.zeros(len(flo) + len(pts), dtype=bool), np.ones(len(rlo), dtype=bool)])
        for a in (lo, hi, undecided):
            a.flags.writeable = False  # shared by every later call
        pool = comp.pools[max_boxes] = (lo, hi, undecided)
        return pool

    def repair(self, config: Mapping[str, Any], fixed: Iterable[str] = ()) -> dict[str, Any] | None:
        """A feasible config changing as few parameters as possible, then as little as possible.

        Distance: number of changed parameters first, then the sum over changed parameters of the
        distance over the domain's length (value index for finite parameters, the parameter's own scale
        for continuous ``Float``). ``fixed`` names keep their value. Returns the config unchanged when it
        is feasible and None when no repair exists. With constrained Floats the candidates are: the
        Floats kept and the finite part repaired, or one Float moved to its nearest feasible value; when
        neither exists, each parameter in turn takes its nearest value that still extends the others.
        """
        cfg = self.space.validate(config, partial=True)
        fixed = set(fixed)
        unknown = fixed - set(self.space)
        if unknown:
            raise SpaceError(f"repair: fixed names {sorted(unknown)} are not parameters of the space")
        if all(n in cfg or not self.space.is_active(n, cfg) for n in self.space) and self.check(cfg).feasible:
            return self._ordered(cfg)
        comp = self._c()
        floats = [n for n in comp.domain.continuous if n in cfg and self.space.is_active(n, cfg)]
        candidates = []
        engine = self._view(cfg)
        if not engine.domain.unpinned:
            finite = self._repair_finite(cfg, fixed, engine)
            if finite is not None:
                candidates.append(finite)
        for name in floats:
            if name not in fixed:
                others = {k: v for k, v in cfg.items() if k != name}
                value = self.nearest_feasible_value(name, cfg[name], others)
                if value is not None and self.is_extendable({**others, name: value}):
                    candidates.append(self._ordered({**cfg, name: value}))
        if candidates or not comp.domain.continuous:
            return min(candidates, key=lambda c: self._change(cfg, c)) if candidates else None
        complete = all(n in cfg or not self.space.is_active(n, cfg) for n in self.space)
        out = {k: cfg[k] for k in fixed if k in cfg}
        for name in self.space.conditional_order:
            if name in out or not self.space.is_active(name, {**cfg, **out}):
                continue
            if name not in cfg and not complete:
                continue  # a partial configuration stays partial
            p = self.space[name]
            start = cfg.get(name, p.values()[0] if p.is_finite else p.bounds()[0])
            value = self.nearest_feasible_value(name, start, out)
            if value is None:
                return None
            out[name] = value
        return self._ordered(out) if self.is_extendable(out) else None

    def _change(self, old: Mapping[str, Any], new: Mapping[str, Any]) -> tuple[int, float]:
        """(changed parameters, summed distance over domain length) between two configurations."""
        changed, dist = 0, 0.0
        for name in set(old) | set(new):
            a, b = old.get(name, _MISSING), new.get(name, _MISSING)
            if a is _MISSING or b is _MISSING:
                changed, dist = changed + 1, dist + 1.0
                continue
            p = self.space[name]
            if p.encode(a) == p.encode(b):
                continue
            changed += 1
            if p.is_finite:
                enc = list(p.encoded())
                dist += abs(enc.index(p.encode(a)) - enc.index(p.encode(b))) / max(len(enc) - 1, 1)
            else:
                scale = _scale(p)
                low, high = p.bounds()
                dist += abs(scale(a) - scale(b)) / max(scale(high) - scale(low), 1e-300)
        return changed, dist

    def _repair_finite(self, cfg: dict[str, Any], fixed: set[str], engine: Engine) -> dict[str, Any] | None:
        """The finite part repaired (continuous values pinned in ``engine``), or None when impossible."""
        dom = engine.domain
        # a fixed conditional child stays: its parents are restricted to values that activate it
        los, his, _ = self._fixed_box({k: cfg[k] for k in fixed if k in cfg}, dom)
        enc = dom.encode_config({k: v for k, v in cfg.items() if k in fixed or self.space.is_active(k, cfg)})
        origin = np.array([enc.get(n, 0) for n in dom.names], dtype=np.int64)
        weight = np.array([1.0 if n in enc else 0.0 for n in dom.names])
        given = [d for d, n in enumerate(dom.names) if n in enc and n not in fixed]
        distance = index_distance(dom, origin, weight)[1]
        found: list[np.ndarray] = []
        for r in range(len(los)):
            point = self._repair_search(engine, los[r : r + 1], his[r : r + 1], origin, weight, given)
            if point is not None:
                found.append(point)
        if not found:
            return None
        best = min(found, key=lambda b: float(distance(b[None, :])[0]))
        out = {k: v for k, v in cfg.items() if k not in dom.index}
        out.update(dom.decode_point(best))
        for name in dom.free:
            out.setdefault(name, self.space[name].values()[0])
        return self._ordered({k: v for k, v in out.items() if self.space.is_active(k, out)})

    @staticmethod
    def _repair_search(
        engine: Engine,
        lo: np.ndarray,
        hi: np.ndarray,
        origin: np.ndarray,
        weight: np.ndarray,
        given: list[int],
    ) -> np.ndarray | None:
        """Fewest changed dims first (all k-subsets as one batch of boxes), then the nearest point."""
        dom = engine.domain
        bound, value = index_distance(dom, origin, weight)
        for k in range(len(given) + 1):
            if math.comb(len(given), k) > 20_000:
                break  # too many subsets: one search over everything instead
            subsets = list(itertools.combinations(given, k))
            los = np.repeat(lo, len(subsets), axis=0)
            his = np.repeat(hi, len(subsets), axis=0)
            for row, sub in enumerate(subsets):
                pin = [d for d in given if d not in sub]
                los[row, pin] = his[row, pin] = origin[pin]
            status, witness = engine.exists(los, his)
            ok = status == 1
            if ok.any():
                best = _unique_nearest(engine, los[ok], his[ok], witness[ok], value)
                if best is None:
                    best, _, _ = engine.minimize(los[ok], his[ok], bound, value)
                return best
            if not (status == -1).any() and k == len(given):
                return None
        best, _, _ = engine.minimize(lo, hi, bound, value)
        return best

    def explain(self, config: Mapping[str, Any]) -> Explanation | None:
        """A minimal set of the config's assignments that alone admits no feasible completion.

        Returns None when the config is feasible. Dropping any assignment of the core makes it
        extendable; ``constraints`` lists the constraints the core cannot satisfy.
        """
        verdict = self.check(config)
        if verdict.feasible:
            return None
        comp = self._c()
        dom = comp.domain
        cfg = self.space.validate(config)
        enc = dom.encode_config({k: v for k, v in cfg.items() if self.space.is_active(k, cfg)})
        core = dict(enc)
        if comp.engine.exists(*dom.box_with(core))[0][0] != 0:
            # only opaque predicates (or inactive-value effects) reject it: the whole config is the core
            names = [v.name for v in verdict.violations]
            return Explanation(dict(cfg), names, f"{_cfg_text(cfg)} violates {', '.join(names)}")
        for name in sorted(enc, key=lambda n: dom.sizes[dom.index[n]]):
            trial = {k: v for k, v in core.items() if k != name}
            if comp.engine.exists(*dom.box_with(trial))[0][0] == 0:
                core = trial
        lo, hi = dom.box_with(core)
        symbolic = [c for c in self.constraints if c.expr is not None]
        blame = []
        for i, c in enumerate(symbolic):
            mask = np.zeros(len(symbolic), dtype=bool)
            mask[i] = True
            if comp.engine.exists(lo, hi, mask)[0][0] == 0:
                blame.append(c)
        if not blame:
            blame = [c for c in symbolic if c.name in {v.name for v in verdict.violations}]
        user_core = {n: cfg[n] for n in self.space if n in core}
        reasons = []
        for c in blame:
            if c.lhs is not None and c.limit is not None:
                b_lo, b_hi = interval([c.lhs], self._box_bounds(dom, lo, hi))[id(c.lhs)]
                side = "smallest" if c.sense in ("<=", "<") else "largest"
                best = b_lo if c.sense in ("<=", "<") else b_hi
                reasons.append(
                    f"{c.name} {c.sense} {_fmt(c.limit, c.name)} "
                    f"(the {side} {c.name} possible is {_fmt(best, c.name)})"
                )
            else:
                auto_name = c.name.startswith("c") and c.name[1:].isdigit()
                reasons.append(f"{c.name} ({c.expr})" if auto_name else c.name)
        sentence = (
            f"{_cfg_text(user_core) or 'the space itself'} alone cannot satisfy "
            + "; ".join(reasons or [v.name for v in verdict.violations])
            + ", whatever the other parameters are"
        )
        return Explanation(user_core, [c.name for c in blame], sentence)

    def _box_bounds(self, dom: Domain, lo: np.ndarray, hi: np.ndarray) -> dict[str, tuple[Any, Any]]:
        out: dict[str, tuple[Any, Any]] = {
            n: (dom.values[d][lo[0, d]].item(), dom.values[d][hi[0, d]].item())
            for d, n in enumerate(dom.names)
        }
        out.update(dom.continuous)
        for n in dom.free:
            out[n] = self.space[n].bounds()
        return out

    def maximize(self, objective: Any, given: Mapping[str, Any] | None = None) -> Optimum | None:
        """The feasible config with the largest objective (an expression or a cost name)."""
        return self._optimize(objective, given, sign=-1.0)

    def minimize(self, objective: Any, given: Mapping[str, Any] | None = None) -> Optimum | None:
        """The feasible config with the smallest objective (an expression or a cost name)."""
        return self._optimize(objective, given, sign=1.0)

    def _optimize(self, objective: Any, given: Mapping[str, Any] | None, sign: float) -> Optimum | None:
        if isinstance(objective, str):
            if objective in self.cost_exprs:
                expr = self.cost_exprs[objective]
            elif objective in self.space:
                expr = self.space.vars[objective]
            else:
                raise ValueError(
                    f"unknown objective {objective!r}: use a cost name {list(self.cost_exprs)}, a parameter "
                    "name or an expression"
                )
        else:
            expr = as_expr(objective)
        if expr.sort == "bool":
            raise TypeError("the objective must be numeric, not a condition")
        if expr.op == "var" and expr.payload[1] is not None:
            raise TypeError(
                f"the objective {expr.payload[0]!r} is a categorical of non-numeric choices: it has no order "
                "to optimise; optimise a cost or a numeric expression instead"
            )
        comp = self._c()
        engine = comp.engine
        outside = expr.variables() - set(engine.domain.names)
        continuous = sorted(n for n in outside if not self.space[n].is_finite)
        if continuous:
            raise ValueError(
                f"the objective uses the continuous parameter(s) {continuous}: optimisation ranges over "
                "finite values; give them a step (Float(..., step=...))"
            )
        if outside:  # parameters no constraint reads: search over them too
            with self._lock:
                engine = comp.extra_engines.get(frozenset(outside)) or self._engine(outside)
                comp.extra_engines[frozenset(outside)] = engine
        dom = engine.domain
        lo, hi, cfg = self._fixed_box(given, dom)
        box = engine._box
        engine = self._view(cfg, engine)
        f_int = compile_interval([expr], box=box)
        f_vec = compile_vectorized([expr], box=box)
        bounds = interval_bound(engine, f_int)

        def lower(blo: np.ndarray, bhi: np.ndarray) -> np.ndarray:
            a, b = bounds(blo, bhi)
            return sign * a if sign > 0 else sign * b

        def value(points: np.ndarray) -> np.ndarray:
            cols, _ = dom.value_columns(points)
            (v,) = f_vec(cols)
            return sign * np.broadcast_to(np.asarray(v, dtype=np.float64), (len(points),))

        best, val, proven = engine.minimize(lo, hi, lower, value)
        if best is None:
            return None
        config = dom.decode_point(best)
        config.update({k: v for k, v in cfg.items() if k not in config})
        for name in dom.free:
            config.setdefault(name, self.space[name].values()[0])
        return Optimum(self._ordered(config), sign * val, proven)


# ------------------------------------------------------------------------------------------------


class _PredicateView(dict):  # type: ignore[type-arg]
    """A configuration as a predicate sees it during a search.

    Reading a parameter that the search does not fix is an error, never a made-up value: one outside
    the predicate's ``uses``, or a continuous ``Float`` (searches range over finite values only).
    """

    def __init__(self, config: dict[str, Any], constraint: Constraint, space: Space) -> None:
        super().__init__(config)
        self._constraint = constraint
        self._space = space

    def __missing__(self, key: str) -> Any:
        self._refuse(key)
        raise KeyError(key)

    def get(self, key: str, default: Any = None) -> Any:
        if key in self:
            return self[key]
        self._refuse(key)
        return default

    def _refuse(self, key: str) -> None:
        space, c = self._space, self._constraint
        if key not in space:
            return
        if c.uses is not None and key not in c.uses:
            raise SpaceError(
                f"predicate {c.name!r} reads {key!r}, which is not in its uses={list(c.uses)}: add it there"
            )
        if not space[key].is_finite and space.is_active(key, self):
            raise SpaceError(
                f"predicate {c.name!r} reads the continuous parameter {key!r}, which dnnsat cannot search "
                f"exactly: give it a step (Float(..., step=...)) or write the constraint as an expression "
                "over space.vars"
            )


def _piece_points(domain: Domain, piece: Any) -> Iterator[np.ndarray]:
    if len(piece.full_lo):
        for i in range(len(piece.full_lo)):
            pts, _ = domain.points(piece.full_lo[i : i + 1], piece.full_hi[i : i + 1])
            yield pts
    if len(piece.points):
        yield piece.points


_MISSING = object()
#: :func:`_unique_nearest` looks at boxes of at most this many points and checks at most this many of them
_NEAREST_POINTS = 1 << 16
_NEAREST_CHECKS = 1 << 13


def _check_column(name: str, p: Any, arr: np.ndarray) -> None:
    """Raise ``SpaceError`` at the first value of a numeric column outside the parameter's domain."""
    try:
        if arr.dtype == bool or (arr.dtype == object and any(v.__class__ is bool for v in arr)):
            raise TypeError("booleans are not numbers here")
        x = np.asarray(arr, dtype=np.float64)
    except (TypeError, ValueError):
        bad = np.array([v.__class__ is bool or not isinstance(v, int | float | np.number) for v in arr])
        bad = bad if bad.any() else np.ones(len(arr), dtype=bool)
    else:
        if p.is_finite:
            enc = np.asarray(p.encoded(), dtype=np.float64)
            pos = np.clip(np.searchsorted(enc, x), 0, len(enc) - 1)
            near = np.minimum(np.abs(enc[pos] - x), np.abs(enc[np.maximum(pos - 1, 0)] - x))
            bad = ~(near <= 1e-9 * np.maximum(1.0, np.abs(x)))
        else:
            low, high = p.bounds()
            bad = ~((x >= low) & (x <= high))
    if bad.any():
        i = int(np.argmax(bad))
        raise SpaceError(
            f"check_batch: column {name!r} row {i} holds {_py(arr[i])!r}, which is not a value of {name!r} "
            f"({p!r}); pass valid values, or validate=False to skip this check"
        )


def _unique_nearest(
    engine: Engine,
    lo: np.ndarray,
    hi: np.ndarray,
    witness: np.ndarray,
    value: Callable[[np.ndarray], np.ndarray],
) -> np.ndarray | None:
    """The feasible point of the boxes with the smallest ``value``, found by checking at once every point
    no farther than the nearest ``witness`` (feasible points of the boxes); None when several points share
    that value (:meth:`Engine.minimize` then decides by its search order) or the boxes are too big.

    A unique nearest point is the one every exact search returns, so this answers as ``minimize`` does,
    without its branch and bound (tens of small numpy calls on big constraints).
    """
    dom = engine.domain
    if engine.opaque is not None or dom.volume(lo, hi).sum() > _NEAREST_POINTS:
        return None
    pts = dom.canonical(dom.points(lo, hi)[0])  # the points minimize can return
    pts = np.unique(pts[value(pts) <= value(witness).min()], axis=0)  # boxes may share points
    if len(pts) > _NEAREST_CHECKS:
        return None
    pts = pts[engine.feasible_points(pts)]
    if not len(pts):  # cannot happen (the witnesses are among them), but then the search decides
        return None
    vals = value(pts)
    i = int(np.argmin(vals))
    return pts[i] if int((vals <= vals[i] + 1e-9).sum()) == 1 else None


def _holds_on(engine: Engine, point: np.ndarray) -> bool:
    """Whether every constraint surely holds at the finite ``point`` over the engine's continuous ranges."""
    box = point[None, :]
    nb = engine.domain.normalize(box, box)
    if not engine.bounds(nb.lo, nb.hi, None)[0][0]:
        return False
    return engine.opaque is None or bool(engine.opaque(box)[0])


def _scale(p: Any) -> Callable[[Any], float]:
    """The parameter's own scale for distances: log for ``log=True``, else linear."""
    if getattr(p, "log", False):
        return lambda v: math.log(float(v))
    return float


def _rank(ordered: list[Any], value: Any) -> float:
    """Position of ``value`` among the ordered values (between two when it is not one of them)."""
    if value in ordered:
        return float(ordered.index(value))
    try:
        return float(np.searchsorted(np.asarray(ordered, dtype=float), float(value))) - 0.5
    except (TypeError, ValueError):
        return 0.0


def _draw_float(p: Any, rng: np.random.Generator) -> float:
    if p.log:
        return float(math.exp(rng.uniform(math.log(p.low), math.log(p.high))))
    return float(rng.uniform(p.low, p.high))


def _py(x: Any) -> Any:
    return x.item() if hasattr(x, "item") else x


def _fmt(x: Any, name: str | None = None) -> str:
    """A number for messages; with the name of a known cost, in its unit (``"16.0 GiB"``, ``"10.0 ms"``)."""
    if x is None:
        return "?"
    kind = cost_kind(name) if name is not None else None
    if kind is not None and isinstance(x, int | float) and not isinstance(x, bool):
        return format_quantity(x, kind)
    if isinstance(x, float) and x.is_integer():
        x = int(x)
    if isinstance(x, int) and abs(x) >= 10_000:
        return f"{x:.3g}"
    if isinstance(x, float):
        return f"{x:.4g}"
    return str(x)


def _cfg_text(cfg: Mapping[str, Any]) -> str:
    return ", ".join(f"{k}={v!r}" for k, v in cfg.items())


class _progress:
    """A rich progress bar shown only when work runs past a second on a terminal (or when forced)."""

    def __init__(self, label: str, enabled: bool | None) -> None:
        self.label = label
        self.enabled = enabled
        self._bar: Any = None
        self._task: Any = None
        self._start = 0.0

    def __enter__(self) -> Callable[[float], None]:
        import sys
        import time

        self._start = time.perf_counter()
        show = self.enabled if self.enabled is not None else sys.stderr.isatty()

        def report(fraction: float) -> None:
            if not show:
                return
            if self._bar is None:
                if time.perf_counter() - self._start < 1.0 and fraction < 1.0:
                    return
                from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

                self._bar = Progress(
                    TextColumn(self.label),
                    BarColumn(),
                    TextColumn("{task.percentage:>5.1f}%"),
                    TimeElapsedColumn(),
                    transient=True,
                )
                self._bar.start()
                self._task = self._bar.add_task(self.label, total=1.0)
            self._bar.update(self._task, completed=fraction)

        return report

    def __exit__(self, *exc: Any) -> None:
        if self._bar is not None:
            self._bar.stop()
