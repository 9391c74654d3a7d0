"""``torch.einsum`` of matmul form (issue 15): params, FLOPs (FlopCounterMode's count, incl. size-1
broadcasting) and validity equal PyTorch's; memory against :func:`dnnsat.torch.peak_memory`; anything
not of matmul form is refused naming the equation and the user's line."""

from __future__ import annotations

import logging
from typing import Any

import pytest

torch = pytest.importorskip("torch")
import torch.nn as nn  # noqa: E402

import dnnsat as ds  # noqa: E402
from dnnsat.cost import Budget, memory_expressions  # noqa: E402
from dnnsat.expr import compile_scalar  # noqa: E402
from dnnsat.torch import from_torch, peak_memory  # noqa: E402
from tests.test_from_torch import assert_exact  # noqa: E402

EQUATIONS = {
    "qk": ("bhqd,bhkd->bhqk", lambda b, m, d, n, o: ((b, 2, m, d), (b, o, n, d))),
    "bmm": ("bij,bjk->bik", lambda b, m, d, n, o: ((b, m, d), (o, d, n))),
    "ellipsis": ("...ij,...jk->...ik", lambda b, m, d, n, o: ((b, 2, m, d), (o, d, n))),
    "proj": ("bsd,de->bse", lambda b, m, d, n, o: ((b, m, d), (d, n))),
    "implicit": ("bij,bjk", lambda b, m, d, n, o: ((b, m, d), (b, d, n))),
    "two_contracted": ("bijl,bjkl->bik", lambda b, m, d, n, o: ((b, m, n, d), (o, n, m, d))),
}


class Einsum(nn.Module):
    def __init__(self, c: dict[str, Any]) -> None:
        super().__init__()
        self.eq, self.p = EQUATIONS[c["eq"]][0], nn.Linear(c["d"], c["d"])

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return torch.einsum(self.eq, self.p(x), y)


@pytest.mark.parametrize("name", list(EQUATIONS))
def test_einsum_exact(name: str) -> None:
    """Sizes of 1 broadcast (a contracted size 1 in one operand: summed out first, 0 FLOPs when no
    contraction is left) and mismatches are invalid, as PyTorch."""
    space = ds.Space({
        "b": ds.Categorical([1, 2]), "m": ds.Categorical([1, 3]), "d": ds.Categorical([1, 4]),
        "n": ds.Categorical([1, 4, 5]), "o": ds.Categorical([1, 2, 3]), "eq": ds.Categorical([name]),
    })  # fmt: skip
    shapes = EQUATIONS[name][1]

    def inputs(c: dict[str, Any]) -> tuple[torch.Tensor, ...]:
        a, b = shapes(c["b"], c["m"], c["d"], c["n"], c["o"])
        return torch.empty(a), torch.empty(b)

    _, valid, n = assert_exact(space, Einsum, inputs)
    assert valid > 0


@pytest.mark.parametrize(
    "eq,x,y",
    [
        ("bhqd,bhkd->bhqk", (4, 4, 64, 32), (4, 4, 48, 32)),
        ("bij,bjk->bik", (8, 64, 32), (8, 32, 64)),
        ("bsd,de->bse", (8, 128, 64), (64, 64)),
        ("bhqd,bhkd->bhqk", (2, 8, 128, 16), (2, 8, 128, 16)),
    ],
)
def test_einsum_memory(eq: str, x: tuple[int, ...], y: tuple[int, ...]) -> None:
    """A linear on each operand, einsum, a linear head: Adam training and inference within 1 % of
    PyTorch's peak (einsum's permutes are views when nothing broadcasts)."""
    torch.set_num_threads(1)

    class Block(nn.Module):
        def __init__(self, c: dict[str, Any]) -> None:
            super().__init__()
            self.p, self.q = nn.Linear(x[-1], x[-1]), nn.Linear(y[-1], y[-1])
            self.head = nn.Linear(y[-2] if eq.startswith("bhqd") else y[-1], 10)

        def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
            return self.head(torch.einsum(eq, self.p(a), self.q(b)))

    ins = [torch.randn(x), torch.randn(y)]
    net = from_torch(Block, lambda c: tuple(ins)).network(ds.Space({"z": ds.Categorical([0])}))
    for train in (True, False):
        budget = Budget(mode="train" if train else "inference", optimizer="adam" if train else None)
        estimate = int(compile_scalar([memory_expressions(net, budget, None)["memory"]])({"z": 0})[0])
        torch.manual_seed(0)
        real = peak_memory(Block({}), ins, train=train, optimizer="adam").peak
        assert -0.01 <= (estimate - real) / real <= 0.01, (train, estimate, real)


def test_broadcasting_einsum_memory_warns(caplog: pytest.LogCaptureFixture) -> None:
    """An operand broadcast over batch dimensions may be copied (-16 % measured): a warning."""
    net = ds.Network()
    a, b = net.input((2, 4, 8, 6)), net.input((4, 6, 5))
    net.output(net.einsum("...ij,...jk->...ik", a, b))
    with caplog.at_level(logging.WARNING, logger="dnnsat"):
        memory_expressions(net, Budget(mode="inference"), None)
    assert "einsum whose operands broadcast" in caplog.text


@pytest.mark.parametrize(
    "eq,message",
    [
        ("bii->bi", "two operands are supported"),
        ("bij,bij->bii", "repeated in one subscript"),
        ("bij,bjk->bk", "summed in one operand only"),
    ],
)
def test_not_matmul_form_refused(eq: str, message: str) -> None:
    """The DSL refuses einsum not of matmul form; ``from_torch`` traces it through the ATen fallback
    (exact FLOPs), or finds that PyTorch refuses it too (an output letter repeated)."""

    class M(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            ops = (x,) if eq.count(",") == 0 else (x, x)
            return torch.einsum(eq, *ops)  # the user's line

    space = ds.Space({"n": ds.Categorical([2, 3])})
    model = from_torch(lambda c: M(), lambda c: ((2, c["n"], c["n"]),))
    if eq == "bij,bij->bii":
        with pytest.raises(ds.GraphError, match="raises on every configuration"):
            ds.Problem(space, model=model)
    else:
        problem = ds.Problem(space, model=model)
        for n in (2, 3):
            costs = problem.costs({"n": n})
            assert (costs["params"], costs["flops"]) == model.measure({"n": n})
    net = ds.Network()
    t = net.input((2, 3, 3))
    if eq.count(",") == 1:
        with pytest.raises(ds.GraphError, match=message):
            net.einsum(eq, t, t)
