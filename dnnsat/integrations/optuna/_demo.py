"""``demo_study``: the Optuna part of ``make demo`` (bare TPE vs DnnSATSampler on the same problem)."""

from __future__ import annotations

import time
import warnings
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from dnnsat import Problem

__all__ = ["demo_study"]


def demo_study(problem: Problem, console: Any = None, n_trials: int = 100, seed: int = 0) -> dict[str, Any]:
    """Run TPE bare and wrapped on ``problem`` with an objective that wants the largest network.

    The bare study launches whatever TPE proposes (infeasible trials are counted, as a real run would
    have started and crashed them); the wrapped one never proposes an infeasible configuration.
    Prints a small table on ``console`` (a ``rich`` Console, or ``print`` when None); returns the numbers.
    """
    import optuna

    from ._sampler import DnnSATSampler
    from ._suggest import suggest

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    results: dict[str, Any] = {}
    for label, sampler in (
        ("TPE", optuna.samplers.TPESampler(seed=seed)),
        ("DnnSATSampler(TPE)", DnnSATSampler(problem, optuna.samplers.TPESampler(seed=seed))),
    ):
        infeasible = 0

        def objective(trial: optuna.Trial) -> float:
            nonlocal infeasible
            verdict = problem.check(suggest(trial, problem))
            if not verdict.feasible:
                infeasible += 1
                raise optuna.TrialPruned("infeasible: would not fit the budget")
            return float(next(iter(verdict.costs.values()), 0.0))  # the first cost (FLOPs): bigger is better

        study = optuna.create_study(direction="maximize", sampler=sampler)
        t = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            study.optimize(objective, n_trials=n_trials)
        complete = [tr for tr in study.trials if tr.state == optuna.trial.TrialState.COMPLETE]
        stats = getattr(sampler, "stats", None)
        results[label] = {
            "repaired": None if stats is None else stats.repaired + stats.relative_repaired,
            "proposals": None if stats is None else stats.proposals + stats.relative_samples,
            "infeasible": infeasible,
            "feasible": len(complete),
            "best": max((tr.value for tr in complete if tr.value is not None), default=float("nan")),
            "seconds": time.perf_counter() - t,
        }
    lines = [f"{n_trials} trials each, maximising the first cost (largest network that fits)"]
    for label, r in results.items():
        repaired = (
            "" if r["repaired"] is None else f", {r['repaired']} of {r['proposals']} proposals repaired"
        )
        lines.append(
            f"{label}: {r['infeasible']} infeasible launched, {r['feasible']} feasible{repaired}, "
            f"best feasible {r['best']:.4g} ({r['seconds']:.1f} s)"
        )
    out = console.print if console is not None else print
    for line in lines:
        out(line)
    return results
