"""The per-principal limit on unfinished tasks, checked at create on every path that
creates one: a 2025-11-25 task, a 2026-07-28 task, and a plain call (a tool error)."""

import logging

import pytest

from taskloom.bootstrap import Engine
from taskloom.engine.states import ACTIVE_STATES
from taskloom.server import ServerSettings, TaskServer
from tests.server import flows
from tests.server.conftest import Connect, ConnectModern
from tests.server.http_support import audit_records

LIMIT = 2
QUOTA_EXCEEDED = -32031


@pytest.fixture
def task_server(engine: Engine) -> TaskServer:
    settings = ServerSettings(recheck_s=None, max_unfinished_per_principal=LIMIT, plain_wait_s=5)
    return TaskServer(engine.manager, engine.workflows, settings, runs=engine.runs)


async def _unfinished(engine: Engine, owner: str | None) -> int:
    return await engine.manager.count(owner=owner, states=ACTIVE_STATES)


async def test_a_legacy_task_over_the_limit_is_32031_and_stores_nothing(
    connect: Connect, engine: Engine
) -> None:
    async with connect(owner="ann") as ann:
        first = await ann.start("gated", {"gate": "legacy-1"})
        await ann.start("gated", {"gate": "legacy-2"})
        error = await ann.error(
            "tools/call", {"name": "gated", "arguments": {"gate": "x"}, "task": {}}
        )
        assert error.code == QUOTA_EXCEEDED
        assert f"a principal may have {LIMIT} queued, running or waiting" in error.message
        assert error.data == {"maxUnfinishedTasks": LIMIT}
        assert "ann" not in error.message
        assert await _unfinished(engine, "ann") == LIMIT
        flows.gate("legacy-1").set()
        await ann.result(first)  # one finished: room for another
        await ann.start("gated", {"gate": "legacy-3"})
    assert await _unfinished(engine, "ann") == LIMIT


async def test_a_modern_task_over_the_limit_is_32031_and_stores_nothing(
    connect_modern: ConnectModern, engine: Engine
) -> None:
    async with connect_modern(owner="ann") as ann:
        await ann.start("gated", {"gate": "modern-1"})
        await ann.start("gated", {"gate": "modern-2"})
        error = await ann.error("tools/call", {"name": "gated", "arguments": {"gate": "y"}})
        assert (error.code, error.data) == (QUOTA_EXCEEDED, {"maxUnfinishedTasks": LIMIT})
    assert await _unfinished(engine, "ann") == LIMIT


async def test_a_plain_call_over_the_limit_is_a_tool_error(
    connect: Connect, engine: Engine, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="taskloom.audit")
    async with connect(owner="ann") as ann:
        await ann.start("gated", {"gate": "plain-1"})
        await ann.start("gated", {"gate": "plain-2"})
        result = await ann.call("hello_now", {"name": "Ann"})
        assert result["isError"] is True
        assert "too many unfinished tasks" in result["content"][0]["text"]
    assert await _unfinished(engine, "ann") == LIMIT
    assert len((await engine.manager.list(owner="ann", limit=10)).tasks) == LIMIT
    assert audit_records(caplog)[-1] == {
        "principal": "ann", "action": "create", "method": "tools/call", "tool": "hello_now",
        "outcome": "refused", "error_code": QUOTA_EXCEEDED,
    }  # fmt: skip


async def test_a_plain_call_with_bad_arguments_is_recorded_as_refused(
    connect: Connect, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="taskloom.audit")
    async with connect(owner="ann") as ann:
        assert (await ann.call("hello_now", {"nom": "Ann"}))["isError"] is True
    assert audit_records(caplog) == [
        {"principal": "ann", "action": "create", "method": "tools/call", "tool": "hello_now",
         "outcome": "refused", "error_code": -32602},
    ]  # fmt: skip


async def test_the_limit_is_per_principal_and_the_local_user_has_none(
    connect: Connect, engine: Engine
) -> None:
    async with connect(owner="ann") as ann, connect(owner="bob") as bob, connect() as local:
        for n in range(LIMIT):
            await ann.start("gated", {"gate": f"ann-{n}"})
        assert (await ann.error("tools/call", _task_call("ann-x"))).code == QUOTA_EXCEEDED
        await bob.start("gated", {"gate": "bob-1"})  # another principal is not held back
        for n in range(LIMIT + 1):
            await local.start("gated", {"gate": f"local-{n}"})
    assert await _unfinished(engine, "bob") == 1
    assert await _unfinished(engine, None) == LIMIT + 1


def _task_call(gate: str) -> dict[str, object]:
    return {"name": "gated", "arguments": {"gate": gate}, "task": {}}
