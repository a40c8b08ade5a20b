"""`$values` reads as text for people (issue 40): the members that fired by their label
values, numbers rounded with the signal's unit; `$values_json`, the audit and `--json`
keep the structured form. Before: `{"matched": {"{unit=\\"ecs.service\\"}": 711}, ...}`
in log lines, node conditions and alerts."""

from __future__ import annotations

import json

from guardian import Engine, Executor, Host, load_text
from guardian.actions.notify import Webhook, WebhookParams
from guardian.core.evidence import evidence_said, values_text
from guardian.core.snapshot import Snapshot, labels_of
from guardian.engine.decision import Decision
from guardian.plugin.contract import ActionContext
from guardian.runtime.replay import Replay, params_text, timeline
from guardian.runtime.why import Link, text
from guardian.testing import family

CRASHLOOP = {"matched": {'{unit="ecs.service"}': 711},
             "systemd.unit_restarts_recent": {'{unit="ecs.service"}': 711}}
RULES = '''version = 1
[[rule]]
name = "unit-crashloop"
summary = "a unit restarts again and again"
when = "systemd.unit_restarts_recent >= 5"
  [[rule.action]]
  use = "log"
  message = "crash-looping unit(s): $values"
'''


def test_a_family_condition_says_the_members_that_fired_once() -> None:
    # the matched member is the headline; the family entry equal to it is not said again
    assert values_text(CRASHLOOP, {"systemd.unit_restarts_recent": "restarts"}) \
        == "ecs.service 711 restarts"


def test_scalars_are_named_and_rounded_with_their_units() -> None:
    assert values_text({"memcg.dying": 18804.0, "memcg.live": 4.0, "cpu.busy": 58.58585},
                       {"memcg.dying": "cgroups", "memcg.live": "cgroups",
                        "cpu.busy": "percent"}) \
        == "memcg.dying 18804 cgroups, memcg.live 4 cgroups, cpu.busy 58.6%"


def test_many_members_are_capped_largest_first() -> None:
    many = family("unit", {f"u{i:02}.service": i for i in range(17)})
    said = values_text({"matched": many, "systemd.unit_restarts_recent": many})
    assert said == ("u16.service 16, u15.service 15, u14.service 14, u13.service 13, "
                    "u12.service 12, …and 12 more")


def test_a_log_line_from_the_engine_reads_as_text_and_json_stays_structured() -> None:
    """Through the engine and the executor, as the service runs it: the unit comes from
    the signal's spec (systemd.unit_restarts_recent counts restarts)."""
    engine = Engine(load_text(RULES))
    snap = Snapshot(0.0, {"systemd.unit_restarts_recent":
                          family("unit", {"ecs.service": 711, "cron.service": 0})})
    [d] = engine.evaluate(snap)
    [ran] = Executor(Host(), dry_run=True).run([d], snap)
    assert ran.plan is not None
    assert ran.plan.data["text"] == "crash-looping unit(s): ecs.service 711 restarts"
    assert d.to_dict()["values"] == CRASHLOOP  # the audit's and --json's form, unchanged


def test_values_json_is_the_structured_form_and_a_webhook_body_gets_both() -> None:
    ctx = ActionContext("unit-crashloop", Snapshot(0.0), Host(), dry_run=True,
                        values=CRASHLOOP, units={"systemd.unit_restarts_recent": "restarts"})
    assert ctx.message("$rule: $values") == "unit-crashloop: ecs.service 711 restarts"
    assert json.loads(ctx.message("$values_json")) == CRASHLOOP
    hook = Webhook(WebhookParams.model_validate({
        "url": "http://127.0.0.1:9/x", "body": '{"text": "$values", "v": $values_json}'}))
    body = json.loads(hook.plan(ctx).data["body"])
    assert body == {"text": "ecs.service 711 restarts", "v": CRASHLOOP}


def test_the_replay_listing_keeps_its_columns_past_an_hour_and_says_params_plainly() -> None:
    engine = Engine(load_text(RULES))
    r = Replay(engine)
    bound = engine.ruleset.rules[0].actions
    for t, rule in ((5.0, "a"), (635.0, "netdevice-refcount-leak-frequent"), (3725.0, "b")):
        r.decisions.append(Decision(t, rule, "firing", "warning", "s",
                                    {"memcg.dying": 18804.0}, bound))
    lines = timeline(r)
    heads = [line for line in lines if "would run" not in line]
    assert [h.index("firing") for h in heads] == [len("  +1h2m5s  ") + 32 + 2] * 3
    assert lines[1] == " " * len("  +1h2m5s  ") + \
        'would run: log message="crash-looping unit(s): $values"'  # text, not JSON
    assert params_text({"allow": ["ecs*.service"], "verbs": ["stop"], "min_restarts": 5}) \
        == "allow=ecs*.service min_restarts=5 verbs=stop"


def test_why_says_the_members_once_not_the_family_and_matched_twice() -> None:
    link = Link("unit-crashloop", "s", "firing", "warning", 0.0, CRASHLOOP, [],
                units={"systemd.unit_restarts_recent": "restarts"})
    evidence = [line.strip() for line in text([link], 60.0) if "evidence" in line]
    assert evidence == ["evidence: systemd.unit_restarts_recent: ecs.service 711 restarts"]
    assert Link.from_dict(link.to_dict()) == link  # the service's report keeps the units


def test_explain_shows_the_member_that_fired_first() -> None:
    from guardian.policy.explain import ExplainNode
    members = family("unit", {"a.service": 0, "b.service": 0, "ecs.service": 17718})
    assert ExplainNode("x", members).lines() == ["x  =  ecs.service 17718, a.service 0, "
                                                 "b.service 0"]


def test_a_label_the_selector_pins_is_not_said_again() -> None:
    """An imported node-problem-detector check: the plugin's message is the member, as
    NPD's condition shows it (the check the rule names is not repeated)."""
    member = '{check="mon.ntp", message="ntp is down"}'
    assert values_text({"matched": {member: 1},
                        'script.problem{check="mon.ntp"}': {member: 1}}) == "ntp is down 1"


def _logged(when: str, values: dict[str, object]) -> str:
    """``$values`` of a rule's log line, through the engine and the executor."""
    engine = Engine(load_text(RULES.replace(
        'when = "systemd.unit_restarts_recent >= 5"', f"when = '{when}'")))
    snap = Snapshot(0.0, values)  # type: ignore[arg-type]
    [d] = engine.evaluate(snap)
    [ran] = Executor(Host(), dry_run=True).run([d], snap)
    assert ran.plan is not None
    return str(ran.plan.data["text"]).removeprefix("crash-looping unit(s): ")


XID = {labels_of({"metric": "DCGM_FI_DEV_XID_ERRORS", "gpu": g, "UUID": f"GPU-{g}",
                  "target": "file:x.prom"}): x for g, x in (("0", 79.0), ("1", 0.0))}


def test_a_selector_of_one_member_says_its_value_once_with_its_unit() -> None:
    """Before: `cpu=0 56; cpu.core.idle_pct{cpu="0"} 56%`, the value twice, the pinned
    label repeated, the first without its unit."""
    cores = family("cpu", {"0": 56.0, "1": 3.0})
    assert _logged('cpu.core.idle_pct{cpu="0"} >= 50', {"cpu.core.idle_pct": cores}) \
        == 'cpu.core.idle_pct{cpu="0"} 56%'


def test_a_glob_selector_says_its_members_once() -> None:
    cores = family("cpu", {"0": 56.0, "1": 3.0, "10": 4.0})
    assert _logged('cpu.core.idle_pct{cpu="1*"} >= 0', {"cpu.core.idle_pct": cores}) \
        == "cpu=10 4%, cpu=1 3%"


def test_an_exporters_sample_says_its_open_labels_not_the_pinned_ones() -> None:
    """Before: `UUID=GPU-1 gpu=0 metric=DCGM_FI_DEV_XID_ERRORS target=file:x.prom 79;
    prom.sample{metric="DCGM_FI_DEV_XID_ERRORS", gpu="0"} 79`."""
    assert _logged('prom.sample{metric="DCGM_FI_DEV_XID_ERRORS"} > 0',
                   {"prom.sample": XID}) == "UUID=GPU-0 gpu=0 target=file:x.prom 79"
    assert _logged('prom.sample{metric="DCGM_FI_DEV_XID_ERRORS", gpu="0"} > 0',
                   {"prom.sample": XID}) == "UUID=GPU-0 target=file:x.prom 79"


def test_replay_and_why_say_a_selected_member_under_its_selector_once() -> None:
    engine = Engine(load_text(RULES.replace(
        'when = "systemd.unit_restarts_recent >= 5"',
        "when = 'prom.sample{metric=\"DCGM_FI_DEV_XID_ERRORS\"} > 0'")))
    [d] = engine.evaluate(Snapshot(0.0, {"prom.sample": XID}))
    assert [s.line() for s in evidence_said(d.values, d.units)] == [
        'prom.sample{metric="DCGM_FI_DEV_XID_ERRORS"}: UUID=GPU-0 gpu=0 '
        'target=file:x.prom 79']
