"""The stdio answer writer: a full pipe makes it wait without blocking the event loop,
and messages of any size arrive whole and in order."""

import contextlib
import os
import select
import socket
import threading
from collections.abc import Iterator

import anyio
import pytest

from taskloom.server.stdout_lines import ATOMIC_BYTES, PipeWriter


@pytest.fixture
def pipe() -> Iterator[tuple[int, int]]:
    read_end, write_end = os.pipe()
    yield read_end, write_end
    os.close(read_end)
    os.close(write_end)


def _fill(fd: int) -> int:
    """Fill the pipe until it has no room left; the bytes written."""
    os.set_blocking(fd, False)
    written = 0
    try:
        while True:
            written += os.write(fd, b"f" * 4096)
    except BlockingIOError:
        pass
    os.set_blocking(fd, True)
    return written


def _read_exactly(fd: int, count: int) -> bytes:
    data = b""
    while len(data) < count:
        data += os.read(fd, count - len(data))
    return data


async def test_a_full_pipe_waits_without_blocking_the_loop(pipe: tuple[int, int]) -> None:
    read_end, write_end = pipe
    filler = _fill(write_end)
    writer = PipeWriter(write_end)
    written = anyio.Event()
    ticks = 0

    async def write() -> None:
        await writer.write("answer\n")
        await writer.flush()
        written.set()

    with anyio.fail_after(10):
        async with anyio.create_task_group() as task_group:
            task_group.start_soon(write)
            while ticks < 20:  # the loop keeps running while the pipe is full
                await anyio.sleep(0.001)
                ticks += 1
            assert not written.is_set()
            await anyio.to_thread.run_sync(_read_exactly, read_end, filler)
            await written.wait()
    assert _read_exactly(read_end, 7) == b"answer\n"


async def test_messages_of_any_size_arrive_whole_and_in_order(pipe: tuple[int, int]) -> None:
    read_end, write_end = pipe
    writer = PipeWriter(write_end)
    messages = ["a" * 10 + "\n", "é" * ATOMIC_BYTES + "\n", "b" * 300_000 + "\n", "c\n"]
    expected = "".join(messages).encode("utf-8")
    received: list[bytes] = []

    def read_all() -> None:
        received.append(_read_exactly(read_end, len(expected)))

    with anyio.fail_after(10):
        async with anyio.create_task_group() as task_group:
            task_group.start_soon(anyio.to_thread.run_sync, read_all)
            for message in messages:
                await writer.write(message)
    assert received == [expected]


async def test_a_cancel_ends_a_large_write_to_a_reader_that_stopped(
    pipe: tuple[int, int],
) -> None:
    """A server told to stop while a large answer waits for a client that stopped
    reading stops at once: the write waits on the loop, where a cancel reaches it (a
    worker thread blocked in ``write`` could not be stopped). The pipe is drained once
    the write has stopped, or after 5 s, so that a write the cancel cannot reach ends all
    the same, late."""
    read_end, write_end = pipe
    _fill(write_end)
    writer = PipeWriter(write_end)
    stopped_writing = threading.Event()

    def drain() -> None:
        stopped_writing.wait(5)
        os.set_blocking(read_end, False)
        with contextlib.suppress(BlockingIOError):
            while os.read(read_end, 1 << 20):
                pass

    with anyio.fail_after(30):
        async with anyio.create_task_group() as task_group:
            task_group.start_soon(anyio.to_thread.run_sync, drain)
            started = anyio.current_time()
            with anyio.move_on_after(0.2):
                await writer.write_all([b"x" * (ATOMIC_BYTES * 8) + b"\n"])
            stopped = anyio.current_time() - started
            stopped_writing.set()
    assert stopped < 2


@pytest.fixture
def stream_socket() -> Iterator[tuple[socket.socket, socket.socket]]:
    """(our end, the client's end) of a stream socket, as a Node client's stdio is."""
    ours, client = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    yield ours, client
    ours.close()
    client.close()


def _recv_exactly(sock: socket.socket, count: int) -> bytes:
    data = b""
    while len(data) < count:
        chunk = sock.recv(count - len(data))
        assert chunk, "the answers ended early"
        data += chunk
    return data


async def test_messages_of_any_size_arrive_whole_and_in_order_over_a_socket(
    stream_socket: tuple[socket.socket, socket.socket],
) -> None:
    ours, client = stream_socket
    ours.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 1)  # sends often take part
    writer = PipeWriter(ours.fileno())
    messages = [b"a" * 10 + b"\n", b"b" * 300_000 + b"\n", b"c\n", b"d" * 5_000 + b"\n"]
    expected = b"".join(messages)
    received: list[bytes] = []

    client.settimeout(10)  # a send that blocks the loop cannot stop the reader
    reader = threading.Thread(
        target=lambda: received.append(_recv_exactly(client, len(expected))), daemon=True
    )
    reader.start()  # before the writes: one blocking the loop would keep it from starting
    with anyio.fail_after(10):
        await writer.write_all(messages[:2])
        await writer.write_all(messages[2:])
    reader.join(10)
    writer.close()
    assert received == [expected]


async def test_a_socket_that_polls_writable_without_room_does_not_block_the_loop(
    stream_socket: tuple[socket.socket, socket.socket],
) -> None:
    """A stream socket can poll writable and still lack room for a ``PIPE_BUF`` piece:
    with the smallest ``SO_SNDBUF``, filled by small sends and read only until it polls
    writable, a blocking send of 4096 bytes blocks (Linux 6.18). The write waits on the
    loop all the same, where a cancel reaches it. The client drains once the write has
    stopped, or after 5 s, so that a send blocking the loop ends all the same, late."""
    ours, client = stream_socket
    ours.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 1)
    with contextlib.suppress(BlockingIOError):
        while True:
            ours.send(b"f" * 100, socket.MSG_DONTWAIT)
    client.setblocking(False)
    while not select.select([], [ours], [], 0)[1]:
        with contextlib.suppress(BlockingIOError):
            client.recv(64)
    writer = PipeWriter(ours.fileno())
    stopped_writing = threading.Event()

    def drain() -> None:
        stopped_writing.wait(5)
        with contextlib.suppress(BlockingIOError):
            while client.recv(1 << 20):
                pass

    drainer = threading.Thread(target=drain, daemon=True)
    drainer.start()  # before the write: a send blocking the loop would keep it from starting
    started = anyio.current_time()
    with anyio.move_on_after(0.2):
        await writer.write_all([b"x" * (ATOMIC_BYTES * 4) + b"\n"])
    stopped = anyio.current_time() - started
    stopped_writing.set()
    drainer.join(10)
    writer.close()
    assert stopped < 2
