"""The command line's contract: every `--json` output has one shape (command, ok, errors,
warnings, data), errors included; a bad option value is a usage error (exit 2), never a
traceback; `--rules` repeats, so a positional may follow it."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.support.checkout import RULES, write
from tests.support.cli import guardian

SHAPE = {"command", "ok", "errors", "warnings", "data"}


def _bad_rules(tmp: Path) -> Path:
    return write(tmp, "bad.toml", 'version = 1\n[[rule]]\nname = "x"\n')


@pytest.mark.parametrize("argv", [
    ["check", "{rules}"], ["check", "{bad}"],
    ["test", "{rules}"], ["test", "{tmp}"],
    ["run", "--once", "--dry-run", "--warmup", "0s", "--rules", "{rules}"],
    ["run", "--once", "--dry-run", "--warmup", "0s", "--rules", "{bad}"],
    ["explain", "--rules", "{rules}", "--warmup", "0s", "dying-memcgs"],
    ["explain", "--rules", "{bad}", "--warmup", "0s", "dying-memcgs"],
    ["why", "--rules", "{rules}", "--warmup", "0s"],
    ["signals", "--warmup", "0s"],
    ["act", "log", "--dry-run", "--warmup", "0s", "--set", "message=m"],
    ["run", "--once", "--interval", "soon"],
    # before: a traceback without credentials; JSON then a sentence; plain text
    ["breaker", "--config", "{nocreds}"], ["breaker", "--config", "{nobreaker}"],
    ["breaker", "release", "memcg-leak", "--why", "w", "--config", "{nocreds}"],
    ["holds", "--config", "{nocreds}"],
])
def test_every_json_output_has_one_shape(tmp_path: Path, argv: list[str]) -> None:
    bad = _bad_rules(tmp_path)
    nocreds = write(tmp_path, "nocreds.toml", f'[holds]\nfile = "{tmp_path}/h.json"\n'
                    f'[fleet]\nkubeconfig = "{tmp_path}/nope.yaml"\n[fleet.breaker]\n')
    nobreaker = write(tmp_path, "nobreaker.toml", "[fleet]\nmax_nodes = 1\n")
    args = [a.format(rules=RULES, bad=bad, tmp=tmp_path, nocreds=nocreds,
                     nobreaker=nobreaker) for a in argv]
    proc = guardian(*args, "--json")
    assert "Traceback" not in proc.stderr, proc.stderr
    out = json.loads(proc.stdout)
    assert set(out) == SHAPE, out.keys()
    assert out["command"] == argv[0]
    assert out["ok"] is (proc.returncode == 0), (out["ok"], proc.returncode, out["errors"])
    assert out["ok"] or out["errors"]
    for e in out["errors"]:
        assert "message" in e


@pytest.mark.parametrize("argv", [
    ["run", "--interval", "1"], ["run", "--interval", "0s"], ["run", "--warmup", "-5"],
    ["run", "--metrics-port", "99999"], ["run", "--metrics-port", "http"],
    ["record", "-o", "x.rec", "--duration", "never"], ["signals", "--warmup", "soon"],
    ["explain", "--at", "yesterday", "r"],
])
def test_a_bad_option_value_is_a_usage_error(argv: list[str]) -> None:
    """Before: `--interval 1` (a duration needs a unit) was a traceback from deep inside."""
    proc = guardian(*argv)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    option = next(a for a in argv if a.startswith("--"))
    if argv[0] == "record":
        option = "--duration"
    assert f"guardian {argv[0]}: error: argument {option}" in proc.stderr


def test_rules_repeats_and_a_positional_may_follow(tmp_path: Path) -> None:
    """Before: `--rules` took every following word, so `explain --rules rules/ NAME` said
    the rule name was missing."""
    other = write(tmp_path, "more.toml", 'version = 1\n[[rule]]\nname = "extra"\n'
                                         'summary = "s"\nwhen = "memcg.dying > 1"\n')
    proc = guardian("explain", "--rules", str(RULES), "--rules", str(other), "--warmup",
                    "0s", "extra")
    assert proc.returncode == 0, proc.stderr
    # after the line that says whether a service's view was read
    assert proc.stdout.splitlines()[1].startswith("extra: "), proc.stdout
    proc = guardian("explain", "--rules", str(RULES), "--warmup", "0s", "dying-memcgs")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[1].startswith("dying-memcgs: "), proc.stdout


def test_check_with_no_arguments_checks_the_installed_configuration(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """`guardian check` alone checks what the service would load, as `nginx -t` does: the
    config at its default place and the rules that config names (here the default place
    is moved into tmp_path; before, only /etc/guardian/rules was read, and no config)."""
    import guardian.cli.check as check_cli
    from guardian.cli import main

    rules = tmp_path / "rules"
    rules.mkdir()
    write(rules, "a.toml", 'version = 1\n[[rule]]\nname = "a"\nsummary = "s"\n'
                           'when = "memcg.dying > 1"\n')
    config = write(tmp_path, "guardian.toml", f'[service]\nrules = ["{rules}"]\n')
    monkeypatch.setattr(check_cli, "DEFAULT_CONFIG", config)
    assert main(["check"]) == 0
    # before: "in 2 file(s)", the config counted as a rule file
    assert capsys.readouterr().out.startswith(
        f"ok: 1 rule(s) in 1 file(s) and the config {config}")
    config.write_text(f'[service]\nrules = ["{rules}"]\n[engine]\ninterval = "soon"\n')
    assert main(["check"]) == 1
    assert f"{config}:4:12: engine.interval: bad duration 'soon'" in capsys.readouterr().out


@pytest.mark.parametrize("shell", ["bash", "zsh", "tcsh"])
def test_completion_is_generated_from_the_parser(shell: str) -> None:
    proc = guardian("completion", shell)
    assert proc.returncode == 0, proc.stderr
    for command in ("check", "test", "run", "explain", "why", "schema", "completion"):
        assert command in proc.stdout
    if shell == "bash":  # it parses
        assert subprocess.run(["bash", "-n"], input=proc.stdout, text=True).returncode == 0


def test_the_man_page_renders_and_names_every_command() -> None:
    import shutil
    proc = guardian("man")
    assert proc.returncode == 0 and proc.stdout.startswith(".TH GUARDIAN"), proc.stderr
    for command in ("check", "test", "run", "explain", "why", "schema", "man"):
        assert f"\\fI\\,{command}\\/\\fR" in proc.stdout, command
    if shutil.which("groff"):
        text = subprocess.run(["groff", "-man", "-Tutf8"], input=proc.stdout,
                              capture_output=True, text=True)
        assert text.returncode == 0 and "Watch a Linux node" in text.stdout
