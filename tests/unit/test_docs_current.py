"""The docs stay true: the generated references are what the registry says, every
relative link in the README and docs/ points at a file (and heading) that exists, and the
README stays a front door."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import pytest

from guardian.cli.reference import actions_markdown, signals_markdown
from guardian.plugin.registry import Registry

REPO = Path(__file__).resolve().parents[2]
RENDER: dict[str, Callable[[Registry], str]] = {
    "signals": signals_markdown, "actions": actions_markdown}


@pytest.mark.parametrize("kind", sorted(RENDER))
def test_the_generated_reference_is_current(kind: str) -> None:
    if kind == "actions":
        pytest.importorskip("lightkube")  # the kube.* actions need the k8s extra
    path = REPO / "docs" / "reference" / f"{kind}.md"
    # a registry of its own: other tests may add plugins to the process-wide one
    want = RENDER[kind](Registry.from_entry_points())
    assert path.read_text() == want, (
        f"{path.relative_to(REPO)} differs from the registry; regenerate it with "
        f"`python -m guardian.cli.reference {kind} > docs/reference/{kind}.md`")


def _docs() -> list[Path]:
    return [REPO / "README.md", REPO / "CHANGELOG.md", REPO / "bench" / "README.md",
            *sorted((REPO / "docs").rglob("*.md"))]


def _prose(text: str) -> str:
    """The text without fenced code blocks and code spans, where `](` is not a link."""
    text = re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)
    return re.sub(r"`[^`\n]*`", "", text)


def _anchors(path: Path) -> set[str]:
    """GitHub's anchors of a Markdown file's headings."""
    out = set()
    for line in _prose(path.read_text()).splitlines():
        if m := re.match(r"#{1,6} (.*)", line):
            out.add(re.sub(r"[^\w\- ]", "", m.group(1).strip().lower()).replace(" ", "-"))
    return out


def test_every_relative_link_resolves() -> None:
    broken = []
    for doc in _docs():
        for target in re.findall(r"\]\(([^)\s]+)\)", _prose(doc.read_text())):
            if re.match(r"[a-z]+:", target):
                continue  # https:, mailto:
            file, _, anchor = target.partition("#")
            dest = (doc.parent / file).resolve() if file else doc
            where = f"{doc.relative_to(REPO)}: {target}"
            if not dest.exists():
                broken.append(f"{where} (no such file)")
            elif anchor and dest.suffix == ".md" and anchor not in _anchors(dest):
                broken.append(f"{where} (no such heading)")
    assert not broken, "\n".join(broken)


def test_the_readme_is_a_front_door() -> None:
    """What it is, the set-up commands, a rule, where to read on; the reference is in
    docs/."""
    size = len((REPO / "README.md").read_bytes())
    assert size <= 15_000, f"README.md is {size} bytes; move reference text to docs/"


def test_every_cited_file_and_test_exists() -> None:
    """The docs cite their evidence (`tests/system/test_x.py::test_y`, or `::test_z` after
    a file already named): a file or test that moved or was renamed fails here."""
    import ast
    wrong = []
    for doc in _docs():
        cited: Path | None = None
        for m in re.finditer(r"((?:tests|bench|src|examples)/[\w/.-]*\.py)(?:::(\w+))?"
                             r"|`::(\w+)", doc.read_text()):
            if m.group(1):
                cited = REPO / m.group(1)
                if not cited.is_file():
                    wrong.append(f"{doc.relative_to(REPO)}: {m.group(1)}")
                    cited = None
                    continue
            name = m.group(2) or m.group(3)
            if name and cited is not None:
                defined = {n.name for n in ast.walk(ast.parse(cited.read_text()))
                           if isinstance(n, ast.FunctionDef | ast.ClassDef)}
                if name not in defined:
                    wrong.append(f"{doc.relative_to(REPO)}: {cited.relative_to(REPO)}::{name}")
    assert not wrong, "\n".join(wrong)
