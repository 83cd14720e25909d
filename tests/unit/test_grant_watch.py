"""The watch of grants that end: one read for every stored token in use per interval,
a timer per expiry, and every guard (and work linked to it) of an ended grant ended."""

import logging
import time
from collections.abc import Collection
from typing import Any, cast

import anyio
import pytest
from mcp.shared.exceptions import MCPError

from taskloom.engine.scopes import Grant
from taskloom.server.http.grant_watch import Ending, GrantWatch, Guard, LiveGrant
from taskloom.server.middleware import end_with_request
from taskloom.server.request_guard import with_request
from tests.server.http_support import audit_records

CHECK_S = 0.05


class _Tokens:
    def __init__(self) -> None:
        self.reads: list[set[str]] = []
        self.revoked: set[str] = set()
        self.down = False

    async def ended(self, token_ids: Collection[str]) -> dict[str, str]:
        self.reads.append(set(token_ids))
        if self.down:
            raise OSError("the database is out of reach")
        return {token_id: "revoked" for token_id in token_ids if token_id in self.revoked}


async def test_a_revoked_token_ends_all_its_guards_with_one_read_per_interval(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="taskloom.audit")
    tokens = _Tokens()
    watch = GrantWatch(tokens.ended, check_s=CHECK_S)
    ann = LiveGrant(Grant("ann"), token_id="a" * 12)
    bob = LiveGrant(Grant("bob"), token_id="b" * 12)
    ended: list[str] = []

    async def hold(live: LiveGrant, name: str) -> None:
        with watch.guard(live, name) as held:
            await anyio.sleep_forever()
        ended.append(f"{name} {held.ending}")

    async with anyio.create_task_group() as group:
        group.start_soon(watch.run)
        for n in range(20):
            group.start_soon(hold, ann, f"ann-{n}")
        group.start_soon(hold, bob, "bob")
        await anyio.sleep(CHECK_S * 4)
        assert tokens.reads
        assert all(read == {"a" * 12, "b" * 12} for read in tokens.reads)
        assert len(tokens.reads) <= 6  # one read per interval, whatever the guards
        tokens.revoked.add("a" * 12)
        with anyio.fail_after(1):
            while len(ended) < 20:  # noqa: ASYNC110  # the guards publish nothing else
                await anyio.sleep(0.01)
        assert sorted(ended) == sorted(f"ann-{n} revoked" for n in range(20))
        group.cancel_scope.cancel()
    records = [r for r in audit_records(caplog) if r["action"] == "end"]
    assert len(records) == 20
    assert {(r["principal"], r["outcome"]) for r in records} == {("ann", "revoked")}


async def test_an_expiry_ends_its_guards_on_time_and_a_static_grant_never_ends() -> None:
    watch = GrantWatch(None, check_s=CHECK_S)
    expiring = LiveGrant(Grant("ann"), expires_at=time.time() + 0.2)
    static = LiveGrant(Grant("ann"))
    async with anyio.create_task_group() as group:
        group.start_soon(watch.run)
        started = anyio.current_time()
        with watch.guard(expiring, "stream") as held, anyio.fail_after(2):
            await anyio.sleep_forever()
        assert held.ending is Ending.EXPIRED
        assert 0.15 <= anyio.current_time() - started < 1
        with watch.guard(static, "stream") as kept, anyio.move_on_after(0.3):
            await anyio.sleep_forever()
        assert kept.ending is None
        group.cancel_scope.cancel()


async def test_work_linked_to_a_request_ends_with_it_and_an_outage_ends_nothing() -> None:
    tokens = _Tokens()
    watch = GrantWatch(tokens.ended, check_s=CHECK_S)
    ann = LiveGrant(Grant("ann"), token_id="a" * 12)
    async with anyio.create_task_group() as group:
        group.start_soon(watch.run)
        tokens.down = True
        with watch.guard(ann, "POST /mcp") as held:
            with anyio.move_on_after(CHECK_S * 5):
                await anyio.sleep_forever()
            assert held.ending is None  # the reads failed: nothing ended
            tokens.down = False
            tokens.revoked.add("a" * 12)
            with with_request() as linked, anyio.fail_after(2):  # as a session's handler
                await anyio.sleep_forever()
            assert linked.cancelled_caught
        assert _ending(held) is Ending.REVOKED  # read again: it changed meanwhile
        group.cancel_scope.cancel()


async def test_a_handler_of_a_request_without_a_token_still_ends_when_the_server_stops() -> None:
    """The local user's HTTP request (no token) has a guard too: ``end_with_request``
    links its handler to it, so the stop ends the handler after the grace period."""
    watch = GrantWatch(grace_s=0.0)
    ended: list[MCPError] = []
    done = anyio.Event()

    async def forever(_: Any) -> Any:
        await anyio.sleep_forever()

    async def handle() -> None:
        try:
            await end_with_request(cast(Any, None), forever)
        except MCPError as error:
            ended.append(error)
        done.set()

    async with anyio.create_task_group() as group:
        with watch.guard(None, "POST /mcp") as held:
            group.start_soon(handle)  # with the request's context, as a session's handler
            await anyio.wait_all_tasks_blocked()
            watch.close()
            await watch.check()  # the grace is over: every request ends
        with anyio.fail_after(2):
            await done.wait()
    assert _ending(held) is Ending.SHUTDOWN
    assert [error.error.message for error in ended] == [
        "Request ended: its bearer token is no longer valid"
    ]


def _ending(held: Guard) -> Ending | None:
    return held.ending
