"""The ``dnnsat`` command: check, prune, count, sample and explain configurations of a problem.

PROBLEM is ``module:attr`` (a Problem or a zero-argument factory returning one) or ``zoo:NAME``.
Exit codes (:data:`EXIT_CODES`): 0 ok / feasible, 1 infeasible or empty space, 2 usage or input error
(including a PROBLEM module that fails to import), 3 not answered within the limits (``count`` over
``--max-time``), 4 unexpected error. Errors are one line; ``--debug`` (or ``DNNSAT_DEBUG=1``)
adds the Python traceback.
"""

from __future__ import annotations

import json
import os
import sys
import traceback
from collections.abc import Callable, Mapping
from contextlib import nullcontext
from pathlib import Path
from typing import Any, NoReturn

import click
from rich.console import Console, ConsoleDimensions
from rich.table import Table

from ._cache import ProblemCache, TraceCache, cache_dir
from .problem import InfeasibleSpaceError, Problem, TimeLimitError
from .problem._user_module import UserModuleError, import_user_module, one_line
from .space import SpaceError
from .units import cost_kind, format_quantity

PIPED_WIDTH = 10_000  # columns of output to a pipe or a file: nothing is cut or wrapped


class _Console(Console):
    """A rich Console that fits its terminal and, writing to a pipe or a file, never cuts or wraps."""

    def _size(self) -> ConsoleDimensions:
        size = Console.size.fget(self)  # type: ignore[attr-defined]
        return size if self.is_terminal else ConsoleDimensions(PIPED_WIDTH, size.height)

    size = property(_size, Console.size.fset)  # type: ignore[assignment,attr-defined]


console = _Console()
err_console = _Console(stderr=True)


EXIT_CODES = {
    0: "ok / feasible",
    1: "infeasible configuration or empty feasible space",
    2: "usage or input error (bad PROBLEM, module import failure, bad --set/--budget/--out)",
    3: "not answered within the limits (count over --max-time: use --estimate)",
    4: "unexpected error (rerun with --debug for the traceback)",
}
DEFAULT_MAX_TIME = 60.0  # seconds, `dnnsat count --max-time`
_DEBUG_KEY = "dnnsat.debug"
_NO_CACHE_KEY = "dnnsat.no_cache"


def _flag(key: str, env: str) -> bool:
    """Whether the flag stored under ``key`` was given (anywhere on the command line) or ``env`` is set."""
    ctx = click.get_current_context(silent=True)
    if ctx is not None and ctx.meta.get(key):
        return True
    return os.environ.get(env, "") not in ("", "0")


def _debug() -> bool:
    """``--debug`` or ``DNNSAT_DEBUG``."""
    return _flag(_DEBUG_KEY, "DNNSAT_DEBUG")


def _traceback_hint() -> str:
    return "" if _debug() else "; --debug shows the traceback"


class CliError(click.ClickException):
    """A one-line error; ``--debug`` adds the traceback of its cause. Exit codes: :data:`EXIT_CODES`."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.debug = _debug()

    def show(self, file: Any = None) -> None:
        if self.debug and self.__cause__ is not None:
            traceback.print_exception(self.__cause__, file=sys.stderr)
        super().show(file)


class InputError(CliError):
    """A usage or input error: printed without a traceback, exit code 2."""

    exit_code = 2


class NotAnsweredError(CliError):
    """The question is too big for the limits given (exit code 3)."""

    exit_code = 3


class UnexpectedError(CliError):
    """Any other exception (exit code 4)."""

    exit_code = 4


def _one_line(err: BaseException) -> str:
    """``Type: message (file.py, line N)``: the error and where it was raised (outside this module)."""
    return one_line(err, __file__)


def load_problem(spec: str, budget: str | None = None) -> Problem:
    """Resolve ``module:attr`` or ``zoo:NAME`` (with an optional ``--budget`` string) to a Problem."""
    if spec.startswith("zoo:"):
        return _zoo_problem(spec[4:], budget)
    if ":" not in spec:
        raise InputError(f"PROBLEM {spec!r} must be 'module:attr' (e.g. mypkg.search:problem) or 'zoo:NAME'")
    if budget:
        raise InputError("--budget applies to zoo:NAME problems only; put the budget in your Problem")
    module_name, attr = spec.split(":", 1)
    problems = None if _cache_disabled() else ProblemCache(cache_dir() / "problems")
    cached = None if problems is None else problems.load(spec)
    if cached is not None:  # neither the module nor PyTorch is imported
        return cached
    with _trace_cache():  # a traced model (ds.from_torch) is traced once per source, space and version
        try:
            obj: Any = import_user_module(module_name, f"PROBLEM {spec}")
        except UserModuleError as err:
            raise InputError(str(err) + _traceback_hint()) from err.__cause__
        for part in attr.split("."):
            if not hasattr(obj, part):
                raise InputError(f"{module_name!r} has no attribute {attr!r} (PROBLEM {spec!r})")
            obj = getattr(obj, part)
        if not isinstance(obj, Problem) and callable(obj):
            try:
                obj = obj()
            except Exception as err:
                raise InputError(
                    f"PROBLEM {spec!r}: calling {attr}() failed: {_one_line(err)}" + _traceback_hint()
                ) from err
    if not isinstance(obj, Problem):
        raise InputError(
            f"PROBLEM {spec!r} is a {type(obj).__name__}, not a dnnsat.Problem or a factory of one"
        )
    if problems is not None:
        problems.store(spec, obj)
    return obj


def _cache_disabled() -> bool:
    """``--no-cache`` or ``DNNSAT_NO_CACHE``."""
    return _flag(_NO_CACHE_KEY, "DNNSAT_NO_CACHE")


def _trace_cache() -> Any:
    """The on-disk trace cache for the block (a no-op under ``--no-cache`` / ``DNNSAT_NO_CACHE=1``)."""
    if _cache_disabled():
        return nullcontext()
    from .cost._attach import network_store

    return network_store(TraceCache(cache_dir()))


def _parse_budget(text: str | None) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in filter(None, (text or "").split(",")):
        if "=" not in item:
            raise InputError(f"--budget item {item!r} must be name=value, e.g. params=25M,flops=4G")
        k, v = item.split("=", 1)
        out[k.strip()] = v.strip()
    return out


def _zoo_problem(name: str, budget: str | None) -> Problem:
    limits = _parse_budget(budget)
    if name == "synthetic_resnet":
        from .units import parse_quantity
        from .zoo import synthetic_resnet_problem

        unknown = set(limits) - {"flops", "params"}
        if unknown:
            raise InputError(
                f"zoo:synthetic_resnet takes --budget flops=...,params=... (not {sorted(unknown)})"
            )
        kwargs = {}
        if "flops" in limits:
            kwargs["flops_limit"] = float(parse_quantity(limits["flops"], "flops"))
        if "params" in limits:
            kwargs["params_limit"] = float(parse_quantity(limits["params"], "count"))
        return synthetic_resnet_problem(**kwargs)
    from .zoo import _registry

    try:
        return _registry.problem_from_spec(name, budget)  # type: ignore[no-any-return]
    except KeyError:
        names = ["synthetic_resnet", *sorted(_registry.REGISTRY)]
        raise InputError(f"unknown zoo problem {name!r}; available: {', '.join(names)}") from None


def _parse_value(text: str) -> Any:
    low = text.lower()
    if low in ("true", "false"):
        return low == "true"
    if low in ("none", "null"):
        return None
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    return text


def _config(items: tuple[str, ...]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for item in items:
        if "=" not in item:
            raise InputError(f"--set {item!r} must be name=value")
        k, v = item.split("=", 1)
        out[k.strip()] = _parse_value(v.strip())
    return out


def _run(fn: Callable[[], int]) -> NoReturn:
    """Run a command body and exit with its code; errors become one line (exit codes: :data:`EXIT_CODES`)."""
    try:
        code = fn()
    except click.ClickException:
        raise
    except (SpaceError, ValueError, TypeError) as err:
        raise InputError(" ".join(str(err).split())) from err
    except TimeoutError as err:
        raise NotAnsweredError(" ".join(str(err).split())) from err
    except Exception as err:
        raise UnexpectedError(f"unexpected error: {_one_line(err)}" + _traceback_hint()) from err
    sys.exit(code)


def _set_debug(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    if value:
        ctx.meta[_DEBUG_KEY] = True


def debug_opt(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``--debug``: show Python tracebacks behind one-line errors (accepted before or after the command)."""
    return click.option(
        "--debug",
        is_flag=True,
        expose_value=False,
        is_eager=True,
        callback=_set_debug,
        help="show the Python traceback of an error (also: DNNSAT_DEBUG=1)",
    )(fn)


def _set_no_cache(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    if value:
        ctx.meta[_NO_CACHE_KEY] = True


def no_cache_opt(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``--no-cache``: import the PROBLEM module and trace a ``ds.from_torch`` model again instead of
    reading the problem and trace caches."""
    return click.option(
        "--no-cache",
        is_flag=True,
        expose_value=False,
        is_eager=True,
        callback=_set_no_cache,
        help="import the PROBLEM module and trace its ds.from_torch model again, ignoring the caches "
        "(also: DNNSAT_NO_CACHE=1)",
    )(fn)


def _emit(as_json: bool, data: Any, render: Callable[[], None]) -> None:
    if as_json:
        click.echo(json.dumps(data, indent=2, default=_jsonable))
    else:
        render()


def _jsonable(x: Any) -> Any:
    if hasattr(x, "item"):
        return x.item()
    return str(x)


problem_arg = click.argument("problem")
budget_opt = click.option("--budget", default=None, help="zoo budgets, e.g. params=25M,flops=4G")
json_opt = click.option("--json", "as_json", is_flag=True, help="machine-readable output")
set_opt = click.option(
    "--set", "items", multiple=True, metavar="NAME=VALUE", help="a parameter value (repeat)"
)


# what the exact value is in, by quantity kind (a share is a fraction of 1: 0.25 is 25 %)
_BASE_UNITS = {"count": "", "flops": " FLOPs", "bytes": " B", "time": " s", "share": ""}
_UNIT_NAMES = {"count": "count", "flops": "FLOPs", "bytes": "B", "time": "s", "share": "share"}


def cost_units(costs: Mapping[str, Any]) -> dict[str, str | None]:
    """The unit of each cost's raw value (``"s"``, ``"B"``, ``"FLOPs"``, ``"count"``, ``"share"``: a
    fraction of 1; None: no unit)."""
    return {k: _UNIT_NAMES[kind] if (kind := cost_kind(k)) else None for k in costs}


def _costs_table(costs: Mapping[str, Any]) -> Table:
    """Costs with their units: a readable value (``1.36 ms``, ``442 KiB``) and the exact one in the
    base unit (``0.00136088 s``); a cost of no known kind (a custom ``add_cost``) says ``(no unit)``."""
    t = Table("cost", "value", "exact")
    for k, val in costs.items():
        exact = f"{val:,}" if isinstance(val, int) else f"{val:.6g}"
        kind = cost_kind(k)
        if kind is None:
            t.add_row(k, exact, "(no unit)")
        else:
            t.add_row(k, format_quantity(val, kind), exact + _BASE_UNITS[kind])
    return t


@click.group(
    context_settings={"help_option_names": ["-h", "--help"]},
    epilog="Exit codes: " + "; ".join(f"{code} {meaning}" for code, meaning in EXIT_CODES.items()) + ".",
)
@click.version_option(package_name="dnnsat")
@debug_opt
@no_cache_opt
def main() -> None:
    """Prune AutoML search spaces before any trial runs."""


@main.command()
@debug_opt
@no_cache_opt
@problem_arg
@budget_opt
@set_opt
@json_opt
def check(problem: str, budget: str | None, items: tuple[str, ...], as_json: bool) -> None:
    """Is a configuration feasible? Lists violations and costs (exit 1 when infeasible)."""

    def run() -> int:
        p = load_problem(problem, budget)
        verdict = p.check(_config(items))
        data = {
            "feasible": verdict.feasible,
            "violations": [v.__dict__ for v in verdict.violations],
            "costs": verdict.costs,
            "units": cost_units(verdict.costs),
        }

        def render() -> None:
            mark = "[green]feasible[/]" if verdict.feasible else "[red]infeasible[/]"
            console.print(f"configuration is {mark}")
            for v in verdict.violations:
                console.print(f"  [red]✗[/] {v}")
            if verdict.costs:
                console.print(_costs_table(verdict.costs))

        _emit(as_json, data, render)
        return 0 if verdict.feasible else 1

    _run(run)


@main.command()
@debug_opt
@no_cache_opt
@problem_arg
@budget_opt
@json_opt
def prune(problem: str, budget: str | None, as_json: bool) -> None:
    """The reduced space: every value that occurs in some feasible configuration."""

    def run() -> int:
        p = load_problem(problem, budget)
        try:
            pruned = p.prune()
        except InfeasibleSpaceError as err:
            message, core = str(err), err.core
            _emit(as_json, {"empty": True, "core": core}, lambda: console.print(f"[red]{message}[/]"))
            return 1
        data = {
            name: list(pruned[name].values()) if pruned[name].is_finite else list(pruned[name].bounds())
            for name in pruned
        }

        def render() -> None:
            t = Table("parameter", "before", "after", "kept")
            for name in p.space:
                before = p.space[name]
                if name not in pruned:
                    t.add_row(name, _describe(before), "(never active)", "0")
                    continue
                after = pruned[name]
                kept = f"{len(after.values())}/{len(before.values())}" if before.is_finite else "-"
                t.add_row(name, _describe(before), _describe(after), kept)
            console.print(t)
            console.print(f"space size {p.space.size():,} → {pruned.size():,}")

        _emit(as_json, data, render)
        return 0

    _run(run)


def _describe(param: Any) -> str:
    if not param.is_finite:
        lo, hi = param.bounds()
        return f"[{lo:g}, {hi:g}]"
    vals = list(param.values())
    if len(vals) > 8:
        return f"{vals[0]}, {vals[1]}, …, {vals[-1]} ({len(vals)})"
    return ", ".join(map(str, vals))


@main.command()
@debug_opt
@no_cache_opt
@problem_arg
@budget_opt
@click.option("--estimate", is_flag=True, help="estimate with a 95% confidence interval instead of counting")
@click.option(
    "--max-time",
    type=click.FloatRange(min=0.0),
    default=DEFAULT_MAX_TIME,
    show_default=True,
    metavar="SECONDS",
    help="refuse an exact count predicted to take longer, stop one that does (exit 3); 0: no limit",
)
@json_opt
def count(problem: str, budget: str | None, estimate: bool, max_time: float, as_json: bool) -> None:
    """Number of feasible configurations: exact, or --estimate (exit 1 when nothing is feasible).

    An exact count is refused at once (exit 3) when its predicted work exceeds --max-time, and stopped
    when it runs past it: use --estimate then.
    """

    def run() -> int:
        p = load_problem(problem, budget)
        total = p.space.size()
        if estimate:
            e = p.estimate_count()
            data = {"estimate": e.value, "low": e.low, "high": e.high, "exact": e.exact, "space": total}
            _emit(
                as_json,
                data,
                lambda: console.print(
                    f"≈ {e.value:,.0f} feasible (95% CI {e.low:,.0f} – {e.high:,.0f}) of {total:,} "
                    f"({e.value / total:.3%})"
                ),
            )
            return 1 if e.high == 0 else 0
        try:  # a count predicted to take longer than --max-time is refused at once, one that does is stopped
            n = p.count(progress=None if not as_json else False, max_seconds=max_time or None)
        except TimeLimitError as err:
            # the work predicted or done and the estimate, without the library's own advice
            reason = str(err).split(": use estimate_count()")[0].replace(f" (max_seconds={err.limit:g})", "")
            raise NotAnsweredError(
                f"exact count of {problem} not answered within --max-time {max_time:g} s: {reason}; use "
                "--estimate for a 95% confidence interval in seconds, or raise --max-time (0: no limit)"
            ) from err
        _emit(
            as_json,
            {"count": n, "space": total},
            lambda: console.print(f"{n:,} feasible of {total:,} ({n / total:.3%})"),
        )
        if n == 0:
            err_console.print("the feasible space is empty: `dnnsat prune` names the conflicting constraints")
        return 1 if n == 0 else 0

    _run(run)


@main.command()
@debug_opt
@no_cache_opt
@problem_arg
@budget_opt
@click.option("-n", "n", default=5, show_default=True, help="number of configurations")
@click.option("--seed", default=None, type=int, help="random seed")
@json_opt
def sample(problem: str, budget: str | None, n: int, seed: int | None, as_json: bool) -> None:
    """Feasible configurations drawn uniformly."""

    def run() -> int:
        p = load_problem(problem, budget)
        try:
            configs = p.sample(n, seed=seed)
        except InfeasibleSpaceError as err:
            message, core = str(err), err.core
            _emit(as_json, {"empty": True, "core": core}, lambda: console.print(f"[red]{message}[/]"))
            return 1

        def render() -> None:
            if not configs:
                return
            t = Table(*configs[0].keys())
            for c in configs:
                t.add_row(*(f"{v:.4g}" if isinstance(v, float) else str(v) for v in c.values()))
            console.print(t)

        _emit(as_json, configs, render)
        return 0

    _run(run)


@main.command()
@debug_opt
@no_cache_opt
@problem_arg
@budget_opt
@set_opt
@json_opt
def explain(problem: str, budget: str | None, items: tuple[str, ...], as_json: bool) -> None:
    """Why a configuration is infeasible: a minimal core of its values, and a repair."""

    def run() -> int:
        p = load_problem(problem, budget)
        cfg = _config(items)
        expl = p.explain(cfg)
        if expl is None:
            _emit(
                as_json, {"feasible": True}, lambda: console.print("[green]feasible[/]: nothing to explain")
            )
            return 0
        fix = p.repair(cfg)
        costs = p.costs(cfg) if p.cost_exprs else {}
        blamed = {name.split(":")[0] for name in expl.constraints}  # "memory" -> all memory_* components
        shown = {k: v for k, v in costs.items() if k in blamed or any(k.startswith(b + "_") for b in blamed)}
        data = {
            "feasible": False,
            "core": expl.core,
            "constraints": expl.constraints,
            "sentence": expl.sentence,
            "repair": fix,
            "costs": costs,
            "units": cost_units(costs),
        }

        def render() -> None:
            console.print(f"[red]infeasible[/]: {expl.sentence}")
            if fix is not None:
                changes = {k: (cfg.get(k), v) for k, v in fix.items() if cfg.get(k) != v}
                console.print(
                    "nearest feasible change: "
                    + ", ".join(f"{k}: {a} → {b}" for k, (a, b) in changes.items())
                )
            if shown:
                console.print(_costs_table(shown))

        _emit(as_json, data, render)
        return 1

    _run(run)


@main.command()
@debug_opt
@no_cache_opt
@problem_arg
@budget_opt
@click.option(
    "-n", "n", default=100, show_default=True, help="number of random configurations (valid and invalid)"
)
@click.option("--seed", default=0, show_default=True, help="random seed")
@click.option("--fast", is_flag=True, help="check op by op (cached) instead of whole modules")
@json_opt
def audit(problem: str, budget: str | None, n: int, seed: int, fast: bool, as_json: bool) -> None:
    """Compare every symbolic cost and the validity verdict with PyTorch (exit 1 on a validity mismatch)."""

    def run() -> int:
        p = load_problem(problem, budget)
        if getattr(p, "network", None) is None:
            raise InputError(f"PROBLEM {problem!r} has no symbolic network (give Problem a model=)")
        try:
            from .torch import audit as run_audit
            from .torch import audit_table
        except ImportError as err:
            raise InputError(f"dnnsat audit needs PyTorch: pip install 'dnnsat[torch]' ({err})") from None
        with console.status(f"materializing and measuring {n} configurations on the meta device"):
            report = run_audit(p, n=n, seed=seed, by_op=fast)
        data = {
            "n": report.n,
            "precision": report.precision,
            "recall": report.recall,
            "costs": {
                k: {"exact": c.exact, "n": c.n, "max_rel_error": c.max_rel_error}
                for k, c in report.costs.items()
            },
        }

        def render() -> None:
            console.print(audit_table(report))
            console.print(report.summary())

        _emit(as_json, data, render)
        return 0 if report.precision == 1.0 and report.recall == 1.0 else 1

    _run(run)


def _si(value: float, unit: str) -> str:
    for factor, prefix in ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if value >= factor:
            return f"{value / factor:.3g} {prefix}{unit}"
    return f"{value:.3g} {unit}"


@main.command()
@debug_opt
@json_opt
def devices(as_json: bool) -> None:
    """List the device catalog (peak FLOP/s, bandwidth, memory, launch overhead) used by latency/memory."""
    from .cost._devices import list_devices

    profiles = list_devices()
    data = [p.to_dict() for p in profiles]

    def render() -> None:
        t = Table()
        for col in ("name", "kind", "fp32", "fp16/bf16 tensor", "bandwidth", "memory", "launch"):
            t.add_column(col, no_wrap=col == "name")
        for p in profiles:
            tensor = [v for k, v in p.peak_flops.items() if k in ("fp16_tensor", "bf16_tensor")]
            half = max(tensor, default=None)
            t.add_row(
                p.name,
                p.kind,
                _si(p.peak_flops["fp32"], "FLOP/s"),
                _si(half, "FLOP/s") if half else "-",
                _si(p.memory_bandwidth, "B/s"),
                f"{p.memory_bytes / 2**30:.0f} GiB",
                f"{p.launch_overhead_s * 1e6:.0f} µs",
            )
        console.print(t)
        console.print("Sources for every number: dnnsat devices --json (field 'sources').")

    _emit(as_json, data, render)


def _check_output_file(path: str, option: str) -> None:
    """Fail fast (exit 2) unless ``path`` can be written as a file: its directory exists and is writable."""
    target = Path(path)
    if target.is_dir():
        example = target / "profile.json"
        raise InputError(f"{option} {path!r} is a directory; give a file name, e.g. {str(example)!r}")
    folder = target.parent
    if not folder.is_dir():
        raise InputError(f"{option} {path!r}: directory {str(folder)!r} does not exist (create it first)")
    if target.exists() and not os.access(target, os.W_OK):
        raise InputError(f"{option} {path!r} exists and is not writable")
    if not target.exists() and not os.access(folder, os.W_OK | os.X_OK):
        raise InputError(f"{option} {path!r}: directory {str(folder)!r} is not writable")


@main.command()
@debug_opt
@click.option("--out", default=None, metavar="PATH", help="write the profile JSON here (e.g. my-cpu.json)")
@click.option("--device", "device", default="cpu", show_default=True, help="'cpu' or 'cuda[:i]'")
@click.option("--threads", default=1, show_default=True, help="CPU threads during the benchmarks")
@click.option("--quick", is_flag=True, help="small sizes, few repeats (a few seconds)")
@json_opt
def calibrate(out: str | None, device: str, threads: int, quick: bool, as_json: bool) -> None:
    """Measure the local device with PyTorch micro-benchmarks and write a device profile."""

    def run() -> int:
        if out:
            _check_output_file(out, "--out")
        try:
            from .torch import calibrate as run_calibrate
        except ImportError as err:
            raise InputError(f"dnnsat calibrate needs PyTorch: pip install 'dnnsat[torch]' ({err})") from None
        with console.status(f"benchmarking {device}"):
            profile = run_calibrate(device, threads=threads, quick=quick)
        if out:
            profile.save(out)

        def render() -> None:
            t = Table("field", "value")
            for key, value in profile.peak_flops.items():
                t.add_row(f"peak_flops.{key}", _si(value, "FLOP/s"))
            t.add_row("memory_bandwidth", _si(profile.memory_bandwidth, "B/s"))
            t.add_row("memory_bytes", f"{profile.memory_bytes / 2**30:.1f} GiB")
            t.add_row("launch_overhead_s", f"{profile.launch_overhead_s * 1e6:.2f} µs")
            t.add_row("context_bytes", f"{profile.context_bytes / 2**20:.0f} MiB")
            console.print(t)
            if out:
                console.print(f"wrote {out} (use it as Budget(device={out!r}))")

        _emit(as_json, profile.to_dict(), render)
        return 0

    _run(run)


@main.command()
@debug_opt
def zoo() -> None:
    """List the ready-made problems (use them as zoo:NAME)."""
    from .zoo import REGISTRY

    t = Table("name", "description")
    t.add_row("synthetic_resnet", "reference ResNet-like problem of raw expressions; --budget flops=,params=")
    for name, model in sorted(REGISTRY.items()):
        t.add_row(name, (model.__doc__ or "").strip().splitlines()[0])
    console.print(t)


if __name__ == "__main__":  # pragma: no cover
    main()
