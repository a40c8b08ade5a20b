"""The tree shows the design: every module lives in a package of one layer, and imports
only from its own layer or the layers below (docs/design.md's layer table, bottom first,
says the same and is checked against this one); actions get typed evidence, not its
rendering."""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import ClassVar

from guardian import Action, ActionContext, Engine, Executor, Host, Outcome, Plan, load_text
from guardian.plugin.contract import NoParams
from guardian.testing import family, snapshot
from tests.support.checkout import REPO

SRC = REPO / "src" / "guardian"

# Bottom first; a package's modules may import their own layer and those below.
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    ("core", ("core",)),
    ("host", ("hostio",)),
    ("model", ("plugin", "model")),
    ("plugins", ("sources", "actions", "kube")),
    ("engine", ("engine",)),
    ("policy", ("policy",)),
    ("runtime", ("runtime", "testing")),
    ("service", ("service",)),
    ("entry", ("cli",)),
]
# The only modules outside a layer's package: the public names and `python -m guardian`.
ENTRY_MODULES = {"guardian", "guardian.__main__"}


def _module(path: Path) -> str:
    rel = path.relative_to(SRC.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _layer_of(module: str) -> int:
    if module in ENTRY_MODULES:
        return len(LAYERS) - 1
    package = module.split(".")[1]
    for i, (_, packages) in enumerate(LAYERS):
        if package in packages:
            return i
    raise AssertionError(f"{module} is in no layer's package")


def _imports(path: Path, module: str) -> list[str]:
    package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
    out: list[str] = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[:len(base) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            names = [target + "." + a.name for a in node.names] if node.module is None \
                else [target]
            out.extend(n for n in names if n.startswith("guardian"))
        elif isinstance(node, ast.Import):
            out.extend(a.name for a in node.names if a.name.startswith("guardian"))
    return out


def _resolve(target: str, known: set[str]) -> str:
    while target not in known and "." in target:
        target = target.rsplit(".", 1)[0]
    return target


def test_every_module_lives_in_a_layers_package() -> None:
    """A new loose module (src/guardian/x.py) or a package no layer names fails here."""
    loose = [p.name for p in SRC.glob("*.py") if p.name not in ("__init__.py", "__main__.py")]
    assert not loose, f"loose modules: {loose}; put each in its layer's package"
    packages = {p.name for p in SRC.iterdir() if (p / "__init__.py").is_file()}
    named = {pkg for _, pkgs in LAYERS for pkg in pkgs}
    assert packages == named, f"packages no layer names: {packages - named}; " \
        f"named but missing: {named - packages}"
    for f in SRC.rglob("*.py"):
        _layer_of(_module(f))


def test_no_module_imports_from_a_layer_above_it() -> None:
    files = sorted(SRC.rglob("*.py"))
    known = {_module(f) for f in files}
    wrong = []
    for f in files:
        mod = _module(f)
        mine = _layer_of(mod)
        for target in _imports(f, mod):
            dep = _resolve(target, known)
            theirs = _layer_of(dep)
            if theirs > mine:
                wrong.append(f"{mod} ({LAYERS[mine][0]}) imports {dep} ({LAYERS[theirs][0]})")
    assert not wrong, "\n".join(wrong)


def test_the_design_docs_layer_table_is_this_one() -> None:
    text = (REPO / "docs" / "design.md").read_text()
    section = text[text.index("### Layers"):]
    section = section[:section.index("\n\n", section.index("|"))]
    rows = []
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 2 and cells[0] and not set(cells[0]) <= {"-"} and cells[0] != "layer":
            rows.append((cells[0], tuple(p.rstrip("/") for p in re.findall(r"`([^`]+)/`",
                                                                              cells[1]))))
    assert rows == LAYERS


class Remember(Action[NoParams]):
    """Keeps the context it was given."""

    name: ClassVar[str] = "test.remember"
    seen: ClassVar[list[ActionContext]] = []
    disruptive: ClassVar[bool] = False

    def plan(self, ctx: ActionContext) -> Plan:
        self.seen.append(ctx)
        return Plan(self.name, ctx.rule)

    def apply(self, plan: Plan, ctx: ActionContext) -> Outcome:
        return Outcome(ok=True)


def test_actions_get_the_typed_matched_family() -> None:
    """Before: the context held the audit rendering ('{cpu="3"}', rounded, '+Inf'), so an
    action could not tell which core matched."""
    from guardian.plugin.registry import default_registry
    reg = default_registry().copy()
    reg.add_action(Remember)
    rules = load_text('''version = 1
[[rule]]
name = "hot"
summary = "s"
when = "cpu.core.sys_pct > 90"
  [[rule.action]]
  use = "test.remember"
''', registry=reg)
    snap = snapshot(0.0, {"cpu.core.sys_pct": family("cpu", {"3": 95.5, "5": 10.0})})
    Executor(Host(), dry_run=True).run(Engine(rules).evaluate(snap), snap)
    [ctx] = Remember.seen
    assert ctx.matched == {(("cpu", "3"),): 95.5}
    assert ctx.values["matched"] == {'{cpu="3"}': 95.5}  # the rendering is still there
