"""Round 4 of hostile input, notifications: a receiver that echoes the request line
(with the webhook's token) into a status line http.client cannot parse, secrets with a
control character, and a receiver that drips its answer a byte at a time. Loopback only;
every server stops with its test."""

from __future__ import annotations

import contextlib
import logging
import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from guardian import Engine, Executor, Host, Snapshot, load_text
from guardian.actions.notify import Webhook, WebhookParams, post
from guardian.core.audit import AuditLog
from guardian.core.errors import GuardianError
from guardian.plugin.contract import ActionContext
from guardian.plugin.secrets import scrub

TOKEN = "tok-7f3a9c2e51"


@contextlib.contextmanager
def raw_server(answer: Callable[[socket.socket, bytes], None]
               ) -> Iterator[tuple[str, threading.Event]]:
    """A loopback TCP server: each connection's request head is handed to ``answer``;
    it stops (and every connection closes) when the test's block ends."""
    stop = threading.Event()
    srv = socket.create_server(("127.0.0.1", 0))
    srv.settimeout(0.1)
    conns: list[socket.socket] = []

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = srv.accept()
            except OSError:
                continue
            conns.append(conn)
            conn.settimeout(0.2)
            head = b""
            with contextlib.suppress(OSError):
                while b"\r\n\r\n" not in head and not stop.is_set():
                    with contextlib.suppress(TimeoutError):
                        head += conn.recv(4096) or b"\r\n\r\n"
            threading.Thread(target=_answer, args=(answer, conn, head), daemon=True).start()

    def _answer(fn: Callable[[socket.socket, bytes], None], conn: socket.socket,
                head: bytes) -> None:
        with contextlib.suppress(OSError):
            fn(conn, head)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{srv.getsockname()[1]}", stop
    finally:
        stop.set()
        thread.join(5)
        srv.close()
        for c in conns:
            c.close()


RULE = '''version = 1
[[rule]]
name = "nic-stall"
summary = "A NIC queue stalls"
when = "memcg.dying > 10"
  [[rule.action]]
  use = "notify.webhook"
  url = "{url}/hook?token={token}"
  headers = {{ Authorization = "Bearer {token}" }}
  attempts = 1
'''


def test_a_receivers_echo_of_the_token_never_reaches_the_log_or_the_audit(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Before: http.client's BadStatusLine (not an OSError) escaped the action with the
    receiver's line in it, and the executor audited and logged `apply raised
    BadStatusLine('GET /hook?token=...')`."""
    def echo(conn: socket.socket, head: bytes) -> None:
        conn.sendall(head.split(b"\r\n")[0] + b" Authorization: Bearer " + TOKEN.encode() +
                     b"\r\n\r\n")

    with raw_server(echo) as (url, _):
        engine = Engine(load_text(RULE.format(url=url, token=TOKEN)))
        audit = tmp_path / "audit.jsonl"
        ex = Executor(Host(), dry_run=False, audit=AuditLog(audit))
        snap = Snapshot(0.0, {"memcg.dying": 50.0})
        with caplog.at_level(logging.DEBUG):
            [result] = ex.run(engine.evaluate(snap), snap)
    assert result.result == "failed"
    said = audit.read_text() + caplog.text + result.describe()
    assert "BadStatusLine" in said and "<redacted>" in said
    assert TOKEN not in said


def test_the_forms_a_secret_takes_in_error_text_are_scrubbed() -> None:
    url = f"https://hooks.example/services/T0/B0/{TOKEN}?token={TOKEN}x&a=1"
    for text in (f"URL can't contain control characters. '/services/T0/B0/{TOKEN}?token="
                 f"{TOKEN}x&a=1'", f"HTTPError({url!r})", f"b'Bearer {TOKEN}\\nX: 1'",
                 f"{TOKEN}x".replace("-", "%2D")):
        assert TOKEN not in scrub(text, [url, f"Bearer {TOKEN}\nX: 1"]), text


@pytest.mark.parametrize("secret", [
    {"url": f"http://127.0.0.1/hook?token={TOKEN}\nX-Injected: 1"},
    {"url": f"http://127.0.0.1/hook?token={TOKEN}\r"},
    {"url": "http://127.0.0.1/hook", "headers": {"Authorization": f"Bearer {TOKEN}\r\nX: 1"}},
    {"url": "http://127.0.0.1/hook", "headers": {"Authorization": f"Bearer {TOKEN}\x00"}},
    {"url": "http://127.0.0.1/hook", "headers": {"Bad Name": "x"}},
])
def test_a_secret_with_a_control_character_fails_check(secret: dict[str, object]) -> None:
    """Before: `guardian check` passed it, and the request raised with the secret in
    its text (http.client: "Invalid header value b'Bearer ...'")."""
    headers = secret.get("headers")
    lines = [f'  url = """{secret["url"]}"""'.replace("\n", "\\n").replace("\r", "\\r")]
    if isinstance(headers, dict):
        lines.append("  headers = { " + ", ".join(
            f'"{k}" = "{v}"'.replace("\n", "\\n").replace("\r", "\\r").replace("\x00", "\\u0000")
            for k, v in headers.items()) + " }")
    text = ('version = 1\n[[rule]]\nname = "r"\nsummary = "s"\nwhen = "memcg.dying > 10"\n'
            '  [[rule.action]]\n  use = "notify.webhook"\n' + "\n".join(lines) + "\n")
    with pytest.raises(GuardianError) as err:
        load_text(text)
    assert TOKEN not in str(err.value)


def _drip(conn: socket.socket, head: bytes) -> None:
    """Answers one byte every 0.1 s, for ever (each read well inside a 1 s timeout)."""
    for b in b"HTTP/1.1 200 OK\r\n" + b"X-Slow: " + b"a" * 10_000:
        conn.sendall(bytes([b]))
        time.sleep(0.1)


def test_a_dripping_receiver_is_cut_at_the_budget_and_never_holds_other_actions(
        ) -> None:
    """Before: each read waited up to `timeout` (1 s) and got a byte, so the delivery
    went on until apply_timeout, and the next actions waited behind it."""
    ctx = ActionContext("r", Snapshot(0.0, {}), Host(), dry_run=False, kind="firing")
    with raw_server(_drip) as (url, _):
        params = WebhookParams.model_validate({"url": url, "timeout": 1, "attempts": 1,
                                               "budget": 1.5, "wait": 0})
        done = threading.Event()
        got: list[tuple[bool, str, int]] = []

        def deliver() -> None:
            got.append(post(url, b"{}", params))
            done.set()

        threading.Thread(target=deliver, daemon=True).start()
        assert done.wait(10), "the delivery outlived its budget"
        [(ok, what, _)] = got
        assert not ok and "budget" in what
        # the action hands a delivery still going to the background: apply returns
        hook = Webhook(params)
        returned = threading.Event()
        outcomes = []

        def apply() -> None:
            outcomes.append(hook.apply(hook.plan(ctx), ctx))
            returned.set()

        threading.Thread(target=apply, daemon=True).start()
        assert returned.wait(1.0), "apply waited on the receiver"
        [out] = outcomes
        assert out.ok and out.verified is None and "background" in out.detail
