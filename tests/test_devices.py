"""Device catalog, profile files, fitting efficiency factors, and the `dnnsat devices/calibrate` commands."""

from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner

from dnnsat.cli import main
from dnnsat.cost._devices import (
    NUMBERS,
    DeviceProfile,
    UnknownDeviceError,
    fit_device,
    get_device,
    list_devices,
)
from dnnsat.cost._latency import latency_expressions
from dnnsat.expr import Var, compile_scalar
from dnnsat.graph import Network

REQUIRED = [
    "1080ti", "titanx", "titanxp", "v100", "t4", "a10", "a100-40gb", "a100-80gb", "l4", "l40s", "h100",
    "h200", "rtx3090", "rtx4090", "cpu", "xeon-gold-6226", "xeon-silver-4114",
]  # fmt: skip


def test_catalog_has_the_required_devices_with_a_source_for_every_number() -> None:
    names = {p.name for p in list_devices()}
    assert set(REQUIRED) <= names
    for p in list_devices():
        for field in NUMBERS:
            assert len(p.sources.get(field, "")) > 10, (p.name, field)
        assert p.peak_flops["fp32"] > 0 and p.memory_bandwidth > 0 and p.memory_bytes > 0
        assert (p.context_bytes > 0) == (p.kind == "gpu")


def test_spec_sheet_numbers_and_dtype_units() -> None:
    a100 = get_device("a100-80gb")
    assert a100.peak("float32") == 19.5e12 and a100.peak("float16") == 312e12 and a100.peak("mixed") == 312e12
    assert a100.memory_bandwidth == 2.039e12 and a100.memory_bytes == 80 * 2**30
    assert get_device("1080ti").peak("float16") == 1.77e11  # Pascal: no tensor cores, 1/64-rate fp16
    assert get_device("titanxp").peak("bfloat16") == 1.215e13  # no bf16 unit: falls back to fp32
    assert get_device("h200").memory_bandwidth == 4.8e12


def test_aliases_case_and_unknown_names() -> None:
    assert get_device("A100").name == "a100-80gb"
    assert get_device("gold_6226").name == "xeon-gold-6226"
    assert get_device("Silver_4114").name == "xeon-silver-4114"
    profile = get_device("t4")
    assert get_device(profile) is profile
    with pytest.raises(UnknownDeviceError, match="unknown device 'tpu-v9'.*a100-80gb"):
        get_device("tpu-v9")
    with pytest.raises(UnknownDeviceError, match="does not exist"):
        get_device("/nonexistent/profile.json")


def test_json_round_trip_and_bad_files(tmp_path) -> None:  # type: ignore[no-untyped-def]
    p = get_device("l40s")
    assert DeviceProfile.from_json(p.to_json()) == p
    path = tmp_path / "l40s.json"
    p.save(path)
    assert get_device(str(path)) == p
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({**p.to_dict(), "speed": 3}))
    with pytest.raises(ValueError, match="unknown fields \\['speed'\\]"):
        get_device(str(bad))
    with pytest.raises(ValueError, match="kind must be 'gpu' or 'cpu'"):
        p.replace(kind="tpu")


def _mlp() -> tuple[Network, list[dict[str, int]]]:
    v = {n: Var(n) for n in ("b", "w", "d")}
    net = Network()
    x = net.input((v["b"], 256))
    x = net.relu(net.linear(x, v["w"]))
    x = net.repeat(v["d"], 3, lambda i, y: net.relu(net.linear(y, v["w"])), x)
    net.output(net.linear(x, 10))
    rng = np.random.default_rng(1)
    envs = [
        {
            "b": int(rng.choice([1, 8, 64, 512])),
            "w": int(rng.choice([32, 256, 2048])),
            "d": int(rng.integers(0, 4)),
        }
        for _ in range(24)
    ]
    return net, envs


@pytest.mark.parametrize("kind", ["cpu", "gpu"])
def test_fit_device_recovers_known_factors(kind: str) -> None:
    net, envs = _mlp()
    base = get_device("cpu" if kind == "cpu" else "t4")
    truth = base.replace(launch_overhead_s=4e-6, efficiency={"compute": 0.6, "matmul": 0.35, "memory": 0.45})
    f = compile_scalar([latency_expressions(net, None, truth)["latency"]])
    samples = [((net, env), f(env)[0]) for env in envs]
    fitted = fit_device(base, samples, prior_weight=1e-8)
    assert fitted.launch_overhead_s == pytest.approx(4e-6, rel=0.02)
    assert fitted.efficiency["matmul"] == pytest.approx(0.35, rel=0.02)
    assert fitted.efficiency["memory"] == pytest.approx(0.45, rel=0.02)
    assert "fitted by fit_device on 24" in fitted.sources["efficiency"]
    assert fitted.peak_flops == base.peak_flops  # spec-sheet numbers untouched


def test_fit_device_rejects_bad_samples() -> None:
    net, envs = _mlp()
    with pytest.raises(ValueError, match="at least 2 samples"):
        fit_device("cpu", [((net, envs[0]), 1e-3)])
    with pytest.raises(ValueError, match="non-positive latency"):
        fit_device("cpu", [((net, envs[0]), 1e-3), ((net, envs[1]), 0.0)])
    with pytest.raises(TypeError, match="Network or Problem"):
        fit_device("cpu", [(("net", envs[0]), 1e-3), ((net, envs[1]), 1e-3)])


def test_cli_devices_table_and_json() -> None:
    runner = CliRunner()
    res = runner.invoke(main, ["devices", "--json"])
    assert res.exit_code == 0, res.output
    data = {d["name"]: d for d in json.loads(res.output)}
    assert set(REQUIRED) <= set(data) and data["v100"]["peak_flops"]["fp16_tensor"] == 125e12
    res = runner.invoke(main, ["devices"])
    assert res.exit_code == 0 and "xeon-silver-4114" in res.output


def test_cli_calibrate_writes_a_usable_profile(tmp_path) -> None:  # type: ignore[no-untyped-def]
    pytest.importorskip("torch")
    out = tmp_path / "local.json"
    res = CliRunner().invoke(main, ["calibrate", "--quick", "--out", str(out), "--json"])
    assert res.exit_code == 0, res.output
    p = get_device(str(out))
    assert p.kind == "cpu" and 1e8 < p.peak_flops["fp32"] < 1e13 and 1e8 < p.memory_bandwidth < 1e12
    assert 1e-8 < p.launch_overhead_s < 1e-3 and all(
        "measured by dnnsat calibrate" in p.sources[k] for k in NUMBERS
    )
    res = CliRunner().invoke(main, ["calibrate", "--device", "tpu"])
    assert res.exit_code == 2 and "cpu" in res.output
