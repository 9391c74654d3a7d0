"""The finite domain of a problem and batches of boxes over it.

A *box* fixes, for every search dimension (a finite parameter that matters to some constraint), an
inclusive range of value indices ``lo..hi`` into that parameter's ascending encoded values. Boxes are
handled in batches: two ``int64`` arrays ``lo``/``hi`` of shape ``(boxes, dims)``.

Conditional parameters take their first encoded value while inactive; :meth:`Domain.normalize`
collapses such dimensions and flags boxes whose activity is not yet decided by their parents' ranges.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..space import Space, SpaceError

__all__ = ["Domain", "Normalized", "share"]

#: volumes of a domain with at least this many points are exact Python ints (float64 overflows at 2**1024)
FLOAT_SAFE = 2**1000


def share(part: Any, whole: Any) -> float:
    """``part / whole`` as a float (1.0 when ``whole`` is 0), for volumes of any size: Python ints beyond
    float64's range divide exactly, where ``float(part) / float(whole)`` would overflow."""
    return float(part / whole) if whole else 1.0


@dataclass
class Normalized:
    """Result of :meth:`Domain.normalize`: ``split_dim`` is a parent to split first (``-1`` if none)."""

    lo: np.ndarray
    hi: np.ndarray
    undecided: np.ndarray  # bool per box: some condition is neither surely active nor surely inactive
    split_dim: np.ndarray  # int per box


class Domain:
    """Search dimensions of a space: the finite parameters constraints (or conditions) depend on."""

    def __init__(self, space: Space, relevant: set[str]) -> None:
        self.space = space
        # a conditional continuous parameter no constraint reads passes through (it is never searched)
        conditional = {n for n in space if space[n].condition and (space[n].is_finite or n in relevant)}
        parents = {p for n in conditional for p in space[n].condition or {}}
        dims = set(relevant) | conditional | parents
        for n in dims:
            if not space[n].is_finite and (n in conditional or n in parents):
                raise SpaceError(f"parameter {n!r}: conditions need finite parameters; give the Float a step")
        self.names: list[str] = [n for n in space.conditional_order if n in dims and space[n].is_finite]
        self.index = {n: i for i, n in enumerate(self.names)}
        self.values: list[np.ndarray] = [space[n].encoded() for n in self.names]
        self.sizes = np.array([len(v) for v in self.values], dtype=np.int64)
        self.continuous: dict[str, tuple[float, float]] = {
            n: space[n].bounds() for n in space if n in dims and not space[n].is_finite
        }
        #: finite parameters outside the search: any value goes, they only multiply counts
        self.free: list[str] = [n for n in space if n not in dims and space[n].is_finite]
        self.free_size = int(np.prod([len(space[n].encoded()) for n in self.free], dtype=object))
        self.conditions: list[tuple[int, list[tuple[int, np.ndarray]]]] = []
        for n in self.names:
            cond = space[n].condition
            if not cond:
                continue
            terms = []
            for parent, values in cond.items():
                p = space[parent]
                active = {p.encode(v) for v in values}
                mask = np.array([x.item() in active for x in p.encoded()])
                prefix = np.concatenate([[0], np.cumsum(mask)]).astype(np.int64)
                terms.append((self.index[parent], prefix))
            self.conditions.append((self.index[n], terms))
        self._activating: dict[tuple[str, str], frozenset[int]] = {}
        total = 1
        for s in self.sizes:
            total *= int(s)
        self.total = total  # configurations of the search dimensions, conditions ignored

    def activating(self, child: str, parent: str) -> frozenset[int]:
        """Value indices of ``parent`` that activate ``child`` (its condition), computed once."""
        key = (child, parent)
        found = self._activating.get(key)
        if found is None:
            p, values = self.space[parent], (self.space[child].condition or {})[parent]
            grid = self.values[self.index[parent]]
            found = frozenset(int(np.searchsorted(grid, p.encode(v))) for v in values)
            self._activating[key] = found
        return found

    @property
    def ndim(self) -> int:
        return len(self.names)

    @property
    def unpinned(self) -> list[str]:
        """Continuous variables whose range is not a single value (they need Z3 rather than points)."""
        return [n for n, (a, b) in self.continuous.items() if a != b]

    def with_continuous(self, bounds: Mapping[str, tuple[float, float]]) -> Domain:
        """The same domain with some continuous variables restricted to ``bounds`` (``(v, v)`` pins one)."""
        unknown = set(bounds) - set(self.continuous)
        if unknown:
            raise KeyError(f"not continuous search variables: {sorted(unknown)}")
        out = copy.copy(self)
        out.continuous = {**self.continuous, **{n: (float(a), float(b)) for n, (a, b) in bounds.items()}}
        return out

    # -- boxes ------------------------------------------------------------------------------------
    def root(self) -> tuple[np.ndarray, np.ndarray]:
        return np.zeros((1, self.ndim), dtype=np.int64), (self.sizes - 1)[None, :].copy()

    def value_box(self) -> dict[str, tuple[Any, Any]]:
        """``{name: (lowest, highest value)}`` of every variable (encoded values; continuous bounds)."""
        box: dict[str, tuple[Any, Any]] = {
            n: (self.values[d][0].item(), self.values[d][-1].item()) for d, n in enumerate(self.names)
        }
        box.update(self.continuous)
        return box

    def box_with(self, fixed: Mapping[str, int]) -> tuple[np.ndarray, np.ndarray]:
        """The root box with some dimensions fixed to an index."""
        lo, hi = self.root()
        for name, i in fixed.items():
            d = self.index[name]
            lo[0, d] = hi[0, d] = i
        return lo, hi

    def volume(self, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
        """Number of points per box: int64, float64 when it could leave int64, and exact Python ints
        (an object array) when it could leave float64 (a domain of 2**1000 points or more: a deep chain
        of conditional parameters). Sums of volumes are then Python ints; :func:`share` divides them."""
        widths = hi - lo + 1
        if self.total < 2**62:
            return np.prod(widths, axis=1, dtype=np.int64)
        if self.total < FLOAT_SAFE:
            return np.prod(widths.astype(np.float64), axis=1)
        return np.prod(widths.astype(object), axis=1)

    def shares(self, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
        """Each box's share of the boxes' total volume (float64, summing to 1), at any domain size."""
        vol = self.volume(lo, hi)
        return np.asarray(vol / vol.sum(), dtype=np.float64)

    def normalize(self, lo: np.ndarray, hi: np.ndarray) -> Normalized:
        """Collapse surely-inactive conditional dims to index 0; flag undecided boxes."""
        m = lo.shape[0]
        undecided = np.zeros(m, dtype=bool)
        split_dim = np.full(m, -1, dtype=np.int64)
        if not self.conditions:
            return Normalized(lo, hi, undecided, split_dim)
        lo, hi = lo.copy(), hi.copy()
        surely: dict[
            int, tuple[np.ndarray, np.ndarray]
        ] = {}  # dim -> (all active, none active) for conditional dims
        for child, terms in self.conditions:
            all_act = np.ones(m, dtype=bool)
            none_act = np.zeros(m, dtype=bool)
            pick = np.full(m, -1, dtype=np.int64)
            for parent, prefix in terms:
                a, b = lo[:, parent], hi[:, parent]
                cnt = prefix[b + 1] - prefix[a]
                p_all, p_none = cnt == (b - a + 1), cnt == 0
                if parent in surely:
                    pa, pn = surely[parent]
                    p_all, p_none = p_all & pa, p_none | pn
                mixed = ~p_all & ~p_none
                pick = np.where((pick < 0) & mixed, parent, pick)
                all_act &= p_all
                none_act |= p_none
            surely[child] = (all_act, none_act)
            lo[none_act, child] = 0
            hi[none_act, child] = 0
            und = ~all_act & ~none_act
            # a mixed parent that is itself undecided: split its own deciding parent first
            split_dim = np.where((split_dim < 0) & und, pick, split_dim)
            undecided |= und
        # resolve picks that point at undecided parents to the earliest undecided dim on the chain
        return Normalized(lo, hi, undecided, split_dim)

    def active_mask(self, idx: np.ndarray) -> np.ndarray:
        """Boolean ``(points, dims)``: which dims are active at each point (all True without conditions)."""
        act = np.ones(idx.shape, dtype=bool)
        for child, terms in self.conditions:
            a = np.ones(idx.shape[0], dtype=bool)
            for parent, prefix in terms:
                hit = (prefix[idx[:, parent] + 1] - prefix[idx[:, parent]]) == 1
                a &= hit & act[:, parent]
            act[:, child] = a
        return act

    def canonical(self, idx: np.ndarray) -> np.ndarray:
        """Points with inactive conditional dims set to index 0."""
        if not self.conditions:
            return idx
        idx = idx.copy()
        idx[~self.active_mask(idx)] = 0
        return idx

    def split(self, lo: np.ndarray, hi: np.ndarray, dim: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Halve each box along ``dim``; returns children ordered (all lower halves, all upper halves)."""
        rows = np.arange(lo.shape[0])
        a, b = lo[rows, dim], hi[rows, dim]
        mid = (a + b) // 2
        lo1, hi1 = lo.copy(), hi.copy()
        hi1[rows, dim] = mid
        lo2, hi2 = lo.copy(), hi.copy()
        lo2[rows, dim] = mid + 1
        # interleave so that each parent's lower half comes right before its upper half
        lo_out = np.empty((2 * len(rows), lo.shape[1]), dtype=np.int64)
        hi_out = np.empty_like(lo_out)
        lo_out[0::2], lo_out[1::2] = lo1, lo2
        hi_out[0::2], hi_out[1::2] = hi1, hi2
        return lo_out, hi_out

    def widest(self, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
        """Per box, the dimension with the most values left (ties: the first): balanced pieces for
        :meth:`Engine.decompose`, which carves the feasible part into whole boxes."""
        return np.argmax(hi - lo, axis=1)

    def narrowest_open(self, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
        """Per box, the open dimension with the fewest values left (ties: the first).

        Narrow dimensions (depths, block kinds, group counts) are structural: they select which terms
        of a cost exist, and interval bounds lose the correlation between those terms while such a
        dimension is open (the peak of a memory budget is a maximum over moments that exist only for
        some depths). Deciding them first keeps the bounds over the wide numeric dimensions tight: on a
        ResNet memory budget with the batch, resolution, block and groups set, a box is decided with 7
        boxes where widest-first left it undecided after 200,000 (see :meth:`Engine.exists`).
        """
        width = (hi - lo).astype(np.float64)
        return np.argmax(np.where(width > 0, 1.0 / (width + 1.0), -1.0), axis=1)

    def points(self, lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """All points of the boxes, box by box in lexicographic order; returns (points, box of point)."""
        widths = hi - lo + 1
        counts = np.prod(widths, axis=1)
        box = np.repeat(np.arange(lo.shape[0]), counts)
        offsets = np.concatenate([[0], np.cumsum(counts)[:-1]])
        local = np.arange(int(counts.sum()), dtype=np.int64) - offsets[box]
        idx = np.empty((len(box), lo.shape[1]), dtype=np.int64)
        for d in range(lo.shape[1] - 1, -1, -1):
            w = widths[box, d]
            idx[:, d] = lo[box, d] + local % w
            local //= w
        return idx, box

    def random_points(self, lo: np.ndarray, hi: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """One uniform random point per box."""
        return lo + (rng.random(lo.shape) * (hi - lo + 1)).astype(np.int64)

    # -- values -----------------------------------------------------------------------------------
    def value_columns(
        self, lo: np.ndarray, hi: np.ndarray | None = None
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        """Encoded value bounds per variable name for boxes (or points when ``hi`` is None)."""
        vlo: dict[str, Any] = {}
        vhi: dict[str, Any] = {}
        for d, n in enumerate(self.names):
            vlo[n] = self.values[d][lo[:, d]]
            vhi[n] = self.values[d][(hi if hi is not None else lo)[:, d]]
        for n, (a, b) in self.continuous.items():
            vlo[n], vhi[n] = a, b
        return vlo, vhi

    def encode_config(self, config: Mapping[str, Any]) -> dict[str, int]:
        """Index of each search dimension present in an (already validated) user config."""
        out = {}
        for n, v in config.items():
            d = self.index.get(n)
            if d is not None:
                enc = self.space[n].encode(v)
                out[n] = int(np.searchsorted(self.values[d], enc))
        return out

    def decode_point(self, idx: np.ndarray) -> dict[str, Any]:
        """User values of the active dims at one point."""
        act = self.active_mask(idx[None, :])[0]
        return {
            n: self.space[n].decode(self.values[d][idx[d]].item()) for d, n in enumerate(self.names) if act[d]
        }
