"""Which protocol generation serves which ``tasks/*`` method, checked before the params.

``tasks/result`` and ``tasks/list`` exist only on 2025-11-25 (2026-07-28 removed them:
``-32601``, MUST), ``tasks/update`` only on 2026-07-28, and ``tasks/get`` and
``tasks/cancel`` on both. The handlers check this too, but the SDK validates a request's
params before its handler runs, so without this middleware a malformed ``tasks/list``
on 2026-07-28 answered ``-32602``: a client could not tell a removed method from its
own mistake.
"""

from typing import Any, Final

from mcp.server.context import CallNext, HandlerResult, ServerRequestContext

from taskloom.server.errors import not_on_this_version
from taskloom.server.protocol import LEGACY_VERSION, is_modern

LEGACY_ONLY: Final = frozenset({"tasks/result", "tasks/list"})
MODERN_ONLY: Final = frozenset({"tasks/update"})
BOTH: Final = frozenset({"tasks/get", "tasks/cancel"})
TASK_METHODS: Final = LEGACY_ONLY | MODERN_ONLY | BOTH


async def check_generation(
    ctx: ServerRequestContext[Any, Any], call_next: CallNext
) -> HandlerResult:
    """Server middleware: a task method of another generation is ``-32601``, whatever
    its params."""
    legacy = ctx.protocol_version == LEGACY_VERSION
    modern = is_modern(ctx)
    served = (
        (ctx.method in LEGACY_ONLY and legacy)
        or (ctx.method in MODERN_ONLY and modern)
        or (ctx.method in BOTH and (legacy or modern))
        or ctx.method not in TASK_METHODS
    )
    if not served:
        raise not_on_this_version(ctx.method, ctx.protocol_version)
    return await call_next(ctx)
