"""The service's eye on its rule files: their directories watched (the watchdog package,
inotify), a change handed to a callback; and the check that no one but root can change
what the service loads."""

from __future__ import annotations

import logging
import os
import stat
from collections.abc import Callable
from pathlib import Path

from watchdog.events import FileSystemEvent, FileSystemEventHandler
from watchdog.observers import Observer

from guardian.policy.loader import rule_files

log = logging.getLogger("guardian.service")


def unsafe_rule_paths(paths: list[str]) -> list[str]:
    """Rule (or config) files and their directories that someone other than root could
    change."""
    problems = []
    checked: set[Path] = set()
    for f in rule_files(paths):
        for p in (f, f.resolve().parent):
            if p in checked:
                continue
            checked.add(p)
            try:
                st = os.stat(p)
            except OSError:
                continue  # the loader reports unreadable files
            if st.st_uid != 0:
                problems.append(f"{p}: owned by uid {st.st_uid}, not root")
            elif st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
                problems.append(f"{p}: writable by group or others "
                                f"(mode {stat.S_IMODE(st.st_mode):o})")
    return problems


def refuse_unsafe(paths: list[str]) -> None:
    """Raise :class:`PermissionError` when someone other than root could change one of
    these rule (or config) files or their directories."""
    problems = unsafe_rule_paths(paths)
    if problems:
        raise PermissionError(
            "refusing rule or config files others can change: " + "; ".join(problems))


class _RuleChange(FileSystemEventHandler):
    # reading the rules opens them too: only changes count
    CHANGES = frozenset({"created", "modified", "deleted", "moved", "closed"})

    def __init__(self, changed: Callable[[str], None]) -> None:
        self.changed = changed

    def on_any_event(self, event: FileSystemEvent) -> None:
        path = str(event.src_path) + " " + str(getattr(event, "dest_path", ""))
        # a Kubernetes ConfigMap volume swaps a "..data" symlink rather than the files
        if event.event_type in self.CHANGES and (".toml" in path or "..data" in path):
            self.changed("rule files changed")


class RuleWatcher:
    """Watches the directories of ``paths`` (a file's directory, or the directory named)
    and calls ``changed(reason)`` from its own thread when a rule file changes. inotify
    watches an inode: :meth:`rewatch_if_moved`, called by the loop, follows the paths when
    a directory is replaced (a symlink swapped, recreated)."""

    def __init__(self, paths: list[str], changed: Callable[[str], None]) -> None:
        self.paths = paths
        self.changed = changed
        self.observer: Observer | None = None  # type: ignore[valid-type]
        self.watched: dict[Path, tuple[int, int]] = {}  # directory -> (device, inode)

    def start(self) -> None:
        self.stop()
        dirs = {Path(p) if Path(p).is_dir() else Path(p).parent for p in self.paths}
        observer = Observer()
        handler = _RuleChange(self.changed)
        self.watched = {}
        for d in dirs:
            try:
                st = os.stat(d)
                # inotify does not follow a symlinked directory: watch what it names now
                observer.schedule(handler, str(d.resolve()), recursive=False)
            except (OSError, RuntimeError) as exc:  # gone meanwhile: the next tick retries
                log.warning("cannot watch %s: %s", d, exc)
                continue
            self.watched[d] = (st.st_dev, st.st_ino)
        observer.daemon = True
        observer.start()
        self.observer = observer

    def rewatch_if_moved(self) -> bool:
        """Watch a directory again if its path names another one now; True (and
        ``changed`` called) when one did."""
        for d, ident in self.watched.items():
            try:
                st = os.stat(d)
                now: tuple[int, int] | None = (st.st_dev, st.st_ino)
            except OSError:
                now = None
            if now != ident:
                log.info("rules directory %s was replaced; watching the new one", d)
                self.start()
                self.changed("rules directory replaced")
                return True
        return False

    def stop(self) -> None:
        if self.observer is not None:
            self.observer.stop()
            self.observer = None
