"""Where each key of a (valid) TOML document stands, so schema errors can name line:col.

``tomllib`` parses but forgets positions. This scanner walks the same text once and maps
each key path, e.g. ``("rule", 2, "action", 0, "use")``, to the line and column of the key
and of its value. It assumes the text already parsed with ``tomllib``.
"""

from __future__ import annotations

from dataclasses import dataclass

from guardian.core import tomlread

Path = tuple[str | int, ...]


@dataclass(frozen=True)
class Pos:
    line: int  # 1-based
    col: int  # 1-based
    value_line: int
    value_col: int


class _Scanner:
    def __init__(self, text: str) -> None:
        # TOML breaks lines only at \n (or \r\n); str.splitlines() would also break at
        # \x85, \u2028 and others, which may sit inside strings
        self.lines = [ln[:-1] if ln.endswith("\r") else ln for ln in text.split("\n")]
        self.i = 0  # line index
        self.j = 0  # column index

    def ch(self) -> str:
        if self.i >= len(self.lines):
            return ""
        line = self.lines[self.i]
        return line[self.j] if self.j < len(line) else "\n"

    def skip_ws(self, newlines: bool = False) -> None:
        while self.i < len(self.lines):
            c = self.ch()
            if c in " \t":
                self.j += 1
            elif c == "#" or (c == "\n" and newlines):
                self.i += 1
                self.j = 0
            else:
                return

    def read_key(self) -> list[str]:
        """A (possibly dotted, possibly quoted) key."""
        parts: list[str] = []
        while True:
            self.skip_ws()
            c = self.ch()
            if c in "\"'":
                parts.append(self.read_string())
            else:
                line = self.lines[self.i]
                start = self.j
                while self.j < len(line) and (line[self.j].isalnum() or line[self.j] in "-_"):
                    self.j += 1
                parts.append(line[start:self.j])
            self.skip_ws()
            if self.ch() == ".":
                self.j += 1
                continue
            return parts

    def read_string(self) -> str:
        line = self.lines[self.i]
        quote = line[self.j]
        if line.startswith(quote * 3, self.j):
            self.j += 3
            out = []
            while self.i < len(self.lines):
                line = self.lines[self.i]
                k = line.find(quote * 3, self.j)
                while k != -1 and quote == '"' and _escaped(line, k):
                    k = line.find(quote * 3, k + 1)
                if k != -1:
                    # a closing run may be longer than three quotes
                    end = k + 3
                    while end < len(line) and line[end] == quote:
                        end += 1
                    out.append(line[self.j:end - 3])
                    self.j = end
                    return "\n".join(out)
                out.append(line[self.j:])
                self.i += 1
                self.j = 0
            return "\n".join(out)
        self.j += 1
        start = self.j
        while self.j < len(line) and line[self.j] != quote:
            self.j += 2 if quote == '"' and line[self.j] == "\\" else 1
        literal = line[start - 1:self.j + 1]
        self.j += 1
        if quote == "'" or "\\" not in literal:
            return literal[1:-1]
        return str(tomlread.loads(f"k = {literal}")["k"])  # a basic string's escapes

    def skip_value(self, path: Path, out: dict[Path, Pos]) -> None:
        """Skip one value (string, array, inline table or bare scalar), noting the
        positions of array elements and inline-table keys under ``path``."""
        self.skip_ws()
        c = self.ch()
        if c in "\"'":
            self.read_string()
        elif c in "[{":
            closer = "]" if c == "[" else "}"
            self.j += 1
            index = 0
            while self.i < len(self.lines):
                self.skip_ws(newlines=True)
                c2 = self.ch()
                here = Pos(self.i + 1, self.j + 1, self.i + 1, self.j + 1)
                if c2 == closer:
                    self.j += 1
                    return
                if c2 == ",":
                    self.j += 1
                elif c == "{":
                    keys = self.read_key()
                    self.skip_ws()
                    self.j += 1  # '='
                    self.skip_ws()
                    value_at = Pos(here.line, here.col, self.i + 1, self.j + 1)
                    sub = (*path, *keys)
                    out.setdefault(sub, value_at)
                    self.skip_value(sub, out)
                else:
                    out.setdefault((*path, index), here)
                    self.skip_value((*path, index), out)
                    index += 1
        else:
            line = self.lines[self.i]
            while self.j < len(line) and line[self.j] not in ",]}#":
                self.j += 1
            while self.j > 0 and line[self.j - 1] in " \t":
                self.j -= 1


def _escaped(line: str, k: int) -> bool:
    n = 0
    while k - 1 - n >= 0 and line[k - 1 - n] == "\\":
        n += 1
    return n % 2 == 1


def key_positions(text: str) -> dict[Path, Pos]:
    """Map every key path of a TOML document to the position of the key and its value."""
    sc = _Scanner(text)
    out: dict[Path, Pos] = {}
    arrays: dict[Path, int] = {}  # array-of-tables path -> index of its last element
    table: Path = ()

    def resolve(keys: list[str]) -> Path:
        path: Path = ()
        for k in keys:
            path = (*path, k)
            if path in arrays:
                path = (*path, arrays[path])
        return path

    while True:
        sc.skip_ws(newlines=True)
        if sc.i >= len(sc.lines):
            return out
        line_no, col_no = sc.i + 1, sc.j + 1
        if sc.ch() == "[":
            is_array = sc.lines[sc.i].startswith("[[", sc.j)
            sc.j += 2 if is_array else 1
            keys = sc.read_key()
            sc.j += 2 if is_array else 1
            if is_array:
                parent = resolve(keys[:-1])
                base = (*parent, keys[-1])
                arrays[base] = arrays.get(base, -1) + 1
                table = (*base, arrays[base])
            else:
                table = resolve(keys)
            here = Pos(line_no, col_no, line_no, col_no)
            for n in range(1, len(table) + 1):  # [a.b] defines a too, where not yet seen
                out.setdefault(table[:n], here)
        else:
            keys = sc.read_key()
            sc.skip_ws()
            sc.j += 1  # '='
            sc.skip_ws()
            pos = Pos(line_no, col_no, sc.i + 1, sc.j + 1)
            path = table
            for k in keys:
                path = (*path, k)
                out.setdefault(path, pos)
            sc.skip_value(path, out)
        sc.i += 1
        sc.j = 0


def locate(positions: dict[Path, Pos], loc: Path) -> Pos | None:
    """The position of the longest prefix of ``loc`` that the document spells out."""
    for n in range(len(loc), -1, -1):
        pos = positions.get(tuple(loc[:n]))
        if pos is not None:
            return pos
    return None


def value_position(text: str, value_line: int, value_col: int, line: int, col: int
                   ) -> tuple[int, int]:
    """Where in the file (1-based line and column) a string value's character stands, given
    as TOML decodes the value: ``line`` 1-based, ``col`` 0-based within that line of the
    decoded string, the value opening at ``value_line``:``value_col``.

    The decoded string is not the text as written: a basic string's escapes (``\\"``,
    ``\\\\``, ``\\n``, ``\\t``, ``\\uXXXX``, ``\\UXXXXXXXX``) are one character decoded and
    two to ten written (``\\n`` a line break), a multi-line basic string's line-ending
    backslash drops the break and the white space after it, and a multi-line string drops
    a line break right after its opening quotes. The written string is walked alongside
    the decoded one; literal strings (``'...'``, ``'''...'''``) have no escapes."""
    lines = [ln[:-1] if ln.endswith("\r") else ln for ln in text.split("\n")]
    i, j = value_line - 1, value_col - 1
    if not (0 <= i < len(lines) and j < len(lines[i]) and lines[i][j] in "\"'"):
        # not a string as written here: count the decoded text as it stands
        return (value_line, value_col + 1 + col) if line == 1 else (value_line + line - 1,
                                                                       col + 1)
    quote = lines[i][j]
    multi = lines[i].startswith(quote * 3, j)
    j += 3 if multi else 1
    if multi and j == len(lines[i]) and i + 1 < len(lines):  # the break after the quotes
        i, j = i + 1, 0
    dline, dcol = 1, 0
    while i < len(lines):
        raw = lines[i]
        if (dline, dcol) >= (line, col):
            break
        if j >= len(raw):  # a line break as written, one as decoded
            if dline >= line or not multi or i + 1 >= len(lines):
                break
            i, j, dline, dcol = i + 1, 0, dline + 1, 0
            continue
        c = raw[j]
        if c == quote and (not multi or (raw.startswith(quote * 3, j)
                                         and not raw.startswith(quote * 4, j))):
            break  # the closing quote(s); a longer run's first quotes are the string's
        if c == "\\" and quote == '"':
            after = raw[j + 1:j + 2]
            if multi and raw[j + 1:].strip(" \t") == "":  # a line-ending backslash
                i, j = i + 1, 0
                while i < len(lines) and lines[i][j:].strip(" \t") == "":
                    i += 1
                if i < len(lines):
                    j = len(lines[i]) - len(lines[i].lstrip(" \t"))
                continue
            j += {"u": 6, "U": 10}.get(after, 2)
            dline, dcol = (dline + 1, 0) if after == "n" else (dline, dcol + 1)
            continue
        j, dcol = j + 1, dcol + 1
    return i + 1, j + 1
