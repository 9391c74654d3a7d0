"""Importing a user's module by name (the CLI's `mymodule:problem`, the NNI example), with one-line errors."""

from __future__ import annotations

import importlib
import os
import sys
import traceback
from pathlib import Path
from types import ModuleType

__all__ = ["UserModuleError", "import_user_module", "one_line"]


def one_line(err: BaseException, *skip: str) -> str:
    """``Type: message (file.py, line N)``: the error and where it was raised, on one line.

    The place is the innermost frame outside this module, the import machinery and the files in ``skip``.
    """
    text = " ".join(str(err).split()) or "(no message)"
    where = ""
    if not isinstance(err, SyntaxError):  # its message already names the file and line
        ours = (__file__, os.path.dirname(importlib.__file__), *skip)
        frames = [
            f
            for f in traceback.extract_tb(err.__traceback__)
            if not f.filename.startswith("<") and not f.filename.startswith(ours)
        ]
        if frames:
            where = f" ({Path(frames[-1].filename).name}, line {frames[-1].lineno})"
    return f"{type(err).__name__}: {text}{where}"


class UserModuleError(ImportError):
    """A user's module failed to import; the message is one line, the original error is ``__cause__``."""


def import_user_module(module_name: str, spec: str) -> ModuleType:
    """Import ``module_name`` (for ``spec``, e.g. ``"PROBLEM mymodule:problem"``): current directory first.

    Any exception raised while importing becomes a :class:`UserModuleError` naming the module, the error
    and the file and line that raised it, so a broken module costs the user one line, not a traceback.
    """
    cwd = os.getcwd()
    sys.path.insert(0, cwd)
    try:
        return importlib.import_module(module_name)
    except Exception as err:  # anything the user's module raises while it runs
        hint = ""
        if isinstance(err, ModuleNotFoundError) and err.name == module_name.split(".")[0]:
            hint = " (looked in the current directory and on PYTHONPATH)"
        raise UserModuleError(
            f"cannot import module {module_name!r} ({spec}): {one_line(err)}{hint}"
        ) from err
    finally:
        sys.path.remove(cwd)
