"""PromQL (and C) spellings in a condition get guardian's spelling back, located, instead
of Python's parser errors ("invalid decimal literal" for `rate(x[5m])`, issue 40).

Ground truth: each message is the one the rule author reads; each suggested replacement
is compiled here, so a did-you-mean that guardian would itself reject fails the test."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from guardian.core.snapshot import SignalSpec
from guardian.policy.expr import ExprError, compile_condition
from tests.support.checkout import write
from tests.support.rule_texts import GOOD_RULES

CAT = {s.name: s for s in (
    SignalSpec("a.x", "x"), SignalSpec("a.y", "y"),
    SignalSpec("c.core", "per core", labels=("cpu",)),
    SignalSpec("n.stat", "per nic", labels=("iface", "stat")),
)}
RANGE = "is PromQL's range selector; guardian passes the window as a string argument"
NO_GROUPING = ("gives one number over the whole family, and a comparison on the family "
               "keeps each member for which it holds")
UNLESS = ("`unless` is PromQL's set subtraction (the left side's series the right side "
          "lacks)")
ONE_GLOB = "guardian selects labels by glob, not regular expression, one glob to a selector: "
GLOBS = "`*` any text, `?` one character, `[abc]` one of, `[!abc]` one not of"
NO_MATCHING = ("vector matching: arithmetic and comparison between two families pair the "
               "members whose labels are equal")


# (PromQL text, column, the exact message, the guardian condition it points to). Where
# the message quotes a replacement (`...` after "did you mean" or a colon), that text is
# in the guardian condition, which must compile.
CASES = [
    ("a.x > 1 && a.y > 2", 8, "`&&` is written `and` in guardian", "a.x > 1 and a.y > 2"),
    ("a.x > 1 || a.y > 2", 8, "`||` is written `or` in guardian", "a.x > 1 or a.y > 2"),
    ("!(a.x > 1)", 0, "`!` is written `not` in guardian", "not (a.x > 1)"),
    ("a.x > 1 unless a.y > 2", 8, "`unless` is written `and not` between conditions: did "
     "you mean `a.x > 1 and not a.y > 2`?", "a.x > 1 and not a.y > 2"),
    # numbers: PromQL's set subtraction has no guardian counterpart; `and not` would be
    # "'and' needs conditions, got a number", so the example compares first
    ("a.x unless a.y", 4, f"{UNLESS}; guardian has none for numbers: `a.x` and `a.y` are "
     "numbers, and `and not` joins conditions; compare first, e.g. "
     "`a.x > 0 and not a.y > 0`", "a.x > 0 and not a.y > 0"),
    ("a.x > 1 and (a.x unless a.y > 3) or a.y > 1", 17, f"{UNLESS}; guardian has none for "
     "numbers: `a.x` is a number, and `and not` joins conditions; compare first, e.g. "
     "`a.x > 0 and not a.y > 3`", "a.x > 1 and (a.x > 0 and not a.y > 3) or a.y > 1"),
    ("c.core > 1 unless c.core > 5", 11, f"{UNLESS}; guardian has no member-wise `unless` "
     "of families: `c.core > 1 and not c.core > 5` holds while `c.core > 1` keeps a member "
     "and `c.core > 5` keeps none", "c.core > 1 and not c.core > 5"),
    ("a.x > bool 5", 6, "guardian has no `bool` modifier (drop it): a comparison is "
     "already a condition, true, false or unknown", "a.x > 5"),
    ("rate(a.x[5m]) > 1", 8, f'`[5m]` {RANGE}: did you mean `rate(a.x, "5m")`?',
     'rate(a.x, "5m") > 1'),
    ('rate(c.core{cpu="1"}[5m]) > 1', 20,
     f'`[5m]` {RANGE}: did you mean `rate(c.core{{cpu="1"}}, "5m")`?',
     'rate(c.core{cpu="1"}, "5m") > 1'),
    ("avg_over_time(a.x[5m]) > 1", 17,
     f'`[5m]` {RANGE}: did you mean `avg_over_time(a.x, "5m")`?',
     'avg_over_time(a.x, "5m") > 1'),
    ("increase(a.x[10m]) > 1", 12, f'`[10m]` {RANGE}: did you mean `increase(a.x, "10m")`?',
     'increase(a.x, "10m") > 1'),
    ("quantile_over_time(0.9, a.x[10m]) > 1", 27,
     f'`[10m]` {RANGE}: did you mean `quantile_over_time(0.9, a.x, "10m")`?',
     'quantile_over_time(0.9, a.x, "10m") > 1'),
    ("predict_linear(a.x[1h], 3600) < 0", 18,
     f'`[1h]` {RANGE}: did you mean `predict_linear(a.x, "1h", 3600)`?',
     'predict_linear(a.x, "1h", 3600) < 0'),
    ("irate(a.x[5m]) > 1", 9, "guardian has no irate (the last two samples); the nearest "
     'is rate over the window: `rate(a.x, "5m")`', 'rate(a.x, "5m") > 1'),
    ("present_over_time(a.x[5m])", 21,
     'guardian has no present_over_time: `not absent_over_time(a.x, "5m")`',
     'not absent_over_time(a.x, "5m")'),
    ("a.x[5m] > 1", 3, "`[5m]` is PromQL's range selector; guardian reads a window only in "
     'a time function, e.g. `max_over_time(a.x, "5m")`', 'max_over_time(a.x, "5m") > 1'),
    ("max_over_time(a.x[5m:1m]) > 1", 17, "guardian has no subqueries: a time function "
     "reads one signal's own samples, e.g. `max_over_time(x, \"5m\")`",
     'max_over_time(a.x, "5m") > 1'),
    ("rate(a.x, 5m) > 1", 10, 'a duration is a string in guardian: did you mean '
     '`rate(a.x, "5m")`?', 'rate(a.x, "5m") > 1'),
    ("rate(a.x, 300) > 1", 10, 'rate() needs a window as a duration string, e.g. '
     'rate(a.x, "300s")', 'rate(a.x, "300s") > 1'),
    ("a.x offset 5m > 1", 4, "guardian has no `offset`: a condition reads each signal's "
     'latest sample; the change within the last 5m is `delta(a.x, "5m")` (`increase` '
     "for a counter)", 'delta(a.x, "5m") > 1'),
    ("sum by (cpu) (c.core) > 5", 4, f"guardian has no `by` grouping: `sum(c.core)` "
     f"{NO_GROUPING}", "sum(c.core) > 5"),
    ("sum(c.core) by (cpu) > 5", 12, f"guardian has no `by` grouping: `sum(c.core)` "
     f"{NO_GROUPING}", "sum(c.core) > 5"),
    ("max without (cpu) (c.core) > 5", 4, f"guardian has no `without` grouping: "
     f"`max(c.core)` {NO_GROUPING}", "max(c.core) > 5"),
    ("c.core / on(cpu) c.core > 1", 9, f"guardian has no `on` {NO_MATCHING}",
     "c.core / c.core > 1"),
    ("c.core / ignoring(cpu) group_left c.core > 1", 9,
     f"guardian has no `ignoring` {NO_MATCHING}", "c.core / c.core > 1"),
    ('c.core{cpu=~"1"} > 1', 10, "guardian selects labels by glob, not regular expression: "
     'did you mean `c.core{cpu="1"}`?', 'c.core{cpu="1"} > 1'),
    ('n.stat{iface="eth0", stat=~"rx_.*"} > 1', 25, "guardian selects labels by glob, not "
     'regular expression: did you mean `n.stat{iface="eth0", stat="rx_*"}`?',
     'n.stat{iface="eth0", stat="rx_*"} > 1'),
    # an alternation: one selector per alternative (globs drawn from the regex), `or`
    ('n.stat{stat=~"rx|tx"} > 1', 11, f'{ONE_GLOB}`stat="rx"` and `stat="tx"` together '
     'select the members `rx|tx` does: did you mean '
     '`n.stat{stat="rx"} > 1 or n.stat{stat="tx"} > 1`?',
     'n.stat{stat="rx"} > 1 or n.stat{stat="tx"} > 1'),
    ('n.stat{iface=~"eth.*|ens.*"} > 1', 12, f'{ONE_GLOB}`iface="eth*"` and `iface="ens*"` '
     'together select the members `eth.*|ens.*` does: did you mean '
     '`n.stat{iface="eth*"} > 1 or n.stat{iface="ens*"} > 1`?',
     'n.stat{iface="eth*"} > 1 or n.stat{iface="ens*"} > 1'),
    ('a.x > 1 and rate(n.stat{iface=~"eth.*|ens.*"}, "5m") > 1', 29, f'{ONE_GLOB}'
     '`iface="eth*"` and `iface="ens*"` together select the members `eth.*|ens.*` does: '
     'did you mean `(rate(n.stat{iface="eth*"}, "5m") > 1 or rate(n.stat{iface="ens*"}, '
     '"5m") > 1)`?', 'a.x > 1 and (rate(n.stat{iface="eth*"}, "5m") > 1 or '
     'rate(n.stat{iface="ens*"}, "5m") > 1)'),
    # an aggregation over the union cannot be split with `or`: no condition is suggested
    ('max(n.stat{iface=~"eth.*|ens.*"}) > 1', 16, f'{ONE_GLOB}`iface="eth*"` and '
     '`iface="ens*"` together select the members `eth.*|ens.*` does, each in its own '
     'selector', 'max(max(n.stat{iface="eth*"}), max(n.stat{iface="ens*"})) > 1'),
    ('n.stat{iface=~"eth[0-9]+"} > 1', 12, "guardian selects labels by glob, not regular "
     f"expression, and no glob says what `eth[0-9]+` does ({GLOBS})",
     'n.stat{iface="eth[0-9]*"} > 1'),
    ('c.core{cpu!="1"} > 1', 10, "guardian has no `!=` label matcher: a selector keeps "
     f"the members whose label equals a value or matches a glob ({GLOBS})",
     'c.core{cpu="[!1]*"} > 1 or c.core{cpu="1?*"} > 1'),
    ('c.core{cpu=="1"} > 1', 10, 'a label matcher has one `=`: did you mean '
     '`c.core{cpu="1"}`?', 'c.core{cpu="1"} > 1'),
    ("topk(3, c.core) > 1", 0, "guardian has no topk: `max(x)` is the largest member, and "
     "a comparison keeps every member for which it holds (`x > 90`)", "c.core > 90"),
    ("quantile(0.9, c.core) > 1", 0, "guardian has no quantile over a family's members; "
     '`quantile_over_time(0.9, x, "5m")` is over one signal\'s samples in time',
     'quantile_over_time(0.9, c.core, "5m") > 1'),
]


@pytest.mark.parametrize(("text", "col", "message", "fixed"), CASES,
                         ids=[c[0] for c in CASES])
def test_promql_spelling_gets_guardians(text: str, col: int, message: str,
                                        fixed: str) -> None:
    with pytest.raises(ExprError) as info:
        compile_condition(text, CAT)
    assert (info.value.message, info.value.line, info.value.col) == (message, 1, col)
    compile_condition(fixed, CAT)  # what the message says to write is guardian's
    replacement = re.search(r"`([^`]+)`\??$", message)  # a message's closing suggestion
    if replacement and "x" not in re.findall(r"\w+", replacement[1]):  # not an example
        assert replacement[1] in fixed


@pytest.mark.parametrize("text", [
    'n.stat{stat="offset"} > 1',  # the words only count outside a selector
    'c.core(cpu="1") > 1 and c.core{cpu="[!1]*"} > 1',  # globs, the call form
    "a.x > 1  # && is only a comment here",
])
def test_valid_conditions_with_the_same_characters_pass(text: str) -> None:
    compile_condition(text, CAT)


def test_a_signal_named_like_a_keyword_is_a_signal() -> None:
    cat = {**CAT, "offset": SignalSpec("offset", "a signal named offset")}
    compile_condition("offset > 1 and a.x > 1", cat)


def test_error_is_located_in_the_rule_file(tmp_path: Path) -> None:
    from guardian.core.diagnostics import RuleError
    from guardian.policy.loader import load_rules
    text = GOOD_RULES.replace('when = "memcg.dying > 1"',
                              "when = '''\nmemcg.dying > 1\n  && rate(memcg.live[5m]) > 0\n'''")
    with pytest.raises(RuleError) as info:
        load_rules([write(tmp_path, "r.toml", text)])
    got = [str(d).replace(str(tmp_path) + "/", "") for d in info.value.diagnostics]
    assert got == ["r.toml:8:3: in `when`: `&&` is written `and` in guardian"]


REVIEW_CAT = {s.name: s for s in (
    SignalSpec("memcg.dying", "dying cgroups"), SignalSpec("memcg.live", "live cgroups"),
    SignalSpec("nic.stat", "per nic", labels=("iface", "stat")),
)}


@pytest.mark.parametrize(("text", "suggested"), [
    ("memcg.dying unless memcg.live", "memcg.dying > 0 and not memcg.live > 0"),
    ('nic.stat{iface=~"eth.*|ens.*"} > 5',
     'nic.stat{iface="eth*"} > 5 or nic.stat{iface="ens*"} > 5'),
])
def test_the_reviewers_did_you_means_compile(text: str, suggested: str) -> None:
    """Issue 40's review: following the did-you-mean for these gave "'and' needs
    conditions, got a number", and a made-up `iface="1*"`; what is offered now compiles."""
    with pytest.raises(ExprError) as info:
        compile_condition(text, REVIEW_CAT)
    offered = re.findall(r"`([^`]+)`", info.value.message)[-1]
    assert offered == suggested
    compile_condition(offered, REVIEW_CAT)


@pytest.mark.parametrize("regex", ["eth.*|ens.*", "rx_.*", "a.c|b", "x.+|y"])
def test_globs_select_what_the_regex_does(regex: str) -> None:
    from fnmatch import fnmatchcase

    from guardian.policy.habits import globs_of
    globs = globs_of(regex)
    assert globs is not None
    for value in ("eth0", "ens5", "lo", "rx_bytes", "tx_bytes", "abc", "ac", "b", "x", "xy",
                  "y", "eth", ""):
        assert any(fnmatchcase(value, g) for g in globs) == bool(re.fullmatch(regex, value))
