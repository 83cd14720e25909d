"""A 2025-11-25 test client: raw requests (the SDK client cannot send task-augmented
calls) over a read stream tapped to record every inbound message in wire order."""

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from types import TracebackType
from typing import Any, Self

import anyio
from mcp.client.session import ClientSession, ElicitationFnT
from mcp.shared._stream_protocols import ReadStream, WriteStream
from mcp.shared.exceptions import MCPError
from mcp.shared.jsonrpc_dispatcher import JSONRPCDispatcher
from mcp.shared.message import SessionMessage
from mcp_types import ErrorData

LEGACY = "2025-11-25"
TASK_META = "taskloom/task"


def task_named(result: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """The task a plain call's *result* names, and the result without the naming (its
    last text line and ``_meta``); fails when the result does not name its task."""
    task = result["_meta"][TASK_META]
    *content, line = result["content"]
    assert line == {"type": "text", "text": f"(task {task['taskId']}: {task['status']})"}
    rest = {key: value for key, value in result.items() if key not in ("_meta", "resultType")}
    return task["taskId"], {**rest, "content": content}


class Tap:
    """A read stream that records each message it passes on (as wire dicts)."""

    def __init__(self, inner: ReadStream[SessionMessage | Exception]) -> None:
        self._inner = inner
        self.messages: list[dict[str, Any]] = []
        self._waiters: list[anyio.Event] = []

    async def receive(self) -> SessionMessage | Exception:
        item = await self._inner.receive()
        if isinstance(item, SessionMessage):
            self.messages.append(item.message.model_dump(by_alias=True, exclude_unset=True))
            for waiter in self._waiters:
                waiter.set()
            self._waiters.clear()
        return item

    async def until(self, predicate: Callable[[], bool], *, within_s: float = 10.0) -> None:
        """Wait (bounded) until *predicate* holds; re-checked on every inbound message."""
        with anyio.fail_after(within_s):
            while not predicate():
                waiter = anyio.Event()
                self._waiters.append(waiter)
                await waiter.wait()

    async def aclose(self) -> None:
        await self._inner.aclose()

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> SessionMessage | Exception:
        try:
            return await self.receive()
        except (anyio.EndOfStream, anyio.ClosedResourceError):
            raise StopAsyncIteration from None

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()


class LegacyClient:
    """Raw JSON-RPC over an initialized client session."""

    def __init__(self, dispatcher: JSONRPCDispatcher[Any], tap: Tap, initialize: dict[str, Any]):
        self.dispatcher = dispatcher
        self.tap = tap
        self.initialize_result = initialize

    async def request(self, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        with anyio.fail_after(20):
            return await self.dispatcher.send_raw_request(method, params)

    async def error(self, method: str, params: dict[str, Any] | None = None) -> ErrorData:
        """The error *method* answers with (fails the test if it succeeds)."""
        try:
            result = await self.request(method, params)
        except MCPError as error:
            return error.error
        raise AssertionError(f"{method} succeeded: {result}")

    async def call(
        self,
        name: str,
        arguments: dict[str, Any] | None = None,
        *,
        task: dict[str, Any] | None = None,
        progress_token: str | None = None,
    ) -> dict[str, Any]:
        return await self.request("tools/call", _call_params(name, arguments, task, progress_token))

    async def start(self, name: str, arguments: dict[str, Any], **task: Any) -> str:
        """Start *name* as a task; its id."""
        created = await self.call(name, arguments, task=task)
        task_id: str = created["task"]["taskId"]
        return task_id

    async def get(self, task_id: str) -> dict[str, Any]:
        return await self.request("tasks/get", {"taskId": task_id})

    async def result(self, task_id: str) -> dict[str, Any]:
        return await self.request("tasks/result", {"taskId": task_id})

    async def cancel(self, task_id: str) -> dict[str, Any]:
        return await self.request("tasks/cancel", {"taskId": task_id})

    async def list_tasks(self, cursor: str | None = None) -> dict[str, Any]:
        return await self.request("tasks/list", {} if cursor is None else {"cursor": cursor})

    def notifications(self, method: str) -> list[dict[str, Any]]:
        """The params of every *method* notification received so far, in order."""
        return [m.get("params", {}) for m in self.tap.messages if m.get("method") == method]

    def statuses(self, task_id: str) -> list[str]:
        return [
            params["status"]
            for params in self.notifications("notifications/tasks/status")
            if params.get("taskId") == task_id
        ]


def _call_params(
    name: str,
    arguments: dict[str, Any] | None,
    task: dict[str, Any] | None,
    progress_token: str | None,
) -> dict[str, Any]:
    params: dict[str, Any] = {"name": name, "arguments": arguments or {}}
    if task is not None:
        params["task"] = task
    if progress_token is not None:
        params["_meta"] = {"progressToken": progress_token}
    return params


@asynccontextmanager
async def open_client(
    read_stream: ReadStream[SessionMessage | Exception],
    write_stream: WriteStream[SessionMessage],
    protocol_version: str | None = None,
    *,
    elicitation_callback: ElicitationFnT | None = None,
    declare_tasks: bool = False,
) -> AsyncIterator[LegacyClient]:
    """An initialized client at *protocol_version* (2025-11-25 when ``None``), declaring
    form elicitation when given a callback that answers it, and ``capabilities.tasks``
    with *declare_tasks*."""
    tap = Tap(read_stream)
    dispatcher: JSONRPCDispatcher[Any] = JSONRPCDispatcher(tap, write_stream)
    capabilities: dict[str, Any] = {"elicitation": {"form": {}}} if elicitation_callback else {}
    if declare_tasks:
        capabilities["tasks"] = {"list": {}, "cancel": {}}
    async with ClientSession(dispatcher=dispatcher, elicitation_callback=elicitation_callback):
        with anyio.fail_after(10):
            initialize = await dispatcher.send_raw_request(
                "initialize",
                {
                    "protocolVersion": protocol_version or LEGACY,
                    "capabilities": capabilities,
                    "clientInfo": {"name": "taskloom-tests", "version": "0"},
                },
            )
            await dispatcher.notify("notifications/initialized", None)
        yield LegacyClient(dispatcher, tap, initialize)
