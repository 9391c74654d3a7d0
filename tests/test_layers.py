"""The package's architecture as tests: an acyclic import graph, and one trial's path going down the layers.

The layers themselves (each package imports only packages below it) are import-linter's contract in
pyproject.toml (`lint-imports`, run by `make lint`); these tests add what a layer contract cannot see.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from pathlib import Path
from types import FrameType
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1] / "dnnsat"
#: bottom first, as in pyproject.toml's import-linter contract
LAYERS = ["units", "expr", "space", "graph", "solver", "cost", "problem", "guard", "torch", "zoo"]
LAYERS += ["integrations", "_cache", "cli", "demo"]


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _runtime_imports(tree: ast.AST) -> Iterator[ast.Import | ast.ImportFrom]:
    """Every import statement, at any depth (lazy ones too), except under ``if TYPE_CHECKING:``."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for child in node.orelse:
                yield from _runtime_imports(child)
            continue
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        yield from _runtime_imports(node)


def import_graph() -> dict[str, set[str]]:
    """dnnsat's modules and the dnnsat modules each imports (a package stands for its ``__init__``)."""
    paths = {_module_name(p): p for p in ROOT.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in paths.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        targets: set[str] = set()
        for node in _runtime_imports(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                candidates = [a.name for a in node.names]
            else:
                base = node.module or ""
                if node.level:
                    up = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join(up + ([node.module] if node.module else []))
                candidates = [f"{base}.{a.name}" if f"{base}.{a.name}" in paths else base for a in node.names]
            for target in candidates:
                while target and target not in paths:
                    target = target.rpartition(".")[0]
                if target and target != name:
                    targets.add(target)
        graph[name] = targets
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_cycle_finder_finds_a_cycle() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycles() -> None:
    graph = import_graph()
    assert "dnnsat.integrations.optuna" in graph and "dnnsat.expr" in graph
    assert cycles(graph) == []


def test_every_package_is_a_layer() -> None:
    top = {name.split(".")[1] for name in import_graph() if name.count(".") >= 1}
    assert top == set(LAYERS), "a new package or module at the root needs a place in LAYERS and pyproject"


def test_no_module_over_900_lines() -> None:
    catalog = ROOT / "graph" / "_catalog.py"  # one entry per op: long by design
    lines = {str(p.relative_to(ROOT)): len(p.read_text().splitlines()) for p in ROOT.rglob("*.py")}
    assert {name: n for name, n in lines.items() if n > 900 and ROOT / name != catalog} == {}


def test_package_inits_only_reexport() -> None:
    for init in ROOT.rglob("__init__.py"):
        if init.parent == ROOT:
            continue  # the root also holds the lazy `from_torch` and `__getattr__`
        for node in ast.parse(init.read_text()).body:
            ok = isinstance(node, (ast.Import, ast.ImportFrom)) or (
                isinstance(node, (ast.Expr, ast.Assign, ast.AnnAssign)) and _is_docstring_or_all(node)
            )
            assert ok, f"{init.relative_to(ROOT)}:{node.lineno} is more than a re-export"


def _is_docstring_or_all(node: ast.stmt) -> bool:
    if isinstance(node, ast.Expr):
        return isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)
    targets = node.targets if isinstance(node, ast.Assign) else [node.target]
    return all(isinstance(t, ast.Name) and t.id == "__all__" for t in targets)


def _layer(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if parts[0] == "dnnsat" and len(parts) > 1 else None


def test_one_optuna_trial_goes_down_the_layers_and_returns_once() -> None:
    """Every call from one dnnsat package into another during one trial goes down the layers."""
    optuna = pytest.importorskip("optuna")
    import dnnsat as ds
    from dnnsat.integrations.optuna import DnnSATSampler, suggest

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    problem = ds.zoo.get("gpt")(budget=ds.Budget(device="a100_40gb", memory="20GiB"))
    study = optuna.create_study(sampler=DnnSATSampler(problem, optuna.samplers.TPESampler(seed=1), seed=1))
    for _ in range(3):  # past the first trials, so TPE's relative sampling runs too
        trial = study.ask()
        study.tell(trial, float(len(str(suggest(trial, problem)))))
    calls: list[tuple[str, str, str]] = []

    def record(frame: FrameType, event: str, arg: Any) -> None:
        if event == "call" and frame.f_back is not None:
            calls.append(
                (
                    frame.f_back.f_globals.get("__name__", ""),
                    frame.f_globals.get("__name__", ""),
                    frame.f_code.co_name,
                )
            )

    sys.setprofile(record)
    try:
        trial = study.ask()
        suggest(trial, problem)
    finally:
        sys.setprofile(None)
    study.tell(trial, 1.0)
    visited = {_layer(callee) for _, callee, _ in calls} - {None}
    assert visited == {"integrations", "guard", "problem", "solver", "expr", "space"}
    climbs = [
        f"{caller} -> {callee}.{name}"
        for caller, callee, name in calls
        if _layer(caller) and _layer(callee) and LAYERS.index(_layer(callee)) > LAYERS.index(_layer(caller))
    ]
    assert climbs == []
