"""HTTP 503 with ``Retry-After`` for a POST answered "task store unavailable" (ADR 0038).

The SDK's transports answer a POST with a stream (or a JSON body) whose status, 200, is
sent before the handler has run. :func:`store_outage_status` holds that status back
until the first bytes of the answer, at most *hold_s* (the store's wait and a margin):
if those bytes are the JSON-RPC error ``-32032`` (``errors.STORE_UNAVAILABLE``), the
POST is answered with HTTP 503, ``Retry-After`` and that error as a JSON body (which the
SDK's client surfaces as the request's error); anything else goes out as it came. An
answer slower than *hold_s* gets its status then, so a long stream is never held up.
"""

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
from starlette.datastructures import MutableHeaders
from starlette.types import Message, Send

from taskloom.server.errors import http_status


@asynccontextmanager
async def store_outage_status(send: Send, *, hold_s: float) -> AsyncIterator[Send]:
    """A *send* that turns a first answer of ``-32032`` into HTTP 503 (see the module)."""
    gate = _Gate(send)
    async with anyio.create_task_group() as task_group:
        task_group.start_soon(gate.release_after, hold_s)
        try:
            yield gate.send
        finally:
            await gate.release()
            task_group.cancel_scope.cancel()


class _Gate:
    def __init__(self, send: Send) -> None:
        self._send = send
        self._lock = anyio.Lock()
        self._start: Message | None = None
        self._decided = False
        self._swallow = False

    async def send(self, message: Message) -> None:
        async with self._lock:
            if self._swallow:
                return
            if self._decided:
                await self._send(message)
                return
            if message["type"] == "http.response.start":
                self._start = message
                return
            body = message.get("body", b"") if message["type"] == "http.response.body" else b""
            if not body and message.get("more_body", False):
                return  # nothing to judge yet
            self._decided = True
            refused = _store_unavailable(body)
            if refused is None or self._start is None:
                await self._release_start()
                await self._send(message)
                return
            status, headers, payload = refused
            self._swallow = True
            response_headers = MutableHeaders()
            response_headers["content-type"] = "application/json"
            response_headers["content-length"] = str(len(payload))
            for name, value in headers.items():
                response_headers[name] = value
            await self._send(
                {"type": "http.response.start", "status": status, "headers": response_headers.raw}
            )
            await self._send({"type": "http.response.body", "body": payload, "more_body": False})

    async def release_after(self, hold_s: float) -> None:
        await anyio.sleep(hold_s)
        await self.release()

    async def release(self) -> None:
        async with self._lock:
            if not self._decided:
                self._decided = True
                await self._release_start()

    async def _release_start(self) -> None:
        start, self._start = self._start, None
        if start is not None:
            await self._send(start)


def _store_unavailable(body: bytes) -> tuple[int, dict[str, str], bytes] | None:
    """The status, headers and JSON body for a first answer that is ``-32032``."""
    for payload in _messages(body):
        error = payload.get("error") if isinstance(payload, dict) else None
        if not isinstance(error, dict) or not isinstance(error.get("code"), int):
            continue
        found = http_status(error["code"], error.get("data"))
        if found is not None:
            status, headers = found
            return status, headers, json.dumps(payload, separators=(",", ":")).encode()
    return None


def _messages(body: bytes) -> list[Any]:
    """The JSON-RPC messages in *body*: a JSON document, or the ``data:`` lines of SSE."""
    text = body.decode("utf-8", errors="replace")
    candidates = [text.strip()]
    candidates += [
        line.removeprefix("data:").strip() for line in text.splitlines() if line.startswith("data:")
    ]
    found: list[Any] = []
    for candidate in candidates:
        if not candidate.startswith("{"):
            continue
        try:
            found.append(json.loads(candidate))
        except json.JSONDecodeError:
            continue
    return found
