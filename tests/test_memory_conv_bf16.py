"""Convolutions under bfloat16 CPU autocast (``dtype="mixed"``): oneDNN's 16-bit kernels keep other
buffers than fp32 ones (a 1x1's fp32 output accumulator, im2col GEMM weight gradients for first
layers, grouped convs that do not fill 16-channel blocks and depthwise kernels wider than 3, a dense
strided depthwise backward). One Adam step against PyTorch's peak, on shapes other than the traces the
rules were read from; where the CPU has no bfloat16 kernels (AVX2) PyTorch's own kernels run and the
model follows the detected backend."""

from __future__ import annotations

import pytest
import torch

from dnnsat.cost import Budget, memory_expressions
from dnnsat.expr import compile_scalar
from dnnsat.graph import Network
from dnnsat.torch import GraphModule, concretize, example_inputs, peak_memory

torch.set_num_threads(1)
MIXED = Budget(mode="train", optimizer="adam", dtype="mixed")

# batch, channels in, resolution, kernel, stride, groups, channels out, input needs a gradient
CASES = [
    (2, 20, 12, 1, 1, 1, 40, True),  # 1x1: fp32 output accumulator in the forward (was -13 %)
    (3, 24, 20, 1, 2, 1, 48, False),  # strided 1x1: subsampled input, fp32 gradient (was -6 %)
    (2, 5, 20, 7, 1, 1, 20, False),  # first layer, 20 outputs: GEMM weight gradient (was -37 %)
    (2, 32, 12, 3, 1, 2, 32, True),  # grouped, 16 channels per group: blocked (was -19 %)
    (2, 24, 12, 3, 1, 4, 24, True),  # grouped, 6 channels per group: GEMM (was -8 %)
    (1, 40, 20, 5, 2, 40, 40, True),  # depthwise 5x5 strided: dense backward data, GEMM (was -15 %)
    (2, 12, 14, 7, 2, 12, 12, True),  # depthwise 7x7 strided (was -40 %)
    (2, 40, 20, 3, 1, 40, 40, True),  # depthwise 3x3: blocked
    (2, 96, 3, 1, 1, 1, 640, True),  # a head 1x1: fp32 weight-gradient accumulator
    (1, 48, 10, 3, 2, 3, 96, True),  # grouped, strided (was -3 %)
]


def _net(b: int, cin: int, res: int, k: int, s: int, g: int, cout: int, pre: bool) -> Network:
    net = Network()
    x = net.input((b, cin, res, res))
    if pre:  # a BatchNorm first: the conv's input needs a gradient
        x = net.batchnorm(x)
    y = net.conv2d(x, cout, k, stride=s, padding=k // 2, groups=g, bias=False)
    net.output(net.mean(net.flatten(net.relu(net.batchnorm(y)), 2), 2))
    return net


@pytest.mark.parametrize("case", CASES, ids=lambda c: "b{}-c{}-r{}-k{}-s{}-g{}-o{}-{}".format(*c))
def test_bf16_conv_step_against_pytorch(case: tuple[int, int, int, int, int, int, int, bool]) -> None:
    net = _net(*case)
    est = compile_scalar([memory_expressions(net, MIXED, None)["memory"]])({})[0]
    torch.manual_seed(0)
    module = GraphModule(concretize(net, {}))
    real = peak_memory(module, example_inputs(module, "cpu"), optimizer="adam", autocast=torch.bfloat16).peak
    assert -0.015 <= (est - real) / real <= 0.05, (case, est, real)
