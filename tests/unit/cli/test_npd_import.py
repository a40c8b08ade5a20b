"""`guardian import npd` where this installation has no Kubernetes support (the OS
packages): it writes rules that installation can run, and says why (issue 41)."""

from __future__ import annotations

from pathlib import Path

import pytest

from guardian.cli import main, npd
from guardian.core import install
from guardian.core.tomlread import loads
from tests.support.checkout import FIXTURES

MONITOR = FIXTURES / "npd" / "config" / "kernel-monitor.json"


def test_without_the_k8s_extra_the_rules_log_and_the_note_names_a_fix_that_works(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """Before: every rule used kube.condition/kube.event, which the .deb cannot load,
    and the error told a venv without pip to `pip install`."""
    monkeypatch.setattr(npd, "has_k8s", lambda: False)
    monkeypatch.setattr(install, "pip_works", lambda: False)
    assert main(["import", "npd", str(MONITOR), "-o", str(tmp_path)]) == 0
    out, err = capsys.readouterr()
    rules = loads((tmp_path / "rules" / "npd-kernel-monitor.toml").read_text())["rule"]
    assert rules and {a["use"] for r in rules for a in r["action"]} == {"log"}
    assert "container image" in err and "pip install" not in err, err
    assert (tmp_path / "guardian.toml.d" / "50-npd-kernel-monitor.toml").is_file()
    assert "/etc/guardian/guardian.toml.d/50-npd-kernel-monitor.toml" in out, out


def test_with_the_k8s_extra_the_rules_set_conditions_and_events(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("lightkube")
    assert main(["import", "npd", str(MONITOR), "-o", str(tmp_path)]) == 0
    rules = loads((tmp_path / "rules" / "npd-kernel-monitor.toml").read_text())["rule"]
    assert {"kube.event", "kube.condition"} <= {a["use"] for r in rules for a in r["action"]}
