"""The ``log`` action: write one line to guardian's log (the journal under systemd)."""

from __future__ import annotations

import logging
from typing import ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field
from typing_extensions import TypedDict

from guardian.plugin.contract import Action, ActionContext, Outcome, Plan, Step

logger = logging.getLogger("guardian.action.log")

_LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING,
           "error": logging.ERROR, "critical": logging.CRITICAL}


class LogParams(BaseModel):
    model_config = ConfigDict(extra="forbid")

    message: str = Field(
        "rule $rule fired: $values",
        description="text to log; $rule and $values (the evidence as text: ecs.service "
        "711 restarts) are replaced; $values_json is the evidence as JSON",
    )
    level: Literal["debug", "info", "warning", "error", "critical"] = "warning"


class LogPayload(TypedDict):
    text: str
    level: str


class LogAction(Action[LogParams, LogPayload]):
    """Log a line. It changes nothing on the host, so it is the safe first action."""

    name: ClassVar[str] = "log"
    Params = LogParams
    disruptive: ClassVar[bool] = False

    def plan(self, ctx: ActionContext) -> Plan[LogPayload]:
        params = self.params
        text = ctx.message(params.message)
        return Plan(self.name, ctx.rule, [Step("guardian log", f"{params.level}: {text}")],
                    data={"text": text, "level": params.level})

    def apply(self, plan: Plan[LogPayload], ctx: ActionContext) -> Outcome:
        logger.log(_LEVELS[plan.data["level"]], "%s", plan.data["text"])
        return Outcome(ok=True, detail="logged", verified=True)
