"""`guardian health`: the running service's /healthz, for exec probes and scripts.

Exit 0: ok; 3: alive but degraded (a blind rule, a source unavailable or failing); 1: no
answer, or stuck. ``--live`` asks only whether the loop is alive (a liveness probe: a
restart would not bring a missing device back), so degraded exits 0 there."""

from __future__ import annotations

import argparse
import sys
import urllib.error
import urllib.request

from guardian.cli.common import cli_config, json_out, listen_override, print_errors
from guardian.core.diagnostics import RuleError
from guardian.core.durations import parse_duration
from guardian.core.exitcodes import ExitCode


def cmd_health(args: argparse.Namespace) -> ExitCode:
    try:
        metrics = cli_config(args).service.metrics
    except RuleError as exc:
        return print_errors(exc, args)
    env_address, env_port = listen_override()
    address = args.address or env_address or metrics.address
    if address in ("0.0.0.0", "::", ""):  # listening everywhere: ask on loopback
        address = "127.0.0.1"
    host = f"[{address}]" if ":" in address else address
    url = f"http://{host}:{args.port or env_port or metrics.port}/healthz"
    try:
        with urllib.request.urlopen(url, timeout=parse_duration(args.timeout)) as reply:
            ok, text = True, reply.read().decode(errors="replace").strip()
    except urllib.error.HTTPError as exc:
        ok, text = False, exc.read().decode(errors="replace").strip()
    except (urllib.error.URLError, OSError) as exc:
        ok, text = False, f"no answer from {url}: {getattr(exc, 'reason', exc)}"
    degraded = ok and text.startswith("degraded")
    state = "degraded" if degraded else "ok" if ok else "unhealthy"
    if args.json:
        json_out("health", {"url": url, "healthy": ok and not degraded, "alive": ok,
                            "state": state, "detail": text}, ok=ok,
                 errors=[] if ok else [text])
    else:
        print(text, file=sys.stdout if ok else sys.stderr)
    if not ok:
        return ExitCode.FAILED
    return ExitCode.DEGRADED if degraded and not args.live else ExitCode.OK
