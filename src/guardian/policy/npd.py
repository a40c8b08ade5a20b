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

Checks run in a dry run too (they are how guardian observes), so a check must not change
the host: node-problem-detector's ``health-checker --enable-repair=true`` (which restarts
kubelet or the runtime itself) is written with ``--enable-repair=false``; guardian
repairs through its rules and actions (e.g. ``systemd.unit`` restart), within its rails.

A reason that is not a valid Kubernetes reason for guardian (``^[A-Za-z][A-Za-z0-9]*$``)
is written CamelCase with its other characters dropped (``"Disk full"`` ->
``DiskFull``), and the importer says so.

Kubernetes actions need the ``k8s`` extra; ``--log-only`` writes log actions only.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from guardian.core.durations import format_duration
from guardian.core.errors import GuardianError

GO_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ns|us|µs|ms|s|m|h)")
_GO_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0,
             "h": 3600.0}
# node-problem-detector's defaults (pkg/custompluginmonitor/types/config.go)
NPD_TIMEOUT, NPD_INTERVAL, NPD_MAX_OUTPUT, NPD_CONCURRENCY = 5.0, 30.0, 80, 3


class NpdConfigError(GuardianError, ValueError):
    """The file is not a node-problem-detector config this importer knows."""


def go_duration(text: str) -> float:
    """A Go ``time.ParseDuration`` string (``"30s"``, ``"1m30s"``, ``"500ms"``)."""
    pos, total = 0, 0.0
    text = text.strip()
    while pos < len(text):
        m = GO_DURATION.match(text, pos)
        if not m:
            raise NpdConfigError(f"not a duration: {text!r}")
        total += float(m.group(1)) * _GO_UNITS[m.group(2)]
        pos = m.end()
    if not text:
        raise NpdConfigError("empty duration")
    return total


def q(text: str) -> str:
    """A TOML basic string."""
    return json.dumps(text, ensure_ascii=False)


def lit(text: str) -> str:
    """A TOML literal string where one can hold ``text`` (regexes stay readable)."""
    if "'" in text or any(ord(c) < 32 or ord(c) == 127 for c in text):
        return q(text)
    return f"'{text}'"


REASON = re.compile(r"^[A-Za-z][A-Za-z0-9]*$")  # as guardian's kube actions check a reason
REPAIR_ON = ("--enable-repair=true", "--enable-repair")  # health-checker's flag (pflag bool)


def camel(reason: str) -> str:
    """A valid reason from ``reason``: its alphanumeric words, each capitalised, joined."""
    words = re.findall(r"[A-Za-z0-9]+", reason)
    out = "".join(w[:1].upper() + w[1:] for w in words)
    out = out.lstrip("0123456789")
    return out or "PluginProblem"


def slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-") or "x"


@dataclass
class Imported:
    config: str          # a guardian.toml fragment
    rules: str           # a rule file
    name: str            # from the config file's name: its checks, rules and files
    notes: list[str] = field(default_factory=list)


def import_npd(path: Path, base: Path | None = None, log_only: bool = False) -> Imported:
    """Translate one node-problem-detector monitor config. ``base`` is the directory
    node-problem-detector ran in (its plugin paths are relative to it; default: the
    parent of the directory holding the config, as ``./config/plugin/x.sh`` is laid out
    in its repository and image)."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise NpdConfigError(f"{path}: {exc}") from None
    if not isinstance(data, dict):
        raise NpdConfigError(f"{path}: not a JSON object")
    plugin = data.get("plugin")
    base = base if base is not None else path.resolve().parent.parent
    # names (checks, rules, files) come from the file's name: node-problem-detector's
    # "source" is shared (three health-checker-*.json say "health-checker")
    name = slug(path.name.removesuffix(".json"))
    if plugin == "custom":
        return _custom(data, base, log_only, name)
    if plugin in ("kmsg", "journald", "filelog") and all(
            isinstance(r, dict) and "pattern" in r for r in data.get("rules", [])):
        if plugin != "kmsg":
            raise NpdConfigError(f"{path}: a {plugin} log monitor; only the kernel log "
                               "(plugin kmsg) is imported")
        return _kmsg(data, log_only, name)
    raise NpdConfigError(f"{path}: plugin {plugin!r}: only custom-plugin monitors and "
                       "the kmsg log monitor are imported")


def _reason(reason: str, i: int, notes: list[str]) -> str:
    """``reason`` as a valid one (CamelCase, other characters dropped), with a note."""
    if REASON.match(reason):
        return reason
    fixed = camel(reason)
    notes.append(f"rules[{i}]: reason {reason!r} is written {fixed!r} (a reason is "
                 "letters and digits, starting with a letter)")
    return fixed


def _header(data: dict[str, Any], kind: str) -> str:
    return (f"# Imported from node-problem-detector's {kind} {q(data.get('source', ''))} by "
            "`guardian import npd`.\n")


def _conditions(data: dict[str, Any]) -> dict[str, dict[str, str]]:
    return {c["type"]: c for c in data.get("conditions", []) if isinstance(c, dict)
            and "type" in c}


def _custom(data: dict[str, Any], base: Path, log_only: bool, prefix: str) -> Imported:
    source = str(data.get("source") or "custom-plugin-monitor")
    g = data.get("pluginConfig") or {}
    g_timeout = go_duration(g["timeout"]) if "timeout" in g else NPD_TIMEOUT
    g_interval = go_duration(g["invoke_interval"]) if "invoke_interval" in g else NPD_INTERVAL
    notes: list[str] = []
    if "skip_initial_status" in g:
        notes.append("skip_initial_status: not imported (guardian sets a condition from "
                     "the first run of its check, and sets no initial status)")
    repaired: set[str] = set()
    checks: dict[tuple[str, tuple[str, ...], float, float], str] = {}
    names: set[str] = set()
    conditions = _conditions(data)
    rules_out: list[str] = []
    for i, rule in enumerate(data.get("rules", [])):
        rpath = str(rule.get("path", ""))
        if not rpath:
            raise NpdConfigError(f"rules[{i}] has no path")
        program = Path(rpath) if rpath.startswith("/") else (base / rpath).resolve()
        args = tuple(str(a) for a in rule.get("args") or [])
        if any(a in REPAIR_ON for a in args):
            args = tuple("--enable-repair=false" if a in REPAIR_ON else a for a in args)
            repaired.add(program.name)
        # the rule's timeout only when shorter than the global one (plugin.go run())
        timeout = g_timeout
        if rule.get("timeout") and go_duration(rule["timeout"]) < g_timeout:
            timeout = go_duration(rule["timeout"])
        interval = go_duration(rule["invoke_interval"]) if rule.get("invoke_interval") \
            else g_interval
        key = (str(program), args, interval, timeout)
        if key not in checks:
            name = stem = f"{prefix}.{slug(program.stem)}"
            n = 2
            while name in names:
                name, n = f"{stem}-{n}", n + 1
            names.add(name)
            checks[key] = name
        check = checks[key]
        kind = rule.get("type", "temporary")
        reason = _reason(str(rule.get("reason", "")) or "PluginProblem", i, notes)
        rname = f"npd-{prefix}-{slug(reason)}-{kind}-{i}"
        if kind == "permanent":
            ctype = str(rule.get("condition", ""))
            if ctype not in conditions:
                raise NpdConfigError(f"rules[{i}]: permanent problem {ctype!r} has no preset "
                                   "default condition")  # as config.go Validate() says
            rules_out.append(_rule(
                rname, f"{reason}: node condition {ctype} from {program.name}",
                f'script.problem{{check="{check}"}} == 1', kind, source, reason,
                _condition_action(ctype, reason, log_only, conditions[ctype]) + _log(reason)))
        else:
            rules_out.append(_rule(
                rname, f"{reason}: event from {program.name}",
                f'script.result{{check="{check}"}} >= 1', kind, source, reason,
                _event_action(reason, log_only) + _log(reason),
                cooldown=interval))
    cfg = [_header(data, "custom-plugin monitor")]
    # no [sources.script] table: the fragments of several monitors append into one file
    # node-problem-detector runs each monitor on its own workers: a pool of its own
    concurrency = int(g.get("concurrency") or NPD_CONCURRENCY)
    pool = f"npd-{prefix}"
    cfg += [f"[sources.script.pools.{q(pool)}]", f"concurrency = {concurrency}", ""]
    if repaired:
        cfg.append("# --enable-repair=true rewritten to --enable-repair=false: checks run "
                   "in a dry run too and must not change the host; repair with guardian's "
                   "rules and actions (e.g. systemd.unit restart)")
        notes.append(f"{', '.join(sorted(repaired))}: --enable-repair=true rewritten to "
                     "--enable-repair=false (a check must not change the host: it runs in "
                     "a dry run too); repair with guardian's rules and actions, e.g. a "
                     "systemd.unit restart")
    limit = int(g.get("max_output_length", NPD_MAX_OUTPUT))
    for (exe, args, interval, timeout), name in checks.items():
        cfg += [f"[sources.script.checks.{q(name)}]",
                f"argv = [{', '.join(q(a) for a in (exe, *args))}]",
                f"interval = {q(format_duration(interval))}",
                f"timeout = {q(format_duration(timeout))}",
                f"pool = {q(pool)}",
                *([f"max_output_length = {limit}"] if limit != NPD_MAX_OUTPUT else []), ""]
    if g.get("enable_message_change_based_condition_update"):
        notes.append("enable_message_change_based_condition_update: a condition is set "
                     "once while it stays True (its message is not updated)")
    return Imported("\n".join(cfg), _rules_file(data, "custom-plugin monitor", rules_out),
                    prefix, notes)


def _kmsg(data: dict[str, Any], log_only: bool, prefix: str) -> Imported:
    from guardian.sources.kernel_patterns import SHIPPED

    source = str(data.get("source") or "kernel-monitor")
    by_reason: dict[str, list[str]] = {}
    for pname, p in SHIPPED.items():
        if p.npd_reason:
            by_reason.setdefault(p.npd_reason, []).append(pname)
    conditions = _conditions(data)
    groups: dict[tuple[str, str, str], list[str]] = {}  # (type, reason, condition) -> patterns
    extra: dict[str, str] = {}
    notes: list[str] = []
    for i, rule in enumerate(data.get("rules", [])):
        kind = str(rule.get("type", "temporary"))
        reason = str(rule.get("reason", ""))
        shipped = by_reason.get(reason)
        reason = _reason(reason, i, notes)
        ctype = str(rule.get("condition", "")) if kind == "permanent" else ""
        if kind == "permanent" and ctype not in conditions:
            raise NpdConfigError(f"rules[{i}]: permanent problem {ctype!r} has no preset "
                               "default condition")
        patterns = groups.setdefault((kind, reason, ctype), [])
        if shipped:
            patterns.extend(p for p in shipped if p not in patterns)
            continue
        name = re.sub(r"[^a-z0-9]+", "_", f"npd_{prefix}_{reason}".lower()).strip("_")
        n = 2
        while name in extra and extra[name] != rule["pattern"]:
            name, n = f"{name.rstrip('_0123456789')}_{n}", n + 1
        extra[name] = str(rule["pattern"])
        patterns.append(name)
        notes.append(f"rules[{i}] ({reason}): no shipped pattern has this reason; its "
                     f"pattern is added as kmsg pattern {name!r}")
    rules_out = []
    for (kind, reason, ctype), patterns in groups.items():
        rname = f"npd-{prefix}-{slug(reason)}-{kind}"
        if kind == "permanent":
            when = " or ".join(f'kmsg.matches{{pattern="{p}"}} > 0' for p in patterns)
            rules_out.append(_rule(rname, f"{reason}: node condition {ctype} from the kernel "
                                   "log", when, kind, source, reason,
                                   _condition_action(ctype, reason, log_only,
                                                     conditions[ctype]) + _log(reason)))
        else:
            when = " or ".join(f'increase(kmsg.matches{{pattern="{p}"}}, "10m") > 0'
                               for p in patterns)
            rules_out.append(_rule(rname, f"{reason}: event from the kernel log", when, kind,
                                   source, reason,
                                   _event_action(reason, log_only) + _log(reason)))
    cfg = [_header(data, "kernel-log monitor")]
    if extra:
        cfg += ["[sources.kmsg.patterns]"] + [f"{k} = {lit(v)}" for k, v in extra.items()]
    return Imported("\n".join(cfg) + "\n", _rules_file(data, "log monitor", rules_out),
                    prefix, notes)


def _rule(name: str, summary: str, when: str, kind: str, source: str, reason: str,
          actions: list[str], cooldown: float | None = None) -> str:
    lines = ["[[rule]]", f"name = {q(name)}", f"summary = {q(summary)}",
             f"when = {lit(when)}",
             f"severity = {q('warning' if kind == 'temporary' else 'critical')}",
             f"labels = {{ npd_source = {q(source)}, npd_reason = {q(reason)}, "
             f"npd_type = {q(kind)} }}"]
    if cooldown is not None:
        lines.append(f"cooldown = {q(format_duration(cooldown))}")
    return "\n".join([*lines, "", *actions])


def _condition_action(ctype: str, reason: str, log_only: bool,
                      default: dict[str, str]) -> list[str]:
    """Set True with the rule's reason; back at False, the default condition's reason and
    message, as node-problem-detector does."""
    if log_only:
        return []
    back = [f"  resolved_reason = {q(str(default['reason']))}"] if default.get("reason") \
        else []
    if "message" in default:
        back.append(f"  resolved_message = {q(str(default['message']))}")
    return ["  [[rule.action]]", '  use = "kube.condition"', '  on = "both"',
            f"  type = {q(ctype)}", f"  reason = {q(reason)}", '  message = "$values"',
            *back, ""]


def _event_action(reason: str, log_only: bool) -> list[str]:
    if log_only:
        return []
    return ["  [[rule.action]]", '  use = "kube.event"', f"  reason = {q(reason)}",
            '  message = "$values"', ""]


def _log(reason: str) -> list[str]:
    return ["  [[rule.action]]", '  use = "log"',
            f"  message = {q(f'node-problem-detector rule {reason}: $values')}", ""]


def _rules_file(data: dict[str, Any], kind: str, rules: list[str]) -> str:
    return _header(data, kind) + "version = 1\n\n" + "\n".join(rules)
