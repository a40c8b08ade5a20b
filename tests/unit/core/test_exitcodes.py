"""guardian.core.exitcodes: the numbers are an interface (scripts, probes, the unit)."""

from __future__ import annotations

import re
from pathlib import Path

import guardian
from guardian.core.exitcodes import ExitCode


def test_the_numbers_do_not_change() -> None:
    assert {c.name: int(c) for c in ExitCode} == {
        "OK": 0, "FAILED": 1, "USAGE": 2, "DEGRADED": 3, "UNAVAILABLE": 69, "CANTCREAT": 73,
        "TEMPFAIL": 75, "CONFIG": 78, "INTERRUPTED": 130}


def test_the_unit_does_not_restart_into_a_refused_configuration() -> None:
    unit = Path(guardian.__file__).parent / "data" / "systemd" / "guardian.service"
    prevent = re.search(r"^RestartPreventExitStatus=(.*)$", unit.read_text(), re.M)
    assert prevent is not None and prevent.group(1).split() == [str(int(ExitCode.CONFIG))]
