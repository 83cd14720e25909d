"""Malformed requests over real HTTP, on both generations: the JSON-RPC code the spec
names for each, an answer for every request that had an id (never a silent 202), and a
message with no library internals (model names, versions, URLs) and no echoed input."""

import json
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx2
import pydantic
import pytest

from taskloom.server import TaskServer
from tests.server.client import LEGACY
from tests.server.http_support import (
    ANN,
    MODERN,
    bearer,
    initialize_body,
    modern_request,
    serving,
)

CANARY = "CANARY-7f3a\n"
"""Put in every malformed request: an answer must never repeat it."""
LEAKS = (
    "pydantic",
    "errors.pydantic.dev",
    "http",
    "validation error",
    "input_value",
    "input_type",
    "type=",
    "JSONRPC",
    "Params",
    "TaskMetadata",
    "Traceback",
    "CANARY",
    pydantic.VERSION,
)
JSON = {"Content-Type": "application/json"}
NULL = object()
"""The reply's ``id`` must be ``null``."""

Body = Callable[[dict[str, Any]], Any]
"""Builds a body from a well-formed request of the generation under test."""


def _with(**changes: Any) -> Body:
    return lambda good: {**good, **changes}


def _without(key: str) -> Body:
    return lambda good: {k: v for k, v in good.items() if k != key}


def _params(**params: Any) -> Body:
    return lambda good: {**good, "params": {**good["params"], **params}}


# (case, body, method for the headers, expected code, expected reply id: NULL or "request")
CASES: list[tuple[str, Body | bytes, str, int, object]] = [
    ("not JSON", b'{"jsonrpc": "2.0", "id": 1, "method": "CANARY-7f3a', "tools/list", -32700, NULL),
    ("empty body", b"", "tools/list", -32700, NULL),
    ("a number", b"42", "tools/list", -32600, NULL),
    ("a string", json.dumps(CANARY).encode(), "tools/list", -32600, NULL),
    ("a batch", lambda good: [good], "tools/list", -32600, NULL),
    ("an empty batch", b"[]", "tools/list", -32600, NULL),
    ("no jsonrpc", _without("jsonrpc"), "tools/list", -32600, NULL),
    ("jsonrpc 1.0", _with(jsonrpc="1.0"), "tools/list", -32600, NULL),
    ("jsonrpc a number", _with(jsonrpc=2.0), "tools/list", -32600, NULL),
    ("method a number", _with(method=5), "tools/list", -32600, NULL),
    ("method null", _with(method=None), "tools/list", -32600, NULL),
    ("no method", _without("method"), "tools/list", -32600, NULL),
    ("id null", _with(id=None), "tools/list", -32600, NULL),
    ("id an object", _with(id={"CANARY": 1}), "tools/list", -32600, NULL),
    ("id an array", _with(id=[CANARY]), "tools/list", -32600, NULL),
    ("id a fraction", _with(id=1.5), "tools/list", -32600, NULL),
    ("id a boolean", _with(id=True), "tools/list", -32600, NULL),
    ("params an array", _with(params=[CANARY]), "tools/list", -32600, NULL),
    ("params a string", _with(params=CANARY), "tools/list", -32600, NULL),
    ("unknown method", _with(method="nope/nope"), "nope/nope", -32601, "request"),
    ("tool name a number", _params(name=5), "tools/call", -32602, "request"),
    ("arguments a string", _params(name="countdown", arguments=CANARY), "tools/call", -32602,
     "request"),
    ("task a list", _params(name="countdown", arguments={}, task=[CANARY]), "tools/call", -32602,
     "request"),
    ("taskId a number", _params(taskId=5), "tasks/get", -32602, "request"),
    ("taskId an object", _params(taskId={"CANARY": CANARY}), "tasks/cancel", -32602, "request"),
    ("cursor a number", _params(cursor=7), "tasks/list", -32602, "request"),
]  # fmt: skip
MODERN_CODES = {"tool name a number": -32020}
"""2026-07-28 checks the ``Mcp-Name`` header first: ``5`` is not the header's ``countdown``."""
MODERN_ONLY_OK = {"tasks/list"}
"""Methods the 2026-07-28 generation does not have (they are -32601 there, tested apart)."""


@pytest.fixture
async def url(task_server: TaskServer) -> AsyncIterator[str]:
    async with serving(task_server) as endpoint:
        yield endpoint


@pytest.fixture
async def legacy_headers(url: str) -> dict[str, str]:
    """The headers of a 2025-11-25 session opened with ``initialize``."""
    async with httpx2.AsyncClient(timeout=10) as http:
        opened = await http.post(url, json=initialize_body(), headers=bearer(ANN))
        session = {"Mcp-Session-Id": opened.headers["mcp-session-id"]}
        headers = {**bearer(ANN), **session, "Mcp-Protocol-Version": LEGACY, **JSON}
        initialized = {"jsonrpc": "2.0", "method": "notifications/initialized"}
        assert (await http.post(url, json=initialized, headers=headers)).status_code == 202
    return headers


def _body(body: Body | bytes, good: dict[str, Any]) -> bytes:
    return body if isinstance(body, bytes) else json.dumps(body(good)).encode()


def _reply(response: httpx2.Response) -> dict[str, Any]:
    """The one JSON-RPC message answered, as JSON or as the one SSE event."""
    assert response.status_code != 202, "a request with an id got no answer"
    text = response.text
    if response.headers.get("content-type", "").startswith("text/event-stream"):
        [text] = [line[5:] for line in text.splitlines() if line.startswith("data:")]
    reply: dict[str, Any] = json.loads(text)
    return reply


def _check(reply: dict[str, Any], code: int, reply_id: object, request_id: object) -> None:
    assert reply["error"]["code"] == code, reply
    assert reply["id"] == (None if reply_id is NULL else request_id), reply
    message = reply["error"]["message"]
    for leak in LEAKS:
        assert leak not in json.dumps(reply), (leak, reply)
    assert message.isprintable()
    assert len(message) < 200


def _good(method: str) -> dict[str, Any]:
    params: dict[str, Any] = {"name": "countdown", "arguments": {"start": 1}}
    if method.startswith("tasks/"):
        params = {"taskId": "t"}
    return {"jsonrpc": "2.0", "id": 41, "method": method, "params": params}


@pytest.mark.parametrize(("case", "body", "method", "code", "reply_id"), CASES)
async def test_a_malformed_2025_11_25_request_gets_its_spec_code(
    url: str,
    legacy_headers: dict[str, str],
    case: str,
    body: Body | bytes,
    method: str,
    code: int,
    reply_id: object,
) -> None:
    async with httpx2.AsyncClient(timeout=10) as http:
        response = await http.post(url, content=_body(body, _good(method)), headers=legacy_headers)
    _check(_reply(response), code, reply_id, 41)
    if reply_id is NULL:
        assert response.status_code == 400


@pytest.mark.parametrize(("case", "body", "method", "code", "reply_id"), CASES)
async def test_a_malformed_2026_07_28_request_gets_its_spec_code(
    url: str, case: str, body: Body | bytes, method: str, code: int, reply_id: object
) -> None:
    if method in MODERN_ONLY_OK:
        pytest.skip(f"{method} does not exist on 2026-07-28")
    good = modern_request(method, _good(method)["params"], 41, tasks=True)
    headers = {**bearer(ANN), "Mcp-Protocol-Version": MODERN, "Mcp-Method": method, **JSON}
    if method.startswith("tasks/"):
        headers["Mcp-Name"] = "t"
    elif method == "tools/call":
        headers["Mcp-Name"] = "countdown"
    async with httpx2.AsyncClient(timeout=10) as http:
        response = await http.post(url, content=_body(body, good), headers=headers)
    _check(_reply(response), MODERN_CODES.get(case, code), reply_id, 41)
