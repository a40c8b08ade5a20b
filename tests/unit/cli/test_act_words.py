"""What `guardian act` and a live `run --once` say an action did, in words (issue 40):
before, a line indented 9 spaces under no heading, then the outcome's data as JSON
(`{"parents": [], "reaped": 0, "seconds": 0.000446}`), and a dry run's plan that never
said it would."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from guardian.cli import common, main
from guardian.cli.common import outcome_lines, plan_lines
from tests.support.checkout import write


@pytest.fixture
def config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setattr(common, "DEFAULT_CONFIG", tmp_path / "absent.toml")
    return write(tmp_path, "guardian.toml",
                 f'[service]\nstate_file = "{tmp_path / "state.json"}"\n')


def test_an_outcome_is_words_with_its_time_not_json() -> None:
    reaped = {"ok": True, "verified": True, "detail": "nothing to do", "error": "",
              "data": {"parents": [], "reaped": 0, "seconds": 0.000446}}
    assert outcome_lines(reaped, "  ") == ["  => ok (verified): nothing to do, in 0.4ms",
                                           "     parents=none reaped=0"]
    logged = {**reaped, "detail": "logged", "data": {"seconds": 0.000504}}
    assert outcome_lines(logged) == ["=> ok (verified): logged, in 0.5ms"]  # no `{...}`
    stopped = {"ok": False, "verified": False, "detail": "", "error": "exit status 1",
               "data": {"units": [{"unit": "ecs.service", "verb": "stop", "ok": False,
                                   "message": "Unit not loaded."}], "seconds": 2.4}}
    assert outcome_lines(stopped) == [
        "=> FAILED: exit status 1, in 2s",
        '   units: message="Unit not loaded." ok=no unit=ecs.service verb=stop']


def test_a_plan_says_its_steps_under_the_indent_asked() -> None:
    plan = {"use": "memcg.release", "error": "", "outcome": None,
            "plan": {"note": "dying memcgs now: 27", "refused": [],
                     "steps": [{"target": "/proc/sys/vm/drop_caches",
                                "change": "write 1: free clean page cache"}]}}
    assert plan_lines(plan, "  ") == [
        "  memcg.release: dying memcgs now: 27",
        "    - /proc/sys/vm/drop_caches: write 1: free clean page cache"]


def test_act_says_what_it_ran_or_would_run_under_a_heading(
        config: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = ["act", "log", "--set", "message=hi", "--warmup", "0s", "--config", str(config)]
    assert main([*args, "--dry-run"]) == 0
    assert capsys.readouterr().out == ("would run (dry run, nothing changed):\n"
                                       "  log:\n    - guardian log: warning: hi\n")
    assert main(args) == 0
    out = capsys.readouterr().out
    assert re.fullmatch(r"ran:\n  log:\n    - guardian log: warning: hi\n"
                        r"    => ok \(verified\): logged, in [\d.]+m?s\n", out), out
