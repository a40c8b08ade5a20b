"""guardian as a systemd service, end to end, under a real systemd (252, booted in
systemd-nspawn: this VM has no systemd as PID 1). The package is installed in the
container from wheels built from this checkout, with the shipped unit and rules."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from guardian.testing.nspawn import Container, booted, nspawn_unavailable
from tests.support.checkout import REPO, shipped_rule_count
from tests.support.wait import BOUND, wait_until

# Boots a container or builds packages: run on the default interpreter only (.ci/run).
pytestmark = pytest.mark.os_integration

NEW_RULE = '''version = 1
[[rule]]
name = "added-later"
summary = "a rule dropped in while the service runs"
when = "processes.total > 100000"
'''


@pytest.fixture(scope="module")
def wheels(tmp_path_factory: pytest.TempPathFactory) -> Path:
    why = nspawn_unavailable()
    if why:
        pytest.skip(f"systemd-nspawn test skipped: {why}")
    d = tmp_path_factory.mktemp("wheels")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--wheel-dir", str(d),
                    str(REPO)], check=True, timeout=900, capture_output=True)
    return d


def props(c: Container, *names: str) -> dict[str, str]:
    out = c.run("systemctl", "show", "guardian.service", "-p", ",".join(names)).stdout
    return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)


def wait_props(c: Container, timeout: float, **want: str) -> dict[str, str]:
    last: list[dict[str, str]] = [{}]

    def reached() -> dict[str, str] | None:
        last[0] = props(c, "ActiveState", "SubState", "StatusText", "MainPID", "NRestarts",
                        "Result")
        return last[0] if all(v in last[0].get(k, "") for k, v in want.items()) else None

    try:
        return wait_until(reached, f"the service at {want}", max(timeout, BOUND), every=0.2)
    except AssertionError:
        raise AssertionError(f"service never reached {want}; last: {last[0]}") from None


def journal_until(c: Container, text: str, *options: str, timeout: float = BOUND) -> str:
    """guardian.service's journal (``journalctl OPTIONS``) once it holds ``text``."""
    got = [""]

    def holds() -> bool:
        got[0] = c.run("journalctl", "--no-pager", "-o", "cat", *options, "-u",
                       "guardian.service", check=False).stdout
        return text in got[0]

    try:
        wait_until(holds, f"{text!r} in the journal", timeout, every=0.3)
    except AssertionError:
        raise AssertionError(f"no {text!r} in the journal: {got[0][-3000:]}") from None
    return got[0]


def install(c: Container) -> None:
    c.run("python3", "-m", "venv", "/opt/guardian", timeout=180)
    c.run("/opt/guardian/bin/pip", "install", "-q", "--no-index", "--find-links", "/wheels",
          "node-guardian", timeout=600)
    # the package lays out /etc/guardian and the unit from the defaults it carries
    first = c.run("/opt/guardian/bin/guardian", "init").stdout
    assert "created /etc/guardian/rules/nic.toml" in first
    assert "created /etc/systemd/system/guardian.service" in first
    unit = c.run("cat", "/etc/systemd/system/guardian.service").stdout
    assert "ExecStart=/opt/guardian/bin/guardian run" in unit
    # the operator's change survives a second init; the shipped version goes beside it
    c.write("/etc/guardian/guardian.toml", '[engine]\ninterval = "1s"\n')
    again = c.run("/opt/guardian/bin/guardian", "init").stdout
    assert "kept /etc/guardian/guardian.toml" in again
    assert "unchanged /etc/guardian/rules/nic.toml" in again
    c.run("test", "-f", "/etc/guardian/guardian.toml.new")
    # the watchdog test needs a short interval; everything else is the shipped unit
    c.run("mkdir", "-p", "/etc/systemd/system/guardian.service.d")
    c.write("/etc/systemd/system/guardian.service.d/test.conf", "[Service]\nWatchdogSec=3s\n")
    c.run("systemctl", "daemon-reload")


def test_the_service_under_real_systemd(wheels: Path) -> None:
    with booted(binds=[(str(wheels), "/wheels")]) as c:
        install(c)
        verify = c.run("systemd-analyze", "verify", "/etc/systemd/system/guardian.service",
                       check=False)
        assert verify.returncode == 0, verify.stdout + verify.stderr

        # Type=notify: `systemctl start` returns once READY=1 arrived
        c.run("systemctl", "start", "guardian.service", timeout=60)
        up = wait_props(c, 10, ActiveState="active", SubState="running")
        assert f"{shipped_rule_count()} rules" in up["StatusText"], up
        status = c.run("systemctl", "status", "--no-pager", "guardian.service",
                       check=False).stdout
        assert f'Status: "{shipped_rule_count()} rules;' in status
        first_pid = up["MainPID"]

        # a broken rule file is rejected; the service keeps running on the last good rules
        c.write("/etc/guardian/rules/zz-broken.toml", 'version = 1\n[[rule]]\nname = "x"\n')
        bad = wait_props(c, 15, StatusText="reload rejected")
        assert "zz-broken.toml:2:1: missing required key" in bad["StatusText"]
        assert bad["ActiveState"] == "active" and bad["MainPID"] == first_pid
        # the rejection is an error in the journal: `-p warning` shows it and not the
        # start-up line, which is info (each line carries its "<N>" syslog priority)
        warnings = journal_until(c, "rejected", "-p", "warning")
        assert "zz-broken.toml:2:1: missing required key" in warnings, warnings
        assert "rule(s) from" not in warnings and "<3>" not in warnings, warnings
        everything = c.run("journalctl", "--no-pager", "-o", "cat", "-u",
                           "guardian.service", check=False).stdout
        assert "rule(s) from" in everything  # info is there, at its own priority

        # a good one is picked up
        c.run("rm", "/etc/guardian/rules/zz-broken.toml")
        c.write("/etc/guardian/rules/zz-new.toml", NEW_RULE)
        good = wait_props(c, 15, StatusText=f"{shipped_rule_count() + 1} rules")
        assert "reload rejected" not in good["StatusText"]

        # a stalled loop stops the pings: the watchdog kills it and systemd restarts it
        c.run("kill", "-STOP", first_pid)
        again = wait_props(c, 30, NRestarts="1", ActiveState="active", SubState="running")
        assert again["MainPID"] != first_pid
        journal = c.run("journalctl", "--no-pager", "-u", "guardian.service",
                        check=False).stdout
        assert "Watchdog timeout" in journal, journal[-3000:]
        # a clean stop: by itself, never killed at the unit's stop timeout (Result would
        # say "timeout")
        c.run("systemctl", "stop", "guardian.service", timeout=120)
        done = props(c, "ActiveState", "Result")
        assert done == {"ActiveState": "inactive", "Result": "success"}
        # persisted state and the audit log live in the unit's own directories
        c.run("test", "-s", "/var/lib/guardian/state.json")
        c.run("test", "-f", "/var/log/guardian/audit.jsonl")


# The incident's unit: it fails at once and systemd starts it again, forever (no start
# limit), as the AMI's ecs-agent.service did on a Kubernetes node.
CRASH_LOOPING_UNIT = """[Unit]
Description=a unit that does not belong on this node
StartLimitIntervalSec=0
[Service]
ExecStart=/bin/false
Restart=always
RestartSec=300ms
"""


def test_the_packaged_service_stops_a_crash_loop_and_why_names_it(wheels: Path) -> None:
    """Issue 38. Before: the service stopped ecs-agent.service (audited), but `guardian why`
    on the node answered "Nothing is wrong: no rule is pending or firing." (a fresh process
    counted restarts from zero), and the service's journal never said it stopped the unit.
    The shipped rule, with `for` shortened from 5m to 5s so the test is quick."""
    with booted(binds=[(str(wheels), "/wheels")], name="guardian-why") as c:
        install(c)
        rules = c.run("cat", "/etc/guardian/rules/systemd.toml").stdout
        assert 'for = "5m"' in rules and 'allow = ["ecs*.service"]' in rules
        c.write("/etc/guardian/rules/systemd.toml", rules.replace('for = "5m"', 'for = "5s"'))
        c.write("/etc/guardian/guardian.toml",
                '[engine]\ninterval = "1s"\n[service]\ndry_run = false\n'
                '[sources.systemd]\nrestart_window = "2m"\n')
        c.write("/etc/systemd/system/ecs-agent.service", CRASH_LOOPING_UNIT)
        c.run("systemctl", "daemon-reload")
        c.run("systemctl", "start", "--no-block", "ecs-agent.service")
        c.run("systemctl", "start", "guardian.service", timeout=60)
        journal = journal_until(c, "rule unit-crashloop: systemd.unit ok: ", timeout=90)
        # one line in the journal says what it did, to which unit
        assert "systemctl stop ecs-agent.service" in journal or \
            "stop ecs-agent.service" in journal, journal[-3000:]
        state = c.run("systemctl", "show", "ecs-agent.service", "-p", "ActiveState").stdout
        assert "ActiveState=inactive" in state or "ActiveState=failed" in state, state
        # `guardian why` on the node: what the service saw, the unit and the stop
        said = [""]

        def why_says() -> bool:
            said[0] = c.run("/opt/guardian/bin/guardian", "why", check=False).stdout
            return "stop ecs-agent.service" in said[0]

        wait_until(why_says, "`guardian why` naming the stop", every=0.5)
        why = said[0]
        assert why.startswith("As the guardian service (pid "), why
        assert "Nothing is wrong" not in why
        assert "unit-crashloop" in why and "ecs-agent.service" in why, why
        c.run("systemctl", "stop", "guardian.service", timeout=30)
