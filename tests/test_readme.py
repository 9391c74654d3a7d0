"""README.md is a reference a user can follow alone: complete for the API it documents, and correct."""

from __future__ import annotations

import dataclasses
import inspect
import re
from pathlib import Path

import pytest

import dnnsat as ds
from dnnsat.cli import EXIT_CODES
from dnnsat.graph import Network

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()


def section(title: str) -> str:
    """The README text under the heading ``title`` up to the next heading of the same or a higher level."""
    lines, level, out, fenced = README.splitlines(), 0, [], False
    for line in lines:
        if line.startswith("```"):
            fenced = not fenced
        heading = None if fenced else re.match(r"(#+) (.*)", line)
        if level and heading and len(heading.group(1)) <= level:
            break
        if level:
            out.append(line)
        elif heading and heading.group(2) == title:
            level = len(heading.group(1))
    assert level, f"README has no section {title!r}"
    return "\n".join(out)


def signature(fn: object) -> str:
    """``(a, b=1, *args)`` or ``(a, *, c=2)`` as a user writes it: no ``self``, no annotations."""
    parts = []
    params = list(inspect.signature(fn).parameters.values())[1:]  # type: ignore[arg-type]
    for p in params:
        if (
            p.kind is p.KEYWORD_ONLY
            and not any(q.kind is q.VAR_POSITIONAL for q in params)
            and "*" not in parts
        ):
            parts.append("*")
        prefix = "*" if p.kind is p.VAR_POSITIONAL else "**" if p.kind is p.VAR_KEYWORD else ""
        parts.append(prefix + p.name + ("" if p.default is p.empty else f"={p.default!r}"))
    return f"({', '.join(parts)})"


def test_no_reference_to_documents_users_do_not_have() -> None:
    files = [ROOT / "README.md", *(ROOT / "dnnsat").rglob("*.py"), *(ROOT / "integrations").rglob("*.py")]
    for path in files:
        text = path.read_text()
        for pattern in (r"DESIGN\s*(§|\.md|section)", r"notes/\w+"):
            assert not re.search(pattern, text), f"{path.relative_to(ROOT)} refers to {pattern}"
    for link in re.findall(r"\]\(([^)#:]+)(?:#[^)]*)?\)", README):  # relative links
        assert (ROOT / link).exists(), f"README links to missing {link}"


def test_network_ops_reference_lists_every_method_with_its_signature() -> None:
    text = section("Network ops (reference)")
    methods = [
        name for name, _ in inspect.getmembers(Network, inspect.isfunction) if not name.startswith("_")
    ]
    assert len(methods) > 50
    for name in methods:
        real = signature(getattr(Network, name))
        spelled = re.findall(rf"`(?:net\.)?{name}(\([^`]*\))`", text)
        if spelled:  # every spelled-out signature is the real one
            assert set(spelled) == {real}, (name, spelled, real)
        else:  # grouped with others: named, and the shared signature is the real one
            assert f"`{name}`" in text and real in text, (name, real)


def test_every_sampler_stats_field_is_documented() -> None:
    pytest.importorskip("optuna")
    from dnnsat.integrations.optuna import SamplerStats

    text = section("Optuna: never launch an infeasible trial")
    names = [f.name for f in dataclasses.fields(SamplerStats)] + ["acceptance", "mean_repair_steps"]
    assert [n for n in names if f"| `{n}`" not in text] == []
    assert "prune_timeout" in text and "First-trial cost" in text


def test_cli_exit_codes_and_nni_problem_option_are_documented() -> None:
    cli = section("Command line")
    for code, meaning in EXIT_CODES.items():
        assert re.search(rf"^\| {code} \| ", cli, re.M), (code, meaning)
    assert "--max-time" in cli and "--debug" in cli
    assert "--problem MODULE:ATTR" in section("NNI: a tuner plugin that wraps any NNI tuner")


def test_the_vit_example_is_a_real_vit() -> None:
    code = re.search(r"A ViT in the same terms.*?```python\n(.*?)```", README, re.S)
    assert code
    scope: dict[str, object] = {}
    exec(code.group(1), scope)
    p = scope["p"]
    assert isinstance(p, ds.Problem)
    vit_s16 = {"batch_size": 64, "patch": 16, "width": 384, "heads": 6, "depth": 12, "mlp_ratio": 4}
    assert p.costs(vit_s16)["params"] == 22_049_896  # ViT-S/16 with 1000 classes, as timm counts it
    assert p.check(vit_s16).feasible
    odd = {**vit_s16, "width": 448, "heads": 12}
    assert any("heads divide model width" in v.name for v in p.check(odd).violations)
