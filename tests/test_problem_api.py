"""Problem API: reference problem, costs and violations, opaque predicates, errors, CLI, import guard."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from click.testing import CliRunner

import dnnsat as ds
from dnnsat.cli import main as cli
from dnnsat.zoo import synthetic_resnet_problem

CFG = dict(w0=64, w1=128, w2=256, w3=512, d0=2, d1=2, d2=2, d3=2, b=64, r=224, k=3)


def reference_costs(c: dict[str, int]) -> tuple[int, int]:
    """DESIGN §10 written out by hand with Python integers."""
    b, r, k = c["b"], c["r"], c["k"]
    w = [c[f"w{i}"] for i in range(4)]
    d = [c[f"d{i}"] for i in range(4)]
    flops = 2 * b * r * r * 3 * w[0] * k * k
    params = 3 * w[0] * k * k
    for i in range(4):
        s = r // 2**i
        ci = w[0] if i == 0 else w[i - 1]
        flops += 2 * b * s * s * ci * w[i] * k * k + d[i] * 4 * b * s * s * w[i] * w[i] * k * k
        params += ci * w[i] * k * k + d[i] * 2 * w[i] * w[i] * k * k
    return flops, params + 1000 * w[3]


def test_reference_problem_matches_design() -> None:
    p = synthetic_resnet_problem()
    assert p.space.size() == 32**4 * 4**4 * 7 * 7 * 3
    rng = np.random.default_rng(0)
    cols = {
        n: np.asarray(prm.values())[rng.integers(len(prm.values()), size=3000)] for n, prm in p.space.items()
    }
    batch = p.check_batch(cols)
    for i in range(3000):
        cfg = {n: int(cols[n][i]) for n in cols}
        flops, params = reference_costs(cfg)
        assert p.costs(cfg) == {"flops": flops, "params": params}
        assert batch[i] == (flops <= 2e12 and params <= 20e6) == p.check(cfg).feasible
    assert 0.05 < batch.mean() < 0.06  # "about 5.5 % of configs feasible"


def test_verdict_violations_and_constraint_values() -> None:
    p = synthetic_resnet_problem()
    v = p.check(CFG)
    assert not v and [x.name for x in v.violations] == ["flops"]
    flops, params = reference_costs(CFG)
    assert v.violations[0].value == flops and v.violations[0].excess == flops - 2e12
    values = p.constraint_values(CFG)
    assert list(values) == ["flops", "params"]
    assert values["flops"] == pytest.approx((flops - 2e12) / 2e12) and values["params"] <= 0
    assert p.constraint_values(p.repair(CFG))["flops"] <= 0


def test_opaque_predicate_is_checked_per_config() -> None:
    space = ds.Space({"a": ds.Int(1, 6), "b": ds.Int(1, 6)})
    p = ds.Problem(space).require(space.vars.a + space.vars.b <= 8, name="sum")
    with pytest.warns(ds.OpaqueConstraintWarning):
        p.require(lambda c: (c["a"] * c["b"]) % 2 == 0, name="even")
    feas = [c for c in ({"a": a, "b": b} for a in range(1, 7) for b in range(1, 7)) if p.check(c).feasible]
    assert (
        p.count()
        == len(feas)
        == sum(1 for a in range(1, 7) for b in range(1, 7) if a + b <= 8 and a * b % 2 == 0)
    )
    assert set(p.feasible_values("a", {"b": 3})) == {2, 4}
    assert all(p.check(c) for c in p.sample(50, seed=0))
    assert p.check_batch({"a": [2, 3], "b": [3, 3]}).tolist() == [True, False]


def test_bad_input_gets_clear_errors() -> None:
    p = synthetic_resnet_problem()
    with pytest.raises(ds.SpaceError, match="unknown parameter 'width'"):
        p.check({**CFG, "width": 3})
    with pytest.raises(ds.SpaceError, match="'w0'.*outside"):
        p.check({**CFG, "w0": 17})
    with pytest.raises(ds.SpaceError, match="missing active parameter"):
        p.check({"w0": 16})
    with pytest.raises(ds.SpaceError, match="empty range"):
        ds.Space({"x": ds.Int(5, 1)})
    with pytest.raises(ValueError, match="finite"):
        ds.Problem(p.space).require(p.space.vars.w0 <= float("inf"))
    with pytest.raises(ds.SpaceError, match="not parameters of the space"):
        ds.Problem(ds.Space({"x": ds.Int(1, 3)})).require(ds.Var("y") <= 2)
    with pytest.raises(TypeError, match="boolean expression"):
        ds.Problem(p.space).require(p.space.vars.w0 + 1)
    with pytest.raises(ValueError, match="exists already"):
        synthetic_resnet_problem().require(p.space.vars.w0 <= 64, name="flops")
    with pytest.raises(ds.SpaceError, match="unknown parameter 'zz'"):
        p.feasible_values("zz")
    with pytest.raises(ValueError, match="unknown objective"):
        p.maximize("nothing")


def test_continuous_parameters_in_constraints_go_to_z3() -> None:
    space = ds.Space({"n": ds.Int(1, 8), "x": ds.Float(0.0, 1.0)})
    v = space.vars
    p = ds.Problem(space).require(v.x * v.n >= 3.5, name="enough").require(v.x <= 0.6, name="cap")
    assert p.feasible_values("n") == [6, 7, 8]
    assert p.check({"n": 7, "x": 0.55}) and not p.check({"n": 5, "x": 0.6})
    assert not p.is_empty()
    with pytest.raises(ValueError, match="give it a step"):
        p.count()


def test_undecided_boxes_are_never_offered_as_feasible(caplog: pytest.LogCaptureFixture) -> None:
    from dnnsat.problem._search import _proved

    with caplog.at_level(logging.WARNING, logger="dnnsat.problem"):
        ok = _proved(np.array([1, -1, 0, 1], dtype=np.int8), "feasible_values")
    assert ok.tolist() == [True, False, False, True]  # undecided (-1) is not feasible ...
    assert "feasible_values: 1 box(es) undecided" in caplog.text  # ... and the user is told


def test_feasible_values_on_a_memory_budget_are_proved() -> None:
    # An 8 GiB ResNet study once launched an infeasible trial: feasible_values offered w0 = 352 and
    # 384 (boxes the engine left undecided after 200,000 splits were counted as feasible), and no d0
    # extended them. Undecided roots now get a second pass that splits the fewest-valued dimensions
    # first (it decides them), and undecided is never feasible.
    p = ds.zoo.resnet(budget=ds.Budget(memory="8GiB"))
    given = {"batch_size": 64, "resolution": 224, "block": "bottleneck", "groups": 32}
    values = p.feasible_values("w0", given)
    best = p.maximize("w0", given=given)  # branch and bound: an independent route to the largest w0
    assert best is not None and best.proven and p.check(best.config).feasible
    assert max(values) == best.config["w0"] == 320
    assert not p.is_extendable({**given, "w0": 352}) and not p.is_extendable({**given, "w0": 384})
    for w0 in values[-2:]:
        assert p.is_extendable({**given, "w0": w0})


def test_maximize_with_given_and_conditions() -> None:
    space = ds.Space(
        {
            "layer": ds.Categorical(["conv", "pool"]),
            "kernel": ds.Int(1, 7, condition={"layer": ["conv"]}),
            "batch": ds.Categorical([8, 16, 32, 64]),
        }
    )
    v = space.vars
    p = ds.Problem(space).require(v.batch * v.kernel * v.kernel <= 800, name="mem")
    best = p.maximize("batch", given={"kernel": 5})
    assert best is not None and best.config == {"layer": "conv", "kernel": 5, "batch": 32}
    assert p.feasible_values("layer", {"kernel": 7}) == ["conv"]
    # inactive kernel counts once: pool x 4 batches + conv with kernel*kernel*batch <= 800
    conv = sum(1 for k in range(1, 8) for b in (8, 16, 32, 64) if b * k * k <= 800)
    assert p.count() == 4 + conv
    assert {"layer": "pool", "batch": 64} in list(p.enumerate())


def run_cli(*args: str) -> tuple[int, str]:
    res = CliRunner().invoke(cli, list(args))
    return res.exit_code, res.output


def test_cli_exit_codes_and_json() -> None:
    sets = [x for k, v in CFG.items() for x in ("--set", f"{k}={v}")]
    code, out = run_cli("check", "zoo:synthetic_resnet", *sets, "--json")
    assert code == 1 and json.loads(out)["violations"][0]["name"] == "flops"
    code, out = run_cli("check", "zoo:synthetic_resnet", *sets, "--budget", "flops=5T", "--json")
    assert code == 0 and json.loads(out)["feasible"] is True
    code, out = run_cli("explain", "zoo:synthetic_resnet", *sets, "--json")
    assert code == 1 and json.loads(out)["repair"]["b"] == 16
    code, out = run_cli("prune", "zoo:synthetic_resnet", "--budget", "flops=1e11,params=2M", "--json")
    assert code == 0 and max(json.loads(out)["w0"]) == 256
    code, out = run_cli("prune", "zoo:synthetic_resnet", "--budget", "flops=1M")
    assert code == 1 and "flops" in out
    code, out = run_cli("sample", "zoo:synthetic_resnet", "-n", "3", "--seed", "1", "--json")
    assert code == 0 and len(json.loads(out)) == 3
    code, out = run_cli("count", "zoo:synthetic_resnet", "--budget", "flops=4G,params=200k", "--json")
    assert code == 0 and json.loads(out)["count"] == 16525
    code, out = run_cli("check", "zoo:synthetic_resnet", "--set", "w0=17")
    assert code == 2 and "outside" in out
    code, out = run_cli("check", "nomodule")
    assert code == 2 and "module:attr" in out
    code, out = run_cli("count", "tests.test_problem_api:make_small_problem", "--json")
    assert code == 0 and json.loads(out)["count"] == 6


def test_cli_explain_reports_memory_components_in_units() -> None:
    cfg = {"depth": 4, "width": 1024, "activation": "relu", "batch_size": 256}
    sets = [x for k, v in cfg.items() for x in ("--set", f"{k}={v}")]
    code, out = run_cli("explain", "zoo:mlp", *sets, "--budget", "memory=8MiB,optimizer=adam")
    assert code == 1 and "memory <= 8.00 MiB" in out and "nearest feasible change" in out
    for part in ("memory_weights", "memory_optimizer", "memory_activations", "memory_overhead"):
        assert part in out
    code, out = run_cli("explain", "zoo:mlp", *sets, "--budget", "memory=8MiB,optimizer=adam", "--json")
    costs = json.loads(out)["costs"]
    parts = [v for k, v in costs.items() if k.startswith("memory_")]
    assert len(parts) == 7 and sum(parts) == costs["memory"] > 8 * 2**20
    assert costs["memory_optimizer"] == 2 * costs["memory_weights"]  # Adam: two fp32 moments per weight


def make_small_problem() -> ds.Problem:
    space = ds.Space({"a": ds.Int(1, 4), "b": ds.Int(1, 4)})
    return ds.Problem(space).require(space.vars.a + space.vars.b <= 4, name="sum")


def test_import_needs_only_core_dependencies() -> None:
    code = textwrap.dedent(
        """
        import sys
        class Block:
            def find_spec(self, name, path=None, target=None):
                if name.split('.')[0] in ('optuna', 'nni', 'torch'):
                    raise ImportError('blocked ' + name)
        sys.meta_path.insert(0, Block())
        import dnnsat
        from dnnsat.zoo import synthetic_resnet_problem
        p = synthetic_resnet_problem()
        assert not p.is_empty() and p.prune()
        assert not any(m.split('.')[0] in ('optuna', 'nni', 'torch') for m in sys.modules)
        print('ok')
        """
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "ok"
