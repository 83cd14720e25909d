"""Opaque list cursors: a versioned, URL-safe wrapping of a store position."""

import base64
import binascii

from taskloom.engine.errors import InvalidCursorError

_PREFIX = "tl1:"
_MAX_CURSOR_LENGTH = 64


def encode_cursor(position: int) -> str:
    """The opaque cursor for a store position."""
    raw = f"{_PREFIX}{position}".encode("ascii")
    return base64.urlsafe_b64encode(raw).decode("ascii").rstrip("=")


def decode_cursor(cursor: str) -> int:
    """The store position inside *cursor*.

    Raises:
        InvalidCursorError: the cursor was not issued by :func:`encode_cursor`.
    """
    if not cursor or len(cursor) > _MAX_CURSOR_LENGTH:
        raise InvalidCursorError(cursor)
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode("ascii")
    except (binascii.Error, UnicodeDecodeError, ValueError):
        raise InvalidCursorError(cursor) from None
    digits = raw.removeprefix(_PREFIX)
    if digits == raw or not digits.isdigit() or not digits.isascii():
        raise InvalidCursorError(cursor)
    position = int(digits)
    if encode_cursor(position) != cursor:
        raise InvalidCursorError(cursor)
    return position
