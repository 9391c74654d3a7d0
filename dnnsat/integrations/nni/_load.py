"""Loading what ``DnnSATTuner`` wraps: the problem and import paths, from the Python API or from NNI's
dispatcher (``classArgs``), and the NNI 3.0 quirks of the base tuners. (The base tuner itself is created
by ``create_base_tuner`` in ``_tuner``, next to the ``DnnSATTuner`` it must not be.)"""

from __future__ import annotations

import base64
import binascii
import importlib
import json
import logging
import os
import sys
from collections.abc import Mapping
from typing import Any

from nni.utils import ClassArgsValidator

from dnnsat.problem import ArgumentError

__all__ = [
    "MODES",
    "DnnSATClassArgsValidator",
    "adapt_base_args",
    "adapt_space",
    "after_base_generate",
    "load_problem",
    "optimize_mode",
]

_log = logging.getLogger("dnnsat.integrations.nni")

MODES = ("repair", "reject")
OPTIMIZE_MODES = ("maximize", "minimize")


def _experiment_dirs() -> list[str]:
    """Directories where a user's module may live when NNI's dispatcher builds the tuner.

    NNI starts the dispatcher as ``python -m nni --exp_params <base64 JSON>`` in its log directory, so
    neither the user's working directory nor the experiment's code is on ``sys.path``. The candidates are
    the experiment's trial code directory and the tuner's ``codeDirectory`` (both read from
    ``--exp_params``; v2 and v1 config keys), then the current directory.
    """
    dirs: list[str] = []
    argv = sys.argv
    if "--exp_params" in argv[:-1]:
        try:
            params = json.loads(base64.b64decode(argv[argv.index("--exp_params") + 1]).decode("utf-8"))
        except (binascii.Error, UnicodeDecodeError, ValueError):
            params = {}
        params = params if isinstance(params, dict) else {}

        def sub(key: str) -> dict[str, Any]:
            value = params.get(key)
            return value if isinstance(value, dict) else {}

        found = (
            params.get("trialCodeDirectory"),
            sub("trial").get("codeDir"),
            sub("tuner").get("codeDirectory"),
        )
        dirs += [d for d in found if isinstance(d, str) and d]
    dirs.append(os.getcwd())
    return [d for i, d in enumerate(dirs) if os.path.isdir(d) and d not in dirs[:i]]


def _is_module_or_parent(name: str | None, module_name: str) -> bool:
    return name is not None and (module_name == name or module_name.startswith(name + "."))


def _import_module(module_name: str, path: str) -> Any:
    """Import ``module_name``; when that fails for a missing module, retry with the experiment's directories.

    A module that still cannot be found raises a one-line ``ModuleNotFoundError`` that names the import
    path, where it was looked for and the fix (NNI otherwise only reports "Tuner did not connect").
    """
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError:
        pass
    except ImportError as err:
        raise ValueError(f"cannot import module {module_name!r} of {path!r}: {err}") from None
    extra = [d for d in _experiment_dirs() if d not in sys.path]
    sys.path.extend(extra)
    try:
        return importlib.import_module(module_name)
    except ModuleNotFoundError as err:
        for d in extra:
            sys.path.remove(d)
        searched = f"sys.path and {', '.join(extra)}" if extra else "sys.path"
        if _is_module_or_parent(err.name, module_name):
            msg = (
                f"cannot import {path!r}: no module named {err.name!r} (searched {searched}); put the module "
                "in the experiment's trial code directory, install it, or add its directory to PYTHONPATH "
                "where nnictl or the experiment is started"
            )
        else:
            msg = (
                f"cannot import {path!r}: module {module_name!r} imports {err.name!r}, which is not found "
                f"for {sys.executable} (searched {searched}); install it or put it next to {module_name!r}"
            )
        _log.error("DnnSAT: %s", msg)
        raise ModuleNotFoundError(msg, name=err.name) from None
    except ImportError as err:
        raise ValueError(f"cannot import module {module_name!r} of {path!r}: {err}") from None


def _import_attr(path: str) -> Any:
    """Import ``"pkg.module:attr"`` (attr may be dotted) or ``"pkg.module.attr"``."""
    if ":" in path:
        module_name, _, attr = path.partition(":")
    elif "." in path:
        module_name, _, attr = path.rpartition(".")
    else:
        raise ValueError(f"{path!r} is not an import path; write 'pkg.module:attr'")
    obj: Any = _import_module(module_name, path)
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise ValueError(f"module {module_name!r} has no attribute {attr!r} (from {path!r})") from None
    return obj


def _is_problem(obj: Any) -> bool:
    return all(hasattr(obj, a) for a in ("space", "check", "prune", "repair", "is_empty"))


def load_problem(problem: Any, problem_args: Mapping[str, Any] | None = None) -> Any:
    """Resolve a :class:`dnnsat.Problem` from a Problem, a zero-argument factory or an import path.

    ``problem`` may be ``"pkg.module:attr"`` where ``attr`` is a Problem or a factory; ``problem_args``
    are keyword arguments for the factory (e.g. ``{"flops_limit": 1e11}``). A module that is not on
    ``sys.path`` is looked for in the experiment's code directory and the current directory.
    """
    obj = _import_attr(problem) if isinstance(problem, str) else problem
    if not _is_problem(obj) and callable(obj):
        obj = obj(**dict(problem_args or {}))
    elif problem_args:
        raise ValueError(
            "problem_args is only valid when problem is a factory (a callable returning a Problem)"
        )
    if not _is_problem(obj):
        raise TypeError(
            f"problem must be a dnnsat.Problem, a factory returning one, or an import path 'pkg.module:attr' "
            f"to either; got {type(obj).__name__}"
        )
    return obj


def optimize_mode(base: Any, base_args: Mapping[str, Any]) -> str:
    """``"maximize"``/``"minimize"`` as the base tuner sees it (TPE/Anneal/Evolution store ``optimize_mode``,
    GP ``_optimize_mode``, both ``nni.utils.OptimizeMode``); ``"maximize"`` for tuners without one."""
    for value in (
        getattr(base, "optimize_mode", None),
        getattr(base, "_optimize_mode", None),
        base_args.get("optimize_mode"),
    ):
        value = getattr(value, "value", value)
        if value in ("maximize", "minimize"):
            return str(value)
    return "maximize"


# -- NNI 3.0 quirks of the base tuners ---------------------------------------------------------------


def adapt_base_args(base_tuner: Any, base_args: Mapping[str, Any]) -> dict[str, Any]:
    """``base_args`` with the settings a base tuner needs to run with current SciPy and numpy; an
    ``optimize_mode`` other than ``"maximize"``/``"minimize"`` is refused here (NNI's own error names
    neither the argument nor the values it takes)."""
    if not isinstance(base_args, Mapping):
        raise ArgumentError(
            f"DnnSATTuner: base_args must be a dict of the base tuner's arguments "
            f"(e.g. {{'optimize_mode': 'maximize'}}), got {type(base_args).__name__}"
        )
    args = dict(base_args)
    mode = args.get("optimize_mode", "maximize")
    if mode not in OPTIMIZE_MODES:
        raise ArgumentError(
            f"DnnSATTuner: base_args optimize_mode must be one of {list(OPTIMIZE_MODES)}, got {mode!r}"
        )
    # NNI 3.0's GP tuner calls scipy.optimize.minimize with a 2-D x0, which current SciPy rejects;
    # with selection_num_starting_points=0 it maximises the acquisition by random sampling only.
    gp = isinstance(base_tuner, str) and base_tuner.lower() in ("gp", "gptuner")
    if gp and "selection_num_starting_points" not in args:
        args["selection_num_starting_points"] = 0
        _log.warning(
            "GP: selection_num_starting_points set to 0 (NNI 3.0's L-BFGS step fails with "
            "current SciPy); the acquisition is maximised over random samples"
        )
    return args


def adapt_space(base: Any, space: dict[str, Any]) -> dict[str, Any]:
    """The search space as the base tuner can take it."""
    # NNI 3.0's GP samples randint with size=1 arrays, which numpy 2 cannot store in a scalar slot:
    # give it the same integers as a numeric choice.
    if type(base).__name__ == "GPTuner":
        return {
            k: {"_type": "choice", "_value": list(range(int(s["_value"][0]), int(s["_value"][1])))}
            if isinstance(s, Mapping) and s.get("_type") == "randint"
            else s
            for k, s in space.items()
        }
    return space


def after_base_generate(base: Any, base_id: int) -> None:
    """Clean up after the base tuner generated ``base_id``."""
    from ._spaces import plain

    # NNI 3.0's hyperopt wrapper (Anneal, TPE_legacy) keeps numpy scalars from quniform in its
    # history and later compares them with [] (an error with numpy 2): store Python scalars.
    total = getattr(base, "total_data", None)
    if isinstance(total, dict) and base_id in total:
        total[base_id] = plain(total[base_id])


class DnnSATClassArgsValidator(ClassArgsValidator):
    """Validates ``classArgs`` of the registered ``DnnSAT`` tuner (used by ``nnictl`` v1 configs)."""

    _KEYS = {
        "problem": (str,),
        "problem_args": (dict,),
        "base_tuner": (str,),
        "base_args": (dict,),
        "mode": (str,),
        "penalty": (int, float),
        "max_attempts": (int,),
        "dedup": (bool, type(None)),
        "seed": (int,),
        "verify": (str,),
    }

    def validate_class_args(self, **kwargs: Any) -> None:
        if "problem" not in kwargs:
            raise ValueError("DnnSAT classArgs need 'problem': an import path 'pkg.module:attr'")
        for key, value in kwargs.items():
            if key not in self._KEYS:
                raise ValueError(f"DnnSAT classArgs: unknown key {key!r}; known: {sorted(self._KEYS)}")
            if not isinstance(value, self._KEYS[key]) or (key != "dedup" and isinstance(value, bool)):
                raise ValueError(
                    f"DnnSAT classArgs: {key!r} must be {' or '.join(t.__name__ for t in self._KEYS[key])}"
                )
        if kwargs.get("mode", "repair") not in MODES:
            raise ValueError(f"DnnSAT classArgs: mode must be one of {MODES}")
        mode = kwargs.get("base_args", {}).get("optimize_mode", "maximize")
        if mode not in OPTIMIZE_MODES:
            raise ValueError(
                f"DnnSAT classArgs: base_args optimize_mode must be one of {OPTIMIZE_MODES}, got {mode!r}"
            )
