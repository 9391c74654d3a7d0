"""A complete NNI experiment whose tuner is :class:`DnnSATTuner` wrapping TPE (Python ``Experiment`` API).

Run it (local training service, results under ``--workdir``)::

    python -m dnnsat.integrations.nni.example --trials 10 --flops-limit 1e11 --params-limit 2e6

What it does, in the terms of NNI's Python API::

    from nni.experiment import CustomAlgorithmConfig, Experiment
    import dnnsat.zoo

    problem = dnnsat.zoo.synthetic_resnet_problem(flops_limit=1e11, params_limit=2e6)
    exp = Experiment("local")
    exp.config.search_space = problem.space.to_nni()          # the full space; the tuner prunes it
    exp.config.trial_command = "python trial.py"             # trial.py: nni.get_next_parameter() ...
    exp.config.trial_concurrency = 2
    exp.config.max_trial_number = 10
    exp.config.tuner = CustomAlgorithmConfig(
        class_name="dnnsat.integrations.nni.DnnSATTuner",
        code_directory=".",
        class_args={
            "problem": "dnnsat.zoo:synthetic_resnet_problem",  # import path: a Problem or a factory
            "problem_args": {"flops_limit": 1e11, "params_limit": 2e6},
            "base_tuner": "TPE",
            "base_args": {"optimize_mode": "maximize"},
            "mode": "repair",
        },
    )
    exp.run(8080)

After ``nnictl algo register --meta <path of dnnsat_tuner.yml>`` the tuner is also available by name:
``exp.config.tuner = AlgorithmConfig(name="DnnSAT", class_args={...})`` (``--registered DnnSAT`` here).
The trial of this example (``python -m dnnsat.integrations.nni.example trial``) reports a synthetic
score instead of training a network.

``--problem module:attr`` takes your own problem (a Problem or a factory; ``--flops-limit`` and
``--params-limit`` become factory arguments). The module is imported here first, from the current
directory or ``PYTHONPATH``, and an import error is reported in one line (exit code 2). NNI builds the
tuner in a separate dispatcher process that starts in NNI's log directory, so the directory the module
was imported from is handed to it (``code_directory`` and ``PYTHONPATH``): no ``PYTHONPATH`` is needed.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import socket
import sys
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from dnnsat.problem._user_module import UserModuleError, import_user_module

from ._tuner import load_problem

__all__ = ["problem_code_directory", "synthetic_score", "trial", "run_experiment", "main"]

_TERMINAL = ("DONE", "STOPPED", "ERROR", "VIEWED")


def synthetic_score(params: Mapping[str, Any]) -> float:
    """A cheap stand-in for validation accuracy in [0, 1): larger nets and inputs score higher."""
    size = 0.0
    for key, value in params.items():
        if isinstance(value, int | float) and not isinstance(value, bool) and value > 0:
            size += math.log2(1.0 + float(value)) * (0.5 if key.startswith("d") else 1.0)
    return 1.0 - 1.0 / (1.0 + size / 10.0)


def trial() -> None:
    """The trial program: read the configuration from NNI and report the synthetic score."""
    import nni

    params = nni.get_next_parameter()
    nni.report_final_result(synthetic_score(params))


def problem_code_directory(problem: str) -> Path | None:
    """Import the module of ``problem`` (``"pkg.module:attr"``) and return the directory it comes from.

    The module is looked up in the current directory first, then on ``sys.path``; an error raised while
    importing it becomes a one-line ``UserModuleError``. The result is the directory that must be
    on the import path of NNI's dispatcher for it to import ``problem`` too, or ``None`` when the
    module is importable from elsewhere anyway (an installed package).
    """
    if ":" in problem:
        module_name = problem.partition(":")[0]
    elif "." in problem:
        module_name = problem.rpartition(".")[0]
    else:
        raise UserModuleError(f"--problem {problem!r} is not an import path; write 'module:attr'")
    origin = getattr(import_user_module(module_name, f"--problem {problem}"), "__file__", None)
    if origin is None:  # a namespace package
        return None
    root = Path(origin).resolve().parent
    if Path(origin).name == "__init__.py":
        root = root.parent
    for _ in range(module_name.count(".")):
        root = root.parent
    return None if _found_elsewhere(module_name.split(".")[0], root) else root


def _found_elsewhere(top: str, directory: Path) -> bool:
    """Whether the top-level module ``top`` is importable without ``directory`` or the current one."""
    here = {directory, Path.cwd().resolve()}
    saved = sys.path[:]
    sys.path[:] = [p for p in saved if p and Path(p).resolve() not in here]
    try:
        return any(
            getattr(finder, "find_spec", None) is not None and finder.find_spec(top, None) is not None
            for finder in sys.meta_path
        )
    finally:
        sys.path[:] = saved


@contextmanager
def _pythonpath(directory: Path | None) -> Iterator[None]:
    """Prepend ``directory`` to ``PYTHONPATH`` while NNI starts (its manager passes it to the dispatcher)."""
    old = os.environ.get("PYTHONPATH")
    if directory is not None:
        os.environ["PYTHONPATH"] = os.pathsep.join([str(directory), *filter(None, [old])])
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = old


def free_port() -> int:
    """A TCP port on 127.0.0.1 that is free right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def run_experiment(
    problem: str = "dnnsat.zoo:synthetic_resnet_problem",
    problem_args: Mapping[str, Any] | None = None,
    base_tuner: str = "TPE",
    base_args: Mapping[str, Any] | None = None,
    mode: str = "repair",
    trials: int = 10,
    concurrency: int = 2,
    workdir: str | Path = ".",
    registered_name: str | None = None,
    port: int | None = None,
    timeout: float = 600.0,
) -> dict[str, Any]:
    """Run a local NNI experiment with the DnnSAT tuner and return what happened.

    ``problem`` is an import path (``"module:attr"``); its module is imported here first
    (:func:`problem_code_directory`, ``UserModuleError`` when it fails) and its directory is put
    on the dispatcher's import path. ``registered_name`` uses the tuner by its ``nnictl algo register``
    name instead of its class name. The result has ``status`` (NNI's final experiment status), ``trials``
    (``[{"id", "status", "parameters", "value"}]``), ``dispatcher_log`` (the tuner's log text) and
    ``seconds``. The experiment is stopped before returning; its files stay under
    ``workdir/nni-experiments``.
    """
    from nni.experiment import AlgorithmConfig, CustomAlgorithmConfig, Experiment

    code_dir = problem_code_directory(problem)
    workdir = Path(workdir).resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    space = load_problem(problem, problem_args).space.to_nni()
    class_args: dict[str, Any] = {"problem": problem, "base_tuner": base_tuner, "mode": mode}
    if problem_args:
        class_args["problem_args"] = dict(problem_args)
    if base_args:
        class_args["base_args"] = dict(base_args)

    exp = Experiment("local")
    config = exp.config
    config.experiment_name = "dnnsat-nni-example"
    config.search_space = space
    config.trial_command = f"{sys.executable} -m dnnsat.integrations.nni.example trial"
    config.trial_code_directory = str(workdir)
    config.trial_concurrency = concurrency
    config.max_trial_number = trials
    config.experiment_working_directory = str(workdir / "nni-experiments")
    config.nni_manager_ip = "127.0.0.1"
    if registered_name is not None:
        config.tuner = AlgorithmConfig(name=registered_name, class_args=class_args)
    else:
        config.tuner = CustomAlgorithmConfig(
            class_name="dnnsat.integrations.nni.DnnSATTuner",
            code_directory=str(code_dir or workdir),
            class_args=class_args,
        )
    log_file = workdir / "nni-experiments" / exp.id / "log" / "dispatcher.log"
    start = time.monotonic()
    status = "NOT_STARTED"
    jobs: list[Any] = []
    try:
        with _pythonpath(code_dir):
            exp.start(port or free_port())
        while time.monotonic() - start < timeout:
            status = exp.get_status()
            jobs = exp.list_trial_jobs()
            running = [j for j in jobs if j.status in ("WAITING", "RUNNING", "UNKNOWN")]
            if status in _TERMINAL or (status == "TUNER_NO_MORE_TRIAL" and not running):
                break
            time.sleep(0.5)
        else:
            status = f"TIMEOUT({status})"
        jobs = exp.list_trial_jobs()
    finally:
        exp.stop()
    trials_out = []
    for job in jobs:
        params = job.hyperParameters[0].parameters if job.hyperParameters else None
        value = job.finalMetricData[0].data if job.finalMetricData else None
        if isinstance(value, str):
            value = json.loads(value)
        trials_out.append({"id": job.trialJobId, "status": job.status, "parameters": params, "value": value})
    return {
        "status": status,
        "experiment_id": exp.id,
        "trials": trials_out,
        "dispatcher_log": log_file.read_text() if log_file.exists() else "",
        "seconds": time.monotonic() - start,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m dnnsat.integrations.nni.example", description=__doc__.split("\n")[0]
    )
    parser.add_argument("command", nargs="?", default="run", choices=["run", "trial"])
    parser.add_argument(
        "--problem",
        default="dnnsat.zoo:synthetic_resnet_problem",
        metavar="MODULE:ATTR",
        help="a Problem or a factory of one, importable from the current directory or PYTHONPATH",
    )
    parser.add_argument("--flops-limit", type=float)
    parser.add_argument("--params-limit", type=float)
    parser.add_argument("--base-tuner", default="TPE")
    parser.add_argument("--mode", default="repair", choices=["repair", "reject"])
    parser.add_argument("--trials", type=int, default=10)
    parser.add_argument("--concurrency", type=int, default=2)
    parser.add_argument("--workdir", default="dnnsat-nni-example")
    parser.add_argument("--registered", metavar="NAME", help="use the tuner by its nnictl-registered name")
    parser.add_argument("--json", metavar="FILE", help="write the result as JSON to FILE")
    args = parser.parse_args(argv)
    if args.command == "trial":
        trial()
        return 0
    problem_args = {
        k: v
        for k, v in (("flops_limit", args.flops_limit), ("params_limit", args.params_limit))
        if v is not None
    }
    base_args = {"optimize_mode": "maximize"} if args.base_tuner not in ("Random", "GridSearch") else {}
    try:
        result = run_experiment(
            problem=args.problem,
            problem_args=problem_args,
            base_tuner=args.base_tuner,
            base_args=base_args,
            mode=args.mode,
            trials=args.trials,
            concurrency=args.concurrency,
            workdir=args.workdir,
            registered_name=args.registered,
        )
    except UserModuleError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1, default=repr))
    for t in result["trials"]:
        print(f"{t['id']}  {t['status']:10s}  value={t['value']}  {json.dumps(t['parameters'])}")
    print(f"status {result['status']}, {len(result['trials'])} trials in {result['seconds']:.1f} s")
    return 0 if result["status"] in ("DONE", "TUNER_NO_MORE_TRIAL") else 1


if __name__ == "__main__":
    sys.exit(main())
