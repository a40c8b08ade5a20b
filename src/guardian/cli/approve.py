"""`guardian approve RULE --why TEXT`: a human's approval of a rule whose disruptive
actions wait for one (``approve = { timeout = ... }``), kept in the state directory
(approvals.json, beside guardian pause's holds) where the service reads it at its next
tick. An approval counts only for a wait that began at or before it was given: the
command says whether RULE waits now (from the service's saved state). It approves only
what the service would take: a RULE that names no loaded rule, or one none of whose
actions ever waits for an approval, is refused; what it wrote is read back with the
service's own checks (its owner, its mode, every directory above it), and a file the
service would refuse is said to be refused, never promised to run."""

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
from guardian.core.diagnostics import RuleError, meant
from guardian.core.exitcodes import ExitCode
from guardian.engine import gate
from guardian.model.approvals import Approval, ApprovalSpec
from guardian.policy.loader import load_rules
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
    unfit = _unfit(config.service.rules, approval.rule)
    if unfit:
        return _refuse(args, f"{unfit}; nothing approved", ExitCode.USAGE)
    f = ApprovalFile(path)
    kept = [a for a in f.read()[0] if a.rule != approval.rule and a.until > now]
    try:
        f.write([*kept, approval])
    except OSError as exc:
        return _refuse(args, f"cannot write {path}: {exc.strerror or exc}", ExitCode.FAILED)
    read, problems = ApprovalFile(path).read()  # what the service's own reader takes
    if not any((a.rule, a.by, a.why) == (approval.rule, approval.by, approval.why)
               and abs(a.at - approval.at) < 0.001 for a in read):
        why = "; ".join(problems) or f"its reader does not find it in {path}"
        return _refuse(args, f"the service will not take this approval: {why} (kept in "
                             f"{path}: it counts once that is fixed)", ExitCode.FAILED)
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


def _unfit(rules: list[str], rule: str) -> str:
    """Why an approval of ``rule`` could never let anything run under the service's
    ``rules`` ("" when it could, or when the rules do not load: then nothing is known to
    compare with, as `guardian pause` does)."""
    try:
        loaded = load_rules(rules)
    except Exception:  # rules not here or broken: nothing known to compare with
        return ""
    found = loaded.by_name(rule)
    if found is None:
        return f"no loaded rule is named {rule!r} ({meant(rule, [r.name for r in loaded.rules])})"
    if not gate.ever_waits(found):
        return (f"rule {rule} has no approve gate: none of its actions ever waits for "
                f"approval")
    return ""


def _refuse(args: argparse.Namespace, why: str, code: ExitCode) -> ExitCode:
    """Say why nothing (or nothing the service takes) was approved."""
    if args.json:
        json_out("approve", ok=False, errors=[why])
    else:
        print(f"guardian approve: {why}", file=sys.stderr)
    return code


def _rfc3339(t: float) -> str:
    import datetime as dt
    return dt.datetime.fromtimestamp(t, dt.timezone.utc).isoformat()
