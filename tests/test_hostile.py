"""Hostile and broken input (issue: hold under attack and fault). Each test reproduces a
failure an adversarial pass found: numbers that are not durations, inputs that crashed the
loader, files that block the loop, a rules directory swapped under the watcher, an effect
that did not read back."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import ClassVar

import pytest

from guardian import Action, ActionContext, Engine, Executor, Host, Outcome, Plan, load_text
from guardian.plugins import default_registry
from guardian.testing import snapshot

from .conftest import write
from .test_service import RULE, daemon


def _check(*args: str) -> subprocess.CompletedProcess[str]:
    """`guardian check`, with its diagnostics (stdout) and summary (stderr) as stderr."""
    proc = subprocess.run([sys.executable, "-m", "guardian", "check", *args],
                          capture_output=True, text=True, timeout=30)
    proc.stderr = proc.stdout + proc.stderr
    return proc


@pytest.mark.parametrize(("line", "message"), [
    ('cooldown = nan', "6:12: cooldown: a duration must be a finite number of seconds"),
    ('limit = { runs = 1, within = nan }', "6:30: limit.within: a duration must be a finite"),
    ('limit = { runs = 1, within = "0s" }', "6:30: limit.within: Input should be greater "
                                            "than 0"),
    ('for = inf', "6:7: for: a duration must be a finite number of seconds"),
    ('for = "100000000w"', "6:7: for: duration '100000000w' is longer than ten years"),
])
def test_durations_are_finite_and_windows_positive(tmp_path: Path, line: str,
                                                    message: str) -> None:
    """Before: NaN cooldowns and limits passed `check` and acted every tick."""
    rules = write(tmp_path, "r.toml", f'''version = 1
[[rule]]
name = "r"
summary = "s"
when = "memcg.dying > 1"
{line}
''')
    proc = _check(str(rules))
    assert proc.returncode == 1 and f"r.toml:{message}" in proc.stderr, proc.stderr


def test_config_windows_are_positive(tmp_path: Path) -> None:
    """Before: `interval = nan` spun the loop at 98% CPU."""
    config = write(tmp_path, "g.toml", '[engine]\ninterval = nan\n'
                                       'budget = { runs = 2, within = "0s" }\n')
    rules = write(tmp_path, "r.toml", RULE.format(name="r"))
    proc = _check("--config", str(config), str(rules))
    assert proc.returncode == 1
    assert "g.toml:2:12: interval: a duration must be a finite" in proc.stderr
    assert "g.toml:3:31: budget.within: Input should be greater than 0" in proc.stderr


def test_inputs_that_crashed_the_loader_are_located_errors(tmp_path: Path) -> None:
    """Before: a 400-digit integer in `when` and arrays nested 3,000 deep printed a
    traceback (and a hot reload of either took the daemon down)."""
    big = write(tmp_path, "big.toml", RULE.format(name="r").replace(
        "processes.total > 0", "processes.total > " + "9" * 400))
    deep = write(tmp_path, "deep.toml", "version = 1\nx = " + "[" * 3000 + "]" * 3000 + "\n")
    proc = _check(str(big), str(deep))
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert "big.toml:5:27: in `when`: number too large" in proc.stderr
    assert "deep.toml:1:1: TOML nested too deeply to read" in proc.stderr


def test_rule_files_never_block_and_have_a_size_cap(tmp_path: Path) -> None:
    """Before: a FIFO named *.toml blocked the loop on reload, and a 50 MB file cost 7 s
    and 242 MB."""
    rules = tmp_path / "rules"
    rules.mkdir()
    write(rules, "ok.toml", RULE.format(name="r"))
    os.mkfifo(rules / "fifo.toml")
    (rules / "huge.toml").write_bytes(b"#" * (50 << 20))
    t0 = time.monotonic()
    proc = _check(str(rules))
    assert time.monotonic() - t0 < 10
    assert proc.returncode == 1
    assert "fifo.toml:1:1: cannot read rule file: not a regular file" in proc.stderr
    assert "huge.toml:1:1: cannot read rule file: 52428800 bytes; at most 1048576" \
        in proc.stderr


def test_a_reload_that_cannot_load_keeps_the_daemon_and_its_heartbeat(tmp_path: Path) -> None:
    with daemon(tmp_path) as (proc, notify):
        notify.wait_for("READY")
        write(tmp_path / "rules", "deep.toml", "version = 1\nx = " + "[" * 3000 + "]" * 3000)
        notify.wait_for("READY", contains="reload rejected")
        os.mkfifo(tmp_path / "rules" / "fifo.toml")
        notify.wait_for("RELOADING")
        notify.wait_for("READY", contains="reload rejected, 2 error(s)")
        for _ in range(2):
            notify.wait_for("WATCHDOG", timeout=3)  # the loop never blocked on the FIFO
        assert proc.poll() is None


def test_a_replaced_rules_directory_is_still_watched(tmp_path: Path) -> None:
    """Before: a rules directory replaced by a symlink (or recreated) left the watcher on
    the old inode, and later edits were never noticed."""
    v1, v2 = tmp_path / "v1", tmp_path / "v2"
    for d in (v1, v2):
        d.mkdir()
        write(d, "one.toml", RULE.format(name="always"))
    link = tmp_path / "rules"
    link.symlink_to(v1)
    with daemon(tmp_path, rules=link) as (proc, notify):
        notify.wait_for("READY", contains="1 rules")
        tmp_link = tmp_path / "rules.new"
        tmp_link.symlink_to(v2)
        tmp_link.replace(link)  # atomic swap, as a ConfigMap update or a deploy does
        notify.wait_for("READY", contains="1 rules")
        write(v2, "two.toml", RULE.format(name="second"))
        notify.wait_for("READY", contains="2 rules", timeout=15)
        assert proc.poll() is None


class Unread(Action):
    """Applies, but reading the effect back disagrees."""

    name: ClassVar[str] = "test.unread"

    def plan(self, ctx: ActionContext) -> Plan:
        return Plan(self.name, ctx.rule)

    def apply(self, plan: Plan, ctx: ActionContext) -> Outcome:
        return Outcome(ok=True, verified=False, detail="read-back disagrees")


def test_an_unverified_outcome_is_its_own_outcome() -> None:
    """Before: a cordon whose read-back disagreed counted as ok in the metrics."""
    reg = default_registry().copy()
    reg.add_action(Unread)
    rules = load_text(RULE.format(name="r").replace('use = "log"', 'use = "test.unread"'),
                      registry=reg)
    snap = snapshot(0.0, {"processes.total": 10.0})
    [done] = Executor(Host(), dry_run=False).run(Engine(rules).evaluate(snap), snap)
    assert done.result == "unverified"
