"""Small shared test utilities."""

import json
import os
import signal
import socket
import tempfile
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Final, TypeVar

import anyio
import httpx2
from anyio.abc import Process
from anyio.streams.buffered import BufferedByteReceiveStream

_T = TypeVar("_T")

CHECKOUT: Final = Path(__file__).resolve().parents[1]
"""The checkout these tests belong to: its ``src`` is the code they test."""


def checkout_env(base: Mapping[str, str] | None = None, **extra: str) -> dict[str, str]:
    """The environment of a process the tests start: *base* (``os.environ`` by default)
    and *extra*, with this checkout's ``src`` and root first on ``PYTHONPATH``, before
    what was there. Its ``taskloom`` is then this checkout's whatever the interpreter
    has installed (the venv's editable install may be another checkout's: a git
    worktree's tests ran the main checkout's code), and ``tests.*`` modules import (the
    workflows ``TASKLOOM_WORKFLOWS`` names, a helper script's imports)."""
    env = {**(os.environ if base is None else base), **extra}
    paths = [str(CHECKOUT / "src"), str(CHECKOUT), env.get("PYTHONPATH", "")]
    env["PYTHONPATH"] = os.pathsep.join(path for path in paths if path)
    return env


async def all_at_once(
    calls: Sequence[Callable[[], Awaitable[_T]]], *, within_s: float = 30.0
) -> list[_T | Exception]:
    """Start every call of *calls* at once; what each returned, or raised, in their order
    (the whole bounded by *within_s*)."""
    got: list[_T | Exception] = [ValueError("no answer")] * len(calls)

    async def one(index: int) -> None:
        try:
            got[index] = await calls[index]()
        except Exception as error:  # noqa: BLE001  # the caller inspects it
            got[index] = error

    with anyio.fail_after(within_s):
        async with anyio.create_task_group() as group:
            for index in range(len(calls)):
                group.start_soon(one, index)
    return got


def initialize_line(client: str) -> str:
    """A 2025-11-25 ``initialize`` request (id 1) from *client*, as one stdio line."""
    params = {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": client, "version": "0"},
    }
    return json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": params}) + "\n"


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now (the OS chose it)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


async def eventually(
    condition: Callable[[], Awaitable[bool]], *, within_s: float = 10.0, every_s: float = 0.01
) -> None:
    """Wait until *condition* holds, re-checking every *every_s* seconds.

    Only for state that publishes no event (rows in a store written by another task or
    process); the wait is bounded by *within_s*.
    """
    with anyio.fail_after(within_s):
        while not await condition():  # noqa: ASYNC110  # polls a store, which has no event
            await anyio.sleep(every_s)


def leave_mark(marks: str, task_id: str, node: str, attempt: int) -> None:
    """Append ``<task id> <node> <attempt>`` to *marks* with one ``O_APPEND`` write.

    Once the call returns, the line is in the kernel: a SIGKILL of the process cannot
    take it back. Crash tests make it a node body's last action, so the file lists every
    body that ran to its end, attempt by attempt.
    """
    fd = os.open(marks, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, f"{task_id} {node} {attempt}\n".encode())
    finally:
        os.close(fd)


async def until_http_listening(url: str, *, within_s: float = 30.0) -> None:
    """Wait until a taskloom HTTP endpoint at *url* answers (401 to an anonymous POST: it
    serves, and it wants a token), bounded by *within_s*."""
    async with httpx2.AsyncClient(timeout=5) as http:

        async def listening() -> bool:
            try:
                return (await http.post(url, json={})).status_code == 401
            except httpx2.TransportError:
                return False

        await eventually(listening, within_s=within_s, every_s=0.05)


@dataclass
class HelperProcess:
    """A process of the tests (a worker, say) started by :func:`helper_process`."""

    process: Process
    stderr: IO[bytes] = field(repr=False)
    """The temporary file its stderr goes to."""
    ready: str = ""
    """The rest of its ``ready`` line (an application name, say)."""
    stopped: bool = False
    """Whether it was stopped by SIGTERM on leaving (it had not ended before)."""
    errors: str = ""
    """Its stderr, once it has ended."""

    async def read_errors(self) -> str:
        """Its stderr so far (all of it once it has ended)."""
        stderr = anyio.wrap_file(self.stderr)
        await stderr.seek(0)
        return (await stderr.read()).decode(errors="replace")


@asynccontextmanager
async def helper_process(
    command: Sequence[str],
    *,
    cwd: str | Path | None = None,
    env: Mapping[str, str] | None = None,
    ready_s: float = 30.0,
    stop_s: float = 30.0,
) -> AsyncIterator[HelperProcess]:
    """*command* as a process of its own, once the first line of its stdout starts with
    ``ready``: read without blocking the event loop, bounded by *ready_s*, else the test
    fails with its stderr (which goes to a temporary file: no pipe fills up meanwhile).

    On leaving, unless it has ended already (the test killed it, say), it gets SIGTERM
    and must stop cleanly (exit status 0, as ``taskloom worker`` does) within *stop_s*;
    else it is killed and the test fails, with its stderr. It runs this checkout's code
    (*env*, by default ``os.environ``, goes through :func:`checkout_env`).
    """
    name = " ".join(command[:3])
    overdue = False
    with tempfile.TemporaryFile() as stderr:
        env = checkout_env(env)
        process = await anyio.open_process(command, cwd=cwd, env=env, stderr=stderr)
        async with process:
            child = HelperProcess(process, stderr)
            try:
                child.ready = await _ready(child, name, ready_s)
                yield child
            finally:
                with anyio.CancelScope(shield=True):
                    if process.returncode is None:
                        process.send_signal(signal.SIGTERM)
                        child.stopped = True
                    with anyio.move_on_after(stop_s):
                        await process.wait()
                    if process.returncode is None:  # it did not stop: no wait without end
                        overdue = True
                        process.kill()
                        await process.wait()
                    child.errors = await child.read_errors()
    if child.stopped and process.returncode != 0:
        how = f"still ran {stop_s} s after it" if overdue else f"exit status {process.returncode}"
        raise AssertionError(
            f"{name} did not stop cleanly on SIGTERM ({how}); its stderr:\n{child.errors}"
        )


async def _ready(child: HelperProcess, name: str, within_s: float) -> str:
    """The rest of *child*'s first line of stdout, which must start with ``ready``."""
    assert child.process.stdout is not None
    line = b""
    with anyio.move_on_after(within_s):
        try:
            stdout = BufferedByteReceiveStream(child.process.stdout)
            line = await stdout.receive_until(b"\n", 1000)
        except (anyio.IncompleteRead, anyio.DelimiterNotFound):  # it ended, or said more
            pass
    word, _, rest = line.decode(errors="replace").partition(" ")
    if word == "ready":
        return rest.strip()
    child.process.kill()
    await child.process.wait()
    raise AssertionError(
        f"{name} did not say ready within {within_s} s (it said {line!r}, exit status"
        f" {child.process.returncode}); its stderr:\n{await child.read_errors()}"
    )
