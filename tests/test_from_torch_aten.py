"""``from_torch``'s ATen fallback (``dnnsat/torch/_aten.py``): functions, methods and ``torch.nn``
modules without a handler of their own, traced through PyTorch's symbolic shapes. Each model uses one
idiom; on every configuration of a small space (odd sizes, sizes of 1 included) params, FLOPs and
validity equal PyTorch's (``TorchModel.measure``: the module built and run on the meta device)."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

import pytest

torch = pytest.importorskip("torch")
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import dnnsat as ds  # noqa: E402
from dnnsat.torch import TraceError, from_torch  # noqa: E402

Config = dict[str, Any]
SPACE = ds.Space(
    {"b": ds.Categorical([1, 2]), "c": ds.Categorical([1, 3, 4]), "h": ds.Categorical([1, 2, 5])}
)


class Idiom(nn.Module):
    """A channels-first block ``x -> forward(self, x)`` holding ``c``-channel parameters and buffers for
    the idioms (counted whether used or not, as PyTorch does), and a linear head over the channels."""

    def __init__(self, c: int, forward: Callable[..., Any], train: bool = False) -> None:
        super().__init__()
        self.c = c
        self.fn = forward
        self.weight = nn.Parameter(torch.empty(c))
        self.bias = nn.Parameter(torch.empty(c))
        self.conv_weight = nn.Parameter(torch.empty(c, c, 3, 3))
        self.register_buffer("running_mean", torch.zeros(c))
        self.register_buffer("running_var", torch.ones(c))
        self.proj = nn.Linear(c, c)
        self.head = nn.Linear(c, 2)
        self.train(train)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.fn(self, x)
        return self.head(y.flatten(2).mean(-1))


def _cat(t: Any, dim: int = 3) -> torch.Tensor:
    return torch.cat(list(t), dim=dim)


IDIOMS: dict[str, Callable[[Any, torch.Tensor], torch.Tensor]] = {
    "layer_norm": lambda m, x: F.layer_norm(x, (x.shape[-1],)),
    "layer_norm_affine": lambda m, x: F.layer_norm(x.permute(0, 2, 3, 1), (m.c,), m.weight, m.bias).permute(
        0, 3, 1, 2
    ),
    "group_norm": lambda m, x: F.group_norm(x, 1, m.weight, m.bias),
    "batch_norm": lambda m, x: F.batch_norm(x, m.running_mean, m.running_var, m.weight, m.bias, m.training),
    "conv2d": lambda m, x: F.conv2d(x, m.conv_weight, padding=1),
    "conv2d_valid": lambda m, x: F.conv2d(x, m.conv_weight, stride=2),
    "pad_constant": lambda m, x: F.pad(x, (1, 2, 0, 1), value=0.5),
    "pad_reflect": lambda m, x: F.pad(x, (1, 1, 1, 1), mode="reflect"),
    "pad_replicate": lambda m, x: F.pad(x, (2, 0, 1, 0), mode="replicate"),
    "hardsigmoid_module": lambda m, x: nn.Hardsigmoid()(x),
    "hardsigmoid": lambda m, x: F.hardsigmoid(x) * x,
    "reshape_as": lambda m, x: x.flatten(1).reshape_as(x),
    "view_as": lambda m, x: x.flatten(2).view_as(x) + x,
    "unbind": lambda m, x: _cat(x.unbind(2), 2).unsqueeze(-1),
    "chunk": lambda m, x: _cat(x.chunk(2, dim=3)),
    "split_size": lambda m, x: _cat(x.split(2, dim=3)),
    "split_list": lambda m, x: _cat(x.split([1, x.shape[3] - 1], dim=3)),
    "einsum": lambda m, x: torch.einsum("bchw,bdhw->bcd", x, x).unsqueeze(-1),
    "einsum_one_sided": lambda m, x: torch.einsum("bchw,bdhw->bc", x, x)[:, :, None, None],  # d: one side
    "einsum_weight": lambda m, x: torch.einsum("bchw,dc->bdhw", x, m.conv_weight[:, :, 0, 0]),
    "interpolate_scale": lambda m, x: F.interpolate(x, scale_factor=1.5),
    "interpolate_size": lambda m, x: F.interpolate(x, size=(3, x.shape[-1] + 2), mode="bilinear"),
    "add_": lambda m, x: x.clone().add_(x),
    "relu_": lambda m, x: (x * 2).relu_(),
    "iadd": lambda m, x: _iadd(x),
    "slice": lambda m, x: x[:, :, 1:-1],
    "slice_step": lambda m, x: x[..., ::2],
    "slice_symbolic": lambda m, x: x[:, :, : x.shape[2] - 1 + m.c // 3],
    "where": lambda m, x: torch.where(x > 0, x, x * 0.5),
    "clamp_pow_sqrt": lambda m, x: x.clamp(min=0.1).pow(2).sqrt() + torch.rsqrt(x.abs() + 1),
    "mean_dims": lambda m, x: x - x.mean(dim=(0, 2), keepdim=True),
    "softmax_dtype": lambda m, x: F.softmax(x, dim=1, dtype=torch.float32),
    "masked_fill": lambda m, x: x.masked_fill(x < 0, 0.0),
    "var_mean": lambda m, x: _normalized(x),
    "gather": lambda m, x: x.gather(1, x.argmax(1, keepdim=True)),
    # nn.Linear's handler refuses a constant input: the module's forward (F.linear) is traced instead
    "linear_on_constant": lambda m, x: (
        x + m.proj(torch.ones(x.shape[0], m.c, device=x.device)).view(x.shape[0], m.c, 1, 1)
    ),
    # the handler refuses attention dropout: PyTorch's own kernel and FLOP formula
    "sdpa_dropout": lambda m, x: F.scaled_dot_product_attention(*[x.flatten(2)] * 3, dropout_p=0.5).view_as(
        x
    ),
    "dtypes": lambda m, x: _typed(x),
    "transpose_property": lambda m, x: (x.mT @ x).mT[..., : x.shape[-1]].unsqueeze(1).flatten(1, 2),
    "max_dim": lambda m, x: x.max(dim=1, keepdim=True).values * x,  # a named tuple of two outputs
    "numel": lambda m, x: x * (1.0 / x.numel()) + x.new_zeros(x.shape[0], 1, 1, 1),
    "repeated": lambda m, x: _block(x, x) + _block(x * 2, x),  # the second block's calls are replayed
}


def _block(y: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """Fallback calls of several kinds: a composite function, an in-place update of a copy, a tuple of
    outputs, a named tuple, the same tensor twice."""
    y = F.normalize(y, dim=1).clone()
    y.add_(x)
    var, mean = torch.var_mean(y, dim=(2, 3), keepdim=True)
    top = y.max(dim=1, keepdim=True).values
    return (y - mean) / (var + 1e-5).sqrt() + top + torch.atan2(y, y)


def _typed(x: torch.Tensor) -> torch.Tensor:
    """Results keep their dtype for the model's code (a comparison is boolean, an argmax int64)."""
    mask, index = x > 0, x.argmax(1, keepdim=True)
    assert (mask.dtype, index.dtype) == (torch.bool, torch.int64), (mask.dtype, index.dtype)
    return x * mask.to(x.dtype)


def _normalized(x: torch.Tensor) -> torch.Tensor:
    var, mean = torch.var_mean(x, dim=(2, 3), keepdim=True)  # a tuple of two outputs
    return (x - mean) / (var + 1e-5).sqrt()


def _iadd(x: torch.Tensor) -> torch.Tensor:
    y = x * 2
    y += x
    return y


def _inputs(c: Config) -> tuple[Any, ...]:
    return (torch.empty(c["b"], c["c"], c["h"], c["h"] + 2),)


def assert_agrees(space: ds.Space, build: Callable[[Config], nn.Module], inputs: Any) -> tuple[int, int]:
    """Params, FLOPs and validity equal PyTorch's on every configuration of ``space``; (valid, all)."""
    model = from_torch(build, inputs)
    problem = ds.Problem(space, model=model)
    names = list(space)
    valid = total = 0
    for values in itertools.product(*(space[k].values() for k in names)):
        cfg = dict(zip(names, values))
        ref = model.measure(cfg)
        verdict = problem.check(cfg)
        assert verdict.feasible == (ref is not None), (cfg, ref, verdict.violations)
        if ref is not None:
            costs = problem.costs(cfg)
            assert (costs["params"], costs["flops"]) == ref, (cfg, costs["params"], costs["flops"], ref)
            valid += 1
        total += 1
    return valid, total


@pytest.mark.parametrize("name", sorted(IDIOMS))
def test_idiom_exact(name: str) -> None:
    valid, _ = assert_agrees(SPACE, lambda c: Idiom(c["c"], IDIOMS[name]), _inputs)
    assert valid > 0


@pytest.mark.parametrize("train", [False, True])
def test_batch_norm_train_and_eval(train: bool) -> None:
    valid, total = assert_agrees(SPACE, lambda c: Idiom(c["c"], IDIOMS["batch_norm"], train), _inputs)
    assert valid == (
        total if not train else sum(1 for b in (1, 2) for h in (1, 2, 5) if b * h * (h + 2) > 1) * 3
    )


def test_invalid_configurations_follow_the_kernels() -> None:
    """A stride-2 convolution without padding on a 1-row input and reflect padding of 1 on 1 row raise
    in PyTorch: those configurations are invalid, the others valid."""
    for name in ("conv2d_valid", "pad_reflect"):
        valid, total = assert_agrees(SPACE, lambda c, n=name: Idiom(c["c"], IDIOMS[n]), _inputs)
        assert 0 < valid < total, name


def test_untraceable_value_names_op_and_line() -> None:
    """An output whose size depends on tensor values (``nonzero``) is refused with the op, the line and
    what to do."""

    def build(c: Config) -> nn.Module:
        return Idiom(c["c"], lambda m, x: x[x > 0].reshape(1, 1, -1, 1))

    with pytest.raises(TraceError, match=r"(?s)test_from_torch_aten.py:\d+.*compute it from sizes"):
        ds.Problem(SPACE, model=from_torch(build, _inputs)).check({"b": 1, "c": 1, "h": 1})


MEMORY_IDIOMS = ["layer_norm_affine", "hardsigmoid_module", "unbind", "slice_step", "pad_reflect", "conv2d",
                 "add_", "batch_norm", "interpolate_scale", "masked_fill", "chunk", "repeated"]  # fmt: skip


@pytest.mark.parametrize("train", [False, True])
@pytest.mark.parametrize("name", MEMORY_IDIOMS)
def test_memory_is_not_under(name: str, train: bool) -> None:
    """The fallback's memory rule is conservative: the traced network's peak is at least PyTorch's on
    this CPU (3 % allocator tolerance), and its materialized form runs and gives the real output shape."""
    from dnnsat.cost import Budget, memory_expressions
    from dnnsat.expr import compile_scalar
    from dnnsat.torch import GraphModule, concretize, example_inputs, peak_memory

    torch.set_num_threads(1)
    cfg = {"b": 4, "c": 16, "h": 31}
    space = ds.Space({k: ds.Categorical([v]) for k, v in cfg.items()})
    net = from_torch(lambda c: Idiom(c["c"], IDIOMS[name], train), _inputs).network(space)
    budget = Budget(mode="train" if train else "inference", optimizer="adam" if train else None)
    estimate = int(compile_scalar([memory_expressions(net, budget, None)["memory"]])(cfg)[0])
    torch.manual_seed(0)
    module = Idiom(16, IDIOMS[name], train)
    for p in module.parameters():
        nn.init.normal_(p)
    x = torch.randn(*_inputs(cfg)[0].shape)
    real = peak_memory(module, [x], train=train, optimizer="adam").peak
    assert estimate >= 0.97 * real, (estimate, real)
    graph = GraphModule(concretize(net, cfg))
    with torch.no_grad():
        assert graph(*example_inputs(graph)).shape == module(x).shape


def test_repeated_calls_make_the_same_nodes() -> None:
    """A fallback call like one made before in the trace (same function, tensors of the same shapes
    and producers, same other arguments) is replayed, not run on fake tensors again: it makes the same
    ATen nodes (operators, shapes, FLOPs, saved tensors, buffers, workspaces) on its own inputs."""
    from dnnsat.expr import Expr

    def key(v: Any) -> Any:
        return id(v) if isinstance(v, Expr) else tuple(map(key, v)) if isinstance(v, tuple) else v

    space = ds.Space({"b": ds.Categorical([2]), "c": ds.Categorical([3]), "h": ds.Categorical([5])})
    net = from_torch(lambda c: Idiom(c["c"], IDIOMS["repeated"]), _inputs).network(space)
    nodes = [n for n in net.nodes if n.op == "aten"]
    fields = ("aten", "shape", "macs", "saves", "buffers", "workspace", "view", "args", "sizes")
    made = [tuple(key(n.attrs[f]) for f in fields) for n in nodes]
    half = len(made) // 2
    assert half > 5 and made[:half] == made[half:]
    assert all(a.inputs != b.inputs for a, b in zip(nodes[:half], nodes[half:]))  # on their own inputs


def test_translation_of_sympy_sizes() -> None:
    """Every form of PyTorch's symbolic sizes and guards the fallback translates evaluates, at many
    points, as sympy does (floor semantics of ``//`` and ``%``, exact rational scale factors)."""
    import sympy as sp
    import torch.utils._sympy.functions as fns

    from dnnsat.expr import Var, compile_scalar
    from dnnsat.torch._aten import _translate

    a, b = sp.symbols("a b", integer=True, positive=True)
    names = {a: Var("a"), b: Var("b")}
    forms = [
        a + 3 * b - 1, a * b, a**2, fns.PowByNatural(a, 3), fns.FloorDiv(a - 1, b) + 1, fns.CeilDiv(a, b),
        fns.PythonMod(a, b), fns.Mod(a, b), fns.ModularIndexing(a, 2, b), fns.Max(a, b, 7), fns.Min(a, 2 * b),
        fns.TruncToInt(sp.Float(1.5) * fns.ToFloat(a)), fns.FloorToInt(fns.IntTrueDiv(a, b)),
        fns.CeilToInt(fns.IntTrueDiv(a, b)), sp.ceiling(sp.Rational(3, 4) * a),
    ]  # fmt: skip
    conds = [
        sp.Eq(a, b), sp.Ne(a, 1), sp.Lt(a, b), sp.Le(a, 2 * b), sp.Gt(a, 3), sp.Ge(b, a - 1),
        sp.And(sp.Gt(a, 1), sp.Lt(b, 5)), sp.Or(sp.Eq(a, 1), sp.Eq(b, 1)), sp.Not(sp.Eq(a, b)),
    ]  # fmt: skip
    exprs = [_translate(f, names) for f in [*forms, *conds]]
    fn = compile_scalar(exprs)
    for x, y in itertools.product(range(1, 12), range(1, 7)):
        want = [int(f.subs({a: x, b: y})) for f in forms] + [bool(c.subs({a: x, b: y})) for c in conds]
        assert list(fn({"a": x, "b": y})) == want, (x, y)


@pytest.mark.parametrize("name", sorted(IDIOMS))
def test_materialized_network_runs(name: str) -> None:
    """The traced network materializes (each ``aten`` node calls its operator on real tensors) and gives
    the output shape of the module it was traced from."""
    from dnnsat.torch import GraphModule, concretize, example_inputs

    model = from_torch(lambda c: Idiom(c["c"], IDIOMS[name]), _inputs)
    problem = ds.Problem(SPACE, model=model)
    cfg = next(c for c in ({"b": 2, "c": 3, "h": 5}, {"b": 2, "c": 1, "h": 5}) if problem.check(c).feasible)
    graph = GraphModule(concretize(model.network(SPACE), cfg))
    module = Idiom(cfg["c"], IDIOMS[name])
    with torch.no_grad():
        assert graph(*example_inputs(graph)).shape == module(torch.randn(*_inputs(cfg)[0].shape)).shape
