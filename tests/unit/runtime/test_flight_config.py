"""[evidence.flight] of guardian.toml: off unless set, its keys validated where they are
written, and what the service builds from it (a recorder, not started, whose files live
beside the state file)."""

from __future__ import annotations

from pathlib import Path

import pytest

from guardian.core.diagnostics import RuleError
from guardian.plugin.registry import default_registry
from guardian.runtime.config import load_config
from guardian.service.components import ServiceOptions, flight_recorder
from tests.support.checkout import REPO, write


def test_off_unless_enabled() -> None:
    for cfg in (load_config(None, default_registry()),
                load_config(REPO / "systemd" / "guardian.toml", default_registry())):
        assert cfg.evidence.flight.enabled is False
        assert flight_recorder(ServiceOptions(rules=["r"]), cfg) is None


def test_enabled_builds_a_recorder_beside_the_state_file(tmp_path: Path) -> None:
    """Before: [evidence] was an unknown key, and the service ran no recorder."""
    p = write(tmp_path, "g.toml", '[evidence.flight]\nenabled = true\nfrequency = 9\n'
              'ring_mb = 2\nperf = "/usr/bin/perf"\ndump_timeout = "1m"\n')
    cfg = load_config(p, default_registry())
    rec = flight_recorder(ServiceOptions(rules=["r"], state_path=tmp_path / "s" / "state.json"),
                          cfg)
    assert rec is not None and not rec.running  # started by the service once it is ready
    assert (rec.frequency, rec.ring_mb, rec.perf, rec.dump_timeout) == \
        (9, 2.0, "/usr/bin/perf", 60.0)
    assert rec.workdir == tmp_path / "s" / "flight"
    assert not (tmp_path / "s").exists()  # nothing made until it starts


def test_a_bad_key_is_named_where_it_is_written(tmp_path: Path) -> None:
    p = write(tmp_path, "g.toml", '[evidence.flight]\nenabled = true\nfrequency = 0\n'
              'ringmb = 8\n')
    with pytest.raises(RuleError) as info:
        load_config(p, default_registry())
    got = sorted(f"{d.line}:{d.col}: {d.message}" for d in info.value.diagnostics)
    assert got[0].startswith("3:13: evidence.flight.frequency: Input should be greater "
                             "than or equal to 1")
    assert got[1].startswith("4:1: ") and "ringmb" in got[1]
