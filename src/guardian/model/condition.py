"""A compiled condition as the engine evaluates it: the signals it reads and one
function; :mod:`guardian.policy.expr` compiles rule text into it."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from guardian.core.snapshot import Family
from guardian.model import runtime
from guardian.model.runtime import Lookback, Matcher


class TimeFunctions(Protocol):
    """History queries a compiled condition calls (see :class:`guardian.engine.history.History`)."""

    def query(
        self, fn: str, name: str, matchers: tuple[Matcher, ...] | None, window: float,
        arg: float = 0.0,
    ) -> float | Family | None: ...


@dataclass(frozen=True)
class SignalRef:
    """A signal as a condition names it, possibly narrowed by label matchers."""

    name: str
    matchers: tuple[Matcher, ...] | None

    @property
    def key(self) -> str:
        if not self.matchers:
            return self.name
        return self.name + "{" + ", ".join(f'{k}="{v}"' for k, v, _ in self.matchers) + "}"

    def value(self, values: Mapping[str, Any]) -> float | Family | None:
        v = values.get(self.name)
        if self.matchers is not None and isinstance(v, dict):
            return runtime.sel(v, self.matchers)
        return v


CompiledFn = Callable[[Mapping[str, Any], TimeFunctions], "bool | Family | None"]


@dataclass
class Condition:
    """A compiled condition: call ``fn(values, history)``; a family result holds when
    non-empty."""

    text: str
    fn: CompiledFn
    refs: list[SignalRef]
    lookbacks: dict[Lookback, float]  # what time functions read -> longest window
    source: str = ""

    @property
    def windows(self) -> dict[str, float]:
        """Signal name -> the longest window any time function asks of it."""
        out: dict[str, float] = {}
        for (name, _), w in self.lookbacks.items():
            out[name] = max(out.get(name, 0.0), w)
        return out
