"""`guardian pause`, `guardian resume` and `guardian holds`: holds on this node, kept in
the state directory (the service reads them at every tick, and they survive restarts).

One module for the three commands, not one each: they are one feature over one file
(pause writes it, resume rewrites it, holds lists it beside the other sources), and they
share the options, where that file is, the ``--label`` parsing and the refusal to
rewrite a file that cannot be read."""

from __future__ import annotations

import argparse
import datetime as dt
import difflib
import getpass
import os
import sys
import time
from pathlib import Path

from pydantic import ValidationError

from guardian.cli.common import cli_config, json_out, print_errors
from guardian.core.diagnostics import RuleError, meant
from guardian.core.durations import parse_duration
from guardian.core.exitcodes import ExitCode
from guardian.model.holds import Hold, HoldSpec, in_force
from guardian.policy.loader import load_rules
from guardian.runtime.holds import HoldFile
from guardian.runtime.operate import holds_path, readers
from guardian.runtime.paths import service_paths


def _file(args: argparse.Namespace) -> HoldFile | ExitCode:
    if args.holds_file:
        return HoldFile(Path(args.holds_file))
    try:
        config = cli_config(args)
    except RuleError as exc:
        return print_errors(exc, args)
    path = holds_path(config, service_paths(config).state)
    assert path is not None
    return HoldFile(path)


def _labels(items: list[str]) -> tuple[tuple[str, str], ...]:
    out = {}
    for item in items:
        k, sep, v = item.partition("=")
        if not sep or not k:
            raise SystemExit(f"guardian pause: --label {item!r}: expected KEY=VALUE")
        out[k] = v
    return tuple(sorted(out.items()))


def cmd_pause(args: argparse.Namespace) -> ExitCode:
    """Add a hold: the matching rules evaluate and plan, and act again when it ends."""
    f = _file(args)
    if isinstance(f, ExitCode):
        return f
    now = time.time()
    if args.until:
        try:
            when = dt.datetime.fromisoformat(args.until.replace("Z", "+00:00"))
        except ValueError:
            print(f"guardian pause: --until {args.until!r}: expected RFC 3339, e.g. "
                  f"2026-12-05T06:00:00Z", file=sys.stderr)
            return ExitCode.USAGE
        if when.tzinfo is None:
            print("guardian pause: --until needs a time zone (Z or +01:00)", file=sys.stderr)
            return ExitCode.USAGE
        until = when.timestamp()
    else:
        until = now + parse_duration(args.for_)
    if until <= now:
        print("guardian pause: the hold would have ended already", file=sys.stderr)
        return ExitCode.USAGE
    author = args.author or os.environ.get("SUDO_USER") or getpass.getuser()
    try:  # the reader's own checks: never write an entry it would drop
        spec = HoldSpec.model_validate({
            "rule": args.rule, "labels": dict(_labels(args.label)), "reason": args.reason,
            "author": author, "until": dt.datetime.fromtimestamp(until, dt.timezone.utc)})
    except ValidationError as exc:
        for err in exc.errors():
            where = "--" + ".".join(str(x) for x in err["loc"]) if err["loc"] else "hold"
            msg = err["msg"].removeprefix("Value error, ")
            print(f"guardian pause: {where}: {msg}", file=sys.stderr)
        return ExitCode.USAGE
    hold = Hold.from_spec(spec, "cli")
    current = f.read()
    if _refuse_broken(current, "pause"):
        return ExitCode.FAILED
    _warn_unknown_rule(args, hold.rule)
    holds = [h for h in in_force(current, now)
             if (h.rule, h.labels) != (hold.rule, hold.labels)]  # a new pause replaces
    f.write([*holds, hold])
    if args.json:
        json_out("pause", hold.to_dict())
    else:
        print(f"rules {hold.matcher}: {hold.describe()} (kept in {f.path})")
    return ExitCode.OK


def _refuse_broken(holds: list[Hold], verb: str) -> bool:
    """Say so and return True when the pause file cannot be read or parsed: rewriting
    it would drop what it holds (it holds every rule until fixed or removed)."""
    broken = [h for h in holds if h.broken]
    for h in broken:
        print(f"guardian {verb}: {h.reason}; fix or remove the file first (it holds "
              f"every rule until then)", file=sys.stderr)
    return bool(broken)


def _warn_unknown_rule(args: argparse.Namespace, rule: str) -> None:
    """Warn (never fail) when ``rule`` names none of the configured rules."""
    if rule == "*":
        return
    try:
        names = {r.name for r in load_rules(cli_config(args).service.rules).rules}
    except Exception:  # rules not here or broken: nothing known to compare with
        return
    if rule not in names:
        known = meant(rule, names)
        print(f"guardian pause: warning: no loaded rule is named {rule!r} ({known}); the "
              f"hold is kept", file=sys.stderr)


def cmd_resume(args: argparse.Namespace) -> ExitCode:
    """Remove `guardian pause` holds: those on RULE (and --label), or --all."""
    f = _file(args)
    if isinstance(f, ExitCode):
        return f
    current = in_force(f.read(), time.time())
    if not args.all and _refuse_broken(current, "resume"):
        return ExitCode.FAILED
    current = [h for h in current if not h.broken]
    if args.all:
        gone, kept = current, []
    else:
        want = (args.rule or "*", _labels(args.label))
        gone = [h for h in current if (h.rule, h.labels) == want]
        kept = [h for h in current if (h.rule, h.labels) != want]
    f.write(kept)
    if args.json:
        json_out("resume", [h.to_dict() for h in gone], ok=bool(gone))
    elif not gone:
        held = sorted({h.rule for h in current} - {"*", args.rule})  # a name, not labels
        hint = difflib.get_close_matches(args.rule, held, n=1) if args.rule else []
        elsewhere = "holds from a drop-in file or Kubernetes end where they were set"
        print(f"guardian resume: no such hold; did you mean {hint[0]!r}? ({elsewhere})"
              if hint else f"guardian resume: no such hold (guardian holds lists them); "
                           f"{elsewhere}", file=sys.stderr)
    for h in gone if not args.json else []:
        print(f"resumed rules {h.matcher} (was {h.describe()})")
    return ExitCode.OK if gone else ExitCode.FAILED


def cmd_holds(args: argparse.Namespace) -> ExitCode:
    """The holds in force on this node, from every source the config names. A source
    that could not be read (the Kubernetes API: no credentials, no answer) is said, and
    the command exits 69: what it holds is unknown, never "no holds"."""
    try:
        config = cli_config(args)
    except RuleError as exc:
        return print_errors(exc, args)
    state = service_paths(config).state
    holds: list[Hold] = []
    unknown: list[str] = []
    for src in readers(config, state):
        holds.extend(src.read())
        unread = getattr(src, "unknown", None)  # the Kubernetes readers
        if callable(unread):
            unknown.extend(unread())
    if args.holds_file:
        holds = [h for h in holds if not h.source.startswith("cli")] + \
            HoldFile(Path(args.holds_file)).read()
    holds = sorted(in_force(holds, time.time()), key=lambda h: h.until)
    code = ExitCode.UNAVAILABLE if unknown else ExitCode.OK
    if args.json:
        json_out("holds", [h.to_dict() for h in holds], ok=not unknown,
                 errors=[f"not read, what it holds is unknown: {u}" for u in unknown])
        return code
    if not holds and not unknown:
        print("No holds: every rule acts.")
    for h in holds:
        print(f"{h.matcher:<24} {h.describe()}  [{h.source}]")
    if unknown:
        print(f"Not read, so what {'they hold' if len(unknown) > 1 else 'it holds'} is "
              f"unknown{' besides the holds above' if holds else ''}:")
    for u in unknown:
        print(f"  {u}")
    return code
