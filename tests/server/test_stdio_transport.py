"""The stdio transport on pipes: answers waiting together go out in few writes, whole and
in order; an answer alone goes out at once; requests reach the server parsed."""

import contextlib
import json
import os
from collections.abc import Iterator

import anyio
import mcp_types as types
import pytest
from mcp.shared.message import SessionMessage

from taskloom.server import stdout_lines
from taskloom.server.stdio_transport import pipe_transport
from taskloom.server.stdout_lines import ATOMIC_BYTES, PipeWriter

pytestmark = pytest.mark.anyio


@pytest.fixture
def pipes() -> Iterator[tuple[int, int, int, int]]:
    """(requests read end, requests write end, answers read end, answers write end)."""
    requests_read, requests_write = os.pipe()
    answers_read, answers_write = os.pipe()
    yield requests_read, requests_write, answers_read, answers_write
    for fd in (requests_read, requests_write, answers_read, answers_write):
        with contextlib.suppress(OSError):  # closed by the test
            os.close(fd)


@pytest.fixture
def writes(monkeypatch: pytest.MonkeyPatch) -> list[bytes]:
    """Every write the answer writer makes, as it makes it."""
    made: list[bytes] = []
    write_all = stdout_lines._write_all

    def counted(fd: int, data: bytes) -> None:
        made.append(bytes(data))
        write_all(fd, data)

    monkeypatch.setattr(stdout_lines, "_write_all", counted)
    return made


def _notification(number: int, padding: int = 0) -> SessionMessage:
    params = {"progressToken": number, "progress": number, "message": "x" * padding}
    message = types.JSONRPCNotification(
        jsonrpc="2.0", method="notifications/progress", params=params
    )
    return SessionMessage(message)


async def _read_lines(fd: int, count: int) -> list[dict[str, object]]:
    """The first *count* lines written to *fd*, read from the loop (so that the test's
    ``fail_after`` bounds the wait for a line that never comes)."""
    data = b""
    while data.count(b"\n") < count:
        await anyio.wait_readable(fd)
        chunk = os.read(fd, 65_536)
        assert chunk, "the answers ended early"
        data += chunk
    return [json.loads(line) for line in data.splitlines()]


async def test_answers_waiting_together_go_out_in_one_write_in_order(
    pipes: tuple[int, int, int, int], writes: list[bytes]
) -> None:
    requests_read, requests_write, answers_read, answers_write = pipes
    with anyio.fail_after(10):
        async with pipe_transport(requests_read, PipeWriter(answers_write)) as (_, outgoing):
            async with anyio.create_task_group() as task_group:
                for number in range(10):  # all ten wait before the writer runs
                    task_group.start_soon(outgoing.send, _notification(number))
            found = await _read_lines(answers_read, 10)
            os.close(requests_write)  # the client is gone: the transport ends
            await outgoing.aclose()
    assert [line["params"]["progress"] for line in found] == list(range(10))  # type: ignore[index]
    assert len(writes) < 10
    assert all(len(data) <= ATOMIC_BYTES and data.endswith(b"\n") for data in writes)


async def test_a_burst_larger_than_an_atomic_write_is_split_between_messages(
    pipes: tuple[int, int, int, int], writes: list[bytes]
) -> None:
    requests_read, requests_write, answers_read, answers_write = pipes
    sizes = [1_000, 1_500, 2_000, ATOMIC_BYTES * 3, 100, 3_000]
    with anyio.fail_after(10):
        async with pipe_transport(requests_read, PipeWriter(answers_write)) as (_, outgoing):
            async with anyio.create_task_group() as task_group:
                for number, size in enumerate(sizes):
                    task_group.start_soon(outgoing.send, _notification(number, size))
            found = await _read_lines(answers_read, len(sizes))
            os.close(requests_write)
            await outgoing.aclose()
    assert [line["params"]["progress"] for line in found] == list(range(len(sizes)))  # type: ignore[index]
    assert all(len(data) <= ATOMIC_BYTES for data in writes)  # every write atomic
    # only the large message is cut, in full pieces; the others end their writes whole
    assert all(data.endswith(b"\n") or len(data) == ATOMIC_BYTES for data in writes)
    pieces = [data for data in writes if not data.endswith(b"\n")]
    assert len(pieces) == 3
    assert any(data.count(b"\n") > 1 for data in writes)  # small ones shared a write


async def test_an_answer_alone_goes_out_at_once(
    pipes: tuple[int, int, int, int], writes: list[bytes]
) -> None:
    requests_read, requests_write, answers_read, answers_write = pipes
    with anyio.fail_after(10):
        async with pipe_transport(requests_read, PipeWriter(answers_write)) as (_, outgoing):
            await outgoing.send(_notification(7))
            found = await _read_lines(answers_read, 1)
            assert found[0]["params"]["progress"] == 7  # type: ignore[index]
            os.close(requests_write)
            await outgoing.aclose()
    assert len(writes) == 1


async def test_on_exit_the_transport_closes_the_write_stream_and_what_was_sent_is_written(
    pipes: tuple[int, int, int, int],
) -> None:
    requests_read, requests_write, answers_read, answers_write = pipes
    with anyio.fail_after(10):
        async with pipe_transport(requests_read, PipeWriter(answers_write)) as (_, outgoing):
            async with anyio.create_task_group() as task_group:
                for number in range(3):
                    task_group.start_soon(outgoing.send, _notification(number))
            os.close(requests_write)
            # left without closing *outgoing*: the transport closes it, the writer ends
        found = await _read_lines(answers_read, 3)
    assert [line["params"]["progress"] for line in found] == [0, 1, 2]  # type: ignore[index]


async def test_requests_reach_the_server_parsed_and_a_bad_line_as_its_error(
    pipes: tuple[int, int, int, int],
) -> None:
    requests_read, requests_write, _, answers_write = pipes
    ping = {"jsonrpc": "2.0", "id": 1, "method": "ping"}
    os.write(requests_write, json.dumps(ping).encode() + b"\nnot json\n")
    os.close(requests_write)
    with anyio.fail_after(10):
        async with pipe_transport(requests_read, PipeWriter(answers_write)) as (incoming, outgoing):
            received = [item async for item in incoming]
            await outgoing.aclose()
    assert len(received) == 2
    first, second = received
    assert isinstance(first, SessionMessage)
    assert isinstance(first.message, types.JSONRPCRequest)
    assert first.message.method == "ping"
    assert isinstance(second, ValueError)
