"""The rails around apply(): only engine decisions act, a refusing plan is never applied,
`run --once` keeps `for`/cooldown/limits across invocations, plugins cannot replace one
another, a source's malformed output is unknown (never a known empty family), and secrets
marked by a parameter model never reach the audit log."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any, ClassVar

import pytest
from pydantic import BaseModel, ConfigDict, SecretStr

from guardian import (
    Action,
    ActionContext,
    Collector,
    Decision,
    Engine,
    Executor,
    Host,
    Outcome,
    Plan,
    SignalSpec,
    Snapshot,
    Source,
    Step,
    load_text,
)
from guardian.core.audit import AuditLog, read_audit
from guardian.plugin.contract import NoParams
from guardian.plugin.registry import Registry, RegistryError, default_registry
from guardian.testing import family, snapshot
from tests.support.checkout import write


def _guardian(*args: str, env: dict[str, str] | None = None,
              ) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "guardian", *args], capture_output=True,
                          text=True, timeout=120, env=env)


MARKER_RULE = '''version = 1
[[rule]]
name = "always"
summary = "a host always has processes"
when = "processes.total > 0"
for = "{for_}"
cooldown = "1h"
limit = {{ runs = 1, within = "1d" }}
  [[rule.action]]
  use = "command"
  argv = ["/bin/sh", "-c", "echo acted >> {marker}"]
'''


@pytest.mark.parametrize(("for_", "acts"), [("1h", 0), ("0s", 1)])
def test_run_once_live_acts_only_when_the_engine_says_so(tmp_path: Path, for_: str,
                                                         acts: int) -> None:
    """Three cron-style live invocations. Before: every one built its own decision and
    acted (a `for = "1h"` rule with a 1-a-day limit acted three times). Now the engine's
    state is carried between them in --state: `for` holds it pending, and a rule that
    fires acts once (cooldown and limit)."""
    marker = tmp_path / "marker"
    rules = write(tmp_path, "r.toml", MARKER_RULE.format(for_=for_, marker=marker))
    state = tmp_path / "state.json"
    for _ in range(3):
        proc = _guardian("run", "--once", "--warmup", "0s", "--rules", str(rules),
                         "--state", str(state), "--config", str(write(tmp_path, "g.toml", "")))
        assert proc.returncode == 0, proc.stderr
    lines = marker.read_text().splitlines() if marker.exists() else []
    assert lines == ["acted"] * acts
    saved = json.loads(state.read_text())
    assert saved["rules"]["always"]["phase"] == ("pending" if acts == 0 else "firing")


class RefusingAction(Action[NoParams]):
    """Its plan refuses; its apply would leave a marker."""

    name: ClassVar[str] = "test.refusing"
    marker: ClassVar[Path]

    def plan(self, ctx: ActionContext) -> Plan:
        return Plan(self.name, ctx.rule, [Step("x", "y")], refused=["not today"])

    def apply(self, plan: Plan, ctx: ActionContext) -> Outcome:
        self.marker.write_text("applied")
        return Outcome(ok=True)


class MarkerAction(Action[NoParams]):
    """Applies by leaving a marker."""

    name: ClassVar[str] = "test.marker"
    marker: ClassVar[Path]

    def plan(self, ctx: ActionContext) -> Plan:
        return Plan(self.name, ctx.rule, [Step("marker", "write")])

    def apply(self, plan: Plan, ctx: ActionContext) -> Outcome:
        self.marker.write_text("applied")
        return Outcome(ok=True)


RULE = '''version = 1
[[rule]]
name = "r"
summary = "s"
when = "memcg.dying > 1"
  [[rule.action]]
  use = "{use}"
'''


def _registry(*actions: type[Action[Any]]) -> Registry:
    reg = default_registry().copy()
    for a in actions:
        reg.add_action(a)
    return reg


def test_a_plan_that_refuses_is_never_applied_and_said_once(tmp_path: Path) -> None:
    RefusingAction.marker = tmp_path / "marker"
    rules = load_text(RULE.format(use="test.refusing"), registry=_registry(RefusingAction))
    audit = tmp_path / "a.jsonl"
    snap = Snapshot(0.0, {"memcg.dying": 5.0})
    [done] = Executor(Host(), dry_run=False, audit=AuditLog(audit)).run(
        Engine(rules).evaluate(snap), snap)
    assert done.refused and done.outcome is None and "not today" in done.error
    assert not RefusingAction.marker.exists()
    types = [r["type"] for r in read_audit(audit) if isinstance(r, dict)]
    assert types == ["decision", "plan", "refused"]


def test_only_engine_decisions_are_applied(tmp_path: Path) -> None:
    """A decision built by hand (as `run --once`, `explain` or `replay` build them to
    show a plan) is planned in a dry run and refused live."""
    MarkerAction.marker = tmp_path / "marker"
    rules = load_text(RULE.format(use="test.marker"), registry=_registry(MarkerAction))
    rule = rules.rules[0]
    snap = Snapshot(0.0, {"memcg.dying": 5.0})
    forged = Decision(0.0, "r", "firing", "warning", "s", {}, list(rule.actions))
    assert not forged.from_engine
    [planned] = Executor(Host(), dry_run=True).run([forged], snap)
    assert planned.plan is not None and planned.outcome is None and not planned.refused
    [live] = Executor(Host(), dry_run=False).run([forged], snap)
    assert live.refused and "not a decision of the engine" in live.error
    assert not MarkerAction.marker.exists()
    [real] = Executor(Host(), dry_run=False).run(Engine(rules).evaluate(snap), snap)
    assert real.outcome is not None and real.outcome.ok
    assert MarkerAction.marker.read_text() == "applied"


def _plugin(tmp_path: Path, dist: str, group: str, ep_name: str, cls_name: str,
            body: str) -> Path:
    """A distribution installed into a directory of its own (a *.dist-info with entry
    points, as pip lays one out), to be put on sys.path."""
    site = tmp_path / f"site-{dist}"
    mod = dist.replace("-", "_")
    (site / mod).mkdir(parents=True)
    (site / mod / "__init__.py").write_text(textwrap.dedent(body))
    info = site / f"{mod}-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(f"[{group}]\n{ep_name} = {mod}:{cls_name}\n")
    return site


LOG_IMPOSTOR = '''
from typing import ClassVar
from guardian.plugin.contract import Action, Outcome, Plan

class Impostor(Action):
    name: ClassVar[str] = "{name}"

    def plan(self, ctx):
        return Plan(self.name, ctx.rule)

    def apply(self, plan, ctx):
        return Outcome(ok=True)
'''

DYING_IMPOSTOR = '''
from typing import ClassVar
from guardian.plugin.contract import Source
from guardian.core.snapshot import SignalSpec

class Dying(Source):
    name: ClassVar[str] = "acme.memcg"
    specs = (SignalSpec("memcg.dying", "a second opinion"),)

    def collect(self, now):
        return {"memcg.dying": 0.0}
'''


def _env(*sites: Path) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join(str(s) for s in sites)}


def test_a_plugin_that_collides_with_a_built_in_is_a_load_error(tmp_path: Path) -> None:
    rules = write(tmp_path, "r.toml", RULE.format(use="log"))
    action = _plugin(tmp_path, "evil-log", "guardian.actions", "log", "Impostor",
                     LOG_IMPOSTOR.format(name="log"))
    proc = _guardian("check", str(rules), env=_env(action))
    assert proc.returncode == 78, proc.stderr
    assert "action 'log' is provided twice" in proc.stderr
    assert "'node-guardian'" in proc.stderr and "'evil-log'" in proc.stderr
    assert "Traceback" not in proc.stderr
    source = _plugin(tmp_path, "acme-memcg", "guardian.sources", "acme.memcg", "Dying",
                     DYING_IMPOSTOR)
    proc = _guardian("check", str(rules), env=_env(source))
    assert proc.returncode == 78
    assert "signal 'memcg.dying' is provided twice" in proc.stderr
    assert "'acme-memcg'" in proc.stderr
    # actions are imported when first used (issue 20): a class whose name disagrees with
    # its entry point is an error located at the rule that uses it
    misnamed = _plugin(tmp_path, "acme-drain", "guardian.actions", "acme.drain", "Impostor",
                       LOG_IMPOSTOR.format(name="acme.drian"))
    uses = write(tmp_path, "uses.toml", RULE.format(use="acme.drain"))
    proc = _guardian("check", str(uses), env=_env(misnamed))
    assert proc.returncode == 1, proc.stderr
    out = proc.stdout + proc.stderr
    assert "uses.toml:7:" in out, out
    assert "entry point 'acme.drain'" in out and "'acme.drian'" in out
    assert "Traceback" not in out


def test_in_process_registration_cannot_replace_a_name() -> None:
    class Other(Action[NoParams]):
        name: ClassVar[str] = "log"

        def plan(self, ctx: ActionContext) -> Plan:
            return Plan(self.name, ctx.rule)

        def apply(self, plan: Plan, ctx: ActionContext) -> Outcome:
            return Outcome(ok=True)

    reg = default_registry().copy()
    with pytest.raises(RegistryError, match="action 'log' is provided twice"):
        reg.add_action(Other)
    reg.add_action(reg.actions["log"])  # the same class again is no collision


class Malformed(Source[NoParams]):
    """Returns one malformed shape per signal, chosen by ``shape``."""

    name: ClassVar[str] = "test.malformed"
    specs: ClassVar[tuple[SignalSpec, ...]] = (
        SignalSpec("test.load", "a family", labels=("cpu",)),
        SignalSpec("test.level", "a scalar"),
    )
    shape: ClassVar[str] = ""

    def collect(self, now: float) -> dict[str, object]:
        shapes: dict[str, dict[str, object]] = {
            "string keys": {"test.load": {"0": 95.0}},
            "wrong labels": {"test.load": {(("core", "0"),): 95.0}},
            "nan member": {"test.load": {(("cpu", "0"),): float("nan")}},
            "scalar for a family": {"test.load": 95.0},
            "nan scalar": {"test.level": float("nan")},
            "string scalar": {"test.level": "95"},
            "undeclared name": {"test.loda": {(("cpu", "0"),): 95.0}},
        }
        return shapes[self.shape]


@pytest.mark.parametrize("shape", ["string keys", "wrong labels", "nan member",
                                   "scalar for a family", "nan scalar", "string scalar",
                                   "undeclared name"])
def test_a_malformed_source_value_is_unknown_and_counted(
        shape: str, caplog: pytest.LogCaptureFixture) -> None:
    """Before: a family with string keys became a known, empty family, so `max(x) > 90`
    was false instead of unknown, and no error was counted."""
    Malformed.shape = shape
    reg = Registry()
    reg.add_source(Malformed)
    rules = load_text('''version = 1
[[rule]]
name = "hot"
summary = "s"
when = "max(test.load) > 90 or test.level > 90"
''', registry=reg)
    coll = Collector(Host(), [Malformed(Host())])
    engine = Engine(rules)
    for t in (0.0, 1.0):
        snap = coll.collect(t)
        assert engine.evaluate(snap) == []
    assert engine.states["hot"].unknown  # not false: unknown
    assert "test.load" not in snap.values and "test.level" not in snap.values
    assert coll.error_counts["test.malformed"] == 2
    errors = snap.values["guardian.source_errors"]
    assert isinstance(errors, dict) and errors[(("source", "test.malformed"),)] == 2.0
    assert "test.malformed" in snap.errors
    told = [r for r in caplog.records if "has no value" in r.getMessage()]
    assert len(told) == 1  # logged once, not every tick


def test_hand_built_snapshots_are_checked_the_same_way() -> None:
    rules = load_text('''version = 1
[[rule]]
name = "hot"
summary = "s"
when = "max(cpu.core.sys_pct) > 90"
''')
    engine = Engine(rules)
    snap = Snapshot(0.0, {"cpu.core.sys_pct": {"3": 95.0}})  # type: ignore[dict-item]
    assert engine.evaluate(snap) == [] and engine.states["hot"].unknown
    assert "cpu.core.sys_pct" in snap.errors
    good = snapshot(0.0, {"cpu.core.sys_pct": family("cpu", {"3": 95.0})})
    assert [d.kind for d in engine.evaluate(good)] == ["firing"]


class AuthParams(BaseModel):
    model_config = ConfigDict(extra="forbid")

    url: str
    auth: SecretStr
    bearer: str = ""


class Notify(Action[AuthParams]):
    """A plugin action with a secret whose name no word list would catch."""

    name: ClassVar[str] = "test.notify"
    Params: ClassVar[type[BaseModel]] = AuthParams
    disruptive: ClassVar[bool] = False

    def plan(self, ctx: ActionContext) -> Plan:
        return Plan(self.name, ctx.rule, [Step("notify", "post")])

    def apply(self, plan: Plan, ctx: ActionContext) -> Outcome:
        return Outcome(ok=True)


def test_secrets_marked_by_the_params_model_are_redacted_everywhere(tmp_path: Path) -> None:
    """Before: redaction went by words in the key name, and a SecretStr called `auth`
    reached the audit log in clear."""
    text = '''version = 1
[[rule]]
name = "r"
summary = "s"
when = "memcg.dying > 1"
  [[rule.action]]
  use = "test.notify"
  url = "http://127.0.0.1:9/hook"
  auth = "hunter2-do-not-leak"
  [[rule.action]]
  use = "command"
  argv = ["/bin/true"]
  env = { TOKENLESS = "also-do-not-leak" }
'''
    rules = load_text(text, registry=_registry(Notify))
    audit = tmp_path / "a.jsonl"
    snap = Snapshot(0.0, {"memcg.dying": 5.0})
    decisions = Engine(rules).evaluate(snap)
    Executor(Host(), dry_run=False, audit=AuditLog(audit)).run(decisions, snap)
    shown = json.dumps([d.to_dict() for d in decisions]) + audit.read_text()
    assert "hunter2" not in shown and "also-do-not-leak" not in shown
    assert '"auth": "<redacted>"' in shown and '"TOKENLESS": "<redacted>"' in shown
    assert "http://127.0.0.1:9/hook" in shown  # what is not secret stays readable
    # guardian's own --json output of a rule that holds (a dry run on this host)
    live = write(tmp_path, "live.toml", text.replace("memcg.dying > 1", "processes.total > 0")
                 .replace('use = "test.notify"', 'use = "log"\n  message = "m"')
                 .replace('  url = "http://127.0.0.1:9/hook"\n  auth = "hunter2-do-not-leak"\n',
                          ""))
    proc = _guardian("run", "--once", "--dry-run", "--json", "--warmup", "0s",
                     "--rules", str(live))
    assert proc.returncode == 0, proc.stderr
    assert "also-do-not-leak" not in proc.stdout and "<redacted>" in proc.stdout


def test_guardian_act_is_audited_as_manual(tmp_path: Path) -> None:
    """The operator's explicit action: the executor's plan and apply path, marked manual."""
    audit = tmp_path / "a.jsonl"
    proc = _guardian("act", "log", "--set", "message=by hand", "--warmup", "0s",
                     "--audit", str(audit), "--config", str(write(tmp_path, "g.toml", "")))
    assert proc.returncode == 0, proc.stderr
    records = [r for r in read_audit(audit) if isinstance(r, dict)]
    assert [r["type"] for r in records] == ["decision", "plan", "outcome"]
    assert records[0]["manual"] is True and records[0]["kind"] == "manual"
    assert records[2]["outcome"]["ok"] is True
