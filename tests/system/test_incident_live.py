"""The incident reproduced live, remediated for real, and resolved.

A real crash-looping systemd unit (in systemd-nspawn) leaks real dying memory cgroups on
this VM (see tests/support/incident.py). guardian runs live on the host with the shipped
dying-memcg rule's actions, its thresholds scaled down so the test takes seconds: it fires,
stops the unit through systemctl, drops the page cache that pins the memcgs, and the rule
resolves."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from guardian.hostio.host import Host
from guardian.sources.cgroups import CgroupsSource
from tests.support.incident import config_for, crash_loop
from tests.support.wait import wait_until

# Boots a container or builds packages: run on the default interpreter only (.ci/run).
pytestmark = pytest.mark.os_integration



RULE = '''version = 1

[[rule]]
name = "dying-memcgs"
summary = "Dying memory cgroups pile up (thresholds scaled down for the test)"
when = "memcg.dying > {threshold} and memcg.dying > 20 * memcg.live"
for = "3s"
cooldown = "30m"

  [[rule.action]]
  use = "systemd.unit"
  allow = ["ecs*.service"]
  verbs = ["stop"]
  min_restarts = 5
  systemctl = [{systemctl}]

  [[rule.action]]
  use = "memcg.release"
  method = "drop_caches"
  sync_first = true
'''


def test_the_leak_is_stopped_released_and_the_rule_resolves(tmp_path: Path) -> None:
    counter = CgroupsSource(Host())
    baseline = counter.collect(0.0)["memcg.dying"]
    assert isinstance(baseline, int)
    with crash_loop() as (c, _):
        rules = tmp_path / "rules"
        rules.mkdir()
        systemctl = ", ".join(f'"{a}"' for a in [*c.enter, "systemctl"])
        (rules / "memcg.toml").write_text(RULE.format(threshold=baseline + 300,
                                                      systemctl=systemctl))
        cfg = config_for(c, tmp_path / "guardian.toml")
        audit = tmp_path / "audit.jsonl"
        proc = subprocess.Popen(
            [sys.executable, "-m", "guardian", "run", "--rules", str(rules), "--config",
             str(cfg), "--interval", "1s", "--state", str(tmp_path / "state.json"),
             "--audit", str(audit), "--metrics-port", "0"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        try:
            records = _wait_for_resolution(audit, timeout=120)
        finally:
            proc.terminate()
            proc.wait(timeout=10)
        kinds = [(r["type"], r.get("kind") or r.get("use")) for r in records]
        assert ("decision", "pending") in kinds and ("decision", "firing") in kinds
        outcomes = {r["use"]: r["outcome"] for r in records if r["type"] == "outcome"}
        assert outcomes["systemd.unit"]["ok"] and outcomes["systemd.unit"]["verified"]
        assert outcomes["memcg.release"]["ok"] and outcomes["memcg.release"]["verified"]
        released = outcomes["memcg.release"]["data"]
        assert released["dying_after"] < released["dying_before"] - 200, released
        # stop first, then release: the unit's stop is planned before the cache drop
        plans = [r["use"] for r in records if r["type"] == "plan"]
        assert plans == ["systemd.unit", "memcg.release"]
        state = c.run("systemctl", "show", "-p", "ActiveState,NRestarts",
                      "ecs.service").stdout
        assert "ActiveState=inactive" in state or "ActiveState=failed" in state


def _wait_for_resolution(audit: Path, timeout: float) -> list[dict[str, Any]]:
    records: list[dict[str, Any]] = []

    def resolved() -> bool:
        if audit.exists():
            records[:] = [json.loads(line) for line in audit.read_text().splitlines()]
        return any(r.get("kind") == "resolved" for r in records)

    try:
        wait_until(resolved, "the rule resolved", timeout, every=0.5)
    except AssertionError as exc:
        raise AssertionError(f"{exc}: {records}") from None
    return records
