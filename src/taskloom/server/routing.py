"""The Streamable HTTP routing header ``Mcp-Name`` on ``tasks/*`` requests (contract §3.10).

A client sending ``tasks/get``, ``tasks/update`` or ``tasks/cancel`` over HTTP names the
task in ``Mcp-Name`` as well as in ``params.taskId``, so that intermediaries can route on
the header. ``mcp==2.3.0`` checks the header only for
``tools/call``, ``prompts/get`` and ``resources/read``; this middleware checks it for the
task methods: a header that disagrees with ``params.taskId`` is ``-32020``
(HeaderMismatch; HTTP 400 on a 2026-07-28 request), and so is a missing one on
2026-07-28, where clients MUST send it. 2025-11-25 clients predate the header, so
there only a disagreeing header is refused. Not over HTTP (stdio), nothing is checked.
"""

from typing import Any, Final

from mcp.server.context import CallNext, HandlerResult, ServerRequestContext
from mcp.shared.inbound import MCP_NAME_HEADER, decode_header_value
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS

from taskloom.server.errors import task_id_header_mismatch

TASK_ID_METHODS: Final = frozenset({"tasks/get", "tasks/update", "tasks/cancel"})


async def check_task_routing(
    ctx: ServerRequestContext[Any, Any], call_next: CallNext
) -> HandlerResult:
    """Server middleware: refuse a ``tasks/*`` request whose ``Mcp-Name`` disagrees."""
    headers = getattr(ctx.request, "headers", None)
    if ctx.method in TASK_ID_METHODS and headers is not None:
        task_id = (ctx.params or {}).get("taskId")
        raw = headers.get(MCP_NAME_HEADER)
        modern = ctx.protocol_version not in HANDSHAKE_PROTOCOL_VERSIONS
        if (raw is not None or modern) and decode_header_value(raw) != task_id:
            raise task_id_header_mismatch(raw, task_id)
    return await call_next(ctx)
