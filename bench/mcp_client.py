"""The bench's MCP client: the Python SDK's client session over stdio, in either generation.

:func:`serving` starts a server process (its pid recorded, so it can be killed with
SIGKILL) and yields a :class:`BenchClient` talking to it over stdin/stdout. Requests go
through the SDK's ``JSONRPCDispatcher`` inside a ``ClientSession``, as a host would:
2025-11-25 after an ``initialize`` handshake with ``params.task`` on each call, 2026-07-28
with the per-request ``_meta`` envelope declaring the tasks extension.
"""

import os
import signal
import tempfile
from collections import defaultdict
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, TypeVar

import anyio
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.shared.jsonrpc_dispatcher import JSONRPCDispatcher

LEGACY: Final = "2025-11-25"
MODERN: Final = "2026-07-28"
EXTENSION: Final = "io.modelcontextprotocol/tasks"
TERMINAL: Final = frozenset({"completed", "failed", "cancelled"})
ENVELOPE: Final = {
    "io.modelcontextprotocol/protocolVersion": MODERN,
    "io.modelcontextprotocol/clientInfo": {"name": "taskloom-bench", "version": "0"},
    "io.modelcontextprotocol/clientCapabilities": {"extensions": {EXTENSION: {}}},
}
REQUEST_LIMIT_S: Final = 60.0
_T = TypeVar("_T")


@dataclass(frozen=True)
class ServerSpec:
    """How to start one server: its command line and extra environment."""

    label: str
    command: Sequence[str]
    env: dict[str, str] = field(default_factory=dict)


class BenchClient:
    """Task requests over one connection, in one generation."""

    def __init__(self, dispatcher: JSONRPCDispatcher[Any], generation: str, pid: int) -> None:
        self.dispatcher = dispatcher
        self.generation = generation
        self.pid = pid

    @property
    def modern(self) -> bool:
        return self.generation == MODERN

    async def request(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        if self.modern:
            params = {**params, "_meta": ENVELOPE}
        with anyio.fail_after(REQUEST_LIMIT_S):
            return await self.dispatcher.send_raw_request(method, params)

    async def start(self, name: str, arguments: dict[str, Any] | None = None) -> str:
        """Call *name* as a task; the task's id (the task is created when this returns)."""
        params: dict[str, Any] = {"name": name, "arguments": arguments or {}}
        if not self.modern:
            params["task"] = {}
        created = await self.request("tools/call", params)
        task: dict[str, Any] = created if self.modern else created["task"]
        if "taskId" not in task:
            raise RuntimeError(f"{name} did not create a task: {created}")
        return str(task["taskId"])

    async def get(self, task_id: str) -> dict[str, Any]:
        return await self.request("tasks/get", {"taskId": task_id})

    async def cancel(self, task_id: str) -> dict[str, Any]:
        return await self.request("tasks/cancel", {"taskId": task_id})

    async def list_page(self, cursor: str | None = None) -> dict[str, Any]:
        return await self.request("tasks/list", {} if cursor is None else {"cursor": cursor})

    async def until(self, task_id: str, statuses: frozenset[str] = TERMINAL) -> str:
        """Poll ``tasks/get`` back to back until the task shows one of *statuses*."""
        with anyio.fail_after(REQUEST_LIMIT_S):
            while True:
                status = str((await self.get(task_id))["status"])
                if status in statuses:
                    return status

    def kill(self) -> None:
        """SIGKILL the server process."""
        os.kill(self.pid, signal.SIGKILL)


@asynccontextmanager
async def serving(spec: ServerSpec, generation: str, errlog: Path) -> AsyncIterator[BenchClient]:
    """A client of a freshly started *spec* server, in *generation*."""
    with tempfile.TemporaryDirectory() as folder:
        pidfile = Path(folder) / "pid"
        params = StdioServerParameters(  # the shell writes its pid, then execs the server
            command="/bin/sh",
            args=["-c", 'echo $$ > "$0"; exec "$@"', str(pidfile), *spec.command],
            env=spec.env,
        )
        with errlog.open("a") as log:
            async with stdio_client(params, errlog=log) as (read_stream, write_stream):
                dispatcher: JSONRPCDispatcher[Any] = JSONRPCDispatcher(read_stream, write_stream)
                async with ClientSession(dispatcher=dispatcher):
                    if generation == LEGACY:
                        await _initialize(dispatcher)
                    else:
                        with anyio.fail_after(REQUEST_LIMIT_S):
                            discover = {"_meta": ENVELOPE}
                            await dispatcher.send_raw_request("server/discover", discover)
                    # the server answered, so the shell wrote the pid before exec'ing it
                    yield BenchClient(dispatcher, generation, int(pidfile.read_text()))


async def _initialize(dispatcher: JSONRPCDispatcher[Any]) -> None:
    with anyio.fail_after(REQUEST_LIMIT_S):
        answer = await dispatcher.send_raw_request(
            "initialize",
            {
                "protocolVersion": LEGACY,
                "capabilities": {},
                "clientInfo": {"name": "taskloom-bench", "version": "0"},
            },
        )
        if "tasks" not in answer.get("capabilities", {}):
            raise RuntimeError(f"the server does not announce tasks: {answer}")
        await dispatcher.notify("notifications/initialized", None)


def interleaved_rounds(
    servers: Mapping[str, Callable[[Path], ServerSpec]],
    generations: Sequence[str],
    rounds: int,
    measure: Callable[[ServerSpec, str, Path], _T],
    after_round: Callable[[], None] | None = None,
) -> dict[tuple[str, str], list[_T]]:
    """``measure(spec, generation, errlog)`` of every server on every generation once a
    round, each in a fresh state folder, rounds interleaved so that each sees the same
    load; by (server, generation), one outcome a round.

    Raises:
        RuntimeError: a server wrote a traceback to the shared error log.
    """
    found: dict[tuple[str, str], list[_T]] = defaultdict(list)
    with tempfile.TemporaryDirectory() as folder:
        base = Path(folder)
        errlog = base / "err.log"
        for number in range(rounds):
            for generation in generations:
                for name, spec in servers.items():
                    state = base / f"r{number}-{generation}-{name.replace(' ', '-')}"
                    state.mkdir()
                    found[name, generation].append(measure(spec(state), generation, errlog))
            if after_round is not None:
                after_round()
        log = errlog.read_text() if errlog.exists() else ""
    if "Traceback" in log:
        raise RuntimeError(f"a server wrote a traceback:\n{log[-3000:]}")
    return found
