"""Small shared test utilities."""

import os
import socket
from collections.abc import Awaitable, Callable, Sequence
from typing import TypeVar

import anyio
import httpx2

_T = TypeVar("_T")


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
