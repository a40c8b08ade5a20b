"""Round 4 of hostile input, script checks: a program another user could replace runs as
root (in a dry run too). Now, as rule files others can change are refused, it is never
run: no value, a start error saying why, and a warning from `guardian check`. As root:
files owned by `nobody`, and directories others may write to."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from guardian.hostio.host import Host
from guardian.sources.script import ScriptConfig, ScriptSource

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to chown")
NOBODY = 65534


def _program(path: Path, marker: Path) -> Path:
    path.write_text(f"#!/bin/sh\ntouch {marker}\nexit 1\n")
    path.chmod(0o755)
    return path


def _run(prog: Path) -> tuple[dict[str, object], list[str], list[str]]:
    cfg = ScriptConfig.model_validate({"checks": {"c": {"argv": [str(prog)]}}})
    src = ScriptSource(Host(), cfg)
    try:
        src._run("c")  # one run, as a worker does it
        return src.collect(time.monotonic()), src.faults(), ScriptSource.config_warnings(cfg)
    finally:
        src.close()


@pytest.mark.parametrize("how", ["owned-by-nobody", "group-writable", "dir-writable",
                                 "dir-owned-by-nobody", "symlink-to-nobodys"])
def test_a_program_another_user_could_replace_is_never_run(tmp_path: Path, how: str) -> None:
    root = tmp_path / "checks"
    root.mkdir(mode=0o755)
    tmp_path.chmod(0o755)
    marker = tmp_path / "ran"
    prog = _program(root / "check.sh", marker)
    if how == "owned-by-nobody":
        os.chown(prog, NOBODY, NOBODY)
    elif how == "group-writable":
        prog.chmod(0o775)
    elif how == "dir-writable":
        root.chmod(0o777)
    elif how == "dir-owned-by-nobody":
        os.chown(root, NOBODY, NOBODY)
    else:
        theirs = tmp_path / "theirs"
        theirs.mkdir()
        os.chown(theirs, NOBODY, NOBODY)
        real = _program(theirs / "real.sh", marker)
        prog.unlink()
        prog.symlink_to(real)
    out, faults, warnings = _run(prog)
    assert not marker.exists(), "the program ran as root"
    assert out["script.status"] is None and out["script.problem"] is None
    assert any("another user could replace it" in f for f in faults), faults
    assert any("another user could replace it" in w for w in warnings), warnings


def test_a_program_only_root_can_change_runs(tmp_path: Path) -> None:
    tmp_path.chmod(0o755)
    root = tmp_path / "checks"
    root.mkdir(mode=0o755)
    marker = tmp_path / "ran"
    out, faults, _ = _run(_program(root / "check.sh", marker))
    assert marker.exists() and not faults
    assert out["script.status"] == {(("check", "c"),): 1.0}
