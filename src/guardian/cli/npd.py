"""`guardian import npd FILE.json`: node-problem-detector's monitor configs as guardian
configuration and rules (the conversion: :mod:`guardian.policy.npd`). The module is named
after the one tool ``import`` knows: ``import`` itself is a Python keyword.

The configuration is a drop-in (``guardian.toml.d/50-npd-NAME.toml``, merged onto
guardian.toml: several imports never collide with each other or the shipped file), the
rules a rule file (``rules/npd-NAME.toml``); the output says where each goes. Where this
installation has no Kubernetes support (the OS packages), the rules it writes log
instead of setting node conditions and emitting events: what it writes, it can run.

What it would write is checked first as `guardian check --config` would check it (the
drop-in and the rule file together); output that would not pass is refused, never
written. ``-o DIR`` creates its files new (``O_EXCL|O_NOFOLLOW``, the ``guardian.toml.d``
and ``rules`` directories opened without following a symlink): a file or a symlink
someone put there is refused, never written through or over."""

from __future__ import annotations

import argparse
import errno
import os
import shlex
import sys
import tempfile
from pathlib import Path

from guardian.core.diagnostics import RuleError
from guardian.core.exitcodes import ExitCode
from guardian.core.install import has_k8s, k8s_missing
from guardian.hostio.safefile import create_new, open_directory, remove
from guardian.plugin.registry import default_registry
from guardian.policy.loader import load_rules
from guardian.policy.npd import CONFIG_DIR, Imported, NpdConfigError, import_npd
from guardian.runtime import preflight
from guardian.runtime.config import dropin_dir, load_config

DROPINS = "guardian.toml.d"


def problems(got: Imported) -> list[str]:
    """Why the drop-in and the rules would not pass `guardian check --config` (each
    ``path:line:col: message``, the paths as ``-o`` names them); none: they pass."""
    names = {"config": f"{DROPINS}/{got.dropin}", "rules": f"rules/{got.rules_name}"}
    with tempfile.TemporaryDirectory(prefix="guardian-npd-") as tmp:
        main = Path(tmp, "guardian.toml")
        create_new(main, b"", 0o600)
        dropins = dropin_dir(main)
        dropins.mkdir()
        config, rules = dropins / got.dropin, Path(tmp, "rules.toml")
        create_new(config, got.config.encode(), 0o600)
        create_new(rules, got.rules.encode(), 0o600)
        out: list[str] = []
        registry = default_registry()
        try:
            cfg = load_config(main, registry)
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
    log_only = args.log_only
    without_k8s = not log_only and not has_k8s()
    try:
        got = import_npd(Path(args.file), Path(args.base) if args.base else None,
                         log_only or without_k8s)
    except NpdConfigError as exc:
        print(f"guardian import npd: {exc}", file=sys.stderr)
        return ExitCode.FAILED
    if without_k8s:
        got.notes.append("the rules log and set no node condition and emit no event: they "
                         f"need {k8s_missing()}; import there for NPD's conditions and "
                         "events")
    wrong = problems(got)
    if wrong:
        print(f"guardian import npd: {args.file}: the output would not pass `guardian "
              "check`; nothing written:", file=sys.stderr)
        for w in wrong:
            print(f"  {w}", file=sys.stderr)
        return ExitCode.FAILED
    for note in got.notes:
        print(f"note: {note}", file=sys.stderr)
    config = f"{CONFIG_DIR}/{DROPINS}/{got.dropin}"
    rules = f"{CONFIG_DIR}/rules/{got.rules_name}"
    if not args.output:
        print(f"# ---- {config} (a drop-in of guardian.toml) ----")
        print(got.config)
        print(f"# ---- {rules} (a rule file) ----")
        print(got.rules)
        return ExitCode.OK
    out = Path(args.output)
    try:
        _write(out, got)
    except OSError as exc:
        print(f"guardian import npd: {exc.filename or args.output}: "
              f"{_refused(exc)}; nothing written", file=sys.stderr)
        return ExitCode.FAILED
    written = (out / DROPINS / got.dropin, out / "rules" / got.rules_name)
    print(f"wrote {written[0]} and {written[1]}; to use them on the node:\n"
          f"  install -D -m 0644 {shlex.quote(str(written[0]))} {config}\n"
          f"  install -D -m 0644 {shlex.quote(str(written[1]))} {rules}\n"
          f"  guardian check\n"
          f"  systemctl restart guardian\n"
          f"(the drop-in merges onto {CONFIG_DIR}/guardian.toml, which the service reads "
          f"at start; the rule file joins {CONFIG_DIR}/rules, a directory the shipped "
          "config names)")
    return ExitCode.OK


def _write(out: Path, got: Imported) -> None:
    """Both files created new in ``out/guardian.toml.d`` and ``out/rules``, or neither
    (OSError)."""
    os.makedirs(out, exist_ok=True)  # the directory named: the operator's
    top = open_directory(out)
    try:
        subs: list[int] = []
        try:
            for name in ("rules", DROPINS):
                try:
                    subs.append(open_directory(name, dir_fd=top, create=True))
                except OSError as exc:
                    exc.filename = str(out / name)
                    raise
            rules, dropins = subs
            try:
                create_new(got.rules_name, got.rules.encode(), dir_fd=rules)
            except OSError as exc:
                exc.filename = str(out / "rules" / got.rules_name)
                raise
            try:
                create_new(got.dropin, got.config.encode(), dir_fd=dropins)
            except OSError as exc:
                remove(got.rules_name, dir_fd=rules)  # the one just written: neither or both
                exc.filename = str(out / DROPINS / got.dropin)
                raise
        finally:
            for fd in subs:
                os.close(fd)
    finally:
        os.close(top)


def _refused(exc: OSError) -> str:
    if exc.errno == errno.EEXIST:
        return "exists (a file or a symlink put there): refused, never written over or " \
               "through; remove it or choose another -o"
    if exc.errno in (errno.ELOOP, errno.ENOTDIR):
        return "is a symlink or not a directory: refused, never written through"
    return exc.strerror or str(exc)
