"""Audit a symbolic model against PyTorch: costs and the validity verdict, config by config.

Validity ground truth: "materializing the module and running its forward pass (train mode, meta
device) raises". Costs ground truth: ``sum(p.numel())`` for params, ``FlopCounterMode`` for FLOPs,
saved-tensor hooks for activation bytes (an estimate on our side, reported, not required exact).
"""

from __future__ import annotations

import logging
import math
import random
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..expr import compile_scalar
from ..graph import Network, encode_config
from ._materialize import GraphModule, concretize, example_inputs, resolve_network
from ._measure import measure

__all__ = ["Checker", "AuditReport", "CostError", "audit", "audit_table", "random_configs"]

log = logging.getLogger("dnnsat.torch")

_COSTS = ("params", "flops", "saved_bytes")


class Checker:
    """Symbolic and PyTorch evaluations of one network at user configurations."""

    def __init__(self, net: Network, space: Any, train: bool = True, dtype_bytes: int = 4) -> None:
        self.net, self.space, self.train = net, space, train
        c = net.costs()
        self._names = ["params", "flops", "macs", "saved_bytes", "valid"]
        self._fn = compile_scalar(
            [c["params"], c["flops"], c["macs"], dtype_bytes * c["saved"], net.valid(train)]
        )
        self._checks = net.checks(train)
        self._check_fn = compile_scalar([e for _, e in self._checks]) if self._checks else None

    def symbolic(self, config: Mapping[str, Any]) -> dict[str, Any]:
        env = encode_config(self.space, config) if self.space is not None else dict(config)
        return dict(zip(self._names, self._fn(env)))

    def violated(self, config: Mapping[str, Any]) -> list[str]:
        """Names of the validity rules ``config`` violates."""
        if self._check_fn is None:
            return []
        env = encode_config(self.space, config) if self.space is not None else dict(config)
        return [name for (name, _), ok in zip(self._checks, self._check_fn(env)) if not ok]

    def torch(self, config: Mapping[str, Any], device: str = "meta") -> dict[str, Any]:
        """PyTorch's view: ``{"raised": bool, "error": str|None, "params", "flops", "saved_bytes"}``."""
        import torch

        try:
            conc = concretize(self.net, config, self.space)
            with torch.device(device):
                module = GraphModule(conc)
            m = measure(module, example_inputs(module, device), train=self.train, backward=False)
        except Exception as err:  # noqa: BLE001 - any failure is PyTorch's "invalid" verdict
            return {"raised": True, "error": f"{type(err).__name__}: {str(err).splitlines()[0][:200]}"}
        return {
            "raised": False,
            "error": None,
            "params": m.params,
            "flops": m.flops,
            "saved_bytes": m.saved_bytes,
            "time_s": m.time_s,
        }


def random_configs(space: Any, n: int, seed: int = 0) -> list[dict[str, Any]]:
    """``n`` configurations drawn uniformly per parameter (feasible or not), deterministic per seed."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        cfg: dict[str, Any] = {}
        for name in space.conditional_order:
            if not space.is_active(name, cfg):
                continue
            p = space[name]
            if p.is_finite:
                cfg[name] = rng.choice(p.values())
            else:
                cfg[name] = rng.uniform(p.low, p.high)
        out.append({k: cfg[k] for k in space.names if k in cfg})
    return out


@dataclass
class CostError:
    """Error statistics of one symbolic cost over the configs PyTorch ran."""

    name: str
    n: int = 0
    exact: int = 0
    max_rel_error: float = 0.0
    mean_rel_error: float = 0.0


@dataclass
class AuditReport:
    """Result of :func:`audit`: validity confusion counts and per-cost errors."""

    n: int
    true_invalid: int = 0  # symbolic invalid, PyTorch raised
    false_invalid: int = 0  # symbolic invalid, PyTorch ran
    missed_invalid: int = 0  # symbolic valid, PyTorch raised
    true_valid: int = 0
    costs: dict[str, CostError] = field(default_factory=dict)
    mismatches: list[dict[str, Any]] = field(default_factory=list)
    seconds_symbolic: float = 0.0
    seconds_torch: float = 0.0

    @property
    def precision(self) -> float:
        """Of the configs called invalid, the fraction PyTorch rejects (1.0 when none called invalid)."""
        d = self.true_invalid + self.false_invalid
        return self.true_invalid / d if d else 1.0

    @property
    def recall(self) -> float:
        """Of the configs PyTorch rejects, the fraction called invalid (1.0 when PyTorch rejects none)."""
        d = self.true_invalid + self.missed_invalid
        return self.true_invalid / d if d else 1.0

    def summary(self) -> str:
        parts = [
            f"{self.n} configs: validity precision {self.precision:.1%}, recall {self.recall:.1%} "
            f"({self.true_invalid + self.missed_invalid} invalid in PyTorch)"
        ]
        for c in self.costs.values():
            parts.append(f"{c.name}: {c.exact}/{c.n} exact, max rel. error {c.max_rel_error:.3%}")
        return "; ".join(parts)


def audit(
    problem: Any,
    n: int = 100,
    seed: int = 0,
    device: str = "meta",
    train: bool = True,
    space: Any = None,
    by_op: bool = False,
) -> AuditReport:
    """Compare the symbolic model of ``problem`` (or a Network / build function with ``space``) with PyTorch.

    Draws ``n`` configs: half from ``problem.sample`` when available (feasible under the budget), the
    rest uniformly per parameter (valid and invalid). Each is materialized on ``device`` and run.
    ``by_op=True`` uses :class:`OpChecker` instead (op by op on the meta device, cached: much faster
    on deep models; params, FLOPs and validity only).
    """
    import time

    net, space = resolve_network(problem, space)
    checker = Checker(net, space, train=train)
    op_checker = OpChecker(net, space, train=train) if by_op else None
    configs: list[dict[str, Any]] = []
    if hasattr(problem, "sample"):
        try:
            configs = list(problem.sample(n // 2, seed=seed))
        except Exception as err:  # noqa: BLE001 - an empty feasible set still allows a uniform audit
            log.info("audit: problem.sample failed (%s); using uniform configs only", err)
    configs += random_configs(space, n - len(configs), seed=seed)
    report = AuditReport(n=len(configs))
    errors: dict[str, list[float]] = {k: [] for k in _COSTS}
    for cfg in configs:
        t0 = time.perf_counter()
        sym = checker.symbolic(cfg)
        t1 = time.perf_counter()
        if op_checker is not None:
            res = op_checker.run(cfg)
            real: dict[str, Any] = {"raised": res["raised"], "error": res["mismatch"],
                                    "params": res["torch_params"], "flops": res["torch_flops"]}  # fmt: skip
            if res["mismatch"] and not res["raised"] and sym["valid"]:
                real["params"] = -1  # a shape mismatch: report it as a cost error
        else:
            real = checker.torch(cfg, device)
        t2 = time.perf_counter()
        report.seconds_symbolic += t1 - t0
        report.seconds_torch += t2 - t1
        invalid = not sym["valid"]
        if invalid and real["raised"]:
            report.true_invalid += 1
        elif invalid:
            report.false_invalid += 1
            report.mismatches.append(
                {"config": cfg, "kind": "called invalid, PyTorch ran", "rules": checker.violated(cfg)}
            )
        elif real["raised"]:
            report.missed_invalid += 1
            report.mismatches.append(
                {"config": cfg, "kind": "called valid, PyTorch raised", "error": real["error"]}
            )
        else:
            report.true_valid += 1
        if not real["raised"] and not invalid:
            for k in _COSTS:
                if k not in real:
                    continue
                s, r = float(sym[k]), float(real[k])
                errors[k].append(abs(s - r) / r if r else (0.0 if s == 0 else math.inf))
    for k, errs in errors.items():
        if by_op and k == "saved_bytes":
            continue
        ce = CostError(k, len(errs), sum(1 for e in errs if e == 0.0))
        if errs:
            ce.max_rel_error = max(errs)
            ce.mean_rel_error = sum(errs) / len(errs)
        report.costs[k] = ce
    return report


def audit_table(report: AuditReport) -> Any:
    """A ``rich.table.Table`` rendering of an :class:`AuditReport` (for ``dnnsat audit``)."""
    from rich.table import Table

    t = Table(title=f"dnnsat audit: {report.n} configurations vs PyTorch (meta device)")
    t.add_column("check")
    t.add_column("configs", justify="right")
    t.add_column("exact", justify="right")
    t.add_column("max rel. error", justify="right")
    t.add_column("mean rel. error", justify="right")
    for c in report.costs.values():
        t.add_row(c.name, str(c.n), str(c.exact), f"{c.max_rel_error:.3%}", f"{c.mean_rel_error:.3%}")
    invalid = report.true_invalid + report.missed_invalid
    t.add_row(
        "validity precision",
        str(report.true_invalid + report.false_invalid),
        str(report.true_invalid),
        f"{report.precision:.1%}",
        "",
    )
    t.add_row("validity recall", str(invalid), str(report.true_invalid), f"{report.recall:.1%}", "")
    return t


class OpChecker:
    """Op-by-op comparison with PyTorch, with results cached per (op, attributes, input shapes).

    For each config, the active operators run in execution order, each materialized alone on the meta
    device from its symbolic input shapes (train mode, under FlopCounterMode). Its verdict, output shape,
    parameter count and FLOPs are compared with the catalog's; comparison stops at the first operator
    either side rejects, exactly where the whole module's forward pass would stop. Because every op's
    real output shape is checked to equal the symbolic one, the whole module (which chains the same op
    modules) has the same verdict, parameters and FLOPs by induction - at a fraction of the cost, since
    repeated blocks and configs share cached op results. :class:`Checker` runs whole modules.
    """

    def __init__(self, net: Network, space: Any, train: bool = True) -> None:
        from ..expr import all_

        self.net, self.space, self.train = net, space, train
        roots = []
        for node in net.ops():
            assert node.info is not None
            rules = [c.expr for c in node.info.checks if train or not c.train_only]
            roots += [node.info.params, node.info.flops, all_(rules)]
        self._fn = compile_scalar(roots) if roots else None
        self._index = {node.index: k for k, node in enumerate(net.ops())}
        self._extra = compile_scalar([c.expr for _, c in net.extra_checks]) if net.extra_checks else None
        self.cache: dict[Any, tuple[Any, ...]] = {}

    def _torch_op(
        self, op_name: str, attrs: Mapping[str, Any], shapes: list[tuple[int, ...]], dtypes: list[str]
    ) -> tuple[Any, ...]:
        key = (op_name, tuple(sorted(attrs.items())), tuple(shapes), tuple(dtypes))
        hit = self.cache.get(key)
        if hit is not None:
            return hit
        import torch
        from torch.utils.flop_counter import FlopCounterMode

        from ..graph import CATALOG
        from ..graph._catalog import Attrs

        try:
            build = CATALOG[op_name].build
            assert build is not None
            with torch.device("meta"):
                module = build(Attrs(attrs), list(shapes))
                xs = [
                    torch.empty(s, dtype=torch.long if dt == "int64" else torch.float32)
                    for s, dt in zip(shapes, dtypes)
                ]
            module.train(self.train)
            counter = FlopCounterMode(display=False)
            with counter:
                y = module(*xs)
            res: tuple[Any, ...] = (
                False,
                tuple(y.shape),
                sum(p.numel() for p in module.parameters()),
                int(counter.get_total_flops()),
            )
        except Exception as err:  # noqa: BLE001 - PyTorch rejecting the op is the verdict
            res = (True, f"{type(err).__name__}: {str(err).splitlines()[0][:160] if str(err) else ''}")
        self.cache[key] = res
        return res

    def run(self, config: Mapping[str, Any]) -> dict[str, Any]:
        """Compare one config: ``valid``, ``raised``, ``params``/``torch_params``, ``flops``/``torch_flops``,
        ``mismatch`` (``None`` or where and how the two sides first disagree)."""
        env = encode_config(self.space, config)
        conc = self.net.concretize(env)
        vals = self._fn(env) if self._fn is not None else ()
        extra_ok = all(self._extra(env)) if self._extra is not None else True
        out: dict[str, Any] = {
            "valid": extra_ok,
            "raised": False,
            "params": 0,
            "torch_params": 0,
            "flops": 0,
            "torch_flops": 0,
            "mismatch": None,
        }
        tensors = self.net.tensors
        for node in self.net.nodes:
            if not conc.gates[node.index]:
                continue
            if node.op == "select":
                flags = conc.cases[node.index]
                pick = next((i for i, f in enumerate(flags) if f), None)
                if pick is None:
                    out["raised"] = True
                    break
                chosen, other = node.cases[pick][1], node.cases[-1][1]
                if node.same_shape and chosen != other and conc.shapes[chosen] != conc.shapes[other]:
                    out["raised"] = True
                    break
                continue
            if node.op == "input":
                continue
            k = 3 * self._index[node.index]
            params, flops, ok = vals[k], vals[k + 1], vals[k + 2]
            shapes = [conc.shapes[i] for i in node.inputs]
            real = self._torch_op(
                node.op, conc.attrs[node.index], shapes, [tensors[i].dtype for i in node.inputs]
            )
            if not ok or real[0]:
                out["valid"] = out["valid"] and bool(ok)
                out["raised"] = bool(real[0])
                if bool(ok) == bool(real[0]):
                    out["mismatch"] = (
                        f"{node.label}: symbolic {'valid' if ok else 'invalid'}, "
                        f"PyTorch: {real[1] if real[0] else 'ran'}"
                    )
                break
            out["params"] += params
            out["flops"] += flops
            out["torch_params"] += real[2]
            out["torch_flops"] += real[3]
            if real[1] != conc.shapes[node.output]:
                out["mismatch"] = (
                    f"{node.label}: output shape {real[1]} != symbolic {conc.shapes[node.output]}"
                )
                break
            if real[2] != params or real[3] != flops:
                out["mismatch"] = f"{node.label}: params {params} vs {real[2]}, flops {flops} vs {real[3]}"
                break
        return out
