"""Standard input as lines that a cancel can interrupt.

The SDK reads stdin in a worker thread, which a cancel cannot stop: a server told to
stop (Ctrl-C, SIGTERM) would wait for the next line or for EOF. Here the event loop
waits for stdin to be readable (``anyio.wait_readable``) and then reads what is there,
so a cancel ends the wait at once. Only for pipes, sockets and terminals, which the
event loop can poll; a regular file (``< requests.jsonl``) or ``/dev/null`` keeps the
SDK's reader.
"""

import os
import selectors
import stat
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager

import anyio

_CHUNK = 65_536


def pollable(fd: int) -> bool:
    """True when the event loop can wait on *fd* (a pipe, socket or terminal; not a
    character device the kernel will not poll, like ``/dev/null``)."""
    try:
        mode = os.fstat(fd).st_mode
    except OSError:
        return False
    if not (stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode) or stat.S_ISCHR(mode)):
        return False
    with selectors.DefaultSelector() as probe:
        try:
            probe.register(fd, selectors.EVENT_READ)
        except OSError:  # EPERM: /dev/null and its like are always "ready"
            return False
    return True


async def lines(fd: int) -> AsyncIterator[str]:
    """Each line read from *fd* (with its newline, UTF-8), until EOF.

    A line's pieces are kept as read and joined once its newline comes, and only each
    new piece is searched for one: a line of *n* bytes costs O(*n*) however many reads
    it spans (searching and growing what was pending at every read cost O(*n*²): 0.6 s
    of the loop's CPU for a request of 16 MB)."""
    pieces: list[bytes] = []
    while True:
        await anyio.wait_readable(fd)
        chunk = os.read(fd, _CHUNK)
        if not chunk:
            if pieces:
                yield b"".join(pieces).decode("utf-8", errors="replace")
            return
        start = 0
        while (end := chunk.find(b"\n", start)) != -1:
            pieces.append(chunk[start:end])
            yield b"".join(pieces).decode("utf-8", errors="replace") + "\n"
            pieces = []
            start = end + 1
        if start < len(chunk):
            pieces.append(chunk[start:])


@contextmanager
def claimed_stdin() -> Iterator[int | None]:
    """A duplicate of fd 0 to read requests from, with fd 0 pointed at the null device
    meanwhile (so that node code reading stdin gets EOF, not the protocol's bytes);
    ``None`` when stdin cannot be polled. fd 0 is restored on exit."""
    if not pollable(0):
        yield None
        return
    requests = os.dup(0)
    null = os.open(os.devnull, os.O_RDONLY)
    try:
        os.dup2(null, 0)
        yield requests
    finally:
        os.dup2(requests, 0)
        os.close(null)
        os.close(requests)
