"""The largest result a request may answer with (``ServerSettings.max_result_bytes``).

A result whose JSON is larger becomes ``-32603`` saying so, with ``data: {"size",
"limit"}``: the request was valid and the stored task is untouched, but this server
will not send that much in one message.
"""

from typing import Any

import pydantic_core
from mcp.server.context import CallNext, HandlerResult, ServerMiddleware, ServerRequestContext
from mcp.shared.exceptions import MCPError
from mcp_types import INTERNAL_ERROR
from pydantic import BaseModel


def limit_results(max_bytes: int) -> ServerMiddleware[Any]:
    """Server middleware refusing results over *max_bytes* of JSON."""

    async def result_limit(
        ctx: ServerRequestContext[Any, Any], call_next: CallNext
    ) -> HandlerResult:
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
