"""Crash consistency: the daemon is killed with SIGKILL at random points, 100 times, while
a rule acts. The audit log always parses (a torn line would be reported, not dropped),
the persisted state always loads, and the action never runs again inside its cooldown."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

from guardian.core.audit import TornLine, read_audit
from tests.support.wait import wait_until

RULE = '''version = 1
[[rule]]
name = "always"
summary = "a host always has processes"
when = "processes.total > 0"
cooldown = "1h"
  [[rule.action]]
  use = "command"
  argv = ["{python}", "-c", "import time; time.sleep(0.2); open('{marker}', 'a').write('x')"]
'''
KILLS = 100


def test_sigkill_100_times_while_acting(tmp_path: Path) -> None:
    rules = tmp_path / "rules"
    rules.mkdir()
    marker = tmp_path / "marker"
    (rules / "r.toml").write_text(RULE.format(python=sys.executable, marker=marker))
    audit, state = tmp_path / "audit.jsonl", tmp_path / "state.json"
    rng = random.Random(1234)
    env = {k: v for k, v in os.environ.items() if k != "NOTIFY_SOCKET"}

    def start(state: Path, audit: Path, rules: Path = rules) -> subprocess.Popen[bytes]:
        return subprocess.Popen(
            [sys.executable, "-m", "guardian", "run", "--rules", str(rules), "--interval",
             "0.05s", "--state", str(state), "--audit", str(audit), "--metrics-port", "0"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)

    # How long this machine, as loaded now, takes from start to acting: the kill points
    # are spread around it, so a busy CI machine still sees kills on both sides of it.
    probe_rules = tmp_path / "probe-rules"
    probe_rules.mkdir()
    (probe_rules / "r.toml").write_text(RULE.format(python=sys.executable,
                                                    marker=tmp_path / "probe-marker"))
    probe = start(tmp_path / "probe-state.json", tmp_path / "probe-audit.jsonl", probe_rules)
    t0 = time.monotonic()  # a measurement to spread the kills by, never asserted on
    wait_until(lambda: '"type":"plan"' in _text(tmp_path / "probe-audit.jsonl"),
               "the daemon acting", every=0.01)
    to_acting = time.monotonic() - t0
    probe.kill()
    probe.wait(timeout=10)
    for _ in range(KILLS):
        proc = start(state, audit)
        # from mid-start-up to well into acting (the action takes 0.2 s)
        time.sleep(rng.uniform(0.1 * to_acting, 1.3 * to_acting + 0.2))
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
        if state.exists():  # atomic rename: never half-written
            saved = json.loads(state.read_text())
            assert saved["format"] == 2
    records = list(read_audit(audit))
    torn = [r for r in records if isinstance(r, TornLine)]
    good = [r for r in records if isinstance(r, dict)]
    assert len(torn) <= KILLS  # each would be a kill mid-write, and is reported, not lost
    plans = [r for r in good if r["type"] == "plan"]
    assert len(plans) == 1, f"the action was started {len(plans)} times across restarts"
    assert json.loads(state.read_text())["rules"]["always"]["last_run"] is not None
    # an action a kill left running (an orphan now) ends before the marker is read
    wait_until(lambda: not _running_with(str(marker)), "the orphaned actions' end")
    assert marker.read_text() in ("", "x")  # it ran at most once


def _running_with(text: str) -> list[str]:
    """The processes whose command line holds ``text``."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if text.encode() in Path(f"/proc/{pid}/cmdline").read_bytes():
                found.append(pid)
        except OSError:
            pass
    return found


def _text(path: Path) -> str:
    try:
        return path.read_text()
    except FileNotFoundError:
        return ""
