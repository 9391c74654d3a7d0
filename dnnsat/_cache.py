"""The CLI's caches on disk: traced networks (:class:`TraceCache`) and whole problems
(:class:`ProblemCache`), so that a second ``dnnsat`` call on the same model answers without tracing,
or without importing the user's module and PyTorch at all."""

from __future__ import annotations

import hashlib
import json
import os
import pickle
import platform
import sys
import sysconfig
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .problem import Problem

__all__ = ["ProblemCache", "TraceCache", "cache_dir"]


def cache_dir() -> Path:
    """Where traced models are kept: ``$DNNSAT_CACHE_DIR``, else ``$XDG_CACHE_HOME/dnnsat/traces``,
    else ``~/.cache/dnnsat/traces``."""
    if os.environ.get("DNNSAT_CACHE_DIR"):
        return Path(os.environ["DNNSAT_CACHE_DIR"])
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "dnnsat" / "traces"


def _store(folder: Path, path: Path, value: Callable[[], Any]) -> None:
    """Pickle ``value()`` to ``path`` in ``folder``, atomically (a concurrent reader sees the old file or
    the new one); a read-only folder or an unpicklable value leaves no entry: no cache, same answer."""
    try:
        data = pickle.dumps(value(), protocol=pickle.HIGHEST_PROTOCOL)
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=folder, suffix=".tmp", delete=False) as tmp:
            tmp.write(data)
        os.replace(tmp.name, path)
    except Exception:
        pass


class TraceCache:
    """Traced networks on disk, keyed by everything a trace depends on, so that the next ``dnnsat``
    call on the same model answers without tracing again (see :meth:`key`). A file that cannot be read
    back is ignored and rewritten; a folder that cannot be written only costs the next call a trace."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder

    def key(self, model: Any, space: Any) -> str | None:
        """A digest of the model's :meth:`~dnnsat.torch.TorchModel.cache_key` (its builder's source,
        arguments, PyTorch's version), the space, the Python and dnnsat versions, dnnsat's own source
        when it is not installed in site-packages, and the content of every other imported module
        outside the standard library and site-packages (the user's code). ``None``: do not cache."""
        model_key = model.cache_key() if callable(getattr(model, "cache_key", None)) else None
        if model_key is None:
            return None
        try:
            space_text = json.dumps(space.to_dict(), sort_keys=True, default=repr)
        except Exception:  # a space without a dict form: its repr names every parameter
            space_text = repr(space)
        digest = hashlib.sha256()
        for part in (model_key, space_text, sys.version, _dnnsat_version()):
            digest.update(part.encode() + b"\0")
        for path in _user_files():
            digest.update(str(path).encode() + b"\0")
            try:
                digest.update(path.read_bytes())
            except OSError:
                return None
        return digest.hexdigest()

    def __call__(self, model: Any, space: Any, trace: Callable[[], Any]) -> Any:
        """The stored network of ``model`` over ``space``, or ``trace()`` (then stored)."""
        from .graph import Network

        key = self.key(model, space)
        if key is None:
            return trace()
        path = self.folder / f"{key}.pickle"
        try:
            net = pickle.loads(path.read_bytes())
            if isinstance(net, Network):
                if callable(getattr(model, "use_network", None)):
                    model.use_network(space, net)
                return net
        except Exception:  # missing, truncated or from an incompatible version: trace and rewrite
            pass
        net = trace()
        _store(self.folder, path, lambda: net)
        return net


class ProblemCache:
    """Problems of ``module:attr`` specs on disk, so that the next call on an unchanged module answers
    without importing it, nor what it imports (PyTorch: 1.5 s and more).

    An entry is found by the spec, the module's file (found without importing it) and its content, the
    Python and dnnsat versions and what CPU costs read of the machine (its CPU flags, the variables
    that limit PyTorch's CPU kernels); it is used only when every source file the first call had imported
    outside the standard library and site-packages (the module, its helpers, dnnsat's own source in a
    checkout) has the same content, and every installed package it had imported the same files
    (modification time and size of each package's ``__init__``). A problem that cannot be pickled (a
    lambda predicate) is not stored; an entry that cannot be read back is ignored and rewritten.
    """

    def __init__(self, folder: Path) -> None:
        self.folder = folder

    def path(self, spec: str) -> Path | None:
        """Where the entry of ``spec`` lives; ``None`` when its module's file cannot be found."""
        module_file = _module_file(spec.split(":", 1)[0])
        if module_file is None:
            return None
        digest = hashlib.sha256()
        for part in (spec, sys.version, _dnnsat_version(), _cpu_inputs(), str(module_file)):
            digest.update(part.encode() + b"\0")
        try:
            digest.update(module_file.read_bytes())
        except OSError:
            return None
        return self.folder / f"{digest.hexdigest()}.pickle"

    def load(self, spec: str) -> Problem | None:
        """The stored problem of ``spec`` when everything it was built from is unchanged."""
        path = self.path(spec)
        try:
            if path is None:
                return None
            entry = pickle.loads(path.read_bytes())
            if entry["files"] != _file_digests([Path(f) for f, _ in entry["files"]]):
                return None
            if entry["installed"] != _installed_stamps([Path(f) for f, *_ in entry["installed"]]):
                return None
            problem = pickle.loads(entry["problem"])
        except Exception:  # missing, truncated or from an incompatible version: build it again
            return None
        return problem if isinstance(problem, Problem) else None

    def store(self, spec: str, problem: Problem) -> None:
        """Keep ``problem`` for ``spec`` (after the module was imported); quietly nothing on failure."""
        path = self.path(spec)
        if path is None:
            return
        _store(
            self.folder,
            path,
            lambda: {
                "files": _file_digests(_user_files()),
                "installed": _installed_stamps(_installed_files()),
                "problem": pickle.dumps(problem, protocol=pickle.HIGHEST_PROTOCOL),
            },
        )


def _cpu_inputs() -> str:
    """What a problem's CPU costs read of this machine without PyTorch (``dnnsat.cost._cpu_backend``):
    the architecture, the CPU's flags and the variables that limit PyTorch's CPU kernels."""
    from .cost._cpu_backend import _cpu_flags

    limits = [
        f"{v}={os.environ.get(v, '')}"
        for v in ("ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA", "ATEN_CPU_CAPABILITY")
    ]
    return " ".join([platform.machine(), *sorted(_cpu_flags() or ()), *limits])


def _module_file(module_name: str) -> Path | None:
    """The file of ``module_name`` as :func:`import_user_module` would find it (the current directory
    first), without importing it or its packages."""
    from importlib.machinery import PathFinder

    search: list[str] | None = [os.getcwd(), *sys.path]
    spec = None
    parts = module_name.split(".")
    for i in range(len(parts)):
        spec = PathFinder.find_spec(".".join(parts[: i + 1]), search)
        if spec is None:
            return None
        search = list(spec.submodule_search_locations or [])
    if spec is None or not spec.has_location or not spec.origin:
        return None
    return Path(spec.origin)


def _file_digests(paths: list[Path]) -> list[tuple[str, str | None]]:
    """``(path, sha256 of its content)`` of each file (``None``: unreadable)."""
    out: list[tuple[str, str | None]] = []
    for path in paths:
        try:
            out.append((str(path), hashlib.sha256(path.read_bytes()).hexdigest()))
        except OSError:
            out.append((str(path), None))
    return out


def _installed_paths() -> tuple[str, ...]:
    """The standard library's and site-packages' folders."""
    return tuple(
        str(Path(p).resolve())
        for k in ("stdlib", "platstdlib", "purelib", "platlib")
        if (p := sysconfig.get_paths().get(k))
    )


def _installed_files() -> list[Path]:
    """The file of each imported top-level module installed in site-packages (a package's
    ``__init__``): what a new version of an installed package changes."""
    site = tuple(
        str(Path(p).resolve()) for k in ("purelib", "platlib") if (p := sysconfig.get_paths().get(k))
    )
    files = set()
    for name, module in list(sys.modules.items()):
        file = getattr(module, "__file__", None)
        if "." in name or not isinstance(file, str) or not os.path.isabs(file):
            continue
        path = Path(file).resolve()
        if str(path).startswith(site):
            files.add(path)
    return sorted(files)


def _installed_stamps(paths: list[Path]) -> list[tuple[str, int, int]]:
    """``(path, modification time in ns, size in bytes)`` of each file (``-1, -1``: missing)."""
    out = []
    for path in paths:
        try:
            st = path.stat()
            out.append((str(path), st.st_mtime_ns, st.st_size))
        except OSError:
            out.append((str(path), -1, -1))
    return out


def _dnnsat_version() -> str:
    from . import __version__

    return __version__


def _user_files() -> list[Path]:
    """The source files the answer may depend on besides the installed packages: dnnsat's own when it
    is not installed in site-packages (a checkout), and every imported module outside the standard
    library and site-packages (the user's PROBLEM module and what it imports)."""
    installed = _installed_paths()
    package = Path(__file__).resolve().parent
    files = set() if str(package).startswith(installed) else set(package.rglob("*.py"))
    for module in list(sys.modules.values()):
        name = getattr(module, "__file__", None)  # (torch.ops and torch.classes: a bare "_ops.py")
        if not isinstance(name, str) or not name.endswith(".py") or not os.path.isabs(name):
            continue
        path = Path(name).resolve()
        if not str(path).startswith(installed) and package not in path.parents and path.is_file():
            files.add(path)
    return sorted(files)
