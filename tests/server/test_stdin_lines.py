"""Standard input as lines: every line whole, however the reads cut it."""

import os

import anyio
import pytest

from taskloom.server import stdin_lines
from taskloom.server.stdin_lines import lines

pytestmark = pytest.mark.anyio

TEXT = "first\n\n日本 long line with é and 😀 in it\n" + "x" * 5_000 + "\n{}\nno newline at the end"


async def _read_all(data: bytes) -> list[str]:
    read_end, write_end = os.pipe()
    try:
        os.write(write_end, data)  # less than a pipe holds
        os.close(write_end)
        with anyio.fail_after(10):
            return [line async for line in lines(read_end)]
    finally:
        os.close(read_end)


@pytest.mark.parametrize("read_size", [1, 2, 3, 7, 64, 65_536])
async def test_every_line_arrives_whole_however_the_reads_cut_it(
    read_size: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Reads of 1 to 64 KiB bytes cut lines, and UTF-8 characters, anywhere: each line
    comes whole with its newline, an empty line too, and the last one without."""
    monkeypatch.setattr(stdin_lines, "_CHUNK", read_size)
    expected = TEXT.splitlines(keepends=True)
    assert await _read_all(TEXT.encode("utf-8")) == expected


async def test_a_line_longer_than_many_reads_is_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(stdin_lines, "_CHUNK", 100)
    line = "y" * 50_000 + "\n"
    assert await _read_all(line.encode() + b"z\n") == [line, "z\n"]


async def test_bytes_that_are_not_utf8_are_replaced_not_fatal() -> None:
    assert await _read_all(b"ok\n\xff\xfe bad\n") == ["ok\n", "\ufffd\ufffd bad\n"]
