"""Device catalog, profile files, fitting efficiency factors, and the `dnnsat devices/calibrate` commands."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest
from click.testing import CliRunner

from dnnsat.cli import main
from dnnsat.cost import (
    CPU_ISAS,
    CpuBackend,
    DeviceProfile,
    UnknownDeviceError,
    cpu_backend_from_flags,
    detect_cpu_backend,
    fit_device,
    get_device,
    list_devices,
)
from dnnsat.cost._devices import NUMBERS
from dnnsat.cost.latency import latency_expressions
from dnnsat.expr import Var, compile_scalar
from dnnsat.graph import Network

REQUIRED = [
    "1080ti", "titanx", "titanxp", "v100", "t4", "a10", "a100-40gb", "a100-80gb", "l4", "l40s", "h100",
    "h200", "rtx3090", "rtx4090", "cpu", "xeon-gold-6226", "xeon-silver-4114", "pixel2", "pixel3",
    "essential-ph-1", "samsung-a50", "samsung-s7", "raspi4", "eyeriss", "zc706",
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
    with pytest.raises(ValueError, match="kind must be one of 'gpu', 'cpu', 'mobile_cpu', 'accelerator'"):
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


# /proc/cpuinfo flags (the vector part) of real CPUs
_ZEN2 = (
    "fpu sse sse2 ssse3 fma cx16 sse4_1 sse4_2 movbe popcnt aes xsave avx f16c rdrand bmi1 avx2 bmi2 sha_ni"
)
_CASCADE_LAKE = "sse4_1 sse4_2 avx f16c fma avx2 avx512f avx512dq avx512cd avx512bw avx512vl avx512_vnni"
_SAPPHIRE_RAPIDS = _CASCADE_LAKE + " avx_vnni avx512_bf16 avx512vbmi avx512_fp16 amx_bf16 amx_tile amx_int8"


def test_backend_from_cpu_flags_and_environment() -> None:
    def backend(flags: str, **env: str) -> tuple[str, str, int, bool, bool]:
        b = cpu_backend_from_flags(flags.split(), env)
        return b.isa, b.aten, b.channel_block, b.bf16, b.fp16

    assert backend(_ZEN2) == ("avx2", "AVX2", 8, False, False)  # AMD EPYC 7002
    assert backend(_CASCADE_LAKE) == ("avx512_core_vnni", "AVX512", 16, True, False)
    assert backend(_SAPPHIRE_RAPIDS) == ("avx512_core_amx", "AVX512", 16, True, True)
    # the emulation of an AVX2 machine the test suite runs under
    avx2 = {"ONEDNN_MAX_CPU_ISA": "AVX2", "ATEN_CPU_CAPABILITY": "avx2"}
    assert backend(_SAPPHIRE_RAPIDS, **avx2) == ("avx2", "AVX2", 8, False, False)
    assert backend(_SAPPHIRE_RAPIDS, DNNL_MAX_CPU_ISA="AVX512_CORE")[0] == "avx512_core"
    both = {"ONEDNN_MAX_CPU_ISA": "AVX512_CORE_BF16", "DNNL_MAX_CPU_ISA": "SSE41"}
    assert backend(_SAPPHIRE_RAPIDS, **both)[0] == "avx512_core_bf16"  # ONEDNN_ first
    assert backend(_SAPPHIRE_RAPIDS, ONEDNN_MAX_CPU_ISA="AVX10_1_512")[0] == "avx512_core_fp16"
    assert backend(_SAPPHIRE_RAPIDS, ONEDNN_MAX_CPU_ISA="AVX2_VNNI")[0] == "avx2_vnni"
    # a limit above the CPU, or one oneDNN does not know, changes nothing
    assert backend(_ZEN2, ONEDNN_MAX_CPU_ISA="AVX512_CORE_AMX")[0] == "avx2"
    assert (
        backend(_ZEN2, ONEDNN_MAX_CPU_ISA="ALL")[0] == backend(_ZEN2, ONEDNN_MAX_CPU_ISA="avx9")[0] == "avx2"
    )
    assert backend(_ZEN2, ATEN_CPU_CAPABILITY="avx512")[1] == "AVX2"
    assert backend(_ZEN2, ATEN_CPU_CAPABILITY="default")[1] == "DEFAULT"
    assert backend("sse4_1 sse4_2") == ("sse41", "DEFAULT", 8, False, False)
    with pytest.raises(ValueError, match="unknown oneDNN CPU ISA 'avx3'"):
        CpuBackend("avx3")
    assert CPU_ISAS[0] == "sse41" and CPU_ISAS[-1] == "avx512_core_amx_fp16"


def test_detected_backend_is_what_pytorch_runs() -> None:
    """The detection agrees with PyTorch itself, here and with AVX2 emulated (fresh interpreter)."""
    torch = pytest.importorskip("torch")
    code = (
        "import json, torch; from dnnsat.cost import detect_cpu_backend as d; b = d(); "
        "print(json.dumps([b.isa, b.channel_block, b.aten == torch.backends.cpu.get_cpu_capability(), "
        "b.bf16 == torch.ops.mkldnn._is_mkldnn_bf16_supported(), "
        "b.fp16 == torch.ops.mkldnn._is_mkldnn_fp16_supported()]))"
    )
    env = {**os.environ, "ONEDNN_MAX_CPU_ISA": "AVX2", "ATEN_CPU_CAPABILITY": "avx2"}
    res = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert res.returncode == 0, res.stderr[-2000:]
    assert json.loads(res.stdout.strip().splitlines()[-1]) == ["avx2", 8, True, True, True]
    local = detect_cpu_backend()
    assert local.aten == torch.backends.cpu.get_cpu_capability()
    assert local.bf16 == torch.ops.mkldnn._is_mkldnn_bf16_supported()
    assert local.fp16 == torch.ops.mkldnn._is_mkldnn_fp16_supported()


def test_cpu_profiles_carry_an_isa_and_the_generic_one_is_this_machines() -> None:
    local = detect_cpu_backend()
    for name in ("cpu", "cpu-1core"):
        p = get_device(name)
        assert (p.isa, p.channel_block) == (local.isa, local.channel_block)
        assert "detected at run time" in p.sources["isa"] and p.cpu_backend().isa == local.isa
    gold, silver = get_device("xeon-gold-6226"), get_device("xeon-silver-4114")
    assert (gold.isa, gold.channel_block, silver.isa, silver.channel_block) == (
        "avx512_core_vnni", 16, "avx512_core", 16,
    )  # fmt: skip
    assert "Intel ARK" in gold.sources["isa"] and "Intel ARK" in silver.sources["isa"]
    assert all(p.isa == "" for p in list_devices() if p.kind == "gpu")
    # profiles without an isa (older JSON files) derive it from the channel block
    bare = get_device("cpu").replace(isa="")
    assert bare.replace(channel_block=8).cpu_backend().isa == "avx2"
    assert bare.replace(channel_block=16).cpu_backend().isa == "avx512_core"
    assert DeviceProfile.from_json(gold.to_json()) == gold
    with pytest.raises(
        ValueError, match="isa must be empty for a GPU, mobile CPU or accelerator and one of sse41"
    ):
        get_device("cpu").replace(isa="avx3")
    with pytest.raises(ValueError, match="isa must be empty for a GPU"):
        get_device("t4").replace(isa="avx2")
    with pytest.raises(ValueError, match="'t4' is a gpu, not a CPU"):
        get_device("t4").cpu_backend()
