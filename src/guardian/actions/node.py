"""The ``node.reboot`` action: reboot the node through systemd (StartUnit of
``reboot.target``, job mode ``replace-irreversibly``, as ``systemctl reboot`` asks; over
systemd's private bus or its systemctl argv, never a shell), when a reboot is required
(kured's sentinel, ``/var/run/reboot-required``; where guardian sees the node's ``/run``
elsewhere, as the DaemonSet does at ``/host/run``, ``$GUARDIAN_REBOOT_SENTINEL`` or the
``sentinel`` parameter says where), at most ``max_reboots`` per ``window``,
optionally draining the node first (``drain``: kube.drain's parameters) and, with
``on = "both"``, undoing guardian's cordon once the node is back in a new boot.

The reboots are recorded in ``state_dir``/reboots.json before systemd is asked (each with
the boot it was asked in), so the budget and "has the node rebooted yet" outlive the
reboot; a reboot systemd refuses is taken out of the record again (it spends nothing). A
``fleet = true`` rule holds its slot of the fleet budget across the reboot:
the slot is a Lease under this node's name, which the restarted guardian finds, renews and
gives back when the rule resolves in the new boot.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field, field_validator
from typing_extensions import NotRequired, TypedDict

from guardian.core.atomicfile import write_json
from guardian.core.durations import Duration
from guardian.hostio.host import boot_id, exists, resolve_under
from guardian.hostio.records import read_json
from guardian.hostio.systemdclient import SystemdClient, client_for
from guardian.plugin.contract import Action, ActionContext, Outcome, Plan, Step

if TYPE_CHECKING:  # imported when used: kubernetes is an extra
    from guardian.kube.drain import KubeDrain

TARGET, MODE = "reboot.target", "replace-irreversibly"
DEFAULT_SENTINEL = "/var/run/reboot-required"  # kured's
SENTINEL_ENV = "GUARDIAN_REBOOT_SENTINEL"  # where the DaemonSet mounts the node's /run


class RebootParams(BaseModel):
    model_config = ConfigDict(extra="forbid")

    sentinel: str | None = Field(None, description="reboot only while this file exists "
                                 "(kured's sentinel); empty: always. Default: "
                                 f"${SENTINEL_ENV} when set (the DaemonSet sets "
                                 "/host/run/reboot-required: the node's /run, mounted "
                                 "read-only; the pod's own /run has no sentinel), else "
                                 f"{DEFAULT_SENTINEL}")

    def sentinel_path(self) -> str:
        """The sentinel this action looks for ("": none, always reboot)."""
        if self.sentinel is not None:
            return self.sentinel
        return os.environ.get(SENTINEL_ENV) or DEFAULT_SENTINEL
    max_reboots: int = Field(1, ge=1, le=100, description="reboots of this node within "
                             "`window`, then refused")
    window: Duration = Field(86400.0, gt=0)
    state_dir: str = Field("/var/lib/guardian", description="where the reboots are "
                           "recorded (guardian's StateDirectory)")
    boot_id: str = Field("/proc/sys/kernel/random/boot_id", description="the kernel's "
                         "boot id (a new one after each boot)")
    drain: dict[str, Any] | None = Field(None, description="drain first, with kube.drain's "
                                         "parameters (the k8s extra); with on = \"both\" "
                                         "guardian's cordon is undone after the new boot")
    systemctl: list[str] | None = Field(None, min_length=1, description="argv that runs "
                                        "systemctl; default: systemd as the systemd source "
                                        "reaches it")
    timeout: Duration = Field(30.0, gt=0)

    @field_validator("drain")
    @classmethod
    def _drain(cls, v: dict[str, Any] | None) -> dict[str, Any] | None:
        if v is not None:
            try:
                from guardian.kube.drain import DrainParams
            except ImportError as exc:
                raise ValueError(f"drain needs the Kubernetes extra: {exc}") from None
            DrainParams.model_validate(v)
        return v


class RebootPayload(TypedDict):
    boot: str  # the boot id when planned
    pending: NotRequired[bool]  # a reboot was already asked for in this boot
    back: NotRequired[bool]  # resolved: the node came back in a new boot


class NodeReboot(Action[RebootParams, RebootPayload]):
    """Reboot the node through systemd, when required, within a per-node budget."""

    name: ClassVar[str] = "node.reboot"
    Params = RebootParams

    # -- what outlives the reboot --------------------------------------------------------
    def _file(self, ctx: ActionContext) -> Path:
        return resolve_under(ctx.host.root, self.params.state_dir) / "reboots.json"

    def _history(self, ctx: ActionContext) -> list[dict[str, Any]]:
        """The recorded reboots; none if the record does not exist. A record that exists
        but cannot be read or parsed raises ValueError: an empty history would reboot in
        a loop (fail closed)."""
        path = self._file(ctx)
        try:
            got = read_json(path)["reboots"]
            if not isinstance(got, list) or not all(isinstance(r, dict) for r in got):
                raise ValueError("`reboots` is not a list of records")
            for r in got:
                float(r.get("at", 0))
        except FileNotFoundError:
            return []
        except (OSError, ValueError, TypeError, KeyError) as exc:
            raise ValueError(f"the reboot record {path} cannot be read: {exc!s}") from None
        return got

    def _boot(self, ctx: ActionContext) -> str:
        return boot_id(resolve_under(ctx.host.root, self.params.boot_id))

    def _client(self, ctx: ActionContext) -> SystemdClient:
        return client_for(ctx.host.root, self.params.systemctl, self.params.timeout)

    def _drain(self) -> KubeDrain:
        from guardian.kube.drain import DrainParams, KubeDrain
        return KubeDrain(DrainParams.model_validate(self.params.drain))

    # -- plan ----------------------------------------------------------------------------
    def plan(self, ctx: ActionContext) -> Plan[RebootPayload]:
        p = self.params
        boot = self._boot(ctx)
        plan: Plan[RebootPayload] = Plan(self.name, ctx.rule, data={"boot": boot})
        try:
            history = self._history(ctx)
        except ValueError as exc:
            plan.refused.append(f"{exc}: no reboot (nor undoing one) until it is fixed or "
                                f"removed")
            return plan
        mine = [r for r in history if r.get("rule") == ctx.rule]
        if ctx.kind == "resolved":
            return self._plan_back(ctx, plan, boot, mine)
        if not boot:
            plan.refused.append(f"no boot id in {p.boot_id}: a reboot could not be told "
                                f"from none")
            return plan
        if any(r.get("boot") == boot for r in history):
            plan.note = (f"a reboot was already asked for in this boot ({boot[:8]}): "
                         f"waiting for it")
            plan.data["pending"] = True
            return plan
        sentinel = p.sentinel_path()
        if sentinel and not exists(resolve_under(ctx.host.root, sentinel)):
            plan.note = f"no reboot required ({sentinel} is absent): nothing to do"
            return plan
        now = time.time()
        recent = [r for r in history if float(r.get("at", 0)) > now - p.window]
        if len(recent) >= p.max_reboots:
            plan.refused.append(f"reboot budget spent: {len(recent)} reboot(s) within "
                                f"{p.window:g}s (max_reboots {p.max_reboots})")
            return plan
        node = "node"
        if p.drain is not None:
            drain = self._drain().plan(ctx)
            plan.refused += drain.refused
            plan.skipped += drain.skipped
            plan.steps += drain.steps
            node = f"node {drain.data.get('node', '')}".strip()
        client = self._client(ctx)
        via = " ".join(client.settings.systemctl) if client.transport == "systemctl" \
            else "systemd (bus)"
        plan.steps.append(Step(str(self._file(ctx)), f"record reboot {len(recent) + 1} of "
                               f"{p.max_reboots} within {p.window:g}s, asked in boot "
                               f"{boot[:8]}"))
        plan.steps.append(Step(node, f"{via}: StartUnit {TARGET} ({MODE})"))
        plan.note = ("verified once the node is back in a new boot; a fleet slot the "
                     "rule holds (fleet = true) is kept across the reboot and given back "
                     "when the rule resolves there" +
                     ("; then guardian's cordon is undone (on = \"both\")"
                      if p.drain is not None else ""))
        return plan

    def _plan_back(self, ctx: ActionContext, plan: Plan[RebootPayload], boot: str,
                   mine: list[dict[str, Any]]) -> Plan[RebootPayload]:
        last = mine[-1] if mine else None
        if last is None:
            plan.note = "no reboot of this rule is recorded: nothing to undo"
            return plan
        if last.get("boot") == boot:
            plan.note = f"the node has not rebooted yet (still boot {boot[:8]})"
            return plan
        plan.data["back"] = True
        plan.steps.append(Step(str(self._file(ctx)), f"back in boot {boot[:8]} (the "
                               f"reboot was asked in {str(last.get('boot'))[:8]})"))
        if self.params.drain is not None:
            plan.steps += self._drain().plan(ctx).steps
        return plan

    # -- apply ---------------------------------------------------------------------------
    def apply(self, plan: Plan[RebootPayload], ctx: ActionContext) -> Outcome:
        if ctx.kind == "resolved":
            return self._back(plan, ctx)
        if not plan.steps:
            # a reboot asked for in this boot is verified only in the next one
            return Outcome(ok=True, verified=None if plan.data.get("pending") else True,
                           detail=plan.note)
        p = self.params
        data: dict[str, Any] = {"boot": plan.data["boot"]}
        try:
            history = self._history(ctx)
        except ValueError as exc:
            return Outcome(ok=False, data=data, error=f"not rebooted: {exc}")
        if p.drain is not None:
            drain = self._drain()
            out = drain.apply(drain.plan(ctx), ctx)
            data["drain"] = out.to_dict()
            if not out.ok:
                return Outcome(ok=False, verified=False, data=data,
                               error=f"not rebooted: the drain failed: {out.error}")
        history.append({"at": time.time(), "boot": plan.data["boot"], "rule": ctx.rule})
        try:
            write_json(self._file(ctx), {"reboots": history[-100:]})
        except OSError as exc:
            return Outcome(ok=False, data=data, error=f"not rebooted: cannot record it in "
                                                      f"{self._file(ctx)}: {exc}")
        client = self._client(ctx)
        try:
            error = client.start(TARGET, MODE)
        finally:
            client.close()
        if error:
            # refused: not a reboot, so not one of the budget's (the record is written
            # first because an accepted reboot may end this process before a later write)
            history.pop()
            try:
                write_json(self._file(ctx), {"reboots": history[-100:]})
            except OSError as exc:
                error += f"; and the record of the reboot asked could not be taken back: {exc}"
            return Outcome(ok=False, data=data, error=f"not rebooted: systemd refused: {error}")
        return Outcome(ok=True, verified=None, data=data,
                       detail=f"reboot asked of {client.describe()} in boot "
                              f"{plan.data['boot'][:8]}")

    def _back(self, plan: Plan[RebootPayload], ctx: ActionContext) -> Outcome:
        if not plan.data.get("back"):
            return Outcome(ok=True, verified=None, detail=plan.note)
        data: dict[str, Any] = {"boot": plan.data["boot"]}
        if self.params.drain is not None:
            drain = self._drain()
            out = drain.apply(drain.plan(ctx), ctx)
            data["uncordon"] = out.to_dict()
            if not out.ok:
                return Outcome(ok=False, data=data, error=f"back, but: {out.error}")
        return Outcome(ok=True, verified=True, data=data,
                       detail=f"the node is back in a new boot ({plan.data['boot'][:8]})")


def check(rules: list[Any], fleet_configured: bool, kubernetes: bool
          ) -> list[tuple[Any, str]]:
    """``guardian check``'s errors: on a Kubernetes node, a rule that reboots (an action,
    an escalation or a ladder's step) must hold a slot of the fleet budget (``fleet =
    true`` and ``[fleet]`` configured); a rule in shadow mode (``mode = "observe"``)
    never reboots, and is checked once it acts."""
    if not kubernetes:
        return []
    out = []
    for rule in rules:
        if not reboots(rule) or rule.spec.mode == "observe":
            continue
        if not rule.spec.fleet or not fleet_configured:
            out.append((rule, f"rule {rule.spec.name!r}: node.reboot on a Kubernetes node "
                               f"needs the fleet budget: `fleet = true` in the rule and "
                               f"[fleet] in guardian.toml"))
    return out


def reboots(rule: Any) -> bool:
    """Whether a compiled rule has ``node.reboot`` among its actions, escalation or steps."""
    return any(a.use == "node.reboot" for a in rule.bound_actions())

