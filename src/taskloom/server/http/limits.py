"""Per-principal request rate (a token bucket each) and request body size."""

import math
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from starlette.datastructures import Headers
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from taskloom.server.http.responses import refusal


@dataclass
class _Bucket:
    tokens: float
    updated: float


class RateLimiter:
    """At most *per_minute* requests a minute per key, bursting up to as many."""

    def __init__(self, per_minute: float, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.per_minute = per_minute
        self._rate = per_minute / 60.0
        self._capacity = max(per_minute, 1.0)
        self._clock = clock
        self._buckets: dict[str | None, _Bucket] = {}

    def admit(self, key: str | None) -> float:
        """Take one request of *key*'s allowance: 0 if admitted, else the seconds until
        its next request would be."""
        bucket = self._refilled(key)
        if bucket.tokens >= 1:
            bucket.tokens -= 1
            return 0.0
        return (1 - bucket.tokens) / self._rate

    def wait_s(self, key: str | None) -> float:
        """The seconds until *key* may make a request (0: now), taking nothing."""
        bucket = self._refilled(key)
        return 0.0 if bucket.tokens >= 1 else (1 - bucket.tokens) / self._rate

    def _refilled(self, key: str | None) -> _Bucket:
        now = self._clock()
        bucket = self._buckets.setdefault(key, _Bucket(self._capacity, now))
        bucket.tokens = min(self._capacity, bucket.tokens + (now - bucket.updated) * self._rate)
        bucket.updated = now
        return bucket

    @staticmethod
    def retry_after(wait_s: float) -> str:
        """A ``Retry-After`` value (whole seconds, at least 1) for a wait of *wait_s*."""
        return str(max(1, math.ceil(wait_s)))


class BodyLimit:
    """ASGI middleware: a request body over *max_bytes* is refused with HTTP 413, by its
    declared length or as it streams in; an accepted body is replayed to *app*."""

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self._app = app
        self._max = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        declared = Headers(scope=scope).get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > self._max:
            await self._refuse(scope, receive, send)
            return
        received: deque[Message] = deque()
        size = 0
        while True:
            message = await receive()
            received.append(message)
            if message["type"] != "http.request":
                break
            size += len(message.get("body", b""))
            if size > self._max:
                await self._refuse(scope, receive, send)
                return
            if not message.get("more_body", False):
                break

        async def replay() -> Message:
            return received.popleft() if received else await receive()

        await self._app(scope, replay, send)

    async def _refuse(self, scope: Scope, receive: Receive, send: Send) -> None:
        message = f"Request body too large: this server accepts at most {self._max} bytes"
        await refusal(413, message)(scope, receive, send)
