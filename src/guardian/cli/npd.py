"""`guardian import npd FILE.json`: node-problem-detector's monitor configs as guardian
configuration and rules (the conversion: :mod:`guardian.policy.npd`). The module is named
after the one tool ``import`` knows: ``import`` itself is a Python keyword."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from guardian.core.exitcodes import ExitCode
from guardian.policy.npd import NpdConfigError, import_npd


def cmd_import(args: argparse.Namespace) -> ExitCode:
    try:
        got = import_npd(Path(args.file), Path(args.base) if args.base else None,
                         args.log_only)
    except NpdConfigError as exc:
        print(f"guardian import npd: {exc}", file=sys.stderr)
        return ExitCode.FAILED
    for note in got.notes:
        print(f"note: {note}", file=sys.stderr)
    if not args.output:
        print(got.config)
        print("# ---- rules ----")
        print(got.rules)
        return ExitCode.OK
    out = Path(args.output)
    (out / "rules").mkdir(parents=True, exist_ok=True)
    config = out / f"npd-{got.name}.guardian.toml"
    rules = out / "rules" / f"npd-{got.name}.toml"
    config.write_text(got.config)
    rules.write_text(got.rules)
    print(f"wrote {config} (append it to guardian.toml) and {rules}")
    return ExitCode.OK
