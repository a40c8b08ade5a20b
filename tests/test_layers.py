"""The structure follows the data flow: each module imports only from its own layer or
the layers below (the README's design section names them, bottom first), and actions get
typed evidence, not its rendering."""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import ClassVar

from guardian import Action, ActionContext, Engine, Executor, Host, Outcome, Plan, load_text
from guardian.plugins import NoParams
from guardian.testing import family, snapshot

from .conftest import REPO

SRC = REPO / "src" / "guardian"


def _layers() -> list[tuple[str, list[str]]]:
    """The layer table of the README's design section: `| layer | modules |` rows."""
    text = (REPO / "README.md").read_text()
    section = text[text.index("### Layers"):]
    section = section[:section.index("\n\n", section.index("|"))]
    rows = []
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 2 and cells[0] and not set(cells[0]) <= {"-"} and cells[0] != "layer":
            rows.append((cells[0], re.findall(r"`([^`]+)`", cells[1])))
    return rows


def _module(path: Path) -> str:
    rel = path.relative_to(SRC.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _layer_of(module: str, layers: list[tuple[str, list[str]]]) -> int:
    for i, (_, patterns) in enumerate(layers):
        for pat in patterns:
            name = "guardian" if pat == "guardian" else "guardian." + pat.removesuffix(".py")
            if pat.endswith("/"):
                name = "guardian." + pat.rstrip("/")
                if module == name or module.startswith(name + "."):
                    return i
            elif module == name:
                return i
    raise AssertionError(f"{module} is in no layer of the README's table")


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


def test_no_module_imports_from_a_layer_above_it() -> None:
    layers = _layers()
    assert [name for name, _ in layers][:3] == ["base", "host", "model"]
    files = sorted(SRC.rglob("*.py"))
    known = {_module(f) for f in files}
    wrong = []
    for f in files:
        mod = _module(f)
        mine = _layer_of(mod, layers)
        for target in _imports(f, mod):
            dep = _resolve(target, known)
            theirs = _layer_of(dep, layers)
            if theirs > mine:
                wrong.append(f"{mod} ({layers[mine][0]}) imports {dep} ({layers[theirs][0]})")
    assert not wrong, "\n".join(wrong)


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
    from guardian.plugins import default_registry
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
