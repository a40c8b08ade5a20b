"""A state directory on a full or read-only filesystem from the start (issue 39): before,
`guardian run` died with a traceback writing its pid into the lock file (ENOSPC), a
restart loop under systemd. Now it runs, acts on nothing, says why in its status, and
acts once the disk is back. A real tiny tmpfs; root."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.support.daemon import daemon
from tests.support.kernel import fill, tmpfs

pytestmark = pytest.mark.host_global  # mounts


def _no_traceback(proc: subprocess.Popen[str]) -> str:
    proc.terminate()
    _, err = proc.communicate(timeout=10)
    assert "Traceback" not in err, err
    return err


def test_a_full_state_directory_at_start_runs_acting_on_nothing(tmp_path: Path) -> None:
    with tmpfs(tmp_path / "disk") as disk:
        ballast = fill(disk)
        with daemon(tmp_path, "--state", str(disk / "state.json")) as (proc, notify):
            notify.wait_for("STATUS", contains="NOT ACTING, persistence failing (state: "
                                               "No space left on device)")
            assert proc.poll() is None
            assert "last action: none" in notify.messages[-1]["STATUS"]
            ballast.unlink()
            notify.wait_for("STATUS", contains="last action: log for always: ok")
            assert "NOT ACTING" not in notify.messages[-1]["STATUS"]
            err = _no_traceback(proc)
        assert err.count("cannot save state") == 1  # said once, not every tick


def test_a_read_only_state_directory_runs_failing_closed_until_writable(
        tmp_path: Path) -> None:
    """The lock file cannot even be created: not a setting to fix (a disk remounted
    read-only after errors), so it runs acting on nothing and takes the lock later."""
    with tmpfs(tmp_path / "disk", "ro") as disk, \
            daemon(tmp_path, "--state", str(disk / "state.json")) as (proc, notify):
        notify.wait_for("STATUS", contains="NOT ACTING, persistence failing (instance "
                                           "lock: cannot use the state directory")
        assert proc.poll() is None
        subprocess.run(["mount", "-o", "remount,rw", str(disk)], check=True)
        notify.wait_for("STATUS", contains="last action: log for always: ok")
        assert (disk / "guardian.lock").exists()
        _no_traceback(proc)


def test_an_audit_log_on_a_read_only_disk_at_start_runs_failing_closed(
        tmp_path: Path) -> None:
    """Before: exit 73 (the audit log cannot be created), a restart loop under systemd on
    a disk remounted read-only. Now it runs, applies nothing (no action without its audit
    record), says why, and acts once the disk takes the log."""
    with tmpfs(tmp_path / "logs", "ro") as logs, \
            daemon(tmp_path, "--audit", str(logs / "audit.jsonl")) as (proc, notify):
        notify.wait_for("STATUS", contains="NOT ACTING, persistence failing (audit log: "
                                           "Read-only file system)")
        assert proc.poll() is None
        assert "last action: none" in notify.messages[-1]["STATUS"] or \
            "last action: log for always: refused" in notify.messages[-1]["STATUS"]
        subprocess.run(["mount", "-o", "remount,rw", str(logs)], check=True)
        notify.wait_for("STATUS", contains="last action: log for always: ok")
        assert (logs / "audit.jsonl").read_text().count('"type":"outcome"') == 1
        err = _no_traceback(proc)
    assert err.count("cannot open the audit log") == 1
