"""taskloom inside an existing ``MCPServer``: the :class:`DurableTasks` extension (ADR 0025).

``MCPServer("mine", extensions=[tasks], lifespan=tasks.lifespan)`` adds durable tasks to
a server of the SDK's: its own tools, resources and prompts are untouched; the given
workflows become tools whose calls run as durable tasks on both generations, with the
fallback and history tools. Nothing is re-implemented: every taskloom request is served
by the handlers and the middleware stack of a :class:`TaskServer` connection, the same
code ``taskloom serve`` runs. The SDK's seams used:

- ``Extension.methods``: ``tasks/get``, ``tasks/result``, ``tasks/list``,
  ``tasks/cancel``, ``tasks/update`` and ``taskloom/createTask`` (where taskloom's stack
  sends a 2025-11-25 task-augmented call, ADR 0045); ``Extension.intercept_tool_call``: a
  call of a taskloom tool (any other tool passes through to the host's own handler);
- one ``Server.middleware``, :meth:`DurableTasks.route` (installed by the lifespan, the
  only hook that is handed the server): it wraps taskloom's requests (and
  ``initialize``, whose 2025-11-25 result must announce ``capabilities.tasks``) in
  taskloom's middleware stack, adds taskloom's tools to ``tools/list``, and merges
  taskloom's task changes into the host's ``subscriptions/listen``
  (:mod:`taskloom.server.host_listen`).

Every call of a taskloom tool passes the host's ``tools/call`` handler, so the
interceptors of the extensions listed before this one (a policy, an audit, a rate limit)
see it and may refuse it, a task-augmented create included: ``taskloom/createTask`` is
served by the host's ``tools/call`` handler, called with the request's context as it was
(``ctx.method`` is ``tools/call``), and this extension's interceptor then creates the
task and returns its ``CreateTaskResult`` (ADR 0045). A ``Server.middleware`` the host
appends after the lifespan started runs inside :meth:`DurableTasks.route`, so it sees
such a create as ``taskloom/createTask`` with the ``tools/call`` params and that result;
one given to ``MCPServer`` (or appended before the lifespan) runs outside it and sees
``tools/call``.

The engine opens when the server's lifespan starts (once per ``run()``; over HTTP, with
the session manager) and closes when it ends: a run cut short resumes at the next start.

A connection's state (its task followers, its per-owner handlers) is kept per SDK
``Connection``, weakly. Its owner is the principal of the request's access token (the
SDK's auth), else ``None`` (the local user). The SDK offers no hook for "this response
has been written", so a 2025-11-25 follower starts reporting when the response has left
the middleware chain, just before the SDK writes it (notifications are best effort).
"""

from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any, Final
from weakref import WeakKeyDictionary

import anyio
import mcp_types as types
from anyio.abc import TaskGroup
from mcp.server.auth.middleware.auth_context import get_access_token
from mcp.server.auth.provider import principal_components
from mcp.server.context import CallNext, HandlerResult, ServerMiddleware, ServerRequestContext
from mcp.server.extension import Extension, MethodBinding
from mcp.server.lowlevel.server import RequestHandler, Server
from mcp.server.mcpserver import MCPServer
from mcp_types import RequestId
from pydantic import BaseModel

from taskloom.engine.dag import Workflow
from taskloom.engine.errors import WorkflowDefinitionError
from taskloom.server.app import TaskServer
from taskloom.server.fallback import FALLBACK_TOOL_NAMES
from taskloom.server.generation import TASKS_EXTENSION
from taskloom.server.host_listen import listen_on_host
from taskloom.server.middleware import CREATE_TASK_METHOD, creates_task
from taskloom.server.modern import UpdateTaskParams
from taskloom.server.push import TaskFollowers
from taskloom.server.settings import ServerSettings

Context = ServerRequestContext[Any, Any]

TASK_METHOD_PARAMS: Final[dict[str, type[BaseModel]]] = {
    CREATE_TASK_METHOD: types.CallToolRequestParams,
    "tasks/get": types.GetTaskRequestParams,
    "tasks/result": types.GetTaskPayloadRequestParams,
    "tasks/list": types.PaginatedRequestParams,
    "tasks/cancel": types.CancelTaskRequestParams,
    "tasks/update": UpdateTaskParams,
}
"""The task methods taskloom serves on the host (none of them is the host's), and the
method its stack sends a 2025-11-25 task-augmented call on as (``route_task_creation``)."""


class AnsweredSignal:
    """Tells a connection's followers when a request's response has left the handlers."""

    def __init__(self) -> None:
        self._awaited: dict[RequestId, list[Callable[[], None]]] = {}

    def on_response(self, request_id: RequestId, callback: Callable[[], None]) -> None:
        """Call *callback* once the response to *request_id* has left the handlers."""
        self._awaited.setdefault(request_id, []).append(callback)

    def answered(self, request_id: RequestId) -> None:
        """The response to *request_id* is on its way: signal it."""
        for callback in self._awaited.pop(request_id, ()):
            callback()


@dataclass
class _Connection:
    """taskloom's state for one SDK connection: its followers and per-owner handlers."""

    signal: AnsweredSignal
    followers: TaskFollowers
    servers: dict[str | None, Server[Any]] = field(default_factory=dict)


class _Running:
    """The open engine's server, the host's ``tools/call`` handler (its extensions'
    interceptors around it), and the connections it has seen."""

    def __init__(
        self, server: TaskServer, task_group: TaskGroup, host_tool_call: RequestHandler[Any, Any]
    ) -> None:
        self.server = server
        self.host_tool_call = host_tool_call
        self._task_group = task_group
        self._connections: WeakKeyDictionary[object, _Connection] = WeakKeyDictionary()
        self._stateless: _Connection | None = None

    def connection(self, ctx: Context) -> _Connection:
        key = getattr(ctx.session, "_connection", None)  # the SDK's per-connection object
        found = self._stateless if key is None else self._connections.get(key)
        if found is None:
            signal = AnsweredSignal()
            found = _Connection(
                signal, TaskFollowers(self.server.manager, signal, self._task_group)
            )
            if key is None:
                self._stateless = found
            else:
                self._connections[key] = found
        return found

    def handlers(self, ctx: Context) -> Server[Any]:
        """The taskloom handlers of *ctx*'s connection, acting for its owner."""
        connection = self.connection(ctx)
        owner = owner_of()
        server = connection.servers.get(owner)
        if server is None:
            server = self.server.connection_server(connection.followers, owner)
            connection.servers[owner] = server
        return server


ServeEngine = Callable[[], AbstractAsyncContextManager[TaskServer]]
"""Opens the engine and yields a :class:`TaskServer` over it (``bootstrap.durable_tasks``)."""


class DurableTasks(Extension):
    """Durable tasks for an existing ``MCPServer``: *workflows* become tools whose calls
    run as durable tasks on the engine *serve_engine* opens; pass :meth:`lifespan` as the
    server's ``lifespan``. Build one with ``taskloom.durable_tasks``."""

    identifier = TASKS_EXTENSION

    def __init__(
        self,
        workflows: Mapping[str, Workflow[Any]],
        settings: ServerSettings,
        serve_engine: ServeEngine,
    ) -> None:
        self._workflows = dict(workflows)
        self._settings = settings
        self._serve_engine = serve_engine
        self._running: _Running | None = None
        if settings.fallback_tools:
            clashes = sorted(FALLBACK_TOOL_NAMES.intersection(self._workflows))
            if clashes:
                raise WorkflowDefinitionError(
                    f"workflow {clashes[0]!r} has the name of a built-in tool; rename it"
                )

    @property
    def workflows(self) -> Mapping[str, Workflow[Any]]:
        """The workflows served as tools."""
        return self._workflows

    def serves_tool(self, name: str) -> bool:
        """Whether *name* is one of taskloom's tools here (a workflow or a built-in)."""
        if name in self._workflows:
            return True
        return self._settings.fallback_tools and name in FALLBACK_TOOL_NAMES

    @asynccontextmanager
    async def lifespan(self, app: MCPServer[Any]) -> AsyncIterator[None]:
        """Open the engine for *app*'s lifespan; close it when the lifespan ends.

        Raises:
            WorkflowDefinitionError: one of *app*'s own tools has the name of a taskloom
                tool (a workflow, or a fallback tool when they are on).

        To keep a lifespan of your own, enter this one inside it:
        ``async with tasks.lifespan(app): yield state``.
        """
        if self._running is not None:
            raise RuntimeError("this DurableTasks is already running for a server")
        clashes = sorted(
            tool.name for tool in await app.list_tools() if self.serves_tool(tool.name)
        )
        if clashes:  # the host's tool would never be called: taskloom's takes its calls
            raise WorkflowDefinitionError(
                f"tool {clashes[0]!r} is both a tool of this server and one of taskloom's; "
                "rename one of them"
            )
        if self.route not in app.middleware:
            app.middleware.append(self.route)
        # MCPServer folds every extension's interceptor into its tools/call handler;
        # the lifespan is the one hook handed the server, and it offers no public getter.
        tool_call = app._lowlevel_server.get_request_handler("tools/call")
        assert tool_call is not None  # MCPServer always serves tools/call
        async with self._serve_engine() as server, anyio.create_task_group() as task_group:
            self._running = _Running(server, task_group, tool_call.handler)
            try:
                yield None
            finally:
                self._running = None
                task_group.cancel_scope.cancel()

    def methods(self) -> Sequence[MethodBinding]:
        """The task methods, served by taskloom's handlers."""
        return [
            MethodBinding(
                method,
                params_type,
                self._create if method == CREATE_TASK_METHOD else partial(self._handle, method),
            )
            for method, params_type in TASK_METHOD_PARAMS.items()
        ]

    async def intercept_tool_call(
        self, params: types.CallToolRequestParams, ctx: Context, call_next: CallNext
    ) -> HandlerResult:
        """A call of a taskloom tool is taskloom's (a 2025-11-25 task-augmented one
        creates its task); any other is the host's."""
        if not self.serves_tool(params.name):
            return await call_next(ctx)
        return await self._handle(
            CREATE_TASK_METHOD if creates_task(ctx) else "tools/call", ctx, params
        )

    async def _create(self, ctx: Context, params: types.CallToolRequestParams) -> HandlerResult:
        """``taskloom/createTask``: the host's ``tools/call`` handler, so that every
        interceptor before this extension's sees the call as it came (``tools/call``)."""
        running = self._running
        if running is None:
            raise RuntimeError(
                "taskloom's engine is not open: pass lifespan=tasks.lifespan to MCPServer"
            )
        return await running.host_tool_call(replace(ctx, method="tools/call"), params)

    async def route(self, ctx: Context, call_next: CallNext) -> HandlerResult:
        """The ``Server.middleware``: taskloom's requests inside taskloom's stack."""
        running = self._running
        if running is not None and ctx.method == "subscriptions/listen":
            ours = _compose(running.server.middleware(owner_of()), partial(self._listen, running))
            return await listen_on_host(ctx, call_next, ours)
        if running is None or not self._is_ours(ctx):
            return await call_next(ctx)
        inner = (
            partial(self._list_tools, running, call_next)
            if ctx.method == "tools/list"
            else call_next
        )
        chain = _compose(running.server.middleware(owner_of()), inner)
        try:
            return await chain(ctx)
        finally:
            if ctx.request_id is not None and ctx.method == "tools/call":
                running.connection(ctx).signal.answered(ctx.request_id)

    def _is_ours(self, ctx: Context) -> bool:
        if ctx.method in TASK_METHOD_PARAMS or ctx.method in ("initialize", "tools/list"):
            return True
        name = (ctx.params or {}).get("name")
        return ctx.method == "tools/call" and isinstance(name, str) and self.serves_tool(name)

    async def _handle(self, method: str, ctx: Context, params: Any) -> HandlerResult:
        running = self._running
        if running is None:
            raise RuntimeError(
                "taskloom's engine is not open: pass lifespan=tasks.lifespan to MCPServer"
            )
        entry = running.handlers(ctx).get_request_handler(method)
        assert entry is not None  # TaskServer registers every method listed here
        return await entry.handler(ctx, params)

    async def _listen(self, running: _Running, ctx: Context) -> HandlerResult:
        """taskloom's ``subscriptions/listen`` handler (task changes), on raw params."""
        entry = running.handlers(ctx).get_request_handler("subscriptions/listen")
        assert entry is not None  # TaskServer registers it
        params = types.SubscriptionsListenRequestParams.model_validate(ctx.params or {})
        return await entry.handler(ctx, params)

    async def _list_tools(
        self, running: _Running, call_next: CallNext, ctx: Context
    ) -> HandlerResult:
        """The host's tools, then taskloom's."""
        result = await call_next(ctx)
        entry = running.handlers(ctx).get_request_handler("tools/list")
        assert entry is not None
        ours = await entry.handler(ctx, None)
        if not isinstance(result, dict) or not isinstance(ours, types.ListToolsResult):
            return result
        dumped = [
            tool.model_dump(by_alias=True, exclude_none=True, mode="json") for tool in ours.tools
        ]
        return {**result, "tools": [*result.get("tools", []), *dumped]}


def owner_of() -> str | None:
    """The principal of the current request's access token (``None``: no auth)."""
    token = get_access_token()
    if token is None:
        return None
    return " ".join(part or "-" for part in principal_components(token))


def _compose(stack: Sequence[ServerMiddleware[Any]], inner: CallNext) -> CallNext:
    """*inner* wrapped in *stack*, outermost first (as the SDK's runner does)."""
    call = inner
    for middleware in reversed(stack):
        call = partial(_apply, middleware, call)
    return call


async def _apply(
    middleware: ServerMiddleware[Any], call_next: CallNext, ctx: Context
) -> HandlerResult:
    return await middleware(ctx, call_next)
