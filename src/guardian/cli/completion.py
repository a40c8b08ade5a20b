"""`guardian completion`: shell completion generated from the command line's own parser
(shtab), so it never offers an option the parser does not have."""

from __future__ import annotations

import argparse

from guardian.core.exitcodes import ExitCode


def cmd_completion(args: argparse.Namespace) -> ExitCode:
    import shtab

    from guardian.cli import _parser
    print(shtab.complete(_parser(), args.shell))
    return ExitCode.OK
