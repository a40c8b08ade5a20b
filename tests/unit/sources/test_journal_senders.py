"""Round 4 of hostile input, the journal: a root daemon's line that carries another's text,
a container's output its runtime relays, and other senders' floods. The entries are lines as
``journalctl --output=json`` prints them (systemd 252: one compact object a line; every
field a string, or an array of byte values for one that is not UTF-8).

systemd.journal-fields(7): "Fields prefixed with an underscore are trusted fields, i.e.
fields that are implicitly added by the journal and cannot be altered by client code."
"_UID=: The process, user, and group ID of the process the journal entry originates from
formatted as a decimal string." "_COMM=, _EXE=, _CMDLINE=: The name, the executable path, and
the command line of the process the journal entry originates from." "_SYSTEMD_CGROUP=,
_SYSTEMD_SLICE=, _SYSTEMD_UNIT=, ...: The control group path in the systemd hierarchy, the
systemd slice unit name, the systemd unit name ... of the process the journal entry
originates from." The unit comes from the sender's cgroup, which an unprivileged process
cannot leave for a system unit's; _COMM is the name the process was exec'd under (a setuid
program run through a link named kubelet is called kubelet)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from pydantic import ValidationError

from guardian.core.snapshot import labels_of
from guardian.hostio.host import Host
from guardian.sources.journal import JournalConfig, JournalSource
from tests.support.wait import wait_until

FAKE = r'''
import os, sys, time
here = os.path.dirname(os.path.abspath(__file__))
sys.stdout.write(open(os.path.join(here, "lines.json")).read())
sys.stdout.flush()
time.sleep(3600)
'''

BOOT = "a1b2c3d4e5f60718293a4b5c6d7e8f90"


def _line(i: int, message: str, *, uid: str, unit: str, comm: str, pid: str = "812",
          **extra: str) -> str:
    """One entry as journalctl -o json prints it (fields as journald stores them)."""
    fields = {"__CURSOR": f"s=0f1e;i={i:x};b={BOOT};m={i:x};t=5f2a;x=9c", "__REALTIME_"
              "TIMESTAMP": str(1700000000000000 + i), "__MONOTONIC_TIMESTAMP": str(9000 + i),
              "_BOOT_ID": BOOT, "PRIORITY": "6", "SYSLOG_FACILITY": "4",
              "SYSLOG_IDENTIFIER": comm, "_TRANSPORT": "syslog" if comm == "sshd" else
              "stdout", "_PID": pid, "_UID": uid, "_GID": uid, "_COMM": comm,
              "_EXE": f"/usr/sbin/{comm}", "_CMDLINE": comm, "_CAP_EFFECTIVE": "1ffffffffff",
              "_SYSTEMD_CGROUP": f"/system.slice/{unit}", "_SYSTEMD_UNIT": unit,
              "_SYSTEMD_SLICE": "system.slice", "_HOSTNAME": "node-1", "MESSAGE": message,
              **extra}
    return json.dumps(fields, separators=(",", ":"))


PLEG = ('E1114 09:12:01.123456    812 kubelet.go:2412] "Skipping pod synchronization" '
        'err="PLEG is not healthy: pleg was last seen active 3m0.5s ago"')
SSHD = "Invalid user PLEG is not healthy from 10.0.0.5 port 50022"


def _source(tmp: Path, lines: list[str], **cfg: object) -> JournalSource:
    (tmp / "fake.py").write_text(FAKE)
    (tmp / "lines.json").write_text("".join(f"{x}\n" for x in lines))
    config = JournalConfig.model_validate(
        {"journalctl": [sys.executable, str(tmp / "fake.py")],
         "patterns": {"pleg": "PLEG is not healthy"}, **cfg})
    return JournalSource(Host(), config)


def _collect(src: JournalSource, lines: int) -> dict[str, object]:
    src.follow(lambda _: None)
    wait_until(lambda: src.lines >= lines, f"{lines} lines read from the stand-in")
    assert src.lines == lines
    return src.collect(1.0)


def _pleg(out: dict[str, object]) -> dict[str, float]:
    m = out["journal.matches"]
    assert isinstance(m, dict)
    return {dict(k)["unit"]: v for k, v in m.items() if dict(k)["pattern"] == "pleg" and v}


def test_a_root_daemons_line_with_a_strangers_text_fires_no_pattern(tmp_path: Path) -> None:
    # `ssh -l 'PLEG is not healthy' node`: sshd (uid 0) logs the user name it was given;
    # a setuid program run by a user through a link named "kubelet" (uid 0, _COMM kubelet,
    # in the user's session scope); docker's journald log driver relays a container's
    # output from dockerd (uid 0, docker.service) with CONTAINER_ID / CONTAINER_NAME
    lines = [_line(1, SSHD, uid="0", unit="ssh.service", comm="sshd"),
             _line(2, "pam_unix(su:auth): authentication failure; user=PLEG is not "
                      "healthy", uid="0", unit="session-4.scope", comm="kubelet"),
             _line(3, "PLEG is not healthy", uid="0", unit="kubelet.service", comm="dockerd",
                   CONTAINER_ID="0123456789ab", CONTAINER_NAME="k8s_evil_pod",
                   CONTAINER_TAG="0123456789ab"),
             _line(4, PLEG, uid="0", unit="kubelet.service", comm="kubelet")]
    src = _source(tmp_path, lines)
    try:
        out = _collect(src, 4)
        assert _pleg(out) == {"kubelet.service": 1}
        skipped = out["journal.skipped"]
        assert isinstance(skipped, dict)
        assert skipped[labels_of({"reason": "unit"})] == 2
        assert skipped[labels_of({"reason": "container"})] == 1
    finally:
        src.close()


def test_each_pattern_matches_only_the_units_it_is_meant_for(tmp_path: Path) -> None:
    lines = [_line(1, "fatal: cannot reach the API", uid="0", unit="ssh.service",
                   comm="sshd"),
             _line(2, "fatal: cannot reach the API", uid="0", unit="crashy.service",
                   comm="crashy"),
             _line(3, PLEG, uid="0", unit="crashy.service", comm="crashy")]
    src = _source(tmp_path, lines, units=[], patterns={
        "pleg": {"regex": "PLEG is not healthy", "units": ["kubelet.service"]},
        "api": {"regex": "^fatal: cannot reach the API", "units": ["crashy.service"]}})
    try:
        out = _collect(src, 3)
        m = out["journal.matches"]
        assert isinstance(m, dict)
        assert {k: v for k, v in m.items() if v} == {
            labels_of({"pattern": "api", "unit": "crashy.service"}): 1}
        assert "--unit=kubelet.service" in src.argv() and "--unit=crashy.service" in \
            src.argv()
    finally:
        src.close()


def test_a_pattern_with_no_units_at_all_is_refused() -> None:
    with pytest.raises(ValidationError, match="names no units"):
        JournalConfig.model_validate({"units": [], "patterns": {"pleg": "PLEG"}})
    # by default a pattern is kubelet's and containerd's
    cfg = JournalConfig.model_validate({"patterns": {"pleg": "PLEG"}})
    assert cfg.scoped() == {"pleg": ("PLEG", ("kubelet.service", "containerd.service"))}


def test_other_senders_never_spend_the_budget_of_lines_that_can_match(tmp_path: Path) -> None:
    # 3,000 lines of a user's `logger`, of sshd about strangers and of a container, then
    # kubelet's own line: the budget (100) is for lines that can match
    noise = [_line(i, "PLEG is not healthy", uid="1000", unit="session-4.scope",
                   comm="logger") for i in range(1, 1001)]
    noise += [_line(i, SSHD, uid="0", unit="ssh.service", comm="sshd")
              for i in range(1001, 2001)]
    noise += [_line(i, "PLEG is not healthy", uid="0", unit="containerd.service",
                    comm="containerd", CONTAINER_ID_FULL="ab" * 32)
              for i in range(2001, 3001)]
    src = _source(tmp_path, [*noise, _line(3001, PLEG, uid="0", unit="kubelet.service",
                                           comm="kubelet")], max_entries_per_tick=100)
    try:
        out = _collect(src, 3001)
        assert _pleg(out) == {"kubelet.service": 1}
        skipped = out["journal.skipped"]
        assert isinstance(skipped, dict)
        assert skipped[labels_of({"reason": "flood"})] == 0
        assert skipped[labels_of({"reason": "uid"})] == 1000
        src.close()
        assert src.cursor is not None and src.cursor.startswith("s=0f1e;i=bb9;")
    finally:
        src.close()
