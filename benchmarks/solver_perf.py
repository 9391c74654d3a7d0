"""Solver performance on the synthetic-ResNet reference problem, next to Z3 alone.

The problem is ``dnnsat.zoo.synthetic_resnet_problem()`` (3.95e10 configurations, about 5.5 % feasible).

    python -m benchmarks.solver_perf [--quick] [--write-readme | --no-readme]

Every figure is measured in one run; ratios compare dnnsat with a Z3-only implementation of the same
operation (and with a plain per-config Python loop for batch checks). Results go to the terminal and
to the "solver" section of benchmarks/README.md (default run or ``--write-readme`` only).
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from benchmarks._report import (
    add_write_options,
    fmt_time,
    machine,
    markdown_table,
    single_core,
    timings,
    update_readme,
    writes_readme,
)

single_core()

import z3  # noqa: E402

import dnnsat as ds  # noqa: E402
from dnnsat.expr import to_z3  # noqa: E402
from dnnsat.solver._z3 import ENCODINGS, Z3Backend  # noqa: E402
from dnnsat.zoo import synthetic_resnet_problem  # noqa: E402

GIVEN_NAMES = ("b", "r", "k", "w0", "w1")


def z3_check(p: ds.Problem) -> Any:
    """Z3-only check of one full config: substitute the values and simplify every constraint."""
    zv = {n: z3.Int(n) for n in p.space}
    terms = [to_z3(c.expr, zv) for c in p.constraints if c.expr is not None]

    def check(cfg: dict[str, int]) -> bool:
        subs = [(zv[n], z3.IntVal(int(v))) for n, v in cfg.items()]
        return all(z3.is_true(z3.simplify(z3.substitute(t, *subs))) for t in terms)

    return check


def random_configs(p: ds.Problem, n: int, seed: int) -> list[dict[str, Any]]:
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        out.append(
            {name: prm.values()[int(rng.integers(len(prm.values())))] for name, prm in p.space.items()}
        )
    return out


def columns(p: ds.Problem, n: int, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {
        name: np.asarray(prm.values())[rng.integers(len(prm.values()), size=n)]
        for name, prm in p.space.items()
    }


def naive_numpy(
    cols: dict[str, np.ndarray], flops_limit: float = 2e12, params_limit: float = 20e6
) -> np.ndarray:
    """The reference problem's two constraints written directly in NumPy over whole columns (the
    formulas of ``dnnsat.zoo._synthetic``), as a user without dnnsat would: the yardstick of
    ``check_batch``."""
    b, r, k = cols["b"], cols["r"], cols["k"]
    k2 = k * k
    w = [cols[f"w{i}"] for i in range(4)]
    d = [cols[f"d{i}"] for i in range(4)]
    flops = 2 * b * r * r * 3 * w[0] * k2
    params = 3 * w[0] * k2
    for i in range(4):
        s = r // 2**i
        c = w[0] if i == 0 else w[i - 1]
        flops = flops + 2 * b * s * s * c * w[i] * k2
        params = params + c * w[i] * k2
        for j in range(1, 5):
            flops = flops + np.where(d[i] >= j, 4 * b * s * s * w[i] * w[i] * k2, 0)
            params = params + np.where(d[i] >= j, 2 * w[i] * w[i] * k2, 0)
    params = params + 1000 * w[3]
    return (flops <= flops_limit) & (params <= params_limit)


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer repetitions (CI smoke run)")
    add_write_options(ap)
    return ap


def main(argv: Sequence[str] | None = None) -> None:
    ap = build_parser()
    args = ap.parse_args(argv)
    write = writes_readme(ap, args)
    reps = 20 if args.quick else 200
    p = synthetic_resnet_problem()
    tight = synthetic_resnet_problem(flops_limit=1e11, params_limit=2e6)
    rows: list[list[Any]] = []

    # check of one full config
    cfgs = random_configs(p, reps, 0)
    it = iter(cfgs * 3)
    t_check = timings(lambda: p.check(next(it)), repeat=reps, warmup=reps)
    zc = z3_check(p)
    it2 = iter(cfgs * 2)
    t_z3 = timings(lambda: zc(next(it2)), repeat=min(reps, 50), warmup=2)
    rows.append(
        [
            "check (1 config), p50",
            fmt_time(np.median(t_check)),
            "≤ 50 µs",
            f"Z3 substitute+simplify {fmt_time(np.median(t_z3))}",
            f"{np.median(t_z3) / np.median(t_check):.0f}×",
        ]
    )

    # check_batch throughput
    n = 200_000 if args.quick else 2_000_000
    cols = columns(p, n, 1)
    p.check_batch({k: v[:1000] for k, v in cols.items()})
    ok, ok_np = p.check_batch(cols), naive_numpy(cols)
    assert (ok_np == ok).all(), "check_batch and the NumPy formulas disagree"
    calls: dict[str, Any] = {
        "validated": lambda: p.check_batch(cols),
        "raw": lambda: p.check_batch(cols, validate=False),
        "numpy": lambda: naive_numpy(cols),
    }
    runs: dict[str, list[float]] = {key: [] for key in calls}
    for _ in range(3):  # best of 3, alternating (NumPy's first run also pays for fresh pages)
        for key, call in calls.items():
            runs[key].append(float(timings(call, repeat=1, warmup=0)[0]))
    dt, dt_raw, dt_np = (min(runs[key]) for key in calls)
    np_rate = n / dt_np
    loop_n = 2000
    t1 = time.perf_counter()
    for i in range(loop_n):
        p.check({k: v[i].item() for k, v in cols.items()})
    loop_rate = loop_n / (time.perf_counter() - t1)
    rows.append(
        [
            "check_batch throughput",
            f"{n / dt / 1e6:.1f} M configs/s",
            "≥ 5 M/s",
            f"Python loop of check {loop_rate / 1e3:.0f} k/s",
            f"{n / dt / loop_rate:.0f}×",
        ]
    )
    rows.append(
        [
            "… against NumPy (validated columns)",
            "",
            "≥ 4× NumPy",
            f"the same formulas in plain NumPy {np_rate / 1e6:.1f} M/s",
            f"{n / dt / np_rate:.1f}×",
        ]
    )
    rows.append(
        [
            "… with validate=False",
            f"{n / dt_raw / 1e6:.1f} M configs/s",
            "",
            f"validation costs {1 - dt_raw / dt:.0%}",
            f"{n / dt_raw / np_rate:.1f}×",
        ]
    )
    feasible_share = ok.mean()

    # feasible_values for one w with b, r, k, w0, w1 given
    qs = random_configs(p, reps, 2)
    it3 = iter(qs * 3)
    t_fv = timings(
        lambda: p.feasible_values("w2", {k: v for k, v in next(it3).items() if k in GIVEN_NAMES}),
        repeat=reps,
        warmup=min(reps, 20),
    )
    dom = p._c().domain
    nz = 5 if args.quick else 20
    encodings: dict[str, list[float]] = {}
    unknown = 0
    for enc in ENCODINGS:
        backend = Z3Backend(dom, p._c().engine.constraints, encoding=enc)
        times = encodings[enc] = []
        for q in qs[: nz if enc == "range" else max(nz // 4, 3)]:
            given = {k: v for k, v in q.items() if k in GIVEN_NAMES}
            t = time.perf_counter()
            got_z3 = backend.feasible_values("w2", dom.encode_config(given), timeout_ms=5000)
            times.append(time.perf_counter() - t)
            ours = p.feasible_values("w2", given)
            z3_values = [dom.values[dom.index["w2"]][j].item() for j in got_z3]
            if z3_values != ours:  # only timeouts may differ, and only by keeping more values
                assert set(ours) <= set(z3_values), "Z3 proved a value infeasible that dnnsat kept"
                unknown += 1
    t_fz = encodings["range"]
    ratio = np.median(t_fz) / np.median(t_fv)
    rows.append(
        [
            "feasible_values(w2 | b,r,k,w0,w1), p50 / p99",
            f"{fmt_time(np.median(t_fv))} / {fmt_time(np.percentile(t_fv, 99))}",
            "≤ 5 ms / ≤ 50 ms",
            f"Z3 alone p50 {fmt_time(np.median(t_fz))}, max {fmt_time(max(t_fz))}",
            f"{ratio:.0f}× (goal ≥ 100×)",
        ]
    )
    for enc in ENCODINGS[1:]:
        rows.append(
            [
                f"… Z3 alone, {enc} encoding of finite domains",
                "",
                "",
                f"p50 {fmt_time(np.median(encodings[enc]))} ({len(encodings[enc])} queries)",
                f"{np.median(encodings[enc]) / np.median(t_fv):.0f}×",
            ]
        )

    # prune
    for label, prob in (("default", p), ("tight", tight)):
        prob._compiled = None
        t = time.perf_counter()
        pruned = prob.prune()
        dt = time.perf_counter() - t
        kept = sum(len(pruned[n].values()) for n in pruned) / sum(
            len(prob.space[n].values()) for n in prob.space
        )
        rows.append([f"prune ({label} limits)", fmt_time(dt), "≤ 1 s", f"{kept:.0%} of values kept", ""])

    # is_empty of an infeasible budget
    empty = synthetic_resnet_problem(flops_limit=1e6)
    t = time.perf_counter()
    assert empty.is_empty()
    dt_empty = time.perf_counter() - t
    zs = z3.Solver()
    zs.set("timeout", 60_000)
    zb = empty._c().engine.z3()
    t = time.perf_counter()
    res = zb.unsat_core()
    dt_z3_empty = time.perf_counter() - t
    rows.append(
        [
            "is_empty (flops ≤ 1e6)",
            fmt_time(dt_empty),
            "≤ 1 s",
            f"Z3 alone {fmt_time(dt_z3_empty)} ({'unsat' if res is not None else 'no answer'})",
            f"{dt_z3_empty / dt_empty:.0f}×",
        ]
    )
    core = empty.unsat_core()

    # explain and repair of infeasible configs
    infeasible = [c for c in random_configs(p, 4 * reps, 3) if not p.check(c).feasible][: max(reps // 4, 10)]
    t_ex = [timings(lambda c=c: p.explain(c), repeat=1, warmup=0)[0] for c in infeasible]
    t_rep = [timings(lambda c=c: p.repair(c), repeat=1, warmup=0)[0] for c in infeasible]
    rows.append(
        [
            "explain (infeasible config), p50 / max",
            f"{fmt_time(np.median(t_ex))} / {fmt_time(max(t_ex))}",
            "≤ 200 ms",
            "",
            "",
        ]
    )
    rows.append(
        [
            "repair (infeasible config), p50 / max",
            f"{fmt_time(np.median(t_rep))} / {fmt_time(max(t_rep))}",
            "p50 ≤ 100 ms",
            "",
            "",
        ]
    )

    # sample(1000) at one in a million (and rarer)
    rare = synthetic_resnet_problem(flops_limit=4e9, params_limit=2e5)
    exact = rare.count()
    share = exact / rare.space.size()
    t = time.perf_counter()
    samples = rare.sample(1000, seed=0)
    dt_sample = time.perf_counter() - t
    assert all(rare.check(c).feasible for c in samples)
    distinct = len({tuple(c.values()) for c in samples})
    expected_distinct = exact * (1 - (1 - 1 / exact) ** 1000)
    rows.append(
        [
            f"sample(1000), {share:.1e} feasible ({exact} configs)",
            fmt_time(dt_sample),
            "≤ 5 s",
            f"exactly uniform by construction; {distinct} distinct (uniform expects {expected_distinct:.0f})",
            "",
        ]
    )

    # exact count of a ~1e8-config space
    space = ds.Space(
        {
            **{f"w{i}": ds.Int(32, 512, step=32) for i in range(4)},
            **{f"d{i}": ds.Int(1, 4) for i in range(4)},
            "b": ds.Categorical([64, 128]),
            "r": ds.Categorical([128, 160, 224]),
            "k": ds.Categorical([3]),
        }
    )
    from dnnsat.zoo._synthetic import synthetic_resnet_costs

    flops, params = synthetic_resnet_costs(space)
    cp = ds.Problem(space).require(flops <= 2e12, name="flops").require(params <= 20e6, name="params")
    t = time.perf_counter()
    cnt = cp.count()
    dt_count = time.perf_counter() - t
    rows.append(
        [
            f"exact count, {space.size():.2e}-config space",
            fmt_time(dt_count),
            "≤ 60 s",
            f"{cnt} feasible ({cnt / space.size():.1%})",
            "",
        ]
    )

    table = markdown_table(["operation", "dnnsat", "goal", "comparison (same run)", "ratio"], rows)
    print(table)
    print(f"\nZ3 answers that differ from dnnsat's only by values Z3 could not decide in 5 s: {unknown}")
    print(f"\ncheck_batch feasible share on uniform configs: {feasible_share:.2%}; empty-budget core: {core}")
    if write:
        update_readme(
            "solver",
            "## Solver (reference problem)\n\n"
            f"`python -m benchmarks.solver_perf{' --quick' if args.quick else ''}` on {machine()}, one "
            f"thread, {time.strftime('%Y-%m-%d')}.\n\n{table}\n\n"
            f"Uniformly drawn configs are {feasible_share:.2%} feasible with the default limits. "
            "Z3 alone decides the same questions with the same constraints (incremental solver, "
            "finite domains as bounds + divisibility or disjunctions); it agrees on every answer.",
        )


if __name__ == "__main__":
    main()
