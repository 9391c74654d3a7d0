"""``Guard``: per-trial decisions of a sampler or tuner wrapper, fast enough for its inner loop.

A wrapper around a tool's sampler asks one question many times: "these parameters are decided and the
tool proposes this value for the next one: keep it, or which value is nearest that still extends to a
feasible configuration?" :meth:`Problem.guard` returns a :class:`Guard` that answers it
(:meth:`Guard.propose`), repairs whole or partial configurations (:meth:`Guard.repair`), completes
partial ones (:meth:`Guard.complete`) and decides extendability (:meth:`Guard.is_extendable`). Every
answer is exact (the Problem's own answer); the Guard only gets it cheaper:

* a pool of known feasible configurations (sampled witnesses plus configurations the wrapper reports
  with :meth:`Guard.add_witness`) confirms most proposals with one vectorized ``check_batch``, and the
  last witness of each thread with one exact check;
* when few completions remain, all of them are checked in one vectorized call instead of a search;
* a repair that changes one or two parameters is found with one vectorized call
  (:mod:`dnnsat.guard._few_changes`);
* ``feasible_values`` and ``feasible_intervals`` answers are kept in LRU caches shared by every Guard
  of the problem in the process.

Only the solver (Z3) is serialized, by its own process-wide lock; the Guard's fast paths hold no
lock while they compute. Pickleable (caches are rebuilt) and seeded: choices among unordered values
are a function of the seed, the caller's ``key`` and the parameter's name, never of thread timing.
"""

from __future__ import annotations

import logging
import math
import threading
import weakref
import zlib
from bisect import bisect_left
from collections import OrderedDict, deque
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Generic, TypeVar

import numpy as np

from ..problem._args import check_count, check_seed
from ..problem._format import _py
from ..problem._problem import register_guard
from ._decisions import Decision, GuardStats
from ._few_changes import Moves, nearest_changes
from ._pickling import RebuiltOnUnpickle, SharedCounters
from ._within import Within, _in_domain, _is_number

if TYPE_CHECKING:
    from ..problem import Problem
    from ..space import Param, Space

__all__ = ["DEFAULT_SEED", "Guard", "sampled_witnesses"]

_logger = logging.getLogger("dnnsat.guard")

_V = TypeVar("_V")
#: Seeds the Guard's choices when no seed is given ("dnnsat" in ASCII).
DEFAULT_SEED = 0x646E6E736174
#: Candidate values re-checked exactly, nearest first, before the exact answer is computed.
_MAX_CANDIDATES = 8
#: Attributes bound to a process: dropped by pickling, rebuilt by ``_reset``.
_UNPICKLED = ("_lock", "_local", "_pool", "_fv_cache", "_span_cache")


class _LRU(Generic[_V]):
    """A bounded least-recently-used map that threads share; values are computed outside the lock."""

    def __init__(self, size: int) -> None:
        self._size = size
        self._data: OrderedDict[Hashable, _V] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: Hashable, compute: Callable[[], _V]) -> _V:
        with self._lock:
            if key in self._data:
                self._data.move_to_end(key)
                return self._data[key]
        value = compute()
        with self._lock:
            self._data[key] = value
            if len(self._data) > self._size:
                self._data.popitem(last=False)
        return value


_CACHES: weakref.WeakKeyDictionary[Problem, tuple[str, _LRU[Any], _LRU[Any]]] = weakref.WeakKeyDictionary()
_CACHES_LOCK = threading.Lock()


def _problem_caches(problem: Problem, size: int) -> tuple[_LRU[Any], _LRU[Any]]:
    """The (feasible values, feasible intervals) caches of a problem: one pair per process, renewed
    when the problem's constraints changed since (its fingerprint)."""
    fingerprint = problem.fingerprint()
    with _CACHES_LOCK:
        hit = _CACHES.get(problem)
        if hit is None or hit[0] != fingerprint:
            hit = _CACHES[problem] = (fingerprint, _LRU(size), _LRU(size))
        return hit[1], hit[2]


class Guard(RebuiltOnUnpickle, SharedCounters):
    """Incremental, exact decisions over a problem's pruned space (see :meth:`Problem.guard`).

    Args:
        problem: the :class:`~dnnsat.Problem`.
        seed: seeds the choice among unordered categorical values (default: a fixed seed).
        domains: the pruned values of each finite parameter (``[]`` for one never active), e.g. a
            record stored by another worker; default ``problem.prune()``, computed on first use.
        witnesses: feasible configurations for the pool; default 64 sampled ones (spaces without
            conditions), drawn on first use.
        enumerate_limit: at most this many completions are checked by enumeration.
        cache_size: entries of the shared ``feasible_values``/``feasible_intervals`` caches.
    """

    _unpickled = _UNPICKLED
    _log = _logger

    def __init__(
        self,
        problem: Problem,
        *,
        seed: int | None = None,
        domains: Mapping[str, Sequence[Any]] | None = None,
        witnesses: Iterable[Mapping[str, Any]] | None = None,
        enumerate_limit: int = 4096,
        cache_size: int = 200_000,
    ) -> None:
        seed = check_seed(seed, "Guard")
        enumerate_limit = check_count(enumerate_limit, "enumerate_limit", "Guard", example=4096)
        cache_size = check_count(cache_size, "cache_size", "Guard", example=200_000)
        space = problem.space
        self.problem = problem
        self.space: Space = space
        self.seed = DEFAULT_SEED if seed is None else seed % 2**64
        self.enumerate_limit = enumerate_limit
        self.stats = GuardStats()
        self._cache_size = cache_size
        self._order = list(space.conditional_order)
        self._names = frozenset(space.names)
        self._conditional = any(space[n].condition for n in space.names)
        self._pruned: Space | None = None
        self._values: dict[str, list[Any]] | None = None
        if domains is not None:
            self._values = {k: list(v) for k, v in domains.items() if k in self._names and space[k].is_finite}
        self._witnesses = None if witnesses is None else [dict(w) for w in witnesses]
        self._recent: deque[dict[str, Any]] = deque(maxlen=64)
        self._warned: set[str] = set()
        self._reset()

    def _reset(self) -> None:
        self._lock = threading.Lock()  # the pool, the counters and the warnings; never held while solving
        self._local = threading.local()  # each thread's last witness
        self._pool: dict[str, np.ndarray] | None = None
        self._fv_cache, self._span_cache = _problem_caches(self.problem, self._cache_size)

    # -- the pruned space ---------------------------------------------------------------------------
    @property
    def pruned(self) -> Space:
        """``problem.prune()``, computed once (raises ``InfeasibleSpaceError`` when nothing is feasible)."""
        if self._pruned is None:
            self._pruned = self.problem.prune()
        return self._pruned

    @property
    def domains(self) -> dict[str, list[Any]]:
        """The pruned values of each finite parameter (``[]`` for one never active)."""
        if self._values is None:
            pruned = self.pruned
            self._values = {
                n: (list(pruned[n].values()) if n in pruned else [])
                for n in self.space.names
                if self.space[n].is_finite
            }
        return self._values

    def add_witness(self, config: Mapping[str, Any]) -> None:
        """Add a feasible complete configuration (e.g. a finished trial's) to the witness pool (not
        re-checked: the caller knows it is feasible)."""
        if self._conditional or len(config) != len(self.space):
            return
        with self._lock:
            self._recent.append(dict(config))
            self._pool = None

    # -- decisions ----------------------------------------------------------------------------------
    def propose(
        self, name: str, value: Any, given: Mapping[str, Any], *, within: Within | None = None, key: int = 0
    ) -> Any:
        """``value`` when ``given`` plus ``name=value`` extends to a feasible configuration, else the
        nearest value (within ``within``) that does; None when none does. See :meth:`decide`."""
        return self.decide(name, value, given, within=within, key=key).value

    def decide(
        self, name: str, value: Any, given: Mapping[str, Any], *, within: Within | None = None, key: int = 0
    ) -> Decision:
        """Keep ``value`` of ``name`` or replace it by the nearest value that extends ``given``.

        Nearest: distance in the parameter's own scale (``within.log`` when set) for numbers, rank for
        ordered choices, a seeded choice among unordered ones (a function of ``seed``, ``key`` and
        ``name``). Only values ``within`` accepts are returned (default: the parameter's domain).
        ``given`` may hold values outside the domain (ignored, warned once) and inactive ones.
        """
        param = self.space[name]
        given = self.clean({k: v for k, v in given.items() if k != name})
        if not self.space.is_active(name, given) or (within is not None and not within.overlaps(param)):
            self._bump(unchecked=1)
            return Decision(value, "unchecked")
        if (within is None or within.contains(value)) and self._extends(name, value, given):
            self._bump(proposals=1, kept=1)
            return Decision(value, "kept")
        new = self._nearest(name, value, given, within, key)
        if new is None:
            self._bump(proposals=1, dead_ends=1)
            return Decision(None, "dead_end")
        if param.is_finite:
            steps = _steps(param, value, new)
            self._bump(proposals=1, repaired=1, repair_steps=steps)
            return Decision(new, "repaired", steps)
        self._bump(proposals=1, repaired=1, float_repaired=1)
        return Decision(new, "repaired")

    def is_extendable(self, partial: Mapping[str, Any]) -> bool:
        """Whether ``partial`` (values in the domain) extends to a feasible configuration (exact)."""
        cfg = dict(partial)
        if not self._conditional and cfg:
            name = next(reversed(cfg))
            if self._fast_extendable(name, cfg[name], cfg):
                return True
        return self._extendable(cfg)

    def complete(self, partial: Mapping[str, Any]) -> dict[str, Any] | None:
        """A feasible configuration agreeing with ``partial``; None when none exists.

        A witness that agrees, else parameter by parameter in the space's order: each open one takes
        the first (finite) or lowest (continuous) value that still extends.
        """
        cfg = self.clean(partial)
        if not self._extendable(cfg):
            return None
        if cfg and not self._conditional:
            last = next(reversed(cfg))
            if self._fast_extendable(last, cfg[last], cfg):
                return {k: self._local.witness[k] for k in self._order}
        for name in self._order:
            if name in cfg or not self.space.is_active(name, cfg):
                continue
            param = self.space[name]
            start = param.values()[0] if param.is_finite else param.bounds()[0]
            value = start if self._extends(name, start, cfg) else self._nearest(name, start, cfg, None, 0)
            if value is None:
                return None
            cfg[name] = value
        return {k: cfg[k] for k in self._order if k in cfg}

    def repair(
        self,
        config: Mapping[str, Any],
        keep: Iterable[str] = (),
        *,
        within: Mapping[str, Within] | None = None,
        key: int = 0,
        ties: str = "solver",
    ) -> dict[str, Any] | None:
        """A feasible (or, for a partial one, feasibly extendable) configuration close to ``config``.

        ``keep`` names values that must not change; ``within`` limits the values of some parameters.
        A complete configuration in the domain gets ``problem.repair``'s answer (fewest changed
        parameters, then the smallest moves), found with vectorized calls when one or two changes suffice.
        Among equally good single changes ``ties="solver"`` keeps ``problem.repair``'s choice (its
        search runs); ``ties="order"`` takes the earlier parameter in the space's order (no search;
        distances over the domain's length), the rule DnnSATSampler has always used.
        Otherwise (a partial configuration, values outside the domain, or a repair that leaves
        ``within``) forward checking in the space's order: each value is kept when it extends the ones
        before it, else replaced as :meth:`decide` does. None when no repair exists.
        """
        keep = set(keep)
        within = within or {}
        config = {k: v for k, v in config.items() if k in self._names}
        clean = self.clean(config)
        if len(clean) == len(config) and not self.missing(clean):
            if self.problem.satisfied(clean):
                return {k: clean[k] for k in self._order if k in clean}
            repaired = self._repair_few(clean, keep, ties)
            if repaired is None:
                self._bump(solver_calls=1)
                repaired = self.problem.repair(clean, fixed=sorted(keep))
            if repaired is None:
                return None
            if all(k not in within or within[k].contains(v) for k, v in repaired.items()):
                self._bump(repairs=1)
                return dict(repaired)
        cfg = {k: clean[k] for k in keep if k in clean}
        for k in self._order:
            if k in keep or k not in config or not self.space.is_active(k, cfg):
                continue
            if self._extends(k, config[k], cfg):
                cfg[k] = _domain_value(self.space[k], config[k])
                continue
            value = self._nearest(k, config[k], cfg, within.get(k), key)
            if value is None:
                return None
            cfg[k] = value
        self._bump(repairs=1)
        return cfg

    def feasible_values(self, name: str, given: Mapping[str, Any]) -> tuple[Any, ...]:
        """``problem.feasible_values(name, given)`` (``given`` in the domain), enumerated when few
        completions remain, and cached."""
        values = self.domains
        for k, v in given.items():  # quick reject against the pruned domains
            dom = values.get(k)
            if dom is not None and v not in dom:
                return ()

        def compute() -> tuple[Any, ...]:
            found = self._enumerate_values(name, given)
            if found is None:
                self._bump(solver_calls=1)
                return tuple(self.problem.feasible_values(name, dict(given)))
            return found

        return self._fv_cache.get((name, tuple(sorted(given.items()))), compute)

    def redraw_floats(
        self, config: Mapping[str, Any], n: int, rng: np.random.Generator
    ) -> list[dict[str, Any]]:
        """Up to ``n`` feasible variants of ``config``, each with one continuous ``Float`` redrawn
        uniformly (in its own scale) from the values that keep the rest feasible."""
        space = self.space
        config = {k: v for k, v in config.items() if k in self._names}
        spans: list[tuple[str, float, float]] = []  # (name, low, high) in the parameter's own scale
        for name in (k for k in config if not space[k].is_finite):
            scale = math.log if space[name].log else float  # type: ignore[attr-defined]
            given = {k: v for k, v in config.items() if k != name}
            spans += [(name, scale(lo), scale(hi)) for lo, hi in self.problem.feasible_intervals(name, given)]
        widths = np.array([hi - lo for _, lo, hi in spans])
        if not spans or widths.sum() <= 0:
            return []
        out: list[dict[str, Any]] = []
        for i in rng.choice(len(spans), size=n, p=widths / widths.sum()):
            name, lo, hi = spans[int(i)]
            t = float(rng.uniform(lo, hi))
            candidate = {**config, name: math.exp(t) if space[name].log else t}  # type: ignore[attr-defined]
            if self.problem.satisfied(candidate):
                out.append(candidate)
        return out

    def feasible_configs(self, box: Mapping[str, Sequence[Any]]) -> list[dict[str, Any]]:
        """Every feasible configuration of a product of value lists (one list per parameter, in the
        domain), in depth-first order of the space (inactive conditional parameters omitted).

        Spaces without conditions and continuous parameters: checked in vectorized chunks; otherwise
        depth first with forward checking (``problem.feasible_values``).
        """
        if not self._conditional and all(self.space[n].is_finite for n in self._order):
            return self._feasible_product(box)
        space, order, problem = self.space, self._order, self.problem
        configs: list[dict[str, Any]] = []

        def walk(i: int, partial: dict[str, Any]) -> None:
            while i < len(order) and not space.is_active(order[i], partial):
                i += 1
            if i == len(order):
                configs.append(dict(partial))
                return
            name = order[i]
            param = space[name]
            if param.is_finite:
                encoded = {param.encode(v) for v in problem.feasible_values(name, dict(partial))}
                candidates = [v for v in box[name] if param.encode(v) in encoded]
            else:
                candidates = list(box[name])
            for value in candidates:
                partial[name] = value
                walk(i + 1, partial)
                del partial[name]

        walk(0, {})
        if any(not space[n].is_finite for n in order):  # continuous values are not forward-checked
            configs = [c for c in configs if problem.satisfied(c)]
        return configs

    def _feasible_product(
        self, box: Mapping[str, Sequence[Any]], chunk: int = 200_000
    ) -> list[dict[str, Any]]:
        names = list(box)
        sizes = [len(box[n]) for n in names]
        total = math.prod(sizes)
        out: list[dict[str, Any]] = []
        for start in range(0, total, chunk):
            idx = np.unravel_index(np.arange(start, min(total, start + chunk)), sizes)
            columns = {n: np.asarray(box[n], dtype=object)[i] for n, i in zip(names, idx)}
            ok = self.problem.check_batch({n: np.array(c.tolist()) for n, c in columns.items()})
            out += [{n: columns[n][r] for n in names} for r in np.flatnonzero(ok)]
        return out

    def clean(self, config: Mapping[str, Any]) -> dict[str, Any]:
        """Values of problem parameters normalised to the domain; unknown names, values outside the
        domain (warned once per parameter) and inactive ones dropped."""
        out: dict[str, Any] = {}
        for k, v in config.items():
            if k not in self._names:
                continue
            try:
                out[k] = _domain_value(self.space[k], v)
            except Exception:
                self._warn_once(
                    f"domain:{k}", f"value {v!r} of {k!r} is outside the problem's domain; ignored"
                )
        if self._conditional:
            for k in [k for k in self._order if k in out]:
                if not self.space.is_active(k, out):
                    del out[k]
        return out

    def missing(self, partial: Mapping[str, Any]) -> list[str]:
        """Active parameters that ``partial`` leaves open, in the space's order."""
        return [k for k in self._order if k not in partial and self.space.is_active(k, partial)]

    def in_domain(self, name: str, value: Any) -> bool:
        """Whether ``value`` lies in the domain of parameter ``name``."""
        return _in_domain(self.space[name], value)

    def steps(self, name: str, a: Any, b: Any) -> float:
        """Positions between two values of a finite parameter (1 for unordered choices)."""
        return _steps(self.space[name], a, b)

    # -- internals ----------------------------------------------------------------------------------
    def _nearest(
        self, name: str, proposal: Any, given: Mapping[str, Any], within: Within | None, key: int
    ) -> Any:
        """The value of ``name`` within ``within`` closest to ``proposal`` that extends ``given``, or None."""
        if self.space[name].is_finite:
            return self._nearest_finite(name, proposal, given, within, key)
        return self._nearest_float(name, proposal, given, within)

    def _nearest_finite(
        self, name: str, proposal: Any, given: Mapping[str, Any], within: Within | None, key: int
    ) -> Any:
        """Ordered values: the nearest few values of the pruned domain are re-checked one by one (the
        usual repair moves a step or two), then every feasible value is computed. Unordered choices:
        one drawn among the feasible ones."""
        param = self.space[name]
        domain = [v for v in self.domains.get(name, []) if within is None or within.contains(v)]
        order = _closeness(param, within, proposal)
        if order is None:  # unordered: a seeded choice among the feasible values
            allowed = list(self.feasible_values(name, given)) if given else domain
            allowed = [v for v in allowed if within is None or within.contains(v)]
            if not allowed:
                return None
            rng = np.random.default_rng([self.seed, key, zlib.crc32(name.encode())])
            return allowed[int(rng.integers(len(allowed)))]
        domain.sort(key=order)
        for value in domain[:_MAX_CANDIDATES]:
            if not given or self._extendable({**given, name: value}):
                return value
        feasible = set(self.feasible_values(name, given))
        return next((v for v in domain[_MAX_CANDIDATES:] if v in feasible), None)

    def _nearest_float(
        self, name: str, proposal: Any, given: Mapping[str, Any], within: Within | None
    ) -> float | None:
        """Candidates from ``problem.feasible_intervals`` (cached per ``given``) intersected with
        ``within``, nearest first in the parameter's own scale, each re-checked exactly."""
        param = self.space[name]
        spans = self._span_cache.get(
            (name, tuple(sorted(given.items()))),
            lambda: tuple(self.problem.feasible_intervals(name, dict(given))),
        )
        within = within or Within.of(param)
        candidates = within.candidates(spans, proposal, log=bool(getattr(param, "log", False)))
        for value in candidates[:_MAX_CANDIDATES]:
            if self.problem.is_extendable({**given, name: value}):
                return value
        return None

    def _extends(self, name: str, value: Any, given: Mapping[str, Any]) -> bool:
        """Exact: ``given`` plus ``name=value`` extends feasibly (known witnesses first, then the solver)."""
        if not self._conditional and self._fast_extendable(name, value, given):
            return True
        try:
            value = _domain_value(self.space[name], value)
        except Exception:
            return False  # outside the problem's domain
        return self._extendable({**given, name: value})

    def _fast_extendable(self, name: str, value: Any, given: Mapping[str, Any]) -> bool:
        """Cheap sufficient test (spaces without conditions): some known feasible configuration agrees
        with ``given`` + ``name=value``. The thread's last witness (one exact check), then the pool (one
        vectorized ``check_batch``). True is exact; False only means "ask the solver"."""
        param = self.space[name]
        try:
            fixed = {**given, name: param.decode(param.encode(value))}
        except Exception:
            return False
        dom = self.domains.get(name)
        if dom is not None and fixed[name] not in dom:
            return False
        witness = getattr(self._local, "witness", None)
        if witness is not None:
            candidate = {**witness, **fixed}
            if self.problem.satisfied(candidate):
                self._local.witness = candidate
                return True
        if self._few_completions(given):
            return False  # about as cheap as the pool: the exact answer
        pool = self._pool_columns()
        if pool is None:
            return False
        n = len(next(iter(pool.values())))
        columns = {
            k: (np.full(n, fixed[k], dtype=col.dtype) if k in fixed else col) for k, col in pool.items()
        }
        ok = self.problem.check_batch(columns)
        if not ok.any():
            return False
        i = int(np.argmax(ok))
        self._local.witness = {k: _py(columns[k][i]) for k in columns}
        self._bump(pool_hits=1)
        return True

    def _pool_columns(self) -> dict[str, np.ndarray] | None:
        """Columns of the witness pool: sampled feasible configurations plus reported ones."""
        pool = self._pool
        if pool is not None:
            return pool
        if self._witnesses is None:
            self._witnesses = sampled_witnesses(self.problem, 64)
        with self._lock:
            configs = list(self._witnesses) + list(self._recent)
            if not configs:
                return None
            self._pool = {k: np.array([c[k] for c in configs]) for k in self.space.names}
            return self._pool

    def _few_completions(self, given: Mapping[str, Any]) -> bool:
        free = [k for k in self._order if k not in given]
        if any(not self.space[k].is_finite for k in free):
            return False  # a free continuous parameter: no enumeration
        return math.prod(len(self.domains.get(k) or ()) for k in free) <= self.enumerate_limit

    def _enumerate_values(self, name: str, given: Mapping[str, Any]) -> tuple[Any, ...] | None:
        """Exact feasible values by one vectorized check of every completion, when few remain.

        Completions range over the pruned domains (which hold every value of every feasible
        configuration), so the answer equals ``problem.feasible_values``; None when too many remain.
        """
        if self._conditional:
            return None
        free = [k for k in self._order if k not in given and k != name]
        domains = [self.domains.get(k) for k in [name, *free]]
        if any(d is None for d in domains) or any(not self.space[k].is_finite for k in free):
            return None
        size = math.prod(len(d) for d in domains if d is not None)
        if size == 0:
            return ()
        if size > self.enumerate_limit:
            return None
        grids = np.meshgrid(*[np.arange(len(d)) for d in domains if d is not None], indexing="ij")
        columns: dict[str, np.ndarray] = {k: np.full(size, v) for k, v in given.items()}
        for k, d, g in zip([name, *free], domains, grids):
            assert d is not None
            columns[k] = np.asarray(d)[g.ravel()]
        ok = self.problem.check_batch(columns)
        own = self.domains[name]
        hit = set(np.unique(grids[0].ravel()[ok]).tolist())
        self._bump(enumerations=1)
        return tuple(own[i] for i in range(len(own)) if i in hit)

    def _repair_few(self, candidate: dict[str, Any], keep: set[str], ties: str) -> dict[str, Any] | None:
        """The best repair that changes one parameter (``ties="solver"``: else two), from vectorized
        checks (:mod:`dnnsat.guard._few_changes`); None when none is found or, with ``ties="solver"``, two
        are equally good (``problem.repair`` then decides).

        ``"solver"``: ``problem.repair``'s objective (fewest changes, then the summed index distance
        over the domain's length - 1). ``"order"``: one change only, index distance over the domain's
        length, ties to the earlier parameter in the space's order, then the earlier value.
        """
        if self._conditional or any(not self.space[k].is_finite for k in candidate):
            return None
        moves = Moves.of(self.space, candidate, self._order, self.domains, keep, by_length=ties == "order")
        repaired, changes = nearest_changes(self.problem, candidate, moves, ties)
        if repaired is not None:
            self._bump(**{"one_change_repairs" if changes == 1 else "two_change_repairs": 1})
        return repaired

    def _extendable(self, partial: Mapping[str, Any]) -> bool:
        values = self.domains
        for k, v in partial.items():  # quick reject against the pruned domains
            dom = values.get(k)
            if dom is not None and v not in dom:
                return False
        self._bump(solver_calls=1)
        return bool(self.problem.is_extendable(partial))


# Problem.guard() builds a Guard, but dnnsat.problem lies below this package and never imports it:
register_guard(Guard)


def sampled_witnesses(problem: Problem, n: int) -> list[dict[str, Any]]:
    """``n`` feasible configurations (Python values) for a witness pool, drawn with seed 0 from the
    problem's decomposition (the draws of earlier releases: the adapters' trial sequences stay the
    same); ``[]`` when the problem cannot be sampled (e.g. continuous parameters in constraints)."""
    try:
        return [{k: _py(v) for k, v in c.items()} for c in problem._sample_decomposed(n, seed=0)]
    except Exception:  # an optimisation only
        _logger.debug("could not sample witness configurations", exc_info=True)
        return []


def _domain_value(param: Param, value: Any) -> Any:
    """The value normalised to the parameter's domain; raises when it lies outside."""
    return param.decode(param.encode(value)) if param.is_finite else float(param.encode(value))


def _steps(param: Param, proposal: Any, value: Any) -> float:
    """Positions between two values in the parameter's ordered value list (1 for unordered choices)."""
    from ..space import Categorical

    if isinstance(param, Categorical) and not param.numeric:
        return 1.0
    try:
        enc = param.encoded()
        a = float(np.searchsorted(enc, float(proposal)))
        b = float(np.searchsorted(enc, float(value)))
        return abs(a - b) if a != b else 1.0
    except Exception:
        return 1.0


def _closeness(
    param: Param, within: Within | None, proposal: Any
) -> Callable[[Any], tuple[float, ...]] | None:
    """Sort key of a finite parameter's values by closeness to ``proposal``; None for unordered choices.

    Rank distance for numeric categoricals, distance in ``within``'s scale (else the parameter's; log
    for ``log=True``) for numbers; ties go to the smaller value.
    """
    from ..space import Categorical

    if (isinstance(param, Categorical) and not param.numeric) or not _is_number(proposal):
        return None
    p = float(proposal)
    if isinstance(param, Categorical):
        ranks = sorted(param.values())
        rank = bisect_left(ranks, p)
        return lambda v: (abs(ranks.index(v) - rank), abs(v - p), v)
    log = within.log if within is not None and within.log is not None else bool(getattr(param, "log", False))
    if log and p > 0:
        return lambda v: (abs(math.log(v) - math.log(p)) if v > 0 else math.inf, v)
    return lambda v: (abs(v - p), v)
