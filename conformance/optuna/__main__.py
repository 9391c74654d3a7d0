"""Run Optuna's own sampler tests with every built-in sampler wrapped in DnnSATSampler.

    python -m conformance.optuna [--problem always|binding|both] [--files FILE ...] [--jobs N]

1. Fetches the pinned source distribution (``pip download --no-deps --no-binary :all: optuna==5.0.0``)
   into ``build/conformance/`` (ignored by git; reused when present).
2. Extracts ``tests/samplers_tests`` with ``tests/conftest.py`` and the sdist's ``pyproject.toml`` (its
   pytest settings) - not the ``optuna`` package: the tests import the installed optuna.
3. Runs pytest once per problem (``conformance/optuna/_problems.py``; in parallel with ``--jobs``),
   with the samplers wrapped at interpreter start-up (``_site/sitecustomize.py``) and the
   not-applicable list applied (``_plugin.py``).
4. Prints run / passed / not applicable per problem and sampler, writes
   ``build/conformance/optuna-summary.json`` and exits 1 when an applicable test failed.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tarfile
import time
from collections import Counter, defaultdict
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from ._problems import PROBLEMS

OPTUNA_VERSION = "5.0.0"
ROOT = Path(__file__).resolve().parents[2]
CACHE = ROOT / "build" / "conformance"  # build/ is ignored by git
SITE = Path(__file__).resolve().parent / "_site"
#: Optuna's sampler tests that run by default, relative to the sdist's ``tests/samplers_tests``.
#: ``test_samplers.py`` holds the tests every sampler must pass (with ``optuna.testing.pytest_samplers``)
#: ``test_partial_fixed.py`` composes PartialFixedSampler with each of them, ``test_brute_force.py``
#: runs BruteForceSampler end to end. The other per-sampler files (TPE, CMA-ES, NSGA-II/III, QMC, GP)
#: test those samplers' internals through their private functions, and ``test_grid.py`` needs
#: ``fakeredis``: left out (``--files`` runs any of them).
DEFAULT_FILES = ("test_samplers.py", "test_partial_fixed.py", "test_brute_force.py")
OUTCOMES = ("passed", "failed", "not_applicable", "skipped")


def fetch(version: str = OPTUNA_VERSION) -> Path:
    """The extracted test tree of optuna's sdist (downloaded once with pip, then cached)."""
    tree = CACHE / f"optuna-{version}"
    if (tree / "tests" / "samplers_tests").is_dir():
        return tree
    CACHE.mkdir(parents=True, exist_ok=True)
    sdist = CACHE / f"optuna-{version}.tar.gz"
    if not sdist.exists():
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:", "-q"]
        subprocess.run([*cmd, "-d", str(CACHE), f"optuna=={version}"], check=True)
    prefix = f"optuna-{version}/"
    wanted = ("pyproject.toml", "tests/__init__.py", "tests/conftest.py", "tests/samplers_tests/")
    with tarfile.open(sdist) as tar:
        members = [m for m in tar.getmembers() if m.name.removeprefix(prefix).startswith(wanted)]
        tar.extractall(CACHE, members=members, filter="data")
    return tree


def optuna_version() -> str:
    from importlib.metadata import version

    return version("optuna")


def run_problem(tree: Path, kind: str, args: argparse.Namespace) -> dict[str, Any]:
    """One pytest run of ``files`` with the samplers wrapped for problem ``kind``; its record."""
    report = CACHE / f"optuna-{kind}.json"
    report.unlink(missing_ok=True)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(SITE), str(ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env["DNNSAT_CONFORMANCE_PROBLEM"] = kind
    env["DNNSAT_CONFORMANCE_REPORT"] = str(report)
    if args.full:
        env["DNNSAT_CONFORMANCE_FULL"] = "1"
    paths = [str(tree / "tests" / "samplers_tests" / f) for f in args.files]
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        *paths,
        "-p",
        "conformance.optuna._plugin",
        "-p",
        "no:cacheprovider",
    ]
    # -v and --durations: the log tells what ran and what took long; a test over 10 minutes fails
    cmd += ["-v", "--color=no", "-rfE", "--tb=short", "--durations=30", "--timeout=600"]
    if args.keyword:
        cmd += ["-k", args.keyword]
    t0 = time.perf_counter()
    log = CACHE / f"optuna-{kind}.log"
    with open(log, "w") as out:
        proc = subprocess.run(
            cmd, cwd=tree, env=env, stdout=out, stderr=subprocess.STDOUT, timeout=args.timeout
        )
    seconds = time.perf_counter() - t0
    if not report.exists():
        raise RuntimeError(f"pytest wrote no report for problem {kind!r} (exit {proc.returncode}); see {log}")
    record = json.loads(report.read_text())
    record.update(seconds=seconds, returncode=proc.returncode, log=str(log))
    return record


def summarize(records: list[dict[str, Any]]) -> dict[str, Any]:
    """Counts per problem and sampler (a test counts for every built-in sampler it wrapped)."""
    out: dict[str, Any] = {"optuna": OPTUNA_VERSION, "problems": {}}
    for rec in records:
        per: dict[str, Counter[str]] = defaultdict(Counter)
        for test in rec["tests"]:
            for sampler in test.get("samplers") or ["(no built-in sampler)"]:
                per[sampler][test["outcome"]] += 1
        totals = Counter(t["outcome"] for t in rec["tests"])
        out["problems"][rec["problem"]] = {
            "seconds": round(rec["seconds"], 1),
            "returncode": rec["returncode"],
            "log": rec["log"],
            "total": {k: totals[k] for k in OUTCOMES},
            "samplers": {s: {k: c[k] for k in OUTCOMES} for s, c in sorted(per.items())},
            "deselected_for_time": len(rec.get("deselected", [])),
            "failed": [t["nodeid"] for t in rec["tests"] if t["outcome"] == "failed"],
            "not_applicable": sorted({t["reason"] for t in rec["tests"] if t["outcome"] == "not_applicable"}),
        }
    return out


def print_summary(summary: dict[str, Any]) -> None:
    for kind, res in summary["problems"].items():
        t = res["total"]
        run = t["passed"] + t["failed"]
        print(
            f"\n== problem {kind!r}: {run} run, {t['passed']} passed, {t['failed']} failed, "
            f"{t['not_applicable']} not applicable, {t['skipped']} skipped by Optuna, "
            f"{res['deselected_for_time']} GPSampler cases left out for time (--full); "
            f"{res['seconds']} s"
        )
        print(f"{'sampler':<24}{'run':>6}{'passed':>8}{'failed':>8}{'n/a':>6}{'skipped':>9}")
        for name, c in res["samplers"].items():
            row = f"{name:<24}{c['passed'] + c['failed']:>6}{c['passed']:>8}{c['failed']:>8}"
            print(f"{row}{c['not_applicable']:>6}{c['skipped']:>9}")
        if res["returncode"] not in (0, 1):
            print(f"pytest exited with {res['returncode']} (collection error, interrupt): see {res['log']}")
        for nodeid in res["failed"]:
            print(f"FAILED {nodeid}")
        for reason in res["not_applicable"]:
            print(f"n/a: {reason}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m conformance.optuna", description=__doc__.splitlines()[0])
    parser.add_argument("--problem", choices=[*PROBLEMS, "both"], default="both")
    parser.add_argument(
        "--files", nargs="+", default=list(DEFAULT_FILES), help="files of tests/samplers_tests"
    )
    parser.add_argument("--jobs", type=int, default=2, help="problems run in parallel (one process each)")
    parser.add_argument("--timeout", type=float, default=1800.0, help="seconds per pytest run")
    parser.add_argument("-k", dest="keyword", default="", help="pytest -k expression (a partial run)")
    parser.add_argument("--full", action="store_true", help="also the GPSampler cases left out for time")
    args = parser.parse_args(argv)
    tree = fetch()
    if optuna_version() != OPTUNA_VERSION:
        print(f"warning: optuna {optuna_version()} is installed, the tests are optuna {OPTUNA_VERSION}'s")
    kinds = list(PROBLEMS) if args.problem == "both" else [args.problem]
    with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        records = list(pool.map(lambda k: run_problem(tree, k, args), kinds))
    summary = summarize(records)
    (CACHE / "optuna-summary.json").write_text(json.dumps(summary, indent=1))
    print_summary(summary)
    failed = sum(res["total"]["failed"] for res in summary["problems"].values())
    return 1 if failed or any(r["returncode"] not in (0, 1) for r in records) else 0


if __name__ == "__main__":
    sys.exit(main())
