"""Evidence bundles of another user are refused and never shown (issue 43's review: an
unprivileged user who could make the evidence directory redirected root's writes). Root
only: it chowns directories to nobody."""

from __future__ import annotations

import json
import os
import pwd
from pathlib import Path

import pytest

from guardian.actions.evidence import EvidenceParams, EvidenceProfile
from guardian.core.snapshot import Snapshot
from guardian.hostio import bundles as store
from guardian.hostio.host import Host
from guardian.plugin.contract import ActionContext


def _bundle_at(ev: Path, name: str, at: float, size: int = 1000) -> Path:
    d = ev / name
    d.mkdir(mode=0o700)
    (d / "summary.json").write_text(json.dumps({"at": at, "line": name}))
    (d / "stacks.folded").write_text("x" * size)
    return d


@pytest.mark.skipif(os.geteuid() != 0, reason="chowns a directory to nobody: root only")
def test_evidence_directory_or_bundle_of_another_user_is_refused(tmp_path: Path) -> None:
    nobody = pwd.getpwnam("nobody").pw_uid
    (tmp_path / "evidence").mkdir(mode=0o700)
    os.chown(tmp_path / "evidence", nobody, -1)
    act = EvidenceProfile(EvidenceParams(perf="/nonexistent/perf",
                                         state_dir=str(tmp_path)))
    ctx = ActionContext("r", Snapshot(0.0), Host(), dry_run=False)
    assert any("owned by UID" in r for r in act.plan(ctx).refused)
    out = act.apply(act.plan(ctx), ctx)
    assert not out.ok and "owned by UID" in out.error
    os.chown(tmp_path / "evidence", 0, -1)
    # a bundle someone else owns is never shown nor counted
    mine = _bundle_at(tmp_path / "evidence", "20260101T000000Z-r", 1000.0)
    planted = _bundle_at(tmp_path / "evidence", "20260102T000000Z-r", 2000.0)
    os.chown(planted, nobody, -1)
    got = store.latest(tmp_path)
    assert got is not None and got[0] == mine
