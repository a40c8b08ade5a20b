"""`guardian check --config`: the config file is checked with the rules, through the
command line (its loading is tests/unit/runtime/test_config.py)."""

from __future__ import annotations

from pathlib import Path

from tests.support.checkout import REPO, write
from tests.support.cli import guardian


def test_guardian_check_checks_the_config_too(tmp_path: Path) -> None:
    bad = write(tmp_path, "g.toml", '[engine]\ninterval = "soon"\n')
    proc = guardian("check", "--config", str(bad), str(REPO / "rules"))
    assert proc.returncode == 1
    assert proc.stdout.startswith(f"{bad}:2:12: engine.interval: bad duration 'soon'")
    good = guardian("check", "--config", str(REPO / "systemd" / "guardian.toml"),
                    str(REPO / "rules"))
    assert good.returncode == 0 and good.stdout.startswith("ok: ")
