"""PromQL (and C) spellings in a condition, answered with guardian's.

An SRE who writes Prometheus alerts types ``rate(x[5m])``, ``&&`` or ``sum by (cpu) (x)``
by habit; Python's parser would answer "invalid decimal literal". :func:`find_habit`
scans the rule's own text (strings and comments skipped) for those forms, none of which
is valid guardian, and returns where the first one starts with a message in guardian's
spelling. Each did-you-mean it offers is itself a condition fragment guardian accepts.
Nothing is rewritten: where PromQL's meaning differs (``rate`` extrapolates, ``by``
groups), accepting its spelling would promise its meaning.
"""

from __future__ import annotations

import re
from collections.abc import Container, Sequence
from typing import NamedTuple

__all__ = ["FUNCTION_NOTES", "find_habit"]

_TOKEN = re.compile(r"""
    (?P<str>"(?:[^"\\\n]|\\.)*"?|'(?:[^'\\\n]|\\.)*'?)
  | (?P<comment>\#[^\n]*)
  | (?P<dur>(?:\d+(?:\.\d+)?(?:ms|s|m|h|d|w))+)(?![\w.])
  | (?P<num>\d[\w.]*)
  | (?P<name>[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*)
  | (?P<op>&&|\|\||[=!]~|[=!<>]=|\S)
  | \s+
""", re.VERBOSE)
_OPEN = {"(": ")", "[": "]", "{": "}"}
# PromQL range functions guardian has no twin of: the nearest guardian call, and why
_RENAMED = {
    "irate": ("rate", "guardian has no irate (the last two samples); the nearest is rate "
                      "over the window"),
    "idelta": ("delta", "guardian has no idelta (the last two samples); the nearest is "
                        "delta over the window"),
    "present_over_time": ("not absent_over_time", "guardian has no present_over_time"),
}
# PromQL functions guardian lacks, and what to write instead
FUNCTION_NOTES = {
    "irate": 'guardian has no irate (the last two samples); rate over a short window '
             'comes closest: `rate(x, "1m")`',
    "idelta": 'guardian has no idelta (the last two samples); delta over a short window '
              'comes closest: `delta(x, "1m")`',
    "topk": "guardian has no topk: `max(x)` is the largest member, and a comparison "
            "keeps every member for which it holds (`x > 90`)",
    "bottomk": "guardian has no bottomk: `min(x)` is the smallest member, and a "
               "comparison keeps every member for which it holds (`x < 10`)",
    "quantile": 'guardian has no quantile over a family\'s members; '
                '`quantile_over_time(0.9, x, "5m")` is over one signal\'s samples in time',
    "present_over_time": 'guardian has no present_over_time: '
                         '`not absent_over_time(x, "5m")`',
}


class _Tok(NamedTuple):
    kind: str
    text: str
    start: int
    end: int


def _tokens(text: str) -> list[_Tok]:
    out: list[_Tok] = []
    for m in _TOKEN.finditer(text):
        kind = m.lastgroup
        if kind is not None and kind != "comment":
            out.append(_Tok(kind, m.group(), m.start(), m.end()))
    return out


def _brackets(toks: Sequence[_Tok]) -> tuple[dict[int, int], dict[int, int], list[int | None]]:
    """Matching pairs (open to close, close to open) and each token's innermost open."""
    pairs: dict[int, int] = {}
    stack: list[int] = []
    inside: list[int | None] = []
    for i, t in enumerate(toks):
        if t.text in (")", "]", "}") and stack and _OPEN[toks[stack[-1]].text] == t.text:
            pairs[stack.pop()] = i
        inside.append(stack[-1] if stack else None)
        if t.kind == "op" and t.text in _OPEN:
            stack.append(i)
    return pairs, {c: o for o, c in pairs.items()}, inside


def _glob_of(regex: str) -> str | None:
    """A PromQL label regex (anchored, as PromQL's are) as a glob, when one says the same."""
    out: list[str] = []
    i = 0
    while i < len(regex):
        two = regex[i:i + 2]
        if two in (".*", ".+"):
            out.append("*" if two == ".*" else "?*")
            i += 2
            continue
        c = regex[i]
        if c == ".":
            out.append("?")
        elif c in "^$*+?()[]{}|\\\"'":
            return None
        else:
            out.append(c)
        i += 1
    return "".join(out)


def find_habit(text: str, signals: Container[str], time_functions: Container[str]
               ) -> tuple[int, str] | None:
    """The offset in ``text`` and the message of the first PromQL or C spelling in it
    that guardian writes otherwise; None when there is none. ``signals`` are the known
    signal names (a word such as ``offset`` that names one is left alone)."""
    toks = _tokens(text)
    pairs, opens, inside = _brackets(toks)

    def tok(i: int) -> _Tok | None:
        return toks[i] if 0 <= i < len(toks) else None

    def selector_before(i: int) -> str | None:
        """The selector text (``x`` or ``x{l="v"}``) that ends just before token i."""
        p = tok(i - 1)
        if p is not None and p.text == "}" and i - 1 in opens:
            p = tok(opens[i - 1] - 1)
        if p is None or p.kind != "name":
            return None
        return text[p.start:toks[i].start].rstrip()

    def call_around(i: int) -> tuple[str, int, int] | None:
        """The function name, start offset and end offset of the call token i is in."""
        o = inside[i]
        name = tok(o - 1) if o is not None else None
        if o is None or toks[o].text != "(" or name is None or name.kind != "name" \
                or o not in pairs:
            return None
        return name.text, name.start, toks[pairs[o]].end

    for i, t in enumerate(toks):
        nxt, prev = tok(i + 1), tok(i - 1)
        o = inside[i]
        in_selector = o is not None and toks[o].text == "{"
        message: str | None = None
        if t.kind == "op":
            if t.text in ("&&", "||", "!"):
                word = {"&&": "and", "||": "or", "!": "not"}[t.text]
                message = f"`{t.text}` is written `{word}` in guardian"
            elif o is not None and in_selector and prev is not None and prev.kind == "name" \
                    and t.text in ("=~", "!~", "==", "!="):
                message = _matcher(text, toks, i, o, pairs)
            elif t.text == "[" and nxt is not None and nxt.kind == "dur":
                message = _range(text, toks, i, selector_before(i), call_around(i),
                                 time_functions)
        elif t.kind == "dur":
            call = call_around(i)
            if call is not None and call[0] in time_functions:
                fixed = f'{text[call[1]:t.start]}"{t.text}"{text[t.end:call[2]]}'
                message = f"a duration is a string in guardian: did you mean `{fixed}`?"
            else:
                message = (f'a duration is a string in guardian, the window of a time '
                           f'function: `rate(x, "{t.text}")`')
        elif t.kind == "name" and t.text not in signals and not in_selector:
            message = _keyword(text, toks, i, pairs, opens, selector_before(i))
        if message is not None:
            return t.start, message
    return None


def _matcher(text: str, toks: Sequence[_Tok], i: int, o: int, pairs: dict[int, int]
             ) -> str:
    """The message for ``=~``, ``!~``, ``==`` or ``!=`` at token i in the selector whose
    ``{`` is token o."""
    op, label = toks[i].text, toks[i - 1].text
    value = toks[i + 1] if i + 1 < len(toks) and toks[i + 1].kind == "str" else None
    glob = _glob_of(value.text[1:-1]) if op == "=~" and value is not None else None
    name = toks[o - 1] if o > 0 and toks[o - 1].kind == "name" else None
    if value is not None and name is not None and o in pairs and (
            op == "==" or glob is not None):
        matcher = f"{label}={value.text}" if op == "==" else f'{label}="{glob}"'
        fixed = (text[name.start:toks[i - 1].start] + matcher
                 + text[value.end:toks[pairs[o]].end])
        lead = ("a label matcher has one `=`" if op == "==" else
                "guardian selects labels by glob, not regular expression")
        return f"{lead}: did you mean `{fixed}`?"
    if op == "==":
        return f"a label matcher has one `=`: `{label}={value.text if value else '...'}`"
    return (f"guardian has no `{op}` label matcher: a selector keeps the members whose "
            f"label equals a value or matches a glob (`*` any text, `?` one character), "
            f'e.g. `{label}="1*"`')


def _range(text: str, toks: Sequence[_Tok], i: int, selector: str | None,
           call: tuple[str, int, int] | None, time_functions: Container[str]) -> str | None:
    """The message for ``[5m]`` (a range selector) or ``[5m:1m]`` (a subquery)."""
    window, after = toks[i + 1].text, toks[i + 2] if i + 2 < len(toks) else None
    if after is not None and after.text == ":":
        return ("guardian has no subqueries: a time function reads one signal's own "
                'samples, e.g. `max_over_time(x, "5m")`')
    if after is None or after.text != "]":
        return None
    sel = selector or "x"
    if call is not None and (call[0] in time_functions or call[0] in _RENAMED):
        fname, start, end = call
        fixed = f'{text[start:toks[i].start].rstrip()}, "{window}"{text[after.end:end]}'
        if fname in _RENAMED:
            twin, lead = _RENAMED[fname]
            return f"{lead}: `{twin + fixed[len(fname):]}`"
        return (f"`[{window}]` is PromQL's range selector; guardian passes the window as a "
                f"string argument: did you mean `{fixed}`?")
    return (f"`[{window}]` is PromQL's range selector; guardian reads a window only in a "
            f'time function, e.g. `max_over_time({sel}, "{window}")`')


def _keyword(text: str, toks: Sequence[_Tok], i: int, pairs: dict[int, int],
             opens: dict[int, int], selector: str | None) -> str | None:
    """The message for a PromQL keyword at token i (unless, bool, offset, by, on...)."""
    word, prev = toks[i].text, toks[i - 1] if i > 0 else None
    nxt = toks[i + 1] if i + 1 < len(toks) else None
    if nxt is not None and nxt.text == "=":  # a label or keyword of that name
        return None
    paren = nxt is not None and nxt.text == "(" and (i + 1) in pairs
    if word == "unless":
        return "`unless` is written `and not` in guardian"
    if word == "bool":
        return ("guardian has no `bool` modifier (drop it): a comparison is already a "
                "condition, true, false or unknown")
    if word == "offset" and prev is not None and (prev.kind == "name"
                                                  or prev.text in (")", "]", "}")):
        window = nxt.text if nxt is not None and nxt.kind == "dur" else "5m"
        return (f"guardian has no `offset`: a condition reads each signal's latest sample; "
                f"the change within the last {window} is "
                f'`delta({selector or "x"}, "{window}")` (`increase` for a counter)')
    if word in ("by", "without") and paren:
        agg = _aggregation(text, toks, i, pairs, opens)
        said = f"`{agg}`" if agg else "an aggregation such as `sum(x)`"
        return (f"guardian has no `{word}` grouping: {said} gives one number over the "
                f"whole family, and a comparison on the family keeps each member for "
                f"which it holds")
    if (word in ("on", "ignoring") and paren) or word in ("group_left", "group_right"):
        return (f"guardian has no `{word}` vector matching: arithmetic and comparison "
                f"between two families pair the members whose labels are equal")
    return None


def _aggregation(text: str, toks: Sequence[_Tok], i: int, pairs: dict[int, int],
                 opens: dict[int, int]) -> str | None:
    """``sum(EXPR)`` for ``sum by (l) (EXPR)`` or ``sum(EXPR) by (l)`` at token i."""
    prev = toks[i - 1] if i > 0 else None
    if prev is not None and prev.kind == "name":  # sum by (l) (EXPR)
        j = pairs[i + 1] + 1
        if j < len(toks) and toks[j].text == "(" and j in pairs:
            return f"{prev.text}({text[toks[j].end:toks[pairs[j]].start].strip()})"
    if prev is not None and prev.text == ")" and i - 1 in opens:  # sum(EXPR) by (l)
        o = opens[i - 1]
        if o > 0 and toks[o - 1].kind == "name":
            return f"{toks[o - 1].text}({text[toks[o].end:prev.start].strip()})"
    return None
