"""Everything the GPU memory and latency models need from one GPU, in one JSON file (issues 28 and 29).

``python -m benchmarks.gpu_collect [--out DIR] [--quick] [--budget-s 400] [--dry-run]`` (one GPU, within
the budget; ``benchmarks/gpu_run.sh`` is the command a device session runs). Without CUDA (or with
``--dry-run``) every section runs its non-CUDA part on the CPU with tiny models and writes the file to a
temporary folder: the whole command is proven end to end on any machine.

Sections, in order (each checks the time left and records ``"skipped: budget"`` rather than overrun;
the file is rewritten after every section and every few seconds inside one, so a killed run keeps what
it had):

1. ``footprint``: per stack (CUDA context; + cuBLAS; + cuBLASLt; + cuDNN; each SDPA backend: flash,
   mem-efficient, math, cuDNN; all of them), each in a fresh process (:mod:`benchmarks._gpu_footprint`),
   with ``CUDA_MODULE_LOADING`` as set and with ``EAGER``.
2. ``workspaces``: cuBLAS workspaces per thread and stream (main thread, side stream, second thread,
   autograd's backward thread; then ``_cuda_clearCublasWorkspaces``), by default and with
   ``CUBLAS_WORKSPACE_CONFIG=:4096:8``.
3. ``memory``: ``max_memory_allocated`` / ``max_memory_reserved`` of :func:`dnnsat.torch.peak_memory` for
   zoo configurations, the hand-written ``torch.nn`` families and torchvision classifiers, tens of MiB
   to tens of GiB, in the :data:`~benchmarks._gpu_measure.MODES` (fp32 Adam, SGD with momentum, fp16
   autocast + GradScaler, bf16 autocast, inference), from an empty cache; convolutional models also with
   ``cudnn.benchmark`` on. ``outcome``: ``ok`` | ``oom`` | ``error``.
4. ``snapshots``: ``torch.cuda.memory._record_memory_history`` for a few cases, trimmed to the largest
   allocations live at the peak (size and the first user frames).
5. ``oom``: verdicts at capped capacities (``set_per_process_memory_fraction``: the caching allocator's
   reservation only, not the footprint) of 4, 8, 16, 24 and 40 GiB, for measured configurations near each
   cap and for batch sizes placed at 0.9-1.1 x the cap on a line through two measured batches.
6. ``latency``: eager inference latency (CUDA events, median of N after warm-ups) of NAS-Bench-201 cells
   at batch 1/32/256 (``--nb201``: the official ``nb201.csv``), torchvision classifiers at batch 1-256 and
   the hand-written families; a few with CUDA graphs and ``torch.compile`` (``how``).
7. ``ops``: per op (module call, ATen dispatch, linear, conv+bias+relu, BatchNorm eval, LayerNorm, each
   SDPA backend) the profiler's host time, kernels and device time per call.

The file (schema 1, :func:`validate`): ``{"schema": 1, "header": {...}, "sections": {name: {"status",
"seconds", "rows": [...], "skipped_items"}}}``; ``header`` holds the GPU (name, memory, SMs, capability),
driver, torch, CUDA and cuDNN versions, TF32 defaults, the environment variables that matter, the
options and the dnnsat commit. The file name carries GPU, driver, torch, CUDA and cuDNN. Bytes are
bytes, times are milliseconds (``*_ms``), microseconds (``*_us*``) or seconds (``seconds``).
"""

from __future__ import annotations

import argparse
import gc
import json
import random
import re
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path
from typing import Any

import torch

from benchmarks import _families
from benchmarks._gpu_cases import (
    Case,
    batch_ladder,
    family_case,
    ladder_batches,
    memory_cases,
    nb201_config,
    nb201_options,
    torchvision_available,
    torchvision_case,
    zoo_case,
)
from benchmarks._gpu_footprint import STACKS, device_info, run_stack, stack_reading, workspaces
from benchmarks._gpu_latency import OPS, latency, nb201_archs, op_profile
from benchmarks._gpu_measure import MODES, Mode, fresh_allocator, measure_mode

SCHEMA = 1
GiB = 2**30
ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "benchmarks" / "data"
NB201_CSV = ROOT.parent / "shared" / "data" / "nasbench201" / "nb201.csv"
#: section -> share of the budget (what a section leaves unused goes to the later ones)
SECTIONS: dict[str, float] = {
    "footprint": 0.12,
    "workspaces": 0.03,
    "memory": 0.33,
    "snapshots": 0.04,
    "oom": 0.13,
    "latency": 0.27,
    "ops": 0.08,
}
CAPS_GIB = (4, 8, 16, 24, 40)
TORCHVISION_LATENCY = ["resnet18", "resnet50", "mobilenet_v3_large", "efficientnet_b0", "convnext_tiny",
                       "vit_b_16", "regnet_y_800mf", "densenet121"]  # fmt: skip
CAP_FRACTIONS = (0.9, 0.97, 1.03, 1.1)
COMPILE_NEEDS_S = 90.0  # a torch.compile row starts only with this much of its section left
ROW_KEYS: dict[str, tuple[str, ...]] = {
    "footprint": ("stack", "error"),
    "workspaces": ("stack",),
    "memory": ("source", "name", "config", "tier", "mode", "cudnn_benchmark", "outcome"),
    "snapshots": ("source", "name", "mode", "top_at_peak"),
    "oom": ("source", "name", "config", "mode", "cap_bytes", "outcome"),
    "latency": ("group", "source", "name", "config", "batch", "how", "outcome"),
    "ops": ("op",),
}
HEADER_KEYS = ("gpu", "driver", "torch", "cuda", "cudnn", "started", "budget_s", "dry_run", "options")


class Clock:
    """The run's budget: :meth:`start` gives a section its share of what is left."""

    def __init__(self, budget_s: float) -> None:
        self.t0 = time.perf_counter()
        self.budget_s = budget_s
        self.section_end = self.t0

    def left(self) -> float:
        """Seconds left in the whole run."""
        return self.budget_s - (time.perf_counter() - self.t0)

    def start(self, name: str) -> float:
        """Open section ``name``: its deadline is its weight's share of the time left; returns seconds."""
        later = list(SECTIONS)[list(SECTIONS).index(name) :]
        share = SECTIONS[name] / sum(SECTIONS[s] for s in later)
        allot = max(0.0, self.left() * share)
        self.section_end = time.perf_counter() + allot
        return allot

    def section_left(self) -> float:
        """Seconds left to the open section."""
        return min(self.section_end - time.perf_counter(), self.left())


class Collection:
    """The JSON document, written atomically to ``path`` whenever :meth:`flush` is called."""

    def __init__(self, path: Path, header: dict[str, Any]) -> None:
        self.path = path
        self.doc: dict[str, Any] = {"schema": SCHEMA, "header": header, "sections": {}}
        self._last = 0.0

    def flush(self, every_s: float = 0.0) -> None:
        """Rewrite the file (at most once per ``every_s`` seconds)."""
        if time.perf_counter() - self._last < every_s:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.doc, indent=1, default=str))
        tmp.replace(self.path)
        self._last = time.perf_counter()

    def run_section(
        self, name: str, clock: Clock, items: Iterator[Callable[[], dict[str, Any] | None]]
    ) -> None:
        """Run ``items`` (each returns a row or None) until they end or the section's time is up."""
        allot = clock.start(name)
        t0 = time.perf_counter()
        sec: dict[str, Any] = {"status": "running", "seconds": 0.0, "allotted_s": round(allot, 1), "rows": []}
        sec["skipped_items"] = 0
        self.doc["sections"][name] = sec
        for item in items:
            if clock.section_left() <= 0:
                sec["skipped_items"] += 1
                continue
            row = item()
            if row is not None:
                sec["rows"].append(row)
            sec["seconds"] = round(time.perf_counter() - t0, 2)
            self.flush(every_s=10.0)
        if sec["skipped_items"]:
            sec["status"] = "skipped: budget" if not sec["rows"] else "partial: budget"
        else:
            sec["status"] = sec.pop("reason", "done")
        sec["seconds"] = round(time.perf_counter() - t0, 2)
        self.flush()


def _slug(x: Any) -> str:
    return re.sub(r"[^A-Za-z0-9.]+", "-", str(x)).strip("-").lower()


def file_name(header: dict[str, Any]) -> str:
    """``gpu_<name>_drv<driver>_torch<torch>_cuda<cuda>_cudnn<cudnn>.json`` (``cpu_dryrun_...`` on a dry
    run); letters, digits, '.', '_' and '-' only."""
    if header["dry_run"]:
        return f"cpu_dryrun_torch{_slug(header['torch'])}.json"
    gpu = _slug(header["gpu"]["name"].replace("NVIDIA", ""))
    parts = [f"gpu_{gpu}", f"drv{_slug(header['driver'])}", f"torch{_slug(header['torch'])}"]
    return "_".join([*parts, f"cuda{_slug(header['cuda'])}", f"cudnn{_slug(header['cudnn'])}"]) + ".json"


def _commit() -> str | None:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, timeout=10
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None


def _error(err: BaseException) -> str:
    first = str(err).splitlines()[0] if str(err) else ""
    return f"{type(err).__name__}: {first[:300]}"


# -- sections ---------------------------------------------------------------------------------------


def footprint_items(dry: bool) -> Iterator[Callable[[], dict[str, Any] | None]]:
    """Each stack in a fresh process (GPU); on a dry run each in this process on the CPU, plus one child."""
    if dry:
        for stack in STACKS:
            yield partial(stack_reading, stack, torch.device("cpu"))
        yield partial(run_stack, "context")
        return
    for stack in STACKS:
        yield partial(run_stack, stack)
    for stack in ("context", "cudnn", "all"):
        yield partial(run_stack, stack, {"CUDA_MODULE_LOADING": "EAGER"})


def workspace_items(dry: bool) -> Iterator[Callable[[], dict[str, Any] | None]]:
    """The cuBLAS workspace experiment, by default and with ``CUBLAS_WORKSPACE_CONFIG=:4096:8``."""
    if dry:
        yield lambda: {"stack": "workspaces", **workspaces(torch.device("cpu"))}
        return
    yield partial(run_stack, "workspaces")
    yield partial(run_stack, "workspaces", {"CUBLAS_WORKSPACE_CONFIG": ":4096:8"})


def measure_case(case: Case, mode: Mode, dev: torch.device, cudnn_benchmark: bool = False) -> dict[str, Any]:
    """One case in one mode from an empty cache: a row with ``outcome`` ok | oom | error."""
    row: dict[str, Any] = {**case.key(), "mode": mode.name, "cudnn_benchmark": cudnn_benchmark}
    torch.backends.cudnn.benchmark = cudnn_benchmark
    fresh_allocator(dev)
    module = inputs = None
    try:
        module, inputs = case.make(dev)
        row.update(measure_mode(module, inputs, mode), outcome="ok")
    except torch.cuda.OutOfMemoryError as err:
        row.update(outcome="oom", error=_error(err))
        gc.collect()  # the traceback's frames held the step's tensors
    except Exception as err:  # recorded: one model failing must not end the collection
        row.update(outcome="error", error=_error(err))
    finally:
        torch.backends.cudnn.benchmark = False
        del module, inputs
    return row


def memory_items(
    cases: list[Case], dev: torch.device, dry: bool, measured: list[tuple[Case, Mode, dict[str, Any]]]
) -> Iterator[Callable[[], dict[str, Any] | None]]:
    """Every case in every mode (dry: inference, and every mode of the first case); convolutional cases
    also with ``cudnn.benchmark`` on (fp32 Adam, inference). ``measured`` collects what ran."""
    for i, case in enumerate(cases):
        modes = list(MODES.values()) if not dry or i == 0 else [MODES["inference"]]
        variants = [(m, False) for m in modes]
        if case.convolutional and not dry:
            variants += [(MODES["fp32_adam"], True), (MODES["inference"], True)]
        for mode, bench in variants:

            def item(case: Case = case, mode: Mode = mode, bench: bool = bench) -> dict[str, Any]:
                row = measure_case(case, mode, dev, bench)
                if row["outcome"] == "ok" and not bench:
                    measured.append((case, mode, row))
                return row

            yield item


def top_at_peak(snapshot: dict[str, Any], top: int = 20) -> dict[str, Any]:
    """The allocations live when the traced allocated total peaks (largest ``top``), from a
    ``torch.cuda.memory._snapshot()``: size, stream and the first frames outside torch."""
    traces = (snapshot.get("device_traces") or [[]])[0]
    total = peak = 0
    peak_at = -1
    for i, e in enumerate(traces):
        if e["action"] == "alloc":
            total += e["size"]
        elif e["action"] == "free_requested":
            total -= e["size"]
        if total > peak:
            peak, peak_at = total, i
    live: dict[int, dict[str, Any]] = {}
    for e in traces[: peak_at + 1]:
        if e["action"] == "alloc":
            live[e["addr"]] = e
        elif e["action"] == "free_requested":
            live.pop(e["addr"], None)
    rows = []
    for e in sorted(live.values(), key=lambda e: -e["size"])[:top]:
        frames = e.get("frames") or []
        mine = [f for f in frames if "/torch/" not in f.get("filename", "")] or frames
        where = [f"{Path(f['filename']).name}:{f['line']}:{f['name']}" for f in mine[:4]]
        rows.append({"size": e["size"], "stream": e.get("stream"), "frames": where})
    segments = snapshot.get("segments") or []
    return {
        "traced_peak_bytes": peak,
        "live_at_peak": len(live),
        "top": rows,
        "segments": len(segments),
        "segments_bytes": sum(s.get("total_size", 0) for s in segments),
    }


def snapshot_items(cases: list[Case], dev: torch.device) -> Iterator[Callable[[], dict[str, Any] | None]]:
    """fp32 Adam of one case per source (and the medium GPT) with the allocator's history recorded."""
    picked: dict[str, Case] = {}
    for case in cases:
        picked.setdefault(case.source, case)
        if case.name == "gpt" and case.tier == "medium":
            picked["gpt_medium"] = case
    for case in picked.values():

        def item(case: Case = case) -> dict[str, Any] | None:
            row: dict[str, Any] = {**case.key(), "mode": "fp32_adam", "top_at_peak": None}
            if dev.type != "cuda":
                return {**row, "outcome": "not run: needs CUDA"}
            record = torch.cuda.memory._record_memory_history
            fresh_allocator(dev)
            record(max_entries=200_000)
            try:
                module, inputs = case.make(dev)
                row.update(measure_mode(module, inputs, MODES["fp32_adam"]))
                row["top_at_peak"] = top_at_peak(torch.cuda.memory._snapshot())
                row["outcome"] = "ok"
                del module, inputs
            except Exception as err:
                row.update(outcome="error", error=_error(err))
            finally:
                record(enabled=None)
                fresh_allocator(dev)
            return row

        yield item


def _capped(case: Case, mode: Mode, dev: torch.device, cap: int, why: str) -> dict[str, Any]:
    row: dict[str, Any] = {**case.key(), "mode": mode.name, "cap_bytes": cap, "chosen": why}
    if dev.type != "cuda":
        return {**row, "outcome": "not run: needs CUDA"}
    total = torch.cuda.get_device_properties(dev).total_memory
    torch.cuda.set_per_process_memory_fraction(min(1.0, cap / total), dev)
    try:
        measured = measure_case(case, mode, dev)
    finally:
        torch.cuda.set_per_process_memory_fraction(1.0, dev)
    return {**row, **{k: v for k, v in measured.items() if k not in row}}


def oom_items(
    measured: list[tuple[Case, Mode, dict[str, Any]]], dev: torch.device, dry: bool
) -> Iterator[Callable[[], dict[str, Any] | None]]:
    """Near-cap measured configurations, then the batch ladders, at every cap (dry: caps in MiB)."""
    caps = [int(c * (2**20 if dry else GiB)) for c in CAPS_GIB]
    key = "peak_allocated" if dry else "peak_reserved"
    for cap in caps:
        near = [
            (abs(r[key] / cap - 1), c, m, r)
            for c, m, r in measured
            if r.get(key) and 0.8 <= r[key] / cap <= 1.25
        ]
        for _, case, mode, row in sorted(near, key=lambda t: t[0])[:3]:
            yield partial(_capped, case, mode, dev, cap, f"measured {row[key]}")
    mode = MODES["fp32_adam"]
    for name, make in batch_ladder(dry).items():
        points: list[tuple[int, int]] = []
        for b in (1, 4) if dry or name.startswith("gpt") else (8, 32):

            def probe(
                b: int = b, make: Callable[[int], Case] = make, points: list[tuple[int, int]] = points
            ) -> dict[str, Any]:
                row = measure_case(make(b), mode, dev)
                if row["outcome"] == "ok":
                    points.append((b, row[key]))
                return {**row, "cap_bytes": None, "chosen": "ladder probe"}

            yield probe
        for cap in caps:

            def ladder(cap: int = cap, points: list[tuple[int, int]] = points) -> list[int]:
                return ladder_batches(points, cap, CAP_FRACTIONS) if len(points) == 2 else []

            for i in range(len(CAP_FRACTIONS)):

                def item(
                    i: int = i,
                    cap: int = cap,
                    ladder: Callable[[], list[int]] = ladder,
                    make: Callable[[int], Case] = make,
                    points: list[tuple[int, int]] = points,
                ) -> Any:
                    batches = ladder()
                    if i >= len(batches):
                        return None
                    return _capped(make(batches[i]), mode, dev, cap, f"ladder {points}")

                yield item


def _latency_row(group: str, case: Case, batch: int, how: str, dev: torch.device, n: tuple[int, int]) -> Any:
    row: dict[str, Any] = {"group": group, **case.key(), "batch": batch, "how": how}
    fresh_allocator(dev)
    try:
        module, inputs = case.make(dev)
        row.update(latency(module, inputs, n[0], n[1], how), outcome="ok")
        del module, inputs
    except torch.cuda.OutOfMemoryError as err:
        row.update(outcome="oom", error=_error(err))
    except Exception as err:
        row.update(outcome="error", error=_error(err))
    return row


def latency_items(
    dev: torch.device, dry: bool, quick: bool, nb201: Path, seed: int, with_tv: bool, clock: Clock
) -> Iterator[Callable[[], dict[str, Any] | None]]:
    """Round-robin over the groups (so a budget cut leaves some of each); graphs and compile last."""
    n = (1, 3) if dry else (3, 10) if quick else (5, 20)
    archs = nb201_archs(nb201, 2 if dry else 12 if quick else 40, seed)
    rng = random.Random(seed)
    groups: list[list[tuple[str, Case, int, str]]] = [[], [], []]
    for idx, arch in archs:
        for b in (1, 2) if dry else (1, 32, 256):
            case = zoo_case("nasbench201", nb201_config(arch), "latency", nb201_options(b, dry))
            case.config["arch_index"], case.config["arch_str"] = idx, arch
            groups[0].append(("nasbench201", case, b, "eager"))
    tv_models = ["resnet18"] if dry else TORCHVISION_LATENCY
    for b in (1, 2) if dry else (1, 8, 32, 128, 256):
        for name in tv_models if with_tv else []:
            groups[1].append(
                ("torchvision", torchvision_case(name, b, "latency", 64 if dry else 224), b, "eager")
            )
    for fam in _families.FAMILIES.values():
        for cfg in fam.sample(1 if dry else 3, rng):
            for b in (cfg["batch"],) if dry else (cfg["batch"], 32):
                groups[2].append(
                    ("family", family_case(fam.name, {**cfg, "batch": b}, "latency"), b, "eager")
                )
    order = [g[i] for i in range(max(map(len, groups), default=0)) for g in groups if i < len(g)]
    if dev.type == "cuda":
        serve = [x for x in groups[0][:9] if x[2] == 1][:3] + [
            x for x in groups[1] if x[1].name == "resnet18"
        ][:3]
        serve += [x for x in groups[2] if x[1].name in ("gqa_lm", "mobile")][:2]
        order += [(g, c, b, "cuda_graph") for g, c, b, _ in serve]
        order += [(g, c, b, "compile") for g, c, b, _ in serve[:1] + serve[3:4]]
    for group, case, batch, how in order:

        def item(group: str = group, case: Case = case, batch: int = batch, how: str = how) -> Any:
            if how == "compile" and clock.section_left() < COMPILE_NEEDS_S:
                return {
                    "group": group,
                    **case.key(),
                    "batch": batch,
                    "how": how,
                    "outcome": "skipped: budget",
                }
            return _latency_row(group, case, batch, how, dev, n)

        yield item


def op_items(dev: torch.device, dry: bool) -> Iterator[Callable[[], dict[str, Any] | None]]:
    """Every op of :data:`~benchmarks._gpu_latency.OPS`, profiled."""
    for op in OPS:
        yield partial(op_profile, op, dev, 2 if dry else 50)


# -- the file ---------------------------------------------------------------------------------------


def validate(doc: dict[str, Any]) -> list[str]:
    """Problems of a collection document against schema 1 (empty: valid)."""
    problems = []
    if doc.get("schema") != SCHEMA:
        problems.append(f"schema is {doc.get('schema')!r}, expected {SCHEMA}")
    header = doc.get("header", {})
    problems += [f"header lacks {k!r}" for k in HEADER_KEYS if k not in header]
    sections = doc.get("sections", {})
    for name, keys in ROW_KEYS.items():
        sec = sections.get(name)
        if sec is None:
            problems.append(f"section {name!r} missing")
            continue
        if not isinstance(sec.get("status"), str) or not isinstance(sec.get("seconds"), int | float):
            problems.append(f"section {name!r}: status (text) and seconds (number) required")
        for i, row in enumerate(sec.get("rows", [])):
            missing = [k for k in keys if k not in row]
            if missing:
                problems.append(f"section {name!r} row {i} lacks {missing}")
    return problems


def build_parser() -> argparse.ArgumentParser:
    """Options: --out, --quick, --budget-s, --dry-run, --seed, --nb201, --sections."""
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    where = "folder of the JSON file (default: benchmarks/data; a temporary folder on a dry run)"
    ap.add_argument("--out", type=Path, default=None, help=where)
    ap.add_argument(
        "--quick", action="store_true", help="fewer and smaller models (about a third of the time)"
    )
    ap.add_argument("--budget-s", type=float, default=400.0, help="seconds for the whole run (default 400)")
    ap.add_argument("--dry-run", action="store_true", help="tiny models on the CPU (automatic without CUDA)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--nb201", type=Path, default=NB201_CSV, help="NAS-Bench-201's nb201.csv (arch strings)")
    ap.add_argument("--sections", default=",".join(SECTIONS), help="comma-separated subset of the sections")
    return ap


def main(argv: list[str] | None = None) -> Path:
    """Run the collection; returns the path of the file written."""
    args = build_parser().parse_args(argv)
    wanted = [s.strip() for s in args.sections.split(",") if s.strip()]
    unknown = sorted(set(wanted) - set(SECTIONS))
    if unknown:
        raise SystemExit(f"gpu_collect: --sections: unknown {unknown}; choose from {', '.join(SECTIONS)}")
    if args.budget_s <= 0:
        raise SystemExit(f"gpu_collect: --budget-s must be positive, got {args.budget_s}")
    clock = Clock(args.budget_s)
    # the header comes from a child on a GPU: this process must not hold a CUDA context while the
    # footprint children measure theirs
    cuda = not args.dry_run and torch.cuda.is_available()
    info = run_stack("device") if cuda else device_info()
    if cuda and "error" in info:
        raise SystemExit(f"gpu_collect: could not read the device in a child process: {info['error']}")
    dry = not cuda
    options = {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()}
    header = {**info, "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "budget_s": args.budget_s,
              "dry_run": dry, "options": options, "dnnsat_commit": _commit(),
              "torchvision": torchvision_available()}  # fmt: skip
    out = args.out or (Path(tempfile.mkdtemp(prefix="gpu_collect_")) if dry else DATA)
    coll = Collection(out / file_name(header), header)
    coll.flush()
    print(
        f"gpu_collect: writing {coll.path} ({'dry run on the CPU' if dry else info['gpu']['name']})",
        flush=True,
    )
    dev = torch.device("cpu" if dry else "cuda")
    tiers = ("dry",) if dry else ("small",) if args.quick else ("small", "large", "medium")
    cases = memory_cases(tiers, args.seed, with_torchvision=header["torchvision"])
    measured: list[tuple[Case, Mode, dict[str, Any]]] = []
    items: dict[str, Callable[[], Iterator[Callable[[], dict[str, Any] | None]]]] = {
        "footprint": lambda: footprint_items(dry),
        "workspaces": lambda: workspace_items(dry),
        "memory": lambda: memory_items(cases, dev, dry, measured),
        "snapshots": lambda: snapshot_items(cases, dev),
        "oom": lambda: oom_items(measured, dev, dry),
        "latency": lambda: latency_items(
            dev, dry, args.quick, args.nb201, args.seed, header["torchvision"], clock
        ),
        "ops": lambda: op_items(dev, dry),
    }
    for name in SECTIONS:
        if name not in wanted:
            coll.doc["sections"][name] = {"status": "skipped: not asked", "seconds": 0.0, "rows": []}
            continue
        coll.run_section(name, clock, items[name]())
        sec = coll.doc["sections"][name]
        print(f"  {name}: {sec['status']}, {len(sec['rows'])} rows, {sec['seconds']:.0f} s", flush=True)
    coll.doc["header"]["seconds"] = round(args.budget_s - clock.left(), 1)
    coll.flush()
    problems = validate(coll.doc)
    if problems:
        raise SystemExit("gpu_collect: the file does not match its schema: " + "; ".join(problems))
    print(f"gpu_collect: {coll.path} ({coll.path.stat().st_size >> 10} KiB)")
    return coll.path


if __name__ == "__main__":
    main()
