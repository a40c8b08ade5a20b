"""A systemd unit's sandbox, read from its text and its drop-ins' as systemd applies them,
and the questions an action's needs ask of it: may it connect to this address, write this
path, open this device, use this capability, make this system call. Pure parsing: the
files are read in ``hostio.sandbox``; the comparison with what actions need is
``runtime.preflight``'s.

Only the [Service] settings that decide those five things are read, with systemd's
rules: a list setting accumulates and an empty assignment resets it, a scalar's last
assignment wins, ``IPAddressAllow=`` wins over ``IPAddressDeny=`` where both match,
``CapabilityBoundingSet=`` lines are merged (OR, or AND NOT with ``~``), and
``SystemCallFilter=`` lines are applied in order (the first one's kind, allow-list or
``~`` deny-list, sets the mode; later ones add to or take from its set)."""

from __future__ import annotations

import ipaddress
import shlex
from collections.abc import Sequence
from dataclasses import dataclass, field
from fnmatch import fnmatchcase

IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

# IPAddressAllow=/IPAddressDeny= names (systemd.resource-control(5))
_IP_NAMES = {
    "any": ("0.0.0.0/0", "::/0"),
    "localhost": ("127.0.0.0/8", "::1/128"),
    "link-local": ("169.254.0.0/16", "fe80::/64"),
    "multicast": ("224.0.0.0/4", "ff00::/8"),
}
_LISTS = {"IPAddressAllow", "IPAddressDeny", "ReadWritePaths", "ReadOnlyPaths",
          "InaccessiblePaths", "DeviceAllow", "StateDirectory", "LogsDirectory",
          "RuntimeDirectory", "CacheDirectory", "ConfigurationDirectory"}
_YES = {"yes", "true", "on", "1"}
# the devices DevicePolicy=closed always allows (and PrivateDevices=yes provides)
PSEUDO_DEVICES = ("/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom",
                  "/dev/tty", "/dev/ptmx", "/dev/pts/*")
#: For each system call guardian's actions name (``SandboxNeeds.syscalls``), every
#: ``SystemCallFilter=`` group that holds it, from systemd's own table, the
#: ``syscall_filter_sets[]`` of src/shared/seccomp-util.c:
#:
#:     [SYSCALL_FILTER_SET_DEBUG] = {
#:             .name = "@debug",
#:             .help = "Debugging, performance monitoring and tracing functionality",
#:             .value =
#:             "lookup_dcookie\0"
#:             "perf_event_open\0"
#:             "pidfd_getfd\0"
#:             "ptrace\0"
#:             ...
#:
#: and no other set there lists perf_event_open (neither @system-service nor any set it
#: includes: @default @aio @basic-io @chown @file-system @io-event @ipc @keyring @memlock
#: @network-io @process @resources @setuid @signal @sync @timer) but @known, every system
#: call systemd knows (systemd 247 and later). ``systemd-analyze syscall-filter`` (systemd
#: 252) agrees: of all its sets only @debug and @known list perf_event_open. Whether a
#: group holds a system call not named here is not known: such a filter "may refuse" it.
SYSCALL_GROUPS: dict[str, frozenset[str]] = {
    "perf_event_open": frozenset({"@debug", "@known"}),
}


@dataclass
class UnitSandbox:
    """The settings of one unit (with its drop-ins) that confine what its service does.
    ``sources`` names the files read, for messages."""

    sources: list[str] = field(default_factory=list)
    lists: dict[str, list[str]] = field(default_factory=dict)
    scalars: dict[str, str] = field(default_factory=dict)
    capabilities: frozenset[str] | None = None  # None: the bounding set is not limited
    capabilities_dropped: frozenset[str] = frozenset()  # ~CAP_… lines on an unlimited set
    # SystemCallFilter= lines since the last empty one, in order: (a "~" deny-list, names)
    syscall_filter: list[tuple[bool, tuple[str, ...]]] = field(default_factory=list)

    def get(self, key: str, default: str = "") -> str:
        return self.scalars.get(key, default)

    def yes(self, key: str) -> bool:
        return self.get(key).lower() in _YES

    # -- network -------------------------------------------------------------------
    def _nets(self, key: str) -> list[IPNetwork]:
        out: list[IPNetwork] = []
        for item in self.lists.get(key, []):
            for word in item.split():
                for spec in _IP_NAMES.get(word, (word,)):
                    try:
                        out.append(ipaddress.ip_network(spec, strict=False))
                    except ValueError:
                        continue
        return out

    def ip_allowed(self, address: IPAddress) -> bool:
        """Whether the unit's IP firewall lets the service reach ``address`` (enforced only
        where systemd can attach BPF programs: the unified cgroup hierarchy)."""
        if any(address in n for n in self._nets("IPAddressAllow")):
            return True
        return not any(address in n for n in self._nets("IPAddressDeny"))

    def ip_rules(self) -> str:
        """The firewall as the unit writes it, e.g. ``IPAddressDeny=any
        IPAddressAllow=localhost``; empty without one."""
        parts = [f"{k}={' '.join(self.lists[k])}" for k in ("IPAddressDeny", "IPAddressAllow")
                 if self.lists.get(k)]
        return ", ".join(parts)

    # -- file system ---------------------------------------------------------------
    def writable_paths(self) -> list[str]:
        """What a process of the unit may write under ``ProtectSystem=strict``: the
        ``ReadWritePaths=``, the unit's own state, log, runtime and cache directories and
        a private /tmp. Empty when the root is not read-only."""
        if self.get("ProtectSystem").lower() != "strict":
            return []
        out = [p.lstrip("-+") for item in self.lists.get("ReadWritePaths", [])
               for p in item.split()]
        for key, base in (("StateDirectory", "/var/lib"), ("LogsDirectory", "/var/log"),
                          ("RuntimeDirectory", "/run"), ("CacheDirectory", "/var/cache")):
            out += [f"{base}/{d}" for item in self.lists.get(key, []) for d in item.split()]
        if self.yes("PrivateTmp"):
            out += ["/tmp (private)", "/var/tmp (private)"]
        return out

    def write_denied(self, path: str) -> str | None:
        """Why the unit keeps its service from writing ``path`` (an absolute path), or
        None where it may. The most specific of ``ReadWritePaths=``, ``ReadOnlyPaths=`` and
        ``InaccessiblePaths=`` decides; else ``ProtectSystem=``, ``ProtectHome=``,
        ``ProtectControlGroups=`` and ``ProtectKernelTunables=``."""
        best: tuple[int, str, str] | None = None
        for key in ("ReadWritePaths", "ReadOnlyPaths", "InaccessiblePaths"):
            for item in self.lists.get(key, []):
                for p in item.split():
                    p = p.lstrip("-+").rstrip("/") or "/"
                    if _under(path, p) and (best is None or len(p) > best[0]):
                        best = (len(p), key, p)
        if best is not None:
            return None if best[1] == "ReadWritePaths" else f"{best[1]}={best[2]}"
        for key, base in (("StateDirectory", "/var/lib"), ("LogsDirectory", "/var/log"),
                          ("RuntimeDirectory", "/run"), ("CacheDirectory", "/var/cache")):
            for item in self.lists.get(key, []):
                if any(_under(path, f"{base}/{d}") for d in item.split()):
                    return None
        if self.yes("PrivateTmp") and (_under(path, "/tmp") or _under(path, "/var/tmp")):
            return None
        if _under(path, "/sys/fs/cgroup") and self.yes("ProtectControlGroups"):
            return "ProtectControlGroups=yes"
        if self.yes("ProtectKernelTunables") and (_under(path, "/proc/sys") or
                                                  _under(path, "/sys")):
            return "ProtectKernelTunables=yes"
        home = self.get("ProtectHome").lower()
        if (home in _YES or home in ("read-only", "tmpfs")) and any(
                _under(path, h) for h in ("/home", "/root", "/run/user")):
            return f"ProtectHome={self.get('ProtectHome')}"
        system = self.get("ProtectSystem").lower()
        if system == "strict" and not any(_under(path, d) for d in ("/dev", "/proc", "/sys")):
            return "ProtectSystem=strict"
        ro = {"full": ("/usr", "/boot", "/efi", "/etc"), "yes": ("/usr", "/boot", "/efi"),
              "true": ("/usr", "/boot", "/efi")}.get(system, ())
        if any(_under(path, d) for d in ro):
            return f"ProtectSystem={self.get('ProtectSystem')}"
        return None

    # -- devices -------------------------------------------------------------------
    def device_entries(self) -> list[tuple[str, str]] | None:
        """``(specifier, access)`` of each device the unit's service may open, or None
        where it may open any (no ``DevicePolicy=closed``/``strict``, no
        ``DeviceAllow=``, no ``PrivateDevices=yes``). A specifier is a node's path or a
        device group, ``char-NAME``/``block-NAME`` with NAME a glob over the names
        /proc/devices lists; an entry without access letters grants ``rwm``
        (systemd.resource-control(5))."""
        policy = self.get("DevicePolicy", "auto").lower()
        allow = [(w[0], w[1] if len(w) > 1 else "rwm")
                 for w in (item.split() for item in self.lists.get("DeviceAllow", [])) if w]
        pseudo = [(d, "rwm") for d in PSEUDO_DEVICES]
        if self.yes("PrivateDevices"):  # a private /dev of pseudo-devices only
            return pseudo
        if policy == "auto" and not allow:
            return None
        return allow if policy == "strict" else [*pseudo, *allow]

    def device_allowlist(self) -> list[str] | None:
        """The specifiers of :meth:`device_entries` (None: any device)."""
        entries = self.device_entries()
        return None if entries is None else [spec for spec, _ in entries]

    def granted_majors(self, kind: str, listed: dict[int, list[str]]) -> set[int]:
        """The majors of ``kind`` (``char``, ``block``) the unit's group entries grant,
        every minor, read and write, when /proc/devices lists ``listed`` (major to
        names) as the unit starts: systemd resolves each ``char-NAME`` entry then and
        adds every major with a matching name (:func:`group_matches`)."""
        out: set[int] = set()
        for allowed, access in self.device_entries() or []:
            if not allowed.startswith(kind + "-") or not {"r", "w"} <= set(access):
                continue
            if allowed[len(kind) + 1:].isdigit():  # "a major, the entry directly"
                out.add(int(allowed[len(kind) + 1:]))
                continue
            out |= {major for major, names in listed.items()
                    if any(group_matches(allowed, f"{kind}-{n}") for n in names)}
        return out

    def device_denied(self, device: str, groups: Sequence[str] = ()) -> str | None:
        """Why the unit keeps its service from opening ``device``, or None where it may.
        ``device`` is a node's path (``/dev/kmsg``) or a device group (``char-nvidia``),
        optionally followed by the access it needs (``rw`` when none is said).
        ``groups`` are the device groups of the node's major where they are known
        (``char-nvidia``, as /proc/devices lists the major on this host): a group the
        unit allows grants the node through them. systemd resolves a group entry the
        way :func:`group_matches` does, and grants every minor of each major found."""
        spec, _, need = device.partition(" ")
        need = need.strip() or "rw"
        entries = self.device_entries()
        if entries is None:
            return None
        short = []  # entries that take it in, without all the access it needs
        for allowed, access in entries:
            if _is_group(allowed):
                hit = any(group_matches(allowed, g) for g in
                          ((spec,) if _is_group(spec) else groups))
            else:
                hit = not _is_group(spec) and (allowed == spec or (
                    allowed.startswith("/") and fnmatchcase(spec, allowed)))
            # one entry must grant every access asked at once (an O_RDWR open asks
            # read and write): each rule is checked on its own, security/device_cgroup.c
            # match_exception: "provided access cannot have more than the exception
            # rule", and systemd's BPF program likewise compares each rule's access
            if hit and set(need) <= set(access):
                return None
            if hit:
                short.append(f"DeviceAllow={allowed} {access}")
        if short:
            return f"{', '.join(short)} grants less than {need}"
        if self.yes("PrivateDevices"):
            return "PrivateDevices=yes"
        return f"DevicePolicy={self.get('DevicePolicy', 'auto')}"

    # -- capabilities --------------------------------------------------------------
    def capability_denied(self, cap: str) -> str | None:
        """Why the unit's service lacks capability ``cap`` (``CAP_SYS_ADMIN``), or None."""
        cap = cap.upper()
        if cap in self.capabilities_dropped:
            return "CapabilityBoundingSet=~" + " ".join(sorted(self.capabilities_dropped))
        if self.capabilities is None or cap in self.capabilities:
            return None
        return "CapabilityBoundingSet=" + " ".join(sorted(self.capabilities))

    # -- system calls --------------------------------------------------------------
    def syscall_denied(self, name: str) -> str | None:
        """Why the unit's ``SystemCallFilter=`` refuses system call ``name`` (saying "may
        refuse" where that depends on a group not known here), or None where it lets it
        through. systemd.exec(5): "If you specify both types of this option (i.e.
        allow-listing and deny-listing), the first encountered will take precedence and
        will dictate the default action (termination or approval of a system call). Then
        the next occurrences of this option will add or delete the listed system calls
        from the set of the filtered system calls, depending of its type and the default
        action." Groups (``@debug``) are resolved with :data:`SYSCALL_GROUPS`."""
        if not self.syscall_filter:
            return None
        deny_mode = self.syscall_filter[0][0]
        held: bool | None = False  # in the mode's set (allowed; or refused in deny mode)
        decided = ""  # the last entry that holds it, as the unit writes it
        unknown: list[str] = []  # groups that may hold it
        for invert, names in self.syscall_filter:
            adds = invert == deny_mode  # an entry of the mode's own kind adds to the set
            hit = _holds(name, names)
            if hit is None:
                unknown += [n for n in names if n.startswith("@")]
                if held is not adds:
                    held = None
            elif hit:
                held = adds
                decided = ("~" if invert else "") + next(
                    n for n in names if n in (name, "@known", *SYSCALL_GROUPS.get(name, ())))
        refused = held if deny_mode else (None if held is None else not held)
        if refused is False:
            return None
        if refused is None:
            return (f"SystemCallFilter= may refuse (it names "
                    f"{' '.join(dict.fromkeys(unknown))}, whose members are not known here)")
        said = []
        if decided.startswith("~"):
            said.append(f"SystemCallFilter={decided} refuses"
                        + (f" ({name} is in {decided[1:]})" if decided[1:] != name else ""))
        if not deny_mode and not decided:
            allow = " ".join(n for inv, names in self.syscall_filter if not inv for n in names)
            said.append(f"allow-list SystemCallFilter={allow} does not hold")
        return "; ".join(said) or "SystemCallFilter= refuses"


def _holds(name: str, names: tuple[str, ...]) -> bool | None:
    """Whether a ``SystemCallFilter=`` line's ``names`` hold system call ``name``; None
    where one of its groups might and :data:`SYSCALL_GROUPS` does not say."""
    groups = SYSCALL_GROUPS.get(name, frozenset())
    if name in names or "@known" in names or groups & set(names):
        return True
    if name not in SYSCALL_GROUPS and any(n.startswith("@") for n in names):
        return None
    return False


def _is_group(spec: str) -> bool:
    return spec.startswith(("char-", "block-"))


def group_matches(allowed: str, group: str) -> bool:
    """Whether ``DeviceAllow=`` group ``allowed`` (``char-nvidia*``) takes in device group
    ``group`` (``char-nvidia``, one name of /proc/devices). systemd 252,
    src/core/bpf-devices.c, ``bpf_devices_allow_list_major``: ``*`` is every device of
    the type; otherwise each line of /proc/devices' section of that type whose name
    passes ``fnmatch(name, w, 0)`` (``*`` and ``?`` match ``/`` too; case counts) adds its
    major, every minor; a name that matches nothing adds nothing ("Device allow list
    pattern ... did not match anything", a debug message)."""
    kind, _, pattern = allowed.partition("-")
    gkind, _, name = group.partition("-")
    if kind != gkind:
        return False
    return pattern == "*" or fnmatchcase(name, pattern)


def _under(path: str, base: str) -> bool:
    path = path.rstrip("/") or "/"
    return base == "/" or path == base or path.startswith(base + "/")


def parse(texts: list[tuple[str, str]]) -> UnitSandbox:
    """The sandbox of a unit from ``(name, text)`` of the unit file, then of each drop-in
    in the order systemd applies them. Only [Service] lines count."""
    box = UnitSandbox(sources=[name for name, _ in texts])
    caps: set[str] | None = None
    dropped: set[str] = set()
    for _, text in texts:
        section = ""
        for raw in _lines(text):
            line = raw.strip()
            if not line or line[0] in "#;":
                continue
            if line.startswith("[") and line.endswith("]"):
                section = line[1:-1]
                continue
            if section != "Service":
                continue
            key, sep, value = line.partition("=")
            if not sep:
                continue
            key, value = key.strip(), value.strip()
            if key == "CapabilityBoundingSet":
                caps, dropped = _capabilities(caps, dropped, value)
            elif key == "SystemCallFilter":
                if not value:  # "the filter is reset, all prior assignments will have no
                    box.syscall_filter = []  # effect" (systemd.exec(5))
                    continue
                # a deny-listed name may end in ":errno" (":EPERM"), what it returns
                names = tuple(w.split(":", 1)[0] for w in value.lstrip("~").split())
                box.syscall_filter.append((value.startswith("~"), names))
            elif key in _LISTS:
                if value:
                    box.lists.setdefault(key, []).append(value)
                else:
                    box.lists[key] = []
            else:
                box.scalars[key] = value
    box.capabilities = frozenset(caps) if caps is not None else None
    box.capabilities_dropped = frozenset(dropped)
    return box


def _lines(text: str) -> list[str]:
    """Lines with systemd's backslash continuations joined."""
    out: list[str] = []
    pending = ""
    for line in text.splitlines():
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        out.append(pending + line)
        pending = ""
    if pending:
        out.append(pending)
    return out


def _capabilities(caps: set[str] | None, dropped: set[str], value: str
                  ) -> tuple[set[str] | None, set[str]]:
    """One ``CapabilityBoundingSet=`` line applied to the set so far: (the set, None when
    unlimited; what ``~`` lines took from an unlimited set)."""
    if not value:
        return set(), set()  # "reset to the empty capability set"
    invert = value.startswith("~")
    names = {w.upper() for w in value.lstrip("~").split()}
    if invert:
        return (None, dropped | names) if caps is None else (caps - names, set())
    if caps is None:  # the first list sets it; after ~ lines, it adds back
        return (None, dropped - names) if dropped else (names, set())
    return caps | names, set()


def service_config(box: UnitSandbox, default: str) -> str:
    """The config file the unit's service reads: its ``ExecStart=``'s ``--config``
    (``--config=FILE`` or ``--config FILE``), else ``default`` (what ``guardian run``
    reads without one)."""
    try:
        words = shlex.split(box.get("ExecStart").lstrip("@-:+!"))
    except ValueError:  # unbalanced quotes: systemd would refuse the unit
        return default
    for i, word in enumerate(words):
        if word.startswith("--config="):
            return word.split("=", 1)[1]
        if word == "--config" and i + 1 < len(words):
            return words[i + 1]
    return default
