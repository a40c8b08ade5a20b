"""`guardian init`: lay out /etc/guardian (the configuration and the shipped rules) and the
systemd unit from the defaults the package carries, the way a package manager treats
configuration files: what the operator changed is never overwritten.

Each file's shipped content is remembered by its hash (``/var/lib/guardian/shipped.json``).
A file still as shipped is updated to the new version; a file the operator changed is
kept, and the new shipped version is written beside it as ``<file>.new``; a missing file
is created. The unit's ``ExecStart`` names the guardian that runs ``init``.
"""

from __future__ import annotations

import hashlib
import json
import sys
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from .atomicfile import write_text

SHIPPED_RECORD = "var/lib/guardian/shipped.json"
UNIT = "etc/systemd/system/guardian.service"
SCHEMA_LINE = "#:schema "


@dataclass(frozen=True)
class Change:
    """What ``init`` did to one file: created, updated, unchanged, or kept (the
    operator's version stays; the shipped one is at ``path.new``)."""

    path: Path
    what: str

    def __str__(self) -> str:
        if self.what == "kept":
            return f"kept {self.path} (changed since it was shipped); the new version is " \
                   f"{self.path}.new"
        return f"{self.what} {self.path}"


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def _data() -> Path:
    return Path(str(resources.files("guardian") / "data"))


def shipped_files(exec_path: str) -> dict[str, str]:
    """Path under the root -> content, for everything ``init`` lays out."""
    data = _data()
    schemas = data / "schemas"

    def schema_line(text: str, kind: str) -> str:
        # editors find the schema in the installed package
        first, _, rest = text.partition("\n")
        if first.startswith(SCHEMA_LINE):
            return f"{SCHEMA_LINE}{schemas / f'{kind}.schema.json'}\n{rest}"
        return text

    files = {"etc/guardian/guardian.toml":
             schema_line((data / "systemd" / "guardian.toml").read_text(), "config")}
    for rule in sorted((data / "rules").glob("*.toml")):
        kind = "tests" if rule.name.endswith(".test.toml") else "rules"
        files[f"etc/guardian/rules/{rule.name}"] = schema_line(rule.read_text(), kind)
    unit = (data / "systemd" / "guardian.service").read_text()
    files[UNIT] = "\n".join(
        f"ExecStart={exec_path} run" if line.startswith("ExecStart=") else line
        for line in unit.split("\n"))
    return files


def default_exec() -> str:
    """The guardian command of this installation (its virtual environment's, else the
    one on PATH)."""
    beside = Path(sys.executable).parent / "guardian"
    if beside.exists():
        return str(beside)
    from shutil import which
    return which("guardian") or f"{sys.executable} -m guardian"


def init(root: Path, exec_path: str | None = None) -> list[Change]:
    """Lay out the defaults under ``root`` (``/`` on a host, a directory for an image);
    what was done to each file."""
    record_path = root / SHIPPED_RECORD
    try:
        record: dict[str, str] = json.loads(record_path.read_text())
    except (OSError, ValueError):
        record = {}
    changes = []
    for rel, text in shipped_files(exec_path or default_exec()).items():
        target = root / rel
        target.parent.mkdir(parents=True, exist_ok=True, mode=0o755)
        try:
            current = target.read_text()
        except FileNotFoundError:
            current = None
        if current is None:
            write_text(target, text, mode=0o644)
            what = "created"
        elif current == text:
            what = "unchanged"
        elif record.get(rel) == _digest(current):  # as shipped before: ours to update
            write_text(target, text, mode=0o644)
            what = "updated"
        else:
            write_text(target.with_name(target.name + ".new"), text, mode=0o644)
            what = "kept"
        if what != "kept":
            record[rel] = _digest(text)
        changes.append(Change(target, what))
    record_path.parent.mkdir(parents=True, exist_ok=True, mode=0o755)
    write_text(record_path, json.dumps(record, indent=2, sort_keys=True) + "\n", mode=0o644)
    return changes
