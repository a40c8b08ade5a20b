"""The journal source against the real journal of a real systemd (252, booted in
systemd-nspawn; guardian.testing.nspawn), through its own journalctl run inside the container: a
crash-looping unit's last words and systemd's words about it, scoped by unit, and the
cursor kept across a restart of the source."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from guardian.core.snapshot import labels_of
from guardian.engine.engine import Engine
from guardian.hostio.host import Host
from guardian.policy.loader import load_rules
from guardian.runtime.collector import Collector
from guardian.sources.journal import JournalConfig, JournalSource
from guardian.testing.nspawn import booted
from tests.support.wait import wait_until

# an example rule on a crash-looping unit's own last words
RULE = '''
version = 1
[[rule]]
name = "crashy-cannot-reach-api"
summary = "crashy.service says it cannot reach the API before it dies"
when = 'increase(journal.matches{pattern="last_words", unit="crashy.service"}, "5m") > 0'
  [[rule.action]]
  use = "log"
  message = "$values"
'''

# Boots a container: run on the default interpreter only (.ci/run).
pytestmark = pytest.mark.os_integration


def _count(src: JournalSource, pattern: str, unit: str) -> float:
    m = src.collect(time.monotonic())["journal.matches"]
    assert isinstance(m, dict)
    return float(m.get(labels_of({"pattern": pattern, "unit": unit}), 0.0))


def _until(src: JournalSource, pattern: str, unit: str, at_least: float) -> float:
    return wait_until(lambda: n if (n := _count(src, pattern, unit)) >= at_least else None,
                      f"{pattern}{{unit={unit}}} at {at_least} or more", every=0.1)


def test_a_crash_looping_units_last_words_in_the_real_journal(tmp_path: Path) -> None:
    with booted() as c:
        cfg = JournalConfig.model_validate({
            "journalctl": [*c.enter, "journalctl"], "units": ["crashy.service"],
            "patterns": {"last_words": r"^fatal: cannot reach the API",
                         "main_exited": r"Main process exited, code=exited, status=1/"}})
        src = JournalSource(Host(), cfg)
        src.keep_state(tmp_path)
        woken: list[str] = []
        (tmp_path / "rules").mkdir()
        (tmp_path / "rules" / "crashy.toml").write_text(RULE)
        engine = Engine(load_rules([tmp_path / "rules"]))
        collector = Collector(Host(), [src])
        try:
            assert src.follow(woken.append)
            time.sleep(1.0)  # journalctl at the journal's end before the unit logs
            engine.evaluate(collector.collect(0.0))
            # another unit's identical words are out of scope (-u crashy.service)
            c.run("systemd-run", "--unit=other", "/bin/sh", "-c",
                  "echo 'fatal: cannot reach the API'")
            c.run("systemd-run", "--unit=crashy", "-p", "Restart=always", "-p",
                  "RestartSec=200ms", "-p", "StartLimitIntervalSec=0", "/bin/sh", "-c",
                  "echo 'fatal: cannot reach the API'; exit 1")
            _until(src, "last_words", "crashy.service", 3)
            engine.evaluate(collector.collect(30.0))
            assert engine.firing() == ["crashy-cannot-reach-api"]
            # systemd's own line about the unit (logged by PID 1 with UNIT=crashy.service)
            _until(src, "main_exited", "crashy.service", 3)
            assert any(w.startswith("journal: ") for w in woken)
            members = src.collect(time.monotonic())["journal.matches"]
            assert isinstance(members, dict)
            # every member is the scoped unit's
            assert {dict(lbl)["unit"] for lbl in members} == {"crashy.service"}
            c.run("systemctl", "stop", "crashy.service")
            time.sleep(1.0)  # its last words read before the source stops
        finally:
            src.close()
        cursor = json.loads((tmp_path / "journal-cursor.json").read_text())["cursor"]
        assert cursor.startswith("s=")
        # words logged while no guardian ran are read after the kept cursor, once
        c.run("systemd-run", "--unit=crashy2", "-p", "Restart=no", "/bin/sh", "-c",
              "echo 'fatal: cannot reach the API'")
        cfg2 = cfg.model_copy(update={"units": ["crashy2.service", "crashy.service"]})
        again = JournalSource(Host(), cfg2)
        again.keep_state(tmp_path)
        try:
            again.follow(lambda _: None)
            n = _until(again, "last_words", "crashy2.service", 1)
            time.sleep(0.5)
            assert _count(again, "last_words", "crashy2.service") == n == 1
            assert _count(again, "last_words", "crashy.service") == 0  # not read twice
        finally:
            again.close()
