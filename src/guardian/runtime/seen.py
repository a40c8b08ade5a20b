"""What the service saw: its last tick's chain of active rules, its blind rules and the
actions it took lately, kept in its state directory (``seen.json``) tick by tick.

``guardian why`` on a node where the service runs answers from this, not from a fresh
process that remembers nothing: a fresh process counts a unit's restarts from zero,
starts every rule's ``for`` again, and never saw the actions the service took."""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from guardian.runtime.coverage import Blind
from guardian.runtime.executor import Executed
from guardian.runtime.why import Link

__all__ = ["SEEN_NAME", "Keeper", "Recent", "Seen", "read", "write"]

SEEN_NAME = "seen.json"
FORMAT = 1


class Recent:
    """The service's last actions, newest last, each one line with its wall time."""

    def __init__(self, keep: int = 20) -> None:
        self.entries: deque[dict[str, Any]] = deque(maxlen=keep)

    def add(self, ex: Executed, wall: float) -> None:
        entry = {"at": wall, "rule": ex.decision.rule, "use": ex.use,
                 "result": ex.result, "what": ex.describe()}
        data = ex.outcome.data if ex.outcome is not None else {}
        if isinstance(data.get("bundle"), str):  # evidence.profile's: where, and its gist
            entry["bundle"], entry["hot"] = data["bundle"], str(data.get("hot", ""))
        self.entries.append(entry)

    def of(self, rule: str) -> list[str]:
        """The rule's actions, as :func:`action_line` words them."""
        return [action_line(e) for e in self.entries if e["rule"] == rule]


def action_line(entry: dict[str, Any]) -> str:
    """``10:42:07 systemd.stop ok: systemctl stop ecs-agent.service``; an evidence
    capture's adds its gist and bundle (``→ kubelet: 41% of sampled kernel time in
    mem_cgroup_nr_lru_pages; evidence in /var/lib/guardian/evidence/…``)."""
    line = f"{clock(entry['at'])} {entry['what']}"
    if entry.get("bundle") and str(entry["bundle"]) not in entry["what"]:  # said already
        line += f" → {entry.get('hot') or 'no kernel time sampled'}; evidence in " \
                f"{entry['bundle']}"
    return line


def clock(wall: float) -> str:
    """A wall-clock time as journalctl shows it (local time)."""
    return time.strftime("%H:%M:%S", time.localtime(wall))


@dataclass
class Seen:
    """One tick as the service saw it."""

    pid: int
    wall: float  # when the tick's snapshot was taken (Unix time)
    now: float  # the snapshot's own time: the chain's `since` are on this clock
    rules: int
    chain: list[Link]
    blind: list[Blind]
    actions: list[dict[str, Any]] = field(default_factory=list)

    def now_at(self, wall: float) -> float:
        """The time on the report's own clock (that of the chain's ``since``) at the Unix
        time ``wall``: the report is that much older."""
        return self.now + max(wall - self.wall, 0.0)

    def to_dict(self) -> dict[str, Any]:
        return {"format": FORMAT, "pid": self.pid, "wall": self.wall, "now": self.now,
                "rules": self.rules, "chain": [lk.to_dict() for lk in self.chain],
                "blind": [b.to_dict() for b in self.blind], "actions": self.actions}


class Keeper:
    """Writes what the service saw when it changed, or ``refresh`` seconds after the
    last write: a quiet node costs no file write a tick (the times in a report are its
    own: `why` says when the service saw it)."""

    def __init__(self, path: Path, refresh: float = 60.0) -> None:
        self.path = path
        self.refresh = refresh
        self._last: dict[str, Any] | None = None
        self._written = float("-inf")

    def keep(self, seen: Seen, now: float) -> bool:
        """Write ``seen`` if it differs from the last written (its times aside) or the
        last write is ``refresh`` old; whether it wrote. Raises OSError."""
        body = seen.to_dict()
        same = {k: v for k, v in body.items() if k not in ("wall", "now")}
        if same == self._last and now - self._written < self.refresh:
            return False
        write(self.path, seen)
        self._last, self._written = same, now
        return True


def write(path: Path, seen: Seen) -> None:
    """Replace the file at ``path`` whole (a reader sees the old one or the new one).
    Not synced: it is a view, and the next tick writes it again. Raises OSError."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "w") as f:
            json.dump(seen.to_dict(), f, sort_keys=True)
        os.replace(tmp, path)
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def read(path: Path) -> Seen:
    """What :func:`write` wrote. Raises OSError, or ValueError for a file that is not
    one (damaged, another format)."""
    raw = json.loads(path.read_text())
    if not isinstance(raw, dict) or raw.get("format") != FORMAT:
        raise ValueError(f"{path}: not a report of this guardian (format "
                         f"{raw.get('format') if isinstance(raw, dict) else '?'})")
    try:
        return Seen(int(raw["pid"]), float(raw["wall"]), float(raw["now"]), int(raw["rules"]),
                    [Link.from_dict(d) for d in raw["chain"]],
                    [Blind.from_dict(d) for d in raw["blind"]],
                    list(raw.get("actions", [])))
    except (KeyError, TypeError) as exc:
        raise ValueError(f"{path}: damaged report ({exc!r})") from None
