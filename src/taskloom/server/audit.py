"""An audit trail of task access: who created, read or cancelled which task (contract §2.16).

One INFO line per ``tools/call`` that created a task and per ``tasks/get``,
``tasks/result`` and ``tasks/cancel`` (logger ``taskloom.audit``), naming the principal
(``local`` for the owner-less stdio user) and the outcome; a refused lookup is logged
too, so enumeration attempts show up. Never parameters or results, never tokens.
"""

import logging
from typing import Any, Final

from mcp.server.context import CallNext, HandlerResult, ServerMiddleware, ServerRequestContext
from mcp.shared.exceptions import MCPError

logger = logging.getLogger("taskloom.audit")
AUDITED: Final = frozenset({"tasks/get", "tasks/result", "tasks/cancel", "tasks/update"})


def audit_trail(owner: str | None) -> ServerMiddleware[Any]:
    """Server middleware logging task access by *owner*."""
    who = owner if owner is not None else "local"

    async def audit(ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> HandlerResult:
        task_id = (ctx.params or {}).get("taskId") if ctx.method in AUDITED else None
        try:
            result = await call_next(ctx)
        except MCPError as error:
            if task_id is not None:
                logger.info("%s %s %s: refused (%s)", who, ctx.method, task_id, error.error.code)
            raise
        if task_id is not None:
            logger.info("%s %s %s", who, ctx.method, task_id)
        elif ctx.method == "tools/call" and isinstance(result, dict):
            created = result.get("task") or {}
            if "taskId" in created:
                name = (ctx.params or {}).get("name")
                logger.info("%s created task %s (%s)", who, created["taskId"], name)
        return result

    return audit
