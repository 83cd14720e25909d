"""A 2026-07-28 test client: raw JSON-RPC, each request carrying its own ``_meta``
envelope (protocol version, client info, client capabilities), no ``initialize``."""

from collections.abc import AsyncIterator, Collection
from contextlib import asynccontextmanager
from typing import Any

import anyio
from mcp.client.session import ClientSession
from mcp.shared._stream_protocols import ReadStream, WriteStream
from mcp.shared.exceptions import MCPError
from mcp.shared.jsonrpc_dispatcher import JSONRPCDispatcher
from mcp.shared.message import SessionMessage
from mcp_types import ErrorData

from tests.helpers import eventually
from tests.server.client import Tap

MODERN = "2026-07-28"
EXT = "io.modelcontextprotocol/tasks"
TERMINAL = frozenset({"completed", "failed", "cancelled"})


def envelope(*, declare: bool) -> dict[str, Any]:
    """The per-request ``_meta`` of a client that does (or does not) declare the extension."""
    capabilities: dict[str, Any] = {"extensions": {EXT: {}}} if declare else {}
    return {
        "io.modelcontextprotocol/protocolVersion": MODERN,
        "io.modelcontextprotocol/clientInfo": {"name": "taskloom-tests", "version": "0"},
        "io.modelcontextprotocol/clientCapabilities": capabilities,
    }


class ModernClient:
    """Raw 2026-07-28 requests; *declare* is the default for the extension declaration."""

    def __init__(self, dispatcher: JSONRPCDispatcher[Any], tap: Tap, *, declare: bool) -> None:
        self.dispatcher = dispatcher
        self.tap = tap
        self.declare = declare

    def notifications(self, method: str) -> list[dict[str, Any]]:
        """The params of every *method* notification received so far, in order."""
        return [m.get("params", {}) for m in self.tap.messages if m.get("method") == method]

    async def request(
        self, method: str, params: dict[str, Any] | None = None, *, declare: bool | None = None
    ) -> dict[str, Any]:
        body = dict(params or {})
        meta = envelope(declare=self.declare if declare is None else declare)
        body["_meta"] = {**body.get("_meta", {}), **meta}
        with anyio.fail_after(20):
            return await self.dispatcher.send_raw_request(method, body)

    async def error(
        self, method: str, params: dict[str, Any] | None = None, *, declare: bool | None = None
    ) -> ErrorData:
        """The error *method* answers with (fails the test if it succeeds)."""
        try:
            result = await self.request(method, params, declare=declare)
        except MCPError as error:
            return error.error
        raise AssertionError(f"{method} succeeded: {result}")

    async def call(
        self, name: str, arguments: dict[str, Any] | None = None, **options: Any
    ) -> dict[str, Any]:
        return await self.request(
            "tools/call", {"name": name, "arguments": arguments or {}}, **options
        )

    async def start(self, name: str, arguments: dict[str, Any] | None = None) -> str:
        """Call *name* with the extension declared; the created task's id."""
        created = await self.call(name, arguments, declare=True)
        assert created["resultType"] == "task", created
        task_id: str = created["taskId"]
        return task_id

    async def get(self, task_id: str) -> dict[str, Any]:
        return await self.request("tasks/get", {"taskId": task_id})

    async def update(self, task_id: str, responses: dict[str, Any]) -> dict[str, Any]:
        return await self.request("tasks/update", {"taskId": task_id, "inputResponses": responses})

    async def cancel(self, task_id: str) -> dict[str, Any]:
        return await self.request("tasks/cancel", {"taskId": task_id})

    async def until(self, task_id: str, statuses: Collection[str] = TERMINAL) -> dict[str, Any]:
        """Poll ``tasks/get`` (bounded) until the task shows one of *statuses*; that answer."""
        latest: dict[str, Any] = {}

        async def reached() -> bool:
            nonlocal latest
            latest = await self.get(task_id)
            return latest["status"] in statuses

        await eventually(reached, every_s=0.02)
        return latest


@asynccontextmanager
async def open_modern_client(
    read_stream: ReadStream[SessionMessage | Exception],
    write_stream: WriteStream[SessionMessage],
    *,
    declare: bool = True,
) -> AsyncIterator[ModernClient]:
    """A 2026-07-28 client over a stream pair (the session only runs the dispatcher)."""
    tap = Tap(read_stream)
    dispatcher: JSONRPCDispatcher[Any] = JSONRPCDispatcher(tap, write_stream)
    async with ClientSession(dispatcher=dispatcher):
        yield ModernClient(dispatcher, tap, declare=declare)
