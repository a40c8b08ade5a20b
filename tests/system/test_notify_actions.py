"""notify.webhook and notify.alertmanager against a local HTTP receiver: the payloads,
bounded retries, secrets kept out of plans, decisions and the audit log, and the
Alertmanager payload held to Alertmanager's own API schema."""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from guardian import Engine, Executor, Host, Snapshot, load_text
from guardian.actions.notify import (
    Alertmanager,
    AlertmanagerParams,
    Webhook,
    WebhookParams,
    alerts_url,
)
from guardian.core.audit import AuditLog
from guardian.plugin.contract import ActionContext

# Alertmanager's v2 API, POST /api/v2/alerts takes `postableAlerts`: transcribed from
# prometheus/alertmanager api/v2/openapi.yaml (commit 07d03b6c2c7e747335198f07d382060721dd2831,
# definitions postableAlerts, postableAlert, alert, labelSet; Swagger 2.0, whose
# definitions are JSON Schema draft 4).
ALERTMANAGER_DEFINITIONS: dict[str, Any] = {
    "postableAlerts": {"type": "array", "items": {"$ref": "#/definitions/postableAlert"}},
    "postableAlert": {"allOf": [
        {"type": "object", "properties": {
            "startsAt": {"type": "string", "format": "date-time"},
            "endsAt": {"type": "string", "format": "date-time"},
            "annotations": {"$ref": "#/definitions/labelSet"}}},
        {"$ref": "#/definitions/alert"}]},
    "alert": {"type": "object", "properties": {
        "labels": {"$ref": "#/definitions/labelSet"},
        "generatorURL": {"type": "string", "format": "uri"}},
        "required": ["labels"]},
    "labelSet": {"type": "object", "additionalProperties": {"type": "string"}},
}
POSTABLE_ALERTS = {"$ref": "#/definitions/postableAlerts",
                   "definitions": ALERTMANAGER_DEFINITIONS}
# and what Alertmanager's handler checks beyond it (types/alert.go Validate, model
# LabelName.IsValid): label names [a-zA-Z_][a-zA-Z0-9_]*, at least one label


class Receiver:
    def __init__(self) -> None:
        self.requests: list[tuple[str, dict[str, str], Any]] = []
        self.answers: list[int] = []  # status codes to answer with, then 200
        self.location = ""  # sent with a 3xx answer


@contextlib.contextmanager
def receiver() -> Iterator[tuple[str, Receiver]]:
    got = Receiver()

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            got.requests.append((self.path, dict(self.headers), json.loads(body)))
            code = got.answers.pop(0) if got.answers else 200
            self.send_response(code)
            if got.location and 300 <= code < 400:
                self.send_header("Location", got.location)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def do_GET(self) -> None:  # where a followed 302 would go
            got.requests.append((self.path, dict(self.headers), None))
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05},
                              daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", got
    finally:
        server.shutdown()
        server.server_close()


RULES = '''version = 1
[[rule]]
name = "nic-stall"
summary = "A NIC queue stalls"
when = "memcg.dying > 10"
severity = "critical"
labels = {{ team = "net", "app.kubernetes.io/part-of" = "guardian" }}
  [[rule.action]]
  use = "notify.alertmanager"
  on = "both"
  url = "{url}"
  headers = {{ Authorization = "Bearer s3cret-token" }}
  generator_url = "https://grafana.example/d/guardian"
  [[rule.action]]
  use = "notify.webhook"
  url = "{url}/hooks/T000/B000/XXXXsecretXXXX"
  body = '{{"text": "guardian: $rule is $kind on $node: $summary", "values": $values_json}}'
'''


def test_alertmanager_and_webhook_payloads_at_a_receiver(tmp_path: Path) -> None:
    with receiver() as (url, got):
        engine = Engine(load_text(RULES.format(url=url)))
        audit = tmp_path / "audit.jsonl"
        ex = Executor(Host(), dry_run=False, audit=AuditLog(audit))
        sent_from = time.time()  # the wall clock around the sends: what endsAt may say
        for t, v in ((0.0, 50.0), (400.0, 1.0)):
            snap = Snapshot(t, {"memcg.dying": v})
            results = ex.run(engine.evaluate(snap), snap)
            assert all(r.result == "ok" for r in results), [r.error for r in results]
        sent_by = time.time()
        [(fire_path, fire_headers, fired), (hook_path, _, hook),
         (resolve_path, _, resolved)] = got.requests
    assert fire_path == resolve_path == "/api/v2/alerts"
    assert fire_headers["Authorization"] == "Bearer s3cret-token"
    validator = jsonschema.Draft4Validator(POSTABLE_ALERTS,
                                           format_checker=jsonschema.FormatChecker())
    for payload in (fired, resolved):
        validator.validate(payload)
        [alert] = payload
        assert alert["labels"]["alertname"] == "nic-stall"
        assert alert["labels"]["severity"] == "critical"
        assert alert["labels"]["team"] == "net"
        assert alert["labels"]["app_kubernetes_io_part_of"] == "guardian"
        assert all(k[0].isalpha() or k[0] == "_" for k in alert["labels"])
        assert alert["annotations"]["summary"] == "A NIC queue stalls"
    ends = dt.datetime.fromisoformat(fired[0]["endsAt"].replace("Z", "+00:00"))
    starts = dt.datetime.fromisoformat(fired[0]["startsAt"].replace("Z", "+00:00"))
    assert ends - starts == dt.timedelta(hours=1)  # firing: resolves itself if we stop
    ended = dt.datetime.fromisoformat(resolved[0]["endsAt"].replace("Z", "+00:00"))
    # resolved now: when it was sent (endsAt is to the millisecond)
    assert sent_from <= ended.timestamp() + 0.001 and ended.timestamp() <= sent_by
    assert "startsAt" not in resolved[0]
    assert resolved[0]["labels"] == fired[0]["labels"]  # the same alert, resolved
    assert hook_path == "/hooks/T000/B000/XXXXsecretXXXX"
    assert hook["text"].startswith("guardian: nic-stall is firing on ")
    assert hook["values"] == {"memcg.dying": 50}
    # the secrets (the webhook URL's token, the bearer token) are nowhere in the audit log
    text = audit.read_text()
    assert "s3cret" not in text and "XXXXsecretXXXX" not in text
    assert "<redacted>" in text


def test_webhook_retries_within_its_budget_and_never_on_a_client_error() -> None:
    ctx = ActionContext("r", Snapshot(0.0, {}), Host(), dry_run=False, kind="firing",
                        summary="s", severity="warning")
    with receiver() as (url, got):
        hook = Webhook(WebhookParams.model_validate(
            {"url": url, "attempts": 3, "backoff": 0.05}))
        got.answers = [503, 429]
        out = hook.apply(hook.plan(ctx), ctx)
        assert out.ok and out.data["attempts"] == 3 and len(got.requests) == 3
        assert got.requests[0][2]["rule"] == "r"  # the default body: every field
        got.requests.clear()
        got.answers = [500] * 5
        out = hook.apply(hook.plan(ctx), ctx)
        assert not out.ok and "HTTP 500 after 3 attempt(s)" in out.error
        assert len(got.requests) == 3
        got.requests.clear()
        got.answers = [400]
        out = hook.apply(hook.plan(ctx), ctx)
        assert not out.ok and len(got.requests) == 1  # a wrong request is not retried
        got.requests.clear()
        got.answers = [503] * 5
        slow = Webhook(WebhookParams.model_validate(
            {"url": url, "attempts": 10, "backoff": 0.2, "budget": 0.5}))
        out = slow.apply(slow.plan(ctx), ctx)
        # waits of 0.2, 0.4, 0.8 s: the 0.5 s budget leaves room for at most three tries
        assert not out.ok and len(got.requests) == out.data["attempts"] <= 3  # of 10
    down = Webhook(WebhookParams.model_validate({"url": url, "attempts": 2, "backoff": 0}))
    out = down.apply(down.plan(ctx), ctx)
    assert not out.ok and "unreachable" in out.error and "127.0.0.1" in out.error
    bad = Webhook(WebhookParams.model_validate({"url": url, "body": '{"text": $rule}'}))
    assert bad.plan(ctx).refused  # "r" unquoted is not JSON: refused, never sent


def test_a_redirect_is_a_failed_delivery_and_never_followed() -> None:
    """A 3xx is not followed (urllib would resend the Authorization header to wherever it
    points, as a GET): a failed delivery reported with its status, not retried."""
    ctx = ActionContext("r", Snapshot(0.0, {}), Host(), dry_run=False, kind="firing",
                        summary="s", severity="warning")
    with receiver() as (url, got), receiver() as (elsewhere, other):
        got.location = f"{elsewhere}/steal"
        for code in (301, 302, 307, 308):
            for act in (Webhook(WebhookParams.model_validate(
                            {"url": url, "headers": {"Authorization": "Bearer s3cret"},
                             "attempts": 3, "backoff": 0})),
                        Alertmanager(AlertmanagerParams.model_validate(
                            {"url": url, "headers": {"Authorization": "Bearer s3cret"},
                             "attempts": 3, "backoff": 0}))):
                got.requests.clear()
                got.answers = [code] * 3
                out = act.apply(act.plan(ctx), ctx)
                assert not out.ok and f"HTTP {code}" in out.error, out
                assert "redirect" in out.error and "1 attempt(s)" in out.error
                assert len(got.requests) == 1
    assert other.requests == []


def test_alertmanager_url_keeps_its_query_and_joins_the_path() -> None:
    """The API path goes on the URL's path, not after its query string."""
    ctx = ActionContext("r", Snapshot(0.0, {}), Host(), dry_run=False, kind="firing")
    assert alerts_url("http://h/am?token=X") == "http://h/am/api/v2/alerts?token=X"
    assert alerts_url("http://h:9093/") == "http://h:9093/api/v2/alerts"
    with receiver() as (url, got):
        am = Alertmanager(AlertmanagerParams.model_validate(
            {"url": f"{url}/am/?token=X", "attempts": 1}))
        assert am.apply(am.plan(ctx), ctx).ok
        assert [path for path, _, _ in got.requests] == ["/am/api/v2/alerts?token=X"]


def test_webhook_backoff_and_budget_take_durations() -> None:
    p = WebhookParams.model_validate({"url": "http://h/", "backoff": "500ms",
                                      "budget": "1m"})
    assert (p.backoff, p.budget) == (0.5, 60.0)
    q = AlertmanagerParams.model_validate({"url": "http://h/", "backoff": "1s",
                                           "budget": 30})
    assert (q.backoff, q.budget) == (1.0, 30.0)
    for bad in ({"backoff": "2m"}, {"budget": "0s"}, {"budget": "6m"}, {"backoff": "x"}):
        with pytest.raises(ValueError):
            WebhookParams.model_validate({"url": "http://h/", **bad})
