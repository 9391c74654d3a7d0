"""Z3 backend: the same constraints as SMT terms, for what bounds and enumeration cannot settle.

Finite domains have three encodings (``encoding=``): ``"range"`` (default; ``lo <= x <= hi`` plus a
divisibility constraint for arithmetic progressions such as ``Int(16, 512, step=16)``, a disjunction
otherwise), ``"disjunction"`` (``x == v1 or x == v2 ...``) and ``"onehot"`` (one Boolean per value,
exactly one true, ``x`` their weighted sum: pseudo-Boolean). ``benchmarks/solver_perf.py`` compares
them; the default was the fastest there. Constraints are
guarded by assumption literals, so any subset can be checked and an unsatisfiable subset (unsat core)
extracted from one incremental solver. Z3 is not thread-safe and every backend shares Z3's main
context, so building a backend and every query hold one process-wide lock (``Z3_LOCK``).
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ..expr import Expr, to_z3
from ._boxes import Domain

__all__ = ["Z3Backend", "Z3_LOCK"]

#: Held around every use of Z3's (shared, not thread-safe) main context.
Z3_LOCK = threading.RLock()


ENCODINGS = ("range", "disjunction", "onehot")


class Z3Backend:
    def __init__(self, domain: Domain, constraints: Sequence[Expr], encoding: str = "range") -> None:
        import z3

        if encoding not in ENCODINGS:
            raise ValueError(f"unknown Z3 encoding {encoding!r}; use one of {ENCODINGS}")
        self._z3 = z3
        self.encoding = encoding
        self.domain = domain
        self.vars: dict[str, Any] = {}
        for d, n in enumerate(domain.names):
            vals = domain.values[d]
            self.vars[n] = z3.Int(n) if vals.dtype.kind in "iu" else z3.Real(n)
        for n in domain.continuous:
            self.vars[n] = z3.Real(n)
        cache: dict[int, Any] = {}
        self.terms = [to_z3(c, self.vars, cache) for c in constraints]
        self.guards = [z3.Bool(f"__c{i}") for i in range(len(constraints))]
        self.solver = z3.Solver()
        self.lock = Z3_LOCK
        for g, t in zip(self.guards, self.terms):
            self.solver.add(z3.Implies(g, t))
        for n, (a, b) in domain.continuous.items():
            self.solver.add(self.vars[n] >= a, self.vars[n] <= b)
        self.onehot: list[list[Any]] = []
        if encoding == "onehot":
            for d, n in enumerate(domain.names):
                bits = [z3.Bool(f"__{n}={j}") for j in range(len(domain.values[d]))]
                self.onehot.append(bits)
                self.solver.add(z3.PbEq([(b, 1) for b in bits], 1))
                self.solver.add(
                    self.vars[n] == z3.Sum([z3.If(b, _num(z3, v), 0) for b, v in zip(bits, domain.values[d])])
                )

    def _range(self, d: int, lo: int, hi: int) -> Any:
        z3 = self._z3
        x = self.vars[self.domain.names[d]]
        vals = self.domain.values[d][lo : hi + 1]
        if self.encoding == "onehot":
            bits = self.onehot[d]
            return z3.And(*[z3.Not(b) for j, b in enumerate(bits) if not lo <= j <= hi] or [z3.BoolVal(True)])
        if len(vals) == 1:
            return x == _num(z3, vals[0])
        steps = np.diff(vals)
        if self.encoding == "range" and vals.dtype.kind in "iu" and np.all(steps == steps[0]):
            step = int(steps[0])
            base = [x >= int(vals[0]), x <= int(vals[-1])]
            if step > 1:
                base.append((x - int(vals[0])) % step == 0)
            return z3.And(*base)
        return z3.Or(*[x == _num(z3, v) for v in vals])

    def _assumptions(self, mask: np.ndarray | None) -> list[Any]:
        return [g for i, g in enumerate(self.guards) if mask is None or mask[i]]

    def exists(
        self,
        lo: np.ndarray,
        hi: np.ndarray,
        mask: np.ndarray | None,
        timeout_ms: int,
        continuous: Mapping[str, tuple[float, float]] | None = None,
    ) -> tuple[bool | None, np.ndarray | None]:
        """Satisfiability of the constraints in one box: (True, witness) / (False, None) / (None, None).

        ``continuous`` restricts continuous variables further than the domain's bounds.
        """
        with self.lock:
            return self._exists(lo, hi, mask, timeout_ms, continuous or {})

    def _exists(
        self,
        lo: np.ndarray,
        hi: np.ndarray,
        mask: np.ndarray | None,
        timeout_ms: int,
        continuous: Mapping[str, tuple[float, float]],
    ) -> tuple[bool | None, np.ndarray | None]:
        z3 = self._z3
        self.solver.push()
        try:
            self.solver.set("timeout", int(timeout_ms))
            for d in range(self.domain.ndim):
                self.solver.add(self._range(d, int(lo[d]), int(hi[d])))
            for n, (a, b) in continuous.items():
                if (a, b) != self.domain.continuous.get(n):
                    self.solver.add(self.vars[n] >= z3.RealVal(a), self.vars[n] <= z3.RealVal(b))
            res = self.solver.check(*self._assumptions(mask))
            if res == z3.sat:
                return True, self._point(self.solver.model())
            if res == z3.unsat:
                return False, None
            return None, None
        except z3.Z3Exception as err:
            raise RuntimeError(f"Z3 failed while deciding a box: {err}") from err
        finally:
            self.solver.pop()

    def continuous_witness(
        self, point: np.ndarray, continuous: Mapping[str, tuple[float, float]], timeout_ms: int
    ) -> dict[str, float] | None:
        """Values of the continuous variables that satisfy every constraint at the finite ``point``."""
        with self.lock:
            z3 = self._z3
            self.solver.push()
            try:
                self.solver.set("timeout", int(timeout_ms))
                for d in range(self.domain.ndim):
                    self.solver.add(self._range(d, int(point[d]), int(point[d])))
                for n, (a, b) in continuous.items():
                    self.solver.add(self.vars[n] >= z3.RealVal(a), self.vars[n] <= z3.RealVal(b))
                if self.solver.check(*self.guards) != z3.sat:
                    return None
                model = self.solver.model()
                return {
                    n: float(model.eval(self.vars[n], model_completion=True).as_fraction())
                    for n in continuous
                }
            finally:
                self.solver.pop()

    def _point(self, model: Any) -> np.ndarray:
        idx = np.zeros(self.domain.ndim, dtype=np.int64)
        for d, n in enumerate(self.domain.names):
            v = model.eval(self.vars[n], model_completion=True)
            num = v.as_long() if self._z3.is_int_value(v) else float(v.as_fraction())
            idx[d] = int(np.searchsorted(self.domain.values[d], num))
        return idx

    def violable(self, timeout_ms: int = 10_000) -> bool | None:
        """Whether some point of the domain violates some constraint (None: Z3 did not decide)."""
        with self.lock:
            z3 = self._z3
            self.solver.push()
            try:
                self.solver.set("timeout", int(timeout_ms))
                for d in range(self.domain.ndim):
                    self.solver.add(self._range(d, 0, int(self.domain.sizes[d]) - 1))
                self.solver.add(z3.Or(*[z3.Not(t) for t in self.terms]) if self.terms else z3.BoolVal(False))
                res = self.solver.check()
                return True if res == z3.sat else False if res == z3.unsat else None
            finally:
                self.solver.pop()

    def unsat_core(self, timeout_ms: int = 10_000) -> list[int] | None:
        """Indices of a subset of constraints with no solution over the whole domain (None if sat/unknown)."""
        with self.lock:
            return self._unsat_core(timeout_ms)

    def _unsat_core(self, timeout_ms: int) -> list[int] | None:
        z3 = self._z3
        self.solver.push()
        try:
            self.solver.set("timeout", int(timeout_ms))
            for d in range(self.domain.ndim):
                self.solver.add(self._range(d, 0, int(self.domain.sizes[d]) - 1))
            if self.solver.check(*self.guards) != z3.unsat:
                return None
            core = {str(c) for c in self.solver.unsat_core()}
            return [i for i, g in enumerate(self.guards) if str(g) in core]
        finally:
            self.solver.pop()

    def feasible_values(self, name: str, fixed: dict[str, int], timeout_ms: int = 60_000) -> list[int]:
        """Z3-only forward checking (for comparisons): indices of ``name`` with a feasible extension."""
        with self.lock:
            return self._feasible_values(name, fixed, timeout_ms)

    def _feasible_values(self, name: str, fixed: dict[str, int], timeout_ms: int) -> list[int]:
        z3 = self._z3
        d = self.domain.index[name]
        out = []
        self.solver.push()
        try:
            self.solver.set("timeout", int(timeout_ms))
            for e in range(self.domain.ndim):
                if e == d:
                    continue
                i = fixed.get(self.domain.names[e])
                lo, hi = (i, i) if i is not None else (0, int(self.domain.sizes[e]) - 1)
                self.solver.add(self._range(e, lo, hi))
            x = self.vars[name]
            for j, v in enumerate(self.domain.values[d]):
                self.solver.push()
                self.solver.add(x == _num(z3, v))
                if self.solver.check(*self.guards) != z3.unsat:
                    out.append(j)
                self.solver.pop()
        finally:
            self.solver.pop()
        return out


def _num(z3: Any, v: Any) -> Any:
    return z3.IntVal(int(v)) if np.asarray(v).dtype.kind in "iu" else z3.RealVal(float(v))
