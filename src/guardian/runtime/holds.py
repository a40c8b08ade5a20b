"""Where holds come from on a node: `guardian pause` (a JSON file in the state
directory, so a pause survives restarts), a drop-in directory of ``[[hold]]`` TOML files
for configuration management, and, in a DaemonSet, the Kubernetes API
(:mod:`guardian.kube.holds`). Each is read at every tick; the engine gets them as data."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any, Protocol

from pydantic import ValidationError

from guardian.core.atomicfile import write_json
from guardian.core.diagnostics import Diagnostic, Reporter, RuleError, read_toml
from guardian.model.holds import Hold, HoldSpec, broken_hold, parse_holds

log = logging.getLogger("guardian.holds")


class HoldReader(Protocol):
    def read(self) -> list[Hold]: ...


class HoldFile:
    """`guardian pause`'s holds: a JSON list of holds, written atomically. A file that
    exists but cannot be read or parsed (in whole or in one entry) holds every rule."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def read(self) -> list[Hold]:
        try:
            text = self.path.read_text()
        except FileNotFoundError:
            return []
        except OSError as exc:
            log.error("holds: cannot read %s: %s", self.path, exc)
            return [broken_hold(f"cli {self.path}", f"cannot read {self.path}: {exc}")]
        holds, problems = parse_holds(text or "[]", str(self.path), "json")
        for p in problems:
            log.error("holds: %s", p)
        return [Hold(h.until, h.reason, h.author, h.rule, h.labels,
                     f"cli {self.path}" if h.broken else "cli") for h in holds]

    def write(self, holds: list[Hold]) -> None:
        """Replace the file's holds. Raises OSError."""
        data: list[dict[str, Any]] = []
        for h in holds:
            d = h.to_dict()
            del d["source"]
            data.append(d)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        write_json(self.path, data)


class DropIn:
    """``*.toml`` files of ``[[hold]]`` tables in a directory (configuration management
    drops them; a missing directory has none). A file or directory that cannot be read,
    and an entry that cannot be parsed, hold every rule until fixed."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.said: set[str] = set()

    def read(self) -> list[Hold]:
        if not self.directory.exists():
            return []
        try:
            files = sorted(self.directory.glob("*.toml"))
        except OSError as exc:
            why = f"cannot list {self.directory}: {exc}"
            self._say(why)
            return [broken_hold(f"dir {self.directory}", why)]
        out: list[Hold] = []
        for f in files:
            try:
                text = f.read_text()
            except OSError as exc:
                self._say(f"cannot read {f}: {exc}")
                out.append(broken_hold(f"file {f}", f"cannot read {f}: {exc}"))
                continue
            holds, problems = parse_holds(text, f"file {f}", "toml")
            for p in problems:
                self._say(p)
            out.extend(holds)
        return out

    def _say(self, problem: str) -> None:
        if problem not in self.said:
            self.said.add(problem)
            log.error("holds: %s", problem)


def check_dropin(directory: Path) -> list[Diagnostic]:
    """Every problem of the drop-in directory's hold files, as path:line:col (for
    `guardian check --config`): each of them holds every rule while the service runs."""
    if not directory.exists():
        return []
    try:
        files = sorted(directory.glob("*.toml"))
    except OSError as exc:
        return [Diagnostic(str(directory), 1, 1, f"cannot list the hold drop-ins: {exc}")]
    out: list[Diagnostic] = []
    for f in files:
        try:
            text, data = read_toml(f, "a hold drop-in")
        except RuleError as exc:
            out.extend(exc.diagnostics)
            continue
        report = Reporter(str(f), text, out)
        entries = data.get("hold")
        if not isinstance(entries, list) or set(data) - {"hold"}:
            report((), "expected only [[hold]] tables")
            continue
        for i, raw in enumerate(entries):
            try:
                HoldSpec.model_validate(raw)
            except ValidationError as exc:
                report.validation(exc, ("hold", i), HoldSpec, "hold: ")
    return out


def holds_json(holds: list[Hold]) -> str:
    return json.dumps([h.to_dict() for h in holds], indent=2)
