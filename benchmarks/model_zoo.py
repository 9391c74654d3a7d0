"""``from_torch`` on the models people use, unmodified: ``python -m benchmarks.model_zoo``.

Every classification constructor of ``torchvision.models.list_models(module=torchvision.models)`` and
the Hugging Face ``transformers`` BERT, GPT-2, ViT, Llama and T5 base models built from their
``Config`` (code only: no weights are downloaded) are handed to :func:`dnnsat.from_torch` as a user
would, ``ds.from_torch(build, inputs)`` over a space of hyperparameters:

- torchvision: ``batch`` in 1, 2, 8, 32; ``res`` the first three of 32, 64, 128, 224, 256, 384, 518,
  574 at or above the model's minimum input size (its weights' ``min_size``; passed to the constructor
  as ``image_size`` / ``input_size`` where the model is built for one resolution: ViT, MaxViT);
  ``classes`` in 10, 100, 1000; and a width where the constructor takes one (:data:`WIDTHS`:
  ``width_mult`` 0.5, 0.75, 1 of the MobileNets, ``width_per_group`` 32, 64, 128 of the ResNets; the
  BasicBlock of ResNet-18/34 raises for any but 64, so their spaces hold invalid configurations).
- Hugging Face: ``layers`` 1-4, ``heads`` 2, 4, 8, ``head_dim`` 16, 32, 64 (hidden size
  ``heads * head_dim``, as a user keeps it a multiple of the heads), ``ffn`` (intermediate size) 256,
  512, 1024, ``seq`` 16, 64, 128 (ViT: ``res`` 32, 64, 96 with 16-pixel patches), ``batch`` 1, 2, 8; a
  vocabulary of 1000 tokens. Inputs are token ids (T5: ``input_ids`` and ``decoder_input_ids`` as keywords,
  no attention mask: all ones, which T5 treats as none).

Per model: traced or refused (the error's first line and a category); on ``--configs`` random
configurations of its space, params and FLOPs against PyTorch's own (``TorchModel.measure``, as the
tests compare them: the module built on the meta device, ``sum(p.numel())`` over its unique parameters,
one forward under ``FlopCounterMode``) and validity (PyTorch raises or not vs dnnsat's verdict); the
trace time (building the ``Problem``: tracing and merging); and on ``--memory N`` (0-2, default 1)
small configurations the memory model's training-step peak (Adam, float32, this CPU) against
:func:`dnnsat.torch.peak_memory` of the real module (one intra-op thread, as
``benchmarks.memory_families``): the smallest resolution from 64 on with 10 classes (batch 8 up to 128
pixels, else 2), then batch 2 at the next resolution with 1000 classes; the constructor's default width.
Measured for models up to ``--memory-max-params`` parameters; the loss is taken on the output's first
tensor (a Hugging Face ``ModelOutput``'s ``last_hidden_state``; GoogLeNet's and Inception v3's
training outputs are named tuples with their auxiliary logits, kept to the step's end). The Hugging Face
models' memory configuration is their smallest one (batch 2, one layer, 2 heads of 16, FFN 256, 16 tokens
or 32 pixels). Each model gets ``--timeout`` seconds (past
it: refused, "timeout"). The default run (5 configurations per model, memory on one) rewrites its
section of benchmarks/README.md (about 6 minutes on 2 shared cores with half the models refused).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import signal
import statistics
import time
import warnings
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from typing import Any

import torch
import torch.nn as nn

import dnnsat as ds
from benchmarks._report import add_write_options, machine, markdown_table, update_readme, writes_readme
from benchmarks._torchvision import import_torchvision
from dnnsat.torch import MeasureError, peak_memory, random_configs

Config = dict[str, Any]

RES = (32, 64, 128, 224, 256, 299, 384, 518, 574)
# minimum input sizes in training where the weights' ``min_size`` (evaluation) is smaller: Inception v3's
# auxiliary classifier, on in training, needs 299 x 299
MIN_TRAIN = {"inception_v3": 299}
VOCAB = 1000
# torchvision models built for one input resolution: the constructor's keyword for it
RES_KWARG = {"vit_": "image_size", "maxvit_": "input_size"}
# widths where a constructor takes them (torchvision passes them on to the model class): keyword, values
# and the constructor's default (the width of the memory configurations). ResNet-18/34's BasicBlock
# accepts only 64 (it raises otherwise): invalid configurations for the validity check
WIDTHS: dict[str, tuple[str, list[Any], Any]] = {
    **{
        m: ("width_mult", [0.5, 0.75, 1.0], 1.0)
        for m in ("mobilenet_v2", "mobilenet_v3_small", "mobilenet_v3_large")
    },
    **{f"resnet{d}": ("width_per_group", [32, 64, 128], 64) for d in (18, 34, 50, 101, 152)},
}
HF = ("bert", "gpt2", "vit", "llama", "t5")


@dataclass
class Case:
    """One model of the zoo: its builder, inputs and space, as a user would hand them to ``from_torch``."""

    name: str
    family: str  # "torchvision" or "hf"
    build: Callable[[Config], nn.Module]
    inputs: Callable[[Config], Any]
    space: ds.Space
    memory: list[Config]  # cheap configurations for the memory measurement, the cheapest first


@dataclass
class Check:
    """One configuration: PyTorch's (params, FLOPs) or None (it raises) and dnnsat's verdict and costs."""

    cfg: Config
    torch_valid: bool | None  # None: PyTorch cannot run it on the meta device (MeasureError)
    dnnsat_valid: bool
    torch_params: int | None = None
    torch_flops: int | None = None
    params: float | None = None
    flops: float | None = None

    @property
    def exact(self) -> bool:
        """Params and FLOPs equal PyTorch's (vacuously true where either side calls it invalid)."""
        if not (self.torch_valid and self.dnnsat_valid):
            return True
        return (self.params, self.flops) == (self.torch_params, self.torch_flops)


@dataclass
class Result:
    """One model's row: traced or refused (``error``, ``category``), its checks and memory errors."""

    name: str
    family: str
    traced: bool = False
    error: str = ""  # the refusal; on a traced model, what raised while checking it
    category: str = ""
    trace_s: float = 0.0
    checks: list[Check] = field(default_factory=list)
    memory: list[dict[str, Any]] = field(default_factory=list)  # {cfg, estimate, real, error} or skipped

    @property
    def exact(self) -> bool:
        """Traced, and params and FLOPs equal PyTorch's on every configuration checked (a check that
        raised, ``error`` on a traced model, counts as not exact)."""
        return self.traced and not self.error and all(c.exact for c in self.checks)

    @property
    def agree(self) -> int:
        """Configurations on which dnnsat's validity equals PyTorch's (unmeasurable ones excluded)."""
        return sum(c.torch_valid == c.dnnsat_valid for c in self.checks if c.torch_valid is not None)

    @property
    def measured(self) -> int:
        return sum(c.torch_valid is not None for c in self.checks)


# ------------------------------------------------------------------------------------------------
# the models


def _min_size(tv: Any, name: str) -> int:
    weights = list(tv.models.get_model_weights(name))
    return max(weights[0].meta.get("min_size", (1, 1))) if weights else 1


def _torchvision_case(tv: Any, name: str) -> Case:
    ctor = tv.models.get_model_builder(name)
    res_kw = next((kw for prefix, kw in RES_KWARG.items() if name.startswith(prefix)), None)
    low = MIN_TRAIN.get(name, _min_size(tv, name))
    resolutions = [r for r in RES if r >= low][:3]

    width = WIDTHS.get(name)

    def build(c: Config) -> nn.Module:
        kwargs: dict[str, Any] = {"num_classes": c["classes"]}
        if width:
            kwargs[width[0]] = c[width[0]]
        if res_kw == "image_size":
            kwargs[res_kw] = c["res"]
        elif res_kw == "input_size":
            kwargs[res_kw] = (c["res"], c["res"])
        return ctor(**kwargs)

    def inputs(c: Config) -> Any:
        return (torch.empty(c["batch"], 3, c["res"], c["res"]),)

    values: dict[str, Any] = {
        "batch": ds.Categorical([1, 2, 8, 32]),
        "res": ds.Categorical(resolutions),
        "classes": ds.Categorical([10, 100, 1000]),
    }
    # the smallest resolution from 64 on (batch 8 up to 128 pixels, else 2), then batch 2 at the next
    # resolution with 1000 classes
    i = next((i for i, r in enumerate(resolutions) if r >= 64), 0)
    memory: list[Config] = [
        {"batch": 8 if resolutions[i] <= 128 else 2, "res": resolutions[i], "classes": 10},
        {"batch": 2, "res": resolutions[min(i + 1, len(resolutions) - 1)], "classes": 1000},
    ]
    if width:
        values[width[0]] = ds.Categorical(width[1])
        memory = [{**cfg, width[0]: width[2]} for cfg in memory]
    return Case(name, "torchvision", build, inputs, ds.Space(values), memory)


def _hf_case(name: str) -> Case:
    import_torchvision()  # transformers imports torchvision (image processors)
    import transformers as tf

    def config(c: Config) -> Any:
        h, d = c["heads"], c["heads"] * c["head_dim"]
        if name == "bert":
            return tf.BertConfig(
                vocab_size=VOCAB, hidden_size=d, num_hidden_layers=c["layers"], num_attention_heads=h,
                intermediate_size=c["ffn"],
            )  # fmt: skip
        if name == "gpt2":
            return tf.GPT2Config(
                vocab_size=VOCAB, n_embd=d, n_layer=c["layers"], n_head=h, n_inner=c["ffn"],
                bos_token_id=VOCAB - 1, eos_token_id=VOCAB - 1,
            )  # fmt: skip
        if name == "llama":
            return tf.LlamaConfig(
                vocab_size=VOCAB, hidden_size=d, num_hidden_layers=c["layers"], num_attention_heads=h,
                num_key_value_heads=h, intermediate_size=c["ffn"],
            )  # fmt: skip
        if name == "t5":
            return tf.T5Config(
                vocab_size=VOCAB, d_model=d, d_kv=c["head_dim"], d_ff=c["ffn"], num_layers=c["layers"],
                num_heads=h,
            )  # fmt: skip
        return tf.ViTConfig(
            hidden_size=d, num_hidden_layers=c["layers"], num_attention_heads=h, intermediate_size=c["ffn"],
            image_size=c["res"], patch_size=16,
        )  # fmt: skip

    model_class = {
        "bert": "BertModel", "gpt2": "GPT2Model", "llama": "LlamaModel", "t5": "T5Model", "vit": "ViTModel",
    }[name]  # fmt: skip

    def build(c: Config) -> nn.Module:
        return getattr(tf, model_class)(config(c))

    def inputs(c: Config) -> Any:
        if name == "vit":
            return (torch.empty(c["batch"], 3, c["res"], c["res"]),)
        ids = torch.randint(0, VOCAB, (c["batch"], c["seq"]))
        if name == "t5":  # no attention mask: all ones (no padding), which T5 treats as no mask
            return {"input_ids": ids, "decoder_input_ids": ids}
        return (ids,)

    values: dict[str, Any] = {
        "batch": ds.Categorical([1, 2, 8]),
        "layers": ds.Int(1, 4),
        "heads": ds.Categorical([2, 4, 8]),
        "head_dim": ds.Categorical([16, 32, 64]),
        "ffn": ds.Categorical([256, 512, 1024]),
    }
    values.update(
        {"res": ds.Categorical([32, 64, 96])} if name == "vit" else {"seq": ds.Categorical([16, 64, 128])}
    )
    small = {"batch": 2, "layers": 1, "heads": 2, "head_dim": 16, "ffn": 256, "res": 32, "seq": 16}
    space = ds.Space(values)
    return Case(name, "hf", build, inputs, space, [{k: small[k] for k in space}])


def cases(only: list[str] | None = None, family: str | None = None) -> list[Case]:
    """The zoo's models (torchvision's classification constructors, then the Hugging Face five), or the
    ones named in ``only`` / of ``family``; an unknown name is an error listing the known ones."""
    tv = import_torchvision()
    names = [("torchvision", n) for n in tv.models.list_models(module=tv.models)] + [("hf", n) for n in HF]
    if only:
        unknown = sorted(set(only) - {n for _, n in names})
        if unknown:
            raise SystemExit(f"model_zoo: unknown model(s) {unknown}; known: {[n for _, n in names]}")
        names = [(f, n) for f, n in names if n in only]
    if family:
        names = [(f, n) for f, n in names if f == family]
    return [_torchvision_case(tv, n) if f == "torchvision" else _hf_case(n) for f, n in names]


# ------------------------------------------------------------------------------------------------
# running one model


class _Timeout(Exception):
    pass


@contextlib.contextmanager
def _deadline(seconds: float) -> Iterator[None]:
    """Raise :class:`_Timeout` in this (main) thread after ``seconds`` (0: no limit). A timer already
    set (pytest-timeout's) is put back afterwards with what remained of it."""
    if seconds <= 0:
        yield
        return

    def fire(*_: Any) -> None:
        raise _Timeout(f"timeout: more than {seconds:g} s")

    start = time.monotonic()
    previous = signal.signal(signal.SIGALRM, fire)
    delay, interval = signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        if delay:
            signal.setitimer(signal.ITIMER_REAL, max(delay - (time.monotonic() - start), 1e-3), interval)


CATEGORIES = [  # (pattern on the error's first line, category); the first match wins
    (r"^timeout", "timeout"),
    (r"Cannot copy out of meta tensor", "build: copy out of a meta tensor"),
    (r"this rule fails for every configuration", "a rule fails on every configuration"),
    (r"max_regions", "more than max_regions control-flow regions"),
    (r"constant tensor", "constant tensor in forward"),
    (r"^indexing", "indexing by a tensor"),
    (r"tensor function or method '([\w.]+)' is not supported", "function {0}"),
    (r"module \S+ \((\w+)\) is not supported", "module {0}"),
    (r"needs an int64 input", "int64 input not seen"),
    (r"must return a tensor", "output not a tensor"),
    (r"raises on every configuration", "raises on every configuration"),
]


def categorise(message: str) -> str:
    """A short refusal reason for the histogram (the error's first line itself when none matches)."""
    for pattern, label in CATEGORIES:
        m = re.search(pattern, message)
        if m:
            return label.format(*m.groups())
    return message[:80]


def _first_line(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    return f"{type(err).__name__}: {text[0] if text else ''}"[:300]


def _memory(case: Case, problem: ds.Problem, cfg: Config, max_params: int) -> dict[str, Any]:
    """The memory model's training-step peak (Adam) of ``cfg`` vs the real module's on this CPU, or why
    it was skipped."""
    costs = problem.costs(cfg)
    if costs["params"] > max_params:
        return {"cfg": cfg, "skipped": f"more than {max_params:,} parameters"}
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        torch.manual_seed(0)
        module = case.build(cfg)
        real = peak_memory(module, _real(case.inputs(cfg)), train=True, optimizer="adam").peak
    except Exception as err:  # e.g. an output that is not a tensor (GoogLeNet's, in training)
        return {"cfg": cfg, "skipped": _first_line(err)}
    finally:
        torch.set_num_threads(threads)
    return {"cfg": cfg, "estimate": int(costs["memory"]), "real": real, "error": costs["memory"] / real - 1}


def _real(example: Any) -> Any:
    """``inputs(cfg)`` with real values: floating tensors random, token ids kept; a dict stays a dict."""
    if isinstance(example, dict):
        return {k: _real(v) for k, v in example.items()}
    if isinstance(example, tuple | list):
        return [_real(x) for x in example]
    return torch.randn(*example.shape) if example.is_floating_point() else example


def run_model(
    case: Case,
    n_configs: int = 3,
    seed: int = 0,
    memory: int = 0,
    max_params: int = 100_000_000,
    timeout: float = 0.0,
) -> Result:
    """Trace ``case`` with ``from_torch``, then compare it with PyTorch on ``n_configs`` random
    configurations (``seed``) and its training-step memory on the first ``memory`` of ``case.memory``
    (``max_params``: skip larger models; ``timeout``: seconds for the whole model, 0 for none)."""
    out = Result(case.name, case.family)
    budget = ds.Budget(mode="train", optimizer="adam")
    with warnings.catch_warnings(), _deadline(timeout):
        warnings.simplefilter("ignore")
        try:
            model = ds.from_torch(case.build, case.inputs)
            start = time.perf_counter()
            problem = ds.Problem(case.space, model=model, budget=budget)
            out.trace_s = time.perf_counter() - start
            out.traced = True
            for cfg in random_configs(case.space, n_configs, seed=seed):
                out.checks.append(_check(model, problem, cfg))
            out.memory = [_memory(case, problem, cfg, max_params) for cfg in case.memory[:memory]]
        except Exception as err:  # a refusal (TraceError and the rest) or the deadline
            out.error = _first_line(err)
            if not out.traced:
                out.category = categorise(out.error.split(": ", 1)[1] if ": " in out.error else out.error)
    return out


def _check(model: Any, problem: ds.Problem, cfg: Config) -> Check:
    try:
        real = model.measure(cfg)
    except MeasureError:
        real, unmeasured = None, True
    else:
        unmeasured = False
    # validity rules are named "<op>#<position>: <rule>" (as TorchModel.disagreements reads them)
    valid = not [v for v in problem.check(cfg).violations if "#" in v.name]
    check = Check(cfg, None if unmeasured else real is not None, valid)
    if real is not None:
        check.torch_params, check.torch_flops = real
    if valid:
        costs = problem.costs(cfg)
        check.params, check.flops = costs["params"], costs["flops"]
    return check


# ------------------------------------------------------------------------------------------------
# the report


def _pct(k: int, n: int) -> str:
    return f"{k}/{n} ({100 * k / n:.0f} %)" if n else "-"


def architecture(name: str) -> str:
    """A zoo model's architecture family: ``resnet`` for ``resnet50``, ``regnet`` for ``regnet_y_8gf``."""
    return "wide_resnet" if name.startswith("wide_resnet") else re.sub(r"[\d_].*$", "", name)


def _row(label: str, rs: list[Result]) -> list[Any]:
    traced = [r for r in rs if r.traced]
    times = [r.trace_s for r in traced]
    slow = max(traced, key=lambda r: r.trace_s) if traced else None
    errs = [abs(m["error"]) for r in rs for m in r.memory if "error" in m]
    return [
        label,
        len(rs),
        _pct(len(traced), len(rs)),
        _pct(sum(r.exact for r in traced), len(traced)),
        _pct(sum(r.agree for r in traced), sum(r.measured for r in traced)),
        f"{statistics.median(times):.2f} s" if times else "-",
        f"{slow.trace_s:.1f} s ({slow.name})"
        if slow and len(rs) > 1
        else f"{slow.trace_s:.1f} s"
        if slow
        else "-",
        f"{len(errs)}: median {100 * statistics.median(errs):.2f} %, max {100 * max(errs):.2f} %"
        if errs
        else "-",
    ]


def summary(results: list[Result]) -> str:
    """Markdown: per zoo (torchvision, Hugging Face) and overall, then per architecture family: models
    traced, exact on params and FLOPs (every configuration), validity agreement (configurations), trace
    times and memory errors; then the refusal histogram and any traced model that is not exact."""
    header = ["models", "n", "traced", "exact (of traced)", "validity agrees", "median trace", "max trace",
              "memory error \\|est/real-1\\|"]  # fmt: skip
    zoos = [(z, [r for r in results if r.family == z]) for z in ("torchvision", "hf")] + [("all", results)]
    text = markdown_table(header, [_row(z, rs) for z, rs in zoos if rs])
    archs: dict[str, list[Result]] = {}
    for r in results:
        archs.setdefault(architecture(r.name) if r.family == "torchvision" else f"hf {r.name}", []).append(r)
    text += "\n\nPer architecture family:\n\n" + markdown_table(
        header, [_row(a, rs) for a, rs in archs.items()]
    )
    refused = [r for r in results if not r.traced]
    if refused:
        hist = Counter(r.category for r in refused).most_common()
        text += "\n\nRefusal reasons (the first refusal of each model):\n\n" + markdown_table(
            ["reason", "models", "which"],
            [[c, k, ", ".join(r.name for r in refused if r.category == c)] for c, k in hist],
        )
    inexact = [r for r in results if r.traced and not (r.exact and r.agree == r.measured == len(r.checks))]
    if inexact:
        text += "\n\nTraced but not exact or validity disagreeing: " + ", ".join(r.name for r in inexact)
    return text


def _line(r: Result) -> str:
    if not r.traced:
        return f"refused  {r.category}: {r.error}"
    exact = sum(c.exact for c in r.checks)
    mem = ", ".join(
        f"{100 * m['error']:+.2f} %" if "error" in m else f"skipped ({m['skipped']})" for m in r.memory
    )
    failed = f" check raised {r.error}" if r.error else ""
    checks = f"exact {exact}/{len(r.checks)}, validity {r.agree}/{r.measured}{failed}"
    return f"traced {r.trace_s:.2f} s, {checks}" + (f", memory {mem}" if mem else "")


def refusal_list(results: list[Result]) -> str:
    """One line per model: ``name<TAB>traced`` or ``name<TAB>refused<TAB>category<TAB>error``."""
    return "\n".join(
        f"{r.name}\ttraced\t{r.trace_s:.2f}s" if r.traced else f"{r.name}\trefused\t{r.category}\t{r.error}"
        for r in results
    )


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--only", type=lambda s: s.split(","), default=None, help="NAME[,NAME]: these models only"
    )
    ap.add_argument("--family", choices=["torchvision", "hf"], default=None)
    ap.add_argument("--configs", type=int, default=5, help="random configurations per model (default 5)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--memory", type=int, default=1, choices=[0, 1, 2], help="memory configurations per model (default 1)"
    )
    ap.add_argument("--memory-max-params", type=int, default=100_000_000)
    ap.add_argument("--timeout", type=float, default=120.0, help="seconds per model (0: none)")
    ap.add_argument("--json", default=None, help="write the per-model results here")
    ap.add_argument("--refusals", default=None, help="write the per-model refusal list here")
    add_write_options(ap)
    return ap


def main(argv: list[str] | None = None) -> None:
    ap = build_parser()
    args = ap.parse_args(argv)
    write = writes_readme(ap, args, neutral=("json", "refusals"))
    todo = cases(args.only, args.family)
    results: list[Result] = []
    load = os.getloadavg()[0]  # the machine is shared: trace times depend on it
    start = time.perf_counter()
    for i, case in enumerate(todo, 1):
        r = run_model(
            case,
            args.configs,
            args.seed,
            args.memory,
            max_params=args.memory_max_params,
            timeout=args.timeout,
        )
        results.append(r)
        print(f"[{i}/{len(todo)} {time.perf_counter() - start:.0f}s] {case.name}: {_line(r)}", flush=True)
        if args.refusals:
            with open(args.refusals, "w") as f:
                f.write(refusal_list(results) + "\n")
    text = summary(results)
    print("\n" + text)
    if args.json:
        with open(args.json, "w") as f:
            json.dump([{**asdict(r), "exact": r.exact} for r in results], f, indent=1, default=str)
    if write:
        body = (
            "## Issue 30: model zoo coverage\n\n"
            "`from_torch` on torchvision's classification constructors and five Hugging Face models, "
            "unmodified (spaces and method: `benchmarks/model_zoo.py`). `python -m benchmarks.model_zoo` "
            f"({args.configs} random configurations per model, memory on {args.memory} small "
            f"configuration{'s' if args.memory != 1 else ''}; "
            f"{machine()}, load average {load:.1f} at the start, torch {torch.__version__}, "
            f"torchvision {import_torchvision().__version__}, "
            f"{time.strftime('%Y-%m-%d')}, {time.perf_counter() - start:.0f} s):\n\n{text}"
        )
        update_readme("model-zoo", body)


if __name__ == "__main__":
    main()
