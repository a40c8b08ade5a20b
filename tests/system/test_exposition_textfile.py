"""The exposition source refuses a textfile-collector file another user owns or may
write, and a directory anyone may add files to: anyone who can write a .prom file would
fire (or silence) the shipped GPU rules. A refused input makes prom.sample no value, never
the family of the rest. Needs root, to give a file to another user (the rest of the
source: tests/unit/sources/test_exposition.py)."""

from __future__ import annotations

import os
import re
from pathlib import Path

from guardian.core.snapshot import labels_of
from tests.support.exposition import exposition_source
from tests.support.kernel import need_root


def test_a_textfile_others_can_write_is_refused(tmp_path: Path) -> None:
    # anyone who can write a .prom file would fire the shipped GPU rules
    need_root()  # to give a file to another user
    d = tmp_path / "textfile"
    d.mkdir()
    (d / "ok.prom").write_text("x 1\n")
    (d / "nobody.prom").write_text("DCGM_FI_DEV_XID_ERRORS 79\n")
    os.chown(d / "nobody.prom", 65534, 65534)  # nobody (the tests run as root)
    (d / "open.prom").write_text("DCGM_FI_DEV_XID_ERRORS 79\n")
    os.chmod(d / "open.prom", 0o666)
    src = exposition_source(textfile_directories=[str(d)], interval=3600)
    src.refresh()
    out = src.collect(0.0)
    # any metric could have been in the refused files: no value, never ok.prom's alone
    assert out["prom.sample"] is None
    assert out["prom.up"] == {labels_of({"target": "file:ok.prom"}): 1.0,
                              labels_of({"target": "file:nobody.prom"}): 0.0,
                              labels_of({"target": "file:open.prom"}): 0.0}
    assert src.faults() == [
        "file:nobody.prom: ValueError: owned by uid 65534, neither root nor guardian's",
        "file:open.prom: ValueError: writable by group or others (mode 0666)"]
    os.chmod(d, 0o1777)  # a directory anyone may add files to is refused whole
    src.refresh()
    assert src.collect(0.0)["prom.sample"] is None  # was {}: read as "no XID errors"
    assert src.faults() == [f"dir:{d}: ValueError: writable by group or others "
                            "(mode 1777)"]
    os.chmod(d, 0o755)
    os.unlink(d / "nobody.prom")
    os.unlink(d / "open.prom")
    src.refresh()
    assert src.collect(0.0)["prom.sample"] == {
        labels_of({"target": "file:ok.prom", "metric": "x"}): 1.0}
    assert src.faults() == []
    src.close()


def test_run_once_shows_the_rules_over_a_ten_minute_old_textfile_as_unknown(
        tmp_path: Path) -> None:
    """`guardian run --once --dry-run` over a 5-minute cron job's dcgm.prom last written 10
    minutes ago (max_age 60 s): the GPU rules are UNKNOWN, each in one line naming the
    source failing, and the file's age said once as the cause of them all (they read
    "ok ... ={}" before)."""
    import subprocess
    import sys
    import time

    from tests.support.checkout import RULES

    d = tmp_path / "textfile"
    d.mkdir()
    (d / "dcgm.prom").write_text('DCGM_FI_DEV_XID_ERRORS{gpu="0"} 0\n')
    old = time.time() - 600
    os.utime(d / "dcgm.prom", (old, old))
    config = tmp_path / "guardian.toml"
    config.write_text(f'[sources.exposition]\ntextfile_directories = ["{d}"]\n')
    got = subprocess.run([sys.executable, "-m", "guardian", "run", "--once", "--dry-run",
                          "--warmup", "0.5s", "--config", str(config),
                          "--rules", str(RULES / "gpu-dcgm.toml")],
                         capture_output=True, text=True, timeout=60)
    lines = got.stdout.splitlines()
    i = next(i for i, x in enumerate(lines) if x.split()[1:2] == ["gpu-dcgm-fallen-off-bus"])
    assert lines[i].split()[0] == "UNKNOWN", got.stdout
    # one line naming its cause, said in full once, on the blind line of its rules
    assert lines[i].endswith("  blind: source exposition failing (see below)"), got.stdout
    assert re.search(r"^blind \(no value\): gpu-dcgm-fallen-off-bus, .*\(source exposition "
                     r"failing: file:dcgm\.prom: last modified 10m\d*s? ago", got.stdout,
                     re.M), got.stdout
    assert re.search(r"source exposition failed: file:dcgm\.prom: last modified 10m\d*s? ago, "
                     r"over max_age \(1m\)", got.stderr), got.stderr
    assert not [x for x in lines if x.startswith("ok ")], got.stdout
