"""``from_torch`` on builders that run a forward while building: the dummy forward in ``__init__`` that
computes a flatten size (``self.features(torch.zeros(1, c, h, w)).numel()``). Its results are symbolic,
so the size follows the configuration: validity equals "builds and runs on the real CPU", and params
and FLOPs equal PyTorch's, on every configuration of each space (brute force), in a few regions."""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch.utils.flop_counter import FlopCounterMode  # noqa: E402

import dnnsat as ds  # noqa: E402
from dnnsat.torch import from_torch  # noqa: E402

Config = dict[str, Any]


def on_cpu(build: Callable[[Config], nn.Module], inputs: Callable[[Config], Any], cfg: Config) -> Any:
    """PyTorch's ``(params, FLOPs)`` of ``cfg``, built and run on the real CPU (random inputs), or
    ``None`` when building or the forward raises."""
    try:
        with torch.no_grad():
            module = build(cfg)
            with FlopCounterMode(display=False) as counter:
                module(torch.randn(*inputs(cfg).shape))
    except (RuntimeError, ValueError):
        return None
    return sum(p.numel() for p in module.parameters()), counter.get_total_flops()


def assert_exact_everywhere(
    values: dict[str, list[Any]], build: Callable[[Config], nn.Module], max_regions: int = 8
) -> tuple[int, int]:
    """On every configuration of the grid ``values``: dnnsat's validity, params and FLOPs are
    PyTorch's on the CPU; at most ``max_regions`` regions; some configurations valid and some not
    (where the grid has invalid ones). Returns (valid, all)."""
    space = ds.Space({k: ds.Categorical(v) for k, v in values.items()})
    model = from_torch(build, images)
    problem = ds.Problem(space, model=model)
    valid = 0
    grid = [dict(zip(values, vs)) for vs in itertools.product(*values.values())]
    for cfg in grid:
        ref = on_cpu(build, images, cfg)
        verdict = problem.check(cfg)
        assert verdict.feasible == (ref is not None), (cfg, ref, [str(v) for v in verdict.violations])
        if ref is not None:
            valid += 1
            costs = problem.costs(cfg)
            assert (costs["params"], costs["flops"]) == ref, cfg
    assert 0 < model.regions <= max_regions, model.regions
    assert valid > 0
    return valid, len(grid)


def images(cfg: Config) -> torch.Tensor:
    return torch.empty(cfg.get("batch", 2), cfg.get("c", 1), cfg["res"], cfg["res"])


def features(c: int, w: int, k: int = 5) -> nn.Sequential:
    return nn.Sequential(
        nn.Conv2d(c, w, k), nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(w, 2 * w, k), nn.ReLU(), nn.MaxPool2d(2)
    )


class LeNet(nn.Module):
    """The idiom: the flatten size from a dummy forward in ``__init__``, read in one of several ways."""

    def __init__(self, cfg: Config, read: str) -> None:
        super().__init__()
        res = cfg["res"]
        self.features = features(cfg.get("c", 1), cfg["w"], cfg.get("k", 5))
        with torch.no_grad():
            out = self.features(torch.zeros(1, cfg.get("c", 1), res, res))
            if read == "numel":
                n = out.numel()
            elif read == "view":
                n = out.view(1, -1).shape[1]
            elif read == "size":
                n = out.view(out.size(0), -1).size(1)
            elif read == "flatten":
                n = torch.flatten(out, 1).shape[1]
            elif read == "prod":
                n = math.prod(out.shape[1:])
            elif read == "data":  # the classic tutorial form
                n = out.data.view(1, -1).size(1)
            elif read == "size_numel":
                n = out.shape[1:].numel()
            elif read == "detach":
                n = out.detach().flatten(1).shape[-1]
            elif read == "numpy":  # a plain int: each size is pinned (a region per value), still exact
                n = int(np.prod(out.size()[1:]))
            else:
                n = out.shape[1] * out.shape[2] * out.shape[3]
        self.fc = nn.Linear(n, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(torch.flatten(self.features(x), 1))


LENET = {"w": [4, 6, 8, 16], "res": [8, 12, 16, 28, 32, 36], "batch": [1, 3]}


@pytest.mark.parametrize(
    "read", ["numel", "view", "size", "flatten", "prod", "shape", "data", "size_numel", "detach", "numpy"]
)
def test_lenet_flatten_size_from_a_dummy_forward(read: str) -> None:
    valid, total = assert_exact_everywhere(LENET, lambda cfg: LeNet(cfg, read), 17 if read == "numpy" else 8)
    assert (valid, total) == (32, 48)  # res 8 and 12 are too small for two 5x5 convs and two pools


def test_lenet_width_only_all_valid() -> None:
    """The issue's case: a width hyperparameter, every configuration runs in PyTorch (it said 2 of 24)."""
    valid, total = assert_exact_everywhere(
        {"w": list(range(4, 28, 4)), "res": [28, 32, 36, 40]}, lambda cfg: LeNet(cfg, "numel"), max_regions=1
    )
    assert valid == total == 24


def test_kernel_and_channels() -> None:
    """Kernel size, input channels and width decide the flatten size (and validity) together."""
    valid, total = assert_exact_everywhere(
        {"w": [3, 8], "k": [3, 5, 7], "c": [1, 3], "res": [12, 16, 20, 32]}, lambda cfg: LeNet(cfg, "view")
    )
    assert 0 < valid < total


class TwoDummies(nn.Module):
    """Two dummy forwards, the second fed by the first's result, then a branch on the size."""

    def __init__(self, cfg: Config) -> None:
        super().__init__()
        w, res = cfg["w"], cfg["res"]
        self.stem = nn.Sequential(nn.Conv2d(3, w, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2))
        self.body = nn.Sequential(nn.Conv2d(w, w, cfg["k"], stride=2), nn.ReLU(), nn.Flatten())
        with torch.no_grad():
            mid = self.stem(torch.randn(1, 3, res, res))
            n = self.body(mid).shape[1]
            m = self.stem(torch.zeros((2, 3, res, res))).size(1)  # another one, on the stem only
        self.norm = nn.BatchNorm1d(n)
        if n > 256:  # a conditional head on the computed size
            self.head: nn.Module = nn.Sequential(nn.Linear(n, 128), nn.ReLU(), nn.Linear(128, m))
        else:
            self.head = nn.Linear(n, m)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.norm(self.body(self.stem(x))))


def test_two_dummy_forwards_and_a_branch_on_the_size() -> None:
    valid, total = assert_exact_everywhere(
        {"w": [4, 8, 12], "k": [1, 3, 5], "res": [4, 8, 16, 24], "c": [3]}, TwoDummies
    )
    assert 0 < valid < total


class Tutorial(nn.Module):
    """A method run on a dummy image in ``__init__`` stores the flatten size on the module; ``forward``
    runs the same method (the image is made by ``view`` of a factory's tensor)."""

    def __init__(self, cfg: Config) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(1, cfg["w"], 5)
        self.conv2 = nn.Conv2d(cfg["w"], 2 * cfg["w"], 5)
        x = torch.randn(cfg["res"], cfg["res"]).view(-1, 1, cfg["res"], cfg["res"])
        self._to_linear = None
        self.convs(x)
        self.fc1 = nn.Linear(self._to_linear, 10)

    def convs(self, x: torch.Tensor) -> torch.Tensor:
        x = F.max_pool2d(F.relu(self.conv1(x)), (2, 2))
        x = F.max_pool2d(F.relu(self.conv2(x)), (2, 2))
        if self._to_linear is None:
            self._to_linear = x[0].shape[0] * x[0].shape[1] * x[0].shape[2]
        return x

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc1(self.convs(x).view(-1, self._to_linear))


def test_flatten_size_stored_by_a_method() -> None:
    valid, total = assert_exact_everywhere({"w": [4, 8], "res": [8, 16, 28]}, Tutorial)
    assert (valid, total) == (4, 6)


class Deep(nn.Module):
    """A depth loop and a padding choice before the dummy forward: the size depends on everything
    (traced frozen, every configuration was called valid)."""

    def __init__(self, cfg: Config) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        cin = 1
        for i in range(cfg["depth"]):
            layers += [nn.Conv2d(cin, cfg["w"] * (i + 1), cfg["k"], padding=cfg["pad"]), nn.ReLU()]
            cin = cfg["w"] * (i + 1)
        self.features = nn.Sequential(*layers, nn.AvgPool2d(2))
        n = self.features(torch.empty(1, 1, cfg["res"], cfg["res"])).numel()
        self.fc = nn.Linear(n, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.features(x).flatten(1))


def test_deep_dummy_forward_few_regions() -> None:
    values = {"w": [2, 6], "k": [1, 3, 5], "pad": [0, 2], "depth": [1, 3], "res": [6, 9, 14]}
    valid, total = assert_exact_everywhere(values, Deep)
    assert 0 < valid < total


class DataWidths(nn.Module):
    """Stage widths computed with tensors while building (RegNet's idiom): ``torch.arange``,
    ``torch.tensor`` and ``torch.linspace`` make real tensors then, so ``.tolist()``, ``int()`` and
    ``.item()`` see their values."""

    def __init__(self, cfg: Config) -> None:
        super().__init__()
        cont = torch.arange(cfg["depth"]) * cfg["slope"] + 8.0
        widths = (torch.round(cont / 4) * 4).int().tolist()
        scale = int(torch.tensor([2, cfg["slope"]]).max())
        rates = [r.item() for r in torch.linspace(0, 0.2, cfg["depth"])]  # timm's drop-path rates
        layers: list[nn.Module] = []
        cin = 3
        for w, rate in zip(widths, rates):
            layers += [nn.Conv2d(cin, w * scale, 3, padding=1), nn.ReLU(), nn.Dropout(rate)]
            cin = w * scale
        self.body = nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(cin, 10))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.body(x)


def test_tensors_computed_while_building() -> None:
    # the values handed to torch.arange / torch.tensor are pinned: a region per (depth, slope)
    values = {"depth": [1, 2, 3], "slope": [1, 3, 6], "res": [4, 8], "c": [3]}
    assert_exact_everywhere(values, DataWidths, max_regions=9)


def test_torchvision_regnet() -> None:
    """RegNet builds its widths as ``DataWidths`` does (it used to raise "Cannot copy out of meta
    tensor" on every configuration); a traced configuration against the PyTorch one on the CPU."""
    import importlib.util

    from benchmarks._torchvision import import_torchvision

    if importlib.util.find_spec("torchvision") is None:
        pytest.skip("torchvision (the dev extra) is needed")
    models = import_torchvision().models
    space = ds.Space({"res": ds.Categorical([32, 64]), "classes": ds.Categorical([10, 100])})
    build = lambda cfg: models.regnet_y_400mf(num_classes=cfg["classes"])  # noqa: E731
    inputs = lambda cfg: torch.empty(2, 3, cfg["res"], cfg["res"])  # noqa: E731
    problem = ds.Problem(space, model=from_torch(build, inputs))
    for cfg in ({"res": 32, "classes": 10}, {"res": 64, "classes": 100}):
        costs = problem.costs(cfg)
        assert (costs["params"], costs["flops"]) == on_cpu(build, inputs, cfg), cfg
