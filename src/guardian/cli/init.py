"""`guardian init`: the shipped defaults laid out for the service
(:mod:`guardian.runtime.layout`)."""

from __future__ import annotations

import argparse
from pathlib import Path

from guardian.cli.common import json_out
from guardian.core.exitcodes import ExitCode


def cmd_init(args: argparse.Namespace) -> ExitCode:
    from guardian.runtime.layout import init
    try:
        changes = init(Path(args.root), args.exec_path)
    except OSError as exc:
        if args.json:
            json_out("init", ok=False, errors=[f"{exc.filename or args.root}: {exc.strerror}"])
        else:
            print(f"guardian init: {exc.filename or args.root}: {exc.strerror}")
        return ExitCode.FAILED
    if args.json:
        json_out("init", [{"path": str(c.path), "what": c.what} for c in changes],
                 warnings=[str(c) for c in changes if c.what == "kept"])
    else:
        for c in changes:
            print(c)
    return ExitCode.OK
