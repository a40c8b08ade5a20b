"""History: the incremental rows agree with the plain definition of each time function
(every sample of every member in the window, recomputed from scratch), whatever the
members do: appear, vanish, come back, reset, or report twice at one instant."""

from __future__ import annotations

import math
from itertools import pairwise
from typing import cast

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from guardian.core.snapshot import labels_of
from guardian.engine.history import History
from guardian.model.runtime import Lookback, Matcher, matches

FUNCS = ["rate", "increase", "delta", "max_over_time", "min_over_time", "avg_over_time"]
KEYS = [labels_of({"q": str(i), "stat": s}) for i in range(4) for s in ("tx", "rx")]
TX = (("stat", "tx"), )
MATCHERS: tuple[Matcher, ...] = (("stat", "tx", False),)


def reference(records: list[tuple[float, dict[str, object]]], fn: str, name: str,
              matchers: object, window: float, keep: float) -> object:
    """The definition: per member, its samples with time in (now - window, now], open on
    the left as Prometheus' range selectors are (promql/engine.go: a range vector holds
    the samples after now - range, up to now)."""
    samples: dict[float, object] = {}
    for t, values in records:  # a later value at the same time replaces the earlier
        if values.get(name) is not None:
            samples = {k: v for k, v in samples.items() if k < t}
            samples[t] = values[name]
    now = records[-1][0]
    window = min(window, keep)
    inside = sorted((t, v) for t, v in samples.items() if t > now - window)
    if not inside:
        return None
    scalar = not isinstance(inside[-1][1], dict)
    per: dict[object, list[tuple[float, float]]] = {}
    for t, v in inside:
        fam = {(): v} if not isinstance(v, dict) else v
        for k, x in fam.items():
            if matchers is None or matches(k, matchers):  # type: ignore[arg-type]
                per.setdefault(k, []).append((t, cast(float, x)))
    out = {}
    for k, s in per.items():
        vals = [x for _, x in s]
        if fn in ("rate", "increase", "delta"):
            if len(s) < 2:
                continue
            inc = sum(b - a if b >= a else b for a, b in pairwise(vals))
            if fn == "delta":
                out[k] = vals[-1] - vals[0]
            elif fn == "increase":
                out[k] = inc
            elif s[-1][0] > s[0][0]:
                out[k] = inc / (s[-1][0] - s[0][0])
        elif fn == "max_over_time":
            out[k] = max(vals)
        elif fn == "min_over_time":
            out[k] = min(vals)
        else:
            out[k] = math.fsum(vals) / len(vals)
    return out.get(()) if scalar else out


def close(a: object, b: object) -> bool:
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(close(a[k], b[k]) for k in a)
    if isinstance(a, float) and isinstance(b, float):
        return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-6)
    return a == b


member = st.one_of(st.none(), st.integers(0, 50).map(float))
tick = st.tuples(st.integers(0, 3),  # time step: 0 is the same instant again
                 st.one_of(st.none(), st.lists(member, min_size=len(KEYS),
                                               max_size=len(KEYS))),
                 st.one_of(st.none(), st.integers(0, 50).map(float)))


@settings(max_examples=300, deadline=None)
@given(st.lists(tick, min_size=1, max_size=120), st.sampled_from(FUNCS),
       st.sampled_from([3.0, 10.0, 40.0]))
def test_rows_agree_with_the_definition(ticks: list[tuple[int, list[float | None] | None,
                                                           float | None]],
                                        fn: str, window: float) -> None:
    keep = 40.0
    # names and (name, matchers) pairs mixed: History takes them, its annotation lists
    # only mappings of one kind
    hist = History({("n.stat", MATCHERS): keep, ("n.stat", None): keep,  # type: ignore[arg-type]
                    "a.x": keep})
    records: list[tuple[float, dict[str, object]]] = []
    now = 0.0
    for step, members, scalar in ticks:
        now += step
        values: dict[str, object] = {}
        if members is not None:
            values["n.stat"] = {k: v for k, v in zip(KEYS, members, strict=True)
                                if v is not None}
        if scalar is not None:
            values["a.x"] = scalar
        hist.record(now, values)
        records.append((now, values))
        for name, m in (("n.stat", MATCHERS), ("n.stat", None), ("a.x", None)):
            got = hist.query(fn, name, m, window)
            want = reference(records, fn, name, m, window, keep)
            assert close(got, want), (fn, name, m, window, now, got, want)


def test_narrowing_a_whole_family_lookback() -> None:
    """A query whose matchers no rule declared is answered from the whole family."""
    hist = History({"n.stat": 60.0})
    for t in range(3):
        hist.record(float(t), {"n.stat": {k: float(t) for k in KEYS}})
    got = hist.query("increase", "n.stat", MATCHERS, 60.0)
    assert isinstance(got, dict) and set(got) == {k for k in KEYS if ("stat", "tx") in k}
    assert set(got.values()) == {2.0}


def test_only_selected_members_are_kept_and_gone_members_are_forgotten() -> None:
    lookbacks: dict[Lookback, float] = {("n.stat", MATCHERS): 10.0}
    hist = History(lookbacks)
    store = hist.stores[("n.stat", MATCHERS)]
    for t in range(100):  # members come and go: a fresh q label every tick
        fam = {labels_of({"q": f"{t}-{i}", "stat": s}): 1.0 for i in range(3)
               for s in ("tx", "rx")}
        hist.record(float(t), {"n.stat": fam})
    assert all(("stat", "tx") in k for k in store.keys)
    assert len(store.keys) <= 3 * (10 + 1) + 3 * 64  # the window's members, and a slack
    assert len(store.selected) < 1000


def test_answers_hold_across_compaction_of_departed_members() -> None:
    """Members come and go for 300 ticks (so departed ones are compacted away several
    times): every answer, every tick, equals the definition's."""
    hist = History({"n.stat": 10.0})
    records: list[tuple[float, dict[str, object]]] = []
    keys = [labels_of({"q": str(i), "stat": "tx"}) for i in range(200)]
    store = hist.stores[("n.stat", None)]
    for t in range(300):
        # a sliding population (members leave for good), with gaps within it
        fam = {k: float(t // 3 + i) for i, k in enumerate(keys)
               if t // 2 <= i < t // 2 + 30 and (t // 7 + i) % 5}
        hist.record(float(t), {"n.stat": fam})
        records.append((float(t), {"n.stat": fam}))
        for fn in FUNCS:
            got = hist.query(fn, "n.stat", None, 10.0)
            assert close(got, reference(records, fn, "n.stat", None, 10.0, 10.0)), (fn, t)
        assert len(store.keys) <= 30 + 10 // 2 + 64  # departed members are forgotten


@pytest.mark.parametrize("fn", FUNCS)
def test_a_reload_keeps_history(fn: str) -> None:
    old = History({"a.x": 60.0})
    for t in range(5):
        old.record(float(t), {"a.x": float(t * t)})
    new = History({"a.x": 120.0}, previous=old)
    assert new.query(fn, "a.x", None, 60.0) == old.query(fn, "a.x", None, 60.0)


def test_a_gap_does_not_change_a_members_rate() -> None:
    """Before: a member whose window ends on a gap took a path that turned times into
    float seconds before subtracting (1.002 s to 16.002 s is 14.999999999999998 s), so
    the same samples gave two rates; times are whole milliseconds, subtracted first."""
    a, b = labels_of({"i": "a"}), labels_of({"i": "b"})
    whole, gappy = History({"m": 60.0}), History({"m": 60.0})
    whole.record(1.002, {"m": {a: 0.0, b: 0.0}})
    gappy.record(1.002, {"m": {a: 0.0, b: 0.0}})
    whole.record(16.002, {"m": {a: 30.0, b: 1.0}})
    gappy.record(16.002, {"m": {a: 30.0}})  # b has no sample: the per-member path
    fast, slow = whole.query("rate", "m", None, 60.0), gappy.query("rate", "m", None, 60.0)
    assert isinstance(fast, dict) and isinstance(slow, dict)
    assert fast[a] == slow[a] == 2.0
