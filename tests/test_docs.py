"""README.md and the documentation site (docs/) are a reference a user can follow alone: complete for
the API they document, and correct. Every ``python`` code block runs; relative links and anchors resolve;
the API reference names exist."""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import os
import re
import textwrap
import unicodedata
from pathlib import Path

import pytest

import dnnsat as ds
from dnnsat.cli import EXIT_CODES
from dnnsat.graph import Network

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
PAGES = [ROOT / "README.md", *sorted(DOCS.rglob("*.md"))]
TEXT = {path: path.read_text() for path in PAGES}

#: ```python blocks (indented inside list items too), each with the HTML comment right before it, if any
BLOCK = re.compile(
    r"(?:<!--(?P<comment>(?:(?!-->).)*)-->\s*\n)?^(?P<indent> *)```python\n(?P<code>.*?)^(?P=indent)```",
    re.S | re.M,
)


def section(title: str) -> str:
    """The text under the heading ``title`` (in README.md or any docs page) up to the next heading of the
    same or a higher level."""
    for text in TEXT.values():
        lines, level, out, fenced = text.splitlines(), 0, [], False
        for line in lines:
            if line.lstrip().startswith("```"):
                fenced = not fenced
            heading = None if fenced else re.match(r"(#+) (.*)", line)
            if level and heading and len(heading.group(1)) <= level:
                break
            if level:
                out.append(line)
            elif heading and heading.group(2) == title:
                level = len(heading.group(1))
        if level:
            return "\n".join(out)
    raise AssertionError(f"no page has a section {title!r}")


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


def slug(heading: str) -> str:
    """The anchor MkDocs' toc extension (and GitHub, for these headings) gives a heading."""
    text = re.sub(r"<[^>]+>", "", heading).replace("`", "")
    text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode()
    return re.sub(r"[-\s]+", "-", re.sub(r"[^\w\s-]", "", text).strip().lower())


def anchors(text: str) -> set[str]:
    no_code = re.sub(r"^ *```.*?^ *```", "", text, flags=re.S | re.M)
    found = {slug(h) for h in re.findall(r"^#+ (.*)$", no_code, re.M)}
    return found | set(re.findall(r'id="([^"]+)"', text))


def test_no_reference_to_documents_users_do_not_have() -> None:
    files = [*PAGES, *(ROOT / "dnnsat").rglob("*.py")]
    for path in files:
        text = path.read_text()
        for pattern in (r"DESIGN\s*(§|\.md|section)", r"notes/\w+"):
            assert not re.search(pattern, text), f"{path.relative_to(ROOT)} refers to {pattern}"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_and_anchors_resolve(page: Path) -> None:
    text = re.sub(r"^ *```.*?^ *```", "", TEXT[page], flags=re.S | re.M)
    for target, anchor in re.findall(r"\]\(([^)#:\s]*)(?:#([^)\s]*))?\)", text):  # relative links
        path = (page.parent / target).resolve() if target else page
        assert path.exists(), f"{page.relative_to(ROOT)} links to missing {target}"
        if anchor and path.suffix == ".md":
            assert anchor in anchors(path.read_text()), f"{page.relative_to(ROOT)}: no #{anchor} in {target}"


def test_every_page_is_in_the_site_navigation_and_the_readme_is_short() -> None:
    nav = (ROOT / "mkdocs.yml").read_text().split("\nnav:", 1)[1]
    for page in DOCS.rglob("*.md"):
        assert str(page.relative_to(DOCS)) in nav, f"{page.relative_to(ROOT)} is not in mkdocs.yml's nav"
    assert len(TEXT[ROOT / "README.md"].splitlines()) <= 300


def test_api_reference_names_exist() -> None:
    """Every ``::: name`` of the API reference is a public name that imports (mkdocs --strict also fails)."""
    names = [n for page in DOCS.rglob("*.md") for n in re.findall(r"^::: (\S+)", page.read_text(), re.M)]
    assert len(names) > 50
    for name in names:
        if name.startswith(("dnnsat.torch", "dnnsat.integrations.optuna", "dnnsat.integrations.nni")):
            pytest.importorskip({"t": "torch", "i": name.split(".")[2]}[name[7]])
        module, _, attr = name.rpartition(".")
        assert hasattr(importlib.import_module(module), attr), name


# Each page's python blocks run in order in one namespace (in a temporary directory, for the files they
# write). "<!-- test-setup ... -->" right before a block runs first; "<!-- test-skip: reason -->" skips it.
NEEDS = {"torch": r"\bimport torch\b|from_torch|dnnsat\.torch", "optuna": r"\boptuna\b", "nni": r"\bnni\b"}


def blocks(page: Path) -> list[tuple[str, str, int]]:
    """(comment, code, line) of every python block of a page."""
    text = TEXT[page]
    return [
        (
            (m.group("comment") or "").strip(),
            textwrap.dedent(m.group("code")),
            text.count("\n", 0, m.start("code")),
        )
        for m in BLOCK.finditer(text)
    ]


RUNNABLE = [page for page in PAGES if blocks(page)]


@pytest.mark.parametrize("page", RUNNABLE, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_python_block_runs(page: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    code = "\n".join(c for _, c, _ in blocks(page))  # skip a page whose tool is not installed
    for module, pattern in NEEDS.items():
        if re.search(pattern, code):
            pytest.importorskip(module)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]))
    scope: dict[str, object] = {"__name__": f"docs_{page.stem.replace('-', '_')}"}
    elsewhere = {
        c for other in PAGES if other != page and page.name == "README.md" for _, c, _ in blocks(other)
    }
    for comment, block, line in blocks(page):
        if (
            comment.startswith("test-skip:") or block in elsewhere
        ):  # README's copies of a page's block run there
            continue
        name = f"{page.relative_to(ROOT)}:{line + 1}"
        if comment.startswith("test-setup"):
            exec(
                compile(textwrap.dedent(comment.removeprefix("test-setup")), f"{name} (set-up)", "exec"),
                scope,
            )
        exec(compile(block, name, "exec"), scope)


def test_skipped_blocks_say_why_and_are_few() -> None:
    skipped = [(p, c) for p in PAGES for c, _, _ in blocks(p) if c.startswith("test-skip")]
    assert all(len(c) > len("test-skip: ") + 10 for _, c in skipped), skipped
    assert len(skipped) <= 3, skipped


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
    code = re.search(r"A ViT in the same terms.*?```python\n(.*?)```", "\n".join(TEXT.values()), re.S)
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
