"""`guardian man`: the manual page generated from the command line's own parser
(argparse-manpage), so it never describes an option the parser does not have."""

from __future__ import annotations

import argparse

from guardian.core.exitcodes import ExitCode


def cmd_man(args: argparse.Namespace) -> ExitCode:
    from argparse_manpage.manpage import Manpage

    from guardian.cli import _parser
    from guardian.core.version import __version__
    parser = _parser()
    page = Manpage(parser, _data={"version": __version__, "project_name": "guardian",
                                  "description": parser.description,
                                  "manual_title": "guardian manual"})
    print(str(page))
    return ExitCode.OK
