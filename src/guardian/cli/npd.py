"""`guardian import npd FILE.json`: node-problem-detector's monitor configs as guardian
configuration and rules (the conversion: :mod:`guardian.policy.npd`). The module is named
after the one tool ``import`` knows: ``import`` itself is a Python keyword.

What it would write is checked first as `guardian check --config` would check it (the
fragment and the rule file together); output that would not pass is refused, never
written. ``-o DIR`` creates its files new (``O_EXCL|O_NOFOLLOW``, the ``rules``
directory opened without following a symlink): a file or a symlink someone put there is
refused, never written through or over."""

from __future__ import annotations

import argparse
import errno
import os
import sys
import tempfile
from pathlib import Path

from guardian.core.diagnostics import RuleError
from guardian.core.exitcodes import ExitCode
from guardian.hostio.safefile import create_new, open_directory, remove
from guardian.plugin.registry import default_registry
from guardian.policy.loader import load_rules
from guardian.policy.npd import Imported, NpdConfigError, import_npd
from guardian.runtime import preflight
from guardian.runtime.config import load_config


def problems(got: Imported) -> list[str]:
    """Why the fragment and the rules would not pass `guardian check --config` (each
    ``path:line:col: message``, the paths as ``-o`` names them); none: they pass."""
    names = {"config": f"npd-{got.name}.guardian.toml",
             "rules": f"rules/npd-{got.name}.toml"}
    with tempfile.TemporaryDirectory(prefix="guardian-npd-") as tmp:
        config, rules = Path(tmp, "guardian.toml"), Path(tmp, "rules.toml")
        create_new(config, got.config.encode(), 0o600)
        create_new(rules, got.rules.encode(), 0o600)
        out: list[str] = []
        registry = default_registry()
        try:
            cfg = load_config(config, registry)
        except RuleError as exc:
            out += [str(d) for d in exc.diagnostics]
            cfg = None
        try:
            rs = load_rules([rules], registry)
        except RuleError as exc:
            out += [str(d) for d in exc.diagnostics]
        else:
            if cfg is not None:
                out += [str(d) for d in preflight.errors(rs, cfg)]
    return [p.replace(str(config), names["config"]).replace(str(rules), names["rules"])
            for p in out]


def cmd_import(args: argparse.Namespace) -> ExitCode:
    try:
        got = import_npd(Path(args.file), Path(args.base) if args.base else None,
                         args.log_only)
    except NpdConfigError as exc:
        print(f"guardian import npd: {exc}", file=sys.stderr)
        return ExitCode.FAILED
    wrong = problems(got)
    if wrong:
        print(f"guardian import npd: {args.file}: the output would not pass `guardian "
              "check`; nothing written:", file=sys.stderr)
        for w in wrong:
            print(f"  {w}", file=sys.stderr)
        return ExitCode.FAILED
    for note in got.notes:
        print(f"note: {note}", file=sys.stderr)
    if not args.output:
        print(got.config)
        print("# ---- rules ----")
        print(got.rules)
        return ExitCode.OK
    config = Path(args.output) / f"npd-{got.name}.guardian.toml"
    rules = Path(args.output) / "rules" / f"npd-{got.name}.toml"
    try:
        _write(Path(args.output), got)
    except OSError as exc:
        print(f"guardian import npd: {exc.filename or args.output}: "
              f"{_refused(exc)}; nothing written", file=sys.stderr)
        return ExitCode.FAILED
    print(f"wrote {config} (append it to guardian.toml) and {rules}")
    return ExitCode.OK


def _write(out: Path, got: Imported) -> None:
    """Both files created new in ``out`` and ``out/rules``, or neither (OSError)."""
    os.makedirs(out, exist_ok=True)  # the directory named: the operator's
    top = open_directory(out)
    try:
        try:
            sub = open_directory("rules", dir_fd=top, create=True)
        except OSError as exc:
            exc.filename = str(out / "rules")
            raise
        try:
            name = f"npd-{got.name}.toml"
            try:
                create_new(name, got.rules.encode(), dir_fd=sub)
            except OSError as exc:
                exc.filename = str(out / "rules" / name)
                raise
            cname = f"npd-{got.name}.guardian.toml"
            try:
                create_new(cname, got.config.encode(), dir_fd=top)
            except OSError as exc:
                remove(name, dir_fd=sub)  # the one just written: neither or both
                exc.filename = str(out / cname)
                raise
        finally:
            os.close(sub)
    finally:
        os.close(top)


def _refused(exc: OSError) -> str:
    if exc.errno == errno.EEXIST:
        return "exists (a file or a symlink put there): refused, never written over or " \
               "through; remove it or choose another -o"
    if exc.errno in (errno.ELOOP, errno.ENOTDIR):
        return "is a symlink or not a directory: refused, never written through"
    return exc.strerror or str(exc)
