"""Issue 33: `guardian import npd` on node-problem-detector's own shipped configs
(tests/fixtures/npd, copied from its repository): run with the plugins, the output fires
the node conditions and events node-problem-detector's semantics would
(pkg/custompluginmonitor/custom_plugin_monitor.go generateStatus: permanent rule ->
condition True on NonOK, False on OK; temporary rule -> an event for every ExitStatus >=
NonOK, Unknown included). That the output passes `guardian check`:
tests/system/test_npd_cli.py."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest

from guardian.core.snapshot import Snapshot, labels_of
from guardian.engine.engine import Engine
from guardian.hostio.host import Host
from guardian.plugin.registry import default_registry
from guardian.policy.loader import load_rules
from guardian.policy.npd import NpdConfigError, go_duration, import_npd
from guardian.runtime.config import load_config
from guardian.sources.script import ScriptConfig, ScriptSource
from tests.support.checkout import FIXTURES, REPO
from tests.support.wait import wait_until

NPD = FIXTURES / "npd"


def test_go_durations() -> None:
    # time.ParseDuration's forms that node-problem-detector's configs use
    assert [go_duration(t) for t in ("30s", "5s", "1m30s", "500ms", "1h")] == \
        [30, 5, 90, 0.5, 3600]
    with pytest.raises(NpdConfigError):
        go_duration("30 seconds")


def test_the_custom_plugin_config_becomes_checks_with_npds_interval_and_timeout() -> None:
    got = import_npd(NPD / "config" / "custom-plugin-monitor.json")
    cfg = ScriptConfig.model_validate(_toml(got.config)["sources"]["script"])
    ((_, check),) = cfg.checks.items()  # both rules run the same plugin: one check
    # ./config/plugin/check_ntp.sh from node-problem-detector's directory: / in its image,
    # never where the file lies on the machine that imports (issue 41)
    assert check.argv == ["/config/plugin/check_ntp.sh"]
    assert any("--base DIR" in n for n in got.notes)
    # the rule's timeout 3s is shorter than the global 5s: it applies (plugin.go run())
    assert (check.interval, check.timeout) == (30.0, 3.0)
    rules = _toml(got.rules)["rule"]
    assert [r["labels"]["npd_type"] for r in rules] == ["temporary", "permanent"]
    perm = rules[1]["action"][0]
    assert (perm["use"], perm["type"], perm["reason"], perm["on"]) == \
        ("kube.condition", "NTPProblem", "NTPIsDown", "both")
    # back at False: the default condition's reason and message, as NPD sets them
    assert (perm["resolved_reason"], perm["resolved_message"]) == \
        ("NTPIsUp", "ntp service is up")
    assert rules[0]["action"][0]["use"] == "kube.event"


def test_a_permanent_rule_without_a_default_condition_is_refused(tmp_path: Path) -> None:
    # config.go Validate(): "permanent problem %s does not have preset default condition"
    bad = tmp_path / "bad.json"
    bad.write_text('{"plugin": "custom", "conditions": [], "rules": [{"type": "permanent",'
                   ' "condition": "X", "reason": "Y", "path": "/bin/true"}]}')
    with pytest.raises(NpdConfigError, match="no preset default condition"):
        import_npd(bad)


def test_health_checker_repair_is_turned_off_and_its_monitor_has_its_own_pool() -> None:
    """NPD's health-checker-kubelet.json runs health-checker --enable-repair=true, which
    restarts kubelet itself (cmd/healthchecker/options): a check runs in a dry run too,
    so the import turns the repair off and says so. NPD runs each monitor on its own
    workers (pluginConfig.concurrency, 1 here; 3 unless set: types.go)."""
    got = import_npd(NPD / "config" / "health-checker-kubelet.json")
    script = _toml(got.config)["sources"]["script"]
    ((_, check),) = script["checks"].items()
    assert check["argv"][-1] == "--enable-repair=false"
    assert not any(a.startswith("--enable-repair=t") for a in check["argv"])
    assert "# --enable-repair rewritten to --enable-repair=false" in got.config
    assert any("--enable-repair=false" in n for n in got.notes)
    assert script["pools"] == {check["pool"]: {"concurrency": 1}}
    ntp = _toml(import_npd(NPD / "config" / "custom-plugin-monitor.json").config)
    assert list(ntp["sources"]["script"]["pools"].values()) == [{"concurrency": 3}]


def test_health_checker_repair_becomes_a_shadow_restart_rule_with_its_budget(
        tmp_path: Path) -> None:
    """Issue 41. Before: the repair was turned off and nothing took its place. NPD's
    health-checker restarts the component's service (systemctl kill; --service, else the
    component's, containerd for cri) once it has run --cooldown-time (2m unless set), and
    its --enable-repair is true unless set false (options.go)."""
    got = import_npd(NPD / "config" / "health-checker-kubelet.json")
    (repair,) = [r for r in _toml(got.rules)["rule"] if r["labels"]["npd_type"] == "repair"]
    assert repair["mode"] == "observe"  # shadow mode until the operator says otherwise
    assert '# shadow mode: guardian plans and audits this restart' in got.rules
    assert repair["when"] == 'script.problem{check="health-checker-kubelet.health-checker"}' \
        ' == 1'
    (action,) = repair["action"]
    assert (action["use"], action["allow"], action["verbs"], action["min_restarts"]) == \
        ("systemd.unit", ["kubelet.service"], ["restart"], 0)
    assert (action["cooldown"], action["restart_budget"], action["restart_window"]) == \
        ("1m", 3, "1h")
    assert repair["limit"] == {"runs": 3, "within": "1h"}
    assert any('set mode = "act"' in n for n in got.notes)
    cri = _toml(import_npd(NPD / "config" / "health-checker-containerd.json").rules)
    (cri_repair,) = [r for r in cri["rule"] if r["labels"]["npd_type"] == "repair"]
    assert cri_repair["action"][0]["allow"] == ["containerd.service"]
    assert cri_repair["action"][0]["cooldown"] == "2m"
    # with rules loaded as guardian check loads them
    load_rules([_written(got.rules, tmp_path)], default_registry())


def test_health_checker_flags_as_pflag_reads_them(tmp_path: Path) -> None:
    def repair_of(args: list[str]) -> list[dict[str, Any]]:
        mon = tmp_path / "hc.json"
        mon.write_text(json.dumps({"plugin": "custom", "rules": [{
            "type": "temporary", "reason": "Down", "path": "/bin/health-checker",
            "args": args}]}))
        got = import_npd(mon, log_only=True)
        return [r for r in _toml(got.rules)["rule"] if r["labels"]["npd_type"] == "repair"]

    # repair is on by default: no flag at all still restarts kubelet
    assert repair_of([])[0]["action"][0]["allow"] == ["kubelet.service"]
    assert repair_of(["--enable-repair=false"]) == []
    assert repair_of(["--enable-repair=false", "--enable-repair"]) != []  # the last wins
    assert repair_of(["--component", "docker", "--service=dockerd"])[0]["action"][0][
        "allow"] == ["dockerd.service"]
    with pytest.raises(NpdConfigError, match="not a systemd unit name"):
        repair_of(["--service=*"])
    with pytest.raises(NpdConfigError, match="not a boolean"):
        repair_of(["--enable-repair=yes"])


def test_an_imported_pattern_that_is_a_shipped_one_is_read_from_it(tmp_path: Path) -> None:
    """Issue 41. Before: an imported pattern that duplicates a shipped one was added again,
    so one real ENA line (tests/data/kernel_log_real.json) counted under two patterns."""
    from guardian.sources.kmsg import KmsgConfig, KmsgSource

    real = json.loads((REPO / "tests" / "data" / "kernel_log_real.json").read_text())
    line = next(r["line"] for r in real if r["line"].startswith(
        "ena 0000:00:05.0 eth0: Found a Tx that wasn't completed on time"))
    mon = tmp_path / "config" / "aws.json"
    mon.parent.mkdir()
    mon.write_text(json.dumps({"plugin": "kmsg", "source": "aws", "conditions": [], "rules": [
        {"type": "temporary", "reason": "EnaTxIncomplete",
         "pattern": "Found a Tx that wasn't completed on time.*"},
        {"type": "temporary", "reason": "AcmeWedged", "pattern": "acme: device \\d+ wedged"},
    ]}))
    got = import_npd(mon, log_only=True)
    patterns = _toml(got.config)["sources"]["kmsg"]["patterns"]
    assert list(patterns) == ["npd_aws_acmewedged"]  # the one guardian does not ship
    kmsg = KmsgSource(Host(Path("/")), KmsgConfig.model_validate({"patterns": patterns}))
    assert kmsg.matches(line) == ["ena_tx_missing_completion"]  # one line, one pattern
    # the imported rules, evaluated over the counts of that one line
    engine = Engine(load_rules([_written(got.rules, tmp_path)], default_registry()))
    for t, seen in ((0.0, []), (60.0, kmsg.matches(line))):
        counts = {labels_of({"pattern": n}): float(n in seen)
                  for n in kmsg.patterns}
        firing = [d.rule for d in engine.evaluate(Snapshot.build(
            t, {"kmsg.matches": counts}, kmsg.specs)) if d.kind == "firing"]
    assert firing == ["npd-aws-enatxincomplete-temporary"]


def test_the_kernel_monitor_reads_the_shipped_patterns() -> None:
    got = import_npd(NPD / "config" / "kernel-monitor.json")
    rules = {r["labels"]["npd_reason"]: r for r in _toml(got.rules)["rule"]}
    # every reason of node-problem-detector's kernel monitor is a pattern guardian ships
    assert got.notes == [] and "patterns" not in got.config
    deadlock = rules["DockerHung"]
    assert deadlock["when"] == 'kmsg.matches{pattern="hung_task_runtime"} > 0'
    assert deadlock["action"][0]["type"] == "KernelDeadlock"
    assert 'pattern="oom_kill"' in rules["OOMKilling"]["when"]


def test_a_pattern_guardian_does_not_ship_is_added_to_the_kmsg_source(tmp_path: Path) -> None:
    own = tmp_path / "config" / "own.json"
    own.parent.mkdir()
    own.write_text('{"plugin": "kmsg", "source": "own", "conditions": [], "rules": ['
                   '{"type": "temporary", "reason": "AcmeWedged", '
                   '"pattern": "acme: device \\\\d+ wedged"}]}')
    got = import_npd(own, log_only=True)
    assert _toml(got.config)["sources"]["kmsg"]["patterns"] == {
        "npd_own_acmewedged": r"acme: device \d+ wedged"}
    assert [a["use"] for a in _toml(got.rules)["rule"][0]["action"]] == ["log"]


def test_imported_checks_fire_what_npd_would(tmp_path: Path) -> None:
    """NPD's custom-plugin-monitor.json, its plugin replaced by a stand-in with NPD's exit
    codes (the real check_ntp.sh asks systemd about ntp.service): OK, NonOK, Unknown,
    OK again."""
    base = tmp_path / "npd"
    plugin = base / "config" / "plugin" / "check_ntp.sh"
    plugin.parent.mkdir(parents=True)
    state = tmp_path / "exit"
    plugin.write_text(f"#!/bin/sh\nread code < {state}\necho \"ntp.service code $code\"\n"
                      "exit $code\n")
    plugin.chmod(0o755)
    got = import_npd(NPD / "config" / "custom-plugin-monitor.json", base=base)
    out = tmp_path / "out"
    (out / "rules").mkdir(parents=True)
    (out / "guardian.toml").write_text(got.config.replace('interval = "30s"',
                                                          'interval = "0.1s"'))
    (out / "rules" / "npd.toml").write_text(got.rules)
    registry = default_registry()
    config = load_config(out / "guardian.toml", registry)
    rules = load_rules([out / "rules"], registry)
    src = ScriptSource(Host(Path("/")), config.sources["script"])  # type: ignore[arg-type]
    engine = Engine(rules)
    seen: list[tuple[str, str, str]] = []
    t = 0.0
    try:
        for code in ("0", "2", "0", "1", "2", "0"):
            state.write_text(code)

            def ran_with(code: str = code, t: float = t) -> dict[str, object] | None:
                values = src.collect(t)
                result = values["script.result"]  # no value until the check has run
                return values if isinstance(result, dict) and any(
                    dict(k)["message"].endswith(f"code {code}") for k in result) else None

            values = wait_until(ran_with, f"a run of the check that exits {code}")
            t += 1.0
            snap = Snapshot.build(t, values, src.specs)
            for d in engine.evaluate(snap):
                if d.kind in ("firing", "resolved"):
                    kind = d.rule.split("-")[-2]  # temporary / permanent
                    seen.append((code, kind, d.kind))
                    if kind == "permanent" and d.kind == "firing":
                        assert "ntp.service code 1" in str(d.values)  # NPD's message
    finally:
        src.close()
    assert seen == [
        # Unknown: NPD emits the event (ExitStatus >= NonOK); the condition is not True
        ("2", "temporary", "firing"),
        ("0", "temporary", "resolved"),
        ("1", "permanent", "firing"),   # NTPProblem=True, reason NTPIsDown (critical first)
        ("1", "temporary", "firing"),   # an NTPIsDown event
        # Unknown after NonOK: NPD sets the condition Unknown, no longer True; guardian
        # has no Unknown condition: it is set False (never True without a NonOK)
        ("2", "permanent", "resolved"),
        ("0", "temporary", "resolved"),
    ]


def test_npds_own_plugins_run_unchanged() -> None:
    """The real check_ntp.sh and network_problem.sh: whatever this host says, each ends
    with one of its own messages and exit codes (NPD's contract)."""
    if shutil.which("bash") is None:
        pytest.skip("the plugins are bash scripts")
    got = import_npd(NPD / "config" / "custom-plugin-monitor.json", base=NPD)
    src = ScriptSource(Host(Path("/")), ScriptConfig.model_validate(
        _toml(got.config)["sources"]["script"]))
    def ran() -> dict[str, object] | None:
        values = src.collect(0.0)
        return values if values["script.duration_seconds"] or values["script.errors"] \
            else None

    try:
        values = wait_until(ran, "a run of check_ntp.sh, or its error")
    finally:
        src.close()
    result = values["script.result"]
    if not isinstance(result, dict):  # a systemctl that did not answer within the 3 s:
        assert values["script.errors"], values  # no value, an error
        return
    ((key, status),) = result.items()
    message = dict(key)["message"]
    assert (status, message) in {(0.0, "ntp.service is running"),
                                 (1.0, "ntp.service is not running"),
                                 (2.0, "Could not find 'systemctl' - require systemd")}


def _written(text: str, folder: Path) -> Path:
    path = folder / "npd-rules.toml"
    path.write_text(text)
    return path


def _toml(text: str) -> dict[str, Any]:
    if sys.version_info >= (3, 11):
        import tomllib
    else:
        import tomli as tomllib
    return tomllib.loads(text)
