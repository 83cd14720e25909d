"""Grants that end: a revoked or expired token stops every request it is serving.

The authenticator resolves each request's principal to a :class:`LiveGrant`: its grant,
plus what can end it (a stored token's id, an expiry). Whatever serves a request for a
while (an event stream, a wait for a result, a 2025-11-25 session) runs inside
:meth:`GrantWatch.guard` of that live grant: a cancel scope the watch cancels once the
grant ends. One watcher (:meth:`GrantWatch.run`) does the watching for the whole
process:

- the stored tokens in use are read back every ``CHECK_S`` (0.25 s), all in one query
  (``TokenStore.find_tokens``), and only while some request or stream holds one; a
  token revoked by any process sharing the database (``taskloom tokens revoke``) or
  deleted ends its guards at the next check;
- an expiry (a stored token's ``expires_at``, a JWT's ``exp`` plus the leeway) ends its
  guards when it comes, on a timer;
- static tokens of the configuration end only with the process (they cannot be
  revoked at run time: remove them and restart).

A read of the tokens that fails (the database is out of reach) ends nothing: it is
logged and tried again at the next check, as the next request would be refused by the
same outage. Each ending is written to the audit trail (action ``end``, outcome
``revoked`` or ``expired``). When the server stops, :meth:`GrantWatch.close` ends every
event stream at once and any other request still open after ``grace_s`` (ADR 0037).
"""

import logging
import time
from collections.abc import Awaitable, Callable, Collection, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Final

import anyio

from taskloom.engine.scopes import Grant
from taskloom.engine.tokens import TokenState
from taskloom.server import audit
from taskloom.server.request_guard import current_guard

logger = logging.getLogger(__name__)
CHECK_S: Final = 0.25
"""How often the stored tokens in use are read back."""

EndedTokens = Callable[[Collection[str]], Awaitable[Mapping[str, object]]]
"""Which of these stored token ids are no longer accepted, in one read (their state:
``expired`` or else revoked)."""


class Ending(StrEnum):
    """Why the server ended a request or stream: its stored token's state, or the stop."""

    REVOKED = TokenState.REVOKED.value
    EXPIRED = TokenState.EXPIRED.value
    SHUTDOWN = "shutdown"


@dataclass(frozen=True)
class LiveGrant:
    """A request's grant, and what can end it."""

    grant: Grant
    token_id: str | None = None
    """A stored token's id (the watch reads it back), else ``None``."""
    expires_at: float | None = None
    """When it ends by itself (seconds since the epoch), else ``None``."""


@dataclass(eq=False)
class Guard:
    """One request or stream held by a live grant (``None``: the local user's)."""

    live: LiveGrant | None
    what: str
    """How the audit trail names what was ended (``GET /ui/events``, ``session``)."""
    via: str
    scope: anyio.CancelScope = field(default_factory=anyio.CancelScope)
    streaming: bool = False
    """Its response is an event stream (ended at once when the server stops)."""
    ending: Ending | None = None
    linked: set[anyio.CancelScope] = field(default_factory=set)
    """Work done for it elsewhere (a 2025-11-25 session's handler), ended with it."""

    def end(self, ending: Ending) -> None:
        """End it (the first reason given stands)."""
        if self.ending is None:
            self.ending = ending
            self.scope.cancel()
            for scope in self.linked:
                scope.cancel()
            if ending is not Ending.SHUTDOWN and self.live is not None:
                outcome: audit.Outcome = "revoked" if ending is Ending.REVOKED else "expired"
                audit.write(
                    self.live.grant.principal, "end", outcome, method=self.what, via=self.via
                )


class GrantWatch:
    """Ends the guards of grants that were revoked or have expired (see the module)."""

    def __init__(
        self,
        ended_tokens: EndedTokens | None = None,
        *,
        check_s: float = CHECK_S,
        grace_s: float = 4.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        """*ended_tokens*: the read of the stored tokens (``None``: no stored tokens);
        *grace_s*: how long a request that is no stream may finish once the server stops;
        *clock*: the time expiries are compared with (seconds since the epoch)."""
        self._ended_tokens = ended_tokens
        self._check_s = check_s
        self._grace_s = grace_s
        self._clock = clock
        self._guards: set[Guard] = set()
        self._changed = anyio.Event()
        self._closing_at: float | None = None
        self._wake_at = float("inf")
        """When the watcher wakes next (``anyio.current_time``): a guard due sooner wakes it."""
        self._failing = False
        """The last read of the tokens failed (logged once until one succeeds)."""
        self._read_at = float("-inf")
        """When the stored tokens were last read back (``time.monotonic``)."""

    @property
    def closing(self) -> bool:
        """Whether the server is stopping."""
        return self._closing_at is not None

    @contextmanager
    def guard(
        self, live: LiveGrant | None, what: str, *, via: str = "mcp", request: bool = True
    ) -> Iterator[Guard]:
        """Run the body in a cancel scope cancelled once *live* ends (or the server
        stops); the guard tells whether, and why (``Guard.ending``). A *request*'s
        guard is the current one of the body
        (:func:`taskloom.server.request_guard.with_request`)."""
        held = Guard(live, what, via)
        token = current_guard.set(held) if request else None
        try:
            with held.scope:
                self._guards.add(held)
                due = self._due_in(held)
                if due is not None and anyio.current_time() + due < self._wake_at:
                    self._changed.set()  # else the watcher wakes in time anyway
                try:
                    if live is not None and self._expired(live):
                        held.end(Ending.EXPIRED)
                    yield held
                finally:
                    self._guards.discard(held)
        finally:
            if token is not None:
                current_guard.reset(token)

    def streaming(self, held: Guard) -> None:
        """*held*'s response turned out to be an event stream."""
        held.streaming = True
        if self.closing:
            held.end(Ending.SHUTDOWN)

    def close(self) -> None:
        """The server stops: end every event stream now, and any other request after
        the grace period."""
        if self._closing_at is None:
            self._closing_at = time.monotonic()
            for held in list(self._guards):
                if held.streaming:
                    held.end(Ending.SHUTDOWN)
            self._changed.set()

    async def run(self) -> None:
        """Watch until cancelled: sleep until the next check or expiry (or, with nothing
        to watch, until a guard is taken), then check."""
        while True:
            self._changed = anyio.Event()
            wait_s = self._wait_s()
            wait_s = wait_s if wait_s is not None else float("inf")
            self._wake_at = anyio.current_time() + wait_s
            with anyio.move_on_after(wait_s):
                await self._changed.wait()
            self._wake_at = float("-inf")  # checking: a new guard is seen by this check
            await self.check()

    async def check(self) -> None:
        """End the guards of every grant that ended by now (reading the stored tokens in
        use, all in one read, at most once per ``check_s``)."""
        token_ids = {
            held.live.token_id
            for held in self._guards
            if held.live is not None and held.live.token_id is not None
        }
        ended: Mapping[str, object] = {}
        due = time.monotonic() >= self._read_at + self._check_s
        if token_ids and self._ended_tokens is not None and due:
            self._read_at = time.monotonic()
            try:
                ended = await self._ended_tokens(token_ids)
            except Exception as error:  # noqa: BLE001  # an outage ends nothing: retried
                if not self._failing:  # once per outage, not every CHECK_S
                    logger.warning("cannot read the tokens in use back (retrying): %s", error)
                self._failing = True
            else:
                if self._failing:
                    logger.info("the tokens in use are read back again")
                self._failing = False
        for held in list(self._guards):
            live = held.live
            if live is None:
                continue
            if live.token_id is not None and live.token_id in ended:
                expired = ended[live.token_id] == TokenState.EXPIRED
                held.end(Ending.EXPIRED if expired else Ending.REVOKED)
            elif self._expired(live):
                held.end(Ending.EXPIRED)
        if self._closing_at is not None and time.monotonic() >= self._closing_at + self._grace_s:
            for held in list(self._guards):
                held.end(Ending.SHUTDOWN)

    def _expired(self, live: LiveGrant) -> bool:
        return live.expires_at is not None and self._clock() >= live.expires_at

    def _wait_s(self) -> float | None:
        """Until the next check is due (``None``: nothing to wait for but a change)."""
        due = [each for held in self._guards if (each := self._due_in(held)) is not None]
        if self._closing_at is not None:
            due.append(self._closing_at + self._grace_s - time.monotonic())
        return max(min(due), 0.0) if due else None

    def _due_in(self, held: Guard) -> float | None:
        """How soon *held* needs a check (``None``: never, but for a stop)."""
        live = held.live
        if live is None:
            return None
        due: list[float] = []
        if live.token_id is not None and self._ended_tokens is not None:
            due.append(self._read_at + self._check_s - time.monotonic())
        if live.expires_at is not None:
            due.append(live.expires_at - self._clock())
        return min(due) if due else None
