"""Text a person reads on a terminal: columns sized to their content, lines wrapped
between their pieces, and colour only where it is wanted (a terminal, never with ``NO_COLOR``
set, never into a pipe or a file). ``--json`` output never passes through here.

Hand-written rather than a terminal library's: what the tables need is a few lines. rich
(15.0, measured as bench/cli.py measures, medians of 15 runs on the 2-core VM) costs 37 ms
of CPU to import alone and 13-26 ms after guardian's own imports, against 224 ms for all
of `guardian check rules/` in bench/README.md: a sixth of a command's CPU, and two more
dependencies (pygments, markdown-it-py), for what these few functions do."""

from __future__ import annotations

import os
import re
import shutil
import sys
from collections.abc import Collection, Mapping, Sequence
from typing import TextIO

from guardian.core.numbers import NO_VALUE

__all__ = ["NO_VALUE", "columns", "natural", "pack", "paint", "wants_colour", "width", "wrap"]

_SGR = {"red": "31", "yellow": "33", "magenta": "35", "green": "32", "dim": "2",
        "bold": "1"}


def wants_colour(stream: TextIO | None = None, env: Mapping[str, str] | None = None) -> bool:
    """Whether to colour what goes to ``stream`` (default stdout): only a terminal, and
    never while ``NO_COLOR`` is set to anything but the empty string (no-color.org) or
    ``TERM`` is ``dumb``."""
    env = os.environ if env is None else env
    if env.get("NO_COLOR") or env.get("TERM") == "dumb":
        return False
    stream = sys.stdout if stream is None else stream
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # no isatty, or closed
        return False


def paint(text: str, style: str, on: bool) -> str:
    """``text`` in ``style`` (red, yellow, magenta, green, dim, bold) when ``on``."""
    if not on or not style or not text:
        return text
    return f"\x1b[{_SGR[style]}m{text}\x1b[0m"


def width(stream: TextIO | None = None) -> int | None:
    """How wide a line may be on the terminal ``stream`` is (default stdout): its width,
    or ``COLUMNS`` where set; None (no limit: one line per row, for grep) into a pipe or
    a file, whatever ``COLUMNS`` says."""
    stream = sys.stdout if stream is None else stream
    try:
        if not stream.isatty():
            return None
    except (AttributeError, ValueError):
        return None
    return shutil.get_terminal_size().columns


def columns(rows: Sequence[Sequence[str]], right: Collection[int] = (),
            gap: int = 2) -> list[str]:
    """``rows`` as lines of aligned columns, each as wide as its widest cell over all
    rows (``right``: the indexes of right-aligned columns); the last column is not
    padded, and no line ends in blanks."""
    if not rows:
        return []
    n = max(len(r) for r in rows)
    widths = [max((len(r[i]) for r in rows if i < len(r)), default=0) for i in range(n)]
    out = []
    for r in rows:
        cells = [(c.rjust(widths[i]) if i in right else
                  c.ljust(widths[i]) if i < n - 1 else c) for i, c in enumerate(r)]
        out.append((" " * gap).join(cells).rstrip())
    return out


def wrap(text: str, room: int | None) -> list[str]:
    """``text`` cut at its spaces into lines of at most ``room`` characters (a longer
    word stays whole); one line when ``room`` is None."""
    return pack(text.split(" "), room)


def pack(pieces: Sequence[str], room: int | None) -> list[str]:
    """``pieces`` joined by spaces into lines of at most ``room`` characters, a line
    breaking only between two pieces (a longer piece stays whole); one line when
    ``room`` is None."""
    lines: list[str] = []
    line = ""
    for piece in pieces:
        if not piece:
            continue
        if line and room is not None and len(line) + 1 + len(piece) > room:
            lines.append(line)
            line = piece
        else:
            line = f"{line} {piece}" if line else piece
    return [*lines, line] if line or not lines else lines


_DIGITS = re.compile(r"(\d+)")


def natural(text: str) -> tuple[tuple[int, int | str], ...]:
    """A sort key that puts ``cpu9`` before ``cpu10``."""
    return tuple((0, int(p)) if p.isdigit() else (1, p) for p in _DIGITS.split(text) if p)
