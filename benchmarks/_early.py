"""What a practitioner's objective pays to check a constraint *before* training (the ``early`` arms).

``benchmarks.nasbench201`` simulates training, so the cost of each early check is measured here, on this
machine, at the start of every run (:func:`measure_nb201`), and charged per trial:

* params / FLOPs: build the NAS-Bench-201 module on PyTorch's meta device and count its parameters and
  FLOPs (``torch.utils.flop_counter.FlopCounterMode`` over one forward): ``meta_s``.
* memory (an out-of-memory error surfaces at the first training step): a fresh process (interpreter
  start + ``import torch``, ``process_s``), loading a CIFAR-10-sized training set (50,000 x 3 x 32 x 32
  ``uint8`` from an ``.npy`` file, converted to normalised float32, ``data_s``; timed on a tenth of it and
  scaled x10), building the trainable module (``build_s``), and one training step, whose time comes from
  the benchmark's training-time model (seconds per epoch / steps per epoch). CUDA context creation and
  cuDNN autotuning are not included (no GPU here), which makes the early check cheaper than it is.
* latency with the device at hand: ``build_s`` plus ``LATENCY_WARMUP + LATENCY_REPEATS`` forwards at the
  measured latency. A device not at hand is measured only after training: no early check.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

LATENCY_WARMUP, LATENCY_REPEATS = 10, 100  # forwards of an early latency check (typical benchmark loop)
CIFAR_TRAIN = 50_000  # training images of a CIFAR-sized data set


@dataclass
class CheckCosts:
    """Measured seconds of the pieces of an early check (see the module docstring)."""

    meta_s: float  # build on the meta device + count params and FLOPs
    build_s: float  # build the trainable module (CPU)
    process_s: float  # interpreter start + import torch
    data_s: float  # load and normalise a CIFAR-10-sized training set

    def as_dict(self) -> dict[str, float]:
        return asdict(self)


def _median_time(fn: Callable[[], Any], repeats: int) -> float:
    out = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t)
    return statistics.median(out)


def process_start_seconds(repeats: int = 3) -> float:
    """Median wall seconds of ``python -c "import torch"`` in a fresh interpreter."""
    return _median_time(lambda: subprocess.run([sys.executable, "-c", "import torch"], check=True), repeats)


def data_load_seconds(n_images: int = CIFAR_TRAIN, fraction: float = 0.1) -> float:
    """Seconds to load ``n_images`` 3 x 32 x 32 ``uint8`` images from ``.npy`` and normalise them to float32,
    timed on ``fraction`` of them and scaled (a temporary file, removed afterwards)."""
    import torch

    n = int(n_images * fraction)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "train.npy"
        np.save(path, np.random.default_rng(0).integers(0, 256, (n, 3, 32, 32), dtype=np.uint8))

        def load() -> None:
            x = torch.from_numpy(np.load(path)).float().div_(255)
            (x - x.mean((0, 2, 3), keepdim=True)) / x.std((0, 2, 3), keepdim=True)

        return _median_time(load, 3) / fraction


def meta_count_seconds(build: Callable[[str], Any], inputs: Callable[[Any], Sequence[Any]]) -> float:
    """Seconds to build a module on the meta device (``build("meta")``) and count its parameters and
    forward FLOPs (``FlopCounterMode`` over ``module(*inputs(module))``)."""
    from torch.utils.flop_counter import FlopCounterMode

    t = time.perf_counter()
    module = build("meta")
    sum(p.numel() for p in module.parameters())
    with FlopCounterMode(display=False) as fc:
        module(*inputs(module))
    fc.get_total_flops()
    return time.perf_counter() - t


def measure_nb201(problem: Any, configs: Sequence[Mapping[str, Any]]) -> CheckCosts:
    """Check costs of NAS-Bench-201 modules: medians over ``configs`` (``problem``: the zoo Problem whose
    network is built, at the training batch)."""
    from dnnsat.torch import example_inputs, to_torch

    meta = statistics.median(
        meta_count_seconds(lambda dev, c=c: to_torch(problem, c, device=dev), example_inputs) for c in configs
    )
    build = statistics.median(_median_time(lambda c=c: to_torch(problem, c), 1) for c in configs)
    return CheckCosts(meta, build, process_start_seconds(), data_load_seconds())
