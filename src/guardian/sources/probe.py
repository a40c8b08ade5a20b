"""Health probes: HTTP (status, body match, latency), TCP connect and unix-socket connect,
e.g. kubelet's ``/healthz`` and containerd's socket.

Probes run on their own interval on a small pool of worker threads (never on the loop's
thread); each is bounded by its timeout as a whole, whatever the peer does (a server that
accepts and never answers, or drips a byte at a time, is cut at the deadline: every
socket operation waits at most the time left). HTTP is one ``GET`` over HTTP/1.0 (no
chunked answers), at most 64 KiB of the answer read. A probe that fails is down
(``probe.up`` 0) with why in ``probe.failures{probe,reason}``. Until every configured probe
has run once, ``probe.up``, ``probe.latency_seconds`` and ``probe.status_code`` have no value
at all (a snapshot holds a family whole or not at all): an empty family would read "not
down" for a probe that has not answered yet.

Whoever listens first on a port would be believed (a user on kubelet's healthz port
answering "ok" for a dead kubelet): a probe of this host (TCP, HTTP, a unix socket) counts
only when the kernel says the listener belongs to root, guardian's own user or one of the
probe's ``owner_uids`` (:mod:`guardian.sources.localhttp`). Otherwise the probe is refused
(reason ``owner`` in ``probe.failures``): neither up nor down, so those three families have
no value while it lasts, and the source's fault says why (nothing a user controls fires a
rule over them or hides one).
"""

from __future__ import annotations

import re
import ssl
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from guardian.core.durations import PositiveDuration
from guardian.core.errors import GuardianError, in_words
from guardian.core.regexsafety import backtracking_risk
from guardian.core.snapshot import Family, SignalSpec, label, labels_of
from guardian.hostio.host import Host
from guardian.plugin.contract import Source
from guardian.sources.localhttp import (
    Deadline,
    NotOwned,
    connect,
    connect_unix,
    get,
    host_port,
    trusted_uids,
)
from guardian.sources.periodic import Periodic

ANSWER_LIMIT = 65536
PROBE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$")
REASONS = ("refused", "timeout", "status", "body", "tls", "error", "owner")
_UNSAFE = re.compile(r"[\x00-\x20\x7f]")
_TOKEN = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")  # RFC 9110 field names


class Probe(BaseModel):
    """One endpoint: exactly one of ``url`` (http or https), ``tcp`` (host:port) or
    ``unix`` (a socket path)."""

    model_config = ConfigDict(extra="forbid")
    url: str | None = Field(None, description="http:// or https:// URL to GET")
    tcp: str | None = Field(None, description="host:port to connect to")
    unix: str | None = Field(None, description="a unix stream socket to connect to")
    interval: PositiveDuration | None = Field(None, description="default: the source's")
    timeout: PositiveDuration | None = Field(None, description="the whole probe, connect "
                                             "to last byte (default: the source's)")
    status: list[int] = Field(default_factory=list, description="HTTP statuses that are "
                              "up (default: 200-399)")
    body: str | None = Field(None, description="a regular expression the HTTP body must "
                             "contain (searched in its first 64 KiB)")
    verify_tls: bool = Field(True, description="https: check the server's certificate")
    headers: dict[str, str] = Field(default_factory=dict, description="HTTP request "
                                    "headers", json_schema_extra={"secret": True})
    owner_uids: list[int] = Field(default_factory=list, description="uids, besides root "
                                  "and guardian's own, whose listener on this host is "
                                  "believed (anyone else's is refused: no value)")

    @model_validator(mode="after")
    def _one_target(self) -> Probe:
        given = [k for k in ("url", "tcp", "unix") if getattr(self, k)]
        if len(given) != 1:
            raise ValueError("set exactly one of url, tcp, unix")
        if self.url is not None:
            parts = urlsplit(self.url)
            if parts.scheme not in ("http", "https") or not parts.hostname:
                raise ValueError(f"url {self.url!r}: http:// or https:// with a host")
            if _UNSAFE.search(self.url):
                raise ValueError(f"url {self.url!r}: white space or control characters "
                                 "(percent-encode them)")
        elif self.status or self.body:
            raise ValueError("status and body apply to url probes only")
        for k, v in self.headers.items():
            if not _TOKEN.match(k) or _UNSAFE.search(v.replace(" ", "")):
                raise ValueError(f"header {k!r}: a token name, and no control characters "
                                 "in the value")  # a line break would forge a header
        if self.tcp is not None:
            host_port(self.tcp)
        return self

    @field_validator("body")
    @classmethod
    def _regex(cls, body: str | None) -> str | None:
        if body is not None:
            re.compile(body)
            risk = backtracking_risk(body)
            if risk:
                raise ValueError(f"body pattern: {risk}")
        return body


class ProbeConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")
    probes: dict[str, Probe] = Field(default_factory=dict, description="probes by name "
                                     "(the `probe` label)")
    interval: PositiveDuration = Field(10.0, description="default time between probes")
    timeout: PositiveDuration = Field(2.0, description="default timeout of a probe")
    concurrency: int = Field(4, ge=1, le=32, description="probes run at once")

    @field_validator("probes")
    @classmethod
    def _names(cls, probes: dict[str, Probe]) -> dict[str, Probe]:
        for name in probes:
            if not PROBE_NAME.match(name):
                raise ValueError(f"probe name {name!r}: letters, digits and _.:- only")
        return probes


@dataclass
class Result:
    at: float                  # monotonic time it ended
    up: bool
    seconds: float
    status: int | None = None  # HTTP status
    reason: str = ""           # why not up, one of REASONS
    detail: str = ""


class ProbeFailed(GuardianError):
    def __init__(self, reason: str, detail: str, status: int | None = None) -> None:
        super().__init__(detail)
        self.reason, self.status = reason, status


def run_probe(p: Probe, timeout: float, root: str = "/") -> Result:
    """Run one probe now, bounded by ``timeout`` seconds in all."""
    started = time.monotonic()
    deadline = Deadline(timeout)
    trusted = trusted_uids(p.owner_uids)
    status = None
    try:
        if p.unix is not None:
            connect_unix(root.rstrip("/") + "/" + p.unix.lstrip("/"), deadline,
                         trusted).close()
        elif p.tcp is not None:
            connect(*host_port(p.tcp), deadline, trusted).close()
        else:
            assert p.url is not None
            status = _http(p, deadline, trusted)
    except ProbeFailed as exc:
        return Result(time.monotonic(), False, time.monotonic() - started, exc.status,
                      exc.reason, str(exc))
    except NotOwned as exc:
        return Result(time.monotonic(), False, time.monotonic() - started, None, "owner",
                      str(exc))
    except TimeoutError:
        return Result(time.monotonic(), False, time.monotonic() - started, status,
                      "timeout", "timed out")
    except ssl.SSLError as exc:
        return Result(time.monotonic(), False, time.monotonic() - started, status, "tls",
                      str(exc))
    except ConnectionRefusedError as exc:
        return Result(time.monotonic(), False, time.monotonic() - started, status,
                      "refused", exc.strerror or str(exc))
    except OSError as exc:
        return Result(time.monotonic(), False, time.monotonic() - started, status, "error",
                      exc.strerror or str(exc))
    return Result(time.monotonic(), True, time.monotonic() - started, status)


def _http(p: Probe, deadline: Deadline, trusted: frozenset[int]) -> int:
    assert p.url is not None
    answer = get(p.url, deadline, ANSWER_LIMIT, headers={"User-Agent": "guardian-probe",
                                                         **p.headers},
                 verify_tls=p.verify_tls, trusted=trusted)
    head_end = answer.find(b"\r\n\r\n")
    status_line = bytes(answer[:answer.find(b"\r\n")] if b"\r\n" in answer else answer)
    m = re.match(rb"HTTP/\d(?:\.\d)? (\d{3})", status_line)
    if m is None:
        raise ProbeFailed("error", f"not an HTTP answer: {status_line[:60]!r}")
    status = int(m.group(1))
    if not (status in p.status if p.status else 200 <= status < 400):
        raise ProbeFailed("status", f"HTTP {status}", status)
    if p.body is not None:
        body = bytes(answer[head_end + 4:]) if head_end >= 0 else b""
        if re.search(p.body, body.decode("utf-8", "replace")) is None:
            raise ProbeFailed("body", f"HTTP {status}: the body does not match", status)
    return status


class ProbeSource(Source[ProbeConfig]):
    name: ClassVar[str] = "probe"
    Config = ProbeConfig
    specs: ClassVar[tuple[SignalSpec, ...]] = (
        SignalSpec("probe.up", "1 when the probe's last run succeeded (connected; HTTP: an "
                   "expected status and body), else 0; no value (as probe.latency_seconds "
                   "and probe.status_code) until every probe has run once, and while a "
                   "probe's listener is not one guardian believes",
                   labels=("probe",)),
        SignalSpec("probe.latency_seconds", "how long the probe's last successful run took "
                   "(connect to last byte)", "seconds", labels=("probe",)),
        SignalSpec("probe.status_code", "the HTTP status of the last answer",
                   labels=("probe",)),
        SignalSpec("probe.age_seconds", "time since the probe's last run ended", "seconds",
                   labels=("probe",)),
        SignalSpec("probe.failures", "failed runs by reason (refused, timeout, status, "
                   "body, tls, error; owner: its listener is not believed, and probe.up "
                   "has no value)", "runs", labels=("probe", "reason"), counter=True),
    )

    def __init__(self, host: Host, config: ProbeConfig | None = None) -> None:
        super().__init__(host, config)
        self.cfg: ProbeConfig = self.config
        self.results: dict[str, Result] = {}
        self.failures: dict[tuple[str, str], int] = {}
        self._lock = threading.Lock()
        self._wake: Callable[[str], None] | None = None
        self._faults: list[str] = []
        self.periodic = Periodic({n: p.interval or self.cfg.interval
                                  for n, p in self.cfg.probes.items()}, self._run,
                                 self.cfg.concurrency, "guardian-probe")

    def unconfigured(self) -> str | None:
        # nothing to probe: a rule over probe.up watches nothing, and says so (blind, by
        # the operator's choice), never `ok` over an empty family
        return None if self.cfg.probes else "no probes in [sources.probe]"

    def unavailable(self) -> str | None:
        return self.unconfigured()  # a caller that asks only this learns it too

    def follow(self, wake: Callable[[str], None]) -> bool:
        """Start probing now, and wake the loop when a probe goes up or down."""
        self._wake = wake
        self.periodic.start()
        return bool(self.cfg.probes)

    def collect(self, now: float) -> dict[str, object]:
        self.periodic.start()
        up: Family = {}
        latency: Family = {}
        code: Family = {}
        age: Family = {}
        mono = time.monotonic()
        with self._lock:
            results, failures = dict(self.results), dict(self.failures)
        for name, r in sorted(results.items()):
            key = label("probe", name)
            up[key] = float(r.up)
            age[key] = max(0.0, mono - r.at)
            if r.up:
                latency[key] = r.seconds
            if r.status is not None:
                code[key] = float(r.status)
        # a configured probe that has not answered yet, or whose listener is not believed:
        # no value, never "not down" (nor "down", which the listener would have chosen)
        refused = {n: r.detail for n, r in results.items() if r.reason == "owner"}
        self._faults = [f"probe {n}: {why}" for n, why in sorted(refused.items())]
        pending = bool(refused) or any(name not in results for name in self.cfg.probes)
        return {"probe.up": None if pending else up,
                "probe.latency_seconds": None if pending else latency,
                "probe.status_code": None if pending else code,
                "probe.age_seconds": age,
                "probe.failures": {labels_of({"probe": p, "reason": why}): float(n)
                                   for (p, why), n in failures.items()}}

    def faults(self) -> list[str]:
        return list(self._faults)

    def close(self) -> None:
        self.periodic.close()

    def _run(self, name: str) -> None:
        probe = self.cfg.probes[name]
        try:
            result = run_probe(probe, probe.timeout or self.cfg.timeout, str(self.host.root))
        except Exception as exc:  # a bug must not leave the probe marked running
            result = Result(time.monotonic(), False, 0.0, None, "error", in_words(exc))
        self.record(name, result)

    def record(self, name: str, result: Result) -> None:
        """Keep a run of probe ``name`` as its latest result (what a worker does after each
        run; a test feeds results here without probing)."""
        with self._lock:
            before = self.results.get(name)
            self.results[name] = result
            if not result.up:
                key = (name, result.reason)
                self.failures[key] = self.failures.get(key, 0) + 1
        if (before is None or before.up != result.up) and self._wake is not None:
            self._wake(f"probe {name}")
