"""nn.GRU's CPU memory (PyTorch's own cell loop) and nn.LSTM's no-grad forward (oneDNN's RNN) against
PyTorch's allocator, at sizes users train."""

from __future__ import annotations

import pytest
import torch

from benchmarks.memory_families import measure

SIZES = [(32, 64, 128, 256, 2, False), (16, 100, 64, 512, 1, True), (8, 16, 40, 96, 2, True)]


def _errors(
    cfg: tuple[int, int, int, int, int, bool], modes: tuple[str, ...], cell: str = "gru"
) -> list[tuple[str, float]]:
    torch.set_num_threads(1)
    batch, seq, features, hidden, layers, bidirectional = cfg
    c = {"cell": cell, "batch": batch, "seq": seq, "features": features, "hidden": hidden, "layers": layers,
         "bidir": bidirectional, "dropout": 0.1, "classes": 7}  # fmt: skip
    return [(r["mode"], r["estimate"] / r["real"] - 1) for r in measure(cell, c, modes)]


# small shapes (none of them in benchmarks/_families.py's grid): a batch or a sequence of 1 (no
# batch_first copies), 2-layer and bidirectional stacks
SMALL = [(3, 12, 7, 16, 1, False), (2, 20, 9, 24, 2, True), (1, 24, 6, 10, 1, True), (5, 6, 11, 40, 2, False),
         (6, 1, 10, 30, 1, True), (16, 10, 3, 48, 1, True)]  # fmt: skip


@pytest.mark.parametrize("cfg", SIZES)
def test_gru_training_step(cfg: tuple[int, int, int, int, int, bool]) -> None:
    """The step loop, per-direction input copies and projections, the consumer's copy of the
    batch_first output, the backward's weight-gradient chunks and the stacked input-gate gradients:
    within 1 % over and 0.5 % under (the model was 7-16 % over)."""
    for mode, err in _errors(cfg, ("train/adam", "train/sgd")):
        assert -0.005 <= err <= 0.01, (mode, f"{err:+.2%}")


@pytest.mark.parametrize("cfg", SMALL)
def test_gru_training_small(cfg: tuple[int, int, int, int, int, bool]) -> None:
    """Small shapes, where the backward's step terms and copies weigh most: within 4 % over and
    0.5 % under (the model was up to 15 % over). The rest over is the consumer's copy, which the
    model counts until the GRU's backward while PyTorch frees the output it replaces earlier (the
    hand-written ``forward``'s local ``out``, which the DSL network cannot see, lives until then)."""
    for mode, err in _errors(cfg, ("train/adam", "train/sgd")):
        assert -0.005 <= err <= 0.04, (mode, f"{err:+.2%}")


@pytest.mark.parametrize("cfg", [*SIZES, (64, 32, 300, 128, 1, True), (8, 50, 512, 64, 1, False), *SMALL])
def test_gru_inference(cfg: tuple[int, int, int, int, int, bool]) -> None:
    """No-grad forward: the last direction's projection beside the step outputs and stacks, or (wide
    inputs) both directions' projections and the input copy, or (below 4 steps) a step's cell
    temporaries; the earlier layers' last hidden states: exact within 0.1 % (was up to 18 % over and
    2 % under)."""
    for mode, err in _errors(cfg, ("inference",)):
        assert -0.001 <= err <= 0.001, (mode, f"{err:+.2%}")


@pytest.mark.parametrize(
    "cfg",
    [(32, 64, 128, 256, 2, False), (16, 100, 64, 512, 1, True), (64, 32, 300, 128, 1, True),
     (8, 32, 5, 20, 1, False), (1, 40, 3, 256, 1, False)],
)  # fmt: skip
def test_lstm_inference(cfg: tuple[int, int, int, int, int, bool]) -> None:
    """oneDNN's inference scratchpad (states, one step's gates or, at batch 1, every step's, the hidden
    state; page-aligned), the weight reorders, a bidirectional layer's outputs beside its second call:
    within 1 % over, never under (was up to 19 % over and, on small shapes, 6 % under)."""
    for mode, err in _errors(cfg, ("inference",), cell="lstm"):
        assert 0 <= err <= 0.01, (mode, f"{err:+.2%}")
