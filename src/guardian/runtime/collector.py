"""Run the sources once and build a :class:`Snapshot`.

A source that raises yields no value for any of its signals, and its error is counted in
``guardian.source_errors{source=...}``: a missing number must never fire or clear a rule.
A source's output is held to its specs (declared names, label names, finite numbers); a
signal that breaks them has no value, and the collection counts as an error of its
source, logged once per signal and problem; so does a collection whose source reports
:meth:`~guardian.plugin.contract.Source.faults` (members it could not read).

A source with nothing configured to read (:meth:`~guardian.plugin.contract.Source.unconfigured`:
no probes, no exposition endpoints) does not run; it is named in ``unconfigured`` as well as
``unavailable``, so that what sums up health can tell the operator's choice from a fault.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import Any

from guardian.core.errors import in_words
from guardian.core.snapshot import SignalSpec, Snapshot, check_values, labels_of
from guardian.hostio.host import Host
from guardian.plugin.contract import Source
from guardian.plugin.registry import Registry
from guardian.runtime.config import Config

log = logging.getLogger("guardian.collector")

SOURCE_ERRORS = SignalSpec(
    "guardian.source_errors", "collections of a source that failed, since start",
    labels=("source",), counter=True,
)


class Collector:
    """The available sources of one host, collected together."""

    def __init__(self, host: Host, sources: Iterable[Source[Any]]) -> None:
        self.host = host
        self.sources: list[Source[Any]] = []
        # every source that does not run, and why; those with nothing configured to read
        # are also in ``unconfigured`` (the operator's choice, not a fault of the host)
        self.unavailable: dict[str, str] = {}
        self.unconfigured: dict[str, str] = {}
        for src in sources:
            try:
                lacks = src.unconfigured()
            except Exception as exc:  # a plugin's bug: it does not run, as a fault
                self.unavailable[src.name] = f"configuration check failed: {in_words(exc)}"
                continue
            if lacks:
                self.unconfigured[src.name] = self.unavailable[src.name] = lacks
                continue
            why = _unavailable(src)
            if why:
                self.unavailable[src.name] = why
            else:
                self.sources.append(src)
        self.error_counts = {s.name: 0 for s in self.sources}
        self._specs = {s.name: {spec.name: spec for spec in s.specs} for s in self.sources}
        self._told: set[tuple[str, str, str]] = set()  # (source, signal, problem) logged

    @classmethod
    def from_registry(cls, host: Host, registry: Registry, config: Config | None = None,
                      only: Iterable[str] | None = None) -> Collector:
        """Every registered source not disabled in ``config`` (or only those named)."""
        cfg = config or Config()
        names = set(only) if only is not None else None
        chosen = [src(host, cfg.sources.get(n)) for n, src in sorted(registry.sources.items())
                  if (names is None or n in names) and n not in cfg.disabled_sources]
        return cls(host, chosen)

    def follow(self, wake: Callable[[str], None]) -> list[str]:
        """Start the event followers of sources that have them; their names."""
        return [s.name for s in self.sources if s.follow(wake)]

    def collect(self, now: float) -> Snapshot:
        snap = Snapshot(now, checked=True)
        for src in self.sources:
            try:
                raw = src.collect(now)
                if not isinstance(raw, dict):
                    raise TypeError(f"collect() returned {type(raw).__name__}, not a dict")
            except Exception as exc:
                self.error_counts[src.name] += 1
                snap.errors[src.name] = in_words(exc)
                log.debug("source %s failed: %s", src.name, exc)
                continue
            good, problems = check_values(raw, self._specs[src.name])
            snap.values.update(good)
            if problems:
                self.error_counts[src.name] += 1
                snap.errors[src.name] = "; ".join(f"{n}: {why}" for n, why in problems.items())
                for name, why in problems.items():
                    if (src.name, name, why) not in self._told:
                        self._told.add((src.name, name, why))
                        log.error("source %s: signal %s has no value: %s", src.name, name,
                                  why)
            faults = _faults(src)  # members it could not read, the rest standing
            if faults:
                if not problems:
                    self.error_counts[src.name] += 1
                snap.errors[src.name] = "; ".join(
                    [*([snap.errors[src.name]] if problems else []), *faults])
        snap.values[SOURCE_ERRORS.name] = {
            labels_of({"source": n}): float(c) for n, c in self.error_counts.items()
        }
        return snap

    def close(self) -> None:
        for src in self.sources:
            src.close()


def _faults(src: Source[Any]) -> list[str]:
    try:
        return [str(f) for f in src.faults()]
    except Exception as exc:
        return [f"faults() failed: {exc}"]


def _unavailable(src: Source[Any]) -> str | None:
    try:
        return src.unavailable()
    except Exception as exc:
        return f"availability check failed: {in_words(exc)}"
