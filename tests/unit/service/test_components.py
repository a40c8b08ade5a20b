"""The service's parts built once at start (issue 39): one that cannot be built says which
exit code and why, and what was built before it is released."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from guardian import load_text
from guardian.core.exitcodes import ExitCode
from guardian.plugin.registry import default_registry
from guardian.runtime.collector import Collector
from guardian.runtime.config import Config
from guardian.runtime.metrics import Metrics
from guardian.service.components import NotBuilt, build_components, build_engine
from guardian.service.daemon import ServiceOptions
from tests.support.daemon import RULE

REG = default_registry()
CONFIG = Config(disabled_sources=sorted(REG.sources))  # nothing of the host is read
RULES = load_text(RULE.format(name="r"), registry=REG)


def _health() -> tuple[bool, str]:
    return True, "ok"


@pytest.fixture
def closed(monkeypatch: pytest.MonkeyPatch) -> list[Collector]:
    out: list[Collector] = []
    monkeypatch.setattr(Collector, "close", lambda self: out.append(self))
    return out


def test_every_part_is_built(tmp_path: Path) -> None:
    opts = ServiceOptions(rules=[], audit_path=tmp_path / "audit.jsonl", metrics_port=None,
                          dry_run=True, apply_timeout=7.0)
    parts = build_components(opts, CONFIG, REG, RULES, Metrics(), _health)
    assert parts.executor.audit is not None and parts.executor.dry_run
    assert parts.executor.apply_timeout == 7.0
    assert parts.collector.sources == [] and build_engine(RULES, CONFIG).ruleset is RULES
    parts.executor.audit.close()


def test_an_audit_log_that_cannot_be_opened_releases_the_collector(
        tmp_path: Path, closed: list[Collector]) -> None:
    (tmp_path / "file").write_text("")
    opts = ServiceOptions(rules=[], audit_path=tmp_path / "file" / "audit.jsonl",
                          metrics_port=None)
    with pytest.raises(NotBuilt) as err:
        build_components(opts, CONFIG, REG, RULES, Metrics(), _health)
    assert err.value.code == ExitCode.CANTCREAT and "cannot open the audit log" in \
        str(err.value)
    assert len(closed) == 1


def test_a_metrics_port_in_use_is_tempfail_and_releases_the_collector(
        tmp_path: Path, closed: list[Collector]) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        opts = ServiceOptions(rules=[], metrics_port=taken.getsockname()[1])
        metrics = Metrics()
        with pytest.raises(NotBuilt) as err:
            build_components(opts, CONFIG, REG, RULES, metrics, _health)
        metrics.close()
    assert err.value.code == ExitCode.TEMPFAIL and len(closed) == 1
