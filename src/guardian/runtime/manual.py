"""An action run by hand (``guardian act``), outside any rule: the rails the service
would hold it to."""

from __future__ import annotations

import time

from guardian.model.nodegroups import shadow_why
from guardian.runtime.config import Config
from guardian.runtime.paths import service_paths

__all__ = ["refusals"]


def refusals(config: Config, disruptive: bool, wall: float | None = None) -> list[str]:
    """Why an action run by hand must not apply now, as the service would not: a hold on
    every rule in force (from any source the config names; an unreadable one counts),
    this node in a shadow node group (``[[group]] mode = "shadow"``; its labels not
    known, for a disruptive action), and for a disruptive action the config's
    maintenance window closed or a fleet budget (which a manual run takes no slot of)
    configured. Empty when it may apply."""
    from guardian.runtime.operate import Operations  # the service's sources of holds

    wall = time.time() if wall is None else wall
    ops = Operations(config, service_paths(config).state)
    out = [f"a hold on every rule is in force ({h.describe()}) [{h.source}]"
           for h in ops.holds(wall) if h.rule == "*" and not h.labels]
    group = shadow_why(None, disruptive, ops.labels(), ops.groups)  # labels as just read
    if group:
        out.append(group)
    window = config.engine.window
    if disruptive and window is not None and not window.is_open(wall):
        out.append(f"outside the maintenance window ({window.describe()})")
    if disruptive and config.fleet is not None:
        out.append("[fleet] is configured, and guardian act takes no slot of the fleet "
                   "budget")
    return out
