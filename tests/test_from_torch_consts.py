"""``from_torch`` on tensors a forward makes without its inputs or parameters (``constant`` nodes): random
tensors (stochastic depth in training), ``arange`` positions, index buffers, grids, ``zeros_like`` /
``new_zeros`` / ``full``, dtype conversions, and a dict as the output; then Hugging Face models built
from their configs. Every configuration of each space is compared with PyTorch (params, FLOPs, validity:
:func:`tests.test_from_torch.assert_exact`)."""

from __future__ import annotations

import importlib.util
from typing import Any

import pytest

torch = pytest.importorskip("torch")
import torch.nn as nn  # noqa: E402

import dnnsat as ds  # noqa: E402
from benchmarks._torchvision import import_torchvision  # noqa: E402
from dnnsat.cost import Budget, memory_expressions  # noqa: E402
from dnnsat.expr import compile_scalar  # noqa: E402
from dnnsat.torch import from_torch, peak_memory  # noqa: E402
from tests.test_from_torch import assert_exact, configs  # noqa: E402

Config = dict[str, Any]


class StochasticDepth(nn.Module):
    """torchvision's ``stochastic_depth`` (``torchvision/ops/stochastic_depth.py``) as it is written:
    a Bernoulli noise tensor per row (or one for the batch), divided by the survival rate in place."""

    def __init__(self, width: int, p: float, mode: str) -> None:
        super().__init__()
        self.fc = nn.Linear(width, width)
        self.head = nn.Linear(width, 3)
        self.p, self.mode = p, mode

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.fc(x)
        size = [y.shape[0]] + [1] * (y.ndim - 1) if self.mode == "row" else [1] * y.ndim
        noise = torch.empty(size, dtype=y.dtype, device=y.device)
        noise = noise.bernoulli_(1.0 - self.p)
        if 1.0 - self.p > 0.0:
            noise.div_(1.0 - self.p)
        return self.head(x + y * noise)


def test_stochastic_depth_in_training_exact() -> None:
    space = ds.Space(
        {"w": ds.Categorical([2, 5]), "b": ds.Categorical([1, 3]), "p": ds.Categorical([0.1, 0.5]),
         "mode": ds.Categorical(["row", "batch"])}
    )  # fmt: skip

    def build(c: Config) -> nn.Module:
        return StochasticDepth(c["w"], c["p"], c["mode"]).train()

    _, valid, n = assert_exact(space, build, lambda c: torch.empty(c["b"], 7, c["w"]), n=64)
    assert valid == n == 16


def test_random_noise_is_an_allocated_constant() -> None:
    """The noise tensor is a ``constant`` node of the row shape (batch, 1, 1): no params, no FLOPs."""
    space = ds.Space({"b": ds.Categorical([2, 4])})
    net = from_torch(lambda c: StochasticDepth(4, 0.2, "row").train(), lambda c: torch.empty(c["b"], 7, 4))
    consts = [n for n in net.network(space).nodes if n.op == "constant"]
    assert len(consts) == 1 and not consts[0].attrs["buffer"]
    assert [str(d) for d in consts[0].attrs["shape"]] == ["b", "1", "1"]


class Positions(nn.Module):
    """Token and learned position embeddings, positions made by ``torch.arange(x.shape[1])``."""

    def __init__(self, vocab: int, dim: int, max_len: int) -> None:
        super().__init__()
        self.tok = nn.Embedding(vocab, dim)
        self.pos = nn.Embedding(max_len, dim)
        self.head = nn.Linear(dim, 2)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(ids.shape[1], device=ids.device)
        return self.head(self.tok(ids) + self.pos(positions))


def test_arange_positions_exact() -> None:
    space = ds.Space(
        {"d": ds.Categorical([4, 8]), "s": ds.Categorical([1, 3, 6]), "b": ds.Categorical([1, 2])}
    )
    model, valid, n = assert_exact(
        space,
        lambda c: Positions(11, c["d"], 8),
        lambda c: torch.zeros(c["b"], c["s"], dtype=torch.long),
        n=64,
    )
    assert valid == n == 12
    assert model.regions == 1  # the sequence length stays symbolic: one trace


class RelativeBias(nn.Module):
    """Swin's relative position bias: a parameter table indexed by a registered constant index buffer
    (``table[index.view(-1)]``), added to attention scores of a window of ``window`` tokens."""

    def __init__(self, window: int, heads: int, dim: int) -> None:
        super().__init__()
        self.heads, self.window = heads, window
        self.table = nn.Parameter(torch.zeros((2 * window - 1) ** 2, heads))
        coords = torch.stack(torch.meshgrid(torch.arange(window), torch.arange(window), indexing="ij"))
        flat = torch.flatten(coords, 1)
        rel = (flat[:, :, None] - flat[:, None, :]).permute(1, 2, 0).contiguous()
        rel[:, :, 0] += window - 1
        rel[:, :, 1] += window - 1
        rel[:, :, 0] *= 2 * window - 1
        self.register_buffer("index", rel.sum(-1).flatten())
        self.qkv = nn.Linear(dim, 3 * dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, n, d = x.shape
        q, k, v = self.qkv(x).reshape(b, n, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        bias = self.table[self.index.view(-1)]
        bias = bias.view(self.window * self.window, self.window * self.window, -1).permute(2, 0, 1)
        att = torch.softmax(q @ k.transpose(-2, -1) + bias.unsqueeze(0), dim=-1)
        return (att @ v).transpose(1, 2).reshape(b, n, d)


def test_relative_position_table_indexed_by_a_buffer_exact() -> None:
    space = ds.Space(
        {"win": ds.Categorical([2, 3]), "heads": ds.Categorical([1, 2]), "b": ds.Categorical([1, 2]),
         "n": ds.Categorical([4, 9])}
    )  # fmt: skip

    def inputs(c: Config) -> Any:
        return torch.empty(c["b"], c["n"], 4)

    _, valid, n = assert_exact(space, lambda c: RelativeBias(c["win"], c["heads"], 4), inputs, n=64)
    assert 0 < valid < n == 16  # the window's tokens must be the sequence: win 2 with 4, win 3 with 9


class Grid(nn.Module):
    """A coordinate grid made in the forward from the input's symbolic size (``meshgrid`` of ``arange``)
    and a constant grid buffer made at build time, both concatenated to the channels."""

    def __init__(self, width: int) -> None:
        super().__init__()
        ys, xs = torch.meshgrid(torch.arange(4.0), torch.arange(4.0), indexing="ij")
        self.register_buffer("fixed", (ys * 4 + xs)[None, None])
        self.conv = nn.Conv2d(5, width, 3, padding=1)
        self.pool = nn.AdaptiveAvgPool2d(4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, _, h, w = x.shape
        ys, xs = torch.meshgrid(
            torch.arange(h, device=x.device), torch.arange(w, device=x.device), indexing="ij"
        )
        grid = torch.stack([ys, xs]).float().unsqueeze(0).expand(b, -1, -1, -1)
        y = self.pool(self.conv(torch.cat([x, grid], dim=1)))
        return y + self.fixed


def test_grids_exact() -> None:
    space = ds.Space(
        {"w": ds.Categorical([2, 3]), "res": ds.Categorical([4, 7]), "b": ds.Categorical([1, 2])}
    )
    model, valid, n = assert_exact(
        space, lambda c: Grid(c["w"]), lambda c: torch.empty(c["b"], 3, c["res"], c["res"]), n=64
    )
    assert valid == n == 8
    net = model.network(space)
    buffers = [n for n in net.nodes if n.op == "constant" and n.attrs["buffer"]]
    assert len(buffers) == 1 and "fixed" in buffers[0].label


class Factories(nn.Module):
    """``zeros_like``, ``new_zeros``, ``new_ones``, ``torch.full`` and ``ones_like`` in the forward."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.fc = nn.Linear(width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.fc(x) + torch.zeros_like(x)
        b, s, w = y.shape
        y = y * x.new_ones(b, s, 1) + x.new_zeros((1, s, w))
        return y + torch.full((b, 1, w), 0.5, device=x.device) + torch.ones_like(y)


def test_factories_exact() -> None:
    space = ds.Space({"w": ds.Categorical([2, 6]), "s": ds.Categorical([1, 5]), "b": ds.Categorical([1, 3])})
    _, valid, n = assert_exact(
        space, lambda c: Factories(c["w"]), lambda c: torch.empty(c["b"], c["s"], c["w"])
    )
    assert valid == n == 8


class Masked(nn.Module):
    """Scores cast to half precision and back (``.half()``, ``.float()``), a causal boolean mask
    filled in (``masked_fill``) and multiplied in, and a half-precision bias made in the forward
    converted with ``.type_as``."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.qk = nn.Linear(width, 2 * width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        s = x.shape[1]
        q, k = self.qk(x).chunk(2, dim=-1)
        scores = (q @ k.transpose(1, 2)).half().float()
        causal = torch.ones(s, s, dtype=torch.bool, device=x.device).tril()
        bias = torch.zeros(s, s, dtype=torch.float16, device=x.device).type_as(q)
        return scores.masked_fill(~causal, -1e4) * causal + bias.to(torch.float32)


def test_dtype_conversions_exact() -> None:
    space = ds.Space(
        {"w": ds.Categorical([2, 4]), "s": ds.Categorical([1, 3, 5]), "b": ds.Categorical([1, 2])}
    )
    model, valid, n = assert_exact(
        space, lambda c: Masked(c["w"]), lambda c: torch.empty(c["b"], c["s"], c["w"])
    )
    assert valid == n == 12
    net = model.network(space)
    assert [n.attrs["dtype"] for n in net.nodes if n.op == "cast"] == ["float32"] * 3  # half, float, type_as
    assert sorted(n.attrs["dtype"] for n in net.nodes if n.op == "constant") == ["bool", "bool", "float32"]
    assert [n.op for n in net.nodes].count("masked_fill") == 1


class Offsets(nn.Module):
    """``x + torch.arange(n)``: an int64 constant, the (float32) sum."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + torch.arange(x.shape[1], device=x.device)


@pytest.mark.parametrize("n", [1 << 14, 1 << 16])
def test_int64_constant_memory_against_pytorch(n: int) -> None:
    """An int64 constant takes 8 bytes per element: the eval peak (input, the ``arange``, the sum)
    equals PyTorch's on this CPU."""
    space = ds.Space({"n": ds.Categorical([n])})
    net = from_torch(lambda c: Offsets(), lambda c: torch.empty(1, c["n"])).network(space)
    assert [t.dtype for t in net.tensors] == ["float32", "int64", "float32"]
    estimate = compile_scalar([memory_expressions(net, Budget(mode="inference"))["memory"]])({"n": n})[0]
    real = peak_memory(Offsets(), [torch.empty(1, n)], train=False).peak
    assert -0.03 <= (estimate - real) / real <= 0.08, (estimate, real)


class Heads(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.body = nn.Linear(4, width)
        self.cls = nn.Linear(width, 3)

    def forward(self, x: torch.Tensor) -> dict[str, Any]:
        h = torch.relu(self.body(x))
        return {"logits": self.cls(h), "hidden": h, "extra": None}


def test_dict_output_exact() -> None:
    space = ds.Space({"w": ds.Categorical([2, 5]), "b": ds.Categorical([1, 4])})
    model, valid, _ = assert_exact(space, lambda c: Heads(c["w"]), lambda c: torch.empty(c["b"], 4))
    assert valid == 4
    net = model.network(space)
    assert [str(d) for d in net.outputs[0].shape] == ["b", "3"]  # the first tensor: "logits"


def test_op_without_a_shape_rule_pins_the_sizes() -> None:
    """A tensor computed from symbolic sizes by an op without a shape rule here (``torch.flip`` of an
    ``arange``) is exact by pinning those sizes: one region per sequence length."""

    class Rolled(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x + torch.flip(torch.arange(x.shape[1], device=x.device), (0,)).float()

    space = ds.Space({"s": ds.Categorical([2, 3, 5]), "b": ds.Categorical([1, 2])})
    model, valid, n = assert_exact(space, lambda c: Rolled(), lambda c: torch.empty(c["b"], c["s"]))
    assert valid == n == 6 and model.regions == 3


class WindowPad(nn.Module):
    """Swin's and GPT-2's idioms: a channels-last tensor zero-padded to a multiple of the window
    (``F.pad`` of the last three dimensions), patch merging by strided slices (``x[:, 0::2, 0::2]``),
    ``F.linear`` with a Linear's own weights, and a ``Conv1D`` (``torch.addmm(bias, x.view(-1, d),
    weight)``)."""

    def __init__(self, width: int, window: int) -> None:
        super().__init__()
        self.window = window
        self.qkv = nn.Linear(2 * width, 3 * width)
        self.weight = nn.Parameter(torch.zeros(3 * width, width))  # (in, out), as Conv1D
        self.bias = nn.Parameter(torch.zeros(width))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        _, h, w, _ = x.shape
        pad_r, pad_b = (
            (self.window - w % self.window) % self.window,
            (self.window - h % self.window) % self.window,
        )
        y = torch.nn.functional.pad(x, (0, 0, 0, pad_r, 0, pad_b))
        y = torch.cat([y[:, 0::2, 0::2], y[:, 1::2, 0::2]], -1)[
            :, :, -2:
        ]  # patch merging, the last 2 columns
        y = torch.nn.functional.linear(y, self.qkv.weight, self.qkv.bias)
        return torch.addmm(self.bias, y.view(-1, y.size(-1)), self.weight)


def test_channels_last_pad_linear_and_addmm_exact() -> None:
    space = ds.Space(
        {"w": ds.Categorical([2, 4]), "win": ds.Categorical([2, 3]), "res": ds.Categorical([3, 4]),
         "b": ds.Categorical([1, 2])}
    )  # fmt: skip

    def inputs(c: Config) -> Any:
        return torch.empty(c["b"], c["res"], c["res"], c["w"])

    _, valid, n = assert_exact(space, lambda c: WindowPad(c["w"], c["win"]), inputs, n=64)
    assert 0 < valid < n == 16  # a window of 3 pads to an odd height: the strided halves differ


# -- Hugging Face models built from their configs -----------------------------------------------------

if importlib.util.find_spec("torchvision") is not None:
    import_torchvision()  # transformers imports torchvision
transformers = pytest.importorskip("transformers")

_HF_SPACE = ds.Space(
    {"layers": ds.Categorical([1, 2]), "hidden": ds.Categorical([16, 32]), "heads": ds.Categorical([2, 4]),
     "ffn": ds.Categorical([24, 64]), "batch": ds.Categorical([1, 2]), "seq": ds.Categorical([3, 8])}
)  # fmt: skip


def _hf_build(family: str, c: Config) -> nn.Module:
    """A Hugging Face model of ``family`` from its config (no weights), in training mode."""
    t = transformers
    layers, hidden, heads, ffn = c["layers"], c["hidden"], c["heads"], c["ffn"]
    if family == "bert":
        cfg: Any = t.BertConfig(num_hidden_layers=layers, hidden_size=hidden, num_attention_heads=heads,
                                intermediate_size=ffn, vocab_size=50, max_position_embeddings=16)  # fmt: skip
        return t.BertModel(cfg).train()
    if family == "gpt2":
        cfg = t.GPT2Config(n_layer=layers, n_embd=hidden, n_head=heads, n_inner=ffn, vocab_size=50,
                           n_positions=16)  # fmt: skip
        return t.GPT2Model(cfg).train()
    if family == "llama":
        cfg = t.LlamaConfig(num_hidden_layers=layers, hidden_size=hidden, num_attention_heads=heads,
                            num_key_value_heads=heads, intermediate_size=ffn, vocab_size=50,
                            max_position_embeddings=16)  # fmt: skip
        return t.LlamaModel(cfg).train()
    if family == "t5":
        cfg = t.T5Config(num_layers=layers, d_model=hidden, num_heads=heads, d_kv=hidden // heads, d_ff=ffn,
                         vocab_size=50)  # fmt: skip
        return t.T5EncoderModel(cfg).train()
    cfg = t.ViTConfig(num_hidden_layers=layers, hidden_size=hidden, num_attention_heads=heads,
                      intermediate_size=ffn, image_size=16, patch_size=4)  # fmt: skip
    return t.ViTModel(cfg).train()


def _hf_inputs(family: str, c: Config) -> Any:
    if family == "vit":
        return torch.empty(c["batch"], 3, 16, 16)
    return torch.zeros(c["batch"], c["seq"], dtype=torch.long)  # int64 token ids


@pytest.mark.parametrize("family", ["bert", "vit", "gpt2", "llama", "t5"])
def test_hugging_face_family_exact(family: str) -> None:
    # the class is looked up before the trace: transformers imports its model modules lazily
    getattr(transformers, {"bert": "BertModel", "gpt2": "GPT2Model", "llama": "LlamaModel",
                           "t5": "T5EncoderModel", "vit": "ViTModel"}[family])  # fmt: skip

    def build(c: Config) -> nn.Module:
        return _hf_build(family, c)

    def inputs(c: Config) -> Any:
        return _hf_inputs(family, c)

    model = from_torch(build, inputs)
    problem = ds.Problem(_HF_SPACE, model=model)
    for cfg in configs(_HF_SPACE, 6):
        assert model.disagreements(problem, cfg) == [], cfg
