"""The MCP server: a ready engine's workflows as tools, their runs as tasks.

One SDK ``Server`` is built per connection, holding that connection's state (its owner,
the followers of the tasks created on it, the watched outgoing stream); all of them
share the engine, which outlives every connection: a task keeps running when the
connection that created it closes, and a reconnecting client finds it by id.
"""

from collections.abc import Awaitable, Callable, Mapping
from functools import cache
from importlib.metadata import PackageNotFoundError, version
from typing import Any, TypeVar

import anyio
import mcp_types as types
from mcp.server.context import ServerMiddleware, ServerRequestContext
from mcp.server.lowlevel.server import Server
from mcp.server.stdio import stdio_server
from mcp.shared._stream_protocols import ReadStream, WriteStream  # the SDK's transport protocols
from mcp.shared.message import SessionMessage

from taskloom.engine.dag import Workflow
from taskloom.engine.errors import WorkflowDefinitionError
from taskloom.engine.manager import TaskManager
from taskloom.engine.runs import RunStore
from taskloom.engine.scopes import EVERYTHING, Scopes
from taskloom.server.calls import ToolCalls
from taskloom.server.fallback import DEFAULT_MAX_WAIT_S, FALLBACK_TOOL_NAMES, FallbackTools
from taskloom.server.generation import TASKS_EXTENSION, Generation, generation
from taskloom.server.history import HistoryTools
from taskloom.server.join_locks import JoinLocks
from taskloom.server.legacy import LegacyTasks
from taskloom.server.middleware import CREATE_TASK_METHOD, middleware_chain
from taskloom.server.modern import ModernTasks, TaskListen, UpdateTaskParams
from taskloom.server.plain import PlainCalls
from taskloom.server.push import Outbox, TaskFollowers
from taskloom.server.scopes import ConnectionScopes
from taskloom.server.settings import ServerSettings
from taskloom.server.stdin_lines import claimed_stdin, lines
from taskloom.server.stdio_transport import pipe_transport
from taskloom.server.stdout_lines import claimed_stdout

P = TypeVar("P")
Handler = Callable[[ServerRequestContext[Any, Any], P], Awaitable[dict[str, Any]]]


class TaskServer:
    """Serves MCP connections over one engine (its task manager and its workflows)."""

    def __init__(
        self,
        manager: TaskManager,
        workflows: Mapping[str, Workflow[Any]],
        settings: ServerSettings | None = None,
        *,
        runs: RunStore | None = None,
        after_host: str | None = None,
    ) -> None:
        """*after_host*: what becomes of a task if the host closes this server, said in
        each deferred answer (``None``: nothing; the server outlives its hosts)."""
        self.manager = manager
        self.after_host = after_host
        self._creating = JoinLocks()
        """By join key, held while a plain call finds or creates its task (two identical
        calls, one task; unrelated calls never wait for each other)."""
        self.runs = runs
        """Where the history tools read node attempts (no history tools without it)."""
        self.workflows = dict(workflows)
        self.settings = settings or ServerSettings()
        if self.settings.fallback_tools:
            clashes = sorted(FALLBACK_TOOL_NAMES.intersection(self.workflows))
            if clashes:
                raise WorkflowDefinitionError(
                    f"workflow {clashes[0]!r} has the name of a built-in tool; rename it"
                )

    async def serve(
        self,
        read_stream: ReadStream[SessionMessage | Exception],
        write_stream: WriteStream[SessionMessage],
        *,
        owner: str | None = None,
        scopes: Scopes = EVERYTHING,
    ) -> None:
        """Serve one connection until its read stream ends.

        *owner* is the principal the connection acts for: its tasks are created for it
        and only its tasks are visible (``None``: the local user of a stdio server).
        *scopes* narrow what it may see and do (``taskloom.server.scopes``).
        """
        outbox = Outbox(write_stream)
        async with anyio.create_task_group() as task_group:
            followers = TaskFollowers(self.manager, outbox, task_group)
            server = self._connection_server(followers, owner, scopes)
            await server.run(read_stream, outbox, server.create_initialization_options())
            task_group.cancel_scope.cancel()

    async def serve_stdio(self) -> None:
        """Serve the process's stdin and stdout until stdin closes, or a cancel (which
        ends a wait for the next request at once: see :mod:`taskloom.server.stdin_lines`).
        Answers are written from the event loop (:mod:`taskloom.server.stdout_lines`)."""
        with claimed_stdin() as requests, claimed_stdout() as answers:
            if requests is not None and answers is not None:
                async with pipe_transport(requests, answers) as (read_stream, write_stream):
                    await self.serve(read_stream, write_stream)
                return
            stdin = lines(requests) if requests is not None else None
            async with stdio_server(stdin=stdin, stdout=answers) as (read_stream, write_stream):  # type: ignore[arg-type]  # any async iterable of lines, any writer with write and flush
                await self.serve(read_stream, write_stream)

    def _connection_server(
        self, followers: TaskFollowers, owner: str | None, scopes: Scopes = EVERYTHING
    ) -> Server[Any]:
        workflows = {name: flow for name, flow in self.workflows.items() if scopes.sees(name)}
        recheck_s = self.settings.recheck_s
        history = (
            HistoryTools(self.manager, self.runs, owner=owner) if self.runs is not None else None
        )
        result_wait_s = self.settings.plain_wait_s or DEFAULT_MAX_WAIT_S
        fallback = (
            FallbackTools(
                self.manager,
                owner=owner,
                extra=history.specs() if history else None,
                max_wait_s=result_wait_s,
            )
            if self.settings.fallback_tools
            else None
        )
        plain = PlainCalls(
            self.manager,
            owner=owner,
            recheck_s=recheck_s,
            wait_s=self.settings.plain_wait_s,
            keepalive_s=self.settings.progress_keepalive_s,
            fallback_tools=self.settings.fallback_tools,
            max_unfinished=self.settings.max_unfinished_per_principal,
            result_wait_s=result_wait_s,
            after_host=self.after_host,
            creating=self._creating,
        )
        calls = ToolCalls(
            self.manager,
            workflows,
            followers,
            plain,
            owner=owner,
            fallback=fallback,
            max_unfinished=self.settings.max_unfinished_per_principal,
        )
        tasks = LegacyTasks(self.manager, owner=owner, recheck_s=recheck_s)
        modern = ModernTasks(self.manager, owner=owner)
        server: Server[Any] = Server(
            self.settings.name,
            version=_taskloom_version(),
            on_list_tools=calls.list_tools,
        )
        # Results are dicts, so the call handlers are registered directly rather than
        # through the typed ``on_call_tool``; a 2025-11-25 task-augmented call reaches
        # ``create_task`` (``middleware.route_task_creation``).
        server.add_request_handler("tools/call", types.CallToolRequestParams, calls.call_tool)
        server.add_request_handler(
            CREATE_TASK_METHOD, types.CallToolRequestParams, calls.create_task
        )
        server.add_request_handler(
            "tasks/get", types.GetTaskRequestParams, by_generation(tasks.get, modern.get)
        )
        server.add_request_handler("tasks/result", types.GetTaskPayloadRequestParams, tasks.result)
        server.add_request_handler("tasks/list", types.PaginatedRequestParams, tasks.list)
        server.add_request_handler(
            "tasks/cancel",
            types.CancelTaskRequestParams,
            by_generation(tasks.cancel, modern.cancel),
        )
        server.add_request_handler("tasks/update", UpdateTaskParams, modern.update)
        listen = TaskListen(self.manager, owner=owner)
        server.add_request_handler(
            "subscriptions/listen", types.SubscriptionsListenRequestParams, listen.listen
        )
        server.extensions[TASKS_EXTENSION] = {}  # server/discover (2026-07-28) only
        server.middleware += self.middleware(owner, scopes)
        return server

    def middleware(
        self, owner: str | None, scopes: Scopes = EVERYTHING
    ) -> list[ServerMiddleware[Any]]:
        """The middlewares of a connection acting for *owner* with *scopes*, outermost
        first (``middleware.middleware_chain``); the workflows *scopes* see are the ones
        served to it."""
        served = frozenset(name for name in self.workflows if scopes.sees(name))
        chain = middleware_chain(
            owner,
            max_result_bytes=self.settings.max_result_bytes,
            scoped=ConnectionScopes(scopes, served),
        )
        return [layer.middleware for layer in chain]

    def serves_tool(self, name: str) -> bool:
        """Whether *name* is one of this server's tools (a workflow or a built-in one)."""
        if name in self.workflows:
            return True
        return self.settings.fallback_tools and name in FALLBACK_TOOL_NAMES

    def connection_server(
        self, followers: TaskFollowers, owner: str | None, scopes: Scopes = EVERYTHING
    ) -> Server[Any]:
        """The SDK ``Server`` of one connection, for transports that run it themselves
        (Streamable HTTP: ``taskloom.server.http``)."""
        return self._connection_server(followers, owner, scopes)


def by_generation(legacy: Handler[P], modern: Handler[P]) -> Handler[P]:
    """One handler for a method both generations name (``tasks/get``, ``tasks/cancel``)."""

    async def handle(ctx: ServerRequestContext[Any, Any], params: P) -> dict[str, Any]:
        return await (modern if generation(ctx) is Generation.MODERN else legacy)(ctx, params)

    return handle


@cache
def _taskloom_version() -> str:
    """The installed version, read once per process (every connection builds a Server)."""
    try:
        return version("taskloom")
    except PackageNotFoundError:  # pragma: no cover  # running from a source tree
        return "unknown"
