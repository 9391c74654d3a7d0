"""The models of the GPU collection (gpu_collect): zoo configurations, hand-written families, torchvision.

A :class:`Case` names a model the way the JSON file records it (``source``, ``name``, ``config``) and
builds it on a device (``make``): zoo families through :mod:`dnnsat.torch` (:func:`zoo_module`), the
plain ``torch.nn`` families of :mod:`benchmarks._families` as written (their DSL twins and
``from_torch`` are for the modelling side, which rebuilds them from the recorded config), and torchvision
classifiers with random weights. :func:`memory_cases` spans tens of MiB to tens of GiB on a GPU and
tiny sizes for a dry run; :func:`batch_ladder` gives one model at any batch size (out-of-memory verdicts).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from benchmarks import _families
from benchmarks._gpu_measure import zoo_module
from benchmarks._torchvision import import_torchvision
from dnnsat import zoo
from dnnsat.space import Int, Space

__all__ = [
    "Case",
    "batch_ladder",
    "family_case",
    "memory_cases",
    "nb201_options",
    "torchvision_case",
    "zoo_case",
]

Make = Callable[[torch.device], tuple[torch.nn.Module, tuple[Any, ...]]]


@dataclass
class Case:
    """One model at one size: ``source`` (zoo | family | torchvision), ``name``, JSON-able ``config``,
    ``tier`` (dry | small | medium | large) and ``make(device) -> (module, inputs)``."""

    source: str
    name: str
    config: dict[str, Any]
    tier: str
    make: Make = field(repr=False)
    convolutional: bool = False

    def key(self) -> dict[str, Any]:
        """How the file names this case."""
        return {"source": self.source, "name": self.name, "config": self.config, "tier": self.tier}


def zoo_case(name: str, values: dict[str, Any], tier: str, options: dict[str, Any] | None = None) -> Case:
    """A zoo family at ``values`` (batch_size may be any integer); built with ``build(**options)``."""
    model = zoo.get(name)
    space = model.space()
    if "batch_size" in space:
        space = Space({**{k: space[k] for k in space if k != "batch_size"}, "batch_size": Int(1, 1 << 16)})
    net = model.build(**(options or {}))(space.vars)

    def make(dev: torch.device) -> tuple[torch.nn.Module, tuple[Any, ...]]:
        return zoo_module(net, values, space, dev)

    conv = name in ("cnn", "resnet", "mobilenetv2", "nasbench201")
    return Case("zoo", name, {"values": values, "options": options or {}}, tier, make, conv)


def family_case(name: str, cfg: dict[str, Any], tier: str) -> Case:
    """A hand-written ``torch.nn`` family of :mod:`benchmarks._families` at ``cfg``."""
    fam = _families.FAMILIES[name]

    def make(dev: torch.device) -> tuple[torch.nn.Module, tuple[Any, ...]]:
        torch.manual_seed(0)
        inputs = _families.example_inputs(fam.network(cfg), cfg)
        return fam.torch_model(cfg).to(dev), tuple(t.to(dev) for t in inputs)

    conv = name in ("odd_cnn", "grouped_se", "dilated", "mobile", "unet", "tcn1d")
    return Case("family", name, _jsonable(cfg), tier, make, conv)


def torchvision_case(name: str, batch: int, tier: str, resolution: int = 224) -> Case:
    """``torchvision.models.get_model(name)`` with random weights, 1000 classes, ``batch`` images."""

    def make(dev: torch.device) -> tuple[torch.nn.Module, tuple[Any, ...]]:
        torch.manual_seed(0)
        module = import_torchvision().models.get_model(name, weights=None)
        return module.to(dev), (torch.randn(batch, 3, resolution, resolution, device=dev),)

    cfg = {"batch": batch, "resolution": resolution}
    return Case("torchvision", name, cfg, tier, make, convolutional=not name.startswith(("vit", "swin")))


def _jsonable(cfg: dict[str, Any]) -> dict[str, Any]:
    return {k: list(v) if isinstance(v, tuple) else v for k, v in cfg.items()}


def torchvision_available() -> bool:
    """Whether torchvision's models import here (:func:`benchmarks._torchvision.import_torchvision`: also
    where its C++ ops cannot load; the dry run records a skip)."""
    try:
        import_torchvision()
    except Exception:
        return False
    return True


# zoo configurations per tier (values inside each family's default space, batch any integer)
_ZOO: dict[str, dict[str, dict[str, Any]]] = {
    "mlp": {
        "dry": {"batch_size": 4, "depth": 1, "width": 32, "activation": "relu"},
        "small": {"batch_size": 256, "depth": 4, "width": 1024, "activation": "gelu"},
    },
    "cnn": {
        "dry": {"batch_size": 2, "resolution": 16, "kernel": 3, "padding": 1, "convs": 1,
                "w0": 16, "w1": 32, "w2": 32, "w3": 64, "fc": 256},
        "small": {"batch_size": 32, "resolution": 32, "kernel": 3, "padding": 1, "convs": 2,
                  "w0": 64, "w1": 128, "w2": 256, "w3": 512, "fc": 512},
        "large": {"batch_size": 512, "resolution": 64, "kernel": 3, "padding": 1, "convs": 3,
                  "w0": 128, "w1": 256, "w2": 512, "w3": 512, "fc": 1024},
    },
    "resnet": {
        "dry": {"batch_size": 2, "resolution": 32, "block": "basic", "groups": 1,
                **{f"w{i}": 16 for i in range(4)}, **{f"d{i}": 1 for i in range(4)}},
        "small": {"batch_size": 16, "resolution": 64, "block": "basic", "groups": 1,
                  "w0": 64, "w1": 128, "w2": 256, "w3": 512, "d0": 2, "d1": 2, "d2": 2, "d3": 2},
        "medium": {"batch_size": 64, "resolution": 224, "block": "basic", "groups": 1,
                   "w0": 64, "w1": 128, "w2": 256, "w3": 512, "d0": 2, "d1": 2, "d2": 2, "d3": 2},
        "large": {"batch_size": 128, "resolution": 224, "block": "bottleneck", "groups": 1,
                  "w0": 64, "w1": 128, "w2": 256, "w3": 512, "d0": 3, "d1": 4, "d2": 6, "d3": 3},
    },
    "mobilenetv2": {
        "dry": {"batch_size": 1, "resolution": 96, "width_mult": 0.5, "expansion": 3, "kernel": 3},
        "small": {"batch_size": 32, "resolution": 160, "width_mult": 1.0, "expansion": 6, "kernel": 3},
        "large": {"batch_size": 256, "resolution": 224, "width_mult": 1.4, "expansion": 6, "kernel": 5},
    },
    "transformer": {
        "dry": {"batch_size": 1, "seq_len": 64, "layers": 1, "d_model": 128, "heads": 2, "ffn_mult": 2},
        "small": {"batch_size": 16, "seq_len": 256, "layers": 4, "d_model": 512, "heads": 8, "ffn_mult": 4},
        "large": {"batch_size": 32, "seq_len": 512, "layers": 12, "d_model": 1024, "heads": 16,
                  "ffn_mult": 4},
    },
    "gpt": {
        "dry": {"batch_size": 1, "seq_len": 128, "layers": 1, "d_model": 128, "heads": 2, "kv_heads": 1,
                "ffn_mult": 2, "vocab": 32000},
        "small": {"batch_size": 4, "seq_len": 512, "layers": 4, "d_model": 512, "heads": 8, "kv_heads": 2,
                  "ffn_mult": 4, "vocab": 32000},
        "medium": {"batch_size": 8, "seq_len": 1024, "layers": 12, "d_model": 768, "heads": 12,
                   "kv_heads": 12, "ffn_mult": 4, "vocab": 50304},
        "large": {"batch_size": 16, "seq_len": 1024, "layers": 12, "d_model": 1024, "heads": 16,
                  "kv_heads": 4, "ffn_mult": 4, "vocab": 50304},
    },
}  # fmt: skip
_NB201_ARCH = (
    "|nor_conv_3x3~0|+|nor_conv_3x3~0|nor_conv_3x3~1|+|skip_connect~0|nor_conv_3x3~1|nor_conv_3x3~2|"
)
_NB201_BATCH = {"dry": 2, "small": 64, "large": 1024}
_TORCHVISION: dict[str, list[tuple[str, int]]] = {
    "small": [("resnet18", 32), ("mobilenet_v3_large", 32), ("efficientnet_b0", 32), ("vit_b_16", 8)],
    "medium": [("resnet50", 64), ("convnext_tiny", 64), ("densenet121", 64), ("vit_b_16", 64)],
    "large": [("resnet50", 256), ("efficientnet_b0", 256), ("vit_b_16", 256)],
}
_FAMILY_BATCH = {"small": None, "large": 256}  # None: the sampled batch (1-8)


def nb201_config(arch: str) -> dict[str, str]:
    """The zoo's NAS-Bench-201 config of an official architecture string."""
    return zoo.config_from_arch_str(arch)


def nb201_options(batch: int, dry: bool = False) -> dict[str, Any]:
    """Build options of the NAS-Bench-201 network (CIFAR-10, C=16, N=5; a dry run: C=4, N=1)."""
    return {"batch_size": batch, **({"C": 4, "N": 1} if dry else {})}


def memory_cases(tiers: tuple[str, ...], seed: int = 0, with_torchvision: bool = True) -> list[Case]:
    """Every case of ``tiers`` (in that order; "dry" alone: tiny models of every source for a CPU run)."""
    rng = random.Random(seed)
    cases: list[Case] = []
    for tier in tiers:
        for name, per_tier in _ZOO.items():
            if tier in per_tier:
                cases.append(zoo_case(name, per_tier[tier], tier))
        if tier in _NB201_BATCH:
            options = nb201_options(_NB201_BATCH[tier], tier == "dry")
            cases.append(zoo_case("nasbench201", nb201_config(_NB201_ARCH), tier, options))
        if tier in ("dry", *_FAMILY_BATCH):
            for fam in _families.FAMILIES.values():
                cfg = fam.sample(1, rng)[0]
                batch = _FAMILY_BATCH.get(tier)
                cases.append(family_case(fam.name, cfg if batch is None else {**cfg, "batch": batch}, tier))
        if with_torchvision:
            tv = [("resnet18", 2), ("mobilenet_v3_large", 2)] if tier == "dry" else _TORCHVISION.get(tier, [])
            cases += [torchvision_case(n, b, tier, 64 if tier == "dry" else 224) for n, b in tv]
    return cases


#: models of the out-of-memory ladders: (case builder at a batch size, description)
LADDERS: dict[str, Callable[[int], Case]] = {
    "gpt_medium": lambda b: zoo_case("gpt", {**_ZOO["gpt"]["medium"], "batch_size": b}, "ladder"),
    "resnet_medium": lambda b: zoo_case("resnet", {**_ZOO["resnet"]["medium"], "batch_size": b}, "ladder"),
    "cnn_large": lambda b: zoo_case("cnn", {**_ZOO["cnn"]["large"], "batch_size": b}, "ladder"),
}
_DRY_LADDERS: dict[str, Callable[[int], Case]] = {
    "mlp_dry": lambda b: zoo_case("mlp", {**_ZOO["mlp"]["dry"], "batch_size": b}, "ladder"),
}


def batch_ladder(dry: bool) -> dict[str, Callable[[int], Case]]:
    """Models that take any batch size, for placing configurations just under and over a capacity."""
    return _DRY_LADDERS if dry else LADDERS


def ladder_batches(points: list[tuple[int, int]], target: float, fractions: tuple[float, ...]) -> list[int]:
    """Batch sizes whose reserved peak is ``fraction * target`` bytes, on the line through two measured
    ``(batch, peak)`` points (distinct, at least 1, sorted)."""
    (b0, p0), (b1, p1) = points[0], points[-1]
    slope = (p1 - p0) / (b1 - b0) if b1 != b0 else 0.0
    if slope <= 0:
        return []
    return sorted({max(1, round(b0 + (f * target - p0) / slope)) for f in fractions})
