"""NAS-Bench-201 data for ``benchmarks.nasbench201``: accuracies, exact costs, training time, scenarios.

Everything per architecture is precomputed once as numpy arrays indexed by the official architecture
index (0..15624), so a simulated trial is an array lookup.

* Accuracy: ``<dataset>_test_acc_200ep`` of ``nb201.csv`` (%, mean over seeds, 200 epochs).
* Ground-truth costs: ``params_mb`` (parameters / 1e6) and ``flops_m`` (NATS-Bench convention: conv and
  linear multiply-adds plus one per biased output element, / 1e6, batch 1) of every architecture, from
  ``dnnsat.zoo.get("nasbench201").reference_costs`` (checked against the official records in
  ``nats_fixture_3archs.csv`` by ``tests/test_zoo.py``); latency = a measured column of
  ``nb201_latency.csv`` (ms). Memory (peak bytes of a training step at batch ``MEMORY_BATCH``, SGD with
  momentum, fp32, on the ``MEMORY_DEVICE`` profile, CUDA context included) has no published table: its
  "truth" is dnnsat's own analytic model (checked against PyTorch's allocator by
  ``benchmarks.memory_accuracy``), so the memory scenario measures the value of pruning before launch,
  not the memory model's accuracy.
* Training time: seconds per epoch = ``a + b * flops_m``, least-squares on the official per-epoch
  training times of the three tss architectures of ``nats_fixture_3archs.csv`` (hp 200, same dataset).
  A trial costs 200 epochs of that, i.e. what it takes to produce the 200-epoch accuracy it reports.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks._early import CIFAR_TRAIN, LATENCY_REPEATS, LATENCY_WARMUP, CheckCosts
from dnnsat.zoo import get as zoo_get
from dnnsat.zoo._nasbench import EDGES, OPS, config_from_arch_str

DATA_DIR = Path(__file__).resolve().parents[2] / "shared" / "data" / "nasbench201"
DATASETS = {"cifar10": "cifar10", "cifar100": "cifar100", "imagenet16": "ImageNet16-120"}  # CLI -> NATS
EPOCHS = 200
N_ARCHS = 15625


@dataclass
class Scenario:
    """Limits of one constrained search (``None`` = unconstrained): params in MB (1e6 parameters),
    FLOPs in M (NATS convention), latency as (``nb201_latency.csv`` column, milliseconds)."""

    name: str
    max_params: float | None = None
    max_flops: float | None = None
    max_latency: tuple[str, float] | None = None
    max_memory: float | None = None  # MiB, peak of a training step (see the module docstring)
    latency_at_hand: bool = True  # False: the device is measured only after training

    def early_checks(self) -> list[str]:
        """Constraint keys checkable before training (all but latency on a device not at hand)."""
        keys = [k for k in ("params", "flops", "memory") if getattr(self, f"max_{k}") is not None]
        return keys + (["latency"] if self.max_latency is not None and self.latency_at_hand else [])

    def describe(self) -> str:
        parts = []
        if self.max_params is not None:
            parts.append(f"params ≤ {self.max_params:g} MB")
        if self.max_flops is not None:
            parts.append(f"FLOPs ≤ {self.max_flops:g} M")
        if self.max_latency is not None:
            where = "" if self.latency_at_hand else " (device not at hand)"
            parts.append(f"{self.max_latency[0]} ≤ {self.max_latency[1]:g} ms{where}")
        if self.max_memory is not None:
            parts.append(f"training memory ≤ {self.max_memory:g} MiB")
        return ", ".join(parts) or "unconstrained"


# Default scenarios: limits fixed once from the quantiles of the cifar10 costs (never from accuracies),
# rounded. params and FLOPs take only 28 distinct values each in NAS-Bench-201 (they depend on the number
# of 1x1 and 3x3 conv edges), so the exact scenarios sit on those steps (51.1 %, 21.8 %, 4.7 %); 1 % is
# reachable only with latency (a measured, continuous column). ``latency-remote-*`` are the same limits on
# a device not at hand (checked after training). The actual feasible fraction is printed at run time.
MEMORY_BATCH, MEMORY_DEVICE, MEMORY_OPTIMIZER = 256, "1080ti", "momentum"
LATENCY_COLUMN = "help_1080ti_256_latency_ms"
SCENARIOS: dict[str, Scenario] = {
    s.name: s
    for s in (
        Scenario("params-50", max_params=0.35),
        Scenario("flops-20", max_flops=16.0),
        Scenario("params-5", max_params=0.08),
        # 930 MiB before the GPU footprint counted cuBLAS and cuDNN (issue 18): the same 378 architectures
        Scenario("memory-2", max_memory=2060.0),
        Scenario("latency-5", max_latency=(LATENCY_COLUMN, 15.4)),
        Scenario("latency-remote-5", max_latency=(LATENCY_COLUMN, 15.4), latency_at_hand=False),
        Scenario("latency-1", max_latency=(LATENCY_COLUMN, 12.7)),
        Scenario("latency-remote-1", max_latency=(LATENCY_COLUMN, 12.7), latency_at_hand=False),
    )
}
#: the default run (the 1.3 % latency pair is left out of it for time; ``--scenarios`` selects it)
DEFAULT_SCENARIOS = ("params-50", "flops-20", "params-5", "memory-2", "latency-5", "latency-remote-5")


@dataclass
class Bench:
    """Per-architecture arrays for one dataset (row = official architecture index)."""

    dataset: str
    arch_str: list[str]
    ops: np.ndarray  # (15625, 6) op index per edge (EDGES order, OPS indices)
    acc: np.ndarray  # test accuracy (%) after 200 epochs
    params_mb: np.ndarray
    flops_m: np.ndarray
    latency: dict[str, np.ndarray]  # column -> ms
    time_fit: tuple[float, float]  # (a s/epoch, b s/epoch per MFLOP)
    time_fit_rows: list[dict[str, float]] = field(default_factory=list)  # the calibration points
    memory_mib: np.ndarray | None = None  # training-step peak (dnnsat's model), computed on first use
    index_of: np.ndarray = field(init=False)  # base-5 code of the op tuple -> architecture index

    def __post_init__(self) -> None:
        self.index_of = np.full(5 ** len(EDGES), -1, dtype=np.int64)
        self.index_of[self.code(self.ops)] = np.arange(len(self.ops))

    @staticmethod
    def code(ops: np.ndarray) -> np.ndarray:
        return np.asarray(ops) @ (5 ** np.arange(len(EDGES)))

    def index(self, config: dict[str, str]) -> int:
        """Architecture index of ``{"edge_0_1": "nor_conv_3x3", ...}``."""
        return int(self.index_of[int(self.code(np.array([OPS.index(config[e]) for e in EDGES])))])

    @property
    def trial_seconds(self) -> np.ndarray:
        """Simulated training time of each architecture: 200 epochs x the fitted seconds per epoch."""
        return EPOCHS * self.epoch_seconds

    @property
    def epoch_seconds(self) -> np.ndarray:
        """Fitted seconds per training epoch of each architecture."""
        a, b = self.time_fit
        return a + b * self.flops_m

    def configs(self, archs: Any) -> list[dict[str, str]]:
        """``{edge: op}`` configurations of the architecture indices ``archs``."""
        return [{e: OPS[j] for e, j in zip(EDGES, self.ops[i])} for i in archs]

    def memory(self) -> np.ndarray:
        """Peak MiB of a training step of every architecture (dnnsat's model; about 5 s, then cached)."""
        if self.memory_mib is None:
            problem = memory_problem(self.dataset)
            cols = self.columns()
            self.memory_mib = (
                np.array(
                    [problem.costs({e: cols[e][i] for e in EDGES})["memory"] for i in range(len(self.acc))]
                )
                / 2**20
            )
        return self.memory_mib

    def columns(self) -> dict[str, np.ndarray]:
        """Every architecture as ``check_batch`` columns ``{edge: op names}``."""
        names = np.array(OPS)
        return {e: names[self.ops[:, j]] for j, e in enumerate(EDGES)}

    def truth(self, sc: Scenario) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """(ground-truth feasibility, normalised constraint values ``value / limit - 1`` (<= 0 ok))."""
        values: dict[str, np.ndarray] = {}
        if sc.max_params is not None:
            values["params"] = np.rint(self.params_mb * 1e6) / round(sc.max_params * 1e6) - 1
        if sc.max_flops is not None:
            values["flops"] = np.rint(self.flops_m * 1e6) / round(sc.max_flops * 1e6) - 1
        if sc.max_latency is not None:
            col, ms = sc.max_latency
            if col not in self.latency:
                raise ValueError(f"--max-latency: unknown column {col!r}; known: {sorted(self.latency)}")
            values["latency"] = self.latency[col] / ms - 1
        if sc.max_memory is not None:
            values["memory"] = self.memory() / sc.max_memory - 1
        ok = np.ones(len(self.acc), dtype=bool)
        for v in values.values():
            ok &= v <= 0
        return ok, values


def fit_train_time(fixture: Path, nats_dataset: str) -> tuple[tuple[float, float], list[dict[str, float]]]:
    """Least-squares ``seconds/epoch = a + b * flops_m`` on the fixture's tss rows (hp 200, dataset)."""
    rows = [
        r
        for r in csv.DictReader(fixture.open())
        if r["space"] == "tss" and r["hp_epochs"] == str(EPOCHS) and r["dataset"] == nats_dataset
    ]
    if len(rows) < 2:
        raise ValueError(f"{fixture}: need >= 2 tss rows with hp_epochs={EPOCHS} for {nats_dataset!r}")
    x = np.array([float(r["flops_m"]) for r in rows])
    y = np.array([float(r["train_time_per_epoch_s"]) for r in rows])
    b, a = np.polyfit(x, y, 1)
    pts = [
        {
            "arch_index": int(r["arch_index"]),
            "flops_m": float(xi),
            "seconds_per_epoch": float(yi),
            "fitted": float(a + b * xi),
        }
        for r, xi, yi in zip(rows, x, y)
    ]
    return (float(a), float(b)), pts


def load(data: Path | None, dataset: str) -> Bench:
    """The shared CSV tables in ``data`` (default ``../shared/data/nasbench201``), or NATS-Bench API files."""
    data = Path(data) if data is not None else DATA_DIR
    if dataset not in DATASETS:
        raise ValueError(f"--dataset must be one of {list(DATASETS)}, got {dataset!r}")
    if not (data / "nb201.csv").exists():
        return _load_nats_api(data, dataset)
    rows = list(csv.DictReader((data / "nb201.csv").open()))
    if len(rows) != N_ARCHS or [int(r["arch_index"]) for r in rows] != list(range(N_ARCHS)):
        raise ValueError(f"{data / 'nb201.csv'}: expected rows for architecture indices 0..{N_ARCHS - 1}")
    arch = [r["arch_str"] for r in rows]
    acc = np.array([float(r[f"{dataset}_test_acc_200ep"]) for r in rows])
    latency: dict[str, np.ndarray] = {}
    lat_file = data / "nb201_latency.csv"
    if lat_file.exists():
        lrows = list(csv.DictReader(lat_file.open()))
        if [r["arch_str"] for r in lrows] != arch:
            raise ValueError(f"{lat_file}: rows are not in the order of nb201.csv")
        latency = {k: np.array([float(r[k]) for r in lrows]) for k in lrows[0] if k.endswith("_ms")}
    fit, pts = fit_train_time(data / "nats_fixture_3archs.csv", DATASETS[dataset])
    return _bench(dataset, arch, acc, latency, fit, pts)


def _bench(
    dataset: str,
    arch: list[str],
    acc: np.ndarray,
    latency: dict[str, np.ndarray],
    fit: tuple[float, float],
    pts: list[dict[str, float]],
) -> Bench:
    nb: Any = zoo_get("nasbench201")
    ops = np.array([[OPS.index(config_from_arch_str(s)[e]) for e in EDGES] for s in arch], dtype=np.int64)
    costs = [nb.reference_costs(s, DATASETS[dataset]) for s in arch]
    params = np.array([c["params_mb"] for c in costs])
    flops = np.array([c["flops_m"] for c in costs])
    return Bench(dataset, arch, ops, acc, params, flops, latency, fit, pts)


def _load_nats_api(path: Path, dataset: str) -> Bench:
    """Official NATS-Bench tss files via the ``nats_bench`` package (``pip install nats_bench``).

    Accuracy: ``get_more_info(i, ds, hp="200", is_random=False)["test-accuracy"]``; training time per
    epoch from ``get_more_info(...)["train-per-time"]`` is fitted like the fixture (a + b * flops_m over
    every architecture); latency: the API's ``latency`` (s -> ms) as column ``nats_latency_ms``.
    """
    try:
        from nats_bench import create  # type: ignore[import-not-found]
    except ImportError:
        raise SystemExit(
            f"--data {path}: no nb201.csv there, and reading official NATS-Bench files needs the "
            "nats_bench package (pip install nats_bench)"
        ) from None
    api = create(str(path), "tss", fast_mode=True, verbose=False)
    nats_ds = DATASETS[dataset]
    arch, acc, lat, flops, tpe = [], [], [], [], []
    for i in range(len(api)):
        arch.append(api.meta_archs[i])
        info = api.get_more_info(i, nats_ds, hp="200", is_random=False)
        acc.append(info["test-accuracy"])
        tpe.append(info["train-per-time"])
        cost = api.get_cost_info(i, nats_ds, hp="200")
        lat.append(cost["latency"] * 1e3)
        flops.append(cost["flops"])
    b, a = np.polyfit(np.array(flops), np.array(tpe), 1)
    return _bench(dataset, arch, np.array(acc), {"nats_latency_ms": np.array(lat)}, (float(a), float(b)), [])


# ------------------------------------------------------------------------------------------------
# dnnsat's own decision: a Problem over the 6 edges whose budget encodes the scenario's limits


@dataclass
class Decision:
    """dnnsat's Problem for a scenario, its verdict on every architecture and how it was obtained."""

    problem: Any
    feasible: np.ndarray  # dnnsat's verdict per architecture
    calibration: list[int]  # architectures whose measured latency calibrated the device model
    device: str | None = None


def dnnsat_problem(
    bench: Bench, sc: Scenario, calib_n: int = 20, calib_seed: int = 0
) -> tuple[Any, list[int]]:
    """The Problem dnnsat decides with (what the ``dnnsat`` arm compiles) and its calibration architectures.

    params and FLOPs are exact: ``Budget(params=round(MB * 1e6))``; NATS FLOPs = MACs + classes (the
    classifier's bias additions), dnnsat's ``flops`` = 2 x MACs, so ``flops <= M`` becomes
    ``Budget(flops=2 * (round(M * 1e6) - classes))``. Memory: :func:`memory_problem`'s model at the
    limit. Latency goes through :func:`_latency_budget`.
    """
    from dnnsat.cost import Budget
    from dnnsat.zoo._nasbench import DATASETS as NATS_DATASETS

    kw: dict[str, Any] = {}
    if sc.max_params is not None:
        kw["params"] = round(sc.max_params * 1e6)
    if sc.max_flops is not None:
        classes = NATS_DATASETS[DATASETS[bench.dataset]][1]
        kw["flops"] = 2 * (round(sc.max_flops * 1e6) - classes)
    calib: list[int] = []
    options: dict[str, Any] = {"dataset": DATASETS[bench.dataset]}
    if sc.max_memory is not None:
        if sc.max_latency is not None:
            raise ValueError("a scenario limits memory or latency, not both (different batch sizes)")
        return memory_problem(bench.dataset, sc.max_memory * 2**20, **kw), calib
    if sc.max_latency is not None:
        lat_kw, options["batch_size"], calib = _latency_budget(bench, sc, calib_n, calib_seed)
        kw.update(lat_kw)
    return zoo_get("nasbench201")(budget=Budget(**kw), **options), calib


def memory_problem(dataset: str, limit_bytes: float | None = None, **limits: Any) -> Any:
    """NAS-Bench-201 at batch ``MEMORY_BATCH`` with a training-memory budget (SGD with momentum, fp32, on
    the ``MEMORY_DEVICE`` profile) of ``limit_bytes`` (none: the costs only) plus other ``limits``."""
    from dnnsat.cost import Budget

    budget = Budget(
        memory=limit_bytes, device=MEMORY_DEVICE, mode="train", optimizer=MEMORY_OPTIMIZER, **limits
    )
    return zoo_get("nasbench201")(budget=budget, dataset=DATASETS[dataset], batch_size=MEMORY_BATCH)


def decide(bench: Bench, sc: Scenario, calib_n: int = 20, calib_seed: int = 0) -> Decision:
    """:func:`dnnsat_problem` and its verdict on all 15,625 architectures."""
    problem, calib = dnnsat_problem(bench, sc, calib_n, calib_seed)
    device = latency_device(sc.max_latency[0])[0] if sc.max_latency is not None else None
    return Decision(problem, np.asarray(problem.check_batch(bench.columns()), dtype=bool), calib, device)


def early_check_seconds(bench: Bench, sc: Scenario, costs: CheckCosts) -> np.ndarray:
    """Seconds per architecture of checking ``sc.early_checks()`` before training (0 when none; see
    :mod:`benchmarks._early`): params/FLOPs ``meta_s``; memory process + data + build + one training step
    (an epoch's fitted time / steps per epoch); latency build + warm-up and repeats at its latency."""
    out = np.zeros(len(bench.acc))
    checks = sc.early_checks()
    if {"params", "flops"} & set(checks):
        out += costs.meta_s
    if "memory" in checks:
        steps = -(-CIFAR_TRAIN // MEMORY_BATCH)
        out += costs.process_s + costs.data_s + costs.build_s + bench.epoch_seconds / steps
    if "latency" in checks:
        assert sc.max_latency is not None
        out += costs.build_s + (LATENCY_WARMUP + LATENCY_REPEATS) * bench.latency[sc.max_latency[0]] / 1e3
    return out


# -- latency path: dnnsat's device model, calibrated on at most ``calib_n`` measured architectures ----

#: ``nb201_latency.csv`` column prefix -> dnnsat device (``dnnsat/cost/devices.yaml``); the batch size is
#: the column's ``_<batch>_`` part for GPUs, 1 for CPUs (HELP measures them with batch 1).
LATENCY_DEVICES = {
    "help_1080ti_": "1080ti",
    "help_titanx_": "titanx",
    "help_titanxp_": "titanxp",
    "help_gold_6226_": "xeon-gold-6226",
    "help_silver_4114_": "xeon-silver-4114",
}


def latency_device(column: str) -> tuple[str, int]:
    """(dnnsat device name, batch size) of a latency column, e.g. ``help_1080ti_256_latency_ms``."""
    for prefix, device in sorted(LATENCY_DEVICES.items(), key=lambda kv: -len(kv[0])):
        if column.startswith(prefix):
            rest = column[len(prefix) :].removesuffix("latency_ms").strip("_")
            return device, int(rest) if rest else 1
    raise ValueError(
        f"--max-latency: no dnnsat device profile for column {column!r}; columns with one: "
        + ", ".join(f"{p}*" for p in LATENCY_DEVICES)
    )


def _latency_budget(
    bench: Bench, sc: Scenario, calib_n: int, calib_seed: int
) -> tuple[dict[str, Any], int, list[int]]:
    """Latency limit on the column's device, the profile fitted on ``calib_n`` measured architectures.

    The calibration architectures are drawn uniformly (``default_rng(calib_seed)``) from all 15,625;
    ``dnnsat.cost.fit_device`` adjusts the catalog profile's launch overhead and efficiencies to their
    measured latency (batch as measured, inference, float32). Nothing else of the column is used.
    """
    from dnnsat.cost import Budget, fit_device

    assert sc.max_latency is not None
    column, ms = sc.max_latency
    device, batch = latency_device(column)
    model: Any = zoo_get("nasbench201")
    net = model.network(dataset=DATASETS[bench.dataset], batch_size=batch)
    space = model.space()
    calib = sorted(int(i) for i in np.random.default_rng(calib_seed).choice(N_ARCHS, calib_n, replace=False))
    samples = [
        ((net, config_from_arch_str(bench.arch_str[i])), bench.latency[column][i] / 1e3) for i in calib
    ]
    profile = fit_device(device, samples, budget=Budget(mode="inference"), space=space, name=f"{device}-fit")
    return {"latency": ms / 1e3, "device": profile, "mode": "inference"}, batch, calib
