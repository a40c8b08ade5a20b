"""Prometheus exposition as a source: local endpoints and textfile-collector files.

Endpoints (dcgm-exporter's ``http://127.0.0.1:9400/metrics``, kubelet's, an
application's) are scraped and ``*.prom`` files of node_exporter's textfile-collector
directories read by a worker thread, every ``interval``, each within ``timeout`` and
``max_bytes``: a collection only takes the latest results, so a slow endpoint never holds
the loop. Files are opened without blocking and must be regular (a FIFO or a device named
``x.prom`` is refused, never waited on). The text is parsed with prometheus_client's
parser.

Every sample becomes a member of ``prom.sample{target,metric,series}``: ``metric`` is the
sample's name as exposed (``DCGM_FI_DEV_XID_ERRORS``, ``node_x_total``), ``series`` its
other labels, sorted, as ``name=value`` pairs joined by commas (``UUID=GPU-…,gpu=0``:
select with a glob, ``series="*gpu=0*"``), ``target`` the
endpoint's configured name or ``file:NAME.prom``. (guardian's signal names are lower case
and declared before any rule loads, so exposed names are label values, not signal names.)
A family with more than ``max_series`` members keeps the first ones and counts the rest
in ``prom.dropped{target}``; so does a target with more than ``max_samples`` samples in all,
and parsing stops once a page exceeds that by as much again (a huge page costs bounded CPU,
and the count is then a lower bound).

Every configured input answers or ``prom.sample`` has no value at all: while an endpoint
failed its last read or was read longer than ``max_age`` ago, while a textfile directory
cannot be listed or is refused, and while a ``*.prom`` file in it cannot be read, is
malformed, was last modified longer than ``max_age`` ago, or is owned or writable by
someone other than root (or guardian's own user; group- or world-writable, its directory
too), and before the worker's first whole round. Any metric could have come from the input
that did not answer, and a snapshot holds a family whole or not at all, so no rule over
``prom.sample`` fires or resolves on part of the data (never an empty family that reads
"healthy"). ``prom.up{target}`` says which target (1 fresh, 0 not; ``dir:DIR`` for a
directory), ``prom.errors{target}`` counts failed reads, and each failing target is a fault
of the source with why (``guardian.source_errors``, /healthz, ``run --once``), logged when
it starts and ends. A file removed between the listing and its read is gone, not failing.
"""

from __future__ import annotations

import contextlib
import fnmatch
import logging
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import ClassVar

from pydantic import BaseModel, ConfigDict, Field, field_validator

from guardian.core.durations import Duration
from guardian.core.snapshot import Family, Labels, SignalSpec, labels_of
from guardian.hostio.host import Host
from guardian.hostio.textfile import is_directory, read_capped, read_capped_stream, textfiles
from guardian.plugin.contract import Source

log = logging.getLogger("guardian.sources.exposition")


class ExpositionConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    endpoints: dict[str, str] = Field(
        default_factory=dict, description="target name -> http(s) URL of a local "
        "/metrics (e.g. dcgm = 'http://127.0.0.1:9400/metrics')")
    textfile_directories: list[str] = Field(
        default_factory=list, description="directories of node_exporter textfile-collector "
        "*.prom files")
    interval: Duration = Field(15.0, gt=0, description="how often the worker reads")
    timeout: Duration = Field(3.0, gt=0, description="one read's limit, whole")
    max_age: Duration = Field(60.0, gt=0, description="older data (a file: last modified) "
                              "gives no value")
    max_bytes: int = Field(4 << 20, gt=0, description="a larger page or file is an error")
    max_series: int = Field(2_000, gt=0, description="members kept per metric and target")
    max_samples: int = Field(10_000, gt=0, description="samples kept per target in all; "
                             "the rest are counted in prom.dropped, and parsing stops at "
                             "twice as many")
    metrics: list[str] = Field(default_factory=lambda: ["*"], description="sample names "
                               "kept (globs); the rest are not turned into signals")

    @field_validator("endpoints")
    @classmethod
    def _urls(cls, v: dict[str, str]) -> dict[str, str]:
        for name, url in v.items():
            if not name or name.startswith("file:"):
                raise ValueError(f"target name {name!r} is empty or starts with 'file:'")
            if not url.startswith(("http://", "https://")):
                raise ValueError(f"endpoint {name!r}: {url!r} is not an http(s) URL")
        return v


@dataclass
class Reading:
    """The last read of one target: when (monotonic), its samples, or why it failed."""

    at: float
    samples: Family = field(default_factory=dict)
    dropped: int = 0
    error: str = ""
    modified: float | None = None  # a file's mtime (wall clock)


def parse(text: str, target: str, max_series: int, keep: list[str],
          max_samples: int = 10_000) -> tuple[Family, int]:
    """The samples of an exposition page as members of ``prom.sample``, and how many were
    dropped over ``max_series`` per metric or ``max_samples`` in all (parsing stops once
    twice ``max_samples`` were seen). Raises ValueError on a malformed page."""
    # imported here: `guardian check` loads every source's module and needs no parser
    from prometheus_client.parser import text_string_to_metric_families

    out: Family = {}
    per_metric: dict[str, int] = {}
    dropped = 0
    everything = keep == ["*"]
    seen = 0
    for fam in text_string_to_metric_families(text):
        seen += len(fam.samples)
        if seen > 2 * max_samples:  # the rest is not even parsed
            return out, dropped + len(fam.samples)
        for s in fam.samples:
            if not everything and not any(fnmatch.fnmatchcase(s.name, k) for k in keep):
                continue
            n = per_metric.get(s.name, 0)
            if n >= max_series or len(out) >= max_samples:
                dropped += 1
                continue
            per_metric[s.name] = n + 1
            series = ",".join(f"{k}={v}" for k, v in sorted(s.labels.items()))
            out[labels_of({"target": target, "metric": s.name, "series": series})] = \
                float(s.value)
    return out, dropped


def scrape(url: str, timeout: float, max_bytes: int) -> str:
    """One GET of an exposition page, whole within ``timeout`` (a server that drips bytes
    is cut off too), at most ``max_bytes``. Raises OSError or ValueError."""
    deadline = time.monotonic() + timeout
    req = urllib.request.Request(url, headers={"Accept": "text/plain;version=0.0.4"})
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        try:
            return read_capped_stream(resp.read1, max_bytes, deadline)
        except TimeoutError:
            raise TimeoutError(f"not read whole within {timeout:g} s") from None


class ExpositionSource(Source[ExpositionConfig]):
    name: ClassVar[str] = "exposition"
    Config = ExpositionConfig
    specs: ClassVar[tuple[SignalSpec, ...]] = (
        SignalSpec("prom.sample", "samples of local Prometheus endpoints and textfile "
                   "*.prom files, by target, sample name (metric) and its other labels "
                   "(series); no value while any configured endpoint, textfile "
                   "directory or file is failing, refused or stale",
                   labels=("metric", "series", "target")),
        SignalSpec("prom.up", "1 when a target's last read succeeded within max_age, "
                   "else 0", labels=("target",)),
        SignalSpec("prom.errors", "failed reads of a target, since start", "reads",
                   labels=("target",), counter=True),
        SignalSpec("prom.dropped", "samples over max_series or max_samples dropped at a "
                   "target's last read", "samples", labels=("target",)),
    )

    def __init__(self, host: Host, config: ExpositionConfig | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__(host, config)
        self.cfg: ExpositionConfig = self.config
        self.clock = clock
        self.lock = threading.Lock()
        self.readings: dict[str, Reading] = {}
        self.errors: dict[str, int] = dict.fromkeys(self.cfg.endpoints, 0)
        self.stop = threading.Event()
        self.thread: threading.Thread | None = None
        self.rounds = 0              # whole rounds of the worker
        self.failing: set[str] = set()  # targets logged as failing
        self._faults: list[str] = []

    @classmethod
    def config_warnings(cls, config: ExpositionConfig) -> list[str]:
        """Endpoints off this node (a network's delays and failures become no value), and
        textfile directories that do not exist."""
        local = ("127.", "localhost", "[::1]")
        return [*(f"endpoint {name!r} ({url}) is not on this node's loopback"
                  for name, url in config.endpoints.items()
                  if not url.split("//", 1)[1].startswith(local)),
                *(f"textfile directory {d} does not exist"
                  for d in config.textfile_directories if not is_directory(d))]

    def unavailable(self) -> str | None:
        if not self.cfg.endpoints and not self.cfg.textfile_directories:
            return "no endpoints or textfile directories configured ([sources.exposition])"
        return None

    def refresh(self) -> None:
        """Read every target once (the worker's round; blocking, never on the loop)."""
        for name, url in self.cfg.endpoints.items():
            try:
                text = scrape(url, self.cfg.timeout, self.cfg.max_bytes)
                samples, dropped = parse(text, name, self.cfg.max_series, self.cfg.metrics,
                                         self.cfg.max_samples)
                reading = Reading(self.clock(), samples, dropped)
            except (OSError, ValueError, urllib.error.URLError) as exc:
                reading = Reading(self.clock(), error=f"{type(exc).__name__}: {exc}")
            self._keep(name, reading)
        seen: set[str] = set()
        for directory in self.cfg.textfile_directories:
            base = self.host.root / directory.lstrip("/")
            try:
                names = textfiles(base)
            except (OSError, ValueError) as exc:
                self._keep(f"dir:{directory}",
                           Reading(self.clock(), error=f"{type(exc).__name__}: {exc}"))
                continue
            with self.lock:
                self.readings.pop(f"dir:{directory}", None)
            for n in names:
                target = f"file:{n}"
                seen.add(target)
                try:
                    text, mtime = read_capped(base / n, self.cfg.max_bytes)
                    samples, dropped = parse(text, target, self.cfg.max_series,
                                             self.cfg.metrics, self.cfg.max_samples)
                    reading = Reading(self.clock(), samples, dropped, modified=mtime)
                except FileNotFoundError:
                    # removed since the listing (a writer's rename, a cleanup): no target
                    # any more, as the next listing would say; not a failing one
                    seen.discard(target)
                    continue
                except (OSError, ValueError) as exc:
                    reading = Reading(self.clock(), error=f"{type(exc).__name__}: {exc}")
                self._keep(target, reading)
        with self.lock:  # a file that was removed is no target any more
            for gone in [t for t in self.readings if t.startswith("file:") and t not in seen]:
                del self.readings[gone]
            self.rounds += 1

    def _keep(self, target: str, reading: Reading) -> None:
        with self.lock:
            self.readings[target] = reading
            if reading.error:
                self.errors[target] = self.errors.get(target, 0) + 1

    def _start(self) -> None:
        if self.thread is not None:
            return

        def loop() -> None:
            while not self.stop.is_set():
                with contextlib.suppress(Exception):  # a bug in one round: the next one
                    self.refresh()
                self.stop.wait(self.cfg.interval)

        self.thread = threading.Thread(target=loop, name="guardian-exposition", daemon=True)
        self.thread.start()

    def _problem(self, r: Reading, now: float) -> str | None:
        """Why a reading gives no value (failed, or older than max_age), or None."""
        if r.error:
            return r.error
        if now - r.at > self.cfg.max_age:
            return f"not read for over max_age ({self.cfg.max_age:g} s)"
        if r.modified is not None and time.time() - r.modified > self.cfg.max_age:
            return f"last modified over max_age ({self.cfg.max_age:g} s) ago"
        return None

    def collect(self, now: float) -> dict[str, object]:
        self._start()
        mono = self.clock()
        with self.lock:
            readings = dict(self.readings)
            errors = dict(self.errors)
            rounds = self.rounds
        up: Family = {}
        samples: Family = {}
        dropped: Family = {}
        problems: dict[str, str] = {}  # target -> why it gives no value
        for target, r in readings.items():
            why = self._problem(r, mono)
            key: Labels = labels_of({"target": target})
            up[key] = 0.0 if why else 1.0
            dropped[key] = float(r.dropped)
            if why is None:
                samples.update(r.samples)
            else:
                problems[target] = why
        # no value unless every configured input answered: before the first whole round,
        # while an endpoint has not been read yet, and while any target fails
        blind = not rounds or bool(problems) or any(
            t not in readings for t in self.cfg.endpoints)
        for target in self.cfg.endpoints:
            up.setdefault(labels_of({"target": target}), 0.0)
        self._report(problems)
        return {"prom.sample": None if blind else samples, "prom.up": up,
                "prom.dropped": dropped,
                "prom.errors": {labels_of({"target": t}): float(n)
                                for t, n in errors.items()}}

    def _report(self, problems: dict[str, str]) -> None:
        """Keep the faults, and log a target's failure when it starts and when it ends."""
        self._faults = [f"{t}: {why}" for t, why in sorted(problems.items())]
        for t in sorted(problems.keys() - self.failing):
            log.warning("exposition: target %s gives no value: %s", t, problems[t])
        for t in sorted(self.failing - problems.keys()):
            log.info("exposition: target %s is read again (or gone)", t)
        self.failing = set(problems)

    def faults(self) -> list[str]:
        return list(self._faults)

    def close(self) -> None:
        self.stop.set()
        if self.thread is not None:
            self.thread.join(timeout=self.cfg.timeout + 1)
            self.thread = None
