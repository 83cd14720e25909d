"""Opaque list cursors."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from taskloom.engine.cursor import decode_cursor, encode_cursor
from taskloom.engine.errors import InvalidCursorError


@given(st.integers(min_value=0, max_value=2**63 - 1))
def test_a_cursor_round_trips_its_position(position: int) -> None:
    cursor = encode_cursor(position)
    assert cursor.isascii()
    assert str(position) not in cursor or position < 10
    assert decode_cursor(cursor) == position


@pytest.mark.parametrize(
    "cursor",
    ["", "x", "not-base64!", "dGwxOg", "dGwxOi0x", "dGwyOjEw", "dGwxOjEw" + "A" * 100, "12345"],
)
def test_a_cursor_not_issued_here_is_rejected(cursor: str) -> None:
    with pytest.raises(InvalidCursorError) as raised:
        decode_cursor(cursor)
    assert "invalid cursor" in str(raised.value)


@given(st.text(max_size=80))
def test_any_string_either_decodes_to_what_encodes_it_or_is_rejected(cursor: str) -> None:
    try:
        position = decode_cursor(cursor)
    except InvalidCursorError:
        return
    assert encode_cursor(position) == cursor
