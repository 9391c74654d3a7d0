"""Fitting a device profile's launch overhead and efficiency factors to measured latencies
(:func:`fit_device`: a log-space Levenberg-Marquardt fit of :func:`~dnnsat.cost.latency.latency_model`
with a log-normal prior, its weight chosen by leave-one-out cross-validation).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from ...expr import compile_vectorized
from ...graph import Network, encode_config
from .._devices import DeviceProfile, get_device
from ._model import latency_model
from ._roofline import class_efficiency

__all__ = ["fit_device", "PRIOR_GRID", "PROBE_PRIOR_WEIGHT"]


Sample = tuple[Any, float]
PRIOR_GRID = (1e-4, 1e-3, 1e-2, 0.1, 1.0)  # prior weights fit_device(prior_weight="cv") chooses from
# prior weight fit_device gives, at least, to a class efficiency a probe op measured (DeviceProfile.probed):
# the probe counts like one more sample (residuals are log errors), so the samples must agree to move it
PROBE_PRIOR_WEIGHT = 1.0


def fit_device(
    profile: str | DeviceProfile,
    samples: Sequence[Sample],
    budget: Any = None,
    space: Any = None,
    prior_weight: float | str = "cv",
    name: str | None = None,
) -> DeviceProfile:
    """Adjust ``profile``'s launch overhead and efficiency factors to measured latencies.

    ``samples``: ``(network, seconds)`` for networks without free variables, or
    ``((network, config), seconds)`` with ``config`` a user configuration encoded with ``space`` when
    given, else an already encoded assignment, or ``((problem, config), seconds)`` for a Problem built
    with a model (encoded with the problem's space). Seconds are the measured inference latency
    of the batch as built (the model's ``latency`` cost); ``budget`` sets the dtype.

    Fitted parameters: ``launch_overhead_s`` (and ``parallel_overhead_s`` where the profile has one), the
    ``memory`` efficiency and one compute efficiency per op class present in the samples (``conv``,
    ``matmul``, ``elementwise``, ...). The fit minimises the
    squared log error of the predictions (a ratio error: small and large networks weigh alike) plus
    ``prior_weight`` times the squared log distance of each parameter from the starting profile - a
    log-normal prior that keeps parameters the samples cannot identify where they were. It is a
    damped Gauss-Newton (Levenberg-Marquardt) fit in log space, started from the profile and from 30x
    lower compute efficiencies (the roofline's ``max`` has no gradient in its inactive branch); the
    better of the two is kept. It sees only ``samples``; peaks, bandwidth and sizes are not changed.

    ``prior_weight="cv"`` (default) fits every weight of :data:`PRIOR_GRID`, weak to strong (the
    weakest from the two starts above, each stronger one from the previous weight's two fits), and keeps
    the one whose leave-one-out predictions misorder the fewest sample pairs, then have the smallest log
    error (exact ties: the stronger prior), so the samples decide how far the fit may move from the
    profile. Leave-one-out residuals come from the Gauss-Newton linearisation at each fit
    (``r_i / (1 - h_ii)``, the PRESS statistic): no refits. A number fixes the weight (0.05 was the
    default before). The choice is recorded in the profile's ``sources``.

    Never worse than the profile (``"cv"`` only): the profile's own predictions of the samples are held
    out by construction; a fitted weight is kept only if its leave-one-out predictions misorder no more
    sample pairs and have no larger median error than the profile's. When none is, the result is the
    profile with every latency scaled by one factor (the mean log error: ranking unchanged) if that lowers
    the leave-one-out median error, else the profile unchanged; ``sources`` says which.

    Efficiencies of the classes in ``profile.probed`` (measured on the device by a probe op,
    :func:`dnnsat.torch.calibrate`) get a prior weight of at least :data:`PROBE_PRIOR_WEIGHT` (as much as
    one sample), whatever the chosen weight: a few samples that barely involve a class cannot move a
    measured value far. The fitted profile has no ``probed`` classes (its factors are fitted).
    """
    base = get_device(profile)
    if len(samples) < 2:
        raise ValueError(f"fit_device: needs at least 2 samples (network, seconds), got {len(samples)}")
    groups: dict[int, tuple[Network, list[Mapping[str, Any]], list[float]]] = {}
    for i, (item, seconds) in enumerate(samples):
        net, config = item if isinstance(item, tuple) else (item, {})
        sample_space = space
        if not isinstance(net, Network) and isinstance(getattr(net, "network", None), Network):
            net, sample_space = net.network, net.space  # a Problem: encode with its own space
        if not isinstance(net, Network):
            raise TypeError(
                f"fit_device: sample {i} must hold a dnnsat Network or Problem, got {type(net).__name__}"
            )
        if not seconds > 0:
            raise ValueError(f"fit_device: sample {i} has a non-positive latency {seconds!r} (seconds)")
        env = _encode(sample_space, config)
        groups.setdefault(id(net), (net, [], []))[1].append(env)
        groups[id(net)][2].append(float(seconds))
    models = [latency_model(net, budget, base) for net, _, _ in groups.values()]
    classes = sorted({c for m in models for c in m.classes})
    overheads = ["launch_overhead_s"] + (["parallel_overhead_s"] if base.parallel_overhead_s > 0 else [])
    names = [*overheads, "memory", *classes]
    start = np.log(
        [base.launch_overhead_s or 1e-6, *([base.parallel_overhead_s] if len(overheads) > 1 else [])]
        + [base.efficiency["memory"]]
        + [class_efficiency(base, c) for c in classes]
    )
    fns = [compile_vectorized([m.expr]) for m in models]
    columns = [{k: np.asarray([env[k] for env in envs]) for k in envs[0]} for _, envs, _ in groups.values()]
    measured = np.log(np.concatenate([np.asarray(ys) for _, _, ys in groups.values()]))

    def predict(theta: np.ndarray) -> np.ndarray:
        """Log latencies of the samples under log-parameters ``theta``: shape (n,) for a vector, (k, n)
        for k parameter vectors (rows), evaluated in one vectorised call (the Jacobian's k + 1 points)."""
        thetas = np.atleast_2d(theta)
        k = len(thetas)
        params = np.exp(np.clip(thetas, -60.0, 60.0))
        out = []
        for m, fn, cols, (_, envs, _) in zip(models, fns, columns, groups.values()):
            n = len(envs)
            values = {name: np.repeat(params[:, j], n) for j, name in enumerate(names)}
            env = {**{c: np.tile(v, k) for c, v in cols.items()}, **m.parameter_env(values)}
            out.append(np.broadcast_to(np.asarray(fn(env)[0], dtype=float), (k * n,)).reshape(k, n))
        logs = np.log(np.concatenate(out, axis=1))
        return logs if np.ndim(theta) == 2 else logs[0]

    # max() in the roofline has no gradient in its inactive branch: also start from 30x lower compute
    # efficiencies (compute-bound everywhere) and keep the better fit
    low = start.copy()
    low[len(overheads) + 1 :] -= math.log(30.0)
    probe_floor = np.array([PROBE_PRIOR_WEIGHT if n in base.probed else 0.0 for n in names])

    def fit(weight: float, starts: Sequence[np.ndarray]) -> tuple[list[np.ndarray], np.ndarray, np.ndarray]:
        """Fits from each start, the best of them and its leave-one-out residuals."""

        strength = np.sqrt(np.maximum(weight, probe_floor))

        def residuals(theta: np.ndarray) -> np.ndarray:
            prior = strength * (theta - start)
            return np.concatenate([predict(theta) - measured, prior], axis=-1)

        fits = [_levenberg_marquardt(residuals, s) for s in starts]
        best = min(fits, key=lambda t: float(np.sum(residuals(t) ** 2)))
        return fits, best, _loo_residuals(residuals, best, len(measured))

    if isinstance(prior_weight, str):
        if prior_weight != "cv":
            raise ValueError(f"fit_device: prior_weight must be a number or 'cv', got {prior_weight!r}")
        # (CV score, weight, theta, leave-one-out residuals) per prior weight
        chosen: list[tuple[tuple[float, float], float, np.ndarray, np.ndarray]] = []
        starts = [start, low]
        for weight in sorted(PRIOR_GRID):  # weak to strong: a strong prior first traps fits near the profile
            starts, theta, loo = fit(weight, starts)
            chosen.append((_cv_score(loo, measured), weight, theta, loo))
        zero = predict(start) - measured  # the profile's own log errors: held out by construction
        kept = _held_out_baseline(zero, measured)
        helps = [c for c in chosen if _no_worse(_held_out(c[3], measured), kept[1])]
        if not helps:
            return _baseline_profile(base, kept, len(samples), name)
        score, weight, theta, _ = min(reversed(helps), key=lambda c: c[0])
        how = (
            f"prior weight {weight:g}, chosen by leave-one-out cross-validation: {100 * score[0]:.1f} % of "
            f"sample pairs misordered, RMS log error {math.sqrt(score[1]):.3g}; no worse than the profile "
            "held out"
        )
    else:
        weight = float(prior_weight)
        theta = fit(weight, [start, low])[1]
        how = f"prior weight {weight:g}"
    fitted = dict(zip(names, np.exp(theta)))
    efficiency = {**base.efficiency, "memory": float(fitted["memory"])}
    efficiency.update({c: float(fitted[c]) for c in classes})
    n = len(samples)
    if base.probed:
        how += f"; probed classes ({', '.join(base.probed)}) weight >= {PROBE_PRIOR_WEIGHT:g}"
    note = f"fitted by fit_device on {n} measured latencies (log least squares, {how})"
    return base.replace(
        name=name or f"{base.name}-fitted",
        launch_overhead_s=float(fitted["launch_overhead_s"]),
        parallel_overhead_s=float(fitted.get("parallel_overhead_s", 0.0)),
        efficiency=efficiency,
        sources={**base.sources, "launch_overhead_s": note, "efficiency": note}
        | ({"parallel_overhead_s": note} if len(overheads) > 1 else {}),
        aliases=(),
        probed=(),
    )


def _held_out(loo: np.ndarray, measured: np.ndarray) -> tuple[float, float]:
    """(share of sample pairs misordered, median absolute percentage error) of held-out log residuals."""
    return _cv_score(loo, measured)[0], float(np.median(np.abs(np.expm1(loo))))


def _no_worse(score: tuple[float, float], baseline: tuple[float, float]) -> bool:
    """A fit is kept only when its held-out ranking and its held-out median error are both no worse."""
    return score[0] <= baseline[0] + 1e-12 and score[1] <= baseline[1] + 1e-12


def _held_out_baseline(zero: np.ndarray, measured: np.ndarray) -> tuple[float, tuple[float, float]]:
    """What ``fit_device`` falls back to, as (log scale factor, held-out score): the profile with every
    prediction scaled by one factor (the mean log error, cross-validated leave-one-out; the ranking is
    the profile's) when that lowers the held-out median error, else the profile unchanged (factor 0)."""
    n = len(zero)
    scaled = zero - (zero.sum() - zero) / (n - 1)  # leave-one-out residuals of a fitted log offset
    unchanged, rescaled = _held_out(zero, measured), _held_out(scaled, measured)
    if rescaled[1] < unchanged[1]:
        return -float(zero.mean()), rescaled
    return 0.0, unchanged


def _baseline_profile(
    base: DeviceProfile, kept: tuple[float, tuple[float, float]], n: int, name: str | None
) -> DeviceProfile:
    """``base`` with its latencies scaled by ``exp(kept[0])``: overheads times the factor, efficiencies
    divided by it (every latency term is a time over an efficiency or an overhead, so all scale alike)."""
    factor = math.exp(kept[0])
    misordered, error = kept[1]
    what = f"every latency x {factor:.3g}" if kept[0] else "the profile unchanged"
    note = (
        f"fit_device on {n} measured latencies: no fit did better held out than the profile (leave-one-out: "
        f"{100 * misordered:.1f} % of sample pairs misordered, median error {100 * error:.1f} %), so {what}"
    )
    return base.replace(
        name=name or f"{base.name}-fitted",
        launch_overhead_s=base.launch_overhead_s * factor,
        parallel_overhead_s=base.parallel_overhead_s * factor,
        conv_overhead_s=base.conv_overhead_s * factor,
        efficiency={k: v / factor for k, v in base.efficiency.items()},
        sources={**base.sources, "launch_overhead_s": note, "efficiency": note},
        aliases=(),
        probed=(),
    )


def _encode(space: Any, config: Mapping[str, Any]) -> dict[str, Any]:
    if space is None:
        return dict(config)
    return encode_config(space, config)


def _jacobian(residuals: Callable[[np.ndarray], np.ndarray], theta: np.ndarray, r: np.ndarray) -> np.ndarray:
    """Forward-difference Jacobian of ``residuals`` at ``theta`` (``r = residuals(theta)``); ``residuals``
    maps a (k, p) array of parameter rows to (k, m) residual rows in one call."""
    step = 1e-6
    return np.asarray((residuals(theta + step * np.eye(len(theta))) - r) / step).T


def _loo_residuals(residuals: Callable[[np.ndarray], np.ndarray], theta: np.ndarray, n: int) -> np.ndarray:
    """Leave-one-out residuals of the first ``n`` residuals (the data; the rest is the prior) at the
    least-squares fit ``theta``: ``r_i / (1 - h_ii)``, ``h`` the hat matrix of the linearised fit."""
    r = residuals(theta)
    jac = _jacobian(residuals, theta, r)
    data = jac[:n]
    leverage = np.einsum("ij,ji->i", data, np.linalg.pinv(jac.T @ jac) @ data.T)
    return np.asarray(r[:n] / np.maximum(1.0 - leverage, 1e-3))


def _cv_score(loo: np.ndarray, measured: np.ndarray) -> tuple[float, float]:
    """(share of the sample pairs with different latencies that the leave-one-out predictions misorder,
    their mean squared log error): ranking first, as budgets compare configurations; log error breaks ties.
    ``loo`` and ``measured`` are log latencies; pairs within 1e-9 of each other count as ties."""
    upper = np.triu_indices(len(measured), 1)

    def order(x: np.ndarray) -> np.ndarray:
        d = np.subtract.outer(x, x)[upper]
        return np.where(np.abs(d) > 1e-9, np.sign(d), 0.0)

    truth = order(measured)
    wrong = (order(measured + loo) != truth)[truth != 0]
    return float(wrong.mean()) if wrong.size else 0.0, float(np.mean(loo**2))


def _levenberg_marquardt(
    residuals: Callable[[np.ndarray], np.ndarray], theta: np.ndarray, iterations: int = 60
) -> np.ndarray:
    """Minimise ``sum(residuals(theta)**2)`` (finite-difference Jacobian, adaptive damping)."""
    r = residuals(theta)
    cost = float(r @ r)
    damping = 1e-2
    for _ in range(iterations):
        jac = _jacobian(residuals, theta, r)
        g = jac.T @ r
        h = jac.T @ jac
        improved = False
        while damping < 1e8:
            delta = np.linalg.solve(h + damping * np.diag(np.diag(h) + 1e-12), -g)
            cand = theta + delta
            rc = residuals(cand)
            cc = float(rc @ rc)
            if cc < cost:
                theta, r, improved = cand, rc, True
                damping = max(damping / 3, 1e-9)
                converged = cost - cc < 1e-9 * max(cost, 1e-30)
                cost = cc
                break
            damping *= 4
        if not improved or converged:
            break
    return theta
