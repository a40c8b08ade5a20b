"""Where approvals come from on a node: `guardian approve` writes them to a JSON file in
the state directory (``approvals.json`` beside the holds file), read at every tick; in a
DaemonSet the node annotation ``guardian.io/approve`` too (:mod:`guardian.kube.holds`,
in the read of the node it already makes). Only who can write the state directory (root,
or guardian's own user) can approve here: a file that anyone else could have put there or
could replace (its owner, its mode, a directory above it) approves nothing, and neither
does one that cannot be read or parsed (said once in the log)."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Protocol

from guardian.core.atomicfile import write_json
from guardian.hostio.safefile import read_regular, replaceable_by_others
from guardian.model.approvals import MAX_APPROVAL_BYTES, Approval, parse_approvals

log = logging.getLogger("guardian.approvals")


class ApprovalReader(Protocol):
    def approvals(self) -> list[Approval]:
        """The approvals now, at once (called on the service's loop at every tick)."""
        ...


class ApprovalFile:
    """`guardian approve`'s approvals: a JSON list, written atomically (mode 0600)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.said: set[str] = set()

    def approvals(self) -> list[Approval]:
        """The approvals in the file; none when it is missing, cannot be read or parsed,
        or could have been written by someone else (each problem logged once)."""
        found, problems = self.read()
        for p in problems:
            self._say(p)
        return found

    def read(self) -> tuple[list[Approval], list[str]]:
        """The approvals the service takes from the file, and why it leaves out what it
        leaves out (``it approves nothing``); `guardian approve` reads back what it
        wrote with this, the service's own check."""
        try:
            data = read_regular(self.path, MAX_APPROVAL_BYTES)
        except FileNotFoundError:
            return [], []
        except (OSError, ValueError) as exc:
            return [], [f"cannot read {self.path}: "
                        f"{getattr(exc, 'strerror', None) or exc}; it approves nothing"]
        untrusted = replaceable_by_others(self.path.absolute())
        if untrusted:
            return [], [f"{self.path} approves nothing: {untrusted}"]
        found, problems = parse_approvals(data.strip() or b"[]", f"file {self.path}")
        return found, [f"{p}; it approves nothing" for p in problems]

    def write(self, approvals: list[Approval]) -> None:
        """Replace the file's approvals. Raises OSError."""
        data = []
        for a in approvals:
            d = a.to_dict()
            del d["source"]
            data.append(d)
        write_json(self.path, data)

    def _say(self, problem: str) -> None:
        if problem not in self.said:
            self.said.add(problem)
            log.error("approvals: %s", problem)
