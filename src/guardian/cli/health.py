"""`guardian health`: the running service's /healthz, for exec probes and scripts."""

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
    if args.json:
        json_out("health", {"url": url, "healthy": ok, "detail": text}, ok=ok,
                 errors=[] if ok else [text])
    else:
        print(text, file=sys.stdout if ok else sys.stderr)
    return ExitCode.OK if ok else ExitCode.FAILED
