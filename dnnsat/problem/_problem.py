"""Problem = Space + constraints (+ named costs): the object every dnnsat operation takes.

This module holds the Problem's construction, compilation and checks of given configurations; its
queries live in modules named for them (``_feasible``, ``_prune``, ``_count``, ``_repair``,
``_explain``, ``_optimize``), a model's costs in ``_model``.
"""

from __future__ import annotations

import hashlib
import math
import pickle
import threading
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from ..expr import (
    Expr,
    as_expr,
    compile_scalar,
    compile_vectorized,
    digest,
    label_index,
    vector_forms,
)
from ..solver._boxes import Domain
from ..solver._engine import Engine
from ..space import Space, SpaceError
from ._args import ArgumentError, check_request, check_seconds
from ._columns import ColumnChecks
from ._count import (
    SAMPLE_BOXES,
    TIME_LIMIT,
    _enumerate,
    _sample_decomposed,
    _sample_pool,
    always_feasible,
    count,
    estimate_count,
    sample,
)
from ._explain import explain, is_empty, unsat_core
from ._feasible import feasible_intervals, feasible_values, is_extendable, nearest_feasible_value
from ._format import _py
from ._model import attach
from ._optimize import _optimize
from ._prune import prune
from ._repair import repair
from ._results import Constraint, Estimate, Explanation, OpaqueConstraintWarning, Optimum, Verdict, Violation

if TYPE_CHECKING:
    from ..guard import Guard

__all__ = ["Problem"]

BATCH_ROWS = 8192  # rows per vectorized chunk in check_batch (a column's chunk: 64 KiB)
_CHECK_ROWS = 4 * BATCH_ROWS  # rows per domain check of check_batch's integer columns (fewer calls)

#: What :meth:`Problem.guard` builds: ``dnnsat.guard`` lies above this package and registers its Guard
#: when imported (``import dnnsat`` always imports it), so that this package never imports it.
_guard_factory: Callable[..., Guard] | None = None


def register_guard(factory: Callable[..., Guard]) -> None:
    """Set what :meth:`Problem.guard` builds (called by ``dnnsat.guard`` when it is imported)."""
    global _guard_factory
    _guard_factory = factory


@dataclass
class _Compiled:
    domain: Domain
    #: builds the solver engine, on first use of :attr:`engine` (``check`` never waits for it)
    make_engine: Callable[[], Engine]
    scalar: Callable[[Mapping[str, Any]], tuple[Any, ...]]  # constraints then costs then lhs
    n_constraints: int
    #: the symbolic constraints, compiled for ``check_batch`` on first use of :attr:`vector`
    vector_exprs: list[Expr]
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
    _lazy: dict[str, Any] = field(default_factory=dict)
    _lazy_lock: threading.Lock = field(default_factory=threading.Lock)

    def _once(self, key: str, build: Callable[[], Any]) -> Any:
        """``build()``, called once (also when threads ask at once) and kept."""
        if key not in self._lazy:
            with self._lazy_lock:
                if key not in self._lazy:
                    self._lazy[key] = build()
        return self._lazy[key]

    @property
    def engine(self) -> Engine:
        """The solver engine (bounds, Z3), built on first use: a deep network's first ``check`` does
        not pay for it."""
        return self._once("engine", self.make_engine)  # type: ignore[no-any-return]

    @property
    def vector(self) -> Callable[[Mapping[str, Any]], tuple[Any, ...]] | None:
        """The vectorized evaluator of the symbolic constraints (``check_batch``), compiled on first use;
        None without symbolic constraints."""

        def build() -> Callable[[Mapping[str, Any]], tuple[Any, ...]] | None:
            if not self.vector_exprs:
                return None
            box = self.domain.value_box()  # check_batch's values lie in the domain (it checks them)
            return compile_vectorized(vector_forms(self.vector_exprs, box), box, in_place=True)

        return self._once("vector", build)  # type: ignore[no-any-return]


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

    def _domain(self, extra: Iterable[str] = ()) -> Domain:
        """The domain of the constrained parameters (plus ``extra`` ones)."""
        exprs = [c.expr for c in self.constraints if c.expr is not None]
        relevant = set().union(*(e.variables() for e in exprs)) if exprs else set()
        return Domain(self.space, relevant | self._opaque_reads() | set(extra))

    def _engine(self, extra: Iterable[str] = (), domain: Domain | None = None) -> Engine:
        """An engine over the constrained parameters (plus ``extra`` ones), or over ``domain``."""
        exprs = [c.expr for c in self.constraints if c.expr is not None]
        domain = self._domain(extra) if domain is None else domain
        opaque = [c for c in self.constraints if c.predicate is not None]
        predicate = self._point_predicate(domain, opaque) if opaque else None
        label = "the Python predicate(s) " + ", ".join(repr(c.name) for c in opaque)
        return Engine(domain, exprs, predicate, z3_timeout_ms=self.z3_timeout_ms, opaque_label=label)

    def _compile(self) -> _Compiled:
        exprs = [c.expr for c in self.constraints if c.expr is not None]
        domain = self._domain()
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
        compiled = _Compiled(
            domain, lambda: self._engine(domain=domain), scalar, len(exprs), exprs, lhs_slots
        )
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
        first one that does not (integer columns are checked chunk by chunk, a few cheap passes each);
        ``validate=False`` skips that (faster, for values known to be valid: the evaluator is compiled
        for values inside the domain, and answers for values outside it are unspecified).
        """
        comp = self._c()
        env: dict[str, Any] = {}
        n = None
        needed = comp.domain.names + list(comp.domain.continuous)
        # what check_batch allocates per row: the answer, label indices (a list, then an array) and the
        # columns it fills in for absent conditional parameters
        labelled = sum(1 for k in columns if k in self.space and self.space[k].labels is not None)
        row_bytes = 1 + 44 * labelled + 8 * sum(1 for m in needed if m not in columns)
        checks = ColumnChecks()  # integer columns are tested chunk by chunk, below
        try:
            for name, col in columns.items():
                if name not in self.space:
                    raise SpaceError(f"unknown parameter {name!r} in columns; parameters: {list(self.space)}")
                arr = np.asarray(col)
                if validate and not isinstance(col, np.ndarray) and arr.dtype != object:
                    arr = np.asarray(col, dtype=object) if any(v.__class__ is bool for v in col) else arr
                if n is None:
                    n = len(arr)
                    check_request("check_batch", "rows", n, row_bytes)
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
                    checks.add(name, p, arr)
                env[name] = arr
            if n is None:
                raise ValueError("check_batch needs at least one column")
            missing = [m for m in needed if m not in env and not self.space[m].condition]
            if missing:
                raise SpaceError(f"check_batch: missing column(s) {missing}")
        except (SpaceError, ValueError):
            earlier = checks.first_error()  # a bad value of an earlier column is refused first
            if earlier is not None:
                raise earlier from None
            raise
        for m in needed:
            if m not in env:
                env[m] = np.full(n, self.space[m].encoded()[0])
        ok = np.ones(n, dtype=bool)
        vector = comp.vector
        if vector is None:
            checks.finish()
        else:
            for start in range(0, n, BATCH_ROWS):  # cache-sized chunks: several times faster than columns
                stop = min(start + BATCH_ROWS, n)
                if start % _CHECK_ROWS == 0:  # the next few chunks, just before they are evaluated
                    checks.chunk(start, min(start + _CHECK_ROWS, n))
                chunk = {k: col[start:stop] for k, col in env.items()}
                part = ok[start:stop]
                for v in vector(chunk):
                    part &= np.broadcast_to(v, (stop - start,))
        opaque = [c for c in self.constraints if c.predicate is not None]
        if opaque:
            names = list(columns)
            for i in np.flatnonzero(ok):
                row = {k: _py(np.asarray(columns[k])[i]) for k in names}
                ok[i] = all(bool(c.predicate(row)) for c in opaque if c.predicate is not None)
        return ok

    # -- forward checking (_feasible.py) ------------------------------------------------------------
    # Each query below delegates to the module function of the same name in the module named in its
    # section (``count`` here calls ``_count.count``): the Problem keeps the API, the modules the work.
    def is_extendable(self, partial: Mapping[str, Any]) -> bool:
        """Whether ``partial`` (some parameters set) extends to a feasible configuration.

        True only with a feasible completion found (a witness); values of continuous ``Float``
        parameters are honoured. False when none exists, or, rarely and logged as a warning, when the
        engine cannot decide within its box budget. A complete configuration gets the exact
        :meth:`check` (Python predicates included).
        """
        return is_extendable(self, partial)

    def feasible_values(self, name: str, given: Mapping[str, Any] | None = None) -> list[Any]:
        """Values of ``name`` that extend ``given`` to at least one feasible configuration.

        Forward checking for finite parameters: every value returned has a feasible completion (a
        witness found); a value is left out only when it has none or, rarely and logged as a warning,
        when the engine cannot decide it within its box budget. Values of continuous parameters in
        ``given`` are honoured. A continuous ``Float`` returns ``[low, high]``, the hull of
        :meth:`feasible_intervals`, or ``[]``. Values come in the parameter's own order.
        """
        return feasible_values(self, name, given)

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
        return feasible_intervals(self, name, given)

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
        return nearest_feasible_value(self, name, value, given, rng=rng)

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
        if _guard_factory is None:  # cannot happen after `import dnnsat`, which imports dnnsat.guard
            raise RuntimeError("Problem.guard() needs dnnsat.guard: import dnnsat (or dnnsat.guard) first")
        return _guard_factory(self, seed=seed, domains=domains, witnesses=witnesses)

    # -- pruning (_prune.py) and emptiness (_explain.py) ---------------------------------------------
    def prune(self, max_seconds: float | None = TIME_LIMIT) -> Space:
        """A reduced space: every value that occurs in some feasible configuration, nothing else.

        Finite parameters keep their kind where the feasible values stay a contiguous run of the grid
        and become ``Categorical`` otherwise; unconstrained and continuous parameters are kept; a
        conditional parameter never active in a feasible configuration is dropped. Raises
        :class:`InfeasibleSpaceError` when nothing is feasible. At ``max_seconds`` (default
        ``TIME_LIMIT``, 60 s; ``None``: no limit) the values not decided yet are kept (still sound)
        and a :class:`PartialResultWarning` says so.
        """
        return prune(self, max_seconds)

    def is_empty(self) -> bool:
        """True when no configuration is feasible (see :meth:`unsat_core` for the proof)."""
        return is_empty(self)

    def unsat_core(self) -> list[str]:
        """A minimal set of constraint names that together admit no configuration ([] when feasible)."""
        return unsat_core(self)

    # -- counting, enumerating and sampling (_count.py) ----------------------------------------------
    def count(self, progress: bool | None = None, max_seconds: float | None = TIME_LIMIT) -> int:
        """Exact number of feasible configurations of the finite parameters (a Python int, any size).

        Inactive conditional parameters count once; unconstrained finite parameters multiply the
        count. A progress bar is shown on a terminal when counting takes more than a second.
        ``max_seconds`` (default ``TIME_LIMIT``, 60 s; ``None`` or ``math.inf``: no limit) bounds the
        time: the work is predicted first (:func:`count_work`) and a count predicted to take longer is
        refused at once; one that runs past it is stopped. Both raise :class:`TimeLimitError` (a
        ``TimeoutError``) whose ``.estimate`` and message give :meth:`estimate_count`'s answer. The
        first ``SAMPLE_BOXES`` boxes are :meth:`sample`'s decomposition, which is kept for it; the
        boxes it leaves undecided are then decomposed too.
        """
        return count(self, progress, max_seconds)

    def always_feasible(self) -> bool:
        """True when every configuration of the space is feasible: no constraint can ever bind.

        Proved by interval bounds over the whole space, else by an exact count that may take up to a
        second (finite problems) or by Z3 (constrained Floats); False when neither settles it in time.
        Computed once.
        """
        return always_feasible(self)

    def estimate_count(
        self,
        samples: int = 20_000,
        seed: int | None = 0,
        max_boxes: int = 50_000,
        max_seconds: float | None = TIME_LIMIT,
    ) -> Estimate:
        """Estimated number of feasible configurations with a 95 % confidence interval.

        Bounds settle most of the space exactly; the undecided rest is estimated by uniform sampling.
        Within ``max_seconds`` (default ``TIME_LIMIT``, 60 s; ``None``: no limit): the bounds get half
        of it, the sampling the rest, and fewer samples at the limit give a wider interval. Beyond
        float64's range (2**1024) the fields are exact Python ints.
        """
        return estimate_count(self, samples, seed, max_boxes, max_seconds)

    def enumerate(
        self, limit: int | None = None, max_seconds: float | None = TIME_LIMIT
    ) -> Iterator[dict[str, Any]]:
        """Feasible configurations in a deterministic order (unconstrained finite parameters vary last).

        ``limit`` caps how many are produced (``None``: all of them). ``max_seconds`` (default
        ``TIME_LIMIT``, 60 s; ``None``: no limit) bounds the time spent producing them (not the
        caller's time between them): past it the iteration raises :class:`TimeLimitError` after the
        configurations produced so far.
        """
        if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 0):
            raise ArgumentError(
                f"enumerate: limit must be None or an integer >= 0 (e.g. limit=100), got {limit!r}"
            )
        check_seconds(max_seconds, "enumerate")
        return _enumerate(self, limit, max_seconds)

    def sample(
        self,
        n: int,
        seed: int | None = None,
        max_boxes: int = SAMPLE_BOXES,
        max_seconds: float | None = TIME_LIMIT,
    ) -> list[dict[str, Any]]:
        """``n`` feasible configurations drawn uniformly (with replacement) from the feasible finite set.

        Exact uniformity in two steps. Points are first drawn uniformly from the whole space and kept
        when feasible, up to ``max(REJECTION_DRAWS, 8 n)`` draws: the cheapest exact sampler when a fair
        share of the space is feasible (a few thousand point checks, no bounds). When that runs short,
        the rest come from a decomposition: bounds split the space into surely-feasible boxes,
        enumerated points and undecided boxes; a box is drawn by volume, a point uniformly inside it,
        and points from undecided boxes are kept only when feasible. The decomposition (per
        ``max_boxes``) is computed once, by that call or by :meth:`count`, and kept. The draws are a
        function of ``seed`` alone, whichever calls came before. Continuous parameters that no
        constraint uses are drawn uniformly (log-uniformly when ``log=True``). Past ``max_seconds``
        (default ``TIME_LIMIT``, 60 s; ``None``: no limit) raises :class:`TimeLimitError` with the
        configurations drawn so far in ``.partial``.
        """
        return sample(self, n, seed, max_boxes, max_seconds)

    def _sample_decomposed(self, n: int, seed: int | None) -> list[dict[str, Any]]:
        """See :func:`dnnsat.problem._count._sample_decomposed`."""
        return _sample_decomposed(self, n, seed)

    def _sample_pool(self, comp: _Compiled, max_boxes: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """See :func:`dnnsat.problem._count._sample_pool`."""
        return _sample_pool(self, comp, max_boxes)

    # -- repairs (_repair.py), explanations (_explain.py), optima (_optimize.py) ----------------------
    def repair(self, config: Mapping[str, Any], fixed: Iterable[str] = ()) -> dict[str, Any] | None:
        """A feasible config changing as few parameters as possible, then as little as possible.

        Distance: number of changed parameters first, then the sum over changed parameters of the
        distance over the domain's length (value index for finite parameters, the parameter's own scale
        for continuous ``Float``). ``fixed`` names keep their value. Returns the config unchanged when it
        is feasible and None when no repair exists. With constrained Floats the candidates are: the
        Floats kept and the finite part repaired, or one Float moved to its nearest feasible value; when
        neither exists, each parameter in turn takes its nearest value that still extends the others.
        """
        return repair(self, config, fixed)

    def explain(self, config: Mapping[str, Any]) -> Explanation | None:
        """A minimal set of the config's assignments that alone admits no feasible completion.

        Returns None when the config is feasible. Dropping any assignment of the core makes it
        extendable; ``constraints`` lists the constraints the core cannot satisfy.
        """
        return explain(self, config)

    def maximize(self, objective: Any, given: Mapping[str, Any] | None = None) -> Optimum | None:
        """The feasible config with the largest objective (an expression or a cost name)."""
        return _optimize(self, objective, given, sign=-1.0)

    def minimize(self, objective: Any, given: Mapping[str, Any] | None = None) -> Optimum | None:
        """The feasible config with the smallest objective (an expression or a cost name)."""
        return _optimize(self, objective, given, sign=1.0)


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
