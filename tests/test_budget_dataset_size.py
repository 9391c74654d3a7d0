"""``Budget(dataset_size=n)``: the epoch's last batch (``drop_last=False``) is checked against the
training validity rules, against what PyTorch really does on a full epoch."""

from __future__ import annotations

import pytest
import torch

import dnnsat as ds
from dnnsat.torch import to_torch

BATCHES = [2, 3, 4, 5, 6, 7, 8, 12, 16]


def space() -> ds.Space:
    return ds.Space({"batch_size": ds.Categorical(BATCHES), "fc": ds.Categorical([4, 6])})


def build(v: object) -> ds.Network:
    """conv + ReLU, pool, flatten, linear + BatchNorm (a BatchNorm1d in the dense head)."""
    net = ds.Network("bn_head")
    x = net.input((v.batch_size, 1, 4, 4))  # type: ignore[attr-defined]
    x = net.flatten(net.maxpool2d(net.relu(net.conv2d(x, 2, 3, padding=1)), 2))
    x = net.relu(net.batchnorm(net.linear(x, v.fc)))  # type: ignore[attr-defined]
    return net.output(net.linear(x, 3))


def epoch_crashes(problem: ds.Problem, config: dict[str, int], n: int) -> bool:
    """Train one epoch over ``n`` samples with a DataLoader (``drop_last=False``); True if it raises."""
    torch.manual_seed(0)
    model = to_torch(problem, config).train()
    data = torch.utils.data.TensorDataset(torch.randn(n, 1, 4, 4), torch.randint(0, 3, (n,)))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    try:
        for x, y in torch.utils.data.DataLoader(data, batch_size=config["batch_size"]):
            opt.zero_grad()
            torch.nn.functional.cross_entropy(model(x), y).backward()
            opt.step()
    except ValueError as err:
        assert "more than 1 value per channel" in str(err)
        return True
    return False


@pytest.mark.parametrize("n", [25, 36, 37, 61])
def test_last_batch_matches_pytorch(n: int) -> None:
    problem = ds.Problem(space(), model=build, budget=ds.Budget(dataset_size=n))
    for b in BATCHES:
        config = {"batch_size": b, "fc": 4}
        assert problem.check(config).feasible == (not epoch_crashes(problem, config, n)), (n, b)
    feasible = {c["batch_size"] for c in problem.sample(50, seed=0)}
    assert feasible == {b for b in BATCHES if n % b != 1}


def test_names_the_last_batch_and_only_training_rules() -> None:
    problem = ds.Problem(space(), model=build, budget=ds.Budget(dataset_size=37))
    names = [c.name for c in problem.constraints]
    assert names == ["batchnorm#6: more than one value per channel (training) (last batch of the epoch)"]
    verdict = problem.check({"batch_size": 4, "fc": 6})  # 37 = 9 * 4 + 1
    assert not verdict.feasible and "last batch" in verdict.violations[0].name
    assert ds.Problem(space(), model=build, budget=ds.Budget()).check({"batch_size": 4, "fc": 6}).feasible


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"dataset_size": 0}, "dataset_size must be a positive int"),
        ({"dataset_size": 10.5}, "dataset_size must be a positive int"),
        ({"dataset_size": True}, "dataset_size must be a positive int"),
        ({"dataset_size": 100, "mode": "inference"}, "apply to training"),
        ({"dataset_size": 100, "accumulation_steps": 2}, "not supported"),
    ],
)
def test_bad_dataset_size(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        ds.Budget(**kwargs)  # type: ignore[arg-type]


def test_parse_and_fixed_batch() -> None:
    assert ds.Budget.parse("dataset_size=1297").dataset_size == 1297

    def fixed(v: object) -> ds.Network:  # the batch is not a space variable: the option says so
        net = ds.Network("fixed")
        x = net.input((8, v.fc))  # type: ignore[attr-defined]
        return net.output(net.batchnorm(x))

    with pytest.raises(ValueError, match="dataset_size=9: the batch"):
        ds.Problem(space(), model=fixed, budget=ds.Budget(dataset_size=9))
