"""Injected faults: unreadable files (EACCES, for real: without CAP_DAC_OVERRIDE),
processes vanishing mid-scan, systemctl failing, a slow action. No false action, an error
count and audit entry, and the loop keeps ticking and feeding the watchdog. And the
security rails: one listener, on loopback; no shell anywhere; secrets not logged."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from guardian.hostio.host import Host
from guardian.runtime.collector import Collector
from guardian.sources.processes import ProcessesSource
from guardian.sources.systemd import SystemdSource
from tests.support.checkout import REPO, write
from tests.support.daemon import NotifySocket, daemon
from tests.support.kernel import need_root
from tests.support.wait import BOUND, ends


def test_unreadable_proc_file_is_no_value_not_zero(procfs_fixtures: Path,
                                                   tmp_path: Path) -> None:
    """EACCES for real: the file is mode 000 and guardian runs without DAC override."""
    need_root()
    if shutil.which("setpriv") is None:
        pytest.skip("setpriv (util-linux) is not installed")
    root = tmp_path / "root"
    shutil.copytree(procfs_fixtures, root)
    (root / "proc" / "stat").chmod(0)
    proc = subprocess.run(
        ["setpriv", "--inh-caps=-all", "--bounding-set=-dac_override,-dac_read_search",
         sys.executable, "-m", "guardian", "signals", "--json", "--warmup", "0s",
         "--root", str(root)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    rows = {r["name"]: r for r in json.loads(proc.stdout)["data"]}
    assert rows["cpu.cores"]["value"] is None
    assert "Permission denied" in (rows["cpu.cores"]["unavailable"] or "")
    assert rows["softirq.net_rx"]["value"] is not None  # the other sources go on


def test_processes_vanishing_mid_scan_are_not_errors() -> None:
    churn = subprocess.Popen([sys.executable, "-c",
                              "import subprocess\nfor _ in range(3000): "
                              "subprocess.Popen(['true']).wait()"])
    src = ProcessesSource(Host())
    coll = Collector(Host(), [src])
    try:
        for i in range(50):
            snap = coll.collect(float(i))
            total = snap.values["processes.total"]
            assert snap.errors == {} and isinstance(total, (int, float)) and total > 0
    finally:
        churn.kill()
        churn.wait()


def test_systemctl_failing_midway_means_no_value(tmp_path: Path) -> None:
    flag = tmp_path / "down"
    fake = write(tmp_path, "systemctl", f"""#!{sys.executable}
import os, sys
if os.path.exists({str(flag)!r}):
    print("Failed to connect to bus: Connection refused", file=sys.stderr)
    sys.exit(1)
if "--property=Version" in sys.argv:
    print("Version=252")
else:
    print("Id=ecs.service\\nNRestarts=40\\nActiveState=activating\\nSubState=auto-restart")
""")
    fake.chmod(0o755)
    src = SystemdSource(Host(), SystemdSource.Config(systemctl=[str(fake)]))
    coll = Collector(Host(), [src])
    assert "systemd.unit_restarts" in coll.collect(0.0).values
    flag.touch()
    snap = coll.collect(1.0)
    assert "systemd.unit_restarts" not in snap.values
    assert "Connection refused" in snap.errors["systemd"]
    assert snap.values["guardian.source_errors"] == {(("source", "systemd"),): 1.0}


SLOW = '''version = 1
[[rule]]
name = "slow"
summary = "s"
when = "processes.total > 0"
cooldown = "1h"
  [[rule.action]]
  use = "command"
  argv = ["sleep", "30"]
  timeout = "60s"
'''


def test_a_slow_action_times_out_while_the_loop_feeds_the_watchdog(tmp_path: Path) -> None:
    rules = tmp_path / "rules"
    rules.mkdir()
    write(rules, "slow.toml", SLOW)
    cfg = write(tmp_path, "g.toml", '[service]\napply_timeout = "10s"\n')
    audit = tmp_path / "audit.jsonl"
    with daemon(tmp_path, "--config", str(cfg), rules=rules,
                watchdog_usec=1_000_000) as (proc, notify):
        notify.wait_for("READY", timeout=BOUND)  # start-up is slower on a loaded machine
        for _ in range(3):
            notify.wait_for("WATCHDOG", timeout=BOUND)
        # those pings came while the apply ran: its outcome is not written yet
        assert '"type":"outcome"' not in audit.read_text(), "no pings while the action ran"
        notify.wait_for("STATUS", contains="last action: command for slow: failed",
                        timeout=BOUND)
        proc.terminate()
        proc.wait(timeout=10)
    outcomes = [json.loads(line) for line in (tmp_path / "audit.jsonl").read_text()
                .splitlines() if '"type":"outcome"' in line]
    assert "did not finish within 10s" in outcomes[0]["outcome"]["error"]


def test_a_failing_source_is_audited_once_with_no_false_action(tmp_path: Path) -> None:
    rules = tmp_path / "rules"
    rules.mkdir()
    write(rules, "u.toml", '''version = 1
[[rule]]
name = "units"
summary = "s"
when = "systemd.crashlooping_units == 0"
  [[rule.action]]
  use = "log"
''')
    fake = write(tmp_path, "systemctl", "#!/bin/sh\nexit 1\n")
    fake.chmod(0o755)
    cfg = write(tmp_path, "g.toml", f'[sources.systemd]\nsystemctl = ["{fake}"]\n')
    with daemon(tmp_path, "--config", str(cfg), rules=rules) as (proc, notify):
        ready = notify.wait_for("READY")
        assert "0 firing" in ready["STATUS"]
        for _ in range(2):  # more ticks, each ending with a STATUS
            assert "0 firing" in notify.wait_for("STATUS")["STATUS"]
        proc.terminate()
        proc.wait(timeout=10)
    # systemd is unavailable here from the start: the rule is unknown, never fires
    text = (tmp_path / "audit.jsonl").read_text() if (tmp_path / "audit.jsonl").exists() \
        else ""
    assert '"type":"plan"' not in text


def test_the_only_listener_is_metrics_on_loopback(tmp_path: Path) -> None:
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with daemon(tmp_path, "--metrics-port", str(port)) as (proc, notify):
        notify.wait_for("READY")
        inodes = {os.readlink(f"/proc/{proc.pid}/fd/{fd}")[8:-1]
                  for fd in os.listdir(f"/proc/{proc.pid}/fd")
                  if os.readlink(f"/proc/{proc.pid}/fd/{fd}").startswith("socket:")}
        listening = []
        for table in ("tcp", "tcp6", "udp", "udp6"):
            for line in Path(f"/proc/{proc.pid}/net/{table}").read_text().splitlines()[1:]:
                f = line.split()
                if f[9] in inodes and (f[3] == "0A" or table.startswith("udp")):
                    listening.append((table, f[1]))
        assert listening == [("tcp", f"0100007F:{port:04X}")], listening


def test_no_shell_anywhere_in_guardian() -> None:
    for path in (REPO / "src" / "guardian").rglob("*.py"):
        text = path.read_text()
        for bad in ("shell=True", "os.system(", "os.popen(", "/bin/sh"):
            assert bad not in text, f"{path}: {bad}"


def test_command_secrets_stay_out_of_the_audit_log(tmp_path: Path) -> None:
    rules = tmp_path / "rules"
    rules.mkdir()
    write(rules, "c.toml", '''version = 1
[[rule]]
name = "c"
summary = "s"
when = "processes.total > 0"
  [[rule.action]]
  use = "command"
  argv = ["true"]
  env = { API_TOKEN = "s3cr3t-t0ken-value" }
''')
    with daemon(tmp_path, rules=rules) as (proc, notify):
        notify.wait_for("STATUS", contains="last action: command for c: ok")
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=10)
        assert proc.stderr is not None
        log = proc.stderr.read()
    assert "s3cr3t" not in (tmp_path / "audit.jsonl").read_text() and "s3cr3t" not in log


_ = NotifySocket  # shared helper from test_service


def test_a_crashed_action_worker_is_reported_as_a_crash_not_a_timeout(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Before: an exception in the worker that carries out a tick's decisions (Python
    3.10's missing ``datetime.UTC`` in the fleet budget) was logged as "actions did not
    finish within 360s"; now the exception itself is logged and audited."""
    from guardian.runtime.config import Config
    from guardian.service.daemon import Daemon, ServiceOptions
    from guardian.service.notify import Notifier

    rules = tmp_path / "rules"
    rules.mkdir()
    write(rules, "r.toml", SLOW.replace('argv = ["sleep", "30"]', 'argv = ["true"]'))
    opts = ServiceOptions(rules=[str(rules)], state_path=tmp_path / "state.json",
                          audit_path=tmp_path / "audit.jsonl", metrics_port=None,
                          require_root_owned_rules=False)
    d = Daemon(opts, Config(), notifier=Notifier({}))
    assert d.start() == 0
    try:
        assert d.transaction is not None

        def broken(*_: object) -> list[object]:
            raise AttributeError("module 'datetime' has no attribute 'UTC'")

        d.transaction.executor.run = broken  # type: ignore[method-assign, assignment]
        with caplog.at_level("ERROR", logger="guardian"):  # ends: not at the 360 s deadline
            assert ends(d.tick, "a tick whose acting crashed") == []
    finally:
        d.shutdown()
    text = caplog.text
    assert "acting on slow crashed: AttributeError" in text and "Traceback" in text
    assert "did not finish within" not in text
    crashes = [json.loads(line) for line in (tmp_path / "audit.jsonl").read_text()
               .splitlines() if '"type":"act_crash"' in line]
    assert crashes and "no attribute 'UTC'" in crashes[0]["error"]
