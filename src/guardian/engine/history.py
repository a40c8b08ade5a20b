"""Bounded history of what rules look back on, and the time functions over it.

History is kept per *lookback*: a signal with the label matchers a rule's time function
gives it, for the longest window any rule asks of it. Matchers are resolved once, when a
member first appears, and only the members they select are kept. Each tick appends one
row: an array of floats, one per kept member (NaN where a member has no value at that
tick), and drops the rows older than the window. Counter resets are noted as rows arrive,
so ``rate``, ``increase`` and ``delta`` read only a window's first and last rows and the
resets between them; the ``*_over_time`` functions read the window's rows in C. A tick
where a signal has no value adds no row, so a gap never reads as zero.

Memory is bounded by construction: per lookback, rows x members x 8 bytes, with rows at
most ``min(window / tick, MAX_ROWS)`` and members those some rule selects that had a value
within the window.
"""

from __future__ import annotations

import math
from array import array
from bisect import bisect_right
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from itertools import islice, pairwise, repeat
from operator import gt, sub, truediv
from typing import Any

from guardian.core.snapshot import Family, Labels
from guardian.model.runtime import Lookback, Matcher, matches, sel

MAX_ROWS = 10_000  # per lookback, whatever the window: bounds memory at fast tick rates
NAN = math.nan

Series = list[tuple[int, float]]  # (time in whole milliseconds, value)
# one member's samples in the window, the function's number argument (quantile_over_time's
# quantile, predict_linear's seconds ahead) and the evaluation time, in milliseconds
Func = Callable[[Series, float, int], "float | None"]


def _fsum(values: Iterable[float]) -> float:
    """An exactly rounded sum; Inf and -Inf together are NaN (as PromQL's sums give),
    and finite values overflowing are +-Inf."""
    values = list(values)
    try:
        return math.fsum(values)
    except ValueError:
        return NAN
    except OverflowError:
        return sum(values)


def _increase(s: Series, _arg: float = 0.0, _now: int = 0) -> float:
    """Counter increase; a drop is a counter reset (counting restarts from zero)."""
    total = 0.0
    prev = s[0][1]
    for _, cur in s:
        total += cur - prev if cur >= prev else cur
        prev = cur
    return total


def _rate(s: Series, _arg: float, _now: int) -> float | None:
    span_ms = s[-1][0] - s[0][0]  # whole milliseconds: subtracted before any division
    return _increase(s) / (span_ms / 1000) if span_ms > 0 else None


def _quantile(s: Series, q: float, _now: int) -> float:
    """Prometheus' quantile (promql/quantile.go): linear between the closest ranks;
    below 0 is -Inf and above 1 +Inf."""
    if math.isnan(q):
        return NAN
    if q < 0:
        return -math.inf
    if q > 1:
        return math.inf
    values = sorted(v for _, v in s)
    rank = q * (len(values) - 1)
    lower = max(0, math.floor(rank))
    upper = min(len(values) - 1, lower + 1)
    weight = rank - math.floor(rank)
    return values[lower] * (1 - weight) + values[upper] * weight


def _stddev(s: Series, _arg: float, _now: int) -> float:
    """Population standard deviation (Prometheus' stddev_over_time), by Welford's update."""
    mean = aux = 0.0
    for n, (_, v) in enumerate(s, start=1):
        delta = v - mean
        mean += delta / n
        aux += delta * (v - mean)
    return math.sqrt(aux / len(s))


def _predict_linear(s: Series, ahead: float, now: int) -> float:
    """Least squares over the window, x in seconds from the evaluation time (Prometheus'
    linearRegression): the value ``ahead`` seconds after it. A flat series is itself."""
    first = s[0][1]
    if all(v == first for _, v in s):
        return NAN if math.isinf(first) else first
    n = len(s)
    xs = [(t - now) / 1000 for t, _ in s]
    ys = [v for _, v in s]
    sum_x, sum_y = _fsum(xs), _fsum(ys)
    cov_xy = _fsum(x * y for x, y in zip(xs, ys, strict=True)) - sum_x * sum_y / n
    var_x = _fsum(x * x for x in xs) - sum_x * sum_x / n
    slope = cov_xy / var_x
    intercept = sum_y / n - slope * sum_x / n
    return slope * ahead + intercept


def _changes(s: Series, _arg: float, _now: int) -> float:
    """How often the value changed (a gap's missing samples are not values: no NaN)."""
    return float(sum(1 for (_, a), (_, b) in pairwise(s) if a != b))


def _resets(s: Series, _arg: float, _now: int) -> float:
    return float(sum(1 for (_, a), (_, b) in pairwise(s) if b < a))


_FUNCS: dict[str, tuple[int, Func]] = {
    # name: (fewest samples needed, function over one member's samples in the window)
    "rate": (2, _rate),
    "increase": (2, _increase),
    "delta": (2, lambda s, _a, _n: s[-1][1] - s[0][1]),
    "max_over_time": (1, lambda s, _a, _n: max(v for _, v in s)),
    "min_over_time": (1, lambda s, _a, _n: min(v for _, v in s)),
    "avg_over_time": (1, lambda s, _a, _n: _fsum(v for _, v in s) / len(s)),
    "sum_over_time": (1, lambda s, _a, _n: _fsum(v for _, v in s)),
    "count_over_time": (1, lambda s, _a, _n: float(len(s))),
    "last_over_time": (1, lambda s, _a, _n: s[-1][1]),
    "quantile_over_time": (1, _quantile),
    "stddev_over_time": (1, _stddev),
    "changes": (1, _changes),
    "resets": (1, _resets),
    "predict_linear": (2, _predict_linear),
}
_ENDS = {"rate", "increase", "delta"}  # functions of a window's ends (and resets) only
_COLUMNS = {"max_over_time", "min_over_time", "avg_over_time"}  # computed per column


def _ms(seconds: float) -> int:
    return round(seconds * 1000)


class _Rows:
    """The rows of one lookback: kept members, their values per tick, counter resets."""

    def __init__(self, matchers: tuple[Matcher, ...] | None, window: float) -> None:
        self.matchers = matchers
        self.window = window
        self.window_ms = _ms(window)
        # times are whole milliseconds: a window's edges are exact, whatever the tick
        self.times: deque[int] = deque(maxlen=MAX_ROWS)
        self.scalar = False
        self.keys: list[Labels] = []
        self.index: dict[Labels, int] = {}
        self.selected: dict[Labels, bool] = {}  # every member seen: does it match?
        self.rows: deque[array[float]] = deque(maxlen=MAX_ROWS)
        self.complete: deque[bool] = deque(maxlen=MAX_ROWS)  # every kept member has a value
        self.last = array("d")  # each member's newest value (NaN: none yet)
        self.seen = array("d")  # when each member last had a value (slow path only) ...
        self.all_seen = (-math.inf, 0)  # ... and when the first n members all had one
        self.resets: deque[tuple[int, int, float]] = deque()  # time, member, value before
        self.undo: tuple[array[float], int] | None = None
        self.ticks_since_compaction = 0
        self.order: list[Labels] | None = None  # the family's members at the last change
        self.positions: list[int] = []  # each kept member's place in ``order`` (-1: none)
        self.all_placed = False
        self.identity = False  # kept members are ``order`` itself

    # -- recording ---------------------------------------------------------------------
    def record(self, now: int, value: object) -> None:
        """This tick's value (``now`` in whole milliseconds)."""
        if value is not None:
            if self.times and self.times[-1] >= now:
                self._drop_newest()  # the same instant twice (an event wake-up): keep newest
                if self.times and self.times[-1] >= now:  # the clock went back: start over
                    self.__init__(self.matchers, self.window)  # type: ignore[misc]
            if isinstance(value, dict):
                self.scalar = False
                self._append(now, value)
            elif isinstance(value, int | float):
                self.scalar = True
                self._append(now, {(): float(value)})
        self._evict(now - self.window_ms)

    def _admit(self, fam: Mapping[Labels, float]) -> None:
        """Give members seen for the first time their column, if the matchers pick them."""
        if fam.keys() <= self.selected.keys():
            return
        for key in fam.keys() - self.selected.keys():
            chosen = self.matchers is None or matches(key, self.matchers)
            self.selected[key] = chosen
            if chosen:
                self.index[key] = len(self.keys)
                self.keys.append(key)
        # a copy: ``last`` may be the newest row itself, which must not change
        self.last = self.last + array("d", repeat(NAN, len(self.keys) - len(self.last)))
        self.seen.extend(repeat(-math.inf, len(self.keys) - len(self.seen)))

    def _row(self, fam: Mapping[Labels, float]) -> tuple[array[float], bool]:
        """This tick's row, and whether every kept member has a value in it."""
        order = list(fam)
        if order == self.order:  # the same members in the same order: place by position
            if self.identity:
                return array("d", fam.values()), True
            vals = [*fam.values(), NAN]  # position -1: a kept member the family lacks
            return array("d", map(vals.__getitem__, self.positions)), self.all_placed
        self._admit(fam)
        keys = self.keys
        pos = {k: i for i, k in enumerate(order)}
        self.order = order
        self.positions = [pos.get(k, -1) for k in keys]
        self.all_placed = -1 not in self.positions
        self.identity = self.all_placed and len(keys) == len(order) \
            and self.positions == list(range(len(keys)))
        return array("d", map(fam.get, keys, repeat(NAN))), self.all_placed

    def _append(self, now: int, fam: Mapping[Labels, float]) -> None:
        row, complete = self._row(fam)
        last = self.last
        self.undo = (last, len(self.resets))
        if any(map(gt, last, row)):  # NaN compares false: only real drops are resets
            self.resets.extend((now, i, a) for i, (a, b) in enumerate(zip(last, row, strict=False))
                               if a > b)
        if complete:
            self.last = row
            self.all_seen = (now, len(row))
        else:
            merged = array("d", last)
            seen = self.seen
            for i, v in enumerate(row):
                if v == v:
                    merged[i] = v
                    seen[i] = now
            self.last = merged
        self.times.append(now)
        self.rows.append(row)
        self.complete.append(complete)
        self.ticks_since_compaction += 1
        if not complete and self.ticks_since_compaction > max(len(self.rows), 64):
            self._compact(fam)

    def _drop_newest(self) -> None:
        self.times.pop()
        self.rows.pop()
        self.complete.pop()
        if self.undo is not None:
            self.last, n_resets = self.undo
            while len(self.resets) > n_resets:
                self.resets.pop()
            self.undo = None
        self.last = self.last + array("d", repeat(NAN, len(self.keys) - len(self.last)))

    def _evict(self, horizon: int) -> None:
        """Drop rows no window reaches: windows are open on the left, (t - w, t]."""
        times = self.times
        while times and times[0] <= horizon:
            times.popleft()
            self.rows.popleft()
            self.complete.popleft()
        while self.resets and self.resets[0][0] <= horizon:
            self.resets.popleft()

    def _compact(self, fam: Mapping[Labels, float]) -> None:
        """Forget members with no value in the window, and matcher answers for members
        gone from the newest row (they are asked again if they come back)."""
        self.ticks_since_compaction = 0
        oldest = self.times[0] if self.times else math.inf
        all_t, all_n = self.all_seen
        alive = [i for i, t in enumerate(self.seen)
                 if t >= oldest or (i < all_n and all_t >= oldest)]
        if len(alive) < len(self.keys):
            n = len(self.keys)
            remap = {old: new for new, old in enumerate(alive)}
            self.rows = deque((array("d", map((r + array("d", repeat(NAN, n - len(r))))
                                              .__getitem__, alive)) for r in self.rows),
                              maxlen=MAX_ROWS)
            self.last = array("d", map(self.last.__getitem__, alive))
            self.seen = array("d", map(self.seen.__getitem__, alive))
            self.all_seen = (all_t, sum(1 for i in alive if i < all_n))
            self.resets = deque((t, remap[i], a) for t, i, a in self.resets if i in remap)
            self.keys = [self.keys[i] for i in alive]
            self.index = {k: i for i, k in enumerate(self.keys)}
            self.undo = None
            self.order = None
        prune = len(self.selected) - len(self.keys) > 2 * len(fam) + 64
        self.selected = {k: chosen for k, chosen in self.selected.items()
                         if (k in self.index if chosen else not prune or k in fam)}

    # -- queries -----------------------------------------------------------------------
    def query(self, fn: str, now: int, window: int, arg: float = 0.0
              ) -> float | Family | None:
        """``fn`` over the window (now - window, now], as Prometheus 3's range selectors
        (in whole milliseconds)."""
        i0 = bisect_right(self.times, now - window)
        n_rows = len(self.rows) - i0
        if n_rows <= 0:
            return None
        need, func = _FUNCS[fn]
        if n_rows < need:
            out: dict[Labels, float] = {}
        elif fn in _ENDS and self.complete[i0] and self.complete[-1] \
                and len(self.rows[i0]) == len(self.rows[-1]):
            out = self._ends(fn, i0)
        elif fn in _COLUMNS and all(islice(self.complete, i0, None)) \
                and len(self.rows[i0]) == len(self.rows[-1]):
            out = self._over_time(fn, i0)
        else:
            out = self._per_member(func, need, i0, arg, now)
        if self.scalar:
            return out.get(())
        return out

    def _ends(self, fn: str, i0: int) -> dict[Labels, float]:
        first_t, last_t = self.times[i0], self.times[-1]
        diffs = list(map(sub, self.rows[-1], self.rows[i0]))
        if fn != "delta":
            for t, i, before in reversed(self.resets):
                if t <= first_t:
                    break
                diffs[i] += before
        if fn == "rate":
            if last_t <= first_t:
                return {}
            diffs = list(map(truediv, diffs, repeat((last_t - first_t) / 1000)))
        return dict(zip(self.keys, diffs, strict=False))

    def _over_time(self, fn: str, i0: int) -> dict[Labels, float]:
        cols = list(islice(self.rows, i0, None))
        vals: Iterable[float]
        if len(cols) == 1:
            vals = cols[0]
        elif fn == "max_over_time":
            vals = map(max, *cols)
        elif fn == "min_over_time":
            vals = map(min, *cols)
        else:
            vals = map(truediv, map(_fsum, zip(*cols, strict=False)), repeat(len(cols)))
        return dict(zip(self.keys, vals, strict=False))

    def _per_member(self, func: Func, need: int, i0: int, arg: float, now: int
                    ) -> dict[Labels, float]:
        rows = list(islice(self.rows, i0, None))
        times = list(islice(self.times, i0, None))
        out: dict[Labels, float] = {}
        for i, key in enumerate(self.keys):
            s = [(t, r[i]) for t, r in zip(times, rows, strict=True)
                 if i < len(r) and r[i] == r[i]]
            if len(s) >= need and (v := func(s, arg, now)) is not None:
                out[key] = v
        return out


class History:
    """The lookbacks rules need, and the time-function queries conditions make over them.

    ``lookbacks`` maps a signal name, or a (name, matchers) pair, to its longest window.
    """

    def __init__(self, lookbacks: Mapping[str, float] | Mapping[Lookback, float],
                 previous: History | None = None) -> None:
        self.stores: dict[Lookback, _Rows] = {}
        for key, window in lookbacks.items():
            lb: Lookback = (key, None) if isinstance(key, str) else key
            kept = previous.stores.get(lb) if previous is not None else None
            if kept is not None:
                kept.window, kept.window_ms = window, _ms(window)
                self.stores[lb] = kept
            else:
                self.stores[lb] = _Rows(lb[1], window)
        self.now: float = previous.now if previous is not None else 0.0
        self.now_ms = _ms(self.now)
        self.windows_ms: dict[float, int] = {}  # each window a condition asks, in ms
        # rules often ask the same question; answers hold until the next record()
        self.memo: dict[tuple[str, str, object, float, float], float | Family | None] = {}

    def record(self, now: float, values: Mapping[str, Any]) -> None:
        self.now = now
        self.now_ms = now_ms = _ms(now)
        self.memo.clear()
        for (name, _), rows in self.stores.items():
            rows.record(now_ms, values.get(name))

    def query(
        self, fn: str, name: str, matchers: tuple[Matcher, ...] | None, window: float,
        arg: float = 0.0,
    ) -> float | Family | None:
        key = (fn, name, matchers, window, arg)
        if key in self.memo:
            return self.memo[key]
        window_ms = self.windows_ms.get(window)
        if window_ms is None:
            window_ms = self.windows_ms[window] = _ms(window)
        rows = self.stores.get((name, matchers))
        if rows is not None:
            result = rows.query(fn, self.now_ms, window_ms, arg)
        elif matchers and (whole := self.stores.get((name, None))) is not None:
            got = whole.query(fn, self.now_ms, window_ms, arg)  # narrowed after the fact
            result = sel(got, matchers) if isinstance(got, dict) else got
        else:
            result = None
        self.memo[key] = result
        return result
