"""The ``guardian`` command line: check and test rules offline, dry-run them on a host,
run the service, record and replay.

This module holds the parser; each command is a module of this package named after it
(``guardian why`` is :mod:`guardian.cli.why`), imported only when that command runs. A
command parses and prints; what it does is in the library (:mod:`guardian.runtime`)."""

from __future__ import annotations

import argparse
import importlib
import json
import logging
import os
import sys
from collections.abc import Callable, Sequence
from typing import ClassVar, NoReturn

from guardian.core.defaults import DEFAULT_CONFIG, DEFAULT_RULES
from guardian.core.exitcodes import ExitCode
from guardian.core.version import __version__

__all__ = ["main"]


class _Parser(argparse.ArgumentParser):
    """With ``--json`` on the command line a usage error is the JSON shape too."""

    wants_json = False

    def error(self, message: str) -> NoReturn:
        if _Parser.wants_json:
            command = self.prog.removeprefix("guardian").strip() or "guardian"
            print(json.dumps({"command": command, "ok": False,
                              "errors": [{"message": f"usage: {message}"}],
                              "warnings": [], "data": None}, indent=2))
            sys.exit(ExitCode.USAGE)
        super().error(message)


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    _Parser.wants_json = "--json" in (sys.argv[1:] if argv is None else argv)
    args = parser.parse_args(argv)
    _logging(service=args.command == "run" and not args.once, verbose=args.verbose)
    try:
        rc: int = args.func(args)
    except BrokenPipeError:
        return ExitCode.FAILED
    except KeyboardInterrupt:
        return ExitCode.INTERRUPTED
    except Exception as exc:
        from guardian.plugin.registry import (
            RegistryError,  # imported here: --version needs no plugins
        )

        if not isinstance(exc, RegistryError):
            raise
        for problem in exc.problems:
            print(f"guardian: plugin conflict: {problem}", file=sys.stderr)
        return ExitCode.CONFIG  # the unit does not restart into the same conflict
    return rc


def _logging(*, service: bool, verbose: bool) -> None:
    """Where the library's log lines go. The service logs as a service does: INFO and up
    (DEBUG with -v), each line with its level and logger; the journal stamps its lines
    and reads a "<N>" prefix as their priority (so `journalctl -p warning` finds
    warnings); without systemd, a time helps. A command a person runs (everything else,
    `run --once` included) says its own words on stdout, and the library only warns on
    stderr: WARNING and up, as ``guardian: warning: ...``, with no time and no logger
    name (-v: DEBUG and up, with the logger's name). Logging an embedding or a test set
    up already (the root logger has handlers) is left as it is."""
    root = logging.getLogger()
    if root.handlers:
        return
    handler = logging.StreamHandler(sys.stderr)
    if not service:
        handler.setFormatter(CommandFormatter(names=verbose))
        handler.addFilter(_said_by_the_command)
        root.setLevel(logging.DEBUG if verbose else logging.WARNING)
    else:
        handler.setFormatter(JournalFormatter("%(levelname)s %(name)s: %(message)s")
                             if _stderr_is_the_journal() else
                             logging.Formatter("%(asctime)s %(levelname)s %(name)s: "
                                               "%(message)s"))
        root.setLevel(logging.DEBUG if verbose else logging.INFO)
    root.addHandler(handler)


def _said_by_the_command(record: logging.LogRecord) -> bool:
    """False for the executor's account of an action it ran or refused (``rule r: log
    ok: ...``): `act` and `run --once` print each on stdout with its plan; an action
    that finishes after its timeout, and every error, are still said."""
    return not (record.name == "guardian.executor" and record.levelno < logging.ERROR
                and "after its timeout" not in str(record.msg))


class CommandFormatter(logging.Formatter):
    """A log line of a one-shot command as its other messages on stderr read:
    ``guardian: warning: rule r: action log not applied: ...``; with ``names``, the
    logger's name after the level (for -v)."""

    def __init__(self, names: bool = False) -> None:
        super().__init__("%(message)s")
        self.names = names

    def format(self, record: logging.LogRecord) -> str:
        where = f"{record.name}: " if self.names else ""
        return f"guardian: {record.levelname.lower()}: {where}{super().format(record)}"


class JournalFormatter(logging.Formatter):
    """Each line prefixed with its syslog priority, ``<3>`` for an error, as systemd's
    journal reads a service's output (sd-daemon.h SD_ERR...; SyslogLevelPrefix=)."""

    PRIORITY: ClassVar[dict[int, int]] = {logging.CRITICAL: 2, logging.ERROR: 3,
                                          logging.WARNING: 4, logging.INFO: 6,
                                          logging.DEBUG: 7}

    def format(self, record: logging.LogRecord) -> str:
        level = min((p for lv, p in self.PRIORITY.items() if record.levelno >= lv),
                    default=7)
        return "\n".join(f"<{level}>{line}" for line in super().format(record).split("\n"))


def _stderr_is_the_journal() -> bool:
    """JOURNAL_STREAM names the journal's stream as "device:inode"; it is ours only if
    stderr is that very stream (not inherited by something we redirected)."""
    try:
        dev, ino = (int(x) for x in os.environ["JOURNAL_STREAM"].split(":"))
        st = os.fstat(sys.stderr.fileno())
    except (KeyError, ValueError, OSError):
        return False
    return (st.st_dev, st.st_ino) == (dev, ino)


def config_option(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", metavar="FILE",
                   help=f"guardian config (default {DEFAULT_CONFIG} when it exists)")


def rules_option(p: argparse.ArgumentParser, default: str | None = None) -> None:
    """``--rules PATH``, repeatable (so a positional may follow it)."""
    p.add_argument("--rules", action="append", metavar="PATH", default=None,
                   help="a rule file or directory; repeat for more (default: " + (
                       f"./{default})" if default else
                       f"the config's, else {DEFAULT_RULES})"))
    if default:
        p.set_defaults(rules_default=[default])


def duration(positive: bool = False) -> Callable[[str], str]:
    """An argparse type: a duration such as "90s" (kept as text; a bad one is a usage
    error, not a traceback)."""
    def check(text: str) -> str:
        from guardian.core.durations import parse_duration
        try:
            seconds = parse_duration(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None
        if positive and seconds <= 0:
            raise argparse.ArgumentTypeError(f"{text!r} must be longer than zero")
        return text
    return check


def port(text: str) -> int:
    """An argparse type: a TCP port, 0 to 65535."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a port number: {text!r}") from None
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"port {value} is not within 0-65535")
    return value


def _at_a_point(p: argparse.ArgumentParser, recording_help: str) -> None:
    """The options of commands that look at this host now, or at a point of a
    recording (explain, why)."""
    rules_option(p)
    p.add_argument("--recording", metavar="FILE", help=recording_help)
    p.add_argument("--at", metavar="TIME", type=duration(),
                   help="with --recording: time since its start (default: its end)")
    p.add_argument("--warmup", default="1s", type=duration(),
                   help="live: time between the two samples")
    p.add_argument("--root", default="/", help="host root (default /)")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    config_option(p)


def _command(module: str, name: str) -> Callable[[argparse.Namespace], int]:
    """A command's function, imported when the command runs: each command loads only
    the modules it needs (`guardian check` never imports the service or Kubernetes)."""

    def run(args: argparse.Namespace) -> int:
        fn: Callable[[argparse.Namespace], int] = getattr(
            importlib.import_module(f"{__name__}.{module}"), name)
        return fn(args)

    return run


def _parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="guardian",
        description="Watch a Linux node's kernel signals and remediate by TOML rules.",
    )
    p.add_argument("--version", action="version", version=f"guardian {__version__}")
    p.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = p.add_subparsers(required=True, metavar="COMMAND", dest="command")

    c = sub.add_parser("check", help="check rule files (and --config); report every error "
                       "as path:line:col; with no arguments, the installed configuration")
    c.add_argument("paths", nargs="*",
                   help=f"rule files or directories (default: the config's rules, else "
                        f"{DEFAULT_RULES})")
    c.add_argument("--config", metavar="FILE", help=f"also check this guardian config file "
                   f"(default {DEFAULT_CONFIG} when no paths are given and it exists)")
    c.add_argument("--unit", metavar="FILE", help="compare the actions' needs with this "
                   "systemd unit and the drop-ins in FILE.d/ (default: the installed "
                   "guardian.service and its drop-ins, else the package's own)")
    c.add_argument("--dropin", action="store_true", help="print the drop-in that grants "
                   "what the configured actions need from the unit's sandbox (stdout; "
                   "empty when nothing is denied)")
    c.add_argument("--json", action="store_true", help="machine-readable output")
    c.set_defaults(func=_command("check", "cmd_check"))

    t = sub.add_parser("test", help="run rule unit tests (*.test.toml), like promtool test")
    t.add_argument("paths", nargs="+", help="test files, or directories of *.test.toml")
    t.add_argument("--json", action="store_true", help="machine-readable output")
    config_option(t)
    t.set_defaults(func=_command("rule_tests", "cmd_test"))

    r = sub.add_parser("run", help="the service loop (or one evaluation with --once)")
    rules_option(r)
    r.add_argument("--once", action="store_true",
                   help="one evaluation (after a short warm-up sample for rates), then exit")
    r.add_argument("--dry-run", action="store_true",
                   help="plan actions but never apply them")
    r.add_argument("--interval", type=duration(positive=True),
                   help="tick interval (default: the config's, else 15s)")
    r.add_argument("--warmup", default="1s", type=duration(),
                   help="with --once: time between the warm-up sample and the evaluation")
    r.add_argument("--root", default="/", help="host root to read (default /)")
    r.add_argument("--audit", metavar="FILE", help="append decisions and outcomes to FILE")
    r.add_argument("--state", metavar="FILE", help="persisted engine state (service)")
    r.add_argument("--metrics-address", metavar="ADDRESS",
                   help="metrics and /healthz listen here (default: the config's, else "
                        "127.0.0.1; in a DaemonSet, the node's address)")
    r.add_argument("--metrics-port", type=port, metavar="PORT",
                   help="metrics endpoint port on the configured address; 0 turns it off")
    r.add_argument("--json", action="store_true", help="machine-readable output (--once)")
    config_option(r)
    r.set_defaults(func=_command("run", "cmd_run"))

    a = sub.add_parser("act", help="run one action once on this host, outside any rule "
                       "(same plan, apply, verify and audit path)")
    a.add_argument("action", help="a registered action, e.g. reap.zombies")
    a.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="a parameter; VALUE is read as TOML (5, \"x\", [1, 2], true) "
                        "or else as a string")
    a.add_argument("--dry-run", action="store_true", help="plan only")
    a.add_argument("--root", default="/", help="host root (default /)")
    a.add_argument("--warmup", default="1s", type=duration(),
                   help="time between the two samples taken")
    a.add_argument("--audit", metavar="FILE", help="append the plan and outcome to FILE")
    a.add_argument("--force", action="store_true", help="act despite a hold on every rule, "
                   "a closed maintenance window or a configured fleet budget (audited)")
    a.add_argument("--json", action="store_true", help="machine-readable output")
    config_option(a)
    a.set_defaults(func=_command("act", "cmd_act"))

    q = sub.add_parser("irq", help="IRQ affinity changes made by irq.move")
    q.add_argument("verb", choices=["restore", "show"],
                   help="restore: put every saved affinity back; show: list them")
    q.add_argument("--state", help="state file (default: irq.move's, "
                   "/var/lib/guardian/irq-affinity.json)")
    q.add_argument("--root", default="/", help="host root (default /)")
    q.set_defaults(func=_command("irq", "cmd_irq"))

    rec = sub.add_parser("record", help="record every signal over time into a file")
    rec.add_argument("-o", "--output", required=True, metavar="FILE",
                     help="the recording (gzip-compressed JSON lines)")
    rec.add_argument("--interval", default="1s", type=duration(positive=True),
                     help="time between snapshots (default 1s)")
    rec.add_argument("--duration", default="10m", type=duration(positive=True),
                     help="how long (default 10m); Ctrl-C "
                     "stops early and keeps everything written")
    rec.add_argument("--root", default="/", help="host root (default /)")
    rec.add_argument("--note", default="", help="how the recording was made (kept in it)")
    config_option(rec)
    rec.set_defaults(func=_command("record", "cmd_record"))

    rp = sub.add_parser("replay", help="run rules over a recording; print the decisions")
    rp.add_argument("recording", help="a file from guardian record")
    rules_option(rp, default="rules")
    rp.add_argument("--plot", metavar="OUT.png", help="draw signals, thresholds and "
                    "firing windows (needs matplotlib: node-guardian[plot])")
    rp.add_argument("--json", action="store_true", help="decisions as JSON")
    rp.set_defaults(func=_command("replay", "cmd_replay"))

    bt = sub.add_parser("backtest", help="run rules over a fleet's recordings on one clock: "
                        "what they would do, when, on which nodes, how many at once")
    bt.add_argument("directory", metavar="DIR", help="recordings (NAME.rec), each with "
                    "NAME.node.toml beside it (name, labels, problems), and holds.toml")
    rules_option(bt, default="rules")
    bt.add_argument("--align", choices=["start", "wall"], default="start",
                    help="start: every recording starts at +0s (default; the most "
                    "overlap); wall: as they were recorded")
    bt.add_argument("--fail-on", action="append", choices=["missed", "false-positive",
                                                            "refused", "blind"],
                    help="exit 1 when a recorded problem is not caught, a rule fires on a "
                    "node that names none, the budget or breaker stops an action, or a "
                    "rule (or a named problem's) has no value the whole time; repeatable")
    bt.add_argument("--json", action="store_true", help="machine-readable output")
    config_option(bt)
    bt.set_defaults(func=_command("backtest", "cmd_backtest"))

    ex = sub.add_parser("explain", help="why a rule is inactive, pending, firing or unknown")
    ex.add_argument("rule", help="rule name")
    _at_a_point(ex, "explain at a point of a recording instead of on this host")
    ex.add_argument("--state", metavar="FILE", help="live: the service's state file, for "
                    "its climb and record, and this command's evaluation starts from it "
                    "(default: the config's, read for the service's climb and record only)")
    ex.set_defaults(func=_command("explain", "cmd_explain"))

    w = sub.add_parser("why", help="what is wrong, as chains from root cause to symptoms")
    _at_a_point(w, "at a point of a recording instead of on this host")
    w.add_argument("--state", metavar="FILE", help="live: the service's state file, for "
                   "when each rule began (default: none)")
    w.add_argument("--plot", metavar="OUT.png", help="draw the links on one time axis "
                   "(needs matplotlib)")
    w.set_defaults(func=_command("why", "cmd_why"))

    s = sub.add_parser("schema", help="print a JSON Schema of guardian's files (for "
                                      "editors and validators)")
    s.add_argument("kind", nargs="?", default="rules",
                   choices=["rules", "tests", "config", "audit"],
                   help="rule files (default), rule-test files, guardian.toml, or a line "
                        "of the audit log")
    s.set_defaults(func=_command("schema", "cmd_schema"))

    hl = sub.add_parser("health", help="ask the running service whether it is healthy (exit "
                        "0), alive but degraded: a blind rule or a source down (exit 3), or "
                        "stuck or not answering (exit 1): for exec probes and scripts")
    hl.add_argument("--address", help="where the service listens (default: the config's)")
    hl.add_argument("--port", type=port, help="its metrics port (default: the config's)")
    hl.add_argument("--timeout", type=duration(positive=True), default="5s")
    hl.add_argument("--live", action="store_true", help="a liveness probe's question: exit 0 "
                    "while the loop is alive, degraded or not (a restart would not bring a "
                    "missing device back)")
    hl.add_argument("--json", action="store_true", help="machine-readable output")
    config_option(hl)
    hl.set_defaults(func=_command("health", "cmd_health"))

    ini = sub.add_parser("init", help="lay out /etc/guardian and the systemd unit from the "
                         "shipped defaults, keeping whatever you changed")
    ini.add_argument("--root", default="/", help="install under this root (an image's, "
                     "default /)")
    ini.add_argument("--exec", dest="exec_path", metavar="PATH",
                     help="the guardian command the unit runs (default: this one)")
    ini.add_argument("--json", action="store_true", help="machine-readable output")
    ini.set_defaults(func=_command("init", "cmd_init"))

    comp = sub.add_parser("completion", help="print shell completion (bash: source it, or "
                          "put it in /etc/bash_completion.d/guardian)")
    comp.add_argument("shell", choices=["bash", "zsh", "tcsh"])
    comp.set_defaults(func=_command("completion", "cmd_completion"))

    def holds_options(h: argparse.ArgumentParser, rule: bool = True) -> None:
        if rule:
            h.add_argument("rule", nargs="?", default="*",
                           help="a rule name (default: every rule)")
            h.add_argument("--label", action="append", default=[], metavar="KEY=VALUE",
                           help="only rules carrying this label; repeat for more")
        h.add_argument("--holds-file", metavar="FILE", help="guardian pause's holds "
                       "(default: holds.json in the state directory)")
        h.add_argument("--json", action="store_true", help="machine-readable output")
        config_option(h)

    pa = sub.add_parser("pause", help="hold rules on this node until a time: they still "
                        "evaluate, plan and audit, and act when the hold ends")
    holds_options(pa)
    until = pa.add_mutually_exclusive_group(required=True)
    until.add_argument("--for", dest="for_", type=duration(positive=True),
                       help="how long, e.g. 2h")
    until.add_argument("--until", metavar="TIME", help="until when (RFC 3339)")
    pa.add_argument("--reason", required=True, help="why (shown in the audit log, why, "
                    "metrics)")
    pa.add_argument("--author", help="who (default: $SUDO_USER, else the user)")
    pa.set_defaults(func=_command("holds", "cmd_pause"))

    re_ = sub.add_parser("resume", help="end guardian pause's holds on RULE (or --all)")
    holds_options(re_)
    re_.add_argument("--all", action="store_true", help="every guardian pause hold")
    re_.set_defaults(func=_command("holds", "cmd_resume"))

    ho = sub.add_parser("holds", help="the holds in force on this node, from every source "
                        "(guardian pause, drop-in files, Kubernetes)")
    holds_options(ho, rule=False)
    ho.set_defaults(func=_command("holds", "cmd_holds"))

    br = sub.add_parser("breaker", help="the tripped correlated-failure breakers "
                        "([fleet.breaker]); `release RULE --why TEXT` lifts one")
    br.add_argument("action", nargs="?", choices=["list", "release"], default="list")
    br.add_argument("rule", nargs="?", help="the rule to release")
    br.add_argument("--group", help="only the latch of this group (fleet, or "
                    "KEY=VALUE; default: every group of the rule)")
    br.add_argument("--why", help="why it is released (in the Event)")
    br.add_argument("--author", help="who (default: $SUDO_USER, else the user)")
    br.add_argument("--json", action="store_true", help="machine-readable output")
    config_option(br)
    br.set_defaults(func=_command("breaker", "cmd_breaker"))

    ap = sub.add_parser("approve", help="approve RULE's disruptive actions that wait for a "
                        "human (approve = { timeout }): who and why go into the audit")
    ap.add_argument("rule", help="the rule whose waiting actions to approve")
    ap.add_argument("--why", required=True, help="why (in the audit log and the decision)")
    ap.add_argument("--by", help="who (default: $SUDO_USER, else the user)")
    ap.add_argument("--approvals-file", metavar="FILE", help="where approvals are kept "
                    "(default: approvals.json beside guardian pause's holds)")
    ap.add_argument("--state", metavar="FILE", help="the service's saved state, read to say "
                    "whether RULE waits (default: the service's)")
    ap.add_argument("--json", action="store_true", help="machine-readable output")
    config_option(ap)
    ap.set_defaults(func=_command("approve", "cmd_approve"))

    im = sub.add_parser("import", help="another tool's configuration as guardian's "
                        "(node-problem-detector: guardian import npd FILE.json)")
    im.add_argument("tool", choices=["npd"], help="npd: a node-problem-detector monitor "
                    "config (custom-plugin or kernel-log monitor)")
    im.add_argument("file", help="the tool's config file, e.g. custom-plugin-monitor.json")
    im.add_argument("-o", "--output", metavar="DIR", help="write DIR/guardian.toml.d/"
                    "50-npd-NAME.toml (a drop-in of guardian.toml) and DIR/rules/npd-NAME.toml "
                    "(default: print both, each under the path it goes to)")
    im.add_argument("--base", metavar="DIR", help="the directory node-problem-detector ran "
                    "in on the node, which its relative plugin paths start from: an "
                    "absolute path on the node (default: /, as in node-problem-detector's "
                    "image)")
    im.add_argument("--log-only", action="store_true", help="log actions only (no node "
                    "conditions or events: no Kubernetes)")
    im.set_defaults(func=_command("npd", "cmd_import"))

    man = sub.add_parser("man", help="print the manual page (roff: guardian man | man -l -)")
    man.set_defaults(func=_command("man", "cmd_man"))

    g = sub.add_parser("signals", help="list every signal with value, unit, help, source")
    g.add_argument("--root", default="/", help="host root to read (default /)")
    g.add_argument("--warmup", default="1s", type=duration(),
                   help="time between two samples (for rates)")
    g.add_argument("--json", action="store_true", help="machine-readable output")
    config_option(g)
    g.set_defaults(func=_command("signals", "cmd_signals"))
    return p
