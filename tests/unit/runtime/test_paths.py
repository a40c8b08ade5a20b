"""guardian.runtime.paths: where the service keeps its state file and audit log."""

from __future__ import annotations

from pathlib import Path

import pytest

from guardian.runtime.config import Config, ServiceConfig
from guardian.runtime.paths import service_paths


def test_the_config_first_then_systemds_directories_then_the_defaults(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("STATE_DIRECTORY", raising=False)
    monkeypatch.delenv("LOGS_DIRECTORY", raising=False)
    assert service_paths(Config()) == (Path("/var/lib/guardian/state.json"),
                                       Path("/var/log/guardian/audit.jsonl"))
    monkeypatch.setenv("STATE_DIRECTORY", f"{tmp_path}/state:{tmp_path}/other")
    monkeypatch.setenv("LOGS_DIRECTORY", f"{tmp_path}/logs")
    paths = service_paths(Config())
    assert paths.state == tmp_path / "state" / "state.json"
    assert paths.audit == tmp_path / "logs" / "audit.jsonl"
    config = Config(service=ServiceConfig(state_file="/x/s.json", audit_log="/x/a.jsonl"))
    assert service_paths(config) == (Path("/x/s.json"), Path("/x/a.jsonl"))
