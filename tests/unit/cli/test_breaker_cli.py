"""`guardian breaker` and `guardian holds` where the Kubernetes API cannot be asked (no
credentials reach it): before, `guardian breaker` (and `release`, and `--json`) ended in
lightkube's ConfigError traceback, exit 1 (release's "nothing was tripped"), and
`guardian holds` said "No holds: every rule acts." (exit 0) having read neither the
latches nor the Node. Now: one line (or one JSON document) and exit 69, what could not
be read said as unknown."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from guardian.cli import main
from guardian.core.exitcodes import ExitCode
from tests.support.checkout import write


@pytest.fixture
def nocreds(tmp_path: Path) -> Path:
    """[fleet] and [fleet.breaker] with a kubeconfig that does not exist (it is used
    before the service account and $KUBECONFIG, so the host's own cannot answer)."""
    return write(tmp_path, "guardian.toml",
                 f'[holds]\nfile = "{tmp_path / "holds.json"}"\n'
                 f'[fleet]\nkubeconfig = "{tmp_path / "nope.yaml"}"\nnode = "n1"\n'
                 f'[fleet.breaker]\n')


@pytest.mark.parametrize("argv", [["breaker"], ["breaker", "release", "memcg-leak",
                                                "--why", "switch replaced"]])
def test_no_credentials_is_one_line_and_exit_69(
        argv: list[str], nocreds: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert ExitCode.UNAVAILABLE.value == 69
    assert main([*argv, "--config", str(nocreds)]) == ExitCode.UNAVAILABLE
    said = capsys.readouterr()
    verb = " ".join(argv[:2]) if len(argv) > 1 else argv[0]
    assert said.out == "" and said.err.count("\n") == 1, said
    assert said.err.startswith(f"guardian {verb}: no credentials reach the Kubernetes "
                               f"API: Configuration file {nocreds.parent}/nope.yaml not "
                               f"found"), said.err
    assert main([*argv, "--config", str(nocreds), "--json"]) == 69
    doc = json.loads(capsys.readouterr().out)  # one document: nothing after it
    assert (doc["command"], doc["ok"], doc["data"]) == ("breaker", False, None)
    assert "no credentials reach the Kubernetes API" in doc["errors"][0]["message"]


def test_without_fleet_breaker_it_is_a_usage_error_in_either_shape(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Before: the sentence went to stdout, even with --json."""
    config = write(tmp_path, "guardian.toml", "[fleet]\nmax_nodes = 2\n")
    assert main(["breaker", "--config", str(config)]) == ExitCode.USAGE
    said = capsys.readouterr()
    assert said.out == "" and "[fleet.breaker] is not configured" in said.err
    assert main(["breaker", "--config", str(config), "--json"]) == ExitCode.USAGE
    doc = json.loads(capsys.readouterr().out)
    assert not doc["ok"] and "[fleet.breaker]" in doc["errors"][0]["message"]


def test_holds_says_what_it_could_not_read(nocreds: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["holds", "--config", str(nocreds)]) == 69
    out = capsys.readouterr().out
    assert "No holds" not in out
    assert out.startswith("Not read, so what it holds is unknown:\n  breaker latches in "
                          "kube-system: no credentials reach the Kubernetes API"), out
    assert main(["holds", "--config", str(nocreds), "--json"]) == 69
    doc = json.loads(capsys.readouterr().out)
    assert not doc["ok"] and doc["data"] == []
    assert [e["message"].split(": no credentials")[0] for e in doc["errors"]] == [
        "not read, what it holds is unknown: breaker latches in kube-system"]
