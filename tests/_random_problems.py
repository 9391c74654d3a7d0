"""Random small problems (<= 10**4 configs) with brute-force answers, shared by the solver tests."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
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
