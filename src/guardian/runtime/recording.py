"""Recordings: snapshots of every signal over time, for replay on another machine.

A recording is a gzip stream of JSON lines: a header (format version, host metadata,
sources, the signal catalogue with label names), then one line per snapshot with its time
(seconds since the start), values and source errors. Families are stored compactly as
``[[label values…, value], …]`` in the label order the header gives; a signal with open
labels (``prom.sample``: an exporter's own) as ``[[label values…, {other labels}, value],
…]`` (format version 2; version 1 had none, and is read as it was). The gzip stream is
flushed (Z_SYNC_FLUSH) after every snapshot, so everything written survives Ctrl-C or a
kill; a reader replays up to any damage and says where it stopped.
"""

from __future__ import annotations

import gzip
import json
import os
import platform
import socket
import time
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

from guardian.core.errors import GuardianError
from guardian.core.snapshot import Family, SignalSpec, Snapshot
from guardian.runtime.collector import SOURCE_ERRORS, Collector

FORMAT = "guardian-recording"
VERSION = 2  # 2: members of a signal with open labels carry their other labels


class RecordingError(GuardianError):
    """A recording that cannot be read at all (not one, or from a newer guardian)."""


def header(collector: Collector, interval: float, note: str = "") -> dict[str, Any]:
    """The first line of a recording; ``note`` says how it was made (kept as given)."""
    specs = {spec.name: spec for src in collector.sources for spec in src.specs}
    specs[SOURCE_ERRORS.name] = SOURCE_ERRORS
    return {
        "format": FORMAT, "version": VERSION, "host": socket.gethostname(), "note": note,
        "kernel": platform.release(), "started": time.time(), "interval": interval,
        "sources": [s.name for s in collector.sources], "unavailable": collector.unavailable,
        "signals": {n: {"labels": list(s.labels), "unit": s.unit, "counter": s.counter,
                        "help": s.help, **({"open_labels": True} if s.open_labels else {})}
                    for n, s in sorted(specs.items())},
    }


class Writer:
    """Appends snapshots to a recording."""

    def __init__(self, path: str | Path, head: dict[str, Any]) -> None:
        # a new file only, never through a symlink: root must not write where a link
        # planted in a shared directory points
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                     0o640)
        self.raw: BinaryIO = os.fdopen(fd, "wb")
        self.gz = gzip.GzipFile(fileobj=self.raw, mode="wb", mtime=0)
        self.labels = {n: s["labels"] for n, s in head["signals"].items()}
        self.open = {n for n, s in head["signals"].items() if s.get("open_labels")}
        self.start: float | None = None
        self.count = 0
        self._line(head)

    def _line(self, obj: dict[str, Any]) -> None:
        self.gz.write(json.dumps(obj, separators=(",", ":"), sort_keys=True).encode() + b"\n")
        self.gz.flush(zlib.Z_SYNC_FLUSH)  # decodable up to here, whatever happens next
        self.raw.flush()

    def write(self, snap: Snapshot) -> None:
        if self.start is None:
            self.start = snap.time
        values: dict[str, Any] = {}
        for name, v in snap.values.items():
            if isinstance(v, dict):
                order = self.labels.get(name) or sorted({k for lb in v for k, _ in lb})
                if name in self.open:
                    values[name] = [[*(dict(lb).get(k, "") for k in order),
                                     {k: lv for k, lv in lb if k not in order}, x]
                                    for lb, x in sorted(v.items())]
                    continue
                values[name] = [[dict(lb).get(k, "") for k in order] + [x]
                                for lb, x in sorted(v.items())]
            else:
                values[name] = v
        rec: dict[str, Any] = {"t": round(snap.time - self.start, 3), "v": values}
        if snap.errors:
            rec["e"] = snap.errors
        self._line(rec)
        self.count += 1

    def size(self) -> int:
        return self.raw.tell()

    def close(self) -> None:
        self.gz.close()
        self.raw.flush()
        os.fsync(self.raw.fileno())
        self.raw.close()


@dataclass
class Recording:
    """A recording read back: header, snapshots, and where reading stopped if damaged."""

    header: dict[str, Any]
    snapshots: list[Snapshot] = field(default_factory=list)
    damage: str = ""

    @property
    def catalogue(self) -> dict[str, SignalSpec]:
        return {n: SignalSpec(n, s.get("help", ""), s.get("unit", ""),
                              tuple(s.get("labels", ())), bool(s.get("counter")),
                              bool(s.get("open_labels")))
                for n, s in self.header.get("signals", {}).items()}


MAX_LINE = 64 << 20  # bytes of one decompressed line: a longer one is damage, not data
_CHUNK = 1 << 16  # compressed bytes read, and decompressed bytes taken, at a time


def _lines(path: Path) -> Iterator[tuple[int, bytes | Exception]]:
    """Decompressed lines, then the error that stopped decompression, if any. Linear in
    the data whatever its shape: each piece is searched for line ends once, and no more
    than ``_CHUNK`` bytes are inflated at a time (a small file may inflate to gigabytes)."""
    d = zlib.decompressobj(16 + zlib.MAX_WBITS)
    line = bytearray()
    n = 0
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            while chunk:
                try:
                    piece = d.decompress(chunk, _CHUNK)
                except zlib.error as exc:
                    yield n + 1, exc
                    return
                chunk = d.unconsumed_tail
                start = 0
                while (end := piece.find(b"\n", start)) >= 0:
                    line += piece[start:end]
                    n += 1
                    yield n, bytes(line)
                    line.clear()
                    start = end + 1
                line += piece[start:]
                if len(line) > MAX_LINE:
                    yield n + 1, ValueError(f"a line longer than {MAX_LINE >> 20} MiB")
                    return
    if line:
        yield n + 1, ValueError("the last line is incomplete (recording cut off)")
    elif not d.eof:
        yield n + 1, ValueError("the recording was cut off (no end of stream)")


def read(path: str | Path) -> Recording:
    """Read a recording; stops at damage (``Recording.damage`` says where and why).
    Raises RecordingError when not even the header can be read or it is too new."""
    path = Path(path)
    rec: Recording | None = None
    try:
        for n, item in _lines(path):
            if isinstance(item, Exception):
                if rec is None:
                    raise RecordingError(f"{path}: not a readable recording: {item}")
                rec.damage = f"damaged at line {n} (after {len(rec.snapshots)} snapshots): " \
                             f"{item}"
                break
            try:
                obj = json.loads(item)
            except (ValueError, RecursionError) as exc:
                if rec is None:
                    raise RecordingError(f"{path}: not a guardian recording") from None
                rec.damage = f"damaged at line {n} (after {len(rec.snapshots)} snapshots): " \
                             f"{exc}"
                break
            if rec is None:
                rec = Recording(_check_header(path, obj))
                continue
            try:
                rec.snapshots.append(_snapshot(obj, rec.header))
            except (KeyError, TypeError, ValueError, AttributeError, OverflowError,
                    RecursionError) as exc:
                rec.damage = f"damaged at line {n} (after {len(rec.snapshots)} snapshots): " \
                             f"bad record: {type(exc).__name__}: {exc}"
                break
    except OSError as exc:
        raise RecordingError(f"{path}: cannot read: {exc}") from None
    if rec is None:
        raise RecordingError(f"{path}: empty, not a guardian recording")
    return rec


def _check_header(path: Path, obj: Any) -> dict[str, Any]:
    if not isinstance(obj, dict) or obj.get("format") != FORMAT:
        raise RecordingError(f"{path}: not a guardian recording")
    signals = obj.get("signals", {})
    if not isinstance(signals, dict) or not all(
            isinstance(s, dict) and isinstance(s.get("labels", []), list)
            and all(isinstance(x, str) for x in s.get("labels", []))
            for s in signals.values()):
        raise RecordingError(f"{path}: damaged at line 1: the header's signals are not "
                             "a table of signal specs")
    version = obj.get("version")
    if not isinstance(version, int) or version > VERSION:
        raise RecordingError(f"{path}: recording format version {version} is newer than "
                             f"this guardian reads ({VERSION}); upgrade guardian to replay it")
    return obj


def _snapshot(obj: dict[str, Any], head: dict[str, Any]) -> Snapshot:
    values: dict[str, float | Family] = {}
    for name, v in obj["v"].items():
        if isinstance(v, list):
            spec = head["signals"].get(name, {})
            order = spec.get("labels", [])
            fam: Family = {}
            for row in v:
                *labels, x = row
                pairs = list(zip(order, labels[:len(order)] if spec.get("open_labels")
                                 else labels, strict=True))
                if spec.get("open_labels"):
                    other, = labels[len(order):]
                    pairs += [(str(k), str(lv)) for k, lv in other.items()
                              if k not in order]
                fam[tuple(sorted(pairs))] = float(x)
            values[name] = fam
        else:
            values[name] = float(v)
    return Snapshot(float(obj["t"]), values, dict(obj.get("e", {})))
