"""Mixed precision on transformer graphs: the memory model vs PyTorch's peak under CPU autocast.

``python -m benchmarks.memory_mixed [--quick]``. Every configuration is one Adam training step under
``torch.autocast("cpu", dtype=torch.bfloat16)`` (forward and loss), measured with
:func:`dnnsat.torch.peak_memory` (one intra-op thread), and one no-grad forward under autocast
(measured with :func:`dnnsat.torch.track_memory`), against ``memory_expressions(net, Budget(mode=...,
optimizer="adam", dtype="mixed"))["memory"]``. The
families are the graphs where autocast leaves tensors in fp32: a ViT (convolutional patch embedding,
CLS token, fp32 positional embedding, pre-LN blocks), the zoo's GPT and transformer encoder (fp32
token + position embeddings feed an fp32 residual stream), a post-LN (BERT-style) encoder,
``linear -> layernorm -> linear`` stacks and an fp32 positional-embedding add. Nothing is fitted.
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from collections.abc import Callable
from typing import Any

import torch

from benchmarks._report import machine, markdown_table, sampling_parser, update_readme, writes_readme
from dnnsat import zoo
from dnnsat.cost import Budget, memory_expressions
from dnnsat.expr import compile_scalar
from dnnsat.graph import Network, Tensor, encode_config
from dnnsat.space import Categorical, Int, Space
from dnnsat.torch import GraphModule, concretize, example_inputs, peak_memory, track_memory
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


def build_parser() -> argparse.ArgumentParser:
    return sampling_parser(__doc__, 12, 0, 3)


def main(argv: list[str] | None = None) -> None:
    ap = build_parser()
    args = ap.parse_args(argv)
    write = writes_readme(ap, args)
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
