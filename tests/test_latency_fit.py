"""fit_device's prior strength: chosen by leave-one-out cross-validation inside the samples by default."""

from __future__ import annotations

import re
import time

import numpy as np
import pytest

from dnnsat import zoo
from dnnsat.cost import DeviceProfile, fit_device, get_device
from dnnsat.cost.latency import PRIOR_GRID, latency_expressions
from dnnsat.expr import compile_vectorized
from dnnsat.zoo._nasbench import EDGES, OPS

BASE = get_device("xeon-gold-6226")
# far from BASE: 5x slower launches, convolutions at 1/20 of the catalog's efficiency
TRUTH = BASE.replace(
    launch_overhead_s=5e-5, efficiency={**BASE.efficiency, "conv": 0.025, "pointwise": 0.1, "memory": 0.3}
)


def _samples(profile: DeviceProfile, n: int, noise: float, seed: int) -> list[tuple[object, float]]:
    """``n`` random NAS-Bench-201 cells (batch 1) timed by ``profile`` times log-normal ``noise``."""
    model = zoo.get("nasbench201")
    space = model.space()
    net = model.build(batch_size=1)(space.vars)
    rng = np.random.default_rng(seed)
    cols = {e: rng.integers(0, len(OPS), n) for e in EDGES}
    seconds = compile_vectorized([latency_expressions(net, None, profile)["latency"]])(cols)[0]
    seconds = seconds * np.exp(noise * rng.standard_normal(n))
    return [((net, {e: int(cols[e][i]) for e in EDGES}), float(seconds[i])) for i in range(n)]


def _chosen(profile: DeviceProfile) -> float:
    match = re.search(r"prior weight ([0-9.e+-]+), chosen by leave-one-out", profile.sources["efficiency"])
    assert match, profile.sources["efficiency"]
    return float(match.group(1))


def test_cv_lets_informative_samples_move_far_from_the_profile() -> None:
    """Exact latencies of a device far from the catalog: a weak prior wins and the truth is recovered."""
    samples = _samples(TRUTH, 20, noise=0.0, seed=0)
    start = time.perf_counter()
    fitted = fit_device(BASE, samples)
    assert time.perf_counter() - start < 5.0
    assert _chosen(fitted) <= 1e-2 < 0.05  # the old fixed default would have held the profile back
    assert fitted.launch_overhead_s == pytest.approx(TRUTH.launch_overhead_s, rel=0.05)
    assert fitted.efficiency["conv"] == pytest.approx(0.025, rel=0.05)


def test_cv_keeps_the_profile_when_samples_are_only_noise() -> None:
    """The truth is the profile itself and 6 samples carry 30 % noise: a strong prior wins."""
    fitted = fit_device(BASE, _samples(BASE, 6, noise=0.3, seed=1))
    assert "no fit did better held out than the profile" in fitted.sources["efficiency"]
    assert fitted.efficiency == BASE.efficiency and fitted.launch_overhead_s == BASE.launch_overhead_s


def test_fit_is_never_worse_than_the_profile_held_out() -> None:
    """8 noisy samples of a device exactly twice as slow as the profile: no fit ranks better held out, so
    the profile is kept, rescaled: its ranking of new configurations is the profile's, its error lower."""
    from scipy.stats import spearmanr

    slow = BASE.replace(
        launch_overhead_s=2 * BASE.launch_overhead_s,
        parallel_overhead_s=2 * BASE.parallel_overhead_s,
        conv_overhead_s=2 * BASE.conv_overhead_s,
        efficiency={k: v / 2 for k, v in BASE.efficiency.items()},
    )
    fitted = fit_device(BASE, _samples(slow, 8, noise=0.2, seed=6))
    assert "no fit did better held out than the profile" in fitted.sources["efficiency"]
    assert re.search(r"every latency x (1\.[89]|2\.[01])", fitted.sources["efficiency"])
    test = _samples(BASE, 40, noise=0.0, seed=6)
    net = test[0][0][0]
    lat = {p.name: compile_vectorized([latency_expressions(net, None, p)["latency"]]) for p in (BASE, fitted)}
    cols = {e: np.array([cfg[e] for (_, cfg), _ in test]) for e in EDGES}
    truth = 2.0 * np.array([s for _, s in test])
    pred = {name: fn(cols)[0] for name, fn in lat.items()}
    rho = {name: spearmanr(p, truth)[0] for name, p in pred.items()}
    assert rho[fitted.name] == pytest.approx(rho[BASE.name], abs=1e-3)  # near-ties may round differently
    error = {name: np.median(np.abs(p / truth - 1)) for name, p in pred.items()}
    assert error[fitted.name] < error[BASE.name]


def test_fixed_prior_weight_still_accepted() -> None:
    samples = _samples(TRUTH, 8, noise=0.0, seed=2)
    fitted = fit_device(BASE, samples, prior_weight=0.05)
    assert "prior weight 0.05)" in fitted.sources["efficiency"]
    assert "chosen" not in fitted.sources["efficiency"]
    assert fit_device(BASE, samples, prior_weight=1e-8).efficiency["conv"] == pytest.approx(0.025, rel=0.05)
    assert min(PRIOR_GRID) < 0.05 < max(PRIOR_GRID)
    with pytest.raises(ValueError, match="number or 'cv'"):
        fit_device(BASE, samples, prior_weight="loo")


def test_batched_jacobian_equals_one_point_at_a_time() -> None:
    """fit_device evaluates the Jacobian's p + 1 points in one vectorised call: same numbers as p calls."""
    from dnnsat.cost.latency._fit import _jacobian

    a = np.array([[1.0, 2.0, 0.5], [0.3, -1.0, 2.0]])

    def residuals(theta: np.ndarray) -> np.ndarray:  # (p,) -> (2,), (k, p) -> (k, 2)
        return np.exp(theta @ a.T) - 1.0

    theta = np.array([0.1, -0.2, 0.3])
    jac = _jacobian(residuals, theta, residuals(theta))
    one_by_one = np.stack(
        [(residuals(theta + 1e-6 * e) - residuals(theta)) / 1e-6 for e in np.eye(3)], axis=1
    )
    assert jac.shape == (2, 3)
    np.testing.assert_allclose(jac, one_by_one, rtol=0, atol=1e-12)
    np.testing.assert_allclose(jac, np.exp(theta @ a.T)[:, None] * a, rtol=1e-5)  # the analytic Jacobian


def test_probed_efficiencies_need_strong_evidence_to_move() -> None:
    """A class the probes measured (``probed``) keeps its value when few noisy samples barely involve it;
    the same fit without ``probed`` moves it further. Exact samples still move it to the truth."""
    from dnnsat.cost.latency import PROBE_PRIOR_WEIGHT

    samples = _samples(TRUTH, 6, noise=0.3, seed=3)
    probed = BASE.replace(efficiency={**BASE.efficiency, "pointwise": 0.1}, probed=("pointwise",))
    free = probed.replace(probed=())
    held, moved = (abs(np.log(fit_device(p, samples).efficiency["pointwise"] / 0.1)) for p in (probed, free))
    assert held < moved
    fitted = fit_device(probed, samples)
    assert fitted.probed == () and f">= {PROBE_PRIOR_WEIGHT:g}" in fitted.sources["efficiency"]
    exact = fit_device(
        probed.replace(efficiency={**probed.efficiency, "conv": 0.5}), _samples(TRUTH, 20, 0.0, 0)
    )
    assert exact.efficiency["conv"] == pytest.approx(0.025, rel=0.1)
