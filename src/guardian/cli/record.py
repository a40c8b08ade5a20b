"""`guardian record`: every signal of this host over time, into a file for
`guardian replay`."""

from __future__ import annotations

import argparse
import sys
import time

from guardian.cli.common import cli_config, host_collector, print_errors, report_sources
from guardian.core.diagnostics import RuleError
from guardian.core.durations import parse_duration
from guardian.core.exitcodes import ExitCode


def cmd_record(args: argparse.Namespace) -> ExitCode:
    from guardian.runtime.recording import Writer, header
    try:
        config = cli_config(args)
        interval, duration = parse_duration(args.interval), parse_duration(args.duration)
    except RuleError as exc:
        return print_errors(exc, args)
    except ValueError as exc:
        print(f"guardian record: {exc}", file=sys.stderr)
        return ExitCode.USAGE
    coll = host_collector(args.root, config)
    report_sources(coll)
    try:
        writer = Writer(args.output, header(coll, interval, args.note))
    except FileExistsError:
        print(f"guardian record: {args.output} exists; record into a new file",
              file=sys.stderr)
        return ExitCode.USAGE
    except OSError as exc:
        print(f"guardian record: cannot create {args.output}: {exc.strerror}", file=sys.stderr)
        return ExitCode.USAGE
    start = time.monotonic()
    tty = sys.stderr.isatty()
    try:
        while True:
            t = time.monotonic()
            writer.write(coll.collect(t))
            elapsed = t - start
            line = (f"recorded {writer.count} snapshots, {writer.size() / 1024:.0f} KiB, "
                    f"{elapsed:.0f}s of {duration:g}s")
            print(("\r" + line) if tty else line, end="" if tty else "\n",
                  file=sys.stderr, flush=True)
            if elapsed >= duration:
                break
            time.sleep(max(0.0, interval - (time.monotonic() - t)))
    except KeyboardInterrupt:
        print("\nguardian record: stopped; everything recorded so far is kept",
              file=sys.stderr)
    finally:
        writer.close()
        coll.close()
    if tty:
        print(file=sys.stderr)
    return ExitCode.OK
