"""The rule-test file schema (``*.test.toml``), in pydantic: what `guardian test` accepts,
and what `guardian schema --for tests` prints for editors."""

from __future__ import annotations

from typing import Any

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictFloat,
    StrictInt,
    StrictStr,
    model_validator,
)

from guardian.core.durations import Duration, PositiveDuration


class ExpectedAction(BaseModel):
    """An action expected to run at this evaluation: its rule, its ``use``, and any of its
    parameters to compare."""

    model_config = ConfigDict(extra="allow")

    rule: StrictStr
    use: StrictStr


class Expectation(BaseModel):
    """What must hold at one evaluation time."""

    model_config = ConfigDict(extra="forbid")

    at: Duration = Field(description="time since the test's start, e.g. \"5m\" (0 is the "
                                     "first evaluation)")
    firing: list[StrictStr] | None = Field(None, description="exactly the rules firing")
    pending: list[StrictStr] | None = Field(None, description="exactly the rules pending")
    actions: list[ExpectedAction] | None = Field(
        None, description="exactly the actions applied at this evaluation (a shadow rule's, "
        "mode = \"observe\" or demoted, are never applied: see `would`)")
    would: list[ExpectedAction] | None = Field(
        None, description="exactly the actions shadow rules (mode = \"observe\", or "
        "demoted) planned at this evaluation, never applied")
    needs_human: list[StrictStr] | None = Field(
        None, description="exactly the rules that need a human (escalated) after this "
        "evaluation")
    validating: list[StrictStr] | None = Field(
        None, description="exactly the rules that stopped firing and wait for their "
        "`validate`")
    demoted: list[StrictStr] | None = Field(
        None, description="exactly the rules demoted to shadow mode (`demote`)")
    awaiting_approval: list[StrictStr] | None = Field(
        None, description="exactly the rules whose disruptive actions wait for a human's "
        "approval (`approve`) after this evaluation (a rule test gives none)")
    step: dict[StrictStr, StrictInt] | None = Field(
        None, description="for each rule named, the ladder step it ran at this evaluation "
        "(0: none)")

    @model_validator(mode="after")
    def _checks_something(self) -> Expectation:
        if all(getattr(self, k) is None for k in CHECKS):
            raise ValueError("an expectation with nothing to check: give one of "
                             + ", ".join(f"`{k}`" for k in CHECKS))
        return self


# what an expectation may check, besides `at`
CHECKS = ("firing", "pending", "actions", "would", "needs_human", "validating", "demoted",
          "awaiting_approval", "step")


class RuleTest(BaseModel):
    """One test: input series and expectations at evaluation times."""

    model_config = ConfigDict(extra="forbid")

    name: StrictStr | None = None
    series: dict[str, StrictStr | StrictInt | StrictFloat] = Field(
        default_factory=dict, description="signal (with labels) -> series notation, e.g. "
                                          "'cpu.core.sys_pct{cpu=\"0\"}' = \"5x3 100x8\"")
    reboots: list[Duration] = Field(
        default_factory=list, description="times since the test's start at which the node "
        "reboots: the engine starts anew in a new boot with the state it saved (as the "
        "service's state file carries it), so a step's `recurs` counts the boots")
    expect: list[Expectation] = Field(min_length=1)


class RuleTestFile(BaseModel):
    """A rule-test file: the rule files under test, the evaluation interval, the tests.
    Source samples (``[[kmsg]]``) sit beside them, checked by their source."""

    model_config = ConfigDict(extra="forbid")

    rule_files: list[StrictStr] = Field(min_length=1)
    interval: PositiveDuration = 60.0
    test: list[RuleTest] = Field(default_factory=list)


def test_file_schema(samples: dict[str, Any] | None = None) -> dict[str, Any]:
    """The JSON Schema of a rule-test file; ``samples`` adds a source's sample tables."""
    schema = RuleTestFile.model_json_schema()
    for name, item in (samples or {}).items():
        schema["properties"][name] = {"type": "array", "items": item}
    schema["required"] = []  # a file of source samples alone needs no rule_files
    return schema
