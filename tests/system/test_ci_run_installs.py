""".ci/run installs what the image tests need: runc even where podman is already there
(issue 40's review: `command -v podman || need+=(podman runc)` left a host with podman
and crun but no runc without runc, and the image tests skipped).

Ground truth: .ci/run's own lines that decide what to install, run by bash with a PATH
of stand-in tools (podman, crun; no runc); nothing is installed."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _needed(tools: list[str], tmp_path: Path) -> list[str]:
    """The packages .ci/run would install on a machine whose PATH has only ``tools``."""
    text = (REPO / ".ci" / "run").read_text()
    start = text.index("need=()\n")
    decide = text[start:text.index("if [ ${#need[@]} -gt 0 ]", start)]
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in tools:
        stub = bin_dir / tool
        stub.write_text("#!/bin/sh\nexit 0\n")
        stub.chmod(0o755)
    script = decide + 'printf "%s\\n" "${need[@]}"\n'
    out = subprocess.run(["/bin/bash", "-c", script], env={**os.environ, "PATH": str(bin_dir)},
                         capture_output=True, text=True, check=True, timeout=30)
    return out.stdout.split()


def test_runc_is_installed_beside_a_podman_that_has_crun(tmp_path: Path) -> None:
    needed = _needed(["podman", "crun"], tmp_path)
    assert "runc" in needed and "podman" not in needed


def test_nothing_of_the_container_tools_when_both_are_there(tmp_path: Path) -> None:
    needed = _needed(["podman", "runc"], tmp_path)
    assert "runc" not in needed and "podman" not in needed
