"""What ``guardian check`` finds beyond each rule file: rules that would be unsafe or
fail where they run (this node, the service's config, the systemd unit's sandbox)."""

from __future__ import annotations

import ipaddress
import os
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from guardian.core.diagnostics import Diagnostic
from guardian.core.unitsandbox import UnitSandbox, parse
from guardian.model.ruleset import Ruleset
from guardian.plugin.contract import Egress, SandboxNeeds
from guardian.runtime.config import Config

__all__ = ["DROPIN", "SandboxReport", "errors", "sandbox", "sandbox_warnings"]

#: Where ``guardian check`` tells the operator to put what the configured actions need.
DROPIN = "/etc/systemd/system/guardian.service.d/50-actions.conf"
_EXAMPLE = "systemd/command-sandbox.conf.example"
#: What the flight recorder's ``perf record -a`` needs (docs/service.md, "Flight
#: recorder"): the perf_event_open system call (in systemd's @debug, which the shipped
#: unit refuses), CAP_PERFMON to profile every CPU (perf_event_paranoid above -1 refuses
#: it otherwise), CAP_IPC_LOCK for a ring above kernel.perf_event_mlock_kb, CAP_SYSLOG for
#: kernel symbols where kernel.kptr_restrict is 1. Its files are written in ``flight/``
#: beside the state file, which the state directory's own writes cover.
FLIGHT_NEEDS = SandboxNeeds(capabilities=("CAP_PERFMON", "CAP_IPC_LOCK", "CAP_SYSLOG"),
                            syscalls=("perf_event_open",))
# a documentation address (RFC 5737): "any address but the allowed ones" for a host
# whose address is not known here
_SOME_ADDRESS = ipaddress.ip_address("192.0.2.1")


def errors(rs: Ruleset, config: Config) -> list[Diagnostic]:
    """A reboot on a Kubernetes node without the fleet budget (it could take every node
    down at once), a drain that may outlast the executor's ``apply_timeout``, and a
    ``gpu.reset`` that evicts pods past it or without credentials for the API."""
    found = [*_reboot_errors(rs, config), *_drain_errors(rs, config),
             *_gpu_reset_errors(rs, config)]
    return [Diagnostic(r.path, r.line, 1, why) for r, why in found]


def _reboot_errors(rs: Ruleset, config: Config) -> list[tuple[Any, str]]:
    from guardian.actions.node import check, reboots

    if not any(reboots(r) for r in rs.rules):
        return []

    kubernetes = bool(os.environ.get("KUBERNETES_SERVICE_HOST")) or \
        Path("/var/lib/kubelet").is_dir()
    return check(rs.rules, config.fleet is not None, kubernetes)


def _drain_errors(rs: Ruleset, config: Config) -> list[tuple[Any, str]]:
    drains = any(a.use == "kube.drain" or (a.use == "node.reboot" and a.params.get("drain"))
                 for r in rs.rules for a in r.bound_actions())
    if not drains:
        return []
    from guardian.kube.drain import check

    return check(rs.rules, config.service.apply_timeout)


def _gpu_reset_errors(rs: Ruleset, config: Config) -> list[tuple[Any, str]]:
    evicts = any(a.use == "gpu.reset" and a.params.get("evict_pods") not in (None, False)
                 for r in rs.rules for a in r.bound_actions())
    if not evicts:
        return []
    from guardian.actions.gpu import check

    return check(rs.rules, config.service.apply_timeout)


@dataclass(frozen=True)
class _Denial:
    """One need the unit denies one action (or one config table)."""

    kind: str  # egress, writes, devices, capabilities, syscalls
    who: str  # the action's name (kube.event), or the config table ([fleet])
    where: str  # path:line: rule 'x': use, or path: [table]
    what: str  # the address, path, device, capability or system call
    warning: str  # the whole warning, as said when it is the only one of its kind
    fix: tuple[str, ...]  # the drop-in's [Service] lines that grant it


@dataclass
class SandboxReport:
    """What the unit's sandbox denies the configured actions: one warning per kind of need
    denied (egress, writes, devices, capabilities, system calls; the actions named in it
    when more than one is denied), and the [Service] lines of the drop-in that grants them
    all."""

    unit: str
    warnings: list[str] = field(default_factory=list)
    lines: list[str] = field(default_factory=list)
    denials: list[_Denial] = field(default_factory=list)

    def dropin(self) -> str:
        """The drop-in's text (empty when nothing is denied)."""
        if not self.lines:
            return ""
        return ("# What the configured actions need from guardian.service's sandbox\n"
                "# (`guardian check --dropin`). Install as\n"
                f"# {DROPIN}, then: systemctl daemon-reload && systemctl restart guardian\n"
                "[Service]\n" + "".join(f"{line}\n" for line in self.lines))

    def _add(self, where: str, denied: str, lines: list[str], note: str = "",
             kind: str = "", what: str = "") -> None:
        for line in lines:
            if line not in self.lines:
                self.lines.append(line)
        fix = " ".join(lines)
        self._deny(kind, where, what, f"{where}: {denied}{note}; fix: a drop-in {DROPIN} "
                   f"with [Service] {fix} (`guardian check --dropin` prints it)", lines)

    def _deny(self, kind: str, where: str, what: str, warning: str,
              fix: list[str] | tuple[str, ...] = ()) -> None:
        who = where.rsplit(": ", 1)[-1]
        self.denials.append(_Denial(kind, who, where, what, warning, tuple(fix)))

    def _group(self, box: UnitSandbox) -> None:
        """One warning per kind of need denied: the single denial's own, or one that
        names the actions, each with its count."""
        kinds: dict[str, list[_Denial]] = {}
        for d in self.denials:
            kinds.setdefault(d.kind, []).append(d)
        for kind, found in kinds.items():
            if len(found) == 1:
                self.warnings.append(found[0].warning)
                continue
            tables = sorted({d.who for d in found if d.who.startswith("[")})
            # each action once, however many of its needs are denied
            uses = Counter(who for who, _ in dict.fromkeys(
                (d.who, d.where) for d in found if not d.who.startswith("[")))
            count = sum(uses.values())
            times = ", ".join(u + (f" \N{MULTIPLICATION SIGN}{n}" if n > 1 else "")
                              for u, n in sorted(uses.items()))
            named = f"{count} action{'s' if count != 1 else ''} ({times})" if uses else ""
            who = " and ".join(x for x in (named, ", ".join(tables)) if x)
            whats = list(dict.fromkeys(d.what for d in found if d.what))
            fix = list(dict.fromkeys(line for d in found for line in d.fix))
            unknown = [d for d in found if not d.fix]  # an address not known here
            deny = "may deny" if len(unknown) == len(found) else "denies"
            need = {"egress": f"need network egress the unit's {box.ip_rules()} {deny}",
                    "writes": "write paths the unit makes read-only",
                    "devices": "open devices the unit denies",
                    "capabilities": "use capabilities the unit's bounding set lacks",
                    "syscalls": "make system calls the unit's SystemCallFilter= refuses",
                    }.get(kind, "need what the unit denies")
            if count + len(tables) == 1:  # one action (or table) with several needs
                first, _, rest = need.partition(" ")
                need = f"{first}s {rest}"
            grant = ([f"[Service] {' '.join(fix)} (`guardian check --dropin` prints it)"]
                     if fix else [])
            if unknown:
                grant.append(("" if fix else "[Service] ")
                             + "IPAddressAllow=ADDRESS for each address not known here")
            fix_said = f"fix once: a drop-in {DROPIN} with {', and '.join(grant)}"
            self.warnings.append(f"{who} {need} ({'; '.join(whats)}): {fix_said}; "
                                 f"first: {found[0].where}")


def sandbox(rs: Ruleset, config: Config | None = None, unit: Path | None = None,
            root: Path = Path("/")) -> SandboxReport:
    """Compare what each configured action needs (:meth:`Action.sandbox_needs`; the
    Kubernetes API server for ``[fleet]`` and ``[holds.kube]``; perf's rights for an
    enabled ``[evidence.flight]``) with the sandbox of the unit that will run them:
    ``unit`` and its drop-ins, else the installed unit and its drop-ins, else the
    package's own. A dry run, outside the unit, cannot show these."""
    from guardian.hostio.sandbox import unit_sources

    sources = unit_sources(root, unit)
    box = parse(sources)
    names = [sources[0][0]] + ([f"{len(sources) - 1} drop-in(s)"] if len(sources) > 1
                               else [])
    report = SandboxReport(unit=" + ".join(names))
    for rule in rs.rules:
        if rule.spec.mode == "observe":  # shadow mode never applies: it needs nothing of
            continue                     # the unit until its mode is "act"
        for bound in rule.bound_actions():  # a ladder's steps' too
            where = f"{rule.path}:{rule.line}: rule {rule.spec.name!r}: {bound.use}"
            _compare(report, box, where, bound.action.sandbox_needs(), root)
    for key, params in _kube_config(config):
        from guardian.kube.actions import api_server

        where = f"{config.path if config else ''}: [{key}]"
        _compare(report, box, where, SandboxNeeds(egress=(api_server(params),)), root)
    if config is not None and config.evidence.flight.enabled:
        _compare(report, box, f"{config.path}: [evidence.flight]", FLIGHT_NEEDS, root)
    report._group(box)
    return report


def sandbox_warnings(rs: Ruleset, config: Config | None = None, unit: Path | None = None,
                     root: Path = Path("/")) -> list[str]:
    """The warnings of :func:`sandbox`."""
    return sandbox(rs, config, unit, root).warnings


def _kube_config(config: Config | None) -> list[tuple[str, Any]]:
    if config is None:
        return []
    found = [("fleet", config.fleet), ("holds.kube", config.holds.kube)]
    return [(key, params) for key, params in found if params is not None]


def _compare(report: SandboxReport, box: UnitSandbox, where: str, needs: SandboxNeeds,
             root: Path) -> None:
    from guardian.hostio.sandbox import device_groups

    if needs.unknown:
        report.warnings.append(
            f"{where}: {needs.unknown}; it runs in the unit's sandbox ({report.unit}): "
            f"{describe(box)}. Say what it needs in `needs` (egress, writes, devices, "
            f"capabilities) and `guardian check` names the drop-in that grants it "
            f"(examples: {_EXAMPLE})")
    for egress in needs.egress:
        _egress(report, box, where, egress, root)
    for path in needs.writes:
        why = box.write_denied(path)
        if why:
            fix = ["ProtectControlGroups=no"] if why == "ProtectControlGroups=yes" else \
                [f"ReadWritePaths=-{path}"]  # "-": a missing path does not fail the unit
            report._add(where, f"writes {path}, which the unit makes read-only ({why}): "
                        "it fails with \"Read-only file system\" when the service runs it",
                        fix, kind="writes", what=path)
    for device in needs.devices:
        spec, _, access = device.partition(" ")
        access = access.strip() or "rw"
        group = spec.startswith(("char-", "block-"))
        why = box.device_denied(device, () if group else device_groups(spec, root))
        if why:
            # DeviceAllow= takes a node's path (stat'ed when the unit starts: no globs)
            # or a group of /proc/devices (char-NAME), systemd.resource-control(5)
            fix = [f"DeviceAllow={spec} {access}"]
            if why == "PrivateDevices=yes":
                fix.insert(0, "PrivateDevices=no")
            said = f"the devices of group {spec} (/proc/devices)" if group else spec
            report._add(where, f"opens {said}, which the unit denies ({why})", fix,
                        kind="devices", what=spec)
    for cap in needs.capabilities:
        why = box.capability_denied(cap)
        if why:
            report._add(where, f"uses {cap}, which the unit's bounding set lacks ({why})",
                        [f"CapabilityBoundingSet={cap}"], kind="capabilities", what=cap)
    for call in needs.syscalls:
        why = box.syscall_denied(call)
        if why:
            # systemd.exec(5), SystemCallFilter=: "the first encountered will take
            # precedence and will dictate the default action ... Then the next occurrences
            # of this option will add or delete the listed system calls from the set":
            # after the unit's allow-list (@system-service), even after its ~@debug, a
            # drop-in's SystemCallFilter=perf_event_open adds it back; after a deny-list
            # first line, it takes it out of the deny set. Either way it is let through.
            errno = box.get("SystemCallErrorNumber")
            fails = f"fails with {errno} (SystemCallErrorNumber={errno})" if errno else \
                "kills the process (SIGSYS)"
            report._add(where, f"calls {call}(), which the unit's {why}: the call {fails} "
                        "when the service runs it", [f"SystemCallFilter={call}"],
                        kind="syscalls", what=call)


def _egress(report: SandboxReport, box: UnitSandbox, where: str, egress: Egress,
            root: Path) -> None:
    from guardian.hostio.sandbox import addresses, nameservers

    rules = box.ip_rules()
    if not rules:
        return
    enforced = " (enforced on the unified cgroup hierarchy, where systemd attaches its BPF " \
        "firewall)"
    if egress.host is None:
        if box.ip_allowed(_SOME_ADDRESS):
            return
        report._deny("egress", where, egress.what,
            f"{where}: connects to {egress.what}, which the unit's {rules} may deny: "
            f"allow its address in a drop-in {DROPIN} with [Service] "
            f"IPAddressAllow=ADDRESS{enforced}")
        return
    literal = _literal(egress.host)
    found = [literal] if literal is not None else [
        a for a in (_literal(x) for x in addresses(egress.host)) if a is not None]
    if not found:
        if box.ip_allowed(_SOME_ADDRESS):
            return
        report._deny("egress", where, egress.what,
            f"{where}: connects to {egress.what}, whose name does not resolve here, and "
            f"the unit's {rules} denies what it does not allow: allow its addresses in a "
            f"drop-in {DROPIN} with [Service] IPAddressAllow=ADDRESS…{enforced}")
        return
    denied = [a for a in found if not box.ip_allowed(a)]
    if not denied:
        return
    lines = [f"IPAddressAllow={' '.join(str(a) for a in denied)}"]
    note = enforced
    if literal is None:
        servers = [a for a in (_literal(x) for x in nameservers(root))
                   if a is not None and not box.ip_allowed(a)]
        if servers:
            lines.append(f"IPAddressAllow={' '.join(str(a) for a in servers)}")
        note += (f"; IPAddressAllow= takes addresses, not names: these are {egress.host}'s "
                 "now" + (" and the name servers' of /etc/resolv.conf" if servers else "") +
                 " (a host whose addresses change needs its network, or IPAddressAllow=any)")
    said = f"{egress.what} ({', '.join(str(a) for a in denied)})"
    report._add(where, f"connects to {said}, which the unit's {rules} denies: "
                "its packets are dropped when the service runs it (the connection times "
                "out)", lines, note, kind="egress", what=said)


def _literal(host: str) -> Any:
    try:
        return ipaddress.ip_address(host.strip("[]").split("%")[0])
    except ValueError:
        return None


def describe(box: UnitSandbox) -> str:
    """The sandbox a program the unit runs gets, in one sentence."""
    writable = box.writable_paths()
    devices = box.device_allowlist()
    caps = "all" if box.capabilities is None else " ".join(sorted(box.capabilities)) or \
        "none"
    parts = [
        f"a read-only root (ProtectSystem=strict), writable only {', '.join(writable)}"
        if box.get("ProtectSystem").lower() == "strict" else
        f"ProtectSystem={box.get('ProtectSystem') or 'no'}",
        "devices: any" if devices is None else
        f"devices: only {', '.join(d for d in devices if not d.startswith('/dev/pts'))}"
        f" (DevicePolicy={box.get('DevicePolicy', 'auto')})",
        f"capabilities: {caps}" + (" (NoNewPrivileges=yes)"
                                   if box.yes("NoNewPrivileges") else ""),
        f"network: {box.ip_rules() or 'any'}",
    ]
    return "; ".join(parts)
