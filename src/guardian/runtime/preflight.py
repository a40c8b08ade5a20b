"""What ``guardian check`` finds beyond each rule file: rules that would be unsafe or
fail where they run (this node, the service's config, the systemd unit's sandbox)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from guardian.core.diagnostics import Diagnostic
from guardian.model.ruleset import Ruleset
from guardian.runtime.config import Config

__all__ = ["errors", "sandbox_warnings"]


def errors(rs: Ruleset, config: Config) -> list[Diagnostic]:
    """A reboot on a Kubernetes node without the fleet budget (it could take every node
    down at once), and a drain that may outlast the executor's ``apply_timeout``."""
    found = [*_reboot_errors(rs, config), *_drain_errors(rs, config)]
    return [Diagnostic(r.path, r.line, 1, why) for r, why in found]


def _reboot_errors(rs: Ruleset, config: Config) -> list[tuple[Any, str]]:
    if not any(a.use == "node.reboot" for r in rs.rules for a in [*r.actions, *r.escalate]):
        return []
    from guardian.actions.node import check

    kubernetes = bool(os.environ.get("KUBERNETES_SERVICE_HOST")) or \
        Path("/var/lib/kubelet").is_dir()
    return check(rs.rules, config.fleet is not None, kubernetes)


def _drain_errors(rs: Ruleset, config: Config) -> list[tuple[Any, str]]:
    drains = any(a.use == "kube.drain" or (a.use == "node.reboot" and a.params.get("drain"))
                 for r in rs.rules for a in [*r.actions, *r.escalate])
    if not drains:
        return []
    from guardian.kube.drain import check

    return check(rs.rules, config.service.apply_timeout)


def sandbox_warnings(rs: Ruleset) -> list[str]:
    """Actions that the systemd unit's sandbox would make fail when the unit runs them:
    a dry run, outside the unit, cannot show it."""
    from guardian.actions.memcg import MemcgRelease, sandbox_problem
    from guardian.hostio.sandbox import unit_texts
    unit = unit_texts()
    out = []
    for rule in rs.rules:
        for bound in [*rule.actions, *rule.escalate]:
            if isinstance(bound.action, MemcgRelease):
                why = sandbox_problem(bound.action.params, unit)
                if why:
                    out.append(f"{rule.path}:{rule.line}: rule {rule.spec.name!r}: "
                               f"memcg.release: {why}")
    return out
