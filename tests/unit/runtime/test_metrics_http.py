"""The metrics endpoint's paths: /metrics serves the metrics, /healthz and /readyz answer
the probes, any other path is 404 naming the paths served.

Before: every path but /healthz and /readyz returned the metrics page with 200, so a
mistyped probe path (`/livez`, `/health`) passed whatever the service's state."""

from __future__ import annotations

from typing import Any

from guardian.runtime.metrics import Metrics, _with_health


def _get(app: Any, path: str) -> tuple[str, str]:
    statuses: list[str] = []
    environ = {"PATH_INFO": path, "REQUEST_METHOD": "GET", "QUERY_STRING": ""}
    body = b"".join(app(environ, lambda status, headers: statuses.append(status)))
    return statuses[0], body.decode()


def test_only_metrics_serves_the_metrics_and_other_paths_are_404() -> None:
    metrics = Metrics()
    metrics.rules_blind.set(2)
    metrics.rule_blind.causes = {"gpu": "unconfigured", "crash": "unavailable"}
    from prometheus_client import make_wsgi_app
    app = _with_health(make_wsgi_app(metrics.registry), lambda: (False, "stuck: 120s"),
                       lambda: (True, "ready: 3 rule(s)"))
    status, text = _get(app, "/metrics")
    assert status == "200 OK" and "guardian_rules_blind 2.0" in text
    assert 'guardian_rule_blind{cause="unconfigured",rule="gpu"} 1.0' in text
    assert 'guardian_rule_blind{cause="unavailable",rule="crash"} 1.0' in text
    assert _get(app, "/healthz") == ("503 Service Unavailable", "stuck: 120s\n")
    assert _get(app, "/readyz") == ("200 OK", "ready: 3 rule(s)\n")
    for wrong in ("/livez", "/", "/healthz/", "/metrics/x", ""):
        status, text = _get(app, wrong)
        assert status == "404 Not Found", wrong
        assert text == (f"not found: {wrong}; guardian serves /metrics, /healthz, "
                        "/readyz\n"), text
    # without the probes (a textfile-only caller): only /metrics
    bare = _with_health(make_wsgi_app(metrics.registry), None)
    assert _get(bare, "/healthz") == (
        "404 Not Found", "not found: /healthz; guardian serves /metrics\n")
