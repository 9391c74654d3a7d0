"""Mixed precision (bfloat16 CPU autocast) inference of attention blocks against PyTorch's allocator:
the projections' input copy, freed before the output projection, and oneDNN's bfloat16 matmul
accumulator over row counts that are not multiples of 256."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from benchmarks.memory_mixed import measure, vit
from dnnsat import zoo
from dnnsat.space import Categorical, Space

# shapes outside benchmarks/memory_mixed.py's spaces: 300, 640, 4 x 65 and 5 x 65 rows
TRANSFORMERS = [
    {"batch_size": 3, "seq_len": 100, "layers": 1, "d_model": 96, "heads": 2, "ffn_mult": 2},
    {"batch_size": 4, "seq_len": 160, "layers": 1, "d_model": 64, "heads": 1, "ffn_mult": 2},
]
VITS = [
    {"batch_size": 4, "resolution": 32, "patch": 4, "d_model": 64, "heads": 2, "layers": 2, "ffn_mult": 2},
    {"batch_size": 5, "resolution": 32, "patch": 4, "d_model": 96, "heads": 3, "layers": 1, "ffn_mult": 4},
]


def _error(build: Any, cfg: dict[str, Any], mode: str) -> float:
    torch.set_num_threads(1)
    space = Space({k: Categorical([v]) for k, v in cfg.items()})
    est, real = measure(build(space.vars), space, cfg, mode)
    return est / real - 1


@pytest.mark.parametrize("cfg", TRANSFORMERS)
def test_transformer_inference(cfg: dict[str, Any]) -> None:
    """Within 1 % over, never under (the model was 2.6-5.8 % over; 640 rows are split into blocks
    that ``ceil(640 / 3)`` bounds from above)."""
    err = _error(zoo.get("transformer").build(vocab=2048), cfg, "inference")
    assert 0 <= err <= 0.01, f"{err:+.2%}"


@pytest.mark.parametrize("cfg", VITS)
@pytest.mark.parametrize("mode", ["inference", "train"])
def test_vit(cfg: dict[str, Any], mode: str) -> None:
    """Inference exact within 0.1 % (was 1.1-6 % over), training within 1 % either way."""
    err = _error(vit, cfg, mode)
    assert abs(err) <= (0.001 if mode == "inference" else 0.01), f"{err:+.2%}"
