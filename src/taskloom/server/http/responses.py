"""HTTP-level refusals, each with a JSON-RPC error body the SDK client can surface."""

from collections.abc import Mapping

from mcp_types import INVALID_REQUEST, ErrorData, JSONRPCError
from starlette.responses import Response


def refusal(
    status: int,
    message: str,
    *,
    code: int = INVALID_REQUEST,
    headers: Mapping[str, str] | None = None,
    data: object = None,
) -> Response:
    """A response with HTTP *status* and a JSON-RPC error (``id: null``) saying *message*
    (with *data*, if any)."""
    error = ErrorData(code=code, message=message)
    if data is not None:
        error = ErrorData(code=code, message=message, data=data)
    body = JSONRPCError(jsonrpc="2.0", id=None, error=error)
    return Response(
        body.model_dump_json(by_alias=True, exclude_unset=True),
        status_code=status,
        media_type="application/json",
        headers=dict(headers or {}),
    )
