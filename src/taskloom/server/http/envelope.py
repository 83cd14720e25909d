"""The JSON-RPC envelope of a 2025-11-25 POST body, checked before the SDK sees it.

``mcp==2.3.0``'s session transport (``StreamableHTTPServerTransport``) answers a body it
cannot read with pydantic's own text (model names, the library version's documentation
URL, the input echoed back) under ``-32602``, and takes a request whose ``id`` is
``null``, an object, an array, a fraction or a boolean for a notification (HTTP 202, no
answer ever). It offers no seam for either, so :func:`envelope_error` reads the body
first and names what is wrong in plain words, with the JSON-RPC code for it:

- not JSON: ``-32700`` Parse error;
- a JSON array (a batch: removed from MCP in 2025-06-18), not an object, ``jsonrpc``
  other than ``"2.0"``, ``method`` not a string, an ``id`` that is not a string or an
  integer, ``params`` not an object, a response without a ``result`` object or an
  ``error`` object: ``-32600`` Invalid Request.

Both with ``id: null`` (JSON-RPC 2.0 §5: the id could not be read) and HTTP 400. What
passes is what the SDK's own message model accepts, as the SDK would read it. The
2026-07-28 entry (``mcp.server._streamable_http_modern``) already answers these cases
with the same codes and its own plain messages, so only the 2025-11-25 path is checked.
"""

from collections import deque
from dataclasses import dataclass
from typing import Any

import pydantic_core
from mcp.shared.exceptions import MCPError
from mcp_types import jsonrpc_message_adapter
from pydantic import ValidationError
from starlette.types import Message, Receive, Scope, Send

from taskloom.server.errors import invalid_request, parse_error
from taskloom.server.http.responses import refusal


@dataclass(frozen=True)
class Checked:
    """A POST body that is one JSON-RPC message: a *receive* replaying it, and the id of
    the request it is (``None``: a notification or a response, or the client left)."""

    receive: Receive
    request_id: str | int | None


async def checked(scope: Scope, receive: Receive, send: Send) -> Checked | None:
    """Read a POST's body (already bounded, ``limits.BodyLimit``) and answer it with
    HTTP 400 and its JSON-RPC error if it is not one message (``None``); else a
    *receive* that replays it, with its request id."""
    received: deque[Message] = deque()
    body = b""
    while True:
        message = await receive()
        received.append(message)
        if message["type"] != "http.request":
            return Checked(_replay(received, receive), None)  # the client left: the SDK sees it
        body += message.get("body", b"")
        if not message.get("more_body", False):
            break
    error = envelope_error(body)
    if error is None:
        return Checked(_replay(received, receive), _request_id(body))
    await refusal(400, error.error.message, code=error.error.code)(scope, receive, send)
    return None


def _replay(received: deque[Message], receive: Receive) -> Receive:
    async def replay() -> Message:
        return received.popleft() if received else await receive()

    return replay


def _request_id(body: bytes) -> str | int | None:
    """The id of a request (a message with a ``method`` and an ``id``), else ``None``."""
    decoded = pydantic_core.from_json(body)  # valid: checked first
    if (
        isinstance(decoded, dict)
        and "method" in decoded
        and _is_request_id(decoded.get("id"), error=False)
    ):
        request_id: str | int = decoded["id"]
        return request_id
    return None


def envelope_error(body: bytes) -> MCPError | None:
    """Why *body* is not one JSON-RPC message of MCP (``None``: it is one)."""
    try:
        decoded = pydantic_core.from_json(body)
    except ValueError:
        return parse_error()
    problem = _problem(decoded)
    if problem is None:
        try:  # the SDK's own reading, so nothing it would refuse gets past
            jsonrpc_message_adapter.validate_python(decoded, by_name=False)
        except ValidationError:
            problem = "not a JSON-RPC request, notification or response"
    return None if problem is None else invalid_request(problem)


def _problem(message: Any) -> str | None:
    if isinstance(message, list):
        return "batches are not supported; send one JSON-RPC message per request"
    if not isinstance(message, dict):
        return "the body must be one JSON-RPC message (a JSON object)"
    if message.get("jsonrpc") != "2.0":
        return 'jsonrpc must be "2.0"'
    if "id" in message and not _is_request_id(message["id"], error="error" in message):
        return "id must be a string or an integer"
    if "method" in message:
        if not isinstance(message["method"], str):
            return "method must be a string"
        if "params" in message and not isinstance(message["params"], dict):
            return "params must be an object"
        return None
    if "id" not in message or ("result" not in message and "error" not in message):
        return "method is missing"
    if isinstance(message.get("result"), dict):
        return None
    error = message.get("error")
    if isinstance(error, dict) and _is_int(error.get("code")):
        return None if isinstance(error.get("message"), str) else "error.message must be a string"
    return "a response needs a result object or an error object with an integer code"


def _is_request_id(value: object, *, error: bool) -> bool:
    """A string or an integer (``null`` only on an error response)."""
    return isinstance(value, str) or _is_int(value) or (error and value is None)


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)
