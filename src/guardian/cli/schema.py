"""`guardian schema`: a JSON Schema of guardian's files, for editors and validators."""

from __future__ import annotations

import argparse
import json

from guardian.core.exitcodes import ExitCode


def cmd_schema(args: argparse.Namespace) -> ExitCode:
    from guardian.runtime.schemas import schema_for
    print(json.dumps(schema_for(args.kind), indent=2))
    return ExitCode.OK
