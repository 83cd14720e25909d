"""A connection's scopes (ADR 0028): what a read-only token may not do, and the tools it
sees.

Workflows outside ``workflows:`` scopes are not served to the connection at all
(``TaskServer`` leaves them out, so calling one is ``Unknown tool``, as if it did not
exist). A ``read`` scope keeps the reading tools and methods and refuses, with
``-32030`` Forbidden, every call that starts, cancels or answers a task; ``tools/list``
leaves those tools out.
"""

from dataclasses import dataclass
from typing import Any, Final

import mcp_types as types
from mcp.server.context import CallNext, HandlerResult, ServerMiddleware, ServerRequestContext
from mcp.shared.exceptions import MCPError

from taskloom.engine.scopes import READ, Scopes

FORBIDDEN: Final = -32030
"""This token's scopes do not allow the request (a taskloom code, like ``-32020``)."""
CHANGING_TOOLS: Final = frozenset({"task_cancel", "task_answer"})
CHANGING_METHODS: Final = frozenset({"tasks/cancel", "tasks/update"})


def forbidden(what: str) -> MCPError:
    """``-32030``: a read-only token asked to change something."""
    return MCPError(
        FORBIDDEN, f"Forbidden: this token is read-only (scope {READ!r}); {what}", {"scope": READ}
    )


@dataclass(frozen=True)
class ConnectionScopes:
    """A connection's *scopes* and the names of the *workflows* served to it, as one
    value: a read-only connection's refusals need both (a call of a workflow starts a
    task, so it is refused), and one without the other would let such calls pass."""

    scopes: Scopes
    workflows: frozenset[str]


def enforce_scopes(connection: ConnectionScopes) -> ServerMiddleware[Any]:
    """Refuse what a read-only *connection* may not do, and list only what it may call."""
    scopes = connection.scopes
    changing = CHANGING_TOOLS | connection.workflows

    async def scoped(ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
        if not scopes.read_only:
            return await call_next(ctx)
        if ctx.method in CHANGING_METHODS:
            raise forbidden(f"it cannot call {ctx.method}")
        name = (ctx.params or {}).get("name") if ctx.method == "tools/call" else None
        if isinstance(name, str) and name in changing:
            raise forbidden(f"it cannot call the tool {name!r}")
        result = await call_next(ctx)
        if ctx.method == "tools/list":
            listed = types.ListToolsResult.model_validate(result)
            kept = [tool for tool in listed.tools if tool.name not in changing]
            result = listed.model_copy(update={"tools": kept})
        return result

    return scoped
