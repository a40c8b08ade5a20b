"""Operating guardian on a fleet (issue 31): holds (pause and silence), maintenance
windows, shadow mode, escalation, the `fleet` check, and the CLI and file sources of
holds. The Kubernetes sources and the fleet-wide pause are in test_kube_fleet.py, the
notification actions in test_notify_actions.py."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import ClassVar

import pytest

from guardian import Engine, Executor, Host, Snapshot, load_text
from guardian.cli import main
from guardian.core.audit import AuditLog
from guardian.core.diagnostics import RuleError
from guardian.model.holds import Hold, parse_holds
from guardian.model.window import Window
from guardian.plugin.contract import Action, ActionContext, NoParams, Outcome, Plan
from guardian.plugin.registry import Registry, default_registry
from guardian.runtime.config import Config
from guardian.runtime.holds import DropIn, HoldFile
from guardian.runtime.metrics import Metrics
from guardian.runtime.operate import Operations
from guardian.runtime.why import links, text

T0 = dt.datetime(2026, 12, 7, 0, 0, tzinfo=dt.timezone.utc).timestamp()  # a Monday
# a hold's end in a month from now (holds may not last more than ten years from now)
SOON = (dt.datetime.now(dt.timezone.utc) + dt.timedelta(days=30)).strftime("%Y-%m-%dT%H:%M:%SZ")


class Applied:
    calls: ClassVar[list[str]] = []


class Remedy(Action[NoParams]):
    """A disruptive test action that records every apply()."""

    name: ClassVar[str] = "test.remedy"

    def plan(self, ctx: ActionContext) -> Plan:
        return Plan(self.name, ctx.rule)

    def apply(self, plan: Plan, ctx: ActionContext) -> Outcome:
        Applied.calls.append(f"{ctx.rule}:{ctx.kind}")
        return Outcome(ok=True)


class Note(Remedy):
    name: ClassVar[str] = "test.note"
    disruptive: ClassVar[bool] = False


def registry() -> Registry:
    reg = default_registry().copy()
    reg.add_action(Remedy)
    reg.add_action(Note)
    return reg


RULE = '''version = 1
[[rule]]
name = "leak"
summary = "s"
when = "memcg.dying > 10"
cooldown = "1m"
labels = {{ team = "mem" }}
{extra}
  [[rule.action]]
  use = "test.note"
  [[rule.action]]
  use = "test.remedy"
'''


def rules(extra: str = "") -> Engine:
    return Engine(load_text(RULE.format(extra=extra), registry=registry()))


def always_rules_dir(tmp_path: Path) -> Path:
    """A rules directory with one rule that always holds and only logs."""
    rules_dir = tmp_path / "rules"
    rules_dir.mkdir()
    (rules_dir / "r.toml").write_text('version = 1\n[[rule]]\nname = "always"\n'
                                      'summary = "s"\nwhen = "processes.total > 0"\n'
                                      '  [[rule.action]]\n  use = "log"\n')
    return rules_dir


HOLDS: list[Hold] = []  # the holds in force that tick() evaluates under


def tick(engine: Engine, ex: Executor, t: float, v: float = 50.0) -> list[str]:
    """One evaluation at wall time T0 + t under HOLDS; the kinds of the decisions and
    what ran."""
    Applied.calls.clear()
    snap = Snapshot(t, {"memcg.dying": v})
    decisions = engine.evaluate(snap, holds=HOLDS, wall=T0 + t)
    ex.run(decisions, snap)
    return [d.kind for d in decisions] + list(Applied.calls)


def test_a_paused_rule_evaluates_plans_and_audits_and_acts_when_the_hold_ends(
        tmp_path: Path) -> None:
    engine = rules()
    audit = tmp_path / "audit.jsonl"
    ex = Executor(Host(), dry_run=False, audit=AuditLog(audit))
    HOLDS[:] = [Hold(T0 + 600, "kernel rollout", "alice")]
    assert tick(engine, ex, 0) == ["firing", "held"]  # nothing applied
    held = [json.loads(line) for line in audit.read_text().splitlines()]
    [decision] = [e for e in held if e["type"] == "decision" and e["kind"] == "held"]
    assert decision["reason"] == "paused by alice until 2026-12-07T00:10:00Z: kernel rollout"
    assert [a["use"] for a in decision["held_actions"]] == ["test.note", "test.remedy"]
    assert {e["use"] for e in held if e["type"] == "plan" and e.get("held")} == \
        {"test.note", "test.remedy"}  # planned and audited, not applied
    assert engine.states["leak"].paused.startswith("paused by alice")
    assert tick(engine, ex, 300) == ["held"]  # after the cooldown: still held
    # the hold ends while the rule still fires: what was held runs at once
    assert tick(engine, ex, 601) == ["retry", "leak:retry", "leak:retry"]
    assert engine.states["leak"].paused == ""


def test_holds_match_all_rules_a_name_or_labels_and_always_expire() -> None:
    h = Hold(T0, "r", "a", rule="*", labels=(("team", "mem"),))
    assert h.matches("leak", {"team": "mem"}) and not h.matches("leak", {"team": "net"})
    assert Hold(T0, "r", "a", rule="leak").matches("leak", {})
    assert not Hold(T0, "r", "a", rule="other").matches("leak", {})
    holds, problems = parse_holds('[[hold]]\nrule = "leak"\nreason = "r"\nauthor = "a"\n',
                                  "f")
    # a hold without `until` is malformed: it holds every rule until fixed, never none
    [broken] = holds
    assert "until: Field required" in problems[0] and broken.broken and broken.rule == "*"
    holds, problems = parse_holds('[[hold]]\nuntil = 2026-12-07T01:00:00Z\nreason = "r"\n'
                                  'author = "a"\nlabels = { team = "net" }\n', "f")
    assert not problems and holds[0].until == T0 + 3600 and holds[0].matcher == \
        '*{team="net"}'
    engine = rules()
    ex = Executor(Host(), dry_run=False)
    HOLDS[:] = [Hold(T0 + 60, "r", "a", labels=(("team", "net"),))]
    assert "leak:firing" in tick(engine, ex, 0)  # another team's hold
    engine = rules()
    HOLDS[:] = [Hold(T0 - 1, "r", "a")]  # expired
    assert "leak:firing" in tick(engine, ex, 0)
    HOLDS.clear()


# kured's window semantics (cmd/kured/main.go: --reboot-days, --start-time, --end-time,
# --time-zone): days and a daily span in a time zone
def test_window_opening_while_a_rule_fires_runs_the_held_disruptive_action() -> None:
    window = 'window = { days = ["mon"], start = "02:00", end = "04:00", ' \
             'time_zone = "Europe/Berlin" }'
    engine = rules(window)
    ex = Executor(Host(), dry_run=False)
    # Monday 00:00 UTC is 01:00 in Berlin: closed; the log-like action runs, not the remedy
    kinds = tick(engine, ex, 0)
    assert kinds == ["firing", "held", "leak:firing"], kinds
    assert tick(engine, ex, 30) == []  # within the cooldown: nothing new
    assert tick(engine, ex, 1800) == ["retry", "held", "leak:retry"]  # held, not dropped
    # 01:00 UTC is 02:00 in Berlin: the window opens, and the held remedy runs
    assert tick(engine, ex, 3600) == ["retry", "leak:retry", "leak:retry"]
    w = Window(days=["fri"], start="22:00", end="02:00", time_zone="UTC")
    fri_23 = dt.datetime(2026, 12, 11, 23, 0, tzinfo=dt.timezone.utc).timestamp()
    assert w.is_open(fri_23) and w.is_open(fri_23 + 7200) and not w.is_open(fri_23 + 10800)
    assert "Europe/Berlin" in Window(time_zone="Europe/Berlin").describe()
    with pytest.raises(ValueError, match="unknown time zone"):
        Window(time_zone="Mars/Olympus")
    from guardian.model.window import zone
    assert zone("UTC") is dt.timezone.utc  # no tz database needed (a slim image)


def test_config_window_applies_to_rules_without_their_own() -> None:
    engine = rules()
    ex = Executor(Host(), dry_run=False)
    snap = Snapshot(0, {"memcg.dying": 50.0})
    held = [d for d in engine.evaluate(snap, wall=T0, window=Window(days=["sat"]))
            if d.kind == "held"]  # T0 is a Monday
    assert "held outside the maintenance window (sat 00:00-24:00 UTC)" in held[0].reason
    assert [a.use for a in held[0].would] == ["test.remedy"]
    assert ex is not None


class Exploding(Action[NoParams]):
    name: ClassVar[str] = "test.explode"

    def plan(self, ctx: ActionContext) -> Plan:
        return Plan(self.name, ctx.rule)

    def apply(self, plan: Plan, ctx: ActionContext) -> Outcome:
        raise AssertionError("a shadow rule reached apply()")


def test_a_shadow_rule_never_reaches_apply(tmp_path: Path) -> None:
    reg = registry()
    reg.add_action(Exploding)
    ruleset = load_text('''version = 1
[[rule]]
name = "new"
summary = "s"
when = "memcg.dying > 10"
cooldown = "1m"
limit = { runs = 10, within = "1h" }
mode = "observe"
  [[rule.action]]
  use = "test.explode"
  on = "both"
''', registry=reg)
    engine = Engine(ruleset)
    audit = tmp_path / "audit.jsonl"
    ex = Executor(Host(), dry_run=False, audit=AuditLog(audit))
    metrics = Metrics()
    ex.on_result.append(lambda e: metrics.actions.labels(e.decision.rule, e.use,
                                                         e.result).inc())
    results = []
    for t, v in ((0, 50), (60, 50), (120, 50), (180, 0)):
        snap = Snapshot(float(t), {"memcg.dying": float(v)})
        results += ex.run(engine.evaluate(snap), snap)
    assert [r.result for r in results] == ["would_act"] * 4  # fire, 2 retries, resolve
    entries = [json.loads(line) for line in audit.read_text().splitlines()]
    assert not [e for e in entries if e["type"] == "outcome"]
    assert all(e.get("mode") == "observe" for e in entries if e["type"] == "decision")
    assert sum(1 for e in entries if e["type"] == "plan" and e.get("would_act")) == 4
    assert metrics.registry.get_sample_value(
        "guardian_actions_total", {"rule": "new", "action": "test.explode",
                                   "outcome": "would_act"}) == 4.0
    from guardian.runtime.replay import Replay, decisions_json, timeline
    r = Replay(Engine(ruleset))
    for at in (0.0, 60.0):
        r.decisions += r.engine.evaluate(Snapshot(at, {"memcg.dying": 50.0}))
    assert all("[observe: shadow mode, never applied]" in line
               for line in timeline(r) if "new " in line)
    assert {d["mode"] for d in decisions_json(r)} == {"observe"}
    snap = Snapshot(240.0, {"memcg.dying": 50.0})
    chain = links(engine, snap, engine.evaluate(snap))
    assert chain[0].mode == "observe" and "observe only" in text(chain, 240.0)[1]
    assert "would run (shadow mode)" in chain[0].did[0]


def test_escalation_after_the_limit_and_needs_a_human(tmp_path: Path) -> None:
    engine = Engine(load_text('''version = 1
[[rule]]
name = "leak"
summary = "s"
when = "memcg.dying > 10"
cooldown = "1m"
limit = { runs = 2, within = "1h" }
  [[rule.action]]
  use = "test.remedy"
  [[rule.escalate]]
  use = "test.note"
  on = "both"
''', registry=registry()))
    ex = Executor(Host(), dry_run=False)
    assert tick(engine, ex, 0) == ["firing", "leak:firing"]
    assert tick(engine, ex, 60) == ["retry", "leak:retry"]
    kinds = tick(engine, ex, 120)  # the limit: the remedy did not work
    assert kinds == ["escalated", "suppressed", "leak:escalated"], kinds
    assert engine.states["leak"].escalated
    assert tick(engine, ex, 180) == []  # once
    snap = Snapshot(200.0, {"memcg.dying": 50.0})
    chain = links(engine, snap, [])
    assert chain[0].needs_human and any("NEEDS A HUMAN" in line
                                        for line in text(chain, 200.0))
    saved = engine.state()
    again = Engine(engine.ruleset)
    again.restore(saved)
    assert again.states["leak"].escalated  # survives a restart
    metrics = Metrics()
    Operations(Config(), None, sources=[]).after(engine, metrics)
    assert metrics.registry.get_sample_value("guardian_rule_needs_human",
                                             {"rule": "leak"}) == 1.0
    # resolved: the escalation's clean-up runs (the page resolves), and it is cleared
    assert tick(engine, ex, 240, v=0) == ["resolved", "leak:resolved"]
    assert not engine.states["leak"].escalated


def test_unbounded_disruption_is_a_check_error() -> None:
    text_ = '''version = 1
[[rule]]
name = "r"
summary = "s"
when = "memcg.dying > 1"
{fleet}
  [[rule.escalate]]
  use = "kube.cordon"
'''
    with pytest.raises(RuleError) as exc:
        load_text(text_.format(fleet=""))
    assert "kube.cordon can disrupt every node at once: say `fleet = true`" in str(exc.value)
    assert load_text(text_.format(fleet="fleet = false")).rules[0].spec.fleet is False
    load_text(text_.format(fleet="").replace("kube.cordon", "kube.condition"))  # harmless


def test_pause_resume_holds_cli_and_the_files_the_service_reads(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    f = tmp_path / "state" / "holds.json"
    assert main(["pause", "leak", "--for", "2h", "--reason", "rollout", "--author", "bob",
                 "--holds-file", str(f)]) == 0
    assert main(["pause", "--label", "team=net", "--for", "1h", "--reason", "maint",
                 "--holds-file", str(f)]) == 0
    [leak, net] = HoldFile(f).read()
    assert (leak.rule, leak.author, leak.reason) == ("leak", "bob", "rollout")
    assert net.labels == (("team", "net"),)
    capsys.readouterr()
    assert main(["holds", "--json", "--holds-file", str(f)]) == 0
    listed = json.loads(capsys.readouterr().out)["data"]
    assert {h["rule"] for h in listed} >= {"leak", "*"}
    # the service's per-tick link hands them to the engine; they survive a restart
    dropin = tmp_path / "holds.d"
    dropin.mkdir()
    (dropin / "cm.toml").write_text(f'[[hold]]\nrule = "other"\nuntil = {SOON}\n'
                                    'reason = "puppet"\nauthor = "cm"\n')
    engine = rules()
    ops = Operations(Config(), None, sources=[HoldFile(f), DropIn(dropin)])
    op = ops.before()
    assert {h.source for h in op.holds} == {"cli", f"file {dropin / 'cm.toml'}"}
    assert op.wall is not None
    snap = Snapshot(0.0, {"memcg.dying": 50.0})
    assert [d.kind for d in engine.evaluate(snap, holds=op.holds)] == ["firing", "held"]
    metrics = Metrics()
    ops.after(engine, metrics)
    assert metrics.registry.get_sample_value("guardian_rule_paused", {"rule": "leak"}) == 1
    assert metrics.registry.get_sample_value(
        "guardian_hold_expiry_timestamp_seconds",
        {"source": "cli", "rules": "leak", "author": "bob", "reason": "rollout"}) == \
        pytest.approx(leak.until)
    assert main(["resume", "leak", "--holds-file", str(f)]) == 0
    assert [h.rule for h in HoldFile(f).read()] == ["*"]
    assert main(["resume", "--all", "--holds-file", str(f)]) == 0
    assert HoldFile(f).read() == []
    assert main(["resume", "--all", "--holds-file", str(f)]) == 1  # nothing to resume


def test_the_service_holds_a_paused_rule_and_acts_once_resumed(tmp_path: Path) -> None:
    """End to end: `guardian pause` writes holds.json beside the service's state file; the
    service (a real process) evaluates, audits `held: paused by …` and applies nothing;
    after `guardian resume` and a restart, the owed action runs at once (despite the
    rule's 1h cooldown)."""
    import time

    from tests.support.daemon import daemon

    holds = tmp_path / "holds.json"
    assert main(["pause", "always", "--for", "1h", "--reason", "rollout", "--author", "ops",
                 "--holds-file", str(holds)]) == 0
    with daemon(tmp_path) as (_, notify):
        notify.wait_for("READY")
        time.sleep(1.5)
    entries = [json.loads(line) for line in (tmp_path / "audit.jsonl").read_text()
               .splitlines()]
    held = [e for e in entries if e["type"] == "decision" and e["kind"] == "held"]
    assert held and held[0]["reason"].startswith("paused by ops until ")
    assert not [e for e in entries if e["type"] == "outcome"]
    assert main(["resume", "always", "--holds-file", str(holds)]) == 0
    with daemon(tmp_path) as (_, notify):
        notify.wait_for("STATUS", contains="last action: log for always: ok")


def test_the_daemonset_reads_fleet_wide_holds_in_its_namespace_by_name(
        tmp_path: Path) -> None:
    """deploy/kubernetes: [holds.kube] names guardian's own namespace, and its Role lets
    the service account get the guardian-holds ConfigMap there, by name, and nothing
    else of ConfigMaps."""
    import yaml

    from guardian.kube.holds import KubeHoldsParams
    from guardian.runtime.config import load_config
    from tests.support.checkout import REPO

    deploy = REPO / "deploy" / "kubernetes"
    docs = [d for f in ("configmap.yaml", "rbac.yaml")
            for d in yaml.safe_load_all((deploy / f).read_text()) if d]
    toml = next(d for d in docs if d["metadata"]["name"] == "guardian-config")["data"][
        "guardian.toml"]
    path = tmp_path / "guardian.toml"
    path.write_text(toml)
    config = load_config(path, default_registry())
    assert isinstance(config.holds.kube, KubeHoldsParams)
    ns = config.holds.kube.namespace
    cm_rules = [(d["metadata"]["namespace"], r) for d in docs if d["kind"] == "Role"
                for r in d["rules"] if "configmaps" in r["resources"]]
    assert cm_rules == [(ns, {"apiGroups": [""], "resources": ["configmaps"],
                              "resourceNames": [config.holds.kube.configmap],
                              "verbs": ["get"]})]


def test_run_once_honours_the_holds(tmp_path: Path) -> None:
    """A cron-style `guardian run --once` sees `guardian pause` as the service does."""
    rules_dir = always_rules_dir(tmp_path)
    state = tmp_path / "state.json"
    assert main(["pause", "--for", "1h", "--reason", "maint", "--author", "ops",
                 "--holds-file", str(tmp_path / "holds.json")]) == 0
    audit = tmp_path / "audit.jsonl"
    main(["run", "--once", "--rules", str(rules_dir), "--state", str(state), "--audit",
          str(audit), "--warmup", "0s"])
    kinds = [e["kind"] for e in map(json.loads, audit.read_text().splitlines())
             if e["type"] == "decision"]
    assert kinds == ["firing", "held"]


def test_pause_refuses_a_blank_reason_and_keeps_the_hold_it_would_replace(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Review (ops) 1a: `--reason ""` replaced a pause with an entry the reader dropped,
    so the pause lifted. It is a usage error now, and the file keeps the first pause."""
    f = tmp_path / "holds.json"
    assert main(["pause", "leak", "--for", "4h", "--reason", "rollout", "--author", "bob",
                 "--holds-file", str(f)]) == 0
    for blank in ("", " "):
        assert main(["pause", "leak", "--for", "4h", "--reason", blank,
                     "--holds-file", str(f)]) == 2
        assert "--reason" in capsys.readouterr().err
    assert main(["pause", "leak", "--for", "4h", "--reason", "r", "--author", " ",
                 "--holds-file", str(f)]) == 2
    [kept] = HoldFile(f).read()
    assert (kept.rule, kept.reason, kept.broken) == ("leak", "rollout", False)


def test_a_hold_source_that_cannot_be_parsed_holds_every_rule(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Review (ops) 1b: a malformed entry, file or drop-in was dropped (the pause lifted).
    Now each holds every rule until fixed, shown by `guardian holds` and the metrics."""
    f = tmp_path / "holds.json"
    good = {"rule": "leak", "until": SOON, "reason": "r", "author": "a"}
    f.write_text(json.dumps([good, {**good, "reason": ""}]))
    [leak, broken] = HoldFile(f).read()
    assert leak.rule == "leak" and broken.broken and broken.rule == "*"
    assert "reason" in broken.reason and broken.matches("other", {})
    assert main(["pause", "--for", "1h", "--reason", "x", "--holds-file", str(f)]) == 1
    assert "fix or remove" in capsys.readouterr().err  # rewriting would drop the entry
    assert f.read_text() == json.dumps([good, {**good, "reason": ""}])
    bad_dir = tmp_path / "dir.json"
    bad_dir.mkdir()  # exists, cannot be read as a file
    [unreadable] = HoldFile(bad_dir).read()
    assert unreadable.broken and "cannot read" in unreadable.reason
    dropin = tmp_path / "holds.d"
    dropin.mkdir()
    (dropin / "cm.toml").write_text('[[hold]]\nrule = "x"\nuntil = 2099-01-01\n')
    [dropped] = DropIn(dropin).read()
    assert dropped.broken and dropped.source == f"file {dropin / 'cm.toml'}"
    assert DropIn(tmp_path / "none.d").read() == []  # a missing directory has none
    engine = rules()
    ops = Operations(Config(), None, sources=[DropIn(dropin)])
    op = ops.before()
    assert [d.kind for d in engine.evaluate(Snapshot(0.0, {"memcg.dying": 50.0}),
                                            holds=op.holds)] == ["firing", "held"]
    metrics = Metrics()
    ops.after(engine, metrics)
    assert metrics.registry.get_sample_value("guardian_rule_paused", {"rule": "leak"}) == 1
    capsys.readouterr()
    assert main(["holds", "--holds-file", str(f)]) == 0
    out = capsys.readouterr().out
    assert "No holds" not in out and "until fixed" in out


def test_holds_end_within_ten_years_everywhere(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Review (ops) 2: `--until 9999-12-31` was accepted while `--for` stops at ten
    years; the model caps `until` for every source."""
    f = tmp_path / "holds.json"
    assert main(["pause", "--until", "9999-12-31T23:59:59Z", "--reason", "r",
                 "--holds-file", str(f)]) == 2
    assert "ten years" in capsys.readouterr().err and not f.exists()
    holds, problems = parse_holds('[[hold]]\nuntil = 9999-12-31T23:59:59Z\nreason = "r"\n'
                                  'author = "a"\n', "f")
    assert "ten years" in problems[0] and holds[0].broken


def test_pause_warns_when_no_loaded_rule_has_the_name(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Review (ops) 4: a misspelt rule name is kept, with a warning."""
    rules_dir = always_rules_dir(tmp_path)
    config = tmp_path / "guardian.toml"
    config.write_text(f'[service]\nrules = ["{rules_dir}"]\n'
                      f'state_file = "{tmp_path / "state.json"}"\n')
    assert main(["pause", "nosuchrule", "--for", "1h", "--reason", "r",
                 "--config", str(config)]) == 0
    assert "no loaded rule is named 'nosuchrule'" in capsys.readouterr().err
    assert main(["pause", "always", "--for", "1h", "--reason", "r",
                 "--config", str(config)]) == 0
    assert "warning" not in capsys.readouterr().err


def test_act_refuses_under_a_hold_on_every_rule_and_outside_the_window_unless_forced(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Review (ops) 3: `guardian act` applied while a pause on every rule was in force.
    It refuses now (audited), as it does outside the maintenance window for a disruptive
    action; --force acts, and the audit log says what it overrode."""
    from guardian.runtime.config import load_config
    from guardian.runtime.manual import refusals

    config = tmp_path / "guardian.toml"
    config.write_text(f'[service]\nstate_file = "{tmp_path / "state.json"}"\n')
    audit = tmp_path / "audit.jsonl"
    act = ["act", "log", "--set", "message=by hand", "--warmup", "0s", "--audit",
           str(audit), "--config", str(config)]
    assert main(["pause", "--for", "1h", "--reason", "freeze", "--author", "ops",
                 "--config", str(config)]) == 0
    assert main(act) == 1
    assert "a hold on every rule is in force" in capsys.readouterr().err
    assert main([*act, "--json"]) == 1
    assert json.loads(capsys.readouterr().out)["ok"] is False
    assert [e["type"] for e in map(json.loads, audit.read_text().splitlines())] == \
        ["refused", "refused"]
    assert main([*act, "--force"]) == 0
    entries = [json.loads(line) for line in audit.read_text().splitlines()]
    assert [e["type"] for e in entries] == ["refused", "refused", "forced", "decision",
                                            "plan", "outcome"]
    assert "freeze" in entries[2]["overrides"][0]
    assert main(["resume", "--all", "--config", str(config)]) == 0
    assert main([*act, "--dry-run"]) == 0
    days = ["mon", "tue", "wed", "thu", "fri", "sat", "sun"]
    other = days[(dt.datetime.now(dt.timezone.utc).weekday() + 2) % 7]
    config.write_text(f'[service]\nstate_file = "{tmp_path / "state.json"}"\n[engine]\n'
                      f'window = {{ days = ["{other}"], start = "00:00", end = "00:01", '
                      f'time_zone = "UTC" }}\n')
    loaded = load_config(config, default_registry())
    assert refusals(loaded, disruptive=False) == []
    [closed] = refusals(loaded, disruptive=True)
    assert closed.startswith("outside the maintenance window")
    # act takes no slot of the fleet budget: with [fleet], a disruptive action waits
    config.write_text(f'[service]\nstate_file = "{tmp_path / "state.json"}"\n'
                      '[fleet]\nmax_nodes = 1\n')
    loaded = load_config(config, default_registry())
    assert refusals(loaded, disruptive=False) == []
    [fleet] = refusals(loaded, disruptive=True)
    assert "fleet budget" in fleet


def test_check_reports_the_drop_in_hold_files_that_would_hold_every_rule(
        tmp_path: Path) -> None:
    """Review (ops) 1b: `guardian check --config` never looked at the drop-ins; each
    problem is reported at path:line:col."""
    from guardian.runtime.holds import check_dropin

    dropin = tmp_path / "holds.d"
    dropin.mkdir()
    (dropin / "a.toml").write_text(f'[[hold]]\nrule = "x"\nuntil = {SOON}\nreason = ""\n'
                                   'author = "a"\n')
    (dropin / "b.toml").write_text("[[hold]\nx")
    (dropin / "c.toml").write_text(f'[[hold]]\nuntil = {SOON}\nreason = "r"\nauthor = "a"\n')
    found = [(Path(d.path).name, d.line, d.col, d.message) for d in check_dropin(dropin)]
    assert found[0][:3] == ("a.toml", 4, 10) and "reason" in found[0][3]
    assert found[1][:2] == ("b.toml", 1) and "TOML syntax" in found[1][3]
    assert len(found) == 2  # c.toml is fine
    assert check_dropin(tmp_path / "none.d") == []


def test_check_config_fails_on_a_drop_in_hold_file_it_cannot_parse(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Review (ops) 1b: `guardian check --config` passed while a drop-in held every rule."""
    rules_dir = always_rules_dir(tmp_path)
    dropin = tmp_path / "holds.d"
    dropin.mkdir()
    config = tmp_path / "guardian.toml"
    config.write_text(f'[service]\nrules = ["{rules_dir}"]\n[holds]\ndropin = "{dropin}"\n')
    assert main(["check", "--config", str(config)]) == 0
    (dropin / "cm.toml").write_text('[[hold]]\nrule = "x"\nreason = "r"\nauthor = "a"\n')
    capsys.readouterr()
    assert main(["check", "--config", str(config)]) != 0
    assert f"{dropin / 'cm.toml'}:1:1: hold: missing required key 'until'" in \
        capsys.readouterr().out
