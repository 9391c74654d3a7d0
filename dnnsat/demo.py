"""``make demo``: the main job on the embedded reference problem, in well under a minute.

Prunes the synthetic-ResNet space (``dnnsat.zoo.synthetic_resnet_problem``), estimates how many
configurations survive, explains and repairs a rejected configuration, then runs a constrained Optuna
study (when Optuna is installed) in which no infeasible trial is ever launched.
"""

from __future__ import annotations

import time

from rich.console import Console

from .zoo import synthetic_resnet_problem

console = Console()


def main() -> None:
    t0 = time.perf_counter()
    problem = synthetic_resnet_problem(flops_limit=2e12, params_limit=20e6)
    space = problem.space
    console.rule("[bold]dnnsat demo: synthetic ResNet, budget flops ≤ 2 TFLOPs, params ≤ 20 M")
    console.print(f"search space: {len(space)} parameters, {space.size():,} configurations")

    t = time.perf_counter()
    pruned = problem.prune()
    console.print(
        f"prune: {space.size():,} → {pruned.size():,} configurations in the box "
        f"({time.perf_counter() - t:.2f} s)"
    )
    tight = synthetic_resnet_problem(flops_limit=1e11, params_limit=2e6)
    t = time.perf_counter()
    tight_pruned = tight.prune()
    changed = {
        n: (space[n].values()[-1], tight_pruned[n].values()[-1])
        for n in space
        if tight_pruned[n].values() != space[n].values()
    }
    console.print(
        f"prune (tight: 100 GFLOPs, 2 M params): largest values {changed} ({time.perf_counter() - t:.2f} s)"
    )

    t = time.perf_counter()
    est = problem.estimate_count()
    console.print(
        f"estimate_count: ≈ {est.value:,.0f} feasible (95% CI {est.low:,.0f} – {est.high:,.0f}), "
        f"{est.value / space.size():.2%} of the space ({time.perf_counter() - t:.2f} s)"
    )

    rejected = dict(w0=64, w1=128, w2=256, w3=512, d0=2, d1=2, d2=2, d3=2, b=64, r=224, k=3)
    verdict = problem.check(rejected)
    console.print(f"check {rejected}: feasible={verdict.feasible}")
    for v in verdict.violations:
        console.print(f"  ✗ {v}")
    t = time.perf_counter()
    explanation = problem.explain(rejected)
    fix = problem.repair(rejected)
    console.print(f"explain: {explanation}")
    if fix is not None:
        changes = ", ".join(f"{k}: {rejected[k]} → {v}" for k, v in fix.items() if rejected.get(k) != v)
        console.print(f"repair: {changes} ({time.perf_counter() - t:.3f} s for both)")

    try:
        from dnnsat.integrations.optuna import demo_study
    except ImportError:
        console.print(
            '[yellow]optuna integration not installed: skipping the study (pip install "dnnsat\\[optuna]")'
        )
    else:
        console.rule("[bold]constrained Optuna study")
        demo_study(problem, console)
    console.print(f"[green]done in {time.perf_counter() - t0:.1f} s")


if __name__ == "__main__":
    main()
