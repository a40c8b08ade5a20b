"""`guardian completion` and `guardian man`: shell completion and the manual page, both
generated from the command line's own parser (shtab, argparse-manpage), so they can never
describe options the parser does not have."""

from __future__ import annotations

import argparse

SHELLS = ("bash", "zsh", "tcsh")


def cmd_completion(args: argparse.Namespace) -> int:
    import shtab

    from guardian.cli import _parser
    print(shtab.complete(_parser(), args.shell))
    return 0


def cmd_man(args: argparse.Namespace) -> int:
    from argparse_manpage.manpage import Manpage

    from guardian.cli import _parser
    from guardian.core.version import __version__
    parser = _parser()
    page = Manpage(parser, _data={"version": __version__, "project_name": "guardian",
                                  "description": parser.description,
                                  "manual_title": "guardian manual"})
    print(str(page))
    return 0
