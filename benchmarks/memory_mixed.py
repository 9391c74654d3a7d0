"""Mixed precision on transformer graphs and micro-graphs: the memory model vs PyTorch's peak under CPU
autocast.

``python -m benchmarks.memory_mixed [--quick] [--native-only] [--micro-only]``. Every configuration is
one Adam training step under ``torch.autocast("cpu", dtype=torch.bfloat16)`` (forward and loss), measured with
:func:`dnnsat.torch.peak_memory` (one intra-op thread), and one no-grad forward under autocast
(measured with :func:`dnnsat.torch.track_memory`), against ``memory_expressions(net, Budget(mode=...,
optimizer="adam", dtype="mixed"))["memory"]``. The
families are the graphs where autocast leaves tensors in fp32: a ViT (convolutional patch embedding,
CLS token, fp32 positional embedding, pre-LN blocks), the zoo's GPT and transformer encoder (fp32
token + position embeddings feed an fp32 residual stream), a post-LN (BERT-style) encoder,
``linear -> layernorm -> linear`` stacks and an fp32 positional-embedding add. Nothing is fitted.

Micro-graphs (:data:`MICRO`): the reductions and normalizations written as plain ``torch.nn`` modules
and traced by :func:`dnnsat.from_torch` (``linear -> mean/sum over dimensions -> linear``, LayerNorm,
RMSNorm, GroupNorm and BatchNorm between two linears, residual MLPs with and without a pre-norm, a
mean-pooled classifier head), at odd sizes: an Adam step, an SGD step and a no-grad forward each under
bfloat16 autocast, natively and, in a subprocess, with AVX2 emulated (:mod:`benchmarks._emulate`; the
model follows the detected backend there). Goal: every one within 5 %, never more than 3 % under.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time
import warnings
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from benchmarks._emulate import AVX2_ENV, run_worker, summary
from benchmarks._report import machine, markdown_table, sampling_parser, update_readme, writes_readme
from dnnsat import zoo
from dnnsat.cost import Budget, detect_cpu_backend, memory_expressions
from dnnsat.expr import compile_scalar
from dnnsat.graph import Network, Tensor, encode_config
from dnnsat.space import Categorical, Int, Space
from dnnsat.torch import GraphModule, concretize, example_inputs, from_torch, peak_memory, track_memory
from dnnsat.zoo._models import _block

BUDGETS = {mode: Budget(mode=mode, optimizer="adam", dtype="mixed") for mode in ("train", "inference")}
Build = Callable[[Any], Network]


def vit(v: Any) -> Network:
    """ViT: patch-embedding conv, a CLS token (a ``(batch, 1, d)`` parameter: the DSL has no
    ``expand``), an fp32 positional embedding, pre-LN blocks, final LayerNorm, mean pooling."""
    net = Network("vit")
    b, d = v.batch_size, v.d_model
    x = net.conv2d(net.input((b, 3, v.resolution, v.resolution)), d, v.patch, stride=v.patch)
    n = (v.resolution // v.patch) * (v.resolution // v.patch)
    x = net.transpose(net.reshape(x, (b, d, n)), 1, 2)
    x = net.concat([net.parameter((b, 1, d)), x], dim=1)
    x = net.add(x, net.parameter((n + 1, d)))
    x = net.repeat(v.layers, 4, lambda i, y: _block(net, y, v, causal=False), x)
    return net.output(net.linear(net.mean(net.layernorm(x), dim=1), 10))


def encoder(v: Any) -> Network:
    """BERT-style post-LN encoder: fp32 token + position embeddings, LayerNorm, blocks
    ``x = ln(x + attn(x)); x = ln(x + mlp(x))``, mean pooling, a classifier."""
    net = Network("encoder")
    ids = net.input((v.batch_size, v.seq_len), dtype="int64")
    x = net.layernorm(net.add(net.embedding(ids, 2048, v.d_model), net.parameter((v.seq_len, v.d_model))))

    def block(i: int, y: Tensor) -> Tensor:
        y = net.layernorm(net.add(y, net.attention(y, v.heads)))
        h = net.linear(net.gelu(net.linear(y, v.ffn_mult * v.d_model)), v.d_model)
        return net.layernorm(net.add(y, h))

    x = net.repeat(v.layers, 4, block, x)
    return net.output(net.linear(net.mean(x, dim=1), 2))


def ln_mlp(v: Any) -> Network:
    """``linear -> layernorm -> linear`` stacks (with a GELU between blocks) on ``(batch, tokens, d)``."""
    net = Network("ln_mlp")
    x = net.input((v.batch_size, v.tokens, v.d_model))

    def block(i: int, y: Tensor) -> Tensor:
        return net.linear(net.gelu(net.layernorm(net.linear(y, v.hidden))), v.d_model)

    return net.output(net.linear(net.repeat(v.layers, 3, block, x), 10))


def posemb(v: Any) -> Network:
    """An fp32 positional embedding added to a 16-bit projection: the residual stream turns fp32."""
    net = Network("posemb")
    x = net.linear(net.input((v.batch_size, v.tokens, v.d_model)), v.d_model)
    x = net.add(x, net.parameter((v.tokens, v.d_model)))
    return net.output(net.linear(net.gelu(x), 10))


def _families() -> dict[str, tuple[Build, Space]]:
    """Graph and a small space per family, sized for a 2-core CPU."""
    heads = Categorical([1, 2, 4])
    return {
        "vit": (vit, Space({"batch_size": Categorical([2, 4, 8]), "resolution": Categorical([32, 48]),
                            "patch": Categorical([4, 8]), "d_model": Int(64, 256, step=64), "heads": heads,
                            "layers": Int(1, 4), "ffn_mult": Categorical([2, 4])})),
        "gpt": (zoo.get("gpt").build(max_layers=4),
                Space({"batch_size": Categorical([2, 4, 8]), "seq_len": Categorical([64, 128, 256]),
                       "layers": Int(1, 4), "d_model": Int(64, 256, step=64), "heads": Categorical([2, 4]),
                       "kv_heads": Categorical([1, 2]), "ffn_mult": Categorical([2, 4]),
                       "vocab": Categorical([2048, 8192])})),
        "transformer": (zoo.get("transformer").build(vocab=2048),
                        Space({"batch_size": Categorical([2, 4, 8]), "seq_len": Categorical([64, 128, 256]),
                               "layers": Int(1, 4), "d_model": Int(64, 256, step=64), "heads": heads,
                               "ffn_mult": Categorical([2, 4])})),
        "encoder": (encoder, Space({"batch_size": Categorical([2, 4, 8]), "seq_len": Categorical([64, 128]),
                                    "layers": Int(1, 4), "d_model": Int(64, 256, step=64), "heads": heads,
                                    "ffn_mult": Categorical([2, 4])})),
        "ln_mlp": (ln_mlp, Space({"batch_size": Categorical([4, 16, 64]), "tokens": Categorical([1, 16, 64]),
                                  "d_model": Int(64, 256, step=64), "hidden": Int(64, 512, step=64),
                                  "layers": Int(1, 3)})),
        "posemb": (posemb, Space({"batch_size": Categorical([4, 16, 64]), "tokens": Categorical([16, 64]),
                                  "d_model": Int(64, 256, step=64)})),
    }  # fmt: skip


def configs(net: Network, space: Space, n: int, rng: random.Random) -> list[dict[str, Any]]:
    """``n`` distinct valid configurations drawn from ``space``."""
    valid = compile_scalar([net.valid(True)])
    out: list[dict[str, Any]] = []
    for _ in range(50 * n):
        cfg = {name: rng.choice(space[name].values()) for name in space}
        if cfg not in out and valid(encode_config(space, cfg))[0]:
            out.append(cfg)
            if len(out) == n:
                break
    return out


def measure(net: Network, space: Space, cfg: dict[str, Any], mode: str = "train") -> tuple[float, int]:
    """(estimate, PyTorch's peak) in bytes of one mixed-precision Adam step (``mode="train"``) or
    no-grad forward (``"inference"``, the output kept) of ``net`` at ``cfg``."""
    est = compile_scalar([memory_expressions(net, BUDGETS[mode])["memory"]])(encode_config(space, cfg))[0]
    torch.manual_seed(0)
    module = GraphModule(concretize(net, cfg, space))
    inputs = example_inputs(module, "cpu")
    if mode == "train":
        return float(est), peak_memory(module, inputs, optimizer="adam", autocast=torch.bfloat16).peak
    module.eval()
    with torch.no_grad():
        with torch.autocast("cpu", dtype=torch.bfloat16):
            module(*inputs)  # warm-up
        with track_memory(list(module.parameters()), list(module.buffers()), inputs) as tracker:
            with torch.autocast("cpu", dtype=torch.bfloat16):
                out = module(*inputs)
            del out
    return float(est), tracker.peak


# -- micro-graphs as plain torch.nn modules -------------------------------------------------------


class Reduce(nn.Module):
    """``linear -> x.mean(dim, keepdim) (or sum) -> linear`` on ``(..., features)``."""

    def __init__(self, features: int, hidden: int, classes: int, op: str, dim: Any, keepdim: bool) -> None:
        super().__init__()
        self.proj, self.head = nn.Linear(features, hidden), nn.Linear(hidden, classes)
        self.op, self.dim, self.keepdim = op, dim, keepdim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(getattr(self.proj(x), self.op)(dim=self.dim, keepdim=self.keepdim))


class Norm(nn.Module):
    """``linear -> norm -> linear``: ``layernorm`` / ``rmsnorm`` over the last dimension of
    ``(..., features)``; ``groupnorm`` / ``batchnorm`` over the channels of ``(batch, channels)`` or
    ``(batch, channels, length)`` (the linears then act on the length: every tensor is contiguous)."""

    def __init__(
        self,
        kind: str,
        features: int,
        hidden: int,
        classes: int,
        channels: int,
        affine: bool,
        groups: int = 1,
    ) -> None:
        super().__init__()
        self.proj, self.head = nn.Linear(features, hidden), nn.Linear(hidden, classes)
        c = hidden if channels == 0 else channels
        self.norm = {
            "layernorm": lambda: nn.LayerNorm(hidden, elementwise_affine=affine, bias=affine and groups == 1),
            "rmsnorm": lambda: nn.RMSNorm(hidden, elementwise_affine=affine),
            "groupnorm": lambda: nn.GroupNorm(groups, c, affine=affine),
            "batchnorm": lambda: nn.BatchNorm1d(c, affine=affine),
        }[kind]()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.norm(self.proj(x)))


class ResidualMLP(nn.Module):
    """``depth`` blocks ``x = x + fc2(act(fc1(norm(x))))`` (``norm``: none, ``layernorm`` or ``rmsnorm``),
    then a linear head."""

    def __init__(self, features: int, hidden: int, classes: int, depth: int, norm: str, act: str) -> None:
        super().__init__()
        norms: dict[str, Callable[[int], nn.Module]] = {
            "none": lambda f: nn.Identity(),
            "layernorm": nn.LayerNorm,
            "rmsnorm": nn.RMSNorm,
        }
        acts = {"relu": nn.ReLU, "gelu": nn.GELU}
        self.blocks = nn.ModuleList(
            nn.Sequential(
                norms[norm](features), nn.Linear(features, hidden), acts[act](), nn.Linear(hidden, features)
            )
            for _ in range(depth)
        )
        self.head = nn.Linear(features, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = x + block(x)
        return self.head(x)


class PooledHead(nn.Module):
    """A transformer-style classifier: ``linear -> gelu -> layernorm -> mean over tokens -> linear``."""

    def __init__(self, features: int, hidden: int, classes: int) -> None:
        super().__init__()
        self.proj, self.norm, self.head = (
            nn.Linear(features, hidden),
            nn.LayerNorm(hidden),
            nn.Linear(hidden, classes),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.norm(nn.functional.gelu(self.proj(x))).mean(dim=1))


Micro = tuple[Callable[[], nn.Module], tuple[int, ...]]


def _reduce(op: str, c: dict[str, Any]) -> Micro:
    b, t, f = c["batch"], c["tokens"], c["features"]
    four = c["rank"] == 4
    dim = {"tokens": 1, "batch": 0, "last_but_one": -2, "both": (1, 2) if four else 1}[c["dim"]]
    shape = (b, t, 3, f) if four else (b, t, f)
    return lambda: Reduce(f, c["hidden"], c["classes"], op, dim, c["keepdim"]), shape


def _norm(kind: str, c: dict[str, Any]) -> Micro:
    b, t, f, h = c["batch"], c["tokens"], c["features"], c["hidden"]
    if kind in ("layernorm", "rmsnorm"):
        shape = (b, t, f) if c["rank"] == 3 else (b * t, f)
        return lambda: Norm(kind, f, h, c["classes"], 0, c["affine"]), shape
    groups = c["groups"] if kind == "groupnorm" else 1
    if c["rank"] == 2:  # (batch, hidden) channels
        h = h // groups * groups
        return lambda: Norm(kind, f, h, c["classes"], 0, c["affine"], groups), (b * t, f)
    channels = 2 * groups * (1 + t % 5)  # (batch, channels, length): the linears act on the length
    return lambda: Norm(kind, f, h, c["classes"], channels, c["affine"], groups), (b, channels, f)


def _residual(c: dict[str, Any]) -> Micro:
    shape = (
        (c["batch"], c["tokens"], c["features"])
        if c["rank"] == 3
        else (c["batch"] * c["tokens"], c["features"])
    )
    args = (c["features"], c["hidden"], c["classes"], c["depth"], c["norm"], c["act"])
    return lambda: ResidualMLP(*args), shape


def _pooled(c: dict[str, Any]) -> Micro:
    return lambda: PooledHead(c["features"], c["hidden"], c["classes"]), (
        c["batch"],
        c["tokens"],
        c["features"],
    )


MICRO: dict[str, Callable[[dict[str, Any]], Micro]] = {
    "mean": lambda c: _reduce("mean", c),
    "sum": lambda c: _reduce("sum", c),
    "layernorm": lambda c: _norm("layernorm", c),
    "rmsnorm": lambda c: _norm("rmsnorm", c),
    "groupnorm": lambda c: _norm("groupnorm", c),
    "batchnorm": lambda c: _norm("batchnorm", c),
    "residual": _residual,
    "pooled": _pooled,
}
"""Family -> (module builder, input shape) of a configuration (:func:`micro_configs`)."""
MICRO_MODES = (("train", "adam"), ("train", "sgd"), ("inference", "adam"))
MICRO_PER_FAMILY = 6
MICRO_GOAL = (0.05, 0.03)  # max |error|, worst underestimate (shares of PyTorch's peak)


def micro_configs(n: int, rng: random.Random) -> list[dict[str, Any]]:
    """``n`` configurations of the micro-graphs' odd sizes (every family reads the keys it needs)."""
    grid = {
        "batch": [1, 3, 8, 32], "tokens": [5, 17, 64], "features": [7, 33, 96], "hidden": [10, 50, 130, 300],
        "classes": [3, 10], "rank": [2, 3, 4], "dim": ["tokens", "batch", "last_but_one", "both"],
        "keepdim": [False, True], "affine": [True, False], "groups": [1, 2, 5], "depth": [1, 2],
        "norm": ["none", "layernorm", "rmsnorm"], "act": ["relu", "gelu"],
    }  # fmt: skip
    return [{k: rng.choice(v) for k, v in grid.items()} for _ in range(n)]


def measure_module(micro: Micro, mode: str, optimizer: str) -> tuple[int, int]:
    """(estimate, PyTorch's peak) in bytes of a plain module traced by ``from_torch``: one ``optimizer``
    step under bfloat16 autocast (``mode="train"``) or one no-grad forward under it."""
    build, shape = micro
    space = Space({"batch": Categorical([shape[0]])})
    net = from_torch(lambda cfg: build(), lambda cfg: [torch.empty(cfg["batch"], *shape[1:])]).network(space)
    budget = Budget(mode=mode, optimizer=optimizer, dtype="mixed")
    (est,) = compile_scalar([memory_expressions(net, budget)["memory"]])(
        encode_config(space, {"batch": shape[0]})
    )
    torch.manual_seed(0)
    module, x = build(), torch.randn(*shape)
    if mode == "train":
        return int(est), peak_memory(module, [x], optimizer=optimizer, autocast=torch.bfloat16).peak
    module.eval()
    with torch.no_grad():
        with torch.autocast("cpu", dtype=torch.bfloat16):
            module(x)  # warm-up
        with track_memory(list(module.parameters()), list(module.buffers()), [x]) as tracker:
            with torch.autocast("cpu", dtype=torch.bfloat16):
                out = module(x)
            del out
    return int(est), tracker.peak


def micro_rows(n: int, seed: int) -> list[dict[str, Any]]:
    """One row per family, configuration and mode (:data:`MICRO_MODES`) on this process's backend."""
    torch.set_num_threads(1)
    # torch's note that a bfloat16 input with an fp32 RMSNorm weight runs the composite, not the fused kernel
    warnings.filterwarnings("ignore", "Mismatch dtype between input and weight")
    rows = []
    for fam, make in MICRO.items():
        for cfg in micro_configs(n, random.Random(f"{seed}-{fam}")):
            for mode, opt in MICRO_MODES:
                est, real = measure_module(make(cfg), mode, opt)
                rows.append({"family": fam, "mode": f"{mode}/{opt}" if mode == "train" else mode,
                             "cfg": json.dumps(cfg), "estimate": est, "real": real})  # fmt: skip
    return rows


def build_parser() -> argparse.ArgumentParser:
    ap = sampling_parser(__doc__, 12, 0, 3)
    ap.add_argument(
        "--native-only", action="store_true", help="micro-graphs: skip the AVX2-emulated subprocess"
    )
    ap.add_argument("--micro-only", action="store_true", help="only the micro-graphs")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    return ap


def micro_section(args: argparse.Namespace) -> str:
    """The micro-graphs' table, natively and (unless ``--native-only``) with AVX2 emulated."""
    n = 2 if args.quick else MICRO_PER_FAMILY
    t0 = time.perf_counter()
    results = {f"native ({detect_cpu_backend().isa})": micro_rows(n, args.seed)}
    if not args.native_only:
        argv = ["--seed", str(args.seed), *(["--quick"] if args.quick else [])]
        results["AVX2 (emulated)"] = run_worker("benchmarks.memory_mixed", argv, AVX2_ENV)
    table = []
    for mode in [f"{m}/{o}" if m == "train" else m for m, o in MICRO_MODES]:
        for fam in [*MICRO, "all"]:
            cells: list[Any] = [mode, fam, 0]
            for backend, rows in results.items():
                sel = [r for r in rows if r["mode"] == mode and fam in ("all", r["family"])]
                med, worst, under = summary(sel)
                cells[2] = len(sel)
                miss = worst > MICRO_GOAL[0] or under > MICRO_GOAL[1]
                cells.append(f"{med:.2%} / {worst:.2%} / {under:.2%}" + (" ✗" if miss else ""))
                for r in sel if fam == "all" else ():
                    err = r["estimate"] / r["real"] - 1
                    if err > MICRO_GOAL[0] or err < -MICRO_GOAL[1]:
                        print(f"  {backend} {r['family']} {mode} {r['cfg']}: estimate {r['estimate']:,} B, "
                              f"PyTorch {r['real']:,} B ({err:+.1%})")  # fmt: skip
            table.append(cells)
    header = ["mode", "family", "n", *(f"{b}: median / max / worst under" for b in results)]
    return (
        f"Micro-graphs as plain `torch.nn` modules traced by `from_torch` ({machine()}, torch "
        f"{torch.__version__}): `linear -> mean/sum over dimensions -> linear`, LayerNorm, RMSNorm, "
        f"GroupNorm and BatchNorm between two linears, residual MLPs (no norm, LayerNorm or RMSNorm before "
        f"each block) and a mean-pooled classifier head, {n} configurations per family at odd sizes (seed "
        f"{args.seed}), each an Adam step, an SGD step and a no-grad forward under bfloat16 autocast, one "
        f"intra-op thread, natively and with AVX2 emulated, {time.perf_counter() - t0:.0f} s. Cells: median "
        f"|error| / max |error| / worst underestimate of `memory`; ✗: misses the goal (every one within 5 %, "
        f"none more than 3 % under).\n\n" + markdown_table(header, table)
    )


def main(argv: list[str] | None = None) -> None:
    ap = build_parser()
    args = ap.parse_args(argv)
    if args.worker:
        print(json.dumps(micro_rows(2 if args.quick else MICRO_PER_FAMILY, args.seed)))
        return
    write = writes_readme(ap, args)
    micro = micro_section(args)
    print(micro)
    if write:
        update_readme("memory_mixed_micro", micro)
    if args.micro_only:
        return
    torch.set_num_threads(1)
    n = 3 if args.quick else args.per_family
    rng = random.Random(args.seed)
    table = []
    errors: dict[str, list[float]] = {mode: [] for mode in BUDGETS}
    t0 = time.perf_counter()
    for fam, (build, space) in _families().items():
        net = build(space.vars)
        cfgs = configs(net, space, n, rng)
        for mode in BUDGETS:
            errs = []
            for cfg in cfgs:
                est, real = measure(net, space, cfg, mode)
                errs.append((est - real) / real)
                if abs(errs[-1]) > 0.01:
                    print(f"  {fam} {mode} {cfg}: estimate {est / 2**20:.2f} MiB, "
                          f"PyTorch {real / 2**20:.2f} MiB ({errs[-1]:+.1%})")  # fmt: skip
            abs_errs = [abs(e) for e in errs]
            errors[mode] += abs_errs
            worst = min(errs)
            table.append([fam, mode, len(errs), f"{statistics.median(abs_errs):.2%}", f"{max(abs_errs):.2%}",
                          f"{worst:+.2%}" if worst < 0 else "none"])  # fmt: skip
    for mode, errs in errors.items():
        table.append(["all", mode, len(errs), f"{statistics.median(errs):.2%}", f"{max(errs):.2%}", ""])
    body = (
        f"Mixed precision (`dtype='mixed'`) vs PyTorch's peak under bfloat16 CPU autocast "
        f"({machine()}, torch {torch.__version__}): one Adam training step and one no-grad forward per "
        f"configuration (fixed seed {args.seed}), {time.perf_counter() - t0:.0f} s. Every op's output dtype "
        f"follows autocast's CPU op lists (the `autocast` field of each catalog entry). "
        f"Goal: max |error| ≤ 5 %.\n\n"
        + markdown_table(
            ["family", "mode", "n", "median abs. error", "max abs. error", "worst underestimate"], table
        )
    )
    print(body)
    if write:
        update_readme("memory_mixed", body)


if __name__ == "__main__":
    main()
