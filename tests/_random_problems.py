"""Random small problems (<= 10**4 configs) with brute-force answers, shared by the solver tests."""

from __future__ import annotations

import itertools
import math
import warnings
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

import dnnsat as ds
import dnnsat.expr as E


def random_space(rng: np.random.Generator, conditional: bool = False) -> ds.Space:
    params: dict[str, ds.Param] = {}
    n = int(rng.integers(3, 6))
    for i in range(n):
        kind = rng.integers(3)
        if kind == 0:
            low = int(rng.integers(0, 4))
            params[f"x{i}"] = ds.Int(
                low, low + int(rng.integers(2, 9)) * (step := int(rng.integers(1, 4))), step=step
            )
        elif kind == 1:
            vals = sorted(
                {int(v) for v in rng.choice([1, 2, 3, 4, 6, 8, 12, 16, 32], size=int(rng.integers(2, 5)))}
            )
            params[f"x{i}"] = ds.Categorical(vals if len(vals) > 1 else [1, 2])
        else:
            params[f"x{i}"] = ds.Int(1, int(rng.integers(3, 8)))
    if conditional:
        params["mode"] = ds.Categorical(["a", "b", "c"])
        params["extra"] = ds.Int(1, 5, condition={"mode": ["b", "c"]})
    params["lr"] = ds.Float(1e-4, 1e-1, log=True)  # continuous, unconstrained: passes through
    return ds.Space(params)


def random_term(rng: np.random.Generator, v: list[E.Expr], depth: int = 0) -> E.Expr:
    if depth >= 2 or rng.random() < 0.25:
        return v[int(rng.integers(len(v)))] if rng.random() < 0.8 else E.Const(int(rng.integers(1, 5)))
    a, b = random_term(rng, v, depth + 1), random_term(rng, v, depth + 1)
    op = int(rng.integers(7))
    if op == 0:
        return a + b
    if op == 1:
        return a * b
    if op == 2:
        return a // (E.maximum(b, 1))
    if op == 3:
        return E.ceildiv(a, 2) + b
    if op == 4:
        return E.where(a >= b, a * b, a + b)
    if op == 5:
        return E.maximum(a, b) - E.minimum(a, 2)
    return a - b


def all_configs(space: ds.Space) -> Iterator[dict[str, Any]]:
    finite = [n for n in space if space[n].is_finite]
    for combo in itertools.product(*(space[n].values() for n in finite)):
        cfg = dict(zip(finite, combo))
        # inactive children: keep only the canonical (first) value so each config appears once
        skip = False
        for n in finite:
            if not space.is_active(n, cfg) and cfg[n] != space[n].values()[0]:
                skip = True
                break
        if skip:
            continue
        yield {n: cfg[n] for n in finite if space.is_active(n, cfg)} | {"lr": 0.01}


def random_problem(seed: int, conditional: bool = False) -> ds.Problem:
    rng = np.random.default_rng(seed)
    space = random_space(rng, conditional)
    v = [space.vars[n] for n in space if n.startswith("x")]
    if conditional:
        v.append(space.vars.extra)
    p = ds.Problem(space)
    configs = list(all_configs(space))
    for i in range(int(rng.integers(1, 4))):
        term = random_term(rng, v)
        if not term.variables():
            term = term + v[0]
        p.add_cost(f"t{i}", term)
        values = np.array([p.costs(c)[f"t{i}"] for c in configs])
        limit = int(np.quantile(values, rng.uniform(0.2, 0.9)))
        p.require(term <= limit if rng.random() < 0.7 else term >= limit, name=f"k{i}")
    if conditional:
        p.require((space.vars.mode != "c") | (space.vars.extra >= 3), name="mode_c")
    return p


def brute_feasible(p: ds.Problem) -> list[dict[str, Any]]:
    return [c for c in all_configs(p.space) if p.check(c).feasible]


# -- richer random problems for the trust property tests (tests/test_trust_properties.py) -------------
# Finite Ints with steps, numeric categoricals (choices not in sorted order) and string categoricals, a
# conditional child, Python predicates (with and without ``uses=``), unconstrained Floats (optionally a
# conditional one) and optionally one constrained Float ``f`` whose exact feasible set given a finite
# configuration is known in closed form (:meth:`TrustCase.float_spans`).

Spans = list[tuple[float, float]]
MAX_FINITE = 600  # finite configurations at most: brute force stays fast


@dataclass(frozen=True)
class SumAtMost:
    """Picklable predicate ``sum(c[n] for n in names) <= limit`` (inactive parameters count 0)."""

    names: tuple[str, ...]
    limit: float

    def __call__(self, c: Mapping[str, Any]) -> bool:
        return sum(c.get(n, 0) for n in self.names) <= self.limit


@dataclass(frozen=True)
class LabelImplies:
    """Picklable predicate ``c[label] != value or c[name] >= least`` (inactive ``name`` counts 0)."""

    label: str
    value: Any
    name: str
    least: float

    def __call__(self, c: Mapping[str, Any]) -> bool:
        return bool(c[self.label] != self.value or c.get(self.name, 0) >= self.least)


@dataclass(frozen=True)
class FloatAtom:
    """An atom of a constraint on ``f``: ``f * A <= k`` ("le"), ``f * A >= k`` ("ge") or a finite
    condition ("fin"); ``cost`` names the problem cost holding ``A`` (for "fin", the condition as 0/1)."""

    kind: str
    cost: str
    k: float = 0.0


@dataclass
class TrustCase:
    """A random problem and what brute force needs to know about it."""

    problem: ds.Problem
    float_name: str | None  # the constrained continuous Float, if any
    clauses: list[list[FloatAtom]]  # its constraints: a conjunction of disjunctions of atoms
    defaults: dict[str, float]  # a value for every continuous Float (used where active)

    @property
    def space(self) -> ds.Space:
        return self.problem.space

    def complete(self, cfg: Mapping[str, Any], **floats: float) -> dict[str, Any]:
        """``cfg`` (finite values) plus every active continuous Float (``floats``, else the default)."""
        out = dict(cfg)
        for name, value in self.defaults.items():
            if self.space.is_active(name, out):
                out[name] = floats.get(name, value)
        return out

    def float_spans(self, cfg: Mapping[str, Any]) -> Spans:
        """The exact set of values of ``f`` that satisfy its constraints at the finite config ``cfg``."""
        assert self.float_name is not None
        low, high = self.space[self.float_name].bounds()
        costs = self.problem.costs(self.complete(cfg))
        out: Spans = [(low, high)]
        for clause in self.clauses:
            union: Spans = []
            for atom in clause:
                value = costs[atom.cost]
                if atom.kind == "fin":
                    part = [(low, high)] if value else []
                elif atom.kind == "le":
                    part = [(low, min(high, atom.k / value))] if atom.k / value >= low else []
                else:
                    part = [(max(low, atom.k / value), high)] if atom.k / value <= high else []
                union = spans_union(union, part)
            out = spans_intersection(out, union)
        return out


def spans_union(a: Spans, b: Spans) -> Spans:
    out: Spans = []
    for lo, hi in sorted(a + b):
        if out and lo <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], hi))
        else:
            out.append((lo, hi))
    return out


def spans_intersection(a: Spans, b: Spans) -> Spans:
    out = [(max(x, u), min(y, w)) for x, y in a for u, w in b if max(x, u) <= min(y, w)]
    return spans_union(out, [])


def random_trust_case(
    seed: int, constrained_float: bool, predicates: bool = True, conditional_float: bool = False
) -> TrustCase:
    """A random problem (at most ``MAX_FINITE`` finite configurations) drawn from ``seed``;
    ``conditional_float`` adds the unconstrained Float ``drop``, active only when ``act == "gelu"``."""
    rng = np.random.default_rng(seed)
    params: dict[str, ds.Param] = {}
    for i in range(int(rng.integers(2, 4))):
        form = int(rng.integers(3))
        if form == 0:
            low, step = int(rng.integers(0, 4)), int(rng.integers(1, 4))
            params[f"x{i}"] = ds.Int(low, low + int(rng.integers(2, 5)) * step, step=step)
        elif form == 1:
            vals = list(
                {int(v) for v in rng.choice([1, 2, 3, 4, 6, 8, 12, 16], size=int(rng.integers(2, 5)))}
            )
            vals = [vals[j] for j in rng.permutation(len(vals))] if len(vals) > 1 else [2, 1]
            params[f"x{i}"] = ds.Categorical(vals)
        else:
            params[f"x{i}"] = ds.Int(1, int(rng.integers(3, 6)))
    params["act"] = ds.Categorical(["relu", "gelu", "silu"][: int(rng.integers(2, 4))])
    conditional = bool(rng.random() < 0.6)
    if conditional:
        params["mode"] = ds.Categorical(["a", "b", "c"])
        params["extra"] = ds.Int(1, 3, condition={"mode": ["b", "c"]})
    params["lr"] = ds.Float(1e-4, 1e-1, log=True)
    defaults = {"lr": 0.01}
    if conditional_float:
        params["drop"] = ds.Float(0.0, 0.5, condition={"act": ["gelu"]})
        defaults["drop"] = 0.1
    if constrained_float:
        params["f"] = ds.Float(1e-3, 1.0, log=True) if rng.random() < 0.5 else ds.Float(0.0, 2.0)
        defaults["f"] = float(params["f"].low)  # type: ignore[attr-defined]
    while ds.Space(params).size() > MAX_FINITE:
        del params[max(n for n in params if n.startswith("x"))]
    space = ds.Space(params)
    numeric = [n for n in space if n.startswith("x")] + (["extra"] if conditional else [])
    v = [space.vars[n] for n in numeric]
    p = ds.Problem(space)
    case = TrustCase(p, "f" if constrained_float else None, [], defaults)
    configs = [case.complete(c) for c in all_finite_configs(space)]

    def quantile(term: E.Expr, name: str, q: float) -> float:
        """``term`` registered as the cost ``name``; its ``q`` quantile over the finite configurations."""
        p.add_cost(name, term)
        return float(np.quantile([p.costs(c)[name] for c in configs], q))

    for i in range(int(rng.integers(1, 3))):
        term = random_term(rng, v)
        if not term.variables():
            term = term + v[0]
        k = quantile(term, f"t{i}", rng.uniform(0.3, 0.95))
        p.require(term <= k if rng.random() < 0.7 else term >= int(k * 0.3), name=f"k{i}")
    if conditional:
        p.require((space.vars.mode != "c") | (space.vars.extra >= 3), name="mode_c")
    if rng.random() < 0.5:
        last = space["act"].choices[-1]  # type: ignore[attr-defined]
        p.require((space.vars.act != last) | (v[0] <= quantile(v[0], "act_x_cost", 0.5)), name="act_x")
    if predicates:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ds.OpaqueConstraintWarning)
            reads = tuple(str(n) for n in rng.choice(numeric, size=min(2, len(numeric)), replace=False))
            k = quantile(E.sum_([space.vars[n] for n in reads]), "pred_sum", rng.uniform(0.4, 0.95))
            p.require(SumAtMost(reads, k), name="p_sum", uses=reads if rng.random() < 0.5 else None)
            if rng.random() < 0.7:
                least = quantile(v[-1], "pred_label", 0.4)
                pred = LabelImplies("act", "gelu", numeric[-1], least)
                p.require(pred, name="p_label", uses=("act", numeric[-1]) if rng.random() < 0.5 else None)
    if constrained_float:
        fp = space["f"]
        to_t, from_t = (math.log, math.exp) if fp.log else (float, float)  # type: ignore[attr-defined]
        t_lo, t_hi = (to_t(b) for b in fp.bounds())
        for i in range(int(rng.integers(1, 3))):
            shape = ["le", "ge", "le|ge", "fin|le"][int(rng.integers(4))].split("|")
            atoms: list[FloatAtom] = []
            exprs: list[E.Expr] = []
            for j, kind in enumerate(shape):
                cost = f"float{i}_{j}"
                t = _boundary(rng, kind, alone=len(shape) == 1)
                if kind == "fin":
                    cond = v[-1] <= quantile(v[-1], cost + "_limit", 0.5)
                    p.add_cost(cost, E.where(cond, 1, 0))
                    atoms.append(FloatAtom("fin", cost))
                    exprs.append(cond)
                    continue
                a = E.maximum(random_term(rng, v, depth=1), 1)
                k = from_t(t_lo + t * (t_hi - t_lo)) * quantile(a, cost, 0.5)
                atoms.append(FloatAtom(kind, cost, k))
                exprs.append(space.vars.f * a <= k if kind == "le" else space.vars.f * a >= k)
            case.clauses.append(atoms)
            p.require(E.any_(exprs), name=f"float{i}")
    return case


def _boundary(rng: np.random.Generator, kind: str, alone: bool) -> float:
    """Where an atom's boundary lies, as a fraction of f's range in its scale: alone, "le" high and
    "ge" low (so that two clauses leave a non-empty middle); in "le | ge", "le" low and "ge" high (two
    disjoint pieces)."""
    if alone:
        low, high = (0.5, 0.9) if kind == "le" else (0.1, 0.5)
    else:
        low, high = (0.15, 0.45) if kind == "le" else (0.55, 0.85)
    return float(rng.uniform(low, high))


def all_finite_configs(space: ds.Space) -> Iterator[dict[str, Any]]:
    """Every configuration of the finite parameters, inactive ones left out (each config once)."""
    for cfg in all_configs(space):
        yield {k: val for k, val in cfg.items() if space[k].is_finite}
