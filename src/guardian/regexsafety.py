"""Kernel-log patterns that cannot stall the daemon or be fired by a process name.

Python's regex engine backtracks and holds the interpreter lock while it does: a pattern
with nested quantifiers (``(a+)+$``) or a repeated alternation whose branches overlap
(``(a|ab)*c``) can take exponential time on one crafted 32-character line, freezing every
thread, the watchdog's included. Such patterns are refused when the configuration loads
(see :func:`backtracking_risk`).

An unprivileged process controls its own name (up to 15 characters, TASK_COMM_LEN - 1),
and the kernel prints that name in lines of its own (``NAME[PID]: segfault at ...``). A
pattern that can match 15 characters or fewer anywhere in a line can be fired that way;
:func:`spoof_risk` says so, and anchoring the pattern at the start of the driver's message
(``^NVRM: Xid \\(PCI:``) removes the risk.
"""

from __future__ import annotations

import importlib
from typing import Any

# The standard library's own regex parser (re._parser since 3.11, sre_parse before).
try:
    sre_parse: Any = importlib.import_module("re._parser")
    sre_constants: Any = importlib.import_module("re._constants")
except ImportError:  # pragma: no cover - Python 3.9 and 3.10
    sre_parse = importlib.import_module("sre_parse")
    sre_constants = importlib.import_module("sre_constants")

COMM_MAX = 15  # TASK_COMM_LEN - 1: the longest name a process can give itself
_REPEATS = {sre_constants.MAX_REPEAT, sre_constants.MIN_REPEAT} | (
    {sre_constants.POSSESSIVE_REPEAT} if hasattr(sre_constants, "POSSESSIVE_REPEAT") else set())
_BEGIN = {sre_constants.AT_BEGINNING, sre_constants.AT_BEGINNING_STRING}


def backtracking_risk(pattern: str) -> str | None:
    """Why ``pattern`` can backtrack exponentially, or None."""
    return _walk(sre_parse.parse(pattern), repeated=False)


def spoof_risk(pattern: str) -> str | None:
    """Why a process name could fire ``pattern``, or None."""
    parsed = sre_parse.parse(pattern)
    if _anchored(list(parsed)):
        return None
    shortest = parsed.getwidth()[0]
    if shortest > COMM_MAX:
        return None
    return (f"matches as few as {shortest} characters anywhere in a line, so a process "
            f"that names itself so (up to {COMM_MAX} characters) and crashes fires it; "
            f"anchor it at the start of the driver's message with ^")


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


def _anchored(items: list[Any]) -> bool:
    if not items:
        return False
    op, av = items[0]
    if op == sre_constants.AT:
        return av in _BEGIN
    if op == sre_constants.SUBPATTERN:
        return _anchored(list(av[-1]))
    if op == sre_constants.BRANCH:
        return all(_anchored(list(b)) for b in av[1])
    return False
