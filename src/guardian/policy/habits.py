"""PromQL (and C) spellings in a condition, answered with guardian's.

An SRE who writes Prometheus alerts types ``rate(x[5m])``, ``&&`` or ``sum by (cpu) (x)``
by habit; Python's parser would answer "invalid decimal literal". :func:`find_habit`
scans the rule's own text (strings and comments skipped) for those forms, none of which
is valid guardian, and returns where the first one starts with a message in guardian's
spelling. Each did-you-mean is a condition fragment guardian accepts; where that depends
on what the operands are (``unless`` joins conditions only as ``and not``; a regex
alternation becomes one selector per glob, joined with ``or``), the suggestion is compiled
with guardian's own compiler before it is offered. Nothing is rewritten: where PromQL's
meaning differs (``rate`` extrapolates, ``by`` groups), accepting its spelling would
promise its meaning.
"""

from __future__ import annotations

import re
from collections.abc import Container, Mapping, Sequence
from typing import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:
    from guardian.core.snapshot import SignalSpec

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
_LOGIC = ("and", "or", "not", "unless")
# calls over a family's members as a whole (a selector in one cannot be split with `or`)
_WHOLE = ("max", "min", "sum", "avg", "count", "absent")
_GLOBS = "`*` any text, `?` one character, `[abc]` one of, `[!abc]` one not of"
_NO_MATCHER = ("guardian has no `{op}` label matcher: a selector keeps the members whose "
               "label equals a value or matches a glob (" + _GLOBS + ")")
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


def globs_of(regex: str) -> list[str] | None:
    """A PromQL label regex as globs, one per top-level alternative (``eth.*|ens.*`` is
    ``eth*`` and ``ens*``), when globs say the same; None otherwise."""
    if any(c in regex for c in "()[]\\"):
        return None  # a `|` inside a group, a class or escaped is not an alternative
    globs = [_glob_of(alt) for alt in regex.split("|")]
    return [g for g in globs if g is not None] if None not in globs else None


def _compiles(text: str, catalogue: Mapping[str, SignalSpec]) -> bool:
    """Whether guardian compiles ``text`` as a condition (so a suggestion is checked
    before it is offered)."""
    from guardian.policy.expr import ExprError, compile_condition  # expr imports this
    try:
        compile_condition(text, catalogue)
    except ExprError:
        return False
    return True


def _kind(text: str, catalogue: Mapping[str, SignalSpec]) -> str | None:
    """``condition``, ``family`` or ``number``: what ``text`` is to guardian's compiler;
    None when it does not compile either way."""
    whole, compared = _compiles(text, catalogue), _compiles(f"({text}) > 0", catalogue)
    if whole:
        return "family" if compared else "condition"
    return "number" if compared else None


def _operand(toks: Sequence[_Tok], first: int, last: int, pairs: dict[int, int],
             opens: dict[int, int], inside: Sequence[int | None], leftwards: bool = True,
             rightwards: bool = True, stop: tuple[str, ...] = _LOGIC, lift: bool = True
             ) -> tuple[int, int]:
    """The tokens first..last widened to the operand of the nearest logic word (``and``,
    ``or``, ``not``, ``unless``) or bracket; with ``lift``, a function call around them is
    taken whole."""
    while lift:  # out of any call the tokens are an argument of
        o = inside[first]
        if o is None or toks[o].text != "(" or o not in pairs or o == 0 \
                or toks[o - 1].kind != "name" or toks[o - 1].text in _LOGIC:
            break
        first, last = o - 1, pairs[o]
    if leftwards:
        j = first - 1
        while j >= 0 and toks[j].text not in _OPEN and toks[j].text != "," and not (
                toks[j].kind == "name" and toks[j].text in stop):
            if j in opens:  # a bracketed group: step over it whole
                j = opens[j]
            first = j
            j -= 1
    if rightwards:
        j = last + 1
        while j < len(toks) and toks[j].text not in (")", "]", "}", ",") and not (
                toks[j].kind == "name" and toks[j].text in stop):
            if j in pairs:
                j = pairs[j]
            last = j
            j += 1
    return first, last


def find_habit(text: str, signals: Mapping[str, SignalSpec],
               time_functions: Container[str]) -> tuple[int, str] | None:
    """The offset in ``text`` and the message of the first PromQL or C spelling in it
    that guardian writes otherwise; None when there is none. ``signals`` is the signal
    catalogue (a word such as ``offset`` that names a signal is left alone; suggestions
    are compiled against it)."""
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
                message = _matcher(text, toks, i, o, pairs, opens, inside, signals)
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
            message = _keyword(text, toks, i, pairs, opens, inside, selector_before(i),
                               signals)
        if message is not None:
            return t.start, message
    return None


def _matcher(text: str, toks: Sequence[_Tok], i: int, o: int, pairs: dict[int, int],
             opens: dict[int, int], inside: Sequence[int | None],
             catalogue: Mapping[str, SignalSpec]) -> str:
    """The message for ``=~``, ``!~``, ``==`` or ``!=`` at token i in the selector whose
    ``{`` is token o."""
    op, label = toks[i].text, toks[i - 1].text
    value = toks[i + 1] if i + 1 < len(toks) and toks[i + 1].kind == "str" else None
    regex = value.text[1:-1] if value is not None else ""
    globs = globs_of(regex) if op == "=~" and value is not None else None
    name = toks[o - 1] if o > 0 and toks[o - 1].kind == "name" else None
    if value is None or name is None or o not in pairs:
        if op == "==":
            return f"a label matcher has one `=`: `{label}=...`"
        return _NO_MATCHER.format(op=op)
    close = toks[pairs[o]]

    def selector(matcher: str) -> str:
        return (text[name.start:toks[i - 1].start] + matcher + text[value.end:close.end])

    if op == "==":
        return f"a label matcher has one `=`: did you mean `{selector(label + '=' + value.text)}`?"
    if globs is None:
        return (_NO_MATCHER.format(op=op) if op != "=~" else
                f"guardian selects labels by glob, not regular expression, and no glob "
                f"says what `{regex}` does ({_GLOBS})")
    if len(globs) == 1:
        return ("guardian selects labels by glob, not regular expression: did you mean "
                f'`{selector(f"{label}={chr(34)}{globs[0]}{chr(34)}")}`?')
    # an alternation: one selector per alternative, their conditions joined with `or`
    said = [f'`{label}="{g}"`' for g in globs]
    lead = (f"guardian selects labels by glob, not regular expression, one glob to a "
            f"selector: {', '.join(said[:-1])} and {said[-1]} together select the members "
            f"`{regex}` does")
    j: int | None = o - 1
    while j is not None:  # an aggregation over the members cannot be split by `or`
        j = inside[j]
        if j is not None and toks[j].text == "(" and j > 0 and toks[j - 1].text in _WHOLE:
            return f"{lead}, each in its own selector"
    first, last = _operand(toks, o - 1, pairs[o], pairs, opens, inside)
    start, end = toks[first].start, toks[last].end
    joined = " or ".join(text[start:name.start] + selector(f'{label}="{g}"')
                         + text[close.end:end] for g in globs)
    if not _compiles(joined, catalogue):
        return f"{lead}, each in its own selector"
    bare = (first == 0 and last == len(toks) - 1) or pairs.get(first - 1) == last + 1
    return f"{lead}: did you mean `{joined if bare else f'({joined})'}`?"


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
             opens: dict[int, int], inside: Sequence[int | None], selector: str | None,
             catalogue: Mapping[str, SignalSpec]) -> str | None:
    """The message for a PromQL keyword at token i (unless, bool, offset, by, on...)."""
    word, prev = toks[i].text, toks[i - 1] if i > 0 else None
    nxt = toks[i + 1] if i + 1 < len(toks) else None
    if nxt is not None and nxt.text == "=":  # a label or keyword of that name
        return None
    paren = nxt is not None and nxt.text == "(" and (i + 1) in pairs
    if word == "unless":
        return _unless(text, toks, i, pairs, opens, inside, catalogue)
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


def _unless(text: str, toks: Sequence[_Tok], i: int, pairs: dict[int, int],
            opens: dict[int, int], inside: Sequence[int | None],
            catalogue: Mapping[str, SignalSpec]) -> str:
    """The message for PromQL's ``unless`` (set subtraction) at token i, by what its two
    sides are to guardian: conditions, families or numbers."""
    lead = ("`unless` is PromQL's set subtraction (the left side's series the right side "
            "lacks)")
    if i == 0 or i == len(toks) - 1:
        return f"{lead}; guardian writes it between two conditions as `and not`"
    before, after = opens.get(i - 1, i - 1), pairs.get(i + 1, i + 1)
    left = _operand(toks, before, i - 1, pairs, opens, inside, rightwards=False, lift=False)
    right = _operand(toks, i + 1, after, pairs, opens, inside, leftwards=False,
                     stop=("and", "or", "unless"), lift=False)
    sides = [text[toks[a].start:toks[b].end] for a, b in (left, right)]
    kinds = [_kind(side, catalogue) for side in sides]
    fixed = f"{sides[0]} and not {sides[1]}"
    if kinds == ["condition", "condition"]:
        return f"`unless` is written `and not` between conditions: did you mean `{fixed}`?"
    if "number" in kinds:
        numbers = " and ".join(f"`{s}`" for s, k in zip(sides, kinds, strict=True) if k == "number")
        compared = [f"{s} > 0" if k == "number" else s for s, k in zip(sides, kinds, strict=True)]
        example = f"{compared[0]} and not {compared[1]}"
        said = f"{numbers} {'is a number' if ' and ' not in numbers else 'are numbers'}"
        tail = (f"; compare first, e.g. `{example}`" if _compiles(example, catalogue)
                else "")
        return (f"{lead}; guardian has none for numbers: {said}, and `and not` joins "
                f"conditions{tail}")
    if "family" in kinds and _compiles(fixed, catalogue):
        return (f"{lead}; guardian has no member-wise `unless` of families: `{fixed}` "
                f"holds while `{sides[0]}` keeps a member and `{sides[1]}` keeps none")
    return f"{lead}; guardian writes it between two conditions as `and not`"


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
