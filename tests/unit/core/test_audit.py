"""The audit log across a rotation: logrotate renames audit.jsonl away (the packages'
/etc/logrotate.d/node-guardian, `nocreate`), and the service, which holds the file open
for its lifetime, must write its next record to a new audit.jsonl, not into the rotated
file, while both stay readable by read_audit.

Before: the descriptor opened at start was written forever, so after a rotation every
record went into audit.jsonl.1 (compressed or deleted by later rotations) and the path
operators read stayed empty."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from guardian.core.audit import AuditLog, TornLine, read_audit


def _records(path: Path) -> list[dict[str, object]]:
    out = []
    for r in read_audit(path):
        assert not isinstance(r, TornLine), r
        out.append(r)
    return out


def test_a_record_after_a_rename_rotation_goes_to_a_new_file(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    log = AuditLog(path)
    log.write({"type": "plan", "n": 1})
    os.rename(path, tmp_path / "audit.jsonl.1")  # logrotate, in the middle of a run
    log.write({"type": "outcome", "n": 2})
    log.write({"type": "plan", "n": 3})
    log.close()
    assert [r["n"] for r in _records(tmp_path / "audit.jsonl.1")] == [1]
    assert [r["n"] for r in _records(path)] == [2, 3]


def test_a_new_file_someone_created_is_used_and_its_torn_end_closed(tmp_path: Path) -> None:
    """logrotate's `create`, or a file with a torn last line put there: the record starts
    on a line of its own."""
    path = tmp_path / "audit.jsonl"
    log = AuditLog(path)
    log.write({"n": 1})
    os.rename(path, tmp_path / "audit.jsonl.1")
    path.write_bytes(b'{"n": 0, "torn')
    log.write({"n": 2})
    log.close()
    got = list(read_audit(path))
    assert isinstance(got[0], TornLine) and got[1] == {"n": 2}


def test_a_removed_log_is_created_again(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    log = AuditLog(path)
    log.write({"n": 1})
    path.unlink()
    log.write({"n": 2})
    log.close()
    assert [r["n"] for r in _records(path)] == [2]


def test_a_link_planted_after_a_rotation_is_not_followed(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    log = AuditLog(path)
    log.write({"n": 1})
    os.rename(path, tmp_path / "audit.jsonl.1")
    target = tmp_path / "elsewhere"
    target.write_text("")
    path.symlink_to(target)
    with pytest.raises(OSError):
        log.write({"n": 2})  # raises: the executor then does not act on the record
    log.close()
    assert target.read_text() == ""
    assert [r["n"] for r in _records(tmp_path / "audit.jsonl.1")] == [1]


def test_an_unrotated_log_keeps_its_descriptor(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    log = AuditLog(path)
    fd = log._fd
    log.write({"n": 1})
    log.write({"n": 2})
    assert log._fd == fd
    log.close()
    assert [r["n"] for r in _records(path)] == [1, 2]
