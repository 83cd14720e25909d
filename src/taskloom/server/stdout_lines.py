"""Standard output written from the event loop's thread, without a worker-thread hop.

The SDK writes each message to stdout through ``anyio.wrap_file``: one hop to a worker
thread for the write and another for the flush, for every answer (about a tenth of a
trivial task's server CPU in the profile of issue 25). Here a message of at most
``PIPE_BUF`` bytes is written on the loop's thread once the pipe or socket has room for
it: a pipe that polls writable has a free page, and a write of at most ``PIPE_BUF``
bytes into it is atomic and does not block. A larger message is written the same way in
pieces of ``PIPE_BUF`` bytes, one after the other (this writer is the descriptor's only
one, so nothing comes between them), yielding to the loop every ``YIELD_EVERY`` bytes. A
pipe that is full (a client that stopped reading) is waited for without blocking the
loop, and a cancel (the server told to stop) ends that wait: a worker thread blocked in
a write could not be stopped. A stream socket polling writable may still lack room for
``PIPE_BUF`` bytes (a small ``SO_SNDBUF``, or TCP under memory pressure), so a socket is
sent to with ``MSG_DONTWAIT``: what it takes now, the rest once it has room (a stream has
no atomic writes to keep; the descriptor stays blocking for whoever shares it). Only for
pipes and sockets; a terminal or a file keeps the SDK's writer.

While serving, fd 1 points at stderr (as the SDK's own claim does), so a stray
``print`` in node code reaches the log, never the protocol.
"""

import os
import select
import socket
import stat
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Final

import anyio

ATOMIC_BYTES: Final = select.PIPE_BUF
YIELD_EVERY: Final = 65_536
"""How many bytes of a large message are written between two yields to the loop."""


class PipeWriter:
    """The write side of the stdio transport: ``write`` and ``flush`` as the SDK calls
    them (``stdout_writer`` writes one message and its newline, then flushes), and
    ``write_all`` for taskloom's own transport on pipes (:mod:`.stdio_transport`), which
    writes the messages waiting together."""

    def __init__(self, fd: int) -> None:
        self._fd = fd
        self._socket = _socket_on(fd)

    def close(self) -> None:
        """Release the socket object held for sends (the descriptor itself is the
        caller's)."""
        if self._socket is not None:
            self._socket.close()

    async def write(self, text: str) -> None:
        """Write *text* whole (UTF-8); the next message waits until it is out."""
        await self.write_all((text.encode("utf-8"),))

    async def flush(self) -> None:
        """Nothing to do: every write went straight to the descriptor."""

    async def write_all(self, messages: Sequence[bytes]) -> None:
        """Write *messages* (encoded, each with its newline) whole and in order, in as few
        writes as can each be atomic: runs of them up to ``PIPE_BUF`` bytes go out
        together, a larger one alone, in pieces of that size (as :meth:`write`)."""
        run: list[bytes] = []
        size = 0
        for data in messages:
            if size + len(data) > ATOMIC_BYTES and run:
                await self._write_atomic(b"".join(run))
                run, size = [], 0
            if len(data) > ATOMIC_BYTES:
                await self._write_pieces(data)
                continue
            run.append(data)
            size += len(data)
        if run:
            await self._write_atomic(b"".join(run))

    async def _write_pieces(self, data: bytes) -> None:
        """*data* (more than ``PIPE_BUF`` bytes) in atomic pieces, in order."""
        view = memoryview(data)
        pieces_between_yields = max(YIELD_EVERY // ATOMIC_BYTES, 1)
        for number, start in enumerate(range(0, len(view), ATOMIC_BYTES)):
            if number and number % pieces_between_yields == 0:
                await anyio.lowlevel.checkpoint()
            await self._write_atomic(view[start : start + ATOMIC_BYTES])

    async def _write_atomic(self, data: bytes | memoryview) -> None:
        """*data* (at most ``PIPE_BUF`` bytes) once the descriptor has room for it."""
        if self._socket is not None:
            await _send(self._socket, data)
            return
        if not _has_room(self._fd):
            await anyio.wait_writable(self._fd)
        _write_all(self._fd, data)


async def _send(sock: socket.socket, data: bytes | memoryview) -> None:
    """*data* to a socket without ever blocking the loop: a socket polling writable may
    not have room for it all."""
    view = memoryview(data)
    while view:
        try:
            view = view[sock.send(view, socket.MSG_DONTWAIT) :]
        except BlockingIOError:
            await anyio.wait_writable(sock)


def _socket_on(fd: int) -> socket.socket | None:
    """A socket object on a duplicate of *fd* if it is a socket (for ``send`` with
    ``MSG_DONTWAIT``), else ``None``."""
    if not stat.S_ISSOCK(os.fstat(fd).st_mode):
        return None
    duplicate = os.dup(fd)
    try:
        return socket.socket(fileno=duplicate)
    except OSError:  # a socket Python cannot wrap: written as a pipe is
        os.close(duplicate)
        return None


def _has_room(fd: int) -> bool:
    _, writable, _ = select.select([], [fd], [], 0)
    return bool(writable)


def _write_all(fd: int, data: bytes | memoryview) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


@contextmanager
def claimed_stdout() -> Iterator[PipeWriter | None]:
    """A writer on a duplicate of fd 1, with fd 1 pointed at stderr meanwhile (so node
    code that prints does not corrupt the protocol); ``None`` when stdout is neither a
    pipe nor a socket (the SDK's writer is used then). fd 1 is restored on exit."""
    if not _pipe_or_socket(1):
        yield None
        return
    answers = os.dup(1)
    try:
        os.dup2(2, 1)
    except OSError:  # no stderr to point fd 1 at: the SDK's writer, as before
        os.close(answers)
        yield None
        return
    writer = PipeWriter(answers)
    try:
        yield writer
    finally:
        writer.close()
        os.dup2(answers, 1)
        os.close(answers)


def _pipe_or_socket(fd: int) -> bool:
    try:
        mode = os.fstat(fd).st_mode
    except OSError:
        return False
    return stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode)


__all__ = ("PipeWriter", "claimed_stdout")
