"""Patchify convolutions (a kernel as large as its stride, few input channels): the patch embeddings of
ViT (16x16 and 32x32 patches), Swin and ConvNeXt's stem (4x4), and overlapping or kernel != stride
variants. oneDNN has no JIT backward-weights kernel for kernels wider than 14 (AVX-512) or 13 (AVX2)
and runs an im2col GEMM with four weight-sized accumulators; a transposed output
(``conv(x).flatten(2).transpose(1, 2)``) hands the convolution's backward a strided gradient, which it
copies. Adam training steps of plain ``torch.nn`` modules traced by ``from_torch`` against
:func:`dnnsat.torch.peak_memory`, natively and, in a subprocess, with AVX2 emulated (the model follows
the detected backend)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
import torch.nn as nn  # noqa: E402

import dnnsat as ds  # noqa: E402
from benchmarks._emulate import AVX2_ENV  # noqa: E402
from dnnsat.cost import Budget, memory_expressions  # noqa: E402
from dnnsat.expr import compile_scalar  # noqa: E402
from dnnsat.torch import from_torch, peak_memory  # noqa: E402

Config = dict[str, Any]


class Patchify(nn.Module):
    """A patch embedding and a linear head: ``vit`` flattens and transposes the patches to tokens,
    ``swin`` adds a LayerNorm over the tokens, ``convnext`` permutes to channels-last and normalizes
    (``convnext_dw``: after a ConvNeXt block's depthwise convolution of kernel ``dw``), ``audio`` embeds
    frames of a 1-D signal (``nn.Conv1d``) and transposes them to tokens."""

    def __init__(self, c: Config) -> None:
        super().__init__()
        self.head = c["head"]
        conv = nn.Conv1d if self.head == "audio" else nn.Conv2d
        self.conv = conv(c["cin"], c["d"], c["k"], stride=c["s"], padding=c["p"])
        d, dw = c["d"], c["dw"]
        self.dw = nn.Conv2d(d, d, dw, padding=dw // 2, groups=d) if dw else nn.Identity()
        self.norm = nn.LayerNorm(d) if self.head != "vit" and self.head != "audio" else nn.Identity()
        self.fc = nn.Linear(d, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.dw(self.conv(x))
        y = y.permute(0, 2, 3, 1) if self.head.startswith("convnext") else y.flatten(2).transpose(1, 2)
        return self.fc(self.norm(y))


def _input(c: Config) -> torch.Tensor:
    """The batch of case ``c``: signals of length ``r`` (``audio``), else ``r`` x ``r`` images."""
    side = (c["r"],) if c["head"] == "audio" else (c["r"], c["r"])
    return torch.randn(c["b"], c["cin"], *side)


# head, input channels, kernel, stride, padding, embedding width, input side, batch[, depthwise kernel]
CASES = [
    ("vit", 3, 16, 16, 0, 32, 32, 2), ("vit", 3, 16, 16, 0, 768, 32, 2), ("vit", 3, 16, 16, 0, 768, 224, 8),
    ("vit", 3, 16, 16, 0, 64, 64, 8), ("vit", 3, 32, 32, 0, 96, 64, 2), ("vit", 3, 14, 14, 0, 64, 56, 4),
    ("vit", 1, 16, 16, 0, 48, 64, 2), ("vit", 4, 16, 16, 0, 48, 64, 2), ("vit", 8, 8, 8, 0, 64, 64, 2),
    ("vit", 16, 16, 16, 0, 64, 64, 2), ("vit", 3, 16, 8, 4, 64, 64, 2), ("vit", 3, 15, 15, 0, 40, 60, 2),
    ("vit", 3, 2, 2, 0, 32, 32, 2), ("vit", 3, 7, 7, 0, 48, 56, 2), ("swin", 3, 4, 4, 0, 96, 64, 4),
    ("swin", 3, 7, 4, 3, 64, 64, 2), ("swin", 1, 8, 8, 0, 32, 64, 2), ("convnext", 3, 4, 4, 0, 96, 64, 4),
    ("convnext", 4, 4, 4, 0, 48, 32, 2), ("convnext", 8, 14, 14, 0, 32, 56, 2),
    ("audio", 1, 16, 16, 0, 32, 256, 2), ("audio", 16, 15, 1, 0, 32, 100, 2),
    ("audio", 3, 25, 5, 0, 48, 400, 2),
    # a depthwise kernel wider than 3 computes its weight gradient by im2col GEMM (fp32 too), one wider
    # than 13 (AVX2: 9) its forward too
    ("convnext_dw", 3, 4, 4, 0, 48, 64, 2, 5), ("convnext_dw", 3, 4, 4, 0, 32, 64, 2, 7),
    ("convnext_dw", 3, 4, 4, 0, 32, 64, 2, 13), ("convnext_dw", 3, 4, 4, 0, 32, 128, 2, 31),
]  # fmt: skip
# bfloat16 autocast: first layers wider than 24 columns and others wider than 14 run the im2col GEMM;
# the others transpose the input rows (strided columns padded) and the output gradient
MIXED_CASES = [
    ("vit", 3, 16, 16, 0, 32, 64, 2), ("vit", 3, 24, 24, 0, 32, 64, 2), ("vit", 3, 28, 28, 0, 32, 56, 2),
    ("vit", 3, 32, 32, 0, 96, 64, 2), ("vit", 8, 28, 28, 0, 32, 56, 2), ("vit", 16, 14, 14, 0, 32, 60, 2),
    ("vit", 16, 15, 15, 0, 32, 60, 2), ("vit", 16, 8, 8, 0, 32, 60, 2), ("vit", 16, 4, 4, 0, 32, 64, 2),
    ("swin", 16, 7, 4, 3, 32, 64, 2), ("convnext", 32, 2, 2, 0, 64, 32, 2),
]  # fmt: skip
KEYS = ("head", "cin", "k", "s", "p", "d", "r", "b", "dw")  # dw: 0 (none) unless a case gives it


def _errors(mixed: bool = False) -> list[float]:
    """Relative error of an Adam training step's estimate for each case (``mixed``: of
    :data:`MIXED_CASES` under bfloat16 autocast), on this process's backend."""
    torch.set_num_threads(1)
    cfgs = [{"dw": 0, **dict(zip(KEYS, case))} for case in (MIXED_CASES if mixed else CASES)]
    budget = Budget(mode="train", optimizer="adam", dtype="mixed" if mixed else "float32")
    estimates = {}
    for head in dict.fromkeys(c["head"] for c in cfgs):
        space = ds.Space(
            {k: ds.Categorical(sorted({c[k] for c in cfgs if c["head"] == head})) for k in KEYS[1:]}
        )
        model = from_torch(
            lambda c, h=head: Patchify({**c, "head": h}), lambda c, h=head: _input({**c, "head": h})
        )
        estimates[head] = compile_scalar([memory_expressions(model.network(space), budget, None)["memory"]])
    out = []
    for c in cfgs:
        torch.manual_seed(0)
        real = peak_memory(Patchify(c), [_input(c)], autocast=torch.bfloat16 if mixed else None).peak
        out.append((int(estimates[c["head"]](c)[0]) - real) / real)
    return out


def _check(errors: list[float], cases: list[tuple[Any, ...]]) -> None:
    assert len(errors) == len(cases)
    for case, err in zip(cases, errors):
        assert -0.005 <= err <= 0.02, (case, f"{err:+.2%}")


def _emulated(mixed: bool) -> list[float]:
    """:func:`_errors` in a subprocess with AVX2 emulated."""
    code = f"import json; from tests.test_memory_patchify import _errors; print(json.dumps(_errors({mixed})))"
    root = Path(__file__).resolve().parents[1]
    res = subprocess.run(
        [sys.executable, "-c", code], env={**os.environ, **AVX2_ENV}, cwd=root, capture_output=True, text=True
    )
    assert res.returncode == 0, res.stderr[-2000:]
    return list(json.loads(res.stdout.strip().splitlines()[-1]))


def test_native_backend() -> None:
    _check(_errors(), CASES)


def test_native_backend_mixed() -> None:
    _check(_errors(mixed=True), MIXED_CASES)


@pytest.mark.skipif(sys.platform != "linux", reason="ISA emulation through oneDNN's environment")
def test_avx2_emulated() -> None:
    _check(_emulated(False), CASES)


@pytest.mark.skipif(sys.platform != "linux", reason="ISA emulation through oneDNN's environment")
def test_avx2_emulated_mixed() -> None:
    _check(_emulated(True), MIXED_CASES)
