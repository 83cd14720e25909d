"""Every server middleware of a connection, in the order they wrap its handlers.

:func:`middleware_chain` is the order; it carries meaning, so it is declared here, by
name, and nowhere else (a test asserts it). Outermost first (after the SDK's own
OpenTelemetry middleware):

0. :func:`end_with_request`: a handler ends with the HTTP request it answers, when that
   request's bearer token is revoked or expires (``http.grant_watch``, ADR 0037): a
   2025-11-25 session runs its handlers apart from the requests.
1. :func:`audit_trail`: who created, read, listed, cancelled or answered which task, and
   what they were refused (it sees the final outcome, errors included).
2. :func:`error_boundary`: engine errors become their JSON-RPC errors
   (``errors.to_mcp_error``), params that do not validate ``-32602`` in plain words
   (``errors.invalid_params``), crashes ``-32603``; everything inside may raise.
3. :func:`check_generation`: a task method of another generation is ``-32601``,
   whatever its params (the SDK validates params before the handler runs, so without
   this a malformed ``tasks/list`` on 2026-07-28 answered ``-32602``); a 2026-07-28
   task method whose request did not declare the tasks extension is ``-32021``.
4. :func:`check_task_routing`: over HTTP, an ``Mcp-Name`` header that disagrees with
   ``params.taskId`` is ``-32020``. It comes after the generation: a request that
   cannot use task methods at all hears that first, not that its header is wrong.
5. :func:`limit_results` (with ``max_result_bytes``): a result over that many bytes of
   JSON is ``-32603``.
6. ``enforce_scopes`` (a connection whose scopes are restricted: ``scoped``, its scopes
   and the workflows served to it, ``server.scopes.ConnectionScopes``): inside the error
   boundary, so its ``-32030`` refusals pass as they are.
7. :func:`advertise_tasks`: ``capabilities.tasks`` in a 2025-11-25 ``InitializeResult``
   (``Server.get_capabilities`` never announces it).
8. :func:`route_task_creation` (innermost): the SDK sieves every 2025-11-25
   ``tools/call`` result through ``CallToolResult``, so a ``CreateTaskResult`` returned
   by the ``tools/call`` handler would become ``-32603``. A task-augmented 2025-11-25
   call goes on, once its params pass the SDK's own check of ``tools/call``, as
   :data:`CREATE_TASK_METHOD`: a method no spec names, whose handler returns the
   ``CreateTaskResult``, which the SDK sends as it is. The SDK's init gate and params
   validation run as for any request (ADR 0045; it replaced ADR 0007's bridge exception).
   A notification passes as it is.

``Server.middleware`` is marked provisional in the SDK; ``mcp`` is pinned exactly and
tests/server covers every seam.
"""

import logging
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any, Final

import pydantic_core
from mcp.server.context import CallNext, HandlerResult, ServerMiddleware, ServerRequestContext
from mcp.shared.exceptions import MCPError
from mcp.shared.inbound import MCP_NAME_HEADER, decode_header_value
from mcp_types import INTERNAL_ERROR, INVALID_REQUEST, METHOD_NOT_FOUND
from mcp_types.methods import validate_client_request
from pydantic import BaseModel, ValidationError

from taskloom.engine.errors import TaskloomError
from taskloom.server import audit
from taskloom.server.errors import (
    invalid_params,
    missing_tasks_extension,
    not_on_this_version,
    task_id_header_mismatch,
    to_mcp_error,
)
from taskloom.server.generation import (
    TASK_METHODS,
    Generation,
    declares_tasks_extension,
    generation,
    serves,
)
from taskloom.server.request_guard import guarded, with_request
from taskloom.server.scopes import ConnectionScopes, enforce_scopes
from taskloom.server.wire import tasks_capability

logger = logging.getLogger(__name__)
Context = ServerRequestContext[Any, Any]

TASK_ID_METHODS: Final = frozenset({"tasks/get", "tasks/update", "tasks/cancel"})
"""The methods whose ``Mcp-Name`` header names the task (contract §3.10)."""


CREATE_TASK_METHOD: Final = "taskloom/createTask"
"""Where :func:`route_task_creation` sends a 2025-11-25 task-augmented ``tools/call``:
no spec names it, so the SDK sends its handler's ``CreateTaskResult`` as it is. Not
callable from the wire (``-32601``)."""


@dataclass(frozen=True)
class Layer:
    """One middleware of the chain, by name."""

    name: str
    middleware: ServerMiddleware[Any]


def middleware_chain(
    owner: str | None,
    *,
    max_result_bytes: int | None,
    scoped: ConnectionScopes | None = None,
) -> tuple[Layer, ...]:
    """The middlewares of a connection acting for *owner*, outermost first (module
    docstring); *scoped*: its scopes and the workflows served to it (``None``: every
    scope)."""
    scope_check = None if scoped is None or scoped.scopes.unrestricted else enforce_scopes(scoped)
    declared: list[tuple[str, ServerMiddleware[Any] | None]] = [
        ("end_with_request", end_with_request),
        ("audit_trail", audit_trail(owner)),
        ("error_boundary", error_boundary),
        ("check_generation", check_generation),
        ("check_task_routing", check_task_routing),
        ("limit_results", None if max_result_bytes is None else limit_results(max_result_bytes)),
        ("enforce_scopes", scope_check),
        ("advertise_tasks", advertise_tasks),
        ("route_task_creation", route_task_creation),
    ]
    return tuple(Layer(name, layer) for name, layer in declared if layer is not None)


async def end_with_request(ctx: Context, call_next: CallNext) -> HandlerResult:
    """End the handler (a wait for a result, a listen) once the bearer token of its
    request ends; its answer, which no stream carries any more, is then an error. A
    request with no guard (stdio, an embedded server) passes as it is; every request
    over taskloom's HTTP has one, without a token too (ended when the server stops)."""
    if not guarded():
        return await call_next(ctx)
    with with_request():
        return await call_next(ctx)
    raise MCPError(INVALID_REQUEST, "Request ended: its bearer token is no longer valid")


def audit_trail(owner: str | None) -> ServerMiddleware[Any]:
    """The audit trail (``taskloom.server.audit``): one record per request that is a task
    action (create, read, list, cancel, answer), written when it ends, with its outcome
    (refusals included, so enumeration attempts show up). A notification is never one;
    no request opens an entry while the records are not logged (``audit.recording``)."""

    async def audit_request(ctx: Context, call_next: CallNext) -> HandlerResult:
        if ctx.request_id is None or not audit.recording():
            return await call_next(ctx)
        entry = audit.entry_for(owner, ctx.method, ctx.params)
        if entry is None:
            return await call_next(ctx)
        token = audit.opened(entry)
        try:
            result = await call_next(ctx)
        except MCPError as error:
            entry.failed(error.error.code)
            raise
        except BaseException:
            entry.outcome = "interrupted"
            raise
        else:
            if entry.action == "create":
                entry.task_id = entry.task_id or audit.created_task(result)
            return result
        finally:
            audit.closed(token)
            entry.write()

    return audit_request


async def error_boundary(ctx: Context, call_next: CallNext) -> HandlerResult:
    """Engine errors become their JSON-RPC errors, invalid params ``-32602`` naming the
    field and the problem (never pydantic's text), crashes ``-32603`` (details logged),
    so no request, however malformed, reaches the client as a traceback or ``code: 0``."""
    try:
        return await call_next(ctx)
    except MCPError as error:
        if (error.error.code, error.error.message) == (METHOD_NOT_FOUND, "Method not found"):
            raise MCPError(METHOD_NOT_FOUND, "Method not found") from None  # SDK: data=method
        raise
    except ValidationError as error:  # the params (or a value built from them)
        raise invalid_params(error) from error
    except TaskloomError as error:
        raise to_mcp_error(error) from error
    except Exception as error:
        logger.exception("%s failed", ctx.method)
        raise MCPError(INTERNAL_ERROR, "Internal error") from error


async def check_generation(ctx: Context, call_next: CallNext) -> HandlerResult:
    """A task method of another generation is ``-32601``, whatever its params; on
    2026-07-28 a task method needs the tasks extension declared (``-32021``)."""
    speaking = generation(ctx)
    if not serves(ctx.method, speaking):
        raise not_on_this_version(ctx.method, ctx.protocol_version)
    if (
        speaking is Generation.MODERN
        and ctx.method in TASK_METHODS
        and not declares_tasks_extension(ctx)
    ):
        raise missing_tasks_extension(ctx.method)
    return await call_next(ctx)


async def check_task_routing(ctx: Context, call_next: CallNext) -> HandlerResult:
    """Refuse a ``tasks/*`` request whose ``Mcp-Name`` header disagrees (HTTP only).

    ``mcp==2.3.0`` checks the header only for ``tools/call``, ``prompts/get`` and
    ``resources/read``. For ``tasks/get``, ``tasks/update`` and ``tasks/cancel``, a header
    that disagrees with ``params.taskId`` is ``-32020`` (HeaderMismatch; HTTP 400 on a
    2026-07-28 request), and so is a missing one on 2026-07-28, where clients MUST send
    it; older clients predate the header, so there only a disagreeing one is refused.
    Not over HTTP (stdio), nothing is checked; nor is a ``taskId`` that is not a string
    (its params are ``-32602``).
    """
    headers = getattr(ctx.request, "headers", None)
    task_id = (ctx.params or {}).get("taskId")
    if ctx.method in TASK_ID_METHODS and headers is not None and isinstance(task_id, str):
        raw = headers.get(MCP_NAME_HEADER)
        modern = generation(ctx) is Generation.MODERN
        if (raw is not None or modern) and decode_header_value(raw) != task_id:
            raise task_id_header_mismatch(raw, task_id)
    return await call_next(ctx)


def limit_results(max_bytes: int) -> ServerMiddleware[Any]:
    """A result whose JSON is over *max_bytes* becomes ``-32603`` saying so, with
    ``data: {"size", "limit"}``: the request was valid and the stored task is untouched,
    but this server will not send that much in one message."""

    async def result_limit(ctx: Context, call_next: CallNext) -> HandlerResult:
        result = await call_next(ctx)
        size = _json_size(result)
        if size > max_bytes:
            raise MCPError(
                INTERNAL_ERROR,
                f"Result too large: {size} bytes of JSON, over this server's limit of {max_bytes}",
                {"size": size, "limit": max_bytes},
            )
        return result

    return result_limit


def _json_size(result: object) -> int:
    if isinstance(result, BaseModel):
        return len(result.model_dump_json(by_alias=True, exclude_none=True))
    return len(pydantic_core.to_json(result, fallback=str))


async def advertise_tasks(ctx: Context, call_next: CallNext) -> HandlerResult:
    """Add ``capabilities.tasks`` to a 2025-11-25 ``InitializeResult``."""
    result = await call_next(ctx)
    if (
        ctx.method == "initialize"
        and isinstance(result, dict)
        and Generation.of(str(result.get("protocolVersion"))) is Generation.LEGACY
    ):
        capabilities = {**(result.get("capabilities") or {}), "tasks": tasks_capability()}
        result = {**result, "capabilities": capabilities}
    return result


def creates_task(ctx: Context) -> bool:
    """Whether *ctx* is a 2025-11-25 ``tools/call`` request that carries ``params.task``
    (decided on raw params: exactly when the typed ``params.task`` is not ``None`` once
    the params validate)."""
    params: Mapping[str, Any] = ctx.params or {}
    return (
        ctx.request_id is not None
        and ctx.method == "tools/call"
        and params.get("task") is not None
        and generation(ctx) is Generation.LEGACY
    )


async def route_task_creation(ctx: Context, call_next: CallNext) -> HandlerResult:
    """Send a 2025-11-25 ``tools/call`` that carries ``params.task`` on as
    :data:`CREATE_TASK_METHOD`, once its params pass the SDK's check of ``tools/call``
    (the SDK checks only the methods a spec names); a direct call of it is ``-32601``.
    A notification passes as it is (the SDK drops it: no handler)."""
    if ctx.request_id is None:
        return await call_next(ctx)
    if ctx.method == CREATE_TASK_METHOD:
        raise MCPError(METHOD_NOT_FOUND, "Method not found")
    if creates_task(ctx):
        validate_client_request("tools/call", ctx.protocol_version, ctx.params)
        return await call_next(replace(ctx, method=CREATE_TASK_METHOD))
    return await call_next(ctx)
