"""What the docs tell operators is what guardian and its manifests do: the namespace, the
ConfigMaps and their keys, the annotations, the metrics port and /healthz, the paths, the
unit's settings. A small table of facts is read from the sources of truth (the code's
defaults, deploy/kubernetes, the unit, the shipped guardian.toml), which must agree with
each other; then every operator-facing mention of one of them in README.md, docs/ and the
shipped files' comments is found and compared with the table, so a doc that names another
namespace, key, port or path fails here. Before: docs/operating.md sent on-call to
`kube-system/guardian-holds` while the DaemonSet reads `guardian/guardian-holds` (and a
missing ConfigMap reads as no holds, silently)."""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from guardian.core.defaults import DEFAULT_CONFIG
from guardian.core.diagnostics import parse_toml
from guardian.hostio.bundles import EVIDENCE_DIR
from guardian.runtime.config import (
    Config,
    HoldsConfig,
    MetricsConfig,
    ServiceConfig,
    dropin_dir,
)
from guardian.runtime.operate import holds_path
from guardian.runtime.paths import service_paths
from guardian.service.instancelock import LOCK_NAME
from tests.support.checkout import REPO

DEPLOY = REPO / "deploy" / "kubernetes"
OVERLAY = REPO / "deploy" / "kubernetes-unprivileged" / "kustomization.yaml"
UNIT = REPO / "systemd" / "guardian.service"
SAMPLE = REPO / "systemd" / "guardian.toml"


# -- the sources of truth ------------------------------------------------------------------

def _objects() -> list[dict[str, Any]]:
    """deploy/kubernetes' objects, with the opt-in PodMonitor (components/monitoring)."""
    paths = [*DEPLOY.glob("*.yaml"), *(DEPLOY / "components" / "monitoring").glob("*.yaml")]
    return [d for p in sorted(paths) if p.name != "kustomization.yaml"
            for d in yaml.safe_load_all(p.read_text()) if d]


def _one(kind: str, name: str | None = None) -> dict[str, Any]:
    [obj] = [d for d in _objects() if d["kind"] == kind
             and name in (None, d["metadata"]["name"])]
    return obj


def _unit() -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for line in UNIT.read_text().splitlines():
        if m := re.match(r"([A-Z]\w+)=(.*)", line):
            out.setdefault(m.group(1), []).append(m.group(2))
    return out


def _daemonset_config() -> dict[str, Any]:
    """deploy/kubernetes' guardian.toml: the ConfigMap key the DaemonSet mounts."""
    spec = _one("DaemonSet")["spec"]["template"]["spec"]
    [mount] = [m for m in spec["containers"][0]["volumeMounts"]
               if m["mountPath"] == str(DEFAULT_CONFIG)]
    [volume] = [v for v in spec["volumes"] if v["name"] == mount["name"]]
    data = _one("ConfigMap", volume["configMap"]["name"])["data"][mount["subPath"]]
    return parse_toml("guardian.toml", data)


def _sample() -> dict[str, Any]:
    """The shipped guardian.toml with its commented sections and keys set."""
    text = "\n".join(re.sub(r"^# ?(?=\[\[?[\w.\"-]+\]|[A-Za-z_][\w-]*\s*=)", "", line)
                     for line in SAMPLE.read_text().splitlines())
    return parse_toml("guardian.toml", text)


def _kept_files() -> set[str]:
    """What the code keeps beside the state (a kernel log's read position, the reboots a
    rule made, IRQ affinities to put back): the file names it spells out."""
    return {m.group(1) for p in (REPO / "src" / "guardian").rglob("*.py")
            for m in re.finditer(r'"(?:/var/lib/guardian/)?([\w-]+\.(?:json|jsonl|lock))"',
                                 p.read_text())}


@dataclass(frozen=True)
class Facts:
    namespace: str            # the DaemonSet's, where its Leases and holds live
    configmaps: frozenset[str]  # the ConfigMaps guardian reads (shipped, or the holds')
    holds_configmap: str
    holds_key: str
    annotations: frozenset[str]  # node annotations guardian reads or writes
    metrics_port: int
    health_path: str
    ready_path: str
    config_file: str
    rules_dir: str
    state_dir: str
    logs_dir: str
    state_files: frozenset[str]  # what guardian keeps in its state directory (evidence/ too)
    logs_files: frozenset[str]
    dropin_dir: str
    daemonset_args: frozenset[str]
    unit: dict[str, list[str]]


@functools.cache
def facts() -> Facts:
    """The facts, from the code's defaults and the manifests; each read from one place
    (the agreement of the others is the next test's)."""
    pytest.importorskip("lightkube")  # [holds.kube] and [fleet] are the k8s extra's
    from guardian.kube.breaker import FIRING, RECORD
    from guardian.kube.holds import KubeHoldsParams
    from guardian.kube.owned import OWNED

    ds = _one("DaemonSet")
    holds = KubeHoldsParams.model_validate(_daemonset_config()["holds"]["kube"])
    spec = ds["spec"]["template"]["spec"]
    [container] = spec["containers"]
    defaults = service_paths(Config())  # STATE_DIRECTORY, LOGS_DIRECTORY unset: see below
    state_file = Path(_daemonset_config()["service"]["state_file"])
    audit_log = Path(_daemonset_config()["service"]["audit_log"])
    pause_file = holds_path(Config(), defaults.state)
    assert pause_file is not None
    return Facts(
        namespace=ds["metadata"]["namespace"],
        configmaps=frozenset({v["configMap"]["name"] for v in spec["volumes"]
                              if "configMap" in v} | {holds.configmap}),
        holds_configmap=holds.configmap,
        holds_key=holds.key,
        annotations=frozenset({holds.annotation, holds.approve_annotation, OWNED, FIRING,
                               RECORD}),
        metrics_port=MetricsConfig().port,
        health_path=container["livenessProbe"]["httpGet"]["path"],
        ready_path=container["readinessProbe"]["httpGet"]["path"],
        config_file=str(DEFAULT_CONFIG),
        rules_dir=ServiceConfig().rules[0],
        state_dir=str(defaults.state.parent),
        logs_dir=str(defaults.audit.parent),
        state_files=frozenset({defaults.state.name, LOCK_NAME, pause_file.name,
                               state_file.name, audit_log.name, EVIDENCE_DIR}
                              | _kept_files()),
        logs_files=frozenset({defaults.audit.name}),
        dropin_dir=HoldsConfig().dropin,
        daemonset_args=frozenset(container["args"]),
        unit=_unit())


@pytest.fixture(autouse=True)
def _no_systemd_directories(monkeypatch: pytest.MonkeyPatch) -> None:
    """The defaults, not the directories a unit running these tests would be given."""
    monkeypatch.delenv("STATE_DIRECTORY", raising=False)
    monkeypatch.delenv("LOGS_DIRECTORY", raising=False)


def test_the_sources_of_truth_agree() -> None:
    """The code's defaults, the DaemonSet, its RBAC and config, the unit and the shipped
    guardian.toml name the same things."""
    from guardian.kube.fleet import FleetParams
    from guardian.kube.holds import KubeHoldsParams

    f = facts()
    objects = _objects()
    config = _daemonset_config()
    # one namespace: the DaemonSet's, every namespaced object's, the fleet's and the holds'
    assert _one("Namespace")["metadata"]["name"] == f.namespace
    assert {d["metadata"]["namespace"] for d in objects
            if "namespace" in d["metadata"]} == {f.namespace}
    assert FleetParams.model_validate(config["fleet"]).namespace == f.namespace
    assert config["holds"]["kube"]["namespace"] == f.namespace
    # the holds ConfigMap: read by name, where [holds.kube] reads it, and never shipped
    # (a `kubectl apply -k` would empty it and lift a pause)
    grants = [(d["metadata"]["namespace"], r) for d in objects if d["kind"] == "Role"
              for r in d["rules"] if "configmaps" in r["resources"]]
    assert grants == [(f.namespace, {"apiGroups": [""], "resources": ["configmaps"],
                                     "resourceNames": [f.holds_configmap],
                                     "verbs": ["get"]})]
    assert f.holds_configmap not in {d["metadata"]["name"] for d in objects
                                     if d["kind"] == "ConfigMap"}
    # the shipped guardian.toml's commented [holds.kube] and [fleet] name the same
    sample = _sample()
    assert sample["holds"]["kube"]["namespace"] == f.namespace
    assert sample["fleet"]["namespace"] == f.namespace
    for key in ("configmap", "key", "annotation"):
        assert sample["holds"]["kube"][key] == config["holds"]["kube"].get(
            key, getattr(KubeHoldsParams(), key))
    assert sample["holds"]["dropin"] == f.dropin_dir
    assert sample["service"]["metrics"]["port"] == f.metrics_port
    assert sample["service"]["rules"] == [f.rules_dir]
    # the metrics port and /healthz: the code's, the DaemonSet's, the PodMonitor's
    assert config["service"]["metrics"]["port"] == f.metrics_port
    [container] = _one("DaemonSet")["spec"]["template"]["spec"]["containers"]
    [port] = container["ports"]
    assert (port["name"], port["containerPort"]) == ("metrics", f.metrics_port)
    assert _one("PodMonitor")["spec"]["podMetricsEndpoints"][0]["port"] == port["name"]
    assert container["livenessProbe"]["httpGet"]["port"] == port["name"]
    assert container["readinessProbe"]["httpGet"]["port"] == port["name"]
    assert f.ready_path != f.health_path  # readiness is not liveness
    served = (REPO / "src" / "guardian" / "runtime" / "metrics.py").read_text()
    assert f'"{f.health_path}": health' in served and f'"{f.ready_path}": ready' in served
    # the paths: the code's defaults, the DaemonSet's mounts and config, the unit's
    assert f"--config={f.config_file}" in f.daemonset_args
    mounts = {m["mountPath"] for m in container["volumeMounts"]}
    assert {f.config_file, f.rules_dir, f.state_dir} <= mounts
    assert config["service"]["rules"] == [f.rules_dir]
    for key in ("state_file", "audit_log"):
        assert str(Path(config["service"][key]).parent) == f.state_dir  # a hostPath
    assert f.unit["StateDirectory"] == [Path(f.state_dir).name]
    assert f"/var/lib/{f.unit['StateDirectory'][0]}" == f.state_dir
    assert f"/var/log/{f.unit['LogsDirectory'][0]}" == f.logs_dir
    assert f.unit["ConditionPathIsDirectory"] == [f.rules_dir]
    assert f"Reads {f.config_file} when it exists" in UNIT.read_text()


def test_guardian_check_knows_the_slots_the_shipped_role_names() -> None:
    """`guardian check --config` warns of the fleet budget's slots the shipped Role does
    not name (guardian.kube.fleet.SHIPPED_ROLE_LEASES): they are rbac.yaml's, and the
    shipped [fleet]'s slots are all among them (no warning for the shipped config)."""
    pytest.importorskip("lightkube")
    from guardian.kube.fleet import SHIPPED_ROLE_LEASES, FleetParams, role_gaps

    [named] = [r["resourceNames"] for r in _one("Role", "guardian-fleet")["rules"]
               if "leases" in r["resources"] and "resourceNames" in r]
    assert list(SHIPPED_ROLE_LEASES) == named
    assert role_gaps(FleetParams.model_validate(_daemonset_config()["fleet"]), []) == []


# -- what operators are told ---------------------------------------------------------------

def _docs() -> dict[str, str]:
    """Every text operators read: the README, docs/ (not the CHANGELOG: history), and the
    shipped manifests, unit and config with their comments."""
    paths = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md")),
             *sorted((REPO / "deploy").rglob("*.yaml")), UNIT, SAMPLE]
    return {str(p.relative_to(REPO)): p.read_text() for p in paths}


def _commands(text: str) -> Iterator[str]:
    """Each kubectl command in ``text``, continuation lines joined, up to a pipe, a
    semicolon, a backtick or the end of the line."""
    text = re.sub(r"\\\n\s*", " ", text)
    for m in re.finditer(r"(?<![\w-])kubectl\b[^`|;\n]*", text):
        yield m.group(0)


PATHS = r"(/var/lib/guardian|/var/log/guardian|/etc/guardian)\b(/[\w./-]*\w)?"
NS_FLAG = re.compile(r"(?:\s)(?:-n|--namespace)(?:\s+|=)([a-z0-9][a-z0-9-]*)")


def _mentions(f: Facts) -> list[tuple[str, Callable[[re.Match[str]], str | None]]]:
    """Each kind of mention: a pattern, and what is wrong with a match (None: nothing)."""
    def must(what: str, allowed: str | int | frozenset[str]
             ) -> Callable[[re.Match[str]], str | None]:
        ok = sorted(allowed) if isinstance(allowed, frozenset) else [str(allowed)]
        return lambda m: None if m.group(1) in ok else \
            f"{m.group(0)!r}: expected {' or '.join(ok)} ({what})"

    def path(m: re.Match[str]) -> str | None:
        base, rest = m.group(1), (m.group(2) or "").strip("/")
        known = {f.state_dir: f.state_files, f.logs_dir: f.logs_files,
                 str(DEFAULT_CONFIG.parent): {Path(f.config_file).name,
                                              Path(f.rules_dir).name,
                                              Path(f.dropin_dir).name,
                                              dropin_dir(f.config_file).name}}
        if base not in known:
            return f"{m.group(0)!r}: guardian's directories are {sorted(known)}"
        first = rest.split("/")[0]
        if first and first not in known[base]:
            return f"{m.group(0)!r}: {base} holds {sorted(known[base])}"
        return None

    ns = f"the DaemonSet's namespace, {DEPLOY.relative_to(REPO)}"
    cms = "|".join(map(re.escape, sorted(f.configmaps)))
    return [
        # kube-system/guardian-holds
        (rf"(?<![\w./-])([a-z0-9][a-z0-9-]*)/(?:{cms})\b", must(ns, f.namespace)),
        # namespace = "…" (TOML), namespace: … (YAML), "namespace `…`"
        (r"\bnamespace\s*=\s*\"([^\"]+)\"", must(ns, f.namespace)),
        (r"(?m)^\s*namespace:\s*([a-z0-9-]+)\s*$", must(ns, f.namespace)),
        (r"\bnamespace `([^`]+)`", must(ns, f.namespace)),
        # the ConfigMaps by name
        (r"\bConfigMaps? `?(guardian-[\w-]+)", must("guardian's ConfigMaps", f.configmaps)),
        (r"\bconfigmap (guardian-[\w-]+)", must("guardian's ConfigMaps", f.configmaps)),
        # the holds ConfigMap's key
        (r"\bkey `?([\w.-]+)`? of the ConfigMap", must("[holds.kube] key", f.holds_key)),
        (rf"\bconfigmap {re.escape(f.holds_configmap)}\b[^\n`|]*--from-file=(?:([\w.-]+)=)?",
         lambda m: None if m.group(1) in (None, f.holds_key) else
         f"{m.group(0)!r}: the key is {f.holds_key}"),
        (rf"\bconfigmap {re.escape(f.holds_configmap)}\b[^\n`|]*--from-file=(?![\w.-]+=)"
         r"(?:[^\s`]*/)?([\w.-]+)", must("[holds.kube] key", f.holds_key)),
        # annotations guardian reads or writes
        (r"annotat\w*[^.\n]{0,40}?guardian\\?\.io/([\w-]*\w)",
         lambda m: None if f"guardian.io/{m.group(1)}" in f.annotations else
         f"{m.group(0)!r}: guardian's annotations are {sorted(f.annotations)}"),
        # the metrics port
        (r"`(?:127\.0\.0\.1|localhost|0\.0\.0\.0|\[::1?\]):(\d+)`",
         must("[service.metrics] port", f.metrics_port)),
        (r"(?i)\b(?:container)?port\s*[=:]\s*\"?(\d+)", must("the metrics port",
                                                              f.metrics_port)),
        (r"metrics port,? `?(\d+)", must("the metrics port", f.metrics_port)),
        # /healthz
        (r"(?<![\w.:/-])/(health\w*)\b", must("the liveness probe's path",
                                               f.health_path.lstrip("/"))),
        (r"(?<![\w.:/-])/(read\w*z)\b", must("the readiness probe's path",
                                            f.ready_path.lstrip("/"))),
        # guardian's files
        (PATHS, path),
        (r"\$STATE_DIRECTORY/([\w.-]+)", must("the state file", f.state_files)),
        (r"\$LOGS_DIRECTORY/([\w.-]+)", must("the audit log", f.logs_files)),
        (r"`([\w.-]+)` beside the state file", must("the pause file", f.state_files)),
        # the DaemonSet's arguments
        (r"`(--[\w-]+=\$\(\w+\))`", must("the DaemonSet's args", f.daemonset_args)),
        # the unit's settings
        (r"\b(?:WatchdogSec|RestartPreventExitStatus|Type|StateDirectory|LogsDirectory"
         r"|TimeoutStopSec|MemoryLow|OOMScoreAdjust|CPUWeight|IOWeight|ProtectSystem)"
         r"=[^`\s,)]+",
         lambda m: None if m.group(0).split("=", 1)[1] in f.unit.get(
             m.group(0).split("=", 1)[0], []) else f"{m.group(0)!r}: the unit says "
         f"{m.group(0).split('=', 1)[0]}={f.unit.get(m.group(0).split('=', 1)[0])}"),
        # deploy/… paths exist
        (r"\b(deploy/[\w/.-]*\w)",
         lambda m: None if (REPO / m.group(1)).exists() else f"{m.group(0)!r}: no such "
         "file"),
    ]


def wrong_mentions(docs: dict[str, str]) -> list[str]:
    f = facts()
    wrong = []
    for name, text in docs.items():
        for pattern, check in _mentions(f):
            if pattern == PATHS and name == str(SAMPLE.relative_to(REPO)):
                continue  # its examples name operators' files; its keys: the test above
            for m in re.finditer(pattern, text):
                if (why := check(m)) is not None:
                    line = text.count("\n", 0, m.start()) + 1
                    wrong.append(f"{name}:{line}: {why}")
        for command in _commands(text):
            # a command on guardian's namespaced objects names the namespace they are in
            names = re.search(rf"\b(?:{'|'.join(map(re.escape, sorted(f.configmaps)))})\b"
                              r"|\b(?:ds|daemonsets?|leases?)[/ ]guardian\b", command)
            flags = NS_FLAG.findall(command)
            if names and flags != [f.namespace]:
                wrong.append(f"{name}: {command.strip()!r}: needs -n {f.namespace} (the "
                             "DaemonSet's namespace)")
    return wrong


def test_every_mention_in_the_docs_and_comments_is_true() -> None:
    wrong = wrong_mentions(_docs())
    assert not wrong, "\n".join(wrong)


@pytest.mark.parametrize(("good", "bad"), [
    ("`guardian/guardian-holds`", "`kube-system/guardian-holds`"),
    ("kubectl -n guardian create configmap guardian-holds --from-file=holds.toml",
     "kubectl -n kube-system create configmap guardian-holds --from-file=holds.toml"),
    ("kubectl -n guardian create configmap guardian-holds --from-file=holds.toml",
     "kubectl create configmap guardian-holds --from-file=holds.toml"),
    ("kubectl -n guardian create configmap guardian-holds --from-file=holds.toml",
     "kubectl -n guardian create configmap guardian-holds --from-file=hold.toml"),
    ("kubectl -n guardian create configmap guardian-holds --from-file=holds.toml",
     "kubectl -n guardian create configmap guardian-hold --from-file=holds.toml"),
    ("the annotation `guardian.io/hold`", "the annotation `guardian.io/holds`"),
    ("on `127.0.0.1:9847`", "on `127.0.0.1:9874`"),
    ("answers `/healthz`", "answers `/health`"),
    ("answers `/readyz`", "answers `/readz`"),
    ("`/etc/guardian/holds.d`", "`/etc/guardian/hold.d`"),
    ("`/var/lib/guardian/guardian.lock`", "`/var/log/guardian/guardian.lock`"),
    ("`WatchdogSec=30s`", "`WatchdogSec=60s`"),
    ('namespace = "guardian"', 'namespace = "kube-system"'),
], ids=["configmap-namespace", "kubectl-namespace", "kubectl-no-namespace", "kubectl-file",
        "kubectl-name", "annotation", "metrics-port", "healthz", "readyz", "holds-dir", "lock-file",
        "watchdog", "toml-namespace"])
def test_a_wrong_mention_is_named(good: str, bad: str) -> None:
    assert wrong_mentions({"doc.md": good}) == []
    [why] = wrong_mentions({"doc.md": bad})
    assert why.startswith("doc.md")


def test_the_docs_say_how_to_create_the_holds_configmap() -> None:
    """It is not shipped, and a missing one reads as no holds: docs/operating.md gives
    the command that creates it where the DaemonSet reads it, with the key it reads."""
    f = facts()
    creates = [c for c in _commands((REPO / "docs" / "operating.md").read_text())
               if re.search(rf"\bcreate configmap {re.escape(f.holds_configmap)}\b", c)]
    assert creates, "docs/operating.md: no `kubectl -n NS create configmap` for the holds"
    assert all(NS_FLAG.findall(c) == [f.namespace] for c in creates), creates
    assert all(re.search(rf"--from-file=(?:[^\s]*/)?{re.escape(f.holds_key)}\b", c)
               for c in creates), creates
