"""Where holds come from on a node: `guardian pause` (a JSON file in the state
directory, so a pause survives restarts), a drop-in directory of ``[[hold]]`` TOML files
for configuration management, and, in a DaemonSet, the Kubernetes API
(:mod:`guardian.kube.holds`). Each is read at every tick; the engine gets them as data.
A reader's ``read`` is the loop's and must never wait on anything remote: the files are
local, and the Kubernetes API is read off the loop (its ``read`` answers with the holds
of the last read that finished, ``holds()`` with them without starting one)."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any, Protocol

from pydantic import ValidationError

from guardian.core.atomicfile import write_json
from guardian.core.diagnostics import Diagnostic, Reporter, RuleError, read_toml
from guardian.hostio.safefile import list_names, read_in_directory, read_regular
from guardian.model.holds import MAX_HOLD_BYTES, Hold, HoldSpec, broken_hold, parse_holds

log = logging.getLogger("guardian.holds")


class HoldReader(Protocol):
    def read(self) -> list[Hold]:
        """The holds now, at once (called on the service's loop at every tick)."""
        ...


def read_source(path: Path) -> bytes:
    """A hold file's bytes: a regular file only, opened without blocking and without
    following a symlink, at most :data:`MAX_HOLD_BYTES`. Raises FileNotFoundError when it
    is not there, OSError or ValueError when it cannot be read as such."""
    return read_regular(path, MAX_HOLD_BYTES)


def with_last(holds: list[Hold], problems: list[str], last: list[Hold]) -> list[Hold]:
    """A source's holds as parsed; where any of it could not be read or parsed, the holds
    last read from it stay in force beside the hold on every rule (until they expire)."""
    if not problems:
        return holds
    return [*holds, *(h for h in last if not h.broken and h not in holds)]


class HoldFile:
    """`guardian pause`'s holds: a JSON list of holds, written atomically. A file that
    exists but cannot be read or parsed (in whole or in one entry: not a regular file, too
    large, not UTF-8, not JSON) holds every rule, and the holds last read from it stay."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.last: list[Hold] = []

    def read(self) -> list[Hold]:
        source = f"cli {self.path}"
        try:
            data = read_source(self.path)
        except FileNotFoundError:
            self.last = []
            return []
        except (OSError, ValueError) as exc:
            why = f"cannot read {self.path}: {getattr(exc, 'strerror', None) or exc}"
            log.error("holds: %s", why)
            return [broken_hold(source, why), *self.last]
        holds, problems = parse_holds(data.strip() or b"[]", str(self.path), "json")
        for p in problems:
            log.error("holds: %s", p)
        holds = [Hold(h.until, h.reason, h.author, h.rule, h.labels,
                      source if h.broken else "cli") for h in holds]
        if not problems:
            self.last = holds
        return with_last(holds, problems, self.last)

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
        self.last: dict[str, list[Hold]] = {}  # file -> the holds last read from it

    def read(self) -> list[Hold]:
        try:
            names = [n for n in list_names(self.directory) if n.endswith(".toml")]
        except FileNotFoundError:
            self.last = {}
            return []
        except OSError as exc:
            why = f"cannot list {self.directory}: {exc.strerror or exc}"
            self._say(why)
            return [broken_hold(f"dir {self.directory}", why),
                    *(h for held in self.last.values() for h in held)]
        out: list[Hold] = []
        last, self.last = self.last, {}
        for name in names:
            f = self.directory / name
            try:
                data = read_in_directory(self.directory, name, MAX_HOLD_BYTES)
            except FileNotFoundError:
                continue  # removed since listed
            except (OSError, ValueError) as exc:
                why = f"cannot read {f}: {getattr(exc, 'strerror', None) or exc}"
                self._say(why)
                out += [broken_hold(f"file {f}", why), *last.get(name, [])]
                self.last[name] = last.get(name, [])
                continue
            holds, problems = parse_holds(data, f"file {f}", "toml")
            for p in problems:
                self._say(p)
            self.last[name] = holds if not problems else [
                h for h in last.get(name, []) if not h.broken]
            out += with_last(holds, problems, last.get(name, []))
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
    return [d for f in files for d in check_hold_file(f)]


def check_hold_file(f: Path, what: str = "a hold drop-in") -> list[Diagnostic]:
    """Every problem of one file of ``[[hold]]`` tables (``what``: a drop-in, a
    backtest's holds.toml), as path:line:col."""
    out: list[Diagnostic] = []
    try:
        text, data = read_toml(f, what)
    except RuleError as exc:
        return list(exc.diagnostics)
    report = Reporter(str(f), text, out)
    entries = data.get("hold")
    if not isinstance(entries, list) or set(data) - {"hold"}:
        report((), "expected only [[hold]] tables")
        return out
    for i, raw in enumerate(entries):
        try:
            HoldSpec.model_validate(raw)
        except ValidationError as exc:
            report.validation(exc, ("hold", i), HoldSpec, "hold: ")
    return out


def holds_json(holds: list[Hold]) -> str:
    return json.dumps([h.to_dict() for h in holds], indent=2)
