"""A name typed on the command line that names nothing gets the likely meant one
(issue 40): a rule (`explain`, `pause`, `resume`), an action (`act`) and an action's
parameter (`act --set`). Ground truth: the names the rule file and the registry define;
exit 2 (usage) as for every unknown name, and a warning only where the hold is kept."""

from __future__ import annotations

from pathlib import Path

import pytest

from guardian.cli import common, main
from tests.support.checkout import write
from tests.support.rule_texts import ZOMBIE_RULES


@pytest.fixture
def config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A config whose rules are one file with the rule `many-zombies`."""
    monkeypatch.setattr(common, "DEFAULT_CONFIG", tmp_path / "absent.toml")
    rules = write(tmp_path, "rules/r.toml", ZOMBIE_RULES)
    return write(tmp_path, "guardian.toml", f'[service]\nrules = ["{rules.parent}"]\n'
                                            f'state_file = "{tmp_path / "state.json"}"\n')


def test_explain_names_the_rule_meant(config: Path, capsys: pytest.CaptureFixture[str]
                                      ) -> None:
    assert main(["explain", "many-zombie", "--config", str(config)]) == 2
    assert capsys.readouterr().err == (
        "guardian explain: no rule 'many-zombie'; did you mean 'many-zombies'?\n")
    assert main(["explain", "xyz", "--config", str(config)]) == 2  # nothing close: all
    assert capsys.readouterr().err == "guardian explain: no rule 'xyz' (rules: many-zombies)\n"


def test_act_names_the_action_and_the_parameter_meant(
        config: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["act", "reap.zombie", "--dry-run", "--config", str(config)]) == 2
    assert capsys.readouterr().err == (
        "guardian act: unknown action 'reap.zombie'; did you mean 'reap.zombies'?\n")
    assert main(["act", "log", "--set", "mesage=hi", "--dry-run",
                 "--config", str(config)]) == 2
    assert capsys.readouterr().err == (
        "guardian act: log: --set: unknown key 'mesage' (did you mean 'message'?)\n")


def test_pause_and_resume_name_the_rule_meant(
        config: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    holds = ["--holds-file", str(tmp_path / "holds.json"), "--config", str(config)]
    assert main(["pause", "many-zombie", "--for", "1h", "--reason", "r", *holds]) == 0
    assert capsys.readouterr().err == (
        "guardian pause: warning: no loaded rule is named 'many-zombie' (did you mean "
        "'many-zombies'?); the hold is kept\n")
    assert main(["pause", "many-zombies", "--for", "1h", "--reason", "r", *holds]) == 0
    assert main(["resume", "many-zombie", *holds]) == 0  # the hold on that name goes
    assert main(["resume", "many-zombie", *holds]) == 1  # now only many-zombies is held
    assert capsys.readouterr().err == (
        "guardian resume: no such hold; did you mean 'many-zombies'? (holds from a "
        "drop-in file or Kubernetes end where they were set)\n")
