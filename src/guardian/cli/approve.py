"""`guardian approve RULE --why TEXT`: a human's approval of a rule whose disruptive
actions wait for one (``approve = { timeout = ... }``), kept in the state directory
(approvals.json, beside guardian pause's holds) where the service reads it at its next
tick. An approval counts only for a wait that began at or before it was given: the
command says whether RULE waits now (from the service's saved state)."""

from __future__ import annotations

import argparse
import getpass
import json
import os
import sys
import time
from pathlib import Path

from pydantic import ValidationError

from guardian.cli.common import cli_config, json_out, print_errors
from guardian.core.diagnostics import RuleError
from guardian.core.exitcodes import ExitCode
from guardian.model.approvals import Approval, ApprovalSpec
from guardian.runtime.approvals import ApprovalFile
from guardian.runtime.operate import approvals_path
from guardian.runtime.paths import service_paths


def _waits(state: Path, rule: str) -> bool | None:
    """Whether the service's saved state says ``rule`` waits for approval (None: no
    state to read)."""
    from guardian.runtime import state as state_file
    try:
        raw = json.loads(state.read_text())
        entry = raw["rules"].get(rule) if isinstance(raw, dict) else None
        return entry is not None and state_file.rule_state(entry).awaiting is not None
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


def cmd_approve(args: argparse.Namespace) -> ExitCode:
    """Approve RULE's waiting disruptive actions, with who and why."""
    try:
        config = cli_config(args)
    except RuleError as exc:
        return print_errors(exc, args)
    state = Path(args.state) if args.state else service_paths(config).state
    path = Path(args.approvals_file) if args.approvals_file else \
        approvals_path(config, state)
    assert path is not None
    now = time.time()
    by = args.by or os.environ.get("SUDO_USER") or getpass.getuser()
    try:  # the reader's own checks: never write an entry it would drop
        spec = ApprovalSpec.model_validate({"rule": args.rule, "by": by, "why": args.why,
                                            "at": _rfc3339(now)})
    except ValidationError as exc:
        for err in exc.errors():
            where = "--" + ".".join(str(x) for x in err["loc"]) if err["loc"] else "approval"
            print(f"guardian approve: {where}: {err['msg'].removeprefix('Value error, ')}",
                  file=sys.stderr)
        return ExitCode.USAGE
    approval = Approval.from_spec(spec, "cli")
    f = ApprovalFile(path)
    kept = [a for a in f.approvals() if a.rule != approval.rule and a.until > now]
    try:
        f.write([*kept, approval])
    except OSError as exc:
        print(f"guardian approve: cannot write {path}: {exc.strerror or exc}",
              file=sys.stderr)
        return ExitCode.FAILED
    waits = _waits(state, approval.rule)
    note = {True: "it waits for approval: its gated actions run at the service's next "
                  "evaluation",
            False: "it does not wait for approval now: this approves only a wait that "
                   "began at or before now",
            None: "no saved state says whether it waits"}[waits]
    if args.json:
        json_out("approve", {**approval.to_dict(), "file": str(path), "waits": waits})
    else:
        print(f"rule {approval.rule}: {approval.describe()} (kept in {path}); {note}")
    return ExitCode.OK


def _rfc3339(t: float) -> str:
    import datetime as dt
    return dt.datetime.fromtimestamp(t, dt.timezone.utc).isoformat()
