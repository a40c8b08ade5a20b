"""The ``systemd.unit`` action: stop, disable, mask or reset-failed crash-looping units.

The incident's real fix: stop the unit that leaks cgroups. Targets are units the systemd
source reports (``systemd.unit_restarts_recent``) that match the rule's allow-list, not
its deny-list, with at least ``min_restarts`` restarts in the source's window. systemd is
reached as the systemd source reaches it (:mod:`guardian.hostio.systemdclient`: its
private bus, where the image has no ``systemctl``, or its ``systemctl`` argv), unless the
rule names a ``systemctl`` argv; the effect is verified by reading the unit back.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field
from typing_extensions import NotRequired, TypedDict

from guardian.core.atomicfile import write_json
from guardian.core.durations import Duration
from guardian.hostio.records import read_json
from guardian.hostio.systemdclient import STOPPED, SystemdClient, client_for
from guardian.plugin.contract import Action, ActionContext, Outcome, Plan, Step
from guardian.plugin.safety import selected

Verb = Literal["stop", "disable", "mask", "reset-failed", "restart", "try-restart", "reload"]
# Units whose loss takes the node (or guardian) down; never touched, whatever the allow-list.
NEVER = ("guardian*.service", "systemd-*.service", "dbus*.service", "ssh*.service",
         "kubelet.service", "containerd.service", "docker.service", "getty@*.service",
         "serial-getty@*.service")
# ... except that the node's agent and container runtime may be restarted or reloaded
# when a rule names them exactly (node-problem-detector's health checker repairs them)
RUNTIME = ("kubelet.service", "containerd.service", "docker.service")
RESTARTS = ("restart", "try-restart", "reload")


class UnitParams(BaseModel):
    model_config = ConfigDict(extra="forbid")

    allow: list[str] = Field(min_length=1, description="unit globs that may be acted on")
    deny: list[str] = Field(default_factory=list)
    verbs: list[Verb] = Field(["stop"], min_length=1, description="in this order")
    min_restarts: int = Field(5, ge=0, description="restarts within the systemd source's "
                              "window (0: act on matching units whatever their restarts)")
    units: list[str] | None = Field(None, description="exact units, instead of the "
                                    "crash-loop criteria (for `guardian act`)")
    systemctl: list[str] | None = Field(
        None, min_length=1, description="argv that runs systemctl; default: systemd as the "
        "systemd source reaches it (its transport: the private bus, or its systemctl argv)")
    timeout: Duration = Field(30.0, gt=0)
    restart_budget: int = Field(3, ge=1, description="restarts (restart, try-restart, "
                                "reload) of one unit within restart_window, then skipped")
    restart_window: Duration = Field(3600.0, gt=0)
    cooldown: Duration = Field(120.0, ge=0, description="a unit is restarted only once it "
                               "has run this long since it last started (node-problem-"
                               "detector's --cooldown-time, 2 minutes)")
    verify_wait: Duration = Field(30.0, gt=0, description="how long a restarted unit has "
                                  "to be active again")
    state_dir: str = Field("/var/lib/guardian", description="where the restarts are "
                           "recorded (guardian's StateDirectory), so the budget outlives "
                           "a restart of guardian")


RESTARTS_FILE = "unit-restarts.json"  # unit -> wall-clock times of its restarts


class UnitPayload(TypedDict):
    units: NotRequired[list[str]]  # the units the verbs run on; absent when refused


class SystemdUnit(Action[UnitParams, UnitPayload]):
    """Stop (and optionally disable or mask) crash-looping units."""

    name: ClassVar[str] = "systemd.unit"
    Params = UnitParams

    def plan(self, ctx: ActionContext) -> Plan[UnitPayload]:
        p = self.params
        plan: Plan[UnitPayload] = Plan(self.name, ctx.rule)
        candidates: dict[str, float] = {}
        if p.units is not None:
            candidates = dict.fromkeys(p.units, float("nan"))
        else:
            fam = ctx.snapshot.values.get("systemd.unit_restarts_recent")
            if not isinstance(fam, dict):
                plan.refused.append("no systemd.unit_restarts_recent in the snapshot "
                                    "(the systemd source is unavailable or failed)")
                return plan
            candidates = {dict(k)["unit"]: v for k, v in fam.items() if v >= p.min_restarts}
        targets = []
        client = self._client(ctx)
        via = " ".join(p.systemctl) if p.systemctl else (
            " ".join(client.settings.systemctl) if client.transport == "systemctl"
            else "systemd (bus)")
        if set(p.verbs) & set(RESTARTS):
            try:
                self._restarts(ctx.host.root)
            except ValueError as exc:
                plan.refused.append(f"{exc}: no restart until it is fixed or removed")
                return plan
        for unit, restarts in sorted(candidates.items()):
            if not selected(unit, p.allow, p.deny):
                continue
            never = next((g for g in NEVER if fnmatchcase(unit, g)), None)
            if never and not (unit in RUNTIME and set(p.verbs) <= set(RESTARTS)
                              and unit in [*(p.units or []), *p.allow]):
                plan.skipped.append(f"{unit}: never touched ({never})")
                continue
            why = "" if restarts != restarts else f" ({restarts:g} restarts in the window)"
            if set(p.verbs) & set(RESTARTS):
                held = self._restart_held(unit, client, ctx.host.root)
                if held:
                    plan.skipped.append(f"{unit}: {held}")
                    continue
            targets.append(unit)
            for verb in p.verbs:
                plan.steps.append(Step(unit, f"{via} {verb} {unit}{why}"))
        if not targets and not plan.skipped:
            plan.note = "no unit matches: nothing to do"
        plan.data["units"] = targets
        return plan

    def _restart_held(self, unit: str, client: SystemdClient, root: Path) -> str:
        """Why ``unit`` must not be restarted now ("" if it may): its budget is spent, or
        it has not run ``cooldown`` since it last started. node-problem-detector's health
        checker times this from InactiveExitTimestamp, not ActiveEnterTimestamp: "the
        service was repeatedly killed in activating state and hence ActiveEnterTimestamp
        was never updated" (pkg/healthchecker/health_checker_linux.go)."""
        p = self.params
        recent = [t for t in self._restarts(root).get(unit, []) if t > time.time() -
                  p.restart_window]
        if len(recent) >= p.restart_budget:
            return (f"restart budget spent: {len(recent)} within {p.restart_window:g}s "
                    f"(restart_budget)")
        started = client.show(unit).get("InactiveExitTimestampMonotonic", "")
        if started.isdigit() and int(started) > 0:
            up = time.monotonic() - int(started) / 1e6
            if up < p.cooldown:
                return f"up only {up:.0f}s since it last started (cooldown {p.cooldown:g}s)"
        return ""

    def _file(self, root: Path) -> Path:
        return root / self.params.state_dir.lstrip("/") / RESTARTS_FILE

    def _restarts(self, root: Path) -> dict[str, list[float]]:
        """The recorded restarts; none if the record does not exist. A record that
        exists but cannot be read raises ValueError: an empty budget would restart in a
        loop (fail closed)."""
        path = self._file(root)
        try:
            got = read_json(path)
            return {str(u): [float(t) for t in ts] for u, ts in got.items()}
        except FileNotFoundError:
            return {}
        except (OSError, ValueError, TypeError, AttributeError) as exc:
            raise ValueError(f"the restart budget's record {path} cannot be read: "
                             f"{exc}") from None

    def _count_restart(self, root: Path, unit: str) -> None:
        """Recorded before the restart is asked for: an attempt counts."""
        p = self.params
        got = self._restarts(root)
        now = time.time()
        got[unit] = [t for t in got.get(unit, []) if t > now - p.restart_window] + [now]
        write_json(self._file(root), got)

    def _client(self, ctx: ActionContext) -> SystemdClient:
        return client_for(ctx.host.root, self.params.systemctl, self.params.timeout)

    def apply(self, plan: Plan[UnitPayload], ctx: ActionContext) -> Outcome:
        p = self.params
        results: list[dict[str, Any]] = []
        client = self._client(ctx)
        try:
            for unit in plan.data.get("units", []):
                state = client.show(unit)
                if state.get("LoadState") == "not-found":
                    results.append({"unit": unit, "ok": True, "note": "unit is gone: no-op"})
                    continue
                r: dict[str, Any] = {"unit": unit, "ok": True, "verbs": [],
                                     "via": client.describe()}
                before = state.get("InactiveExitTimestampMonotonic", "")
                for verb in p.verbs:
                    error = None
                    if verb in RESTARTS:
                        try:
                            self._count_restart(ctx.host.root, unit)
                        except (OSError, ValueError) as exc:
                            error = f"{verb} {unit}: not done: the restart budget cannot " \
                                    f"be recorded in {p.state_dir}: {exc}"
                    error = error or client.verb(verb, unit)
                    if error is None and verb in RESTARTS and not (
                            verb == "try-restart" and state.get("ActiveState") in STOPPED):
                        # (try-restart of a stopped unit does nothing, by design)
                        error = self._await_active(client, unit, verb, before)
                    r["verbs"].append({"verb": verb, "ok": error is None,
                                       **({"error": error[:2000]} if error else {})})
                    if error:
                        r["ok"] = False
                        r["error"] = error[:300]
                        break
                after = client.show(unit)
                r["after"] = after
                r["verified"] = _verified(p.verbs, after) if r["ok"] else False
                results.append(r)
        finally:
            client.close()
        failed = [r for r in results if not r["ok"]]
        unverified = [r["unit"] for r in results if r["ok"] and r.get("verified") is False]
        data = {"units": results}
        if failed:
            return Outcome(ok=False, verified=False, data=data,
                           error="; ".join(r["error"] for r in failed))
        if unverified:
            return Outcome(ok=False, verified=False, data=data,
                           error=f"commands succeeded but not in effect: {unverified}")
        return Outcome(ok=True, verified=True, data=data,
                       detail=f"{', '.join(p.verbs)}: {len(results)} unit(s)")


    def _await_active(self, client: SystemdClient, unit: str, verb: str, before: str
                      ) -> str | None:
        """Wait (``verify_wait``) until ``unit`` is active again, and for a restart, has
        started anew (its InactiveExitTimestampMonotonic moved); None, or why not."""
        deadline = time.monotonic() + self.params.verify_wait
        state: dict[str, str] = {}
        while time.monotonic() < deadline:
            state = client.show(unit)
            anew = verb == "reload" or state.get("InactiveExitTimestampMonotonic") != before
            if state.get("ActiveState") == "active" and anew:
                return None
            time.sleep(0.1)
        return (f"{verb} {unit}: not active again within {self.params.verify_wait:g}s "
                f"({state.get('ActiveState', 'unknown')}/{state.get('SubState', '?')})")


def _verified(verbs: Sequence[str], after: dict[str, str]) -> bool:
    ok = True
    if {"restart", "reload"} & set(verbs):
        ok &= after.get("ActiveState") == "active"
    if "stop" in verbs:
        ok &= after.get("ActiveState") in ("inactive", "failed")
    if "mask" in verbs:
        ok &= after.get("UnitFileState", "").startswith("masked") or after.get(
            "LoadState") == "masked"
    if "disable" in verbs and "mask" not in verbs:
        ok &= after.get("UnitFileState") not in ("enabled", "enabled-runtime")
    return ok
