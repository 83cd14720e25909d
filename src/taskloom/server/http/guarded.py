"""Serving one HTTP request under a guard of its grant (``grant_watch``).

Once the guard ends (the token was revoked or expired, or the server stops), nothing
more of the response is sent: the application is cancelled, and the response is
closed properly, so neither the client nor uvicorn sees a broken one. A response not
started yet becomes a refusal (401 with the ``invalid_token`` challenge for a grant
that ended, 503 when the server stops); a started one is finished with *closing* (for
an event stream: one last event, well under 200 bytes), or *closing_on_shutdown* when
the server stops and one is given, and the end of its body.
"""

import anyio
from starlette.datastructures import Headers
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from taskloom.server.http.grant_watch import Ending, GrantWatch, LiveGrant
from taskloom.server.http.responses import refusal

EVENT_STREAM = "text/event-stream"


async def serve_guarded(
    watch: GrantWatch,
    live: LiveGrant | None,
    app: ASGIApp,
    scope: Scope,
    receive: Receive,
    send: Send,
    *,
    via: str = "mcp",
    challenge: str = "",
    closing: bytes = b"",
    closing_on_shutdown: bytes | None = None,
) -> None:
    """Serve *app* for *live* until it answers or the guard ends (see the module);
    *challenge* is the ``WWW-Authenticate`` value of the 401 of an ended grant."""
    started = complete = False
    what = f"{scope.get('method', '')} {scope.get('path', '')}"

    with watch.guard(live, what, via=via) as held:

        async def guarded(message: Message) -> None:
            nonlocal started, complete
            if held.ending is not None:
                await anyio.lowlevel.checkpoint()  # the cancel lands here: nothing more is sent
                return
            if message["type"] == "http.response.start":
                started = True
                if (
                    Headers(raw=message.get("headers", []))
                    .get("content-type", "")
                    .startswith(EVENT_STREAM)
                ):
                    watch.streaming(held)
            elif message["type"] == "http.response.body" and not message.get("more_body"):
                complete = True
            await send(message)

        await app(scope, receive, guarded)
    if complete:
        return
    if held.ending is None:  # the app returned early (sse_starlette does as uvicorn stops)
        if started:
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        return
    if not started:
        if held.ending is Ending.SHUTDOWN:
            answer = refusal(503, "Service unavailable: the server is stopping")
        else:
            headers = {"WWW-Authenticate": challenge} if challenge else None
            message = f"Unauthorized: the bearer token was {held.ending.value}"
            answer = refusal(401, message, headers=headers)
        await answer(scope, receive, send)
        return
    if held.ending is Ending.SHUTDOWN and closing_on_shutdown is not None:
        closing = closing_on_shutdown
    await send({"type": "http.response.body", "body": closing, "more_body": False})
