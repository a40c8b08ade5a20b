"""The daemon without systemd: the notify protocol against a datagram socket the test
listens on (path and abstract addresses), readiness, watchdog pings from the loop, reload
rejection and pick-up, persisted state, start-up refusals, the metrics endpoint."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from guardian.service.notify import Notifier
from tests.support.checkout import RULES, shipped_rule_count, write
from tests.support.daemon import RULE, NotifySocket, daemon, process_state
from tests.support.wait import BOUND, wait_until


@pytest.mark.parametrize("abstract", [False, True], ids=["path", "abstract"])
def test_notify_protocol(tmp_path: Path, abstract: bool) -> None:
    addr = f"@guardian-test-{os.getpid()}" if abstract else str(tmp_path / "notify")
    listener = NotifySocket(addr)
    try:
        n = Notifier({"NOTIFY_SOCKET": addr, "WATCHDOG_USEC": "3000000",
                      "WATCHDOG_PID": str(os.getpid())})
        assert n.enabled and n.watchdog_interval == 1.5
        n.ready("3 rules")
        assert listener.read(2) == {"READY": "1", "STATUS": "3 rules"}
        n.watchdog()
        assert listener.read(2) == {"WATCHDOG": "1"}
        n.reloading(123456)
        assert listener.read(2) == {"RELOADING": "1", "MONOTONIC_USEC": "123456"}
        n.stopping()
        assert listener.read(2) == {"STOPPING": "1"}
    finally:
        listener.close()


def test_no_notify_socket_is_a_no_op() -> None:
    n = Notifier({})
    assert not n.enabled and n.watchdog_interval is None
    n.ready("x")  # does not raise


def test_watchdog_meant_for_another_process_is_ignored() -> None:
    assert Notifier({"WATCHDOG_USEC": "1000000", "WATCHDOG_PID": "1"}).watchdog_interval is None


def test_ready_status_watchdog_and_clean_stop(tmp_path: Path) -> None:
    with daemon(tmp_path) as (proc, notify):
        ready = notify.wait_for("READY", value="1")  # after the first evaluation
        assert "1 rules" in ready["STATUS"] and "1 firing (always)" in ready["STATUS"]
        notify.wait_for("STATUS", contains="last action: log for always: ok")
        # pings at half of WATCHDOG_USEC (1 s), between the 1 s ticks (each tick ends
        # with a STATUS): over three ticks, pings (about six), and no flood
        first = len(notify.messages)
        for _ in range(3):
            notify.wait_for("STATUS")
        pings = sum(m.get("WATCHDOG") == "1" for m in notify.messages[first:])
        assert 2 <= pings <= 12, notify.messages[first:]
        # a stopped loop stops pinging: once stopped, nothing more comes
        proc.send_signal(signal.SIGSTOP)
        wait_until(lambda: process_state(proc.pid) == "T", "the daemon stopped (SIGSTOP)")
        while notify.read(0.05):  # what it sent before it stopped
            pass
        assert notify.read(1.5) is None
        proc.send_signal(signal.SIGCONT)
        notify.wait_for("WATCHDOG")
        # SIGTERM ends it, cleanly (the bounds fail a daemon that never stops)
        proc.send_signal(signal.SIGTERM)
        notify.wait_for("STOPPING", timeout=BOUND)
        assert proc.wait(timeout=BOUND) == 0
    audit = [json.loads(line) for line in (tmp_path / "audit.jsonl").read_text().splitlines()]
    assert [a["type"] for a in audit][:3] == ["decision", "plan", "outcome"]


def test_reload_rejects_a_broken_file_and_picks_up_a_good_one(tmp_path: Path) -> None:
    with daemon(tmp_path) as (proc, notify):
        notify.wait_for("READY")
        write(tmp_path / "rules", "two.toml", 'version = 1\n[[rule]]\nname = "x"\n')
        notify.wait_for("RELOADING", value="1")
        msg = notify.messages[-1]
        assert int(msg["MONOTONIC_USEC"]) > 0
        bad = notify.wait_for("READY", contains="reload rejected")
        assert "two.toml:2:1: missing required key 'summary'" in bad["STATUS"]
        assert "1 rules" in bad["STATUS"] and proc.poll() is None
        write(tmp_path / "rules", "two.toml", RULE.format(name="second"))
        good = notify.wait_for("READY", contains="2 rules")
        assert "reload rejected" not in good["STATUS"]
        proc.send_signal(signal.SIGHUP)
        notify.wait_for("RELOADING", value="1")
        notify.wait_for("READY", contains="2 rules")
        proc.terminate()
        assert proc.wait(timeout=5) == 0
        assert proc.stderr is not None
        log = proc.stderr.read()
    assert "reload (rule files changed) rejected" in log and "reloaded (SIGHUP): 2 rule(s)" in log


def test_restart_keeps_cooldowns_and_does_not_refire(tmp_path: Path) -> None:
    with daemon(tmp_path) as (_, notify):
        notify.wait_for("STATUS", contains="last action: log for always: ok")
    saved = json.loads((tmp_path / "state.json").read_text())
    assert saved["rules"]["always"]["phase"] == "firing"
    # the boot's monotonic clock, with the boot it belongs to (see guardian.state)
    assert 0 < saved["rules"]["always"]["last_run"] <= saved["saved_mono"] <= time.monotonic()
    assert saved["boot_id"] == Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    with daemon(tmp_path) as (_, notify):
        ready = notify.wait_for("READY")
        assert "last action: none" in ready["STATUS"] and "1 firing" in ready["STATUS"]
        for _ in range(2):  # two more ticks: each would have acted again, but for the cooldown
            assert "last action: none" in notify.wait_for("STATUS")["STATUS"]
    plans = [line for line in (tmp_path / "audit.jsonl").read_text().splitlines()
             if '"type":"plan"' in line]
    assert len(plans) == 1  # the 1h cooldown survived the restart


def test_missing_rules_directory_fails_start_cleanly(tmp_path: Path) -> None:
    with daemon(tmp_path, rules=tmp_path / "nope") as (proc, notify):
        assert proc.wait(timeout=30) == 78
        assert proc.stderr is not None
        err = proc.stderr.read()
        assert "nope:1:1: cannot read rule file" in err and "No such file or directory" in err
        status = notify.wait_for("STATUS", contains="not started")
        assert "READY" not in status


def test_rules_others_can_write_are_refused(tmp_path: Path) -> None:
    rules = tmp_path / "rules"
    rules.mkdir()
    f = write(rules, "one.toml", RULE.format(name="always"))
    f.chmod(0o666)
    with daemon(tmp_path, rules=rules) as (proc, _):
        assert proc.wait(timeout=30) == 78
        assert proc.stderr is not None
        err = proc.stderr.read()
    assert "refusing rule or config files others can change" in err and "mode 666" in err


def test_a_config_others_can_write_is_refused(tmp_path: Path) -> None:
    cfg = write(tmp_path / "etc", "guardian.toml", "[engine]\ninterval = \"5s\"\n")
    cfg.chmod(0o646)
    with daemon(tmp_path, "--config", str(cfg)) as (proc, _):
        assert proc.wait(timeout=30) == 78
        assert proc.stderr is not None
        assert "guardian.toml: writable by group or others" in proc.stderr.read()


def test_metrics_endpoint_and_a_port_in_use(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        rules = tmp_path / "rules"
        rules.mkdir()
        write(rules, "one.toml", RULE.format(name="always"))
        s.listen()
        # no /healthz, no start (tests/system/test_service_lifecycle.py): it says why, and exits
        with daemon(tmp_path, "--metrics-port", str(port), rules=rules) as (proc, notify):
            busy = notify.wait_for("STATUS", contains="not started")
            assert f"metrics off (127.0.0.1:{port}: Address already in use)" in busy["STATUS"]
            assert proc.wait(timeout=30) == 75
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        free = s.getsockname()[1]
    with daemon(tmp_path, "--metrics-port", str(free), rules=rules) as (proc, notify):
        notify.wait_for("READY")
        notify.wait_for("STATUS", contains="1 rules")  # the first tick is done
        body = urllib.request.urlopen(f"http://127.0.0.1:{free}/metrics", timeout=5).read()
    text = body.decode()
    assert 'guardian_rule_state{rule="always",state="firing"} 1.0' in text
    assert "guardian_signal_processes " in text  # a level: no `_total`
    assert "guardian_tick_seconds_count" in text


def test_metrics_follow_prometheus_conventions(tmp_path: Path) -> None:
    """The shipped rules' live metrics pass `promtool check metrics` (Prometheus' own
    linter; Debian's prometheus package ships it) with nothing to say: counters end in
    `_total`, levels do not, percentages are 0-1 ratios, no PID labels, labelled counters
    at zero from the start, process_* and build info, the last tick's time."""
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool is not installed (Debian: apt-get install prometheus)")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with daemon(tmp_path, "--dry-run", "--metrics-port", str(port), rules=RULES) as (_, notify):
        notify.wait_for("READY")
        for _ in range(2):  # more ticks (each ends with a STATUS): rates and percentages
            notify.wait_for("STATUS")
        body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read()
    text = body.decode()
    lint = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True,
                          text=True, timeout=60)
    assert lint.returncode == 0 and not lint.stdout.strip(), lint.stdout + lint.stderr
    samples = [line for line in text.splitlines() if not line.startswith("#")]
    assert "guardian_signal_cpu_core_sys_ratio{" in text
    assert not any("_pct" in line.split("{")[0] for line in samples)
    assert 'guardian_actions_total{action="log",outcome="failed",rule="nic-reset"} 0.0' in text
    assert "process_resident_memory_bytes " in text and "guardian_build_info{" in text
    assert "guardian_last_tick_timestamp_seconds " in text
    assert not any("pid=" in line for line in samples)
    assert "guardian_source_errors_total" in text


def test_shipped_rules_run_in_the_service(tmp_path: Path) -> None:
    with daemon(tmp_path, "--dry-run", rules=RULES) as (_, notify):
        ready = notify.wait_for("READY")
        assert ready["STATUS"].startswith(
            f"dry run: observing only, acting is off; {shipped_rule_count()} rules; ")


def test_healthz_and_guardian_health(tmp_path: Path) -> None:
    """/healthz answers 200 while ticks complete and `guardian health` exits 0; a stopped
    loop gets no answer (exit 1); a loop whose ticks stopped completing answers 503."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    config = write(tmp_path, "g.toml", "")
    health = [sys.executable, "-m", "guardian", "health", "--config", str(config), "--port",
              str(port), "--timeout", "1s"]
    with daemon(tmp_path, "--metrics-port", str(port)) as (proc, notify):
        notify.wait_for("READY")
        notify.wait_for("STATUS", contains="last action")  # the first tick is done
        body = urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5).read()
        assert body.decode().startswith("ok: the last tick completed"), body
        ok = subprocess.run(health, capture_output=True, text=True, timeout=60)
        assert ok.returncode == 0 and ok.stdout.startswith("ok: "), ok.stderr
        proc.send_signal(signal.SIGSTOP)
        try:
            stopped = subprocess.run(health, capture_output=True, text=True, timeout=60)
        finally:
            proc.send_signal(signal.SIGCONT)
        assert stopped.returncode == 1 and "no answer" in stopped.stderr


def test_healthz_says_stuck_when_ticks_stop_completing() -> None:
    from guardian.runtime.config import Config
    from guardian.runtime.metrics import _with_health
    from guardian.service.daemon import Daemon, ServiceOptions

    d = Daemon(ServiceOptions(rules=[str(RULES)], interval=1.0, metrics_port=None), Config())
    d.witness.last_tick_done = time.monotonic() - 120  # the loop hangs in a tick
    ok, text = d.health()
    assert not ok and text.startswith("stuck: the last tick completed 120s ago")
    statuses: list[str] = []
    app = _with_health(lambda e, r: [b"metrics"], d.health)
    body = app({"PATH_INFO": "/healthz"}, lambda status, headers: statuses.append(status))
    assert statuses == ["503 Service Unavailable"] and b"stuck" in b"".join(body)
    d.witness.last_tick_done = time.monotonic()
    assert d.health()[0]


def test_healthz_names_blind_rules_from_the_first_evaluation_before_its_tick_ends() -> None:
    """READY's STATUS= names the blind rules once the first evaluation is done; /healthz
    said "starting" until that tick also finished acting (CI saw the two disagree)."""
    from guardian.runtime.config import Config
    from guardian.runtime.coverage import Blind
    from guardian.service.daemon import Daemon, ServiceOptions

    d = Daemon(ServiceOptions(rules=[str(RULES)], interval=1.0, metrics_port=None), Config())
    assert d.health()[1].startswith("starting (")  # nothing evaluated yet: nothing known
    d.witness.blind = [Blind("dying", "warning", ("cgroup_dying",), ("cgroups",),
                             ("source cgroups disabled",), ())]
    ok, text = d.health()
    assert ok and text.startswith("degraded: the first tick is under way ("), text
    assert "1 blind (dying)" in text, text
