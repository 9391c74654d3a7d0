"""Traced transposes are views (``Network.permute_views``): a hand-written attention block's
``sdpa(q, k, v).transpose(1, 2).reshape(b, s, d)`` copies nothing in training, and a ViT's transposed
patch embeddings make every layer norm copy its input; the memory model against PyTorch's allocator on
shapes outside benchmarks/_families.py's grids."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from benchmarks.memory_families import measure

ENCODERS = [{"batch": 3, "seq": 24, "d_model": 80, "heads": 5, "layers": 2, "ffn_mult": 3, "dropout": 0.1,
             "classes": 10},
            {"batch": 2, "seq": 40, "d_model": 56, "heads": 2, "layers": 1, "ffn_mult": 2, "dropout": 0.1,
             "classes": 10}]  # fmt: skip
VITS = [{"batch": 3, "res": 24, "patch": 4, "d_model": 80, "heads": 4, "layers": 2, "ffn_mult": 3,
         "dropout": 0.1, "classes": 10}]  # fmt: skip
CASES = [*(("encoder", c) for c in ENCODERS), *(("vit", c) for c in VITS)]


@pytest.mark.parametrize(("family", "cfg"), CASES)
def test_traced_transposes(family: str, cfg: dict[str, Any]) -> None:
    """Training and inference within 0.1 % (training was 1.9-2.8 % over)."""
    torch.set_num_threads(1)
    for r in measure(family, cfg, ("train/adam/from_torch", "inference/from_torch")):
        err = r["estimate"] / r["real"] - 1
        assert abs(err) <= 0.001, (r["mode"], f"{err:+.2%}")
