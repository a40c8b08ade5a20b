"""A ladder whose first step reboots, under a real systemd 252 booted in systemd-nspawn
(guardian.testing.nspawn; no stand-in): the service asks systemd for reboot.target over
its private bus, the container reboots (nspawn exits 133, systemd-nspawn(1)), and in the
new boot (a new boot id, nspawn's) the service started again from the same state file
continues the climb with step 2 once step 1's verify passed, counted across the boot by
the wall clock (docs/rules.md, Ladders: Durable).

guardian runs inside the container from this checkout's virtual environment (bound
read-only at the same paths, the container being the same Debian 12) as a transient
`Type=notify` unit (systemd-run): the same process and notify protocol as the packaged
unit, without building and installing wheels (minutes; tests/system/test_service_systemd.py
covers the packaged unit). systemd-run stands for the unit being enabled: the test starts
it again in the new boot."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from guardian.testing.nspawn import Container, booted
from tests.support.checkout import REPO, write
from tests.support.wait import BOUND, wait_until

pytestmark = pytest.mark.os_integration  # boots containers: the default interpreter only

BOOT = "/proc/sys/kernel/random/boot_id"

# step 1's verify outlasts the shutdown (the service is stopped early in it), so step 2
# can only be due in the new boot
LADDER = '''version = 1
[[rule]]
name = "needs-a-reboot"
summary = "a problem a reboot might fix"
when = "processes.total > 0"
fleet = false                 # no Kubernetes here: one node
limit = {{ runs = 2, within = "1h" }}
  [[rule.step]]
  verify = "8s"
  [[rule.step.action]]
  use = "node.reboot"

  [[rule.step]]
  verify = "1s"
  [[rule.step.action]]
  use = "command"
  argv = ["/bin/sh", "-c", "echo 2 >> \\"$0\\"", "{marker}"]

  [[rule.escalate]]
  use = "log"
  message = "a human, please"
'''


def start_service(c: Container, tmp_path: Path) -> None:
    """guardian run as a Type=notify unit: systemd-run returns once it sent READY=1."""
    started = c.run("systemd-run", "--unit=guardian-ladder", "-p", "Type=notify", "-p",
          "NotifyAccess=main", "--", str(Path(sys.executable).parent / "python"), "-m",
          "guardian", "run", "--rules", str(tmp_path / "rules"), "--state",
          "/var/lib/guardian/state.json", "--audit", str(tmp_path / "audit.jsonl"),
          "--interval", "1s", "--metrics-port", "0", timeout=BOUND * 2, check=False)
    assert started.returncode == 0, started.stderr + c.run(
        "journalctl", "--no-pager", "-o", "cat", "-u", "guardian-ladder", check=False).stdout


def decisions(tmp_path: Path) -> list[tuple[str, str]]:
    audit = tmp_path / "audit.jsonl"
    lines = audit.read_text().splitlines() if audit.exists() else []
    return [(a["kind"], a["reason"]) for a in map(json.loads, lines)
            if a.get("type") == "decision"]


def test_a_reboot_step_continues_with_the_next_step_in_the_new_boot(
        tmp_path: Path) -> None:
    """Done when (issue 42): a reboot step under nspawn's real systemd continues after the
    boot: step 1 (node.reboot) reboots the container once; the service in the new boot
    runs step 2 (a command) once step 1's verify passed, never step 1 again (one reboot
    recorded), then needs a human."""
    state = tmp_path / "state"
    state.mkdir()
    marker = tmp_path / "step2"
    write(tmp_path / "rules", "ladder.toml", LADDER.format(marker=marker))
    # this interpreter, its venv and the checkout, at their own paths (an interpreter of
    # the system's own /usr is the container's too: both are Debian 12)
    binds = [(str(REPO), str(REPO))]
    for where in dict.fromkeys([Path(sys.prefix), Path(sys.base_prefix)]):
        if not where.is_relative_to(REPO) and not where.is_relative_to("/usr"):
            binds.append((str(where), str(where)))
    rw = [(str(state), "/var/lib/guardian"), (str(tmp_path), str(tmp_path))]
    with booted(binds=binds, rw_binds=rw) as c:
        first_boot = c.run("cat", BOOT).stdout.strip()
        c.run("touch", "/run/reboot-required")
        start_service(c, tmp_path)
        assert c.nspawn.wait(timeout=BOUND * 2) == 133  # it rebooted
    assert decisions(tmp_path) == [("firing", "step 1 of 2: node.reboot, verify 8s")]
    assert not marker.exists()  # step 2 was not due before the boot ended
    [reboot] = json.loads((state / "reboots.json").read_text())["reboots"]
    assert (reboot["boot"], reboot["rule"]) == (first_boot, "needs-a-reboot")
    with booted(binds=binds, rw_binds=rw) as c:
        assert c.run("cat", BOOT).stdout.strip() != first_boot
        start_service(c, tmp_path)
        wait_until(lambda: decisions(tmp_path)[-1][0] == "escalated",
                   "the top passed: it needs a human", timeout=BOUND * 2)
        c.run("systemctl", "stop", "guardian-ladder.service")
    assert marker.read_text().splitlines() == ["2"]
    assert decisions(tmp_path) == [
        ("firing", "step 1 of 2: node.reboot, verify 8s"),
        ("retry", "step 2 of 2: command, verify 1s; step 1 did not resolve it within 8s"),
        ("escalated", "needs a human: its 2 steps ran and it still fires 1s after the last")]
    assert len(json.loads((state / "reboots.json").read_text())["reboots"]) == 1
    # step 1's verify counted across the boot: step 2 was decided 8 s or more after step 1,
    # by the decisions' own wall-clock stamps (a lower bound the logic owes, not a speed).
    # Each stamp follows its tick's start by that tick's collection time, which is under
    # one interval (1s): hence 8 - 1. (The outcomes' stamps also hold the reboot's apply
    # time, which once made the gap read 7.87 s.)
    at = {a["kind"]: a["ts"] for a in map(json.loads, (tmp_path / "audit.jsonl").read_text()
                                          .splitlines()) if a.get("type") == "decision"}
    assert at["retry"] - at["firing"] >= 8 - 1, at
