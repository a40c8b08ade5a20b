"""/readyz, the DaemonSet's readiness probe: 503 until the rules are loaded and evaluated
once (what READY=1 tells systemd), 200 after, on the metrics port beside /healthz, which
stays the liveness question (alive, even degraded). Before: no /readyz (the metrics app
answered it as /metrics, 200 from the start) and no readiness probe, so a rolling update
went on to the next nodes before a new pod had evaluated anything."""

from __future__ import annotations

import urllib.error
import urllib.request
from pathlib import Path

from tests.support.checkout import write
from tests.support.daemon import free_port

RULES = '''version = 1

[[rule]]
name = "busy"
summary = "every core counts as busy"
when = "cpu.core.user_pct >= 0"
cooldown = "1h"
  [[rule.action]]
  use = "log"
  message = "cores busy"
'''


def _get(port: int, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def test_readyz_answers_503_until_the_first_evaluation_then_200(tmp_path: Path) -> None:
    from guardian.runtime.config import Config
    from guardian.service.daemon import Daemon, ServiceOptions

    port = free_port()
    rules = write(tmp_path / "rules", "r.toml", RULES).parent
    d = Daemon(ServiceOptions(rules=[str(rules)], interval=1.0, metrics_port=port,
                              state_path=tmp_path / "state.json",
                              require_root_owned_rules=False), Config())
    assert d.start() == 0
    try:
        code, body = _get(port, "/readyz")
        assert code == 503 and body.startswith("not ready: the first evaluation is under "
                                               "way ("), (code, body)
        assert _get(port, "/healthz")[0] == 200  # alive meanwhile: not the same question
        d.tick()
        assert _get(port, "/readyz") == (200, "ready: 1 rule(s) loaded and evaluated\n")
        # a loop that stops completing ticks is no longer alive; readiness is not liveness
        d.witness.last_tick_done = d.witness.started - 600
        assert _get(port, "/healthz")[0] == 503
    finally:
        d.shutdown()


def test_readyz_before_the_rules_load() -> None:
    from guardian.runtime.config import Config
    from guardian.service.daemon import Daemon, ServiceOptions

    d = Daemon(ServiceOptions(rules=["no-such-rules"], metrics_port=None), Config())
    ok, text = d.readiness()
    assert not ok and text.startswith("not ready: loading the rules ("), text
