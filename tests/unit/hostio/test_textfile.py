"""guardian.hostio.textfile: node_exporter's textfiles read as guardian trusts them, and
the capped stream read that textfiles and exposition scrapes share."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from guardian.hostio.textfile import read_capped, read_capped_stream, textfiles


def _chunks(*parts: bytes) -> list[bytes]:
    return [*parts, b""]


def test_a_stream_is_joined_whole_within_its_cap() -> None:
    feed = _chunks(b"gpu_temp 71\n", b"gpu_xid 0\n")
    assert read_capped_stream(lambda n: feed.pop(0), 64) == "gpu_temp 71\ngpu_xid 0\n"


def test_a_stream_past_its_cap_is_refused() -> None:
    feed = _chunks(b"x" * 40, b"x" * 40)
    with pytest.raises(ValueError, match="larger than 64 bytes"):
        read_capped_stream(lambda n: feed.pop(0), 64)


def test_a_stream_not_whole_by_its_deadline_is_cut() -> None:
    feed = _chunks(b"a", b"b")
    with pytest.raises(TimeoutError):
        read_capped_stream(lambda n: feed.pop(0), 64, deadline=time.monotonic() - 1)


def test_only_trusted_regular_files_are_read(tmp_path: Path) -> None:
    ok = tmp_path / "ok.prom"
    ok.write_text("x 1\n")
    ok.chmod(0o644)
    assert read_capped(ok, 1024)[0] == "x 1\n"
    with pytest.raises(ValueError, match="larger than 2 bytes"):
        read_capped(ok, 2)
    open_to_all = tmp_path / "open.prom"
    open_to_all.write_text("x 1\n")
    open_to_all.chmod(0o666)
    with pytest.raises(ValueError, match="writable by group or others"):
        read_capped(open_to_all, 1024)
    fifo = tmp_path / "fifo.prom"
    os.mkfifo(fifo)  # opened without blocking, then refused: never waited on
    with pytest.raises(ValueError, match="not a regular file"):
        read_capped(fifo, 1024)
    link = tmp_path / "link.prom"
    link.symlink_to(ok)
    with pytest.raises(OSError):  # O_NOFOLLOW
        read_capped(link, 1024)


def test_a_directory_lists_its_prom_files_unless_others_may_write_it(tmp_path: Path) -> None:
    d = tmp_path / "textfile"
    d.mkdir(mode=0o755)
    d.chmod(0o755)
    for name in ("b.prom", "a.prom", "notes.txt"):
        (d / name).write_text("")
    assert textfiles(d) == ["a.prom", "b.prom"]
    d.chmod(0o777)
    with pytest.raises(ValueError, match="writable by group or others"):
        textfiles(d)
