"""Mixed precision: every op's output dtype follows torch.autocast's op lists; checked against PyTorch."""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

import pytest
import torch

from benchmarks.memory_mixed import _families, configs, measure
from dnnsat.cost import Budget
from dnnsat.cost.memory import cpu_bf16_matmul_scratch
from dnnsat.cost.memory._peak import _Model
from dnnsat.expr import Const, compile_scalar
from dnnsat.graph import CATALOG, Network
from dnnsat.graph._catalog import KEEP, LOWER

torch.set_num_threads(1)
MIXED = Budget(mode="train", optimizer="adam", dtype="mixed")


@dataclass(frozen=True)
class _Gpu:
    kind: str = "gpu"
    context_bytes: int = 0


def test_every_catalog_entry_has_an_autocast_policy() -> None:
    for entry in CATALOG.values():
        assert {entry.autocast.cpu, entry.autocast.cuda} <= {"lower", "fp32", "promote", "keep"}
    for name in ("conv1d", "conv2d", "conv_transpose2d", "matmul", "bmm", "lstm", "gru"):
        assert CATALOG[name].autocast == LOWER
    assert CATALOG["attention"].autocast.casts == 3  # q, k and v each cast the input
    for name in ("layernorm", "groupnorm", "softmax"):  # CUDA's fp32 list; not in AutocastCPU's
        assert (CATALOG[name].autocast.cpu, CATALOG[name].autocast.cuda) == ("keep", "fp32")
    assert (CATALOG["concat"].autocast.cpu, CATALOG["concat"].autocast.cuda) == ("promote", "keep")
    for name in ("embedding", "batchnorm", "add", "mul", "gelu", "dropout", "mean", "maxpool2d"):
        assert CATALOG[name].autocast == KEEP


def _dtypes(net: Network, device: Any = None) -> dict[str, str]:
    model = _Model(net, MIXED, device)
    model.build()
    return {n.label: ("16" if model.half[n.output] else "32") for n in net.ops()}


def test_dtypes_follow_the_policy_and_type_promotion() -> None:
    net = Network()
    ids = net.input((2, 8), dtype="int64")
    x = net.add(net.embedding(ids, 100, 16, name="emb"), net.parameter((8, 16), name="pos"), name="res")
    h = net.linear(net.layernorm(x, name="ln"), 16, name="proj")
    y = net.add(x, h, name="res2")
    net.output(net.softmax(net.linear(y, 4, name="head"), name="sm"))
    cpu = _dtypes(net)
    # an embedding lookup and an fp32 parameter: fp32; a 16-bit projection added to it: fp32
    assert (cpu["emb"], cpu["pos"], cpu["res"], cpu["proj"], cpu["res2"]) == ("32", "32", "32", "16", "32")
    assert cpu["ln"] == "32" and cpu["sm"] == "16"  # CPU: LayerNorm and softmax keep their input's dtype
    gpu = _dtypes(net, _Gpu())
    assert gpu["sm"] == "32" and gpu["ln"] == "32"  # CUDA: softmax and LayerNorm run in fp32


def test_casts_are_saved_in_place_of_their_input() -> None:
    """A linear on an fp32 activation saves autocast's bfloat16 copy, not the fp32 tensor; attention
    saves three (q, k, v each cast)."""
    net = Network()
    x = net.layernorm(net.add(net.input((2, 8, 16)), net.parameter((8, 16))))
    net.output(net.linear(net.attention(x, 2), 4))
    model = _Model(net, MIXED, None)
    model.build()
    attention = next(n for n in net.ops() if n.op == "attention")
    assert model.saved_copies[attention.index] == {"in0"}
    ((name, nbytes, copies, cast),) = model.casts[attention.index]
    assert (name, nbytes.value, copies, cast) == ("in0", 2 * 2 * 8 * 16, 3, True)


def test_bf16_matmul_scratch_read_off_traces() -> None:
    """Exact figures of the allocator traces (torch 2.13, avx512_core_bf16, one thread)."""
    cases = {
        (256, 128, 128): (82944, 82944, 132224),
        (1024, 512, 192): (132096, 91136, 668800),
        (64, 64, 64): (25600, 25600, 33920),
        (16, 16, 16): (0, 0, 0),  # m * k * n <= 16**3: not oneDNN
    }
    for (m, k, n), want in cases.items():
        got = compile_scalar(list(cpu_bf16_matmul_scratch(Const(m), Const(k), Const(n))))({})
        assert tuple(got) == want


@pytest.mark.parametrize("family", ["vit", "gpt", "transformer", "encoder", "ln_mlp", "posemb"])
def test_transformer_graphs_against_pytorch(family: str) -> None:
    """One Adam step under bfloat16 CPU autocast: |error| <= 5 % (before per-op dtypes: up to 31 %
    under); a no-grad forward under autocast: at most 1 % under, 10 % over (attention's cast copies)."""
    build, space = _families()[family]
    net = build(space.vars)
    for cfg in configs(net, space, 2, random.Random(3)):
        est, real = measure(net, space, cfg)
        assert abs(est - real) / real <= 0.05, (family, cfg, est, real)
        est, real = measure(net, space, cfg, "inference")
        assert -0.01 <= (est - real) / real <= 0.10, (family, cfg, est, real)
