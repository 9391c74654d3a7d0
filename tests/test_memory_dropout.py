"""Dropout's memory against PyTorch's allocator: a mask of the input's dtype in training on the CPU,
nothing at all with ``p=0`` (``aten::dropout`` returns its input)."""

from __future__ import annotations

import pytest
import torch

import dnnsat as ds
from dnnsat.cost import Budget, memory_expressions
from dnnsat.expr import compile_scalar
from dnnsat.torch import GraphModule, concretize, peak_memory


@pytest.mark.parametrize("p", [0.0, 0.1])
@pytest.mark.parametrize("optimizer", ["sgd", None])
def test_dropout_memory(p: float, optimizer: str | None) -> None:
    torch.set_num_threads(1)
    net = ds.Network()
    x = net.input((2048, 64))
    net.output(net.linear(net.dropout(net.relu(net.linear(x, 1024)), p), 10))
    budget = Budget(mode="train" if optimizer else "inference", optimizer=optimizer)
    estimate = int(compile_scalar([memory_expressions(net, budget, None)["memory"]])({})[0])
    torch.manual_seed(0)
    module = GraphModule(concretize(net, {}))
    real = peak_memory(
        module, [torch.randn(2048, 64)], train=optimizer is not None, optimizer=optimizer or "sgd"
    )
    assert abs(estimate / real.peak - 1) < 0.001, (estimate, real.peak)
