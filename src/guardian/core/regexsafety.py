"""Kernel-log patterns that cannot stall the daemon, and lines that fire them.

Python's regex engine backtracks and holds the interpreter lock while it does: a pattern
with nested quantifiers (``(a+)+$``) or a repeated alternation whose branches overlap
(``(a|ab)*c``) can take exponential time on one crafted 32-character line, freezing every
thread, the watchdog's included. Such patterns are refused when the configuration loads
(see :func:`backtracking_risk`).

Where a process's own text sits in kernel lines, and what that means for a pattern, is
guardian.sources.kernel_usertext; :func:`example_match` gives it the text to try.
"""

from __future__ import annotations

import importlib
import json
import re
import subprocess
import sys
from typing import Any

from guardian.core.errors import GuardianError

# The standard library's own regex parser (re._parser since 3.11, sre_parse before).
try:
    sre_parse: Any = importlib.import_module("re._parser")
    sre_constants: Any = importlib.import_module("re._constants")
except ImportError:  # pragma: no cover - Python 3.9 and 3.10
    sre_parse = importlib.import_module("sre_parse")
    sre_constants = importlib.import_module("sre_constants")

_REPEATS = {sre_constants.MAX_REPEAT, sre_constants.MIN_REPEAT} | (
    {sre_constants.POSSESSIVE_REPEAT} if hasattr(sre_constants, "POSSESSIVE_REPEAT") else set())

def backtracking_risk(pattern: str) -> str | None:
    """Why ``pattern`` can backtrack exponentially, or None."""
    return _walk(sre_parse.parse(pattern), repeated=False)


_NESTED = "nested quantifiers (a repeat inside a repeat) can backtrack exponentially"
_OVERLAP = "a repeated alternation whose branches can match the same text can backtrack " \
           "exponentially"


def _walk(items: Any, repeated: bool) -> str | None:
    for op, av in items:
        if op in _REPEATS:
            _lo, hi, body = av
            many = hi > 1
            if many and repeated:
                return _NESTED
            if many and _overlapping_alternation(body):
                return _OVERLAP
            subs, inner = [body], repeated or many
        elif op == sre_constants.BRANCH:
            if repeated and _branches_overlap(av[1]):
                return _OVERLAP
            subs, inner = list(av[1]), repeated
        else:
            subs, inner = _groups(op, av), repeated
        for sub in subs:
            if (why := _walk(sub, inner)) is not None:
                return why
    return None


def _groups(op: Any, av: Any) -> list[Any]:
    if op == sre_constants.SUBPATTERN:
        return [av[-1]]
    if op in (sre_constants.ASSERT, sre_constants.ASSERT_NOT):
        return [av[1]]
    if op == getattr(sre_constants, "ATOMIC_GROUP", None):
        return [av]
    return []


def _overlapping_alternation(body: Any) -> bool:
    items = list(body)
    while len(items) == 1 and items[0][0] == sre_constants.SUBPATTERN:
        items = list(items[0][1][-1])
    return len(items) == 1 and items[0][0] == sre_constants.BRANCH and \
        _branches_overlap(items[0][1][1])


def _branches_overlap(branches: Any) -> bool:
    """Whether two branches of an alternation may match the same text: judged by their
    first character (a branch that starts with a class, a group or nothing may)."""
    firsts: set[int] = set()
    for b in map(list, branches):
        if not b or b[0][0] != sre_constants.LITERAL or b[0][1] in firsts:
            return True
        firsts.add(b[0][1])
    return False


_CATEGORY_CHAR = {"CATEGORY_DIGIT": "0", "CATEGORY_NOT_DIGIT": "x", "CATEGORY_SPACE": " ",
                  "CATEGORY_NOT_SPACE": "x", "CATEGORY_WORD": "x", "CATEGORY_NOT_WORD": " "}


def example_match(pattern: str) -> str | None:
    """A short line that ``pattern`` matches (what an attacker would print to fire it),
    or None when none is found this simply."""
    try:
        text = _example(list(sre_parse.parse(pattern)))
    except _NoExample:
        return None
    return text if re.search(pattern, text) else None


class _NoExample(GuardianError):
    pass


def _example(items: list[Any]) -> str:
    out = []
    for op, av in items:
        name = str(op)
        if op == sre_constants.LITERAL:
            out.append(chr(av))
        elif op == sre_constants.NOT_LITERAL:
            out.append("x" if av != ord("x") else "y")
        elif op == sre_constants.ANY:
            out.append("x")
        elif op == sre_constants.IN:
            out.append(_in_example(av))
        elif op in _REPEATS:
            lo, _hi, body = av
            out.append(_example(list(body)) * lo)
        elif op == sre_constants.SUBPATTERN:
            out.append(_example(list(av[-1])))
        elif op == sre_constants.BRANCH:
            out.append(_example(list(av[1][0])))
        elif name in ("AT", "ASSERT", "ASSERT_NOT"):
            continue
        elif op == getattr(sre_constants, "ATOMIC_GROUP", None):
            out.append(_example(list(av)))
        else:
            raise _NoExample(name)
    return "".join(out)


def _in_example(av: Any) -> str:
    negate = any(op == sre_constants.NEGATE for op, _ in av)
    if negate:
        banned = {chr(v) for op, v in av if op == sre_constants.LITERAL}
        for candidate in "xy0 ":
            if candidate not in banned:
                return candidate
        raise _NoExample("class")
    for op, v in av:
        if op == sre_constants.LITERAL:
            return chr(v)
        if op == sre_constants.RANGE:
            return chr(v[0])
        if op == sre_constants.CATEGORY:
            return _CATEGORY_CHAR.get(str(v), "x")
    raise _NoExample("class")


# -- the cost of an accepted pattern ----------------------------------------------------

LINE_MAX = 65536  # the longest line the kmsg reader matches (fragments joined)
COST_BUDGET = 0.25  # seconds one pattern may take on its worst crafted line
_PROBE = r"""
import json, re, sys, time
rx = re.compile(sys.argv[1])
worst = 0.0
for line in json.load(sys.stdin):
    t0 = time.perf_counter()
    rx.search(line)
    worst = max(worst, time.perf_counter() - t0)
print(worst)
"""


def _crafted_lines(pattern: str) -> list[str]:
    """Lines of :data:`LINE_MAX` characters that make a polynomial pattern slow: its own
    shortest match repeated (every start position looks promising), and that match's
    text without its end, and plain runs."""
    example = example_match(pattern) or "x"
    near = example[:-1] or "x"
    return [example * (LINE_MAX // len(example)), near * (LINE_MAX // len(near)),
            example + "x" * (LINE_MAX - len(example)), " " * LINE_MAX, "a" * LINE_MAX]


def cost_risk(pattern: str) -> str | None:
    """Why ``pattern`` costs too much on a crafted line (it backtracks polynomially:
    ``^.*.*.*: x`` took 10 s a line), or None. Measured in a child process, so a pattern
    that would take minutes costs the caller ``COST_BUDGET`` x 8 at most."""
    try:
        proc = subprocess.run([sys.executable, "-I", "-c", _PROBE, pattern],
                              input=json.dumps(_crafted_lines(pattern)), capture_output=True,
                              text=True, timeout=COST_BUDGET * 8)
        worst = float(proc.stdout.strip() or "inf")
    except subprocess.TimeoutExpired:
        worst = float("inf")
    except (OSError, ValueError):
        return None  # no child to measure in: the static checks stand alone
    if worst <= COST_BUDGET:
        return None
    took = "more than 2s" if worst == float("inf") else f"{worst:.2f}s"
    return (f"costs {took} on one crafted {LINE_MAX}-character line (its repeats "
            f"backtrack polynomially); bound them, e.g. .{{0,200}} instead of .*")


def named_pattern_problem(name: str, pattern: str) -> str | None:
    """Why a configured pattern (kmsg, journal) cannot be used, or None: its name must be
    lower_snake_case, and it must compile without risking unbounded backtracking."""
    if not re.fullmatch(r"[a-z][a-z0-9_]*", name):
        return f"pattern name {name!r} must be lower_snake_case"
    try:
        re.compile(pattern)
    except (re.error, RecursionError, OverflowError) as exc:
        return f"pattern {name!r}: bad regular expression: {exc}"
    if (why := backtracking_risk(pattern)) is not None:
        return (f"pattern {name!r}: {why}; rewrite it without (e.g. `a+` for `(a+)+`)")
    if (why := cost_risk(pattern)) is not None:
        return f"pattern {name!r}: {why}"
    return None
