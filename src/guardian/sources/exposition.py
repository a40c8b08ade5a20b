"""Prometheus exposition as a source: local endpoints and textfile-collector files.

Endpoints (dcgm-exporter's ``http://127.0.0.1:9400/metrics``, kubelet's, an
application's) are scraped and ``*.prom`` files of node_exporter's textfile-collector
directories read by a worker thread, every ``interval``, each within ``timeout`` and
``max_bytes``: a collection only takes the latest results, so a slow endpoint never holds
the loop. Files are opened without blocking and must be regular (a FIFO or a device named
``x.prom`` is refused, never waited on). Endpoints are read at once, each on a thread of
its own and bounded as a whole (every socket operation waits at most what is left of
``timeout``: a server that drips a byte at a time is cut when it passes), so one slow
endpoint never delays the others' reads. An endpoint on this host is believed only when
the kernel says its listener belongs to root, guardian's own user or one of its
``owner_uids`` (anyone may listen first on dcgm-exporter's port): else it is refused, with
why (:mod:`guardian.sources.localhttp`). The text is parsed with prometheus_client's
parser, whose cost grows with a line's labels and escapes times its length: a page is
measured first, and one with a line over ``max_line_bytes``, a sample with more than
``max_labels`` labels or more than 64 backslash escapes, more labels in all than
``max_labels_total``, or a parse that would cost more than it could afford is refused, with
why, and never parsed.

Every sample becomes a member of ``prom.sample``, with the sample's own labels as
exposed (``gpu``, ``UUID``, ``err_code``: select as in PromQL,
``prom.sample{metric="DCGM_FI_DEV_XID_ERRORS", gpu="0"}``) and two of guardian's:
``metric``, the sample's name (``DCGM_FI_DEV_XID_ERRORS``, ``node_x_total``), and
``target``, the endpoint's configured name or ``file:NAME.prom``. A sample's own label
named ``metric`` or ``target`` is renamed ``exported_metric`` or ``exported_target`` (as
Prometheus renames a scraped label that collides with a target's: ``exported_`` again
while the name is taken). (guardian's signal names are lower case and declared before
any rule loads, so exposed names are label values, not signal names.)
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
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import ClassVar

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from guardian.core.durations import Duration, format_duration
from guardian.core.errors import in_words
from guardian.core.snapshot import Family, Labels, SignalSpec, labels_of
from guardian.hostio.host import Host
from guardian.hostio.textfile import is_directory, read_capped, textfiles
from guardian.plugin.contract import Source
from guardian.sources.localhttp import Deadline, NotOwned, get, trusted_uids

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
    max_line_bytes: int = Field(16384, gt=0, description="a longer line refuses the page")
    max_labels: int = Field(64, gt=0, description="a sample with more labels refuses the "
                            "page")
    max_labels_total: int = Field(200_000, gt=0, description="more labels in all refuse "
                                  "the page")
    owner_uids: dict[str, list[int]] = Field(
        default_factory=dict, description="endpoint name -> uids, besides root and "
        "guardian's own, whose listener on this host is believed (anyone else's is "
        "refused: no value)")

    @field_validator("endpoints")
    @classmethod
    def _urls(cls, v: dict[str, str]) -> dict[str, str]:
        for name, url in v.items():
            if not name or name.startswith("file:"):
                raise ValueError(f"target name {name!r} is empty or starts with 'file:'")
            if not url.startswith(("http://", "https://")):
                raise ValueError(f"endpoint {name!r}: {url!r} is not an http(s) URL")
        return v

    @model_validator(mode="after")
    def _owners(self) -> ExpositionConfig:
        unknown = sorted(set(self.owner_uids) - set(self.endpoints))
        if unknown:
            raise ValueError(f"owner_uids names no endpoint: {', '.join(unknown)}")
        return self


@dataclass
class Reading:
    """The last read of one target: when (monotonic), its samples, or why it failed."""

    at: float
    samples: Family = field(default_factory=dict)
    dropped: int = 0
    error: str = ""
    modified: float | None = None  # a file's mtime (wall clock)


MAX_ESCAPES = 64  # backslash escapes in one sample line
PARSE_BUDGET = 100_000_000  # the sum of len(line) * (1 + labels + escapes) a page may cost
HEAD_LIMIT = 65536  # bytes of an answer's status line and headers


def _labels(line: str) -> int:
    """How many labels a sample line has: the ``=`` outside its quoted strings."""
    if '"' not in line:
        return line.count("=")
    unescaped = line.replace("\\\\", "").replace('\\"', "")
    return sum(part.count("=") for part in unescaped.split('"')[::2])


def measure(text: str, max_samples: int, max_line_bytes: int = 16384,
            max_labels: int = 64, max_labels_total: int = 200_000) -> tuple[str, int]:
    """What of a page may be parsed: the text up to its first ``max_samples`` samples, and
    how many samples are left out. Raises ValueError, naming the line, for a page whose
    parse would cost more than it may (prometheus_client's parser costs a line's length
    times its labels and escapes: one sample with a 4 MiB label set cost ~70 s)."""
    lines = text.split("\n")
    samples = labels_total = cost = 0
    for i, line in enumerate(lines):
        if len(line) > max_line_bytes:
            raise ValueError(f"line {i + 1}: longer than max_line_bytes ({max_line_bytes})")
        bare = line.lstrip()
        if not bare or bare.startswith("#"):
            cost += len(line)
            continue
        samples += 1
        if samples > max_samples:
            left = sum(1 for rest in lines[i:] if rest.strip()
                       and not rest.lstrip().startswith("#"))
            return "\n".join(lines[:i]) + "\n", left
        escapes = line.count("\\")
        if escapes > MAX_ESCAPES:
            raise ValueError(f"line {i + 1}: {escapes} backslash escapes (at most "
                             f"{MAX_ESCAPES} a sample)")
        labels = _labels(line)
        if labels > max_labels:
            raise ValueError(f"line {i + 1}: a sample with {labels} labels (max_labels "
                             f"{max_labels})")
        labels_total += labels
        if labels_total > max_labels_total:
            raise ValueError(f"line {i + 1}: over {max_labels_total} labels in all "
                             "(max_labels_total)")
        cost += len(line) * (1 + labels + escapes)
        if cost > PARSE_BUDGET:
            raise ValueError(f"line {i + 1}: the page would cost the parser more than "
                             f"{PARSE_BUDGET} character scans (long lines with many labels)")
    return text, 0


def parse(text: str, target: str, max_series: int, keep: list[str],
          max_samples: int = 10_000, max_line_bytes: int = 16384, max_labels: int = 64,
          max_labels_total: int = 200_000) -> tuple[Family, int]:
    """The samples of an exposition page as members of ``prom.sample``, and how many were
    dropped over ``max_series`` per metric or ``max_samples`` in all (parsing stops once
    twice ``max_samples`` were seen). Raises ValueError on a malformed page, and on one
    whose parse would cost more than it may (:func:`measure`: never parsed)."""
    # imported here: `guardian check` loads every source's module and needs no parser
    from prometheus_client.parser import text_string_to_metric_families

    text, unparsed = measure(text, 2 * max_samples, max_line_bytes, max_labels,
                             max_labels_total)
    out: Family = {}
    per_metric: dict[str, int] = {}
    dropped = unparsed
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
            out[member(target, s.name, s.labels)] = float(s.value)
    return out, dropped


OWN_LABELS = ("metric", "target")  # guardian's labels of prom.sample


def member(target: str, name: str, labels: dict[str, str]) -> Labels:
    """The key of a sample in ``prom.sample``: its own labels, ``metric`` and ``target``;
    an own label that collides with those is renamed ``exported_<name>`` (again while
    that is taken), as Prometheus does."""
    out = {k: v for k, v in labels.items() if k not in OWN_LABELS}
    for k in sorted(OWN_LABELS):
        if k in labels:
            new = "exported_" + k
            while new in out:
                new = "exported_" + new
            out[new] = labels[k]
    out["metric"], out["target"] = name, target
    return labels_of(out)


def scrape(url: str, timeout: float, max_bytes: int,
           trusted: frozenset[int] | None = None) -> str:
    """One GET of an exposition page, whole within ``timeout`` (a server that drips bytes
    is cut off too), at most ``max_bytes``, from a listener ``trusted`` owns where it is
    on this host. Raises OSError (TimeoutError past the deadline), ValueError or
    NotOwned."""
    answer = get(url, Deadline(timeout), max_bytes + HEAD_LIMIT,
                 headers={"Accept": "text/plain;version=0.0.4"}, trusted=trusted,
                 over_limit="error")
    head, sep, body = answer.partition(b"\r\n\r\n")
    status_line = head.split(b"\r\n", 1)[0]
    m = re.match(rb"HTTP/\d(?:\.\d)? (\d{3})", status_line)
    if m is None or not sep:
        raise ValueError(f"not an HTTP answer: {status_line[:60]!r}")
    if m.group(1) != b"200":
        raise ValueError(f"HTTP {m.group(1).decode()}")
    fields = {}
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        fields[name.strip().lower()] = value.strip().lower()
    if fields.get(b"transfer-encoding", b"identity") != b"identity":
        raise ValueError("a chunked or encoded answer to an HTTP/1.0 request")
    if fields.get(b"content-encoding", b"identity") != b"identity":
        raise ValueError(f"content encoding {fields[b'content-encoding'][:20]!r}")
    length = fields.get(b"content-length")
    if length is not None and length.isdigit():
        if len(body) < int(length):
            raise ValueError(f"the answer ended after {len(body)} of {int(length)} bytes")
        body = body[:int(length)]
    if len(body) > max_bytes:
        raise ValueError(f"larger than {max_bytes} bytes")
    return body.decode("utf-8")


class ExpositionSource(Source[ExpositionConfig]):
    name: ClassVar[str] = "exposition"
    Config = ExpositionConfig
    specs: ClassVar[tuple[SignalSpec, ...]] = (
        SignalSpec("prom.sample", "samples of local Prometheus endpoints and textfile "
                   "*.prom files, by target, sample name (metric) and the sample's own "
                   "labels (a colliding one as exported_target, exported_metric); no "
                   "value while any configured endpoint, textfile directory or file is "
                   "failing, refused or stale",
                   labels=OWN_LABELS, open_labels=True),
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
        self.reading: dict[str, threading.Thread] = {}  # each endpoint's last reader
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

    def unconfigured(self) -> str | None:
        if not self.cfg.endpoints and not self.cfg.textfile_directories:
            return "no endpoints or textfile directories in [sources.exposition]"
        return None

    def unavailable(self) -> str | None:
        return self.unconfigured()  # a caller that asks only this learns it too

    def _parse(self, text: str, target: str) -> tuple[Family, int]:
        c = self.cfg
        return parse(text, target, c.max_series, c.metrics, c.max_samples,
                     c.max_line_bytes, c.max_labels, c.max_labels_total)

    def read_endpoint(self, name: str) -> None:
        """Read one endpoint now and keep what it gave (or why not)."""
        url = self.cfg.endpoints[name]
        try:
            text = scrape(url, self.cfg.timeout, self.cfg.max_bytes,
                          trusted_uids(self.cfg.owner_uids.get(name, ())))
            samples, dropped = self._parse(text, name)
            reading = Reading(self.clock(), samples, dropped)
        except (OSError, ValueError, NotOwned) as exc:
            reading = Reading(self.clock(), error=in_words(exc))
        self._keep(name, reading)

    def refresh(self) -> None:
        """Read every target once (the worker's round; blocking, never on the loop): the
        endpoints at once, each on a thread of its own and bounded as a whole by
        ``timeout``, while this thread reads the textfiles."""
        readers: list[threading.Thread] = []
        for name in self.cfg.endpoints:
            if (busy := self.reading.get(name)) is not None:
                busy.join(self.cfg.timeout + 1)  # another round's read ends by its deadline
                if busy.is_alive():
                    continue  # never two reads of one endpoint at once
            reader = threading.Thread(target=self.read_endpoint, args=(name,), daemon=True,
                                      name=f"guardian-exposition-{name}"[:15])
            try:
                reader.start()
            except RuntimeError as exc:  # no thread to be had (a task limit)
                self._keep(name, Reading(self.clock(), error=f"cannot start a thread "
                                         f"to read it: {exc}"))
                continue
            self.reading[name] = reader
            readers.append(reader)
        seen: set[str] = set()
        for directory in self.cfg.textfile_directories:
            base = self.host.root / directory.lstrip("/")
            try:
                names = textfiles(base)
            except (OSError, ValueError) as exc:
                self._keep(f"dir:{directory}",
                           Reading(self.clock(), error=in_words(exc)))
                continue
            with self.lock:
                self.readings.pop(f"dir:{directory}", None)
            for n in names:
                target = f"file:{n}"
                seen.add(target)
                try:
                    text, mtime = read_capped(base / n, self.cfg.max_bytes)
                    samples, dropped = self._parse(text, target)
                    reading = Reading(self.clock(), samples, dropped, modified=mtime)
                except FileNotFoundError:
                    # removed since the listing (a writer's rename, a cleanup): no target
                    # any more, as the next listing would say; not a failing one
                    seen.discard(target)
                    continue
                except (OSError, ValueError) as exc:
                    reading = Reading(self.clock(), error=in_words(exc))
                self._keep(target, reading)
        until = time.monotonic() + self.cfg.timeout + 1  # each read ends by its deadline
        for reader in readers:
            reader.join(max(0.0, until - time.monotonic()))
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
        if r.modified is not None and (age := time.time() - r.modified) > self.cfg.max_age:
            return (f"last modified {format_duration(round(age))} ago, over max_age "
                    f"({format_duration(self.cfg.max_age)})")
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
                # every target's count, 0 for one that never failed (a healthy file's too)
                "prom.errors": {labels_of({"target": t}): float(errors.get(t, 0))
                                for t in sorted({*errors, *readings, *self.cfg.endpoints})}}

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
