"""Located errors in guardian's TOML files (rules, config, rule tests): every problem is
a :class:`Diagnostic` at ``path:line:col``, collected in one pass by a :class:`Reporter`
and raised together as a :class:`RuleError`."""

from __future__ import annotations

import difflib
import os
import re
import stat
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, get_args

from pydantic import BaseModel, ValidationError

from guardian.core import tomlread
from guardian.core.errors import GuardianError
from guardian.core.positions import Pos, key_positions, locate

Loc = tuple[str | int, ...]


@dataclass(frozen=True, order=True)
class Diagnostic:
    """One problem in a file (``line`` 0: of the file or directory as a whole, said at
    its path alone)."""

    path: str
    line: int
    col: int
    message: str

    def __str__(self) -> str:
        if self.line <= 0:
            return f"{self.path}: {self.message}"
        return f"{self.path}:{self.line}:{self.col}: {self.message}"


class RuleError(GuardianError):
    """Rule, config or rule-test files did not load; ``diagnostics`` holds every problem
    found."""

    def __init__(self, diagnostics: Sequence[Diagnostic]) -> None:
        self.diagnostics = sorted(diagnostics)
        super().__init__("\n".join(str(d) for d in self.diagnostics))


_TOML_POS = re.compile(r"^(.*?)\s*\(at line (\d+), column (\d+)\)$", re.S)


def toml_error(path: str, exc: tomlread.TOMLDecodeError) -> Diagnostic:
    """A TOML syntax error as a diagnostic at tomllib's line and column."""
    m = _TOML_POS.match(str(exc))
    line, col, msg = (int(m.group(2)), int(m.group(3)), m.group(1)) if m else (1, 1, str(exc))
    lineno, colno = getattr(exc, "lineno", None), getattr(exc, "colno", None)
    if isinstance(lineno, int) and isinstance(colno, int):  # Python 3.14 says it outright
        line, col = lineno, colno
        msg = str(getattr(exc, "msg", None) or msg)
    return Diagnostic(path, line, col, f"TOML syntax: {msg}")


MAX_FILE_BYTES = 1 << 20  # a rule, config or test file larger than 1 MiB is a mistake


def read_text(path: Path, what: str) -> str:
    """The text of a regular file of at most :data:`MAX_FILE_BYTES`, read without ever
    blocking (a FIFO or a device named like a rule file is refused, not waited on).
    Raises :class:`RuleError`."""
    def refuse(why: str) -> RuleError:
        return RuleError([Diagnostic(str(path), 1, 1, f"cannot read {what}: {why}")])

    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY)
    except OSError as exc:
        raise refuse(exc.strerror or str(exc)) from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise refuse("not a regular file")
        if st.st_size > MAX_FILE_BYTES:
            raise refuse(f"{st.st_size} bytes; at most {MAX_FILE_BYTES} are read")
        data = os.read(fd, MAX_FILE_BYTES + 1)
    except OSError as exc:
        raise refuse(exc.strerror or str(exc)) from None
    finally:
        os.close(fd)
    if len(data) > MAX_FILE_BYTES:
        raise refuse(f"more than {MAX_FILE_BYTES} bytes")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise refuse(f"not UTF-8: {exc}") from None


def parse_toml(path: str, text: str) -> dict[str, Any]:
    """TOML text as data. Raises :class:`RuleError` with the syntax error's position, or
    for input too deeply nested to parse."""
    try:
        return tomlread.loads(text)
    except tomlread.TOMLDecodeError as exc:
        raise RuleError([toml_error(path, exc)]) from None
    except (RecursionError, MemoryError):
        raise RuleError([Diagnostic(path, 1, 1, "TOML nested too deeply to read")]) from None


def read_toml(path: Path, what: str) -> tuple[str, dict[str, Any]]:
    """A TOML file's text and data. Raises :class:`RuleError` (cannot read ``what``, or
    its syntax error at its position)."""
    text = read_text(path, what)
    return text, parse_toml(str(path), text)


class Reporter:
    """Collects diagnostics for one TOML document, located by key path."""

    def __init__(self, path: str, text: str, into: list[Diagnostic] | None = None) -> None:
        self.path = path
        try:
            self.positions = key_positions(text)
        except (RecursionError, MemoryError, ValueError):
            self.positions = {}  # every diagnostic then points at 1:1
        self.diagnostics: list[Diagnostic] = into if into is not None else []

    def at(self, loc: Loc) -> Pos:
        return locate(self.positions, loc) or Pos(1, 1, 1, 1)

    def __call__(self, loc: Loc, message: str, value: bool = False) -> None:
        """Report ``message`` at the key ``loc`` (or at its value)."""
        p = self.at(loc)
        line, col = (p.value_line, p.value_col) if value else (p.line, p.col)
        self.diagnostics.append(Diagnostic(self.path, line, col, message))

    def validation(self, exc: ValidationError, base: Loc, model: type[BaseModel],
                   prefix: str = "", extra_known: Sequence[str] = (),
                   words: Callable[[Loc, str], str | None] | None = None,
                   table: str = "") -> None:
        """Report each pydantic error at the position of its key (or value); an unknown
        key with the likely meant one among the keys of the table it is in. ``words``
        may say an error in plain words (given its key path and pydantic's error type;
        None: the usual message). ``table``: the dotted name of the table at ``base``,
        which a message names its key's path from (``fleet``: ``fleet.breaker.window``;
        "": the path inside the model alone)."""
        for err in exc.errors():
            loc = tuple(err["loc"])
            where = ".".join(str(p) for p in ((table,) if table else ()) + loc)
            said = words(loc, err["type"]) if words is not None else None
            if said is not None:
                if err["type"] == "missing":
                    self(base + loc[:-1], prefix + said)
                else:
                    self((*base, *loc), prefix + said, value=True)
            elif err["type"] == "extra_forbidden":
                inner = _model_at(model, loc[:-1])
                fields = [f.alias or name for name, f in inner.model_fields.items()] \
                    if inner is not None else []
                if not loc[:-1]:
                    fields += list(extra_known)
                self((*base, *loc), prefix + unknown_key(str(loc[-1]), fields))
            elif err["type"] == "missing":
                self(base + loc[:-1], f"{prefix}missing required key {where!r}")
            else:
                msg = err["msg"]
                ctx_err = (err.get("ctx") or {}).get("error")
                if isinstance(ctx_err, ValueError):
                    msg = str(ctx_err)
                elif msg.startswith("Value error, "):
                    msg = msg[len("Value error, "):]
                if loc:
                    self((*base, *loc), f"{prefix}{where}: {msg}", value=True)
                else:  # about the table as a whole: at its header
                    self(base, f"{prefix}{msg}")


def _model_at(model: type[BaseModel], loc: Loc) -> type[BaseModel] | None:
    """The model of the table at ``loc`` inside ``model`` (list indexes skipped)."""
    current: type[BaseModel] = model
    for part in loc:
        if isinstance(part, int):
            continue
        field = next((f for name, f in current.model_fields.items()
                      if part in (name, f.alias)), None)
        if field is None:
            return None
        inner = _first_model(field.annotation)
        if inner is None:
            return None
        current = inner
    return current


def _first_model(annotation: object) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in get_args(annotation):
        if (found := _first_model(arg)) is not None:
            return found
    return None


def meant(name: str, known: Collection[str], listed: int | None = None) -> str:
    """What a name that names nothing likely meant, in words: ``did you mean 'x'?``,
    else the known names (``known: a, b``; ``known: none``), when there are at most
    ``listed`` (None: any number) of them."""
    hint = difflib.get_close_matches(name, sorted(known), n=1)
    if hint:
        return f"did you mean {hint[0]!r}?"
    if listed is not None and len(known) > listed:
        return f"none of the {len(known)} known is close"
    return f"known: {', '.join(sorted(known)) or 'none'}"


def unknown_key(key: str, known: Sequence[str]) -> str:
    """The message for a key that is not one of ``known``, with a likely meant one."""
    hint = difflib.get_close_matches(key, known, n=1)
    more = f" (did you mean {hint[0]!r}?)" if hint else f" (known keys: {', '.join(known)})"
    return f"unknown key {key!r}{more}"
