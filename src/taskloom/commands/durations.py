"""Durations on the command line: ``90s``, ``30m``, ``12h``, ``7d``, ``2w`` or ``forever``."""

import re
from datetime import UTC, datetime, timedelta
from typing import Any, Final, Literal

import click

_UNITS: Final = {"s": 1, "m": 60, "h": 3_600, "d": 86_400, "w": 604_800}
_DURATION: Final = re.compile(r"(\d+(?:\.\d+)?)\s*([smhdw])")
FOREVER: Final = "forever"


def duration(text: str) -> timedelta:
    """*text* as a duration.

    Raises:
        ValueError: it is not a number and a unit.
    """
    found = _DURATION.fullmatch(text.strip().lower())
    if found is None:
        raise ValueError(
            f"{text!r} is not a duration: a number and a unit, like 90s, 30m, 12h, 7d or 2w"
        )
    return timedelta(seconds=float(found[1]) * _UNITS[found[2]])


def retention(text: str) -> timedelta | Literal["forever"]:
    """Like :func:`duration`, or ``"forever"`` (keep the task for good)."""
    return FOREVER if text.strip().lower() == FOREVER else duration(text)


class DurationType(click.ParamType):  # type: ignore[type-arg]  # generic from click 8.2 on
    """A click type for :func:`duration` (or :func:`retention` with *forever*)."""

    name = "duration"

    def __init__(self, *, forever: bool = False) -> None:
        self._forever = forever

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, timedelta) or value == FOREVER:
            return value
        try:
            return retention(str(value)) if self._forever else duration(str(value))
        except ValueError as error:
            self.fail(str(error), param, ctx)


DURATION: Final = DurationType()
RETENTION: Final = DurationType(forever=True)


def since(text: str, now: datetime) -> datetime:
    """``--since``: a duration before *now* (``2h``, ``3d``) or an ISO time (UTC unless it
    names its offset).

    Raises:
        ValueError: neither.
    """
    try:
        return now - duration(text)
    except ValueError:
        pass
    try:
        moment = datetime.fromisoformat(text.strip())
    except ValueError:
        raise ValueError(
            f"{text!r} is neither a duration (2h, 3d) nor an ISO time (2026-11-24T08:00)"
        ) from None
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)
