"""Bounded per-signal history and the time functions conditions use over it.

Only signals that some rule passes to a time function are kept, each for the longest
window any rule asks of it. Samples are (time, value) pairs; a tick where a signal has no
value adds no sample, so a gap never reads as zero.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Mapping
from typing import Any

from .model.runtime import Matcher, sel
from .snapshot import Family, Labels, Value

MAX_SAMPLES = 10_000  # per signal, whatever the window: bounds memory at fast tick rates

Series = list[tuple[float, float]]


def _increase(s: Series) -> float:
    """Counter increase; a drop is a counter reset (counting restarts from zero)."""
    total = 0.0
    prev = s[0][1]
    for _, cur in s:
        total += cur - prev if cur >= prev else cur
        prev = cur
    return total


def _rate(s: Series) -> float | None:
    span = s[-1][0] - s[0][0]
    return _increase(s) / span if span > 0 else None


_FUNCS: dict[str, tuple[int, Callable[[Series], float | None]]] = {
    # name: (fewest samples needed, function)
    "rate": (2, _rate),
    "increase": (2, _increase),
    "delta": (2, lambda s: s[-1][1] - s[0][1]),
    "max_over_time": (1, lambda s: max(v for _, v in s)),
    "min_over_time": (1, lambda s: min(v for _, v in s)),
    "avg_over_time": (1, lambda s: sum(v for _, v in s) / len(s)),
}


class History:
    """Samples of the signals rules look back on, and queries over them."""

    def __init__(self, windows: Mapping[str, float]) -> None:
        self.windows = dict(windows)
        self.samples: dict[str, deque[tuple[float, Value]]] = {
            name: deque(maxlen=MAX_SAMPLES) for name in self.windows
        }
        self.now = 0.0
        # rules often ask the same question; answers hold until the next record()
        self.memo: dict[tuple[str, str, object, float], float | Family | None] = {}

    def record(self, now: float, values: Mapping[str, Any]) -> None:
        self.now = now
        self.memo.clear()
        for name, window in self.windows.items():
            dq = self.samples[name]
            v = values.get(name)
            if v is not None:
                if dq and dq[-1][0] >= now:
                    dq.pop()  # same instant twice (an event wake-up): keep the newest
                dq.append((now, v))
            horizon = now - window
            while dq and dq[0][0] < horizon:
                dq.popleft()

    def _window(self, name: str, window: float) -> list[tuple[float, Value]]:
        dq = self.samples.get(name)
        if not dq:
            return []
        horizon = self.now - window
        if dq[0][0] >= horizon:  # the usual case: the whole kept history is the window
            return list(dq)
        return [(t, v) for t, v in dq if t >= horizon]

    def query(
        self, fn: str, name: str, matchers: tuple[Matcher, ...] | None, window: float
    ) -> float | Family | None:
        key = (fn, name, matchers, window)
        if key in self.memo:
            return self.memo[key]
        result = self._query(fn, name, matchers, window)
        self.memo[key] = result
        return result

    def _query(
        self, fn: str, name: str, matchers: tuple[Matcher, ...] | None, window: float
    ) -> float | Family | None:
        need, func = _FUNCS[fn]
        samples = self._window(name, window)
        if not samples:
            return None
        if not isinstance(samples[-1][1], dict):  # a scalar signal: every sample a float
            return func(samples) if len(samples) >= need else None  # type: ignore[arg-type]
        per_key: dict[Labels, Series] = {}
        for t, fam in samples:
            if isinstance(fam, dict):
                chosen = sel(fam, matchers) if matchers else fam
                for k, v in (chosen or {}).items():
                    per_key.setdefault(k, []).append((t, v))
        out: Family = {}
        for k, s in per_key.items():
            if len(s) >= need and (r := func(s)) is not None:
                out[k] = r
        return out

    def state(self) -> dict[str, list[tuple[float, Value]]]:
        return {name: list(dq) for name, dq in self.samples.items()}
