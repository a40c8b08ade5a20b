"""Notification actions, so guardian's decisions page through the team's routes:
``notify.webhook`` POSTs JSON (a templated body for chat tools) and
``notify.alertmanager`` sends alerts to Alertmanager's v2 API (``POST /api/v2/alerts``),
firing while the rule fires and resolved (``endsAt`` now) when it resolves.

Both retry a failed POST (a connection error, 429 or 5xx) with doubling waits, within
``budget`` seconds in all: the budget is a deadline for the whole delivery (each connect,
send and read of every try), not a timeout per socket operation, so a receiver that drips
a byte a second is cut at it. ``apply`` waits for the delivery at most ``wait`` seconds; a
delivery still going then goes on in the background (one at a time per action, the newest
waiting), so a slow receiver never holds the rule's other actions nor other rules' behind
it; its result is logged and reported by the next run. Neither follows a redirect: a 3xx
answer is a failed delivery, not retried (following it would send the secret headers
wherever it points). URLs and headers are secrets, never shown in plans, the audit log or
decisions (a chat webhook's URL is its credential), nor in what an error says (every text
that came from an exception passes through :func:`guardian.plugin.secrets.scrub`); one
with a control character (a CR or LF would start another header) is refused at load.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import http.client
import json
import logging
import os
import re
import socket
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from string import Template
from typing import Any, ClassVar
from urllib.parse import urlsplit, urlunsplit

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator
from typing_extensions import NotRequired, TypedDict

from guardian.core.durations import Duration, PositiveDuration
from guardian.plugin.contract import (
    Action,
    ActionContext,
    Egress,
    Outcome,
    Plan,
    SandboxNeeds,
    Step,
)
from guardian.plugin.secrets import control_character, scrub

log = logging.getLogger("guardian.notify")

_LABEL = re.compile(r"[^a-zA-Z0-9_]")


class PostParams(BaseModel):
    """What both notification actions share: where, how long, how often."""

    model_config = ConfigDict(extra="forbid")

    url: SecretStr = Field(description="http(s) URL (secret: a chat webhook's URL is its "
                           "credential)")
    headers: dict[str, SecretStr] = Field(default_factory=dict, description="extra HTTP "
                                          "headers, e.g. Authorization (secret)")
    timeout: float = Field(5.0, gt=0, le=60, description="seconds per attempt")
    attempts: int = Field(3, ge=1, le=10, description="tries on a connection error, 429 "
                          "or 5xx")
    backoff: Duration = Field(1.0, ge=0, le=60, description="first wait between tries "
                              "(doubles)")
    budget: PositiveDuration = Field(20.0, le=300, description="time for all tries "
                                     "together, a deadline for the whole delivery "
                                     "(connect, send and read): no try starts that could "
                                     "not end within it")
    wait: Duration = Field(2.0, ge=0, le=60, description="how long the action waits for "
                           "the delivery; one still going then goes on in the background "
                           "(within `budget`) and the next actions run")

    @field_validator("url")
    @classmethod
    def _http(cls, v: SecretStr) -> SecretStr:
        text = v.get_secret_value()
        if (c := control_character(text)) is not None or " " in text:
            raise ValueError(f"the URL holds a control character or a blank "
                             f"({c or repr(' ')}): percent-encode it")
        parts = urlsplit(text)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise ValueError("expected an http:// or https:// URL")
        return v

    @field_validator("headers")
    @classmethod
    def _header_lines(cls, v: dict[str, SecretStr]) -> dict[str, SecretStr]:
        for name, value in v.items():
            if not re.fullmatch(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+", name):
                raise ValueError(f"header name {name!r} is not an HTTP token")
            if (c := control_character(value.get_secret_value().replace("\t", " "))):
                raise ValueError(f"header {name}: its value holds a control character "
                                 f"({c}), which would end the header line")
        return v

    def secrets(self) -> list[str]:
        return [self.url.get_secret_value(),
                *(v.get_secret_value() for v in self.headers.values())]


def _where(url: str) -> str:
    """The URL without its path, query or credentials: fit to show."""
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.hostname}" + (f":{parts.port}" if parts.port else "")


def _needs(url: str, what: str) -> SandboxNeeds:
    """The URL's host: the one address the action connects to (never a redirect's)."""
    return SandboxNeeds(egress=(Egress(urlsplit(url).hostname, f"{what} {_where(url)}"),))


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """Refuse every redirect: urllib then raises the 3xx as an HTTPError."""

    def redirect_request(self, req: urllib.request.Request, fp: Any, code: int, msg: str,
                         headers: Any, newurl: str) -> None:
        return None


class _Deadline:
    """Cuts every connection of one delivery at a monotonic deadline: a timer shuts the
    sockets down, so a read or write blocked on a receiver that drips ends at once."""

    def __init__(self) -> None:
        self.conns: list[http.client.HTTPConnection] = []
        self.lock = threading.Lock()
        self.expired = False

    def track(self, cls: type[http.client.HTTPConnection]
              ) -> Callable[..., http.client.HTTPConnection]:
        def make(host: str, **kw: Any) -> http.client.HTTPConnection:
            conn = cls(host, **kw)
            with self.lock:
                self.conns.append(conn)
            return conn
        return make

    def expire(self) -> None:
        with self.lock:
            self.expired = True
            conns = list(self.conns)
        for conn in conns:
            sock = conn.sock
            if sock is not None:
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)


class _HTTP(urllib.request.HTTPHandler):
    def __init__(self, deadline: _Deadline) -> None:
        super().__init__()
        self.deadline = deadline

    def http_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
        return self.do_open(self.deadline.track(http.client.HTTPConnection), req)


class _HTTPS(urllib.request.HTTPSHandler):
    def __init__(self, deadline: _Deadline) -> None:
        super().__init__()
        self.deadline = deadline

    def https_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
        return self.do_open(self.deadline.track(http.client.HTTPSConnection), req,
                            context=self._context)  # type: ignore[attr-defined]


def post(url: str, body: bytes, p: PostParams) -> tuple[bool, str, int]:
    """POST ``body`` as JSON with bounded retries, the whole of it within ``p.budget``
    seconds: (ok, what happened with the secrets scrubbed, attempts made)."""
    deadline = _Deadline()
    try:
        timer = threading.Timer(p.budget, deadline.expire)
        timer.daemon = True
        timer.start()
    except RuntimeError as exc:  # no thread to be had: no unbounded request either
        return False, f"cannot bound the request in time: {exc}", 0
    try:
        ok, why, tries = _post(url, body, p, deadline)
    finally:
        timer.cancel()
    return ok, scrub(why, p.secrets()), tries


def _post(url: str, body: bytes, p: PostParams, cut: _Deadline) -> tuple[bool, str, int]:
    deadline = time.monotonic() + p.budget
    _OPENER = urllib.request.build_opener(_NoRedirect, _HTTP(cut), _HTTPS(cut))
    wait = p.backoff
    why = ""
    headers = {"Content-Type": "application/json", "User-Agent": "guardian",
               **{k: v.get_secret_value() for k, v in p.headers.items()}}
    for attempt in range(1, p.attempts + 1):
        left = deadline - time.monotonic()
        if left <= 0 or cut.expired:
            break
        try:
            req = urllib.request.Request(url, data=body, headers=headers, method="POST")
            with _OPENER.open(req, timeout=min(p.timeout, left)) as resp:
                if not cut.expired:  # an answer cut short reads as a complete one
                    return True, f"HTTP {resp.status}", attempt
                why = f"HTTP {resp.status}"
            return False, f"cut at the budget of {p.budget:g}s ({why}, unfinished)", attempt
        except urllib.error.HTTPError as exc:
            why = f"HTTP {exc.code}"
            if 300 <= exc.code < 400:
                return False, f"{why}: a redirect, not followed", attempt
            if exc.code != 429 and exc.code < 500:
                return False, why, attempt  # the request is wrong: again would not help
        except Exception as exc:  # any failure of the request is a failed delivery
            reason = getattr(exc, "reason", None) or exc
            why = f"unreachable: {reason}" if isinstance(exc, (OSError, TimeoutError)) \
                else f"{type(exc).__name__}: {exc}"
            if cut.expired:
                return False, f"cut at the budget of {p.budget:g}s ({why})", attempt
        if attempt < p.attempts and deadline - time.monotonic() > wait:
            time.sleep(wait)
            wait *= 2
        else:
            return False, why, attempt
    return False, why or "no time left in the budget", p.attempts


class _Sender:
    """One delivery at a time for an action, in a thread of its own: ``deliver`` waits
    for it at most ``wait`` seconds; one still going then goes on, and a newer one waits
    behind it (an older waiting one is dropped, counted). Its result is logged, and kept
    for the next ``deliver`` to report."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.lock = threading.Lock()
        self.busy = False
        self.queued: Callable[[], tuple[bool, str, int]] | None = None
        self.dropped = 0
        self.last: str = ""

    def deliver(self, send: Callable[[], tuple[bool, str, int]], wait: float
                ) -> tuple[bool, str, int] | None:
        """The delivery's result, or None when it goes on in the background."""
        done = threading.Event()
        result: list[tuple[bool, str, int]] = []

        def job() -> tuple[bool, str, int]:
            try:
                got = send()
            except Exception as exc:  # post catches its own; a bug still ends the job
                got = (False, f"{type(exc).__name__}", 0)
            result.append(got)
            done.set()
            return got

        with self.lock:
            if self.busy:
                if self.queued is not None:
                    self.dropped += 1
                self.queued = job
                return None
            self.busy = True
        try:
            threading.Thread(target=self._run, args=(job,), name=self.name,
                             daemon=True).start()
        except RuntimeError:  # no thread to be had: deliver here, bounded by the budget
            with self.lock:
                self.busy = False
            return job()
        if done.wait(wait):
            return result[0]
        return None

    def _run(self, job: Callable[[], tuple[bool, str, int]]) -> None:
        while True:
            ok, what, tries = job()
            with self.lock:
                self.last = f"{'delivered' if ok else 'failed'}: {what} ({tries} attempt(s))"
                if not ok:
                    log.warning("%s: %s after %d attempt(s)", self.name, what, tries)
                next_job, self.queued = self.queued, None
                if next_job is None:
                    self.busy = False
                    return
            job = next_job


def _sender_of(action: Action[Any, Any]) -> _Sender:
    """The action's one sender, made at its first delivery."""
    sender: _Sender | None = getattr(action, "_sender", None)
    if sender is None:
        sender = _Sender(f"guardian-{action.name}")
        action._sender = sender  # type: ignore[attr-defined]
    return sender


def _delivered(sender: _Sender, where: str, send: Callable[[], tuple[bool, str, int]],
               wait: float) -> Outcome:
    before = sender.last
    got = sender.deliver(send, wait)
    data: dict[str, Any] = {"previous": before} if before else {}
    if got is None:
        return Outcome(ok=True, verified=None, data=data,
                       detail=f"{where}: still delivering after {wait:g}s: goes on in the "
                              f"background within its budget (the result is logged)")
    ok, what, tries = got
    data["attempts"] = tries
    if ok:
        return Outcome(ok=True, verified=True, detail=f"{where}: {what}", data=data)
    return Outcome(ok=False, error=f"{where}: {what} after {tries} attempt(s)", data=data)


def alerts_url(base: str) -> str:
    """Alertmanager's ``/api/v2/alerts`` under ``base``'s path, its query kept."""
    parts = urlsplit(base)
    return urlunsplit(parts._replace(path=parts.path.rstrip("/") + "/api/v2/alerts"))


def _node() -> str:
    return os.environ.get("NODE_NAME") or socket.gethostname()


def _rfc3339(t: float) -> str:
    return dt.datetime.fromtimestamp(t, dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class WebhookParams(PostParams):
    body: str | None = Field(None, description="a JSON template: $rule, $kind, $severity, "
                             "$summary, $reason, $node, $labels, $values (the evidence as "
                             "text: ecs.service 711 restarts) are filled in, escaped for "
                             "use inside a JSON string; $values_json and $labels_json are "
                             "JSON as is (default: all of them as one object, values "
                             "structured)")


class PostPayload(TypedDict):
    body: NotRequired[str]  # the JSON to POST; absent from a refused plan


class Webhook(Action[WebhookParams, PostPayload]):
    """POST the decision as JSON to a webhook (chat tools, incident tools, your own)."""

    name: ClassVar[str] = "notify.webhook"
    disruptive: ClassVar[bool] = False
    Params = WebhookParams

    def sandbox_needs(self) -> SandboxNeeds:
        return _needs(self.params.url.get_secret_value(), "the webhook")

    def plan(self, ctx: ActionContext) -> Plan[PostPayload]:
        p = self.params
        fields = {"rule": ctx.rule, "kind": ctx.kind, "severity": ctx.severity,
                  "summary": ctx.summary, "reason": ctx.reason, "node": _node(),
                  "labels": ctx.labels, "values": ctx.values}
        plan: Plan[PostPayload] = Plan(self.name, ctx.rule)
        if p.body is None:
            payload: Any = fields
        else:
            said = {**fields, "values": ctx.values_text}  # $values: text for people
            text = Template(p.body).safe_substitute(
                {k: json.dumps(v if isinstance(v, str) else json.dumps(v, sort_keys=True))
                 [1:-1] for k, v in said.items()},
                values_json=json.dumps(ctx.values, sort_keys=True),
                labels_json=json.dumps(ctx.labels, sort_keys=True))
            try:
                payload = json.loads(text)
            except ValueError as exc:
                plan.refused.append(f"the body template does not give JSON: {exc}")
                return plan
        body = json.dumps(payload, sort_keys=True)
        plan.steps.append(Step(f"webhook {_where(p.url.get_secret_value())}",
                               f"POST {len(body)} bytes of JSON ({ctx.kind})"))
        plan.data["body"] = body
        return plan

    def apply(self, plan: Plan[PostPayload], ctx: ActionContext) -> Outcome:
        url, body = self.params.url.get_secret_value(), plan.data["body"].encode()
        return _delivered(_sender_of(self), _where(url),
                          lambda: post(url, body, self.params), self.params.wait)


class AlertmanagerParams(PostParams):
    url: SecretStr = Field(description="Alertmanager's base URL, e.g. "
                           "http://alertmanager.monitoring:9093 (the path /api/v2/alerts "
                           "is added)")
    labels: dict[str, str] = Field(default_factory=dict, description="more alert labels "
                                   "(the rule's own labels, alertname, severity and node "
                                   "are always there)")
    annotations: dict[str, str] = Field(default_factory=dict)
    ends_after: PositiveDuration = Field(3600.0, description="a firing alert's endsAt: "
                                         "resent with each action run, it resolves by "
                                         "itself if guardian stops sending")
    generator_url: str = Field("", description="a link back (e.g. a dashboard)")


class Alertmanager(Action[AlertmanagerParams, PostPayload]):
    """Send the rule as an alert to Alertmanager (v2 API): firing, then resolved."""

    name: ClassVar[str] = "notify.alertmanager"
    disruptive: ClassVar[bool] = False
    Params = AlertmanagerParams

    def sandbox_needs(self) -> SandboxNeeds:
        return _needs(self.params.url.get_secret_value(), "Alertmanager")

    def plan(self, ctx: ActionContext) -> Plan[PostPayload]:
        p = self.params
        now = time.time()
        resolved = ctx.kind == "resolved"
        labels = {"alertname": ctx.rule, "severity": ctx.severity or "warning",
                  "node": _node(), **ctx.labels, **p.labels}
        # Alertmanager refuses label names outside [a-zA-Z_][a-zA-Z0-9_]*
        labels = {(_LABEL.sub("_", k) if not k[:1].isdigit() else "_" + _LABEL.sub("_", k)):
                  v for k, v in labels.items() if k}
        annotations = {"summary": ctx.summary or ctx.rule,
                       "description": ctx.reason or ctx.message("$values"), **p.annotations}
        if ctx.kind == "escalated":
            annotations["needs_human"] = "true"
        alert: dict[str, Any] = {"labels": labels, "annotations": annotations,
                                 "endsAt": _rfc3339(now if resolved else now + p.ends_after)}
        if not resolved:
            alert["startsAt"] = _rfc3339(now)
        if p.generator_url:
            alert["generatorURL"] = p.generator_url
        body = json.dumps([alert], sort_keys=True)
        base = p.url.get_secret_value()
        return Plan(self.name, ctx.rule,
                    [Step(f"alertmanager {_where(base)}",
                          f"{'resolve' if resolved else 'fire'} alert {ctx.rule}")],
                    data={"body": body})

    def apply(self, plan: Plan[PostPayload], ctx: ActionContext) -> Outcome:
        base, body = self.params.url.get_secret_value(), plan.data["body"].encode()
        return _delivered(_sender_of(self), _where(base),
                          lambda: post(alerts_url(base), body, self.params),
                          self.params.wait)
