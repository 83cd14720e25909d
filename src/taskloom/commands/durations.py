"""Durations on the command line: ``90s``, ``30m``, ``12h``, ``7d``, ``2w`` or ``forever``."""

import argparse
import re
from datetime import timedelta
from typing import Final

_UNITS: Final = {"s": 1, "m": 60, "h": 3_600, "d": 86_400, "w": 604_800}
_DURATION: Final = re.compile(r"(\d+(?:\.\d+)?)\s*([smhdw])")
FOREVER: Final = "forever"


def duration(text: str) -> timedelta:
    """*text* as a duration (an argparse type: a bad value is reported like a bad flag)."""
    found = _DURATION.fullmatch(text.strip().lower())
    if found is None:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a duration: a number and a unit, like 90s, 30m, 12h, 7d or 2w"
        )
    return timedelta(seconds=float(found[1]) * _UNITS[found[2]])


def retention(text: str) -> timedelta | None:
    """Like :func:`duration`, or ``None`` for ``forever`` (keep the task for good)."""
    return None if text.strip().lower() == FOREVER else duration(text)
