"""Run one program to its end, its timeout or a cancel, and never leave it behind.

The program starts in a session of its own, so it and every process it starts form a
process group: on a timeout or a cancel the group gets SIGTERM, then SIGKILL after a grace
period; when the program exits, whatever it left running in its group is killed too. (A
process that leaves the group on purpose, e.g. with ``setsid``, is beyond reach.)
"""

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final

import anyio
from anyio.abc import ByteReceiveStream, Process

TAIL_BYTES: Final = 64 * 1024
"""Output kept per stream (the tail), whatever the program writes."""
MAX_LINE: Final = 2000
DRAIN_AFTER_EXIT_S: Final = 1.0
"""How long output is still read once the program exited (a process it started in a
session of its own may hold its pipes open; it is not waited for)."""


@dataclass(frozen=True)
class Finished:
    """How a program ended."""

    exit_code: int | None
    """``None`` if it never started or was killed on a timeout."""
    timed_out: bool
    duration_s: float
    stdout: str
    stderr: str
    error: str | None = None
    """Why it could not start (program or directory missing, not executable...)."""


async def run_program(
    argv: Sequence[str],
    *,
    cwd: str | None,
    env: Mapping[str, str],
    timeout_s: float,
    tail_lines: int,
    kill_grace_s: float,
) -> Finished:
    """Run *argv*; return its exit code and the last *tail_lines* lines of each stream.

    Cancelling the caller kills the program (after *kill_grace_s*) before the
    cancellation goes on.
    """
    started = time.monotonic()
    try:
        process = await anyio.open_process(
            list(argv),
            stdin=subprocess.DEVNULL,
            cwd=cwd,
            env={**os.environ, **env},
            start_new_session=True,
        )
    except OSError as error:
        return Finished(None, False, time.monotonic() - started, "", "", _why(error, argv, cwd))
    stdout, stderr = bytearray(), bytearray()
    try:
        with anyio.move_on_after(timeout_s) as deadline:
            async with anyio.create_task_group() as readers:
                for stream, into in ((process.stdout, stdout), (process.stderr, stderr)):
                    if stream is not None:
                        readers.start_soon(_drain, stream, into)
                await process.wait()
                _signal_group(process, signal.SIGKILL)  # what it left behind closes the pipes
                # ...unless it left its group: then its output is cut short, not waited for
                readers.cancel_scope.deadline = anyio.current_time() + DRAIN_AFTER_EXIT_S
    finally:
        with anyio.CancelScope(shield=True):
            await _stop(process, kill_grace_s)
    return Finished(
        exit_code=None if deadline.cancelled_caught else process.returncode,
        timed_out=deadline.cancelled_caught,
        duration_s=time.monotonic() - started,
        stdout=_tail(stdout, tail_lines),
        stderr=_tail(stderr, tail_lines),
    )


async def _drain(stream: ByteReceiveStream, into: bytearray) -> None:
    async for chunk in stream:
        into += chunk
        if len(into) > 2 * TAIL_BYTES:
            del into[:-TAIL_BYTES]


async def _stop(process: Process, grace_s: float) -> None:
    """Make sure the program and its group are gone, and reap it."""
    if process.returncode is None:
        _signal_group(process, signal.SIGTERM)
        with anyio.move_on_after(grace_s):
            await process.wait()
    _signal_group(process, signal.SIGKILL)
    await process.wait()
    await process.aclose()


def _signal_group(process: Process, signal_number: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal_number)


def _tail(data: bytearray, lines: int) -> str:
    if lines == 0:
        return ""
    kept = bytes(data[-TAIL_BYTES:]).decode("utf-8", errors="replace").splitlines()[-lines:]
    return "\n".join(line if len(line) <= MAX_LINE else line[:MAX_LINE] + "…" for line in kept)


def _why(error: OSError, argv: Sequence[str], cwd: str | None) -> str:
    if isinstance(error, FileNotFoundError) and cwd is not None and not os.path.isdir(cwd):
        return f"working directory {cwd!r} does not exist"
    if isinstance(error, FileNotFoundError):
        return f"program {argv[0]!r} was not found"
    return f"cannot start {argv[0]!r}: {error.strerror or error}"
