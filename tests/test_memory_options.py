"""Budget options that fit memory: safety margin, gradient accumulation, activation checkpointing."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch.utils.checkpoint import checkpoint

import dnnsat as ds
from dnnsat.cost import Budget, memory_expressions
from dnnsat.expr import compile_scalar
from dnnsat.graph import Network, Tensor, encode_config
from dnnsat.space import Categorical, Space
from dnnsat.torch import GraphModule, concretize, example_inputs, peak_memory, track_memory
from dnnsat.torch._memory import cross_entropy_targets, make_optimizer
from dnnsat.zoo._models import _block

torch.set_num_threads(1)
SPACE = Space({"batch_size": Categorical([2, 4, 8, 16])})


class _Sizes:
    heads = 2
    ffn_mult = 4


def _layer(net: Network, x: Tensor) -> Tensor:
    return _block(net, x, _Sizes, causal=False)


def _transformer(batch: Any, layers: int = 3, seq: int = 32, d: int = 64) -> Network:
    """``layers`` pre-LN blocks in a ``repeat`` and a linear head on a ``(batch, seq, d)`` input."""
    net = Network()
    x = net.repeat(layers, layers, lambda i, y: _layer(net, y), net.input((batch, seq, d)))
    return net.output(net.linear(x, 10))


def _estimate(net: Network, budget: Budget, cfg: dict[str, Any] | None = None) -> float:
    env = encode_config(SPACE, cfg) if cfg else {}
    return compile_scalar([memory_expressions(net, budget)["memory"]])(env)[0]


# -- margin ------------------------------------------------------------------------------------------
def test_margin_lowers_the_estimated_limits_only() -> None:
    b = Budget(memory="1GiB", latency="10ms", device="cpu", params="1M", margin=0.05)
    assert b.limits() == {"params": 1e6, "memory": 0.95 * 2**30, "latency": 0.95 * 0.01}
    assert Budget(memory="1GiB").limits() == {"memory": 2**30}
    assert Budget.parse("memory=1GiB,margin=0.1").limits() == {"memory": 0.9 * 2**30}


@pytest.mark.parametrize("margin", [1, 1.5, -0.01, "5%", True, None])
def test_margin_is_validated(margin: Any) -> None:
    with pytest.raises(ValueError, match="margin must be a number with 0 <= margin < 1"):
        Budget(memory="1GiB", margin=margin)


def test_a_problem_with_a_margin_rejects_what_fits_only_without_it() -> None:
    def build(v: Any) -> Network:
        return _transformer(v.batch_size, layers=1)

    need = _estimate(_transformer(8, layers=1), Budget(optimizer="adam"))
    for margin, feasible in ((0.0, True), (0.05, False)):
        problem = ds.Problem(
            SPACE, model=build, budget=Budget(memory=need * 1.01, optimizer="adam", margin=margin)
        )
        assert problem.check({"batch_size": 8}).feasible is feasible


# -- gradient accumulation ---------------------------------------------------------------------------
def _accumulated_peak(net: Network, cfg: dict[str, Any], steps: int) -> int:
    """PyTorch's peak of one optimizer step over ``steps`` micro-batches (Adam; loss / steps)."""
    torch.manual_seed(0)
    module = GraphModule(concretize(net, {"batch_size": cfg["batch_size"] // steps}, SPACE))
    batches = [example_inputs(module, "cpu") for _ in range(steps)]
    opt = make_optimizer("adam", list(module.parameters()))
    with torch.no_grad():
        targets = cross_entropy_targets(module(*batches[0]))

    def step() -> None:
        opt.zero_grad(set_to_none=True)
        for batch in batches:
            loss = torch.nn.functional.cross_entropy(module(*batch).flatten(0, -2), targets.flatten()) / steps
            loss.backward()
            del loss
        opt.step()

    step()
    weights = [p.detach() for p in module.parameters()]
    with track_memory(weights, list(module.buffers()), opt, batches[0], targets) as tracker:
        step()
    return tracker.peak


@pytest.mark.parametrize("steps", [2, 4])
def test_gradient_accumulation_against_pytorch(steps: int) -> None:
    """Activations at the micro-batch, every gradient alive from the second micro-batch on (measured:
    within 0.1 %)."""
    net = _transformer(SPACE.vars.batch_size)
    for batch in (8, 16):
        cfg = {"batch_size": batch}
        est = _estimate(net, Budget(optimizer="adam", accumulation_steps=steps), cfg)
        real = _accumulated_peak(net, cfg, steps)
        assert abs(est - real) / real <= 0.005, (steps, batch, est, real)
        assert est < _estimate(net, Budget(optimizer="adam"), cfg)


def test_accumulation_needs_a_batch_variable_and_training() -> None:
    with pytest.raises(ValueError, match="must be a space variable"):
        memory_expressions(_transformer(8), Budget(accumulation_steps=2))
    with pytest.raises(ValueError, match="accumulation_steps must be a positive int"):
        Budget(accumulation_steps=0)
    with pytest.raises(ValueError, match="apply to training"):
        Budget(mode="inference", accumulation_steps=2)


# -- activation checkpointing ------------------------------------------------------------------------
def _module(shape: tuple[int, ...], body: Any) -> GraphModule:
    net = Network()
    return GraphModule(concretize(net.output(body(net, net.input(shape))), {}))


class _Checkpointed(torch.nn.Module):
    """The blocks of :func:`_transformer`, each under ``torch.utils.checkpoint`` (or not)."""

    def __init__(self, shape: tuple[int, ...], layers: int, enabled: bool) -> None:
        super().__init__()
        self.blocks = torch.nn.ModuleList(_module(shape, _layer) for _ in range(layers))
        self.head = _module(shape, lambda net, x: net.linear(x, 10))
        self.enabled = enabled

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = checkpoint(block, x, use_reentrant=False) if self.enabled else block(x)
        return self.head(x)


CHECKPOINTED = [((4, 64, 64), 3, "float32"), ((8, 128, 128), 4, "float32"), ((8, 128, 128), 4, "mixed")]


@pytest.mark.parametrize(("shape", "layers", "dtype"), CHECKPOINTED)
def test_checkpointing_against_pytorch(shape: tuple[int, int, int], layers: int, dtype: str) -> None:
    """Measured: -0.1 % to +1.3 % with checkpointing (0.0 % without)."""
    net = _transformer(shape[0], layers, shape[1], shape[2])
    amp = torch.bfloat16 if dtype == "mixed" else None
    for enabled in (False, True):
        est = _estimate(net, Budget(optimizer="adam", dtype=dtype, checkpoint=enabled))
        torch.manual_seed(0)
        module = _Checkpointed(shape, layers, enabled)
        real = peak_memory(module, [torch.randn(shape)], optimizer="adam", autocast=amp).peak
        assert abs(est - real) / real <= 0.02, (enabled, est, real)
    assert _estimate(net, Budget(checkpoint=True)) < _estimate(net, Budget())


def test_checkpointing_leaves_networks_without_repeat_alone() -> None:
    net = Network()
    net.output(net.linear(_layer(net, net.input((4, 16, 32))), 10))
    assert _estimate(net, Budget(checkpoint=True)) == _estimate(net, Budget())
    with pytest.raises(ValueError, match="checkpoint must be True or False"):
        Budget(checkpoint="yes")  # type: ignore[arg-type]
