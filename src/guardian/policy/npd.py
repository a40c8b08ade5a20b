"""node-problem-detector's monitor configs as guardian configuration and rules, so its
plugins run unchanged (``guardian import npd``).

A custom-plugin monitor (``"plugin": "custom"``) becomes the script source's checks (one
per plugin path and arguments, its interval and timeout as node-problem-detector computes
them: ``pkg/custompluginmonitor/types/config.go``, ``plugin/plugin.go``) and a rule per
node-problem-detector rule over ``script.result``:

- ``temporary``: an event while the plugin says NonOK or Unknown (node-problem-detector
  emits one for ``ExitStatus >= NonOK``), repeated at its interval, and a log line;
- ``permanent``: the node condition (its type and reason) set True while the plugin says
  NonOK and False when it says anything else (``on = "both"``). node-problem-detector
  sets the condition Unknown after an Unknown run (a timeout, an exit other than 0 and
  1); guardian sets no Unknown condition: not True either way.

A log monitor (``kernel-monitor.json``: ``"plugin": "kmsg"``) becomes rules over the
kernel-log source: a reason guardian's shipped patterns already cover reads them (they
are tested against the kernel's own wordings), any other pattern is added as a pattern of
the ``kmsg`` source. Temporary rules log and emit an event while a line matched in the
last 10 minutes; permanent ones set the condition from the first match until guardian
restarts, as node-problem-detector holds it until it restarts.

Each imported custom-plugin monitor gets a script pool of its own (named after the
file) with node-problem-detector's ``concurrency`` for it (3 unless set), as
node-problem-detector runs each monitor on its own workers: checks hanging in one monitor
never delay another's.

A kernel-log pattern that is a shipped one (the same expression, or one that matches only
one shipped pattern's lines among guardian's kernel-log samples, the ``[[kmsg]]`` lines
of the shipped rule tests) is read from the shipped one, never added again: one line
counts once.

Checks run in a dry run too (they are how guardian observes), so a check must not change
the host: node-problem-detector's ``health-checker`` (whose ``--enable-repair`` is true
unless set false: it then kills kubelet or the runtime, and systemd restarts it) is
written with ``--enable-repair=false``, and its repair becomes a rule of guardian's: a
``systemd.unit`` restart of that service after it has run ``--cooldown-time``, within a
budget (3 an hour), in shadow mode (``mode = "observe"``) with a comment saying how to
turn it on.

Relative plugin paths start from ``base``, the directory node-problem-detector ran in on
the node (default ``/``, its image's): written as paths on the node, never resolved on
the machine that imports.

The configuration is a drop-in of guardian.toml (``guardian.toml.d/50-npd-NAME.toml``):
its checks, pools and patterns have names of their own, so the drop-ins of several
monitors merge.

A reason that is not a valid Kubernetes reason for guardian (``^[A-Za-z][A-Za-z0-9]*$``)
is written CamelCase with its other characters dropped (``"Disk full"`` ->
``DiskFull``), and the importer says so.

Kubernetes actions need the ``k8s`` extra; ``log_only`` writes log actions only (the
command does so where the extra is missing).

A file node-problem-detector would refuse, or one guardian cannot express, is refused with
its place in the file (``path:line:col``: JSON's own error position, or the key of a
value of the wrong type or out of range), never a traceback; the output is written with
``tomli_w`` (never formatted by hand), so no string in the input can change its TOML.
"""

from __future__ import annotations

import bisect
import functools
import json
import math
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, NoReturn

import tomli_w
from pydantic import ValidationError

from guardian.core import tomlread
from guardian.core.durations import MAX_DURATION, format_duration, parse_duration
from guardian.core.errors import GuardianError
from guardian.hostio.safefile import read_regular

GO_DURATION = re.compile(r"(\d+\.?\d*|\.\d+)(ns|us|µs|μs|ms|s|m|h)")
_GO_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "μs": 1e-6, "ms": 1e-3, "s": 1.0,
             "m": 60.0, "h": 3600.0}
# node-problem-detector's defaults (pkg/custompluginmonitor/types/config.go)
NPD_TIMEOUT, NPD_INTERVAL, NPD_MAX_OUTPUT, NPD_CONCURRENCY = 5.0, 30.0, 80, 3
MAX_BYTES = 4 << 20  # a monitor config is a few KiB
MAX_DEPTH = 64       # node-problem-detector's configs nest 3 deep
MAX_CONCURRENCY, MAX_OUTPUT = 32, 4096  # the script source's bounds
MIN_DURATION = 0.001  # guardian's durations are written in ms at the finest
NAME_PART = 40        # of a file name or reason in a rule's, check's or pattern's name

Loc = tuple[str | int, ...]


class NpdConfigError(GuardianError, ValueError):
    """The file is not a node-problem-detector config this importer knows."""


def go_duration(text: str) -> float:
    """A Go ``time.ParseDuration`` string (``"30s"``, ``"1m30s"``, ``"500ms"``)."""
    pos, total = 0, 0.0
    text = text.strip()
    if text == "0":
        return 0.0
    while pos < len(text):
        m = GO_DURATION.match(text, pos)
        if not m:
            raise NpdConfigError(f"not a duration: {text!r}")
        total += float(m.group(1)) * _GO_UNITS[m.group(2)]
        pos = m.end()
    if not text:
        raise NpdConfigError("empty duration")
    return total


REASON = re.compile(r"^[A-Za-z][A-Za-z0-9]*$")  # as guardian's kube actions check a reason
REPAIR_ON = ("--enable-repair=true", "--enable-repair")  # health-checker's flag (pflag bool)
# RE2's POSIX classes ([[:alpha:]]) and its ungreedy flag (?U): Python's re reads both
# otherwise, without an error
_RE2_ONLY = re.compile(r"\[:\^?[a-z]+:\]|\(\?[a-zA-Z]*U")


def camel(reason: str) -> str:
    """A valid reason from ``reason``: its alphanumeric words, each capitalised, joined."""
    words = re.findall(r"[A-Za-z0-9]+", reason)
    out = "".join(w[:1].upper() + w[1:] for w in words)
    out = out.lstrip("0123456789")
    return out or "PluginProblem"


def slug(text: str, limit: int = NAME_PART) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower())[:limit].strip("-") or "x"


CONFIG_DIR = "/etc/guardian"  # where the packages install guardian.toml and rules/


@dataclass
class Imported:
    config: str          # a drop-in of guardian.toml (guardian.toml.d/)
    rules: str           # a rule file
    name: str            # from the config file's name: its checks, rules and files
    notes: list[str] = field(default_factory=list)

    @property
    def dropin(self) -> str:
        """The config drop-in's file name (in guardian.toml.d/)."""
        return dropin_name(self.name)

    @property
    def rules_name(self) -> str:
        return f"npd-{self.name}.toml"


def dropin_name(name: str) -> str:
    return f"50-npd-{name}.toml"


def _dropin_header(name: str) -> str:
    return (f"# A drop-in of guardian.toml: {CONFIG_DIR}/guardian.toml.d/{dropin_name(name)},"
            "\n# merged onto guardian.toml (tables key by key); `guardian check` checks "
            "both.\n")


# -- the input, and where each of its values is ------------------------------------------

_DECODER = json.JSONDecoder()
_WS = re.compile(r"[ \t\n\r]*")
def _skip(text: str, i: int) -> int:
    """The first position at or after ``i`` that is not JSON whitespace."""
    m = _WS.match(text, i)
    return m.end() if m else i


_SURROGATE = re.compile("[\ud800-\udfff]")
_DEPTH = re.compile(r'"(?:[^"\\]|\\.)*"|[\[\]{}]', re.S)
_JSON_TYPE = {dict: "an object", list: "an array", str: "a string", bool: "a boolean",
              int: "a number", float: "a number", type(None): "null"}


class _Doc:
    """The JSON text, its data, and ``path:line:col`` of any key or element in it."""

    def __init__(self, path: Path, text: str) -> None:
        self.path, self.text = path, text
        self._lines = [0] + [m.end() for m in re.finditer("\n", text)]
        self._pos: dict[Loc, int] | None = None
        deep = self._too_deep()
        if deep is not None:
            self._fail_at(deep, f"nested more than {MAX_DEPTH} deep")
        try:
            # NPD reads no number too long for an int64; a longer one stays a float here
            self.data = json.loads(text, parse_int=lambda s: int(s) if len(s) < 40
                                   else float(s))
        except json.JSONDecodeError as exc:
            raise NpdConfigError(f"{path}:{exc.lineno}:{exc.colno}: not JSON: "
                                 f"{exc.msg}") from None
        except (ValueError, RecursionError) as exc:
            raise NpdConfigError(f"{path}: not JSON: {exc}") from None

    def _too_deep(self) -> int | None:
        depth = 0
        for m in _DEPTH.finditer(self.text):
            c = m.group()
            if c in "[{":
                depth += 1
                if depth > MAX_DEPTH:
                    return m.start()
            elif c in "]}":
                depth -= 1
        return None

    def _where(self, offset: int) -> str:
        line = bisect.bisect_right(self._lines, offset)
        return f"{self.path}:{line}:{offset - self._lines[line - 1] + 1}"

    def _fail_at(self, offset: int, message: str) -> NoReturn:
        raise NpdConfigError(f"{self._where(offset)}: {message}")

    def at(self, loc: Loc) -> str:
        """``path:line:col`` of the key (or element) at ``loc``, or of the nearest of its
        parents that is in the file."""
        if self._pos is None:
            self._pos = {}
            self._scan(_skip(self.text, 0), ())
        for n in range(len(loc), 0, -1):
            if loc[:n] in self._pos:
                return self._where(self._pos[loc[:n]])
        return self._where(_skip(self.text, 0))

    def fail(self, loc: Loc, message: str) -> NoReturn:
        raise NpdConfigError(f"{self.at(loc)}: {_dotted(loc)}: {message}")

    def _scan(self, i: int, loc: Loc) -> int:
        """Note the positions under the (valid) value at ``i``; its end."""
        assert self._pos is not None
        text = self.text
        c = text[i]
        if c in "[{":
            close, n = ("]" if c == "[" else "}"), 0
            i = _skip(text, i + 1)
            while text[i] != close:
                if c == "{":
                    key, j = _DECODER.raw_decode(text, i)
                    here: Loc = (*loc, key)
                    self._pos[here] = i  # a repeated key: the last, as json keeps
                    j = _skip(text, j) + 1  # the colon
                else:
                    here = (*loc, n)
                    self._pos[here] = j = i
                i = _skip(text, self._scan(_skip(text, j), here))
                n += 1
                if text[i] == ",":
                    i = _skip(text, i + 1)
            return i + 1
        return int(_DECODER.raw_decode(text, i)[1])

    # typed reads: node-problem-detector's Go structs refuse a value of another type
    # (null is Go's zero value: as if absent)
    def get(self, obj: Mapping[str, Any], loc: Loc, key: str, kind: type,
            default: Any = None) -> Any:
        value = obj.get(key)
        if value is None:
            return default
        if kind is int and (isinstance(value, bool) or not isinstance(value, int)):
            self.fail((*loc, key), f"must be a whole number, not {_shown(value)}")
        if (kind is not int and not isinstance(value, kind)) or (
                kind is not bool and isinstance(value, bool)):
            self.fail((*loc, key), f"must be {_JSON_TYPE[kind]}, not {_shown(value)}")
        if isinstance(value, str) and "\0" in value:
            self.fail((*loc, key), "has a NUL character")
        if isinstance(value, str) and _SURROGATE.search(value):
            self.fail((*loc, key), "has a lone surrogate (\\ud800-\\udfff): not text")
        return value

    def duration(self, obj: Mapping[str, Any], loc: Loc, key: str,
                 default: float) -> float:
        text = self.get(obj, loc, key, str)
        if text is None or text == "":
            return default
        try:
            seconds = go_duration(text)
        except NpdConfigError as exc:
            self.fail((*loc, key), str(exc))
        if not math.isfinite(seconds) or seconds > MAX_DURATION:
            self.fail((*loc, key), f"{text!r} is longer than ten years")
        if seconds < MIN_DURATION:
            self.fail((*loc, key), f"{text!r}: guardian's shortest interval and timeout "
                                   "is 1ms")
        parse_duration(format_duration(seconds))  # written as guardian reads it
        return seconds

    def whole(self, obj: Mapping[str, Any], loc: Loc, key: str, default: int,
              low: int, high: int, why: str) -> int:
        value = int(self.get(obj, loc, key, int, default))
        if not low <= value <= high:
            self.fail((*loc, key), f"{value} is out of range: {why} ({low} to {high})")
        return value

    def items(self, obj: Mapping[str, Any], loc: Loc, key: str) -> list[dict[str, Any]]:
        """An array of objects."""
        got = self.get(obj, loc, key, list, [])
        for i, item in enumerate(got):
            if not isinstance(item, dict):
                self.fail((*loc, key, i), f"must be an object, not {_shown(item)}")
        return list(got)


def _shown(value: Any) -> str:
    kind = _JSON_TYPE.get(type(value), type(value).__name__)
    text = json.dumps(value)[:40] if not isinstance(value, dict | list) else ""
    return f"{kind} {text}".strip()


def _dotted(loc: Loc) -> str:
    return "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in loc).lstrip(".") \
        or "the file"


def read_config(path: Path) -> _Doc:
    """The file, read as a regular file of at most 4 MiB (a FIFO is refused, never
    waited on), as UTF-8 JSON."""
    try:
        raw = read_regular(os.path.realpath(path), MAX_BYTES)
    except (OSError, ValueError) as exc:
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise NpdConfigError(f"{path}: cannot read: {why}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        good = raw[:exc.start].decode("utf-8")
        line = good.count("\n") + 1
        col = len(good) - (good.rfind("\n") + 1) + 1
        raise NpdConfigError(f"{path}:{line}:{col}: not UTF-8 (byte "
                             f"{raw[exc.start]:#04x})") from None
    return _Doc(path, text.removeprefix("\ufeff"))


def import_npd(path: Path, base: Path | None = None, log_only: bool = False) -> Imported:
    """Translate one node-problem-detector monitor config. ``base`` is the directory
    node-problem-detector ran in on the node (its relative plugin paths start there;
    default: ``/``, its image's, where ``./config/plugin/x.sh`` is /config/plugin/x.sh): a
    path on the node, never resolved on the machine that imports. Raises
    :class:`NpdConfigError`, located in the file."""
    doc = read_config(path)
    data = doc.data
    if not isinstance(data, dict):
        doc.fail((), f"must be a JSON object, not {_shown(data)}")
    plugin = doc.get(data, (), "plugin", str)
    if base is not None and not base.is_absolute():
        raise NpdConfigError(f"--base {str(base)!r}: the directory node-problem-detector "
                             "ran in on the node, an absolute path")
    # names (checks, rules, files) come from the file's name: node-problem-detector's
    # "source" is shared (three health-checker-*.json say "health-checker")
    name = slug(path.name.removesuffix(".json"))
    if plugin == "custom":
        return _custom(doc, data, base, log_only, name)
    if plugin in ("kmsg", "journald", "filelog"):
        if plugin != "kmsg":
            doc.fail(("plugin",), f"a {plugin} log monitor; only the kernel log (plugin "
                                  "kmsg) is imported")
        return _kmsg(doc, data, log_only, name)
    doc.fail(("plugin",), f"plugin {plugin!r}: only custom-plugin monitors and the kmsg "
                          "log monitor are imported")


def _reason(doc: _Doc, obj: Mapping[str, Any], loc: Loc, notes: list[str],
            default: str = "PluginProblem") -> str:
    """``reason`` as a valid one (CamelCase, other characters dropped), with a note."""
    reason = doc.get(obj, loc, "reason", str) or default
    if REASON.match(reason):
        return str(reason)
    fixed = camel(reason)
    notes.append(f"{_dotted(loc)}: reason {reason!r} is written {fixed!r} (a reason is "
                 "letters and digits, starting with a letter)")
    return fixed


def _header(source: str, kind: str) -> str:
    # ASCII, every control character escaped: a comment the input cannot end
    return (f"# Imported from node-problem-detector's {kind} {json.dumps(source)} by "
            "`guardian import npd`.\n")


def _conditions(doc: _Doc, data: Mapping[str, Any]) -> dict[str, tuple[int, dict[str, Any]]]:
    out: dict[str, tuple[int, dict[str, Any]]] = {}
    for i, c in enumerate(doc.items(data, (), "conditions")):
        ctype = doc.get(c, ("conditions", i), "type", str, "")
        for key in ("reason", "message"):
            doc.get(c, ("conditions", i), key, str)
        out[ctype] = (i, c)
    return out


def _condition(doc: _Doc, rule: Mapping[str, Any], i: int, conditions: Mapping[
        str, tuple[int, dict[str, Any]]], notes: list[str]) -> tuple[str, dict[str, Any]]:
    """A permanent rule's condition type and its default condition's reason and message
    (the condition set back to False)."""
    ctype = doc.get(rule, ("rules", i), "condition", str, "")
    if ctype not in conditions:
        # as config.go Validate() says
        doc.fail(("rules", i, "condition"), f"permanent problem {ctype!r} has no preset "
                                            "default condition")
    if not REASON.match(ctype):
        doc.fail(("rules", i, "condition"), f"condition type {ctype!r}: a node condition's "
                                            "type here is letters and digits, starting "
                                            "with a letter")
    n, default = conditions[ctype]
    back: dict[str, Any] = {}
    if default.get("reason"):
        back["resolved_reason"] = _reason(doc, default, ("conditions", n), notes)
    if isinstance(default.get("message"), str):
        back["resolved_message"] = default["message"].replace("$", "$$")  # no template
    return ctype, back


def _custom(doc: _Doc, data: dict[str, Any], base: Path | None, log_only: bool,
            prefix: str) -> Imported:
    source = doc.get(data, (), "source", str) or "custom-plugin-monitor"
    g = doc.get(data, (), "pluginConfig", dict, {})
    gl: Loc = ("pluginConfig",)
    g_timeout = doc.duration(g, gl, "timeout", NPD_TIMEOUT)
    g_interval = doc.duration(g, gl, "invoke_interval", NPD_INTERVAL)
    concurrency = doc.whole(g, gl, "concurrency", NPD_CONCURRENCY, 1, MAX_CONCURRENCY,
                            "checks of one monitor guardian runs at once")
    limit = doc.whole(g, gl, "max_output_length", NPD_MAX_OUTPUT, 1, MAX_OUTPUT,
                      "bytes of a check's output guardian keeps")
    notes: list[str] = []
    if doc.get(g, gl, "skip_initial_status", bool) is not None:
        notes.append("skip_initial_status: not imported (guardian sets a condition from "
                     "the first run of its check, and sets no initial status)")
    repaired: set[str] = set()
    relative: set[str] = set()
    repairs: dict[str, Repair] = {}  # check -> the repair health-checker would do
    checks: dict[tuple[str, tuple[str, ...], float, float], str] = {}
    names: set[str] = set()
    conditions = _conditions(doc, data)
    rules_out: list[dict[str, Any]] = []
    for i, rule in enumerate(doc.items(data, (), "rules")):
        loc: Loc = ("rules", i)
        rpath = doc.get(rule, loc, "path", str, "")
        if not rpath:
            doc.fail(loc, "has no path")
        if "\0" in rpath:
            doc.fail((*loc, "path"), f"{rpath!r}: a NUL in a path")
        # lexically, as a path on the node: nothing of the machine that imports
        if rpath.startswith("/"):
            program = Path(os.path.normpath(rpath))
        else:
            program = Path(os.path.normpath((base or Path("/")) / rpath))
            relative.add(rpath)
        args = tuple(doc.get({"a": a}, (*loc, "args", n), "a", str)
                     for n, a in enumerate(doc.get(rule, loc, "args", list, [])))
        fix = _health_checker_repair(doc, program, args, (*loc, "args")) \
            if program.name == HEALTH_CHECKER else None
        if fix is not None:
            args = (*(a for a in args if not _is_repair_flag(a)), "--enable-repair=false")
            repaired.add(program.name)
        elif program.name != HEALTH_CHECKER and any(a in REPAIR_ON for a in args):
            args = tuple("--enable-repair=false" if a in REPAIR_ON else a for a in args)
            repaired.add(program.name)
        # the rule's timeout only when shorter than the global one (plugin.go run())
        timeout = min(g_timeout, doc.duration(rule, loc, "timeout", g_timeout))
        interval = doc.duration(rule, loc, "invoke_interval", g_interval)
        key = (str(program), args, interval, timeout)
        if key not in checks:
            name = stem = f"{prefix}.{slug(program.stem)}"
            n = 2
            while name in names:
                name, n = f"{stem}-{n}", n + 1
            names.add(name)
            checks[key] = name
        check = checks[key]
        if fix is not None and check not in repairs:
            repairs[check] = fix
        kind = _kind(doc, rule, loc)
        reason = _reason(doc, rule, loc, notes)
        rname = f"npd-{prefix}-{slug(reason)}-{kind}-{i}"
        if kind == "permanent":
            ctype, back = _condition(doc, rule, i, conditions, notes)
            rules_out.append(_rule(
                rname, f"{reason}: node condition {ctype} from {program.name}",
                f'script.problem{{check="{check}"}} == 1', kind, source, reason,
                _condition_action(ctype, reason, log_only, back) + _log(reason)))
        else:
            rules_out.append(_rule(
                rname, f"{reason}: event from {program.name}",
                f'script.result{{check="{check}"}} >= 1', kind, source, reason,
                _event_action(reason, log_only) + _log(reason), cooldown=interval))
    for check, fix in repairs.items():
        rules_out.append(_repair_rule(prefix, check, fix, source))
    cfg = [_header(source, "custom-plugin monitor") + _dropin_header(prefix)]
    if relative and base is None:
        cfg.append("# plugin paths relative to node-problem-detector's directory start "
                   "from / (its image's): import with --base DIR where it ran elsewhere\n")
        notes.append(f"{', '.join(sorted(relative))}: relative to the directory node-"
                     "problem-detector ran in, taken as / (its image's, where ./config/"
                     "plugin/ is /config/plugin/); where it ran elsewhere on the node, "
                     "import again with --base DIR")
    if repaired:
        cfg.append("# --enable-repair rewritten to --enable-repair=false: checks run "
                   "in a dry run too and must not change the host; guardian repairs "
                   "through its rules (the rules file's *-repair-* rules)\n")
        notes.append(f"{', '.join(sorted(repaired))}: --enable-repair rewritten to "
                     "--enable-repair=false (a check must not change the host: it runs in "
                     "a dry run too)")
    for fix in repairs.values():
        notes.append(f"{fix.program}: its repair is the rule restarting {fix.unit} "
                     "(systemd.unit restart, its budget, after the unit has run "
                     f"{format_duration(fix.cooldown)}), in shadow mode (mode = "
                     "\"observe\"): set mode = \"act\" to repair as health-checker did")
    # names of its own (checks, pool): the drop-ins of several monitors merge.
    # node-problem-detector runs each monitor on its own workers: a pool of its own
    pool = f"npd-{prefix}"
    script: dict[str, Any] = {"pools": {pool: {"concurrency": concurrency}}, "checks": {}}
    for (exe, args, interval, timeout), name in checks.items():
        script["checks"][name] = {
            "argv": [exe, *args], "interval": format_duration(interval),
            "timeout": format_duration(timeout), "pool": pool,
            **({"max_output_length": limit} if limit != NPD_MAX_OUTPUT else {})}
    cfg.append(tomli_w.dumps({"sources": {"script": script}}))
    if doc.get(g, gl, "enable_message_change_based_condition_update", bool):
        notes.append("enable_message_change_based_condition_update: a condition is set "
                     "once while it stays True (its message is not updated)")
    return Imported("\n".join(cfg), _rules_file(source, "custom-plugin monitor", rules_out),
                    prefix, notes)


# node-problem-detector's health-checker (cmd/healthchecker/options/options.go): its
# repair (pkg/healthchecker) is `systemctl kill --kill-who=main SERVICE` (systemd then
# restarts it) while the component is unhealthy and has run longer than --cooldown-time
HEALTH_CHECKER = "health-checker"
HC_COOLDOWN = 120.0            # types.DefaultCoolDownTime
HC_SERVICE = {"cri": "containerd"}  # SetDefaults: the component's name otherwise
PFLAG_BOOL = {"1": True, "t": True, "T": True, "true": True, "TRUE": True, "True": True,
              "0": False, "f": False, "F": False, "false": False, "FALSE": False,
              "False": False}  # Go's strconv.ParseBool, as pflag reads a bool
UNIT_NAME = re.compile(r"^[A-Za-z0-9:_.\\@-]+$")  # no glob: the rule allows this unit only
REPAIR_RUNS, REPAIR_WITHIN = 3, 3600.0  # guardian's budget: NPD's repair has none


@dataclass(frozen=True)
class Repair:
    """What health-checker --enable-repair would restart, and when."""

    program: str
    component: str
    unit: str
    cooldown: float


def _is_repair_flag(arg: str) -> bool:
    return arg == "--enable-repair" or arg.startswith("--enable-repair=")


def _pflags(args: tuple[str, ...]) -> dict[str, str]:
    """A Go program's long flags as pflag reads them (``--name=value``, ``--name value``,
    a bool's bare ``--name``), the last of a name winning; none after ``--``."""
    out: dict[str, str] = {}
    i = 0
    while i < len(args) and args[i] != "--":
        arg = args[i]
        if arg.startswith("--"):
            name, eq, value = arg[2:].partition("=")
            if not eq:
                if name == "enable-repair":
                    value = "true"
                elif i + 1 < len(args):
                    i += 1
                    value = args[i]
            out[name] = value
        i += 1
    return out


def _health_checker_repair(doc: _Doc, program: Path, args: tuple[str, ...],
                           loc: Loc) -> Repair | None:
    """The repair health-checker's arguments ask for (``--enable-repair`` is true unless
    set false), or None."""
    flags = _pflags(args)
    on = PFLAG_BOOL.get(flags.get("enable-repair", "true"))
    if on is None:
        doc.fail(loc, f"--enable-repair={flags['enable-repair']}: not a boolean "
                      "health-checker reads")
    if not on:
        return None
    component = flags.get("component", "kubelet")
    service = flags.get("service") or flags.get("systemd-service") or \
        HC_SERVICE.get(component, component)
    if not UNIT_NAME.match(service):
        doc.fail(loc, f"--service={service}: not a systemd unit name guardian restarts")
    try:
        cooldown = go_duration(flags.get("cooldown-time", "2m"))
    except NpdConfigError as exc:
        doc.fail(loc, f"--cooldown-time: {exc}")
    unit = service if service.endswith((".service", ".scope")) else f"{service}.service"
    return Repair(program.name, component, unit, cooldown)


def _repair_rule(prefix: str, check: str, fix: Repair, source: str) -> dict[str, Any]:
    within = format_duration(REPAIR_WITHIN)
    cooldown = format_duration(max(fix.cooldown, MIN_DURATION))
    return {
        "name": f"npd-{prefix}-repair-{slug(fix.unit)}",
        "summary": f"{fix.unit} unhealthy ({fix.program} --component={fix.component}): "
                   "restart it, as health-checker --enable-repair did",
        "description": f"health-checker restarted {fix.unit} (systemctl kill; systemd "
                       "restarts it) while the component was unhealthy and had run "
                       f"longer than --cooldown-time ({cooldown}). Here: a systemd.unit "
                       f"restart, at most {REPAIR_RUNS} per {within} (node-problem-"
                       "detector had no budget), verified by the unit coming back.",
        "when": f'script.problem{{check="{check}"}} == 1',
        "mode": "observe",
        "severity": "critical",
        "cooldown": cooldown,
        "limit": {"runs": REPAIR_RUNS, "within": within},
        "labels": {"npd_source": source, "npd_type": "repair"},
        "action": [{"use": "systemd.unit", "allow": [fix.unit], "verbs": ["restart"],
                    "min_restarts": 0, "cooldown": cooldown,
                    "restart_budget": REPAIR_RUNS, "restart_window": within}]}


SHADOW = ('# shadow mode: guardian plans and audits this restart and never runs it. To '
          'repair as\n# health-checker --enable-repair=true did: mode = "act" (and [service]'
          ' dry_run = false)\nmode = "observe"\n')


def _kind(doc: _Doc, rule: Mapping[str, Any], loc: Loc) -> str:
    kind = doc.get(rule, loc, "type", str) or "temporary"
    if kind not in ("temporary", "permanent"):
        doc.fail((*loc, "type"), f"{kind!r}: a rule is \"temporary\" or \"permanent\"")
    return str(kind)


def _kmsg(doc: _Doc, data: dict[str, Any], log_only: bool, prefix: str) -> Imported:
    from guardian.sources.kernel_patterns import SHIPPED
    from guardian.sources.kmsg import KmsgConfig

    source = doc.get(data, (), "source", str) or "kernel-monitor"
    by_reason: dict[str, list[str]] = {}
    for pname, p in SHIPPED.items():
        if p.npd_reason:
            by_reason.setdefault(p.npd_reason, []).append(pname)
    conditions = _conditions(doc, data)
    # (type, reason, condition) -> patterns, the condition's reset
    groups: dict[tuple[str, str, str], tuple[list[str], dict[str, Any]]] = {}
    extra: dict[str, str] = {}
    where: dict[str, Loc] = {}
    notes: list[str] = []
    for i, rule in enumerate(doc.items(data, (), "rules")):
        loc: Loc = ("rules", i)
        kind = _kind(doc, rule, loc)
        pattern = doc.get(rule, loc, "pattern", str)
        if pattern is None:
            doc.fail(loc, "has no pattern (a log monitor's rule matches one)")
        shipped = by_reason.get(doc.get(rule, loc, "reason", str) or "")
        reason = _reason(doc, rule, loc, notes)
        ctype, back = _condition(doc, rule, i, conditions, notes) if kind == "permanent" \
            else ("", {})
        patterns, _ = groups.setdefault((kind, reason, ctype), ([], back))
        if shipped:
            patterns.extend(p for p in shipped if p not in patterns)
            continue
        if (m := _RE2_ONLY.search(pattern)) is not None:
            doc.fail((*loc, "pattern"), f"{m.group()!r} is RE2's (Go's); Python's re, "
                                        "which guardian matches with, reads it "
                                        "otherwise: write it without")
        try:  # safe to match before it is matched against anything
            KmsgConfig.model_validate({"patterns": {"npd": pattern}})
        except ValidationError as exc:
            doc.fail((*loc, "pattern"), _why(exc))
        same = same_as_shipped(pattern)
        if same is not None:  # one line counts once, under the shipped name
            if same not in patterns:
                patterns.append(same)
            notes.append(f"rules[{i}] ({reason}): its pattern is the shipped pattern "
                         f"{same!r} (the same expression, or it matches only that one's "
                         "lines among guardian's kernel-log samples): read from it, not "
                         "added again, so a line counts once")
            continue
        name = stem = re.sub(r"[^a-z0-9]+", "_", f"npd_{prefix}_{reason[:NAME_PART]}"
                             .lower()).strip("_")
        n = 2
        while name in extra and extra[name] != pattern:
            name, n = f"{stem}_{n}", n + 1
        if name not in extra:
            extra[name] = pattern
            where[name] = (*loc, "pattern")
        if name not in patterns:
            patterns.append(name)
        notes.append(f"rules[{i}] ({reason}): no shipped pattern has this reason; its "
                     f"pattern is added as kmsg pattern {name!r}")
    try:  # the patterns combined, as the source screens lines with them
        KmsgConfig.model_validate({"patterns": extra})
    except ValidationError as exc:
        names = list(extra)
        bad = next((k for n, k in enumerate(names) if _fails({
            x: extra[x] for x in names[:n + 1]})), names[-1])
        doc.fail(where[bad], _why(exc))
    rules_out = []
    used: set[str] = set()
    for (kind, reason, ctype), (patterns, back) in groups.items():
        rname = stem = f"npd-{prefix}-{slug(reason)}-{kind}"
        n = 2
        while rname in used:
            rname, n = f"{stem}-{n}", n + 1
        used.add(rname)
        if kind == "permanent":
            when = " or ".join(f'kmsg.matches{{pattern="{p}"}} > 0' for p in patterns)
            rules_out.append(_rule(rname, f"{reason}: node condition {ctype} from the kernel "
                                   "log", when, kind, source, reason,
                                   _condition_action(ctype, reason, log_only, back)
                                   + _log(reason)))
        else:
            when = " or ".join(f'increase(kmsg.matches{{pattern="{p}"}}, "10m") > 0'
                               for p in patterns)
            rules_out.append(_rule(rname, f"{reason}: event from the kernel log", when, kind,
                                   source, reason,
                                   _event_action(reason, log_only) + _log(reason)))
    cfg = [_header(source, "kernel-log monitor") + _dropin_header(prefix)]
    if extra:
        cfg.append(tomli_w.dumps({"sources": {"kmsg": {"patterns": extra}}}))
    return Imported("\n".join(cfg), _rules_file(source, "log monitor", rules_out),
                    prefix, notes)


def _bare(rx: str) -> str:
    """An expression without what only anchors it or pads it (``^``, ``.*``, ``$``)."""
    rx = rx.removeprefix("^").removeprefix(".*")
    return rx.removesuffix("$").removesuffix(".*") if not rx.endswith("\\$") else rx


@functools.lru_cache(maxsize=1)
def kernel_samples() -> tuple[tuple[str, frozenset[str]], ...]:
    """guardian's kernel-log samples: each ``[[kmsg]]`` line of the shipped rule tests
    (package data) and the shipped patterns it matches (none: it must match none)."""
    out: list[tuple[str, frozenset[str]]] = []
    folder = resources.files("guardian") / "data" / "rules"
    for entry in sorted(folder.iterdir(), key=lambda e: e.name):
        if entry.name.endswith(".test.toml"):
            for sample in tomlread.loads(entry.read_text(encoding="utf-8")).get("kmsg", []):
                out.append((sample["line"], frozenset(sample.get("matches", []))))
    return tuple(out)


def same_as_shipped(pattern: str) -> str | None:
    """The shipped kernel-log pattern ``pattern`` (one the kmsg source accepts: never
    slow to match) duplicates, if any: the same expression (anchors and padding aside),
    or one whose matches among guardian's kernel-log samples are all lines of one shipped
    pattern (at least one, and no line that must match none)."""
    from guardian.sources.kernel_patterns import SHIPPED

    bare = _bare(pattern)
    for name, shipped in SHIPPED.items():
        if _bare(shipped.regex) == bare:
            return name
    try:  # checked safe (guardian.core.regexsafety) by the caller
        rx = re.compile(pattern)
    except (re.error, RecursionError, OverflowError):
        return None  # refused where the pattern is checked
    hit: set[str] = set()
    for line, names in kernel_samples():
        if rx.search(line):
            if not names:
                return None
            hit |= names
    if len(hit) != 1:
        return None
    (name,) = hit
    return name if name in SHIPPED else None


def _fails(patterns: dict[str, str]) -> bool:
    from guardian.sources.kmsg import KmsgConfig

    try:
        KmsgConfig.model_validate({"patterns": patterns})
    except ValidationError:
        return True
    return False


def _why(exc: ValidationError) -> str:
    return "; ".join(str(e["msg"]).removeprefix("Value error, ") for e in exc.errors())


def _rule(name: str, summary: str, when: str, kind: str, source: str, reason: str,
          actions: list[dict[str, Any]], cooldown: float | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {
        "name": name, "summary": summary, "when": when,
        "severity": "warning" if kind == "temporary" else "critical",
        "labels": {"npd_source": source, "npd_reason": reason, "npd_type": kind}}
    if cooldown is not None:
        out["cooldown"] = format_duration(cooldown)
    out["action"] = actions
    return out


def _condition_action(ctype: str, reason: str, log_only: bool,
                      back: dict[str, Any]) -> list[dict[str, Any]]:
    """Set True with the rule's reason; back at False, the default condition's reason and
    message, as node-problem-detector does."""
    if log_only:
        return []
    return [{"use": "kube.condition", "on": "both", "type": ctype, "reason": reason,
             "message": "$values", **back}]


def _event_action(reason: str, log_only: bool) -> list[dict[str, Any]]:
    if log_only:
        return []
    return [{"use": "kube.event", "reason": reason, "message": "$values"}]


def _log(reason: str) -> list[dict[str, Any]]:
    return [{"use": "log", "message": f"node-problem-detector rule {reason}: $values"}]


def _rules_file(source: str, kind: str, rules: list[dict[str, Any]]) -> str:
    # tomli_w writes a string on one line: a line that is this key is the key
    body = tomli_w.dumps({"version": 1, "rule": rules}).replace('\nmode = "observe"\n',
                                                                 "\n" + SHADOW)
    return _header(source, kind) + "\n" + body
