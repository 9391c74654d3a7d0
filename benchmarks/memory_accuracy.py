"""Memory model vs PyTorch on this CPU: peak bytes of a training step (Adam, SGD, mixed precision) and
of inference, natively and with AVX2 emulated.

``python -m benchmarks.memory_accuracy [--quick] [--native-only]``. Configurations are drawn with a
fixed seed from small spaces of the zoo families (batch sizes 1-64) so that the whole run fits a few
CPU minutes; each is materialized with ``dnnsat.torch`` and measured with
:func:`dnnsat.torch.peak_memory` (the allocator events of PyTorch's profiler, steady-state second
step) with one intra-op thread (oneDNN's choices depend on it). The estimate is
``memory_expressions(net, Budget(mode=..., optimizer=...), None)["memory"]``. The same configurations
are then measured in a subprocess whose PyTorch runs AVX2 kernels (:mod:`benchmarks._emulate`).
Nothing is fitted.
"""

from __future__ import annotations

import argparse
import functools
import json
import random
import time
from collections.abc import Callable
from typing import Any

import torch

from benchmarks._emulate import AVX2_ENV, family_table, outliers, run_worker
from benchmarks._report import machine, sampling_parser, update_readme, writes_readme
from dnnsat import zoo
from dnnsat.cost import Budget, detect_cpu_backend, get_device, memory_expressions
from dnnsat.expr import compile_scalar
from dnnsat.graph import Network, encode_config
from dnnsat.space import Categorical, Int, Space
from dnnsat.torch import GraphModule, concretize, example_inputs, peak_memory

MODES = (("train", "adam"), ("train", "sgd"), ("inference", None), ("mixed", "adam"), ("mixed", "sgd"))


def _spaces() -> dict[str, tuple[Space, dict[str, Any]]]:
    """Small spaces per family (build options second): sized for a 2-core CPU."""
    b = Categorical([1, 4, 16, 64])
    return {
        "mlp": (
            Space({"batch_size": b, "depth": Int(1, 4), "width": Int(32, 512, step=32),
                   "activation": Categorical(["relu", "gelu", "silu", "tanh"])}),
            {},
        ),
        "cnn": (
            Space({"batch_size": Categorical([1, 4, 16, 64]), "resolution": Categorical([16, 24, 32]),
                   "kernel": Categorical([3, 5]), "padding": Int(0, 2), "convs": Int(1, 3),
                   "w0": Int(16, 48, step=16), "w1": Int(32, 64, step=32), "w2": Int(32, 128, step=32),
                   "w3": Int(64, 128, step=64), "fc": Categorical([256, 512])}),
            {},
        ),
        "resnet": (
            Space({"batch_size": Categorical([1, 2, 4, 8]), "resolution": Categorical([32, 64]),
                   "block": Categorical(["basic", "bottleneck"]), "groups": Categorical([1, 2, 4]),
                   **{f"w{i}": Int(16, 64, step=16) for i in range(4)},
                   **{f"d{i}": Int(1, 2) for i in range(4)}}),
            {"num_classes": 100},
        ),
        "mobilenetv2": (
            Space({"batch_size": Categorical([1, 2, 4]), "resolution": Categorical([64, 96]),
                   "width_mult": Categorical([0.5, 0.75]), "expansion": Categorical([3, 4, 6]),
                   "kernel": Categorical([3, 5, 7])}),
            {"num_classes": 100},
        ),
        "transformer": (
            Space({"batch_size": Categorical([1, 2, 4, 8]), "seq_len": Categorical([32, 64, 128]),
                   "layers": Int(1, 3), "d_model": Int(64, 256, step=64), "heads": Categorical([1, 2, 4]),
                   "ffn_mult": Categorical([2, 4])}),
            {"vocab": 5000},
        ),
        "gpt": (
            Space({"batch_size": Categorical([1, 2, 4]), "seq_len": Categorical([32, 64, 128]),
                   "layers": Int(1, 3), "d_model": Int(64, 256, step=64), "heads": Categorical([2, 4]),
                   "kv_heads": Categorical([1, 2]), "ffn_mult": Categorical([2, 4]),
                   "vocab": Categorical([4096, 8192])}),
            {},
        ),
        "nasbench201": (zoo.get("nasbench201").space(), {"batch_size": 16}),
    }  # fmt: skip


def _sample(space: Space, valid: Callable[[dict[str, Any]], bool], n: int, rng: random.Random) -> list[Any]:
    out: list[dict[str, Any]] = []
    for _ in range(50 * n):
        cfg = {name: rng.choice(space[name].values()) for name in space}
        if cfg not in out and valid(cfg):
            out.append(cfg)
            if len(out) == n:
                break
    return out


def _family_configs(name: str, n: int, rng: random.Random) -> tuple[Network, Space, list[dict[str, Any]]]:
    space, options = _spaces()[name]
    model = zoo.get(name)
    net = model.build(**options)(space.vars)
    valid_fn = compile_scalar([net.valid(True)])
    return net, space, _sample(space, lambda c: bool(valid_fn(encode_config(space, c))[0]), n, rng)


def mode_setup(mode: str, opt: str | None, device: str = "cpu") -> tuple[Budget, bool, torch.dtype | None]:
    """``(budget, train, autocast dtype)`` of a benchmark mode; ``mixed`` trains under autocast
    (bfloat16 on the CPU, float16 on CUDA: 2 bytes either way) against ``dtype="mixed"``."""
    mixed = mode == "mixed"
    budget = Budget(mode="inference" if mode == "inference" else "train", optimizer=opt,
                    dtype="mixed" if mixed else "float32")  # fmt: skip
    amp = (torch.bfloat16 if device == "cpu" else torch.float16) if mixed else None
    return budget, mode != "inference", amp


@functools.cache
def estimator(net: Network, mode: str, opt: str | None, device: str | None = None) -> Any:
    """Compiled ``(memory, memory_overhead)`` of ``net`` in a benchmark mode on ``device`` (a profile
    name; None: the CPU), built once per network and mode."""
    budget, _, _ = mode_setup(mode, opt)
    ex = memory_expressions(net, budget, None if device is None else get_device(device))
    return compile_scalar([ex["memory"], ex["memory_overhead"]])


def measure_config(net: Network, space: Space, cfg: dict[str, Any]) -> list[tuple[str, float, int]]:
    """``[(mode label, estimate bytes, measured bytes)]`` for the four modes."""
    env = encode_config(space, cfg)
    out = []
    for mode, opt in MODES:
        _, train, amp = mode_setup(mode, opt)
        est = estimator(net, mode, opt)(env)[0]
        torch.manual_seed(0)
        module = GraphModule(concretize(net, cfg, space))
        m = peak_memory(
            module, example_inputs(module, "cpu"), train=train, optimizer=opt or "sgd", autocast=amp
        )
        out.append((f"{mode}/{opt}" if opt else mode, float(est), m.peak))
    return out


def run(n: int, seed: int) -> list[dict[str, Any]]:
    """``[{family, cfg, mode, estimate, real}]`` (bytes) of every configuration and mode, measured in
    this process with one intra-op thread."""
    torch.set_num_threads(1)
    rng = random.Random(seed)
    rows = []
    for fam in _spaces():
        net, space, configs = _family_configs(fam, n, rng)
        for cfg in configs:
            for label, est, real in measure_config(net, space, cfg):
                rows.append({"family": fam, "cfg": cfg, "mode": label, "estimate": int(est), "real": real})
    return rows


def build_parser() -> argparse.ArgumentParser:
    ap = sampling_parser(__doc__, 15, 1, 3, "configs (the op rules were read off seed-0 traces)")
    ap.add_argument("--native-only", action="store_true", help="skip the AVX2-emulated subprocess")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    return ap


def main(argv: list[str] | None = None) -> None:
    ap = build_parser()
    args = ap.parse_args(argv)
    n = 3 if args.quick else args.per_family
    if args.worker:
        print(json.dumps(run(n, args.seed)))
        return
    write = writes_readme(ap, args)
    t0 = time.perf_counter()
    results = {f"native ({detect_cpu_backend().isa})": run(n, args.seed)}
    if not args.native_only:
        worker_args = ["--per-family", str(n), "--seed", str(args.seed)]
        results["AVX2 (emulated)"] = run_worker("benchmarks.memory_accuracy", worker_args, AVX2_ENV)
    elapsed = time.perf_counter() - t0
    for backend, rows in results.items():
        for line in outliers(backend, rows, ("family", "mode", "cfg")):
            print(line)
    n_cfg = len({(r["family"], json.dumps(r["cfg"], sort_keys=True)) for r in results[next(iter(results))]})
    body = (
        f"Memory model vs PyTorch peak tensor memory on the CPU ({machine()}, torch {torch.__version__}): "
        f"{n_cfg} configurations over {len(_spaces())} zoo families (fixed seed {args.seed}), "
        f"each as a training step with Adam and with SGD, as a no-grad inference forward and as "
        f"mixed-precision Adam and SGD steps (`dtype='mixed'` against bfloat16 autocast, the CPU's), "
        f"natively and with `ONEDNN_MAX_CPU_ISA=AVX2 ATEN_CPU_CAPABILITY=avx2` (the model follows the "
        f"detected backend). Cells: median |error| / max |error| / worst underestimate of `memory` "
        f"against the "
        f"profiler's allocator peak; ✗: misses the goal (median ≤ 2 %, max ≤ 8 %, underestimate ≤ 3 %). "
        f"Nothing fitted: the catalog's per-op rules (oneDNN convolution buffers etc.) were read off "
        f"allocator traces of seed-0 configurations (mixed precision: also of one configuration of this "
        f"table), this table uses seed {args.seed}. `python -m benchmarks.memory_accuracy`, "
        f"{elapsed:.0f} s.\n\n"
        + family_table(
            results, dict.fromkeys(r["mode"] for r in results[next(iter(results))]), list(_spaces())
        )
    )
    print(body)
    if write:
        update_readme("memory_accuracy", body)


if __name__ == "__main__":
    main()
