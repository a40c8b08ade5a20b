"""The rule watcher, apart from the daemon (issue 39): a changed rule file is a reload, a
replaced rules directory is watched again, and files others can change are named."""

from __future__ import annotations

import os
import threading
from pathlib import Path

from guardian.service.rulewatch import RuleWatcher, unsafe_rule_paths

WAIT = 10.0  # what a test waits for an event at most; never reached when it passes


class Changes:
    def __init__(self) -> None:
        self.reasons: list[str] = []
        self.seen = threading.Event()

    def __call__(self, reason: str) -> None:
        self.reasons.append(reason)
        self.seen.set()


def test_a_changed_rule_file_is_reported(tmp_path: Path) -> None:
    (tmp_path / "r.toml").write_text("version = 1\n")
    changes = Changes()
    watch = RuleWatcher([str(tmp_path)], changes)
    watch.start()
    try:
        (tmp_path / "notes.txt").write_text("not a rule file")
        (tmp_path / "r.toml").write_text("version = 1\n# edited\n")
        assert changes.seen.wait(WAIT)
        assert set(changes.reasons) == {"rule files changed"}
    finally:
        watch.stop()


def test_a_replaced_directory_is_watched_again(tmp_path: Path) -> None:
    rules = tmp_path / "rules"
    rules.mkdir()
    changes = Changes()
    watch = RuleWatcher([str(rules)], changes)
    watch.start()
    try:
        assert not watch.rewatch_if_moved() and changes.reasons == []
        rules.rename(tmp_path / "old")
        rules.mkdir()
        assert watch.rewatch_if_moved()
        assert changes.reasons[-1] == "rules directory replaced"
        assert not watch.rewatch_if_moved()  # watching the new one now
        changes.seen.clear()
        (rules / "r.toml").write_text("version = 1\n")  # the new directory is watched
        assert changes.seen.wait(WAIT)
    finally:
        watch.stop()


def test_files_others_can_change_are_named(tmp_path: Path) -> None:
    rule = tmp_path / "r.toml"
    rule.write_text("version = 1\n")
    os.chmod(rule, 0o664)
    problems = unsafe_rule_paths([str(tmp_path)])
    assert any(p.startswith(f"{rule}: ") for p in problems), problems
