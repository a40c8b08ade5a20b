"""`guardian init`: lay out /etc/guardian (the configuration and the shipped rules) and the
systemd unit from the defaults the package carries, the way a package manager treats
configuration files: what the operator changed is never overwritten.

Each file's shipped content is remembered by its hash (``/var/lib/guardian/shipped.json``).
A file still as shipped is updated to the new version; a file the operator changed is
kept, and the new shipped version is written beside it as ``<file>.new``; a missing file
is created. The unit's ``ExecStart`` names the guardian that runs ``init``.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import stat
import sys
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from guardian.core.atomicfile import write_text

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


def _trusted(path: Path, what: str) -> os.stat_result | None:
    """``path``'s own status if it may be written through: not a symlink, owned by root
    or by us, not writable by group or others (else another user could swap it
    underneath); None if it does not exist. Raises PermissionError naming it."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    if stat.S_ISLNK(st.st_mode):
        why = f"a symbolic link where a {what} was expected; not followed"
    elif st.st_uid not in (0, os.geteuid()):
        why = f"a {what} owned by another user (uid {st.st_uid}); refusing to write there"
    elif st.st_mode & 0o022 and not (stat.S_ISDIR(st.st_mode) and st.st_mode & stat.S_ISVTX
                                      and st.st_uid == 0):
        why = f"a {what} others may write to; refusing to write there"
    else:
        return st
    raise PermissionError(errno.EPERM, why, str(path))


def _directory(root: Path, rel: Path) -> Path:
    """``root / rel``, made (0755) component by component, each one trusted."""
    at = root
    for part in rel.parts:
        at = at / part
        if _trusted(at, "directory") is None:
            at.mkdir(mode=0o755)
        elif not at.is_dir():
            raise NotADirectoryError(errno.ENOTDIR, "not a directory", str(at))
    return at


def init(root: Path, exec_path: str | None = None) -> list[Change]:
    """Lay out the defaults under ``root`` (``/`` on a host, a directory for an image);
    what was done to each file."""
    record_path = root / SHIPPED_RECORD
    try:
        if os.path.islink(record_path):
            raise PermissionError(errno.EPERM, "a symbolic link; not followed",
                                  str(record_path))
        record: dict[str, str] = json.loads(record_path.read_text())
    except (FileNotFoundError, ValueError):
        record = {}
    changes = []
    for rel, text in shipped_files(exec_path or default_exec()).items():
        target = _directory(root, Path(rel).parent) / Path(rel).name
        current = None
        if _trusted(target, "file") is not None:
            current = target.read_text()
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
    _directory(root, Path(SHIPPED_RECORD).parent)
    _trusted(record_path, "file")
    write_text(record_path, json.dumps(record, indent=2, sort_keys=True) + "\n", mode=0o644)
    return changes
