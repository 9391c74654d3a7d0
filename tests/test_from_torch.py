"""``dnnsat.torch.from_torch``: params, FLOPs and validity of unmodified PyTorch builders, compared
with PyTorch itself (``sum(p.numel())`` over unique parameters, FlopCounterMode, raising = invalid) on
many configurations, including ones never traced and invalid ones."""

from __future__ import annotations

import itertools
import math
import random
from collections.abc import Callable
from typing import Any

import pytest

torch = pytest.importorskip("torch")
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import dnnsat as ds  # noqa: E402
from benchmarks._families import FAMILIES  # noqa: E402
from dnnsat.torch import TraceError, from_torch  # noqa: E402

Config = dict[str, Any]


def reference(build: Callable[[Config], nn.Module], inputs: Callable[[Config], Any], cfg: Config) -> Any:
    """PyTorch's (params, FLOPs) of ``cfg`` on the meta device, or None when it raises (or makes an
    empty tensor or parameter): ``TorchModel.measure``, the per-trial safety net."""
    return from_torch(build, inputs).measure(cfg)


def configs(space: ds.Space, n: int, seed: int = 0) -> list[Config]:
    """Every configuration when there are at most ``n``, else ``n`` seeded random ones (a continuous
    ``Float`` takes a random value)."""
    rng = random.Random(seed)
    names = [k for k in space if space[k].is_finite]
    grid = list(itertools.product(*(space[k].values() for k in names)))
    if len(grid) > n:
        grid = rng.sample(grid, n)
    floats = {k: space[k] for k in space if not space[k].is_finite}
    return [
        {**dict(zip(names, values)), **{k: rng.uniform(p.low, p.high) for k, p in floats.items()}}  # type: ignore[attr-defined]
        for values in grid
    ]


def assert_exact(space: ds.Space, build: Any, inputs: Any, n: int = 40, **kw: Any) -> tuple[Any, int, int]:
    """from_torch's params, FLOPs and validity equal PyTorch's on ``n`` configurations; on 4 valid ones,
    every cost (memory, latency, other ops...) equals that of a trace of the configuration alone."""
    model = from_torch(build, inputs, **kw)
    problem = ds.Problem(space, model=model)
    valid = 0
    cfgs = configs(space, n)
    for cfg in cfgs:
        ref = reference(build, inputs, cfg)
        verdict = problem.check(cfg)
        assert verdict.feasible == (ref is not None), (cfg, ref, verdict.violations)
        if ref is not None:
            valid += 1
            costs = problem.costs(cfg)
            assert (costs["params"], costs["flops"]) == ref, (cfg, costs["params"], costs["flops"], ref)
            if valid <= 4:
                point = ds.Space({k: ds.Categorical([value]) for k, value in cfg.items()})
                alone = ds.Problem(point, model=from_torch(build, inputs)).costs(cfg)
                exact = {k for k in alone if not k.startswith("memory")}
                assert {k: costs[k] for k in exact} == pytest.approx(
                    {k: alone[k] for k in exact}, rel=1e-9
                ), cfg
                # the merged network's gated branches may shift the memory model's peak a little from
                # the straight-line network's: one UNet configuration here, by 0.27 %
                assert costs["memory"] == pytest.approx(alone["memory"], rel=0.01), cfg
    assert valid > 0
    return model, valid, len(cfgs)


# -- plain PyTorch builders, written as a user would --------------------------------------------------

_ACTS = {
    "relu": nn.ReLU,
    "gelu": nn.GELU,
    "silu": nn.SiLU,
    "leaky_relu": nn.LeakyReLU,
    "elu": nn.ELU,
    "mish": nn.Mish,
    "tanh": nn.Tanh,
}


def mlp(cfg: Config) -> nn.Module:
    layers: list[nn.Module] = [nn.Flatten()]
    width = 3 * 8 * 8
    for _ in range(cfg["depth"]):
        layers += [nn.Linear(width, cfg["width"]), _ACTS[cfg["act"]](), nn.Dropout(cfg["dropout"])]
        width = cfg["width"]
    layers.append(nn.Linear(width, 10))
    return nn.Sequential(*layers)


def image_inputs(cfg: Config) -> tuple[Any, ...]:
    return (torch.empty(cfg["batch"], 3, cfg.get("res", 8), cfg.get("res", 8)),)


def test_mlp_exact() -> None:
    space = ds.Space(
        {
            "batch": ds.Categorical([1, 4, 16]),
            "width": ds.Int(8, 96, step=8),
            "depth": ds.Int(1, 4),
            "act": ds.Categorical(list(_ACTS)),
            "dropout": ds.Float(0.0, 0.5),
        }
    )
    model, valid, n = assert_exact(space, mlp, image_inputs, n=40)
    assert model.regions == 4 * len(_ACTS) and valid == n  # a region per depth and activation


class BasicBlock(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int, kernel: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, kernel, stride, padding=kernel // 2, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, kernel, padding=kernel // 2, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.down = None
        if stride != 1 or cin != cout:
            self.down = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        return F.relu(y + (x if self.down is None else self.down(x)))


class ResNet(nn.Module):
    def __init__(self, width: int, depth: int, kernel: int, classes: int = 10) -> None:
        super().__init__()
        self.stem = nn.Sequential(
            nn.Conv2d(3, width, 3, padding=1, bias=False), nn.BatchNorm2d(width), nn.ReLU()
        )
        blocks, cin = [], width
        for stage in range(2):
            cout = width * 2**stage
            for i in range(depth):
                blocks.append(BasicBlock(cin, cout, 2 if stage > 0 and i == 0 else 1, kernel))
                cin = cout
        self.blocks = nn.Sequential(*blocks)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(cin, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(torch.flatten(self.pool(self.blocks(self.stem(x))), 1))


def resnet(cfg: Config) -> nn.Module:
    return ResNet(cfg["width"], cfg["depth"], cfg["kernel"])


def test_resnet_exact() -> None:
    """Residual blocks, depth via range, a downsample chosen by comparing symbolic widths; resolutions
    where a strided kernel no longer fits are invalid, as in PyTorch."""
    space = ds.Space(
        {
            "batch": ds.Categorical([1, 2, 8]),
            "res": ds.Categorical([1, 2, 4, 16]),
            "width": ds.Int(4, 32, step=4),
            "depth": ds.Int(1, 3),
            "kernel": ds.Categorical([1, 3, 5]),
        }
    )
    model, valid, n = assert_exact(space, resnet, image_inputs, n=40)
    assert 0 < valid < n


class SE(nn.Module):
    def __init__(self, c: int, r: int) -> None:
        super().__init__()
        self.fc1, self.fc2 = nn.Conv2d(c, c // r, 1), nn.Conv2d(c // r, c, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        s = F.adaptive_avg_pool2d(x, 1)
        return x * torch.sigmoid(self.fc2(F.silu(self.fc1(s))))


class ConvNet(nn.Module):
    """Grouped, dilated and ``padding="same"`` convolutions, an SE block, a transposed convolution,
    GroupNorm, pooling (``ceil_mode`` too) and a 1-D head."""

    def __init__(self, cfg: Config) -> None:
        super().__init__()
        w, g = cfg["width"], cfg["groups"]
        self.conv = nn.Conv2d(3, w, 3, padding=cfg["dilation"], dilation=cfg["dilation"])
        self.grouped = nn.Conv2d(w, w, cfg["kernel"], padding="same", groups=g)
        self.norm = nn.GroupNorm(g, w)
        self.se = SE(w, cfg["reduction"]) if cfg["se"] else nn.Identity()
        self.pool = nn.MaxPool2d(3, 2, ceil_mode=True) if cfg["pool"] == "max" else nn.AvgPool2d(2)
        self.up = nn.ConvTranspose2d(w, w // 2, 2, stride=2)
        self.head = nn.Conv1d(w // 2, 5, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.hardswish(self.norm(self.grouped(F.relu6(self.conv(x)))))
        x = self.up(F.avg_pool2d(self.pool(self.se(x)), 3, 1, 1, ceil_mode=True))
        return self.head(x.flatten(2)).mean(dim=-1)


def test_convs_exact() -> None:
    space = ds.Space(
        {
            "batch": ds.Categorical([2]),
            "res": ds.Categorical([4, 8]),
            "width": ds.Categorical([6, 8, 12]),
            "groups": ds.Categorical([1, 2, 3, 4]),
            "kernel": ds.Categorical([2, 3]),
            "dilation": ds.Categorical([1, 2]),
            "se": ds.Categorical([False, True]),
            "reduction": ds.Categorical([2, 4, 8]),
            "pool": ds.Categorical(["max", "avg"]),
        }
    )
    model, valid, n = assert_exact(space, ConvNet, image_inputs, n=60)
    assert 0 < valid < n  # groups not dividing the width, width // 8 == 0 channels: invalid


class UNet(nn.Module):
    def __init__(self, w: int, levels: int) -> None:
        super().__init__()
        self.inc = nn.Conv2d(3, w, 3, padding=1)
        self.downs = nn.ModuleList(nn.Conv2d(w * 2**i, w * 2 ** (i + 1), 3, padding=1) for i in range(levels))
        self.ups = nn.ModuleList(
            nn.ConvTranspose2d(w * 2 ** (i + 1), w * 2**i, 2, stride=2) for i in range(levels)
        )
        self.merges = nn.ModuleList(
            nn.Conv2d(w * 2 ** (i + 1), w * 2**i, 3, padding=1) for i in range(levels)
        )
        self.out = nn.Conv2d(w, 2, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        skips = [F.relu(self.inc(x))]
        for down in self.downs:
            skips.append(F.relu(down(F.max_pool2d(skips[-1], 2))))
        y = skips.pop()
        for up, merge in zip(reversed(self.ups), reversed(self.merges)):
            y = F.relu(merge(torch.cat([up(y), skips.pop()], dim=1)))
        return self.out(y)


def test_unet_exact() -> None:
    space = ds.Space(
        {
            "batch": ds.Categorical([1, 2]),
            "res": ds.Categorical([4, 8, 12, 16]),
            "w": ds.Int(2, 16, step=2),
            "levels": ds.Int(1, 3),
        }
    )
    model, valid, n = assert_exact(space, lambda c: UNet(c["w"], c["levels"]), image_inputs, n=40)
    assert 0 < valid < n  # odd sizes after pooling do not concatenate


class Tagger(nn.Module):
    def __init__(self, cfg: Config) -> None:
        super().__init__()
        cell = {"lstm": nn.LSTM, "gru": nn.GRU}[cfg["cell"]]
        self.emb = nn.Embedding(cfg["vocab"], cfg["dim"])
        self.rnn = cell(
            cfg["dim"], cfg["hidden"], num_layers=cfg["layers"], batch_first=True, bidirectional=cfg["bidir"]
        )
        self.head = nn.Linear(cfg["hidden"] * (2 if cfg["bidir"] else 1), 7)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        out, _ = self.rnn(self.emb(ids))
        return torch.softmax(self.head(out), dim=-1)


def token_inputs(cfg: Config) -> tuple[Any, ...]:
    return (torch.randint(0, cfg["vocab"], (cfg["batch"], cfg["seq"])),)


def test_rnn_exact() -> None:
    space = ds.Space(
        {
            "batch": ds.Categorical([1, 3]),
            "seq": ds.Categorical([4, 9]),
            "vocab": ds.Categorical([50, 100]),
            "dim": ds.Int(4, 32, step=4),
            "hidden": ds.Int(8, 40, step=8),
            "layers": ds.Int(1, 3),
            "bidir": ds.Categorical([False, True]),
            "cell": ds.Categorical(["lstm", "gru"]),
        }
    )
    model, valid, n = assert_exact(space, Tagger, token_inputs, n=40)
    assert valid == n and model.regions == 3 * 2 * 2


class TiedLM(nn.Module):
    def __init__(self, cfg: Config) -> None:
        super().__init__()
        d = cfg["d_model"]
        self.emb = nn.Embedding(cfg["vocab"], d)
        layer = nn.TransformerEncoderLayer(
            d,
            cfg["heads"],
            d * cfg["mlp"],
            dropout=0.0,
            activation=cfg["act"],
            batch_first=True,
            norm_first=cfg["norm_first"],
        )
        self.encoder = nn.TransformerEncoder(layer, cfg["layers"], enable_nested_tensor=False)
        self.head = nn.Linear(d, cfg["vocab"], bias=False)
        if cfg["tied"]:
            self.head.weight = self.emb.weight

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.head(self.encoder(self.emb(ids)))


def test_transformer_tied_head_exact() -> None:
    """nn.TransformerEncoder(Layer) (MultiheadAttention), heads that must divide the width, and a head
    tied to the embedding: its weight counts once, as in ``module.parameters()``."""
    space = ds.Space(
        {
            "batch": ds.Categorical([2]),
            "seq": ds.Categorical([8, 16]),
            "vocab": ds.Categorical([64, 100]),
            "d_model": ds.Categorical([24, 32, 48]),
            "heads": ds.Categorical([2, 3, 4]),
            "mlp": ds.Categorical([2, 4]),
            "layers": ds.Int(1, 2),
            "act": ds.Categorical(["relu", "gelu"]),
            "norm_first": ds.Categorical([False, True]),
            "tied": ds.Categorical([False, True]),
        }
    )
    model, valid, n = assert_exact(space, TiedLM, token_inputs, n=50)
    assert 0 < valid < n  # d_model 32 with 3 heads is invalid
    problem = ds.Problem(space, model=from_torch(TiedLM, token_inputs))
    cfg = {
        "batch": 2,
        "seq": 8,
        "vocab": 100,
        "d_model": 32,
        "heads": 4,
        "mlp": 2,
        "layers": 1,
        "act": "relu",
        "norm_first": True,
        "tied": True,
    }
    untied = problem.costs({**cfg, "tied": False})["params"]
    assert untied - problem.costs(cfg)["params"] == 100 * 32


class ViT(nn.Module):
    """ViT with a learned CLS token expanded over the batch and concatenated, read back by index."""

    def __init__(self, cfg: Config) -> None:
        super().__init__()
        d, p = cfg["d_model"], cfg["patch"]
        n = (cfg["res"] // p) ** 2
        self.patch = nn.Conv2d(3, d, p, stride=p)
        self.cls = nn.Parameter(torch.zeros(1, 1, d))
        self.pos = nn.Parameter(torch.randn(1, n + 1, d) * 0.02)
        layer = nn.TransformerEncoderLayer(
            d, cfg["heads"], 2 * d, activation="gelu", batch_first=True, norm_first=True
        )
        self.blocks = nn.TransformerEncoder(layer, cfg["layers"], enable_nested_tensor=False)
        self.norm = nn.LayerNorm(d)
        self.head = nn.Linear(d, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.patch(x).flatten(2).transpose(1, 2)
        x = torch.cat([self.cls.expand(x.shape[0], -1, -1), x], dim=1) + self.pos
        return self.head(self.norm(self.blocks(x))[:, 0])


def test_vit_cls_token_exact() -> None:
    space = ds.Space(
        {
            "batch": ds.Categorical([1, 2]),
            "res": ds.Categorical([16, 24, 32]),
            "patch": ds.Categorical([4, 8, 16]),
            "d_model": ds.Categorical([24, 32]),
            "heads": ds.Categorical([2, 3]),
            "layers": ds.Int(1, 3),
        }
    )
    model, valid, n = assert_exact(space, ViT, image_inputs, n=40)
    assert 0 < valid < n


# -- the zoo-like families of benchmarks/_families.py, unmodified ---------------------------------------


def _family_inputs(name: str) -> Callable[[Config], tuple[Any, ...]]:
    def inputs(c: Config) -> tuple[Any, ...]:
        if name == "gqa_lm":
            return (torch.randint(0, c["vocab"], (c["batch"], c["seq"])),)
        if name in ("lstm", "gru"):
            return (torch.empty(c["batch"], c["seq"], c["features"]),)
        if name == "encoder":
            return (torch.empty(c["batch"], c["seq"], c["d_model"]),)
        return (torch.empty(c["batch"], c.get("in_ch", 3), c["res"], c["res"]),)

    return inputs


@pytest.mark.parametrize("name", ["grouped_se", "unet", "lstm", "gru", "vit", "gqa_lm", "encoder"])
def test_families_exact(name: str) -> None:
    """Families of scalar hyperparameters; the others take tuples of widths, not a dnnsat parameter."""
    family = FAMILIES[name]
    space = ds.Space({k: ds.Categorical(list(v)) for k, v in family.space.items()})
    assert_exact(space, family.torch_model, _family_inputs(name), n=30)


# -- what is refused --------------------------------------------------------------------------------


class Unsupported(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.fc = nn.Linear(4, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(x).nonzero()  # the line the error names: a shape that depends on values


def test_unsupported_op_names_op_and_line() -> None:
    space = ds.Space({"w": ds.Int(2, 8)})
    with pytest.raises(
        TraceError, match=r"nonzero: .*test_from_torch.py:\d+: return self.fc.*compute it from sizes"
    ):
        ds.Problem(space, model=from_torch(lambda c: Unsupported(c["w"]), lambda c: (torch.empty(2, 4),)))


def test_unmapped_module_runs_its_forward() -> None:
    """``nn.PReLU`` has no handler: its ``forward`` (``F.prelu`` on its weight) goes through the ATen
    fallback, its weight counted."""
    space = ds.Space({"w": ds.Int(2, 8), "n": ds.Categorical([1, 3])})

    def build(c: Config) -> nn.Module:
        return nn.Sequential(nn.Linear(4, c["w"]), nn.PReLU(c["n"]))

    _, valid, n = assert_exact(space, build, lambda c: (torch.empty(2, 4),))
    assert 0 < valid < n  # 3 PReLU weights need 3 channels


def test_region_limit() -> None:
    space = ds.Space({"a": ds.Int(1, 30), "b": ds.Int(1, 30)})

    def build(c: Config) -> nn.Module:
        return nn.Sequential(*(nn.Linear(4, 4) for _ in range(c["a"] * c["b"])))

    with pytest.raises(TraceError, match="max_regions=10"):
        ds.Problem(space, model=from_torch(build, lambda c: (torch.empty(2, 4),), max_regions=10))


def test_unused_parameter_counted() -> None:
    class Spare(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.used, self.spare = nn.Linear(4, 4), nn.Linear(4, 4)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.used(x)

    p = ds.Problem(
        ds.Space({"b": ds.Int(1, 2)}), model=from_torch(lambda c: Spare(), lambda c: ((c["b"], 4),))
    )
    assert p.costs({"b": 2})["params"] == 2 * (16 + 4)  # as sum(p.numel()) over Spare's parameters


class Flow(nn.Module):
    """Control flow a user writes: a comparison of symbolic sizes, a size through ``math.sqrt``, a
    string method on a choice, a test of an activation's width, ops whose order depends on a choice."""

    def __init__(self, cfg: Config) -> None:
        super().__init__()
        w = cfg["width"]
        self.proj = nn.Linear(16, w) if w != 16 else None
        self.fc = nn.Linear(w, int(math.sqrt(w)))
        self.mode = cfg["mode"]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.proj is not None:
            x = self.proj(x)
        x = torch.relu(torch.sigmoid(x)) if self.mode.upper() == "SWAP" else torch.sigmoid(torch.relu(x))
        if x.shape[-1] > 32:
            x = x * 0.5
        return self.fc(x)


def test_control_flow_exact() -> None:
    space = ds.Space(
        {
            "batch": ds.Categorical([1, 5]),
            "width": ds.Int(4, 64, step=4),
            "mode": ds.Categorical(["swap", "keep"]),
        }
    )
    model, valid, n = assert_exact(space, Flow, lambda c: (torch.empty(c["batch"], 16),), n=64)
    assert valid == n == 64 and model.regions == 2 * 16  # width is pinned by math.sqrt


@pytest.mark.parametrize("name", ["grouped_se", "lstm"])
def test_memory_and_latency_equal_the_dsl_twin(name: str) -> None:
    """Every cost (memory and latency included) equals the hand-written DSL twin's."""
    family = FAMILIES[name]
    space = ds.Space({k: ds.Categorical(list(v)) for k, v in family.space.items()})
    problem = ds.Problem(space, model=from_torch(family.torch_model, _family_inputs(name)))
    one = ds.Space({"_": ds.Int(1, 1)})
    for cfg in configs(space, 4, seed=1):
        twin = ds.Problem(one, model=lambda v, cfg=cfg: family.network(cfg)).costs({"_": 1})
        mine = problem.costs(cfg)
        assert {k: mine[k] for k in twin} == pytest.approx(twin, rel=1e-12), cfg  # time sums: rounding


class GPT(nn.Module):
    """Fused qkv projection split by ``chunk``, RMSNorm, causal SDPA with its own head width, a tied head."""

    def __init__(self, cfg: Config) -> None:
        super().__init__()
        d, self.h, self.hd = cfg["d_model"], cfg["heads"], cfg["head_dim"]
        self.emb = nn.Embedding(cfg["vocab"], d)
        self.norms = nn.ModuleList(nn.RMSNorm(d) for _ in range(cfg["layers"]))
        self.qkv = nn.ModuleList(nn.Linear(d, 3 * self.h * self.hd, bias=False) for _ in range(cfg["layers"]))
        self.proj = nn.ModuleList(nn.Linear(self.h * self.hd, d) for _ in range(cfg["layers"]))
        self.norm = nn.RMSNorm(d)
        self.head = nn.Linear(d, cfg["vocab"], bias=False)
        self.head.weight = self.emb.weight

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        x = self.emb(ids)
        b, s, _ = x.shape
        for norm, qkv, proj in zip(self.norms, self.qkv, self.proj):
            q, k, v = qkv(norm(x)).chunk(3, dim=-1)
            q, k, v = (t.reshape(b, s, self.h, self.hd).transpose(1, 2) for t in (q, k, v))
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + proj(y.transpose(1, 2).reshape(b, s, proj.weight.shape[1]))  # a symbolic size
        return self.head(self.norm(x))


def test_gpt_chunk_rmsnorm_exact() -> None:
    space = ds.Space(
        {
            "batch": ds.Categorical([1, 2]),
            "seq": ds.Categorical([8, 16]),
            "vocab": ds.Categorical([64]),
            "d_model": ds.Int(16, 64, step=16),
            "heads": ds.Int(1, 4),
            "head_dim": ds.Categorical([8, 12]),
            "layers": ds.Int(1, 3),
        }
    )
    model, valid, n = assert_exact(space, GPT, token_inputs, n=40)
    assert valid == n


class Decoder(nn.Module):
    """Upsampling by ``nn.Upsample`` and ``F.interpolate`` (to a size), ``split`` into sections."""

    def __init__(self, cfg: Config) -> None:
        super().__init__()
        w = cfg["width"]
        self.up = nn.Upsample(scale_factor=cfg["scale"], mode=cfg["mode"])
        self.conv = nn.Conv2d(3, 2 * w, 3, padding=1)
        self.out = nn.Conv2d(w, 1, 1)
        self.size = cfg["size"]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a, b = self.conv(self.up(x)).split([self.out.in_channels, self.out.in_channels], dim=1)
        y = F.interpolate(a * b, size=(self.size, self.size), mode="bilinear", align_corners=False)
        return self.out(y)


def test_upsample_split_exact() -> None:
    space = ds.Space(
        {
            "batch": ds.Categorical([1, 3]),
            "res": ds.Categorical([3, 5, 8]),
            "width": ds.Int(1, 8),
            "scale": ds.Categorical([1, 2, 3]),
            "mode": ds.Categorical(["nearest", "bilinear"]),
            "size": ds.Categorical([4, 9]),
        }
    )
    model, valid, n = assert_exact(space, Decoder, image_inputs, n=40)
    assert valid == n


def test_symbolic_values_record_guards() -> None:
    """Arithmetic keeps the expression; control flow, conversions and dict lookups become guards."""
    from dnnsat.torch._symbolic import Recorder, SymInt, SymStr, activate, guarded_range

    space = ds.Space({"w": ds.Int(1, 64), "act": ds.Categorical(["relu", "gelu"])})
    v = space.vars

    class Log(Recorder):
        def __init__(self) -> None:
            self.guards: list[str] = []

        def guard(self, cond: Any, outcome: bool) -> None:
            self.guards.append(f"{cond} is {outcome}")

    log = Log()
    activate(log)
    try:
        w, act = SymInt(12, v.w), SymStr("gelu", v.act)
        y = (w * 3 + 1) // 2
        assert y == 18 and str(y.expr) == "(3*w + 1) // 2"
        assert len(guarded_range(w // 4)) == 3
        assert {"relu": 0, "gelu": 1}[act] == 1
        assert divmod(w, 5) == (2, 2)
        assert act != "relu"
    finally:
        activate(None)
    assert log.guards == [  # a categorical's expression compares its choice index
        "(3*w + 1) // 2 == 18 is True",
        "w // 4 == 3 is True",
        "act == 1 is True",  # hashed for the dict lookup
        "act == 1 is True",  # compared with the key found
        "w == 12 is True",
        "act == 0 is False",
    ]


def test_to_torch_materializes_the_traced_network() -> None:
    """``to_torch`` of a from_torch Problem runs and has the same params (the tied head shares its
    weight) and FLOPs as the user's module."""
    from dnnsat.torch import example_inputs, measure, to_torch

    space = ds.Space(
        {
            "batch": ds.Categorical([2]),
            "seq": ds.Categorical([8]),
            "vocab": ds.Categorical([64]),
            "d_model": ds.Categorical([32]),
            "heads": ds.Int(1, 4),
            "head_dim": ds.Categorical([8]),
            "layers": ds.Int(1, 2),
        }
    )
    problem = ds.Problem(space, model=from_torch(GPT, token_inputs))
    for cfg in configs(space, 8):
        module = to_torch(problem, cfg, device="meta")
        got = measure(module, example_inputs(module))
        assert (got.params, got.flops) == reference(GPT, token_inputs, cfg)


class MyLinear(nn.Linear):
    """A subclass keeping ``nn.Linear.forward``: traced as a Linear."""


class Arithmetic(nn.Module):
    """Subtraction, numbers added and subtracted, negation, stack, sum, keepdim, a mean over adjacent
    dimensions, unsqueeze, squeeze (a symbolic size that may be 1)."""

    def __init__(self, d: int) -> None:
        super().__init__()
        self.fc = MyLinear(d, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = 1.0 - torch.sigmoid(self.fc(x)) * 2 + 0.5
        z = torch.stack([y, -x], dim=1).sum(dim=1) - x.mean(dim=(1, 2), keepdim=True)
        z = z.unsqueeze(1).squeeze(1) - 3
        return z.squeeze(-1).flatten(1)


def test_arithmetic_exact() -> None:
    space = ds.Space({"batch": ds.Categorical([1, 3]), "seq": ds.Int(1, 4), "d": ds.Int(1, 4)})
    model, valid, n = assert_exact(
        space, lambda c: Arithmetic(c["d"]), lambda c: (torch.empty(c["batch"], c["seq"], c["d"]),)
    )
    assert valid == n and model.regions == 2  # d == 1 squeezes


class Video(nn.Module):
    """Conv3d with a temporal kernel, stride and groups."""

    def __init__(self, cfg: Config) -> None:
        super().__init__()
        w = cfg["width"]
        self.conv = nn.Conv3d(3, w, (cfg["kt"], 3, 3), stride=(1, 2, 2), padding=(0, 1, 1))
        self.mix = nn.Conv3d(w, w, 1, groups=cfg["groups"])
        self.norm = nn.GroupNorm(cfg["groups"], w)
        self.head = nn.Linear(w, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(F.relu(self.norm(self.mix(self.conv(x)))).flatten(2).mean(2))


def test_conv3d_exact() -> None:
    space = ds.Space(
        {
            "batch": ds.Categorical([1, 2]),
            "frames": ds.Int(1, 6),
            "res": ds.Categorical([4, 7]),
            "width": ds.Categorical([4, 6, 8]),
            "kt": ds.Int(1, 4),
            "groups": ds.Categorical([1, 2, 4]),
        }
    )
    model, valid, n = assert_exact(
        space, Video, lambda c: (torch.empty(c["batch"], 3, c["frames"], c["res"], c["res"]),)
    )
    assert 0 < valid < n  # frames < kt, groups not dividing the width


def test_parameter_of_unknown_shape_is_pinned() -> None:
    """A parameter reshaped in place no longer matches the shape it was made with: the sizes it was made
    from are pinned (one region per value), and the network is exact on each."""

    class Token(nn.Module):
        def __init__(self, d: int) -> None:
            super().__init__()
            self.token = nn.Parameter(torch.zeros(d).unsqueeze_(0))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x + self.token

    space = ds.Space({"d": ds.Int(2, 8)})
    model, valid, n = assert_exact(space, lambda c: Token(c["d"]), lambda c: (torch.empty(3, c["d"]),))
    assert valid == n and model.regions == 7


def test_disagreements_are_empty_when_exact_and_name_the_cost_otherwise() -> None:
    """``TorchModel.disagreements``: the per-trial check of a configuration against the real module."""
    space = ds.Space({"w": ds.Categorical([4, 6]), "g": ds.Categorical([1, 2, 4])})

    def inputs(c: Config) -> Any:
        return (torch.empty(2, 4, 8, 8),)

    model = from_torch(lambda c: nn.Conv2d(4, c["w"], 3, groups=c["g"]), inputs)
    problem = ds.Problem(space, model=model)
    for cfg in configs(space, 10):
        assert model.disagreements(problem, cfg) == []
    assert model.measure({"w": 6, "g": 4}) is None  # 6 channels in 4 groups: PyTorch refuses
    # a module that is not the one traced (as if the trace had missed something) is caught and named
    other = from_torch(lambda c: nn.Conv2d(4, 2 * c["w"], 3, groups=c["g"]), inputs)
    assert other.disagreements(problem, {"w": 4, "g": 1}) == [
        "params: PyTorch 296, dnnsat 148",
        "flops: PyTorch 41,472, dnnsat 20,736",
    ]
    (line,) = other.disagreements(problem, {"w": 6, "g": 4})  # 12 channels in 4 groups: fine for PyTorch
    assert line.startswith("validity: PyTorch accepts the configuration, dnnsat: conv2d#")
