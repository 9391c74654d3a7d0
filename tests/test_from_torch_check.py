"""``TorchModel.measure`` / ``disagreements``: the per-trial check against the real module on the meta
device is exact, leaves the caller's state alone and tells "cannot measure" from "invalid"."""

from __future__ import annotations

import warnings
from typing import Any

import pytest

torch = pytest.importorskip("torch")
import torch.nn as nn  # noqa: E402

import dnnsat as ds  # noqa: E402
from dnnsat.torch import from_torch  # noqa: E402
from dnnsat.torch._trace import MeasureError  # noqa: E402


class Net(nn.Module):
    def __init__(self, w: int) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, w, 3)
        self.bn = nn.BatchNorm2d(w)
        self.fc = nn.Linear(w, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.bn(self.conv(x)).mean((2, 3)))


def _inputs(c: dict[str, Any]) -> Any:
    return (torch.empty(2, 3, 8, 8),)


def test_measure_equals_pytorch_and_keeps_rng_and_warnings() -> None:
    model = from_torch(lambda c: Net(c["w"]), _inputs)
    torch.manual_seed(5)
    expected = torch.rand(3)
    torch.manual_seed(5)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # building on the meta device warns nothing out
        params, flops = model.measure({"w": 4})  # type: ignore[misc]
    assert torch.equal(torch.rand(3), expected)  # the caller's random stream is untouched
    real = Net(4)
    assert params == sum(p.numel() for p in real.parameters()) == 4 * 27 + 4 + 8 + 40 + 10
    assert flops == 2 * (2 * 6 * 6 * 4 * 27) + 2 * 2 * 4 * 10  # conv + linear multiply-adds


class Data(nn.Module):
    """A forward that reads a value: cannot run on the meta device (nor be traced)."""

    def __init__(self, w: int) -> None:
        super().__init__()
        self.fc = nn.Linear(3, w)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(x) * x.sum().item()


def test_unmeasurable_is_not_invalid() -> None:
    model = from_torch(lambda c: Data(c["w"]), lambda c: ((2, 3),))
    with pytest.raises(MeasureError, match=r"meta device .*test_from_torch_check.py:\d+: .*item\(\)"):
        model.measure({"w": 4})
    space = ds.Space({"w": ds.Categorical([4, 8])})
    problem = ds.Problem(space, model=lambda v: _linear_net(v))
    with pytest.warns(UserWarning, match="configurations not checked"):
        assert model.disagreements(problem, {"w": 4}) == []
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # warned once per model
        assert model.disagreements(problem, {"w": 8}) == []
    assert model.unchecked == 2


def _linear_net(v: Any) -> ds.Network:
    net = ds.Network()
    return net.output(net.linear(net.input((2, 3)), v.w))


def test_skipped_init_touches_meta_tensors_only_and_restores() -> None:
    """Weight initialisation is skipped on the meta device only (another thread's real model is
    initialised as usual); nested uses restore ``torch.nn.init`` when the last one leaves."""
    from dnnsat.torch._capture import _SkippedInit

    real = nn.init.kaiming_uniform_
    with _SkippedInit():
        with _SkippedInit():
            w = torch.zeros(3, 4)
            nn.init.kaiming_uniform_(w)
            assert w.abs().sum() > 0
            with pytest.raises(ValueError, match="[Ff]an"):  # fewer than 2 dimensions: raises as before
                nn.init.kaiming_uniform_(torch.empty(3, device="meta"))
        assert nn.init.kaiming_uniform_ is not real
    assert nn.init.kaiming_uniform_ is real


class Up(nn.Module):
    def __init__(self, stride: int, pad: int) -> None:
        super().__init__()
        self.up = nn.ConvTranspose2d(3, 4, 3, stride=stride, output_padding=pad)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.up(x)


def test_output_padding_as_real_devices_decide() -> None:
    """The meta kernel accepts an output padding >= stride and dilation; the CPU (and CUDA) reject it:
    measure follows the real devices, so the check agrees with dnnsat there."""
    space = ds.Space({"stride": ds.Categorical([1, 2]), "pad": ds.Categorical([0, 1, 2])})
    model = from_torch(lambda c: Up(c["stride"], c["pad"]), lambda c: (torch.empty(1, 3, 5, 5),))
    problem = ds.Problem(space, model=model)
    for stride in (1, 2):
        for pad in (0, 1, 2):
            cfg = {"stride": stride, "pad": pad}
            try:
                Up(stride, pad)(torch.randn(1, 3, 5, 5))
                cpu_ok = True
            except RuntimeError:
                cpu_ok = False
            assert (model.measure(cfg) is not None) == cpu_ok == (pad < stride), cfg
            assert model.disagreements(problem, cfg) == [], cfg


class Aux(nn.Module):
    """An auxiliary head that forward uses only when asked: PyTorch counts its parameters either way."""

    def __init__(self, w: int, aux: bool) -> None:
        super().__init__()
        self.a, self.head, self.aux, self.use_aux = nn.Linear(8, w), nn.Linear(w, 4), nn.Linear(w, 3), aux

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.a(x))
        return self.head(y) + self.aux(y).sum(-1, keepdim=True) if self.use_aux else self.head(y)


def test_a_parameter_forward_does_not_use_counts_as_in_pytorch() -> None:
    space = ds.Space({"w": ds.Categorical([16, 32]), "aux": ds.Categorical([False, True])})
    model = from_torch(lambda c: Aux(c["w"], c["aux"]), lambda c: (torch.empty(4, 8),))
    problem = ds.Problem(space, model=model)
    for w in (16, 32):
        for aux in (False, True):
            cfg = {"w": w, "aux": aux}
            assert problem.costs(cfg)["params"] == sum(p.numel() for p in Aux(w, aux).parameters())
            assert model.disagreements(problem, cfg) == []
