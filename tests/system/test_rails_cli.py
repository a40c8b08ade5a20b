"""The rails around apply(), through guardian's command line: `run --once` keeps
`for`/cooldown/limits across invocations, a plugin cannot replace another, secrets marked
by a parameter model never reach `--json` output, and `guardian act` is audited as manual.
The in-process rails are tests/unit/runtime/test_rails.py."""

from __future__ import annotations

import json
import os
import textwrap
from pathlib import Path
from typing import ClassVar

import pytest
from pydantic import BaseModel, ConfigDict, SecretStr

from guardian import (
    Action,
    ActionContext,
    Engine,
    Executor,
    Host,
    Outcome,
    Plan,
    Snapshot,
    Step,
    load_text,
)
from guardian.core.audit import AuditLog, read_audit
from tests.support.checkout import write
from tests.support.cli import guardian
from tests.support.plugins import registry_with
from tests.support.rule_texts import ACTION_RULE

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
        proc = guardian("run", "--once", "--warmup", "0s", "--rules", str(rules),
                        "--state", str(state), "--config", str(write(tmp_path, "g.toml", "")))
        assert proc.returncode == 0, proc.stderr
    lines = marker.read_text().splitlines() if marker.exists() else []
    assert lines == ["acted"] * acts
    saved = json.loads(state.read_text())
    assert saved["rules"]["always"]["phase"] == ("pending" if acts == 0 else "firing")


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
    rules = write(tmp_path, "r.toml", ACTION_RULE.format(use="log"))
    action = _plugin(tmp_path, "evil-log", "guardian.actions", "log", "Impostor",
                     LOG_IMPOSTOR.format(name="log"))
    proc = guardian("check", str(rules), env=_env(action))
    assert proc.returncode == 78, proc.stderr
    assert "action 'log' is provided twice" in proc.stderr
    assert "'node-guardian'" in proc.stderr and "'evil-log'" in proc.stderr
    assert "Traceback" not in proc.stderr
    source = _plugin(tmp_path, "acme-memcg", "guardian.sources", "acme.memcg", "Dying",
                     DYING_IMPOSTOR)
    proc = guardian("check", str(rules), env=_env(source))
    assert proc.returncode == 78
    assert "signal 'memcg.dying' is provided twice" in proc.stderr
    assert "'acme-memcg'" in proc.stderr
    # actions are imported when first used (issue 20): a class whose name disagrees with
    # its entry point is an error located at the rule that uses it
    misnamed = _plugin(tmp_path, "acme-drain", "guardian.actions", "acme.drain", "Impostor",
                       LOG_IMPOSTOR.format(name="acme.drian"))
    uses = write(tmp_path, "uses.toml", ACTION_RULE.format(use="acme.drain"))
    proc = guardian("check", str(uses), env=_env(misnamed))
    assert proc.returncode == 1, proc.stderr
    out = proc.stdout + proc.stderr
    assert "uses.toml:7:" in out, out
    assert "entry point 'acme.drain'" in out and "'acme.drian'" in out
    assert "Traceback" not in out


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
    rules = load_text(text, registry=registry_with(Notify))
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
    proc = guardian("run", "--once", "--dry-run", "--json", "--warmup", "0s",
                    "--rules", str(live))
    assert proc.returncode == 0, proc.stderr
    assert "also-do-not-leak" not in proc.stdout and "<redacted>" in proc.stdout


def test_guardian_act_is_audited_as_manual(tmp_path: Path) -> None:
    """The operator's explicit action: the executor's plan and apply path, marked manual."""
    audit = tmp_path / "a.jsonl"
    proc = guardian("act", "log", "--set", "message=by hand", "--warmup", "0s",
                    "--audit", str(audit), "--config", str(write(tmp_path, "g.toml", "")))
    assert proc.returncode == 0, proc.stderr
    records = [r for r in read_audit(audit) if isinstance(r, dict)]
    assert [r["type"] for r in records] == ["decision", "plan", "outcome"]
    assert records[0]["manual"] is True and records[0]["kind"] == "manual"
    assert records[2]["outcome"]["ok"] is True
