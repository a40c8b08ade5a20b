"""Notification actions, so guardian's decisions page through the team's routes:
``notify.webhook`` POSTs JSON (a templated body for chat tools) and
``notify.alertmanager`` sends alerts to Alertmanager's v2 API (``POST /api/v2/alerts``),
firing while the rule fires and resolved (``endsAt`` now) when it resolves.

Both retry a failed POST (a connection error, 429 or 5xx) with doubling waits, within
``budget`` seconds in all. Neither follows a redirect: a 3xx answer is a failed delivery,
not retried (following it would send the secret headers wherever it points). URLs and
headers are secrets, never shown in plans, the audit log or decisions (a chat webhook's
URL is its credential).
"""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import socket
import time
import urllib.error
import urllib.request
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
                                     "together: no try starts that could not end within "
                                     "it")

    @field_validator("url")
    @classmethod
    def _http(cls, v: SecretStr) -> SecretStr:
        parts = urlsplit(v.get_secret_value())
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise ValueError("expected an http:// or https:// URL")
        return v


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


_OPENER = urllib.request.build_opener(_NoRedirect)


def post(url: str, body: bytes, p: PostParams) -> tuple[bool, str, int]:
    """POST ``body`` as JSON with bounded retries: (ok, what happened, attempts made)."""
    deadline = time.monotonic() + p.budget
    wait = p.backoff
    why = ""
    headers = {"Content-Type": "application/json", "User-Agent": "guardian",
               **{k: v.get_secret_value() for k, v in p.headers.items()}}
    for attempt in range(1, p.attempts + 1):
        left = deadline - time.monotonic()
        if left <= 0:
            break
        req = urllib.request.Request(url, data=body, headers=headers, method="POST")
        try:
            with _OPENER.open(req, timeout=min(p.timeout, left)) as resp:
                return True, f"HTTP {resp.status}", attempt
        except urllib.error.HTTPError as exc:
            why = f"HTTP {exc.code}"
            if 300 <= exc.code < 400:
                return False, f"{why}: a redirect, not followed", attempt
            if exc.code != 429 and exc.code < 500:
                return False, why, attempt  # the request is wrong: again would not help
        except (TimeoutError, urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            why = f"unreachable: {reason}"
        if attempt < p.attempts and deadline - time.monotonic() > wait:
            time.sleep(wait)
            wait *= 2
        else:
            return False, why, attempt
    return False, why or "no time left in the budget", p.attempts


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
                             "$summary, $reason, $node, $labels, $values are filled in, "
                             "escaped for use inside a JSON string; $values_json and "
                             "$labels_json are JSON as is (default: all of them as one "
                             "object)")


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
            text = Template(p.body).safe_substitute(
                {k: json.dumps(v if isinstance(v, str) else json.dumps(v, sort_keys=True))
                 [1:-1] for k, v in fields.items()},
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
        ok, what, tries = post(self.params.url.get_secret_value(),
                               plan.data["body"].encode(), self.params)
        where = _where(self.params.url.get_secret_value())
        data = {"attempts": tries}
        if ok:
            return Outcome(ok=True, verified=True, detail=f"{where}: {what}", data=data)
        return Outcome(ok=False, error=f"{where}: {what} after {tries} attempt(s)", data=data)


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
        base = self.params.url.get_secret_value()
        ok, what, tries = post(alerts_url(base), plan.data["body"].encode(), self.params)
        data = {"attempts": tries}
        if ok:
            return Outcome(ok=True, verified=True, detail=f"{_where(base)}: {what}", data=data)
        return Outcome(ok=False, error=f"{_where(base)}: {what} after {tries} attempt(s)",
                       data=data)
