"""What a live page shows, as a short digest: the page carries it to its stream
(``?seen=``), which signals a change at once when what it reads differs, so a change
made between the page's render and its stream's start (or during a reconnect) is not
missed."""

import hashlib
import json
from typing import Final

SEEN: Final = "seen"
"""The events URL's query parameter: the digest of what the page shows."""
HEADER: Final = "X-Taskloom-Seen"
"""A live region's fragment response carries its digest here, for the page's script."""


def digest(parts: tuple[object, ...]) -> str:
    """16 hex characters naming *parts*: the same in every process and every run.

    Only strings (enum members that are strings included: their value), integers,
    booleans, ``None`` and tuples of them are taken; anything else (a float, a
    datetime) raises ``TypeError``, so no part whose text could vary slips in.
    """
    encoded = json.dumps(_checked(parts), separators=(",", ":"), ensure_ascii=False)
    return hashlib.blake2b(encoded.encode(), digest_size=8).hexdigest()


def _checked(part: object) -> object:
    if part is None or isinstance(part, bool):
        return part
    if isinstance(part, str):
        return str.__str__(part)  # a string enum member: its value, whatever its str()
    if isinstance(part, int):
        return int(part)
    if isinstance(part, tuple):
        return [_checked(each) for each in part]
    raise TypeError(f"a digest takes no {type(part).__name__}")
