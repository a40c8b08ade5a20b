"""The rule file schema (version 1), defined in pydantic; `guardian schema` prints it."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PositiveInt,
)

from guardian.core.durations import Duration, PositiveDuration
from guardian.model.window import Window

SCHEMA_VERSION = 1

Severity = Literal["info", "warning", "critical"]
Mode = Literal["act", "observe"]  # observe: shadow mode, planned and audited, never applied


class ActionSpec(BaseModel):
    """One action a rule runs: ``use`` names a registered action; every other key is a
    parameter, validated by that action's own parameter model."""

    model_config = ConfigDict(extra="allow", frozen=True)

    use: str = Field(description="name of a registered action, e.g. \"log\"")
    on: Literal["fire", "resolve", "both"] = Field(
        "fire", description="run when the rule fires (and again after each cooldown while "
        "it fires), when it resolves, or both")
    hold: bool = Field(True, description="with `caused_by`: a disruptive action waits while "
                       "a cause is pending or firing; false runs it anyway (a remedy of the "
                       "cause itself, such as stopping the unit that leaks)")

    @property
    def params(self) -> dict[str, Any]:
        return dict(self.model_extra or {})


class Limit(BaseModel):
    """At most ``runs`` action runs within ``within``; then the rule stops acting."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    runs: PositiveInt
    within: PositiveDuration


class Recurs(BaseModel):
    """A step for a problem that comes back boot after boot: the boots it must have fired
    in (this one included), within a span of time."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    boots: int = Field(ge=2, le=8, description="the boots the rule fired in (this one "
                       "included), at least")
    within: PositiveDuration = Field(7 * 86400.0, description="counting boots in which it "
                                     "fired within this long (default 7d)")


class Approve(BaseModel):
    """An approval gate: the disruptive actions wait for a human's approval (``guardian
    approve``, the node annotation ``guardian.io/approve``); the others run meanwhile."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    timeout: PositiveDuration = Field(description="how long the disruptive actions wait "
                                      "for an approval")
    then: Literal["needs_human", "proceed"] = Field(
        "needs_human", description="past the timeout without an approval: needs_human "
        "(the escalate actions run once, the gated actions never run in this episode), or "
        "proceed (they run without one, and the decision says so)")


class Step(BaseModel):
    """One rung of a ladder: its actions, and how long the rule has to resolve after they
    ran before the next step runs."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    verify: PositiveDuration = Field(
        description="how long the rule has to resolve after this step's actions ran; "
        "still firing then, the next step runs (past the last: it needs a human)")
    recurs: Recurs | None = Field(
        None, description="the step applies only once the rule fired in this many boots "
        "within `within`: then a climb starts at it (the steps before are skipped); before, "
        "it is skipped. The durable fix for what recurs boot after boot (disable or mask a "
        "unit)")
    approve: Approve | None = Field(None, description="the step's disruptive actions "
                                    "wait for a human's approval (its other actions run "
                                    "when the wait begins, the whole step once approved); "
                                    "default: the rule's `approve`")
    action: list[ActionSpec] = Field(min_length=1)


class Demote(BaseModel):
    """Learning: a remedy that does not work here goes to shadow mode."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    after: PositiveInt = Field(description="judged once its remedy acted in this many "
                               "episodes (since the rule last changed)")
    below: str = Field(pattern=r"^(100|[0-9]{1,2}(\.[0-9]+)?)%$", description="demoted "
                       "when it resolved fewer than this share of them without a human, "
                       "e.g. \"20%\"")

    @property
    def fraction(self) -> float:
        return float(self.below[:-1]) / 100


class Rule(BaseModel):
    """A condition over signals and what to do while it holds."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True, frozen=True)

    name: str = Field(pattern=r"^[a-z0-9][a-z0-9_.-]*$", max_length=128)
    summary: str = Field(min_length=1)
    description: str = ""
    when: str = Field(min_length=1, description="condition expression over signals")
    for_: Duration = Field(
        0.0, alias="for", description="how long `when` must hold before the rule fires"
    )
    keep_firing_for: Duration = Field(
        0.0, description="how long the rule keeps firing after `when` stops holding"
    )
    cooldown: Duration = Field(300.0, description="least time between two action runs")
    limit: Limit = Field(
        Limit(runs=3, within=3600.0),
        description="at most this many action runs in a window; then the rule stops acting",
    )
    severity: Severity = "warning"
    labels: dict[str, str] = Field(default_factory=dict)
    enabled: bool = True
    fleet: bool | None = Field(None, description="take a slot of the fleet-wide disruption "
                               "budget (Kubernetes Leases, [fleet] in guardian.toml) before "
                               "acting; a rule with a disruptive kube.* action must say "
                               "(false: on purpose without it)")
    mode: Mode = Field(
        "act", description="observe: shadow mode, the rule evaluates, plans and audits what "
        "it would do and never applies it")
    window: Window | None = Field(None, description="when its disruptive actions may run "
                                  "(default: [engine.window] of guardian.toml, else always)")
    approve: Approve | None = Field(
        None, description="its disruptive actions wait for a human's approval (`guardian "
        "approve`, the node annotation guardian.io/approve), for at most `timeout`; its "
        "other actions (log, notify, kube.event) run meanwhile. On a ladder: each step's "
        "that has none of its own")
    caused_by: list[str] = Field(
        default_factory=list, description="rules that cause this one: while any of them is "
        "pending or firing, this rule's disruptive actions are held (its log, condition and "
        "event actions still run), so the cause is fixed first")
    action: list[ActionSpec] = Field(default_factory=list)
    step: list[Step] = Field(
        default_factory=list, description="a ladder: remedies climbed one step at a time, "
        "each after the previous one's `verify` passed with the rule still firing; past "
        "the last, the rule needs a human. Its fire actions are in its steps "
        "([[rule.action]] then holds only clean-up, on = \"resolve\")")
    escalate: list[ActionSpec] = Field(
        default_factory=list, description="when the actions ran their `limit` (or a "
        "ladder's last step its `verify`) and the rule still fires: these run once (cordon, "
        "condition, notify, a heavier remedy) and the rule needs a human; those with on = "
        "\"resolve\"/\"both\" run when it resolves")
    validate_: str | None = Field(
        None, alias="validate", min_length=1, description="a condition that must hold "
        "before the rule's clean-up (on = \"resolve\"/\"both\": uncordon, untaint) "
        "runs once it stops firing; until then the node stays as its remedy left it")
    validate_for: Duration = Field(
        0.0, description="how long `validate` must hold before the clean-up runs")
    demote: Demote | None = Field(
        None, description="learning, opt-in: once its remedy acted `after` times and "
        "resolved it (without a human) less than `below` of them, the rule is demoted to "
        "shadow mode (as mode = \"observe\") from its next episode, saved across restarts; "
        "a reload or restart with the rule changed puts it back to act")
    validate_within: PositiveDuration = Field(
        3600.0, description="validation not passed this long after the rule stopped "
        "firing: it needs a human (its escalate actions run once); the clean-up still "
        "waits for `validate`")


class RuleFile(BaseModel):
    """A rule file: a schema version and a list of ``[[rule]]`` tables."""

    model_config = ConfigDict(extra="forbid")

    version: Literal[1] = Field(description="schema version of this file")
    rule: list[Rule] = Field(default_factory=list)
