"""Maintenance windows for disruptive actions, as kured's ``--reboot-days``,
``--start-time``, ``--end-time`` and ``--time-zone``: outside its window a disruptive
action is held (not dropped) and runs once the window opens, if its rule still fires."""

from __future__ import annotations

import datetime as dt
from functools import lru_cache
from typing import Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import BaseModel, ConfigDict, Field, field_validator

Day = Literal["mon", "tue", "wed", "thu", "fri", "sat", "sun"]
DAYS: tuple[Day, ...] = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")
_HHMM = r"^([01][0-9]|2[0-3]):[0-5][0-9]$|^24:00$"


@lru_cache(maxsize=64)
def zone(name: str) -> dt.tzinfo:
    """The time zone ``name`` (IANA), read once; UTC needs no tz database (a slim
    image may have none)."""
    if name == "UTC":
        return dt.timezone.utc
    return ZoneInfo(name)


def _minutes(hhmm: str) -> int:
    h, m = hhmm.split(":")
    return int(h) * 60 + int(m)


class Window(BaseModel):
    """When disruptive actions may run: on ``days``, from ``start`` to ``end`` (local
    time in ``time_zone``; an ``end`` before ``start`` runs past midnight into the next
    day, which belongs to the window of the day it began)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    days: list[Day] = Field(list(DAYS), min_length=1,
                            description="days the window opens (kured's --reboot-days)")
    start: str = Field("00:00", pattern=_HHMM, description="opens at HH:MM local time")
    end: str = Field("24:00", pattern=_HHMM, description="closes at HH:MM local time "
                     "(exclusive)")
    time_zone: str = Field("UTC", description="an IANA time zone, e.g. Europe/Berlin")

    @field_validator("time_zone")
    @classmethod
    def _known_zone(cls, v: str) -> str:
        try:
            zone(v)
        except (ZoneInfoNotFoundError, ValueError) as exc:
            raise ValueError(f"unknown time zone {v!r} (an IANA name such as "
                             f"'Europe/Berlin'; the host needs its tz database)") from exc
        return v

    def is_open(self, wall: float) -> bool:
        """Whether the window is open at Unix time ``wall``."""
        local = dt.datetime.fromtimestamp(wall, zone(self.time_zone))
        now = local.hour * 60 + local.minute
        start, end = _minutes(self.start), _minutes(self.end)
        day = DAYS[local.weekday()]
        if start < end:
            return day in self.days and start <= now < end
        # past midnight: open from start on a window day, or before end on the day after
        yesterday = DAYS[(local.weekday() - 1) % 7]
        return (day in self.days and now >= start) or (yesterday in self.days and now < end)

    def describe(self) -> str:
        days = ",".join(self.days) if len(self.days) < 7 else "every day"
        return f"{days} {self.start}-{self.end} {self.time_zone}"
