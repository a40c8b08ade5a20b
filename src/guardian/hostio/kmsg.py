"""/dev/kmsg as Documentation/ABI/testing/dev-kmsg defines it: the device (or a recorded
log, a regular file of one record per line) opened without blocking, and its records.

One read() returns one record, ``<facility*8+level>,<seq>,<usec>,<flag>[,...];<text>``
then optional `` KEY=value`` dictionary lines; fields after the flag are ignored. The text
escapes non-printable bytes and ``\\`` as ``\\xNN``; they are decoded (then UTF-8). A read
raises ``EPIPE`` when records were overwritten before it, ``EINVAL`` when the record does
not fit the buffer, and BlockingIOError when there is nothing new.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path

from guardian.core.errors import GuardianError

RECORD_MAX = 8192  # the kernel's record limit (CONSOLE_EXT_LOG_MAX)
_ESCAPED = re.compile(rb"\\x([0-9a-fA-F]{2})")


class BadRecord(GuardianError, ValueError):
    """A record that cannot be read; ``reason`` is ``header``, ``flags`` or ``utf8``."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True, slots=True)
class Record:
    """One /dev/kmsg record: its facility, level, sequence number, flag and text."""

    facility: int
    level: int
    seq: int
    flag: str
    text: str


def _unescape(match: re.Match[bytes]) -> bytes:
    return bytes((int(match[1], 16),))


def record_fields(raw: bytes) -> tuple[int, int, bytes, str]:
    """(priority, sequence, flag, text) of one record; :class:`BadRecord` if unreadable."""
    head, sep, body = raw.partition(b";")
    fields = head.split(b",", 4)
    if not sep or len(fields) < 4 or not fields[0].isdigit() or not fields[1].isdigit():
        raise BadRecord("header")
    flag = fields[3]
    if flag != b"-" and flag != b"c" and flag != b"+":
        raise BadRecord("flags")
    end = body.find(b"\n")
    if end >= 0:
        body = body[:end]  # dictionary lines (" KEY=value") follow
    if b"\\" in body:
        body = _ESCAPED.sub(_unescape, body)
    try:
        return int(fields[0]), int(fields[1]), flag, body.decode()
    except UnicodeDecodeError:
        raise BadRecord("utf8") from None


def parse_record(raw: bytes) -> Record:
    """One record as /dev/kmsg hands it over; :class:`BadRecord` if it cannot be read."""
    prio, seq, flag, text = record_fields(raw)
    return Record(prio >> 3, prio & 7, seq, flag.decode(), text)


class KmsgDevice:
    """/dev/kmsg, or a recorded log, open for reading without blocking. Raises OSError
    as ``open`` does."""

    def __init__(self, path: Path) -> None:
        self.fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        # a recorded log (a regular file, one record per line) instead of the device
        self.is_file = stat.S_ISREG(os.fstat(self.fd).st_mode)

    def fileno(self) -> int:
        return self.fd

    def read(self, size: int) -> bytes:
        """One record of the device (a chunk of a recording); raises as the ABI says."""
        return os.read(self.fd, size)

    def to_start(self) -> None:
        """Back to the oldest record the kernel still has (a recording's start)."""
        os.lseek(self.fd, 0, os.SEEK_SET)

    def to_end(self) -> None:
        """Past every record there is: the next read returns the next new one."""
        os.lseek(self.fd, 0, os.SEEK_END)

    def move(self, offset: int) -> None:
        """In a recording, move ``offset`` bytes from where the last read ended."""
        os.lseek(self.fd, offset, os.SEEK_CUR)

    def read_to_end(self) -> int | None:
        """Move past every record there is; the last one's sequence number (a position to
        keep even if nothing new is logged before guardian stops; SEEK_END would not say
        it), None when no record said one."""
        last = None
        for _ in range(1 << 20):  # at most the records a ring buffer can hold
            try:
                raw = self.read(RECORD_MAX)
            except BlockingIOError:
                return last
            except OSError as exc:
                if exc.errno == errno.EPIPE:
                    continue  # overwritten meanwhile: on from the oldest left
                break
            with contextlib.suppress(IndexError, ValueError):
                last = int(raw.split(b",", 2)[1])
        self.to_end()
        return last

    def close(self) -> None:
        os.close(self.fd)
