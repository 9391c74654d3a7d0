"""Conv3d memory on the CPU: on AVX-512 the oneDNN working sets of conv1d/2d apply to kernels of side <= 3
(measured with PyTorch's allocator events); larger kernels in training, and AVX2, are known to be
underestimated and say so."""

from __future__ import annotations

import logging

import pytest

import dnnsat as ds
from dnnsat.cost import detect_cpu_backend
from dnnsat.graph import Network

torch = pytest.importorskip("torch")
from dnnsat.torch import example_inputs, peak_memory, to_torch  # noqa: E402


def _problem(c: int, k: int, stride: int, groups: int, train: bool) -> ds.Problem:
    def build(v: object) -> Network:
        net = Network()
        x = net.input((2, c, 8, 16, 16))
        y = net.relu(net.conv3d(x, 2 * c, k, stride=stride, padding=k // 2, groups=groups))
        y = net.conv3d(y, c, 3, padding=1)
        return net.output(net.mean(net.flatten(y, 2), 2))

    budget = ds.Budget(mode="train" if train else "inference", optimizer="adam")
    return ds.Problem(ds.Space({"d": ds.Categorical([1])}), model=build, budget=budget)


@pytest.mark.parametrize("train", [True, False])
@pytest.mark.parametrize(
    ("c", "k", "stride", "groups"), [(8, 3, 1, 1), (12, 3, 1, 1), (16, 3, 2, 1), (16, 3, 1, 4), (3, 3, 1, 1)]
)
def test_conv3d_memory_matches_pytorch(c: int, k: int, stride: int, groups: int, train: bool) -> None:
    if not detect_cpu_backend().isa.startswith("avx512"):
        pytest.skip("conv3d CPU memory is modelled for AVX-512 only (other ISAs warn: next test)")
    torch.set_num_threads(1)
    p = _problem(c, k, stride, groups, train)
    module = to_torch(p.network, {})
    real = peak_memory(module, example_inputs(module), train=train, optimizer="adam").peak
    assert p.costs({"d": 1})["memory"] == pytest.approx(real, rel=0.01)


def test_large_conv3d_kernels_warn_that_training_memory_is_underestimated(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.WARNING, logger="dnnsat.cost"):
        _problem(6, 5, 1, 1, train=True)
    assert "conv3d#1: the CPU memory of conv3d is validated on AVX-512" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="dnnsat.cost"):
        _problem(6, 3, 1, 1, train=True)
        _problem(6, 5, 1, 1, train=False)
    # modelled on AVX-512 only: silent there, a warning on any other ISA
    assert ("conv3d" in caplog.text) != detect_cpu_backend().isa.startswith("avx512")
