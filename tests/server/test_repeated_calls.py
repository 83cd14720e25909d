"""A call made again is not a second job (ADR 0040): a plain call that repeats an
unfinished one joins its task, an idempotency key in ``_meta`` gives the same task on
both generations, and the follow-up ``task_result`` waits no longer than the first call.
In-process, over SQLite."""

import logging
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any

import anyio
import pytest

from taskloom.bootstrap import Engine
from taskloom.engine.states import TaskState
from taskloom.server import ServerSettings, TaskServer
from tests.helpers import eventually
from tests.server import flows
from tests.server.client import TASK_META, LegacyClient
from tests.server.conftest import Connect, ConnectModern

KEY = "taskloom/idempotencyKey"
WAIT_S = 0.3
Serve = Callable[..., AbstractAsyncContextManager[LegacyClient]]


@pytest.fixture
def task_server(engine: Engine) -> TaskServer:
    settings = ServerSettings(recheck_s=None, plain_wait_s=WAIT_S)
    return TaskServer(engine.manager, engine.workflows, settings, runs=engine.runs)


def _text(result: dict[str, Any]) -> str:
    return "\n".join(block["text"] for block in result["content"])


def _keyed(name: str, arguments: dict[str, Any], key: Any, **more: Any) -> dict[str, Any]:
    return {"name": name, "arguments": arguments, "_meta": {KEY: key}, **more}


async def _task_ids(engine: Engine, name: str) -> list[str]:
    return [task.id for task in (await engine.manager.list(names=[name], limit=50)).tasks]


async def test_a_repeated_plain_call_joins_the_unfinished_task(
    connect: Connect, engine: Engine
) -> None:
    async with connect() as first, connect() as second:
        deferred = await first.call("pause", {"gate": "twice"})
        joined = await second.call("pause", {"gate": "twice"})  # another connection, same user
        started = deferred["_meta"][TASK_META]
        assert "Calling the tool again for the same job joins this task." in _text(deferred)
        assert joined["_meta"][TASK_META] == {
            "taskId": started["taskId"],
            "status": "working",
            "deferred": True,
            "joined": True,
        }
        assert joined["isError"] is False
        assert "This call joined it: an earlier call with the same arguments" in _text(joined)
        assert _text(joined).startswith(
            f"Not finished yet, and not a failure: task {started['taskId']}"
        )
        assert await _task_ids(engine, "pause") == [started["taskId"]]
        flows.gate("twice").set()
        result = await first.call("task_result", {"task_id": started["taskId"], "wait_s": 5})
        assert _text(result) == "opened twice"
        again = await first.call("pause", {"gate": "twice"})  # the job ended: a new one
    assert again["_meta"][TASK_META]["taskId"] != started["taskId"]
    assert "joined" not in again["_meta"][TASK_META]
    assert len(await _task_ids(engine, "pause")) == 2


async def test_a_joined_call_that_sees_the_end_answers_the_result(
    engine: Engine, connect: Connect, caplog: pytest.LogCaptureFixture
) -> None:
    patient = TaskServer(
        engine.manager, engine.workflows, ServerSettings(recheck_s=None, plain_wait_s=20)
    )
    async with connect() as first:
        deferred = await first.call("pause", {"gate": "end"})
    task_id = deferred["_meta"][TASK_META]["taskId"]
    caplog.set_level(logging.INFO, logger="taskloom.server.plain")
    answers: list[dict[str, Any]] = []
    async with _serve(patient) as second, anyio.create_task_group() as group:

        async def call_again() -> None:
            answers.append(await second.call("pause", {"gate": "end"}))

        group.start_soon(call_again)

        async def joined() -> bool:
            return f"joined task {task_id}" in caplog.text

        await eventually(joined)
        flows.gate("end").set()
    (answer,) = answers
    assert answer["isError"] is False
    assert answer["content"][0]["text"] == "opened end"
    assert answer["content"][-1]["text"].startswith(f"(task {task_id}: completed; this call joined")
    assert answer["_meta"][TASK_META] == {
        "taskId": task_id,
        "status": "completed",
        "deferred": False,
        "joined": True,
    }


async def test_other_arguments_or_another_principal_start_another_task(
    connect: Connect, engine: Engine
) -> None:
    async with connect(owner="ann") as ann, connect(owner="bob") as bob:
        one = (await ann.call("pause", {"gate": "p1"}))["_meta"][TASK_META]["taskId"]
        two = (await ann.call("pause", {"gate": "p2"}))["_meta"][TASK_META]["taskId"]
        three = (await bob.call("pause", {"gate": "p1"}))["_meta"][TASK_META]["taskId"]
    assert len({one, two, three}) == 3
    for gate in ("p1", "p2"):
        flows.gate(gate).set()


async def test_a_workflow_can_turn_joining_off(connect: Connect, engine: Engine) -> None:
    async with connect() as client:
        first = await client.call("pause_again", {"gate": "run-twice"})
        second = await client.call("pause_again", {"gate": "run-twice"})
    assert first["_meta"][TASK_META]["taskId"] != second["_meta"][TASK_META]["taskId"]
    assert "joins this task" not in _text(first)  # it would not
    assert "joined" not in second["_meta"][TASK_META]
    assert len(await _task_ids(engine, "pause_again")) == 2
    flows.gate("run-twice").set()


async def test_an_idempotency_key_gives_one_task_on_2025_11_25(
    connect: Connect, engine: Engine
) -> None:
    async with connect(owner="ann") as ann:
        created = await ann.request("tools/call", _keyed("pause", {"gate": "k1"}, "job-1", task={}))
        again = await ann.request("tools/call", _keyed("pause", {"gate": "k1"}, "job-1", task={}))
        task_id = created["task"]["taskId"]
        assert again["task"]["taskId"] == task_id
        plain = await ann.request("tools/call", _keyed("pause", {"gate": "k1"}, "job-1"))
        assert plain["_meta"][TASK_META]["taskId"] == task_id
        assert plain["_meta"][TASK_META]["joined"] is True
        conflict = await ann.error(
            "tools/call", _keyed("pause", {"gate": "other"}, "job-1", task={})
        )
        assert conflict.code == -32602
        assert f"idempotency key 'job-1' was already used for task {task_id}" in conflict.message
        refused = await ann.request("tools/call", _keyed("pause", {"gate": "other"}, "job-1"))
        assert refused["isError"] is True
        assert "idempotency key 'job-1' was already used" in _text(refused)
    assert await _task_ids(engine, "pause") == [task_id]
    flows.gate("k1").set()


async def test_an_idempotency_key_gives_one_task_on_2026_07_28(
    connect_modern: ConnectModern, engine: Engine
) -> None:
    async with connect_modern(owner="ann") as ann:
        created = await ann.request("tools/call", _keyed("pause", {"gate": "k2"}, "job-2"))
        again = await ann.request("tools/call", _keyed("pause", {"gate": "k2"}, "job-2"))
        assert created["resultType"] == again["resultType"] == "task"
        assert again["taskId"] == created["taskId"]
        conflict = await ann.error("tools/call", _keyed("pause", {"gate": "x"}, "job-2"))
        plain = await ann.request(
            "tools/call", _keyed("pause", {"gate": "k2"}, "job-2"), declare=False
        )
    assert conflict.code == -32602
    assert "was already used for task" in conflict.message
    assert plain["_meta"][TASK_META]["taskId"] == created["taskId"]
    assert await _task_ids(engine, "pause") == [created["taskId"]]
    flows.gate("k2").set()


@pytest.mark.parametrize("key", ["", 7, "k" * 201])
async def test_a_malformed_idempotency_key_is_32602(
    connect: Connect, engine: Engine, key: Any
) -> None:
    async with connect() as client:
        error = await client.error("tools/call", _keyed("pause", {"gate": "bad"}, key))
    assert error.code == -32602
    assert KEY in error.message
    assert await _task_ids(engine, "pause") == []


async def test_task_result_waits_no_longer_than_a_plain_call(
    connect: Connect, engine: Engine
) -> None:
    async with connect() as client:
        task_id = (await client.call("pause", {"gate": "long"}))["_meta"][TASK_META]["taskId"]
        tools = {tool["name"]: tool for tool in (await client.request("tools/list"))["tools"]}
        started = anyio.current_time()
        with anyio.fail_after(5):
            waited = await client.call("task_result", {"task_id": task_id, "wait_s": 10_000})
        waited_s = anyio.current_time() - started
    assert f"wait_s (up to {WAIT_S:g})" in tools["task_result"]["description"]
    assert waited["isError"] is False
    text = _text(waited)
    assert text.startswith(
        f"wait_s 10000 is more than this server waits: waited at most {WAIT_S:g} s"
    )
    assert f"not finished: call task_result again (with wait_s {WAIT_S:g} to wait)" in text
    assert WAIT_S <= waited_s < 3
    flows.gate("long").set()


async def test_a_client_that_knows_tasks_waits_for_a_schema_tool_instead_of_a_deferral(
    connect: Connect, engine: Engine
) -> None:
    """It holds the output schema, which a deferral cannot meet: its plain call of such a
    tool waits for the end (it could have asked for a task)."""
    answers: list[dict[str, Any]] = []
    async with connect(declare_tasks=True) as client, anyio.create_task_group() as group:

        async def call() -> None:
            answers.append(await client.call("gated", {"gate": "knows"}))

        group.start_soon(call)

        async def running() -> bool:
            tasks = (await engine.manager.list(names=["gated"])).tasks
            return bool(tasks) and tasks[0].state is TaskState.RUNNING

        await eventually(running)
        with anyio.move_on_after(WAIT_S * 3):
            while not answers:  # noqa: ASYNC110  # no deferral comes: nothing to wait on
                await anyio.sleep(0.05)
        assert answers == []  # no deferral after plain_wait_s
        flows.gate("knows").set()
    (answer,) = answers
    assert answer["isError"] is False
    assert answer["structuredContent"] == {"opened": "knows"}


@asynccontextmanager
async def _serve(server: TaskServer) -> AsyncIterator[LegacyClient]:
    from mcp.shared.memory import create_client_server_memory_streams

    from tests.server.client import open_client

    async with (
        create_client_server_memory_streams() as (client_streams, server_streams),
        anyio.create_task_group() as group,
    ):
        group.start_soon(lambda: server.serve(*server_streams))
        async with open_client(*client_streams) as client:
            yield client
        group.cancel_scope.cancel()


async def test_only_identical_calls_wait_for_each_other_while_one_starts(
    connect: Connect, engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A call whose create hangs (a store outage, until the store wait gives up) holds
    back the same call, which then joins its task, and no other call."""
    entered, stuck = anyio.Event(), anyio.Event()
    creating = engine.manager.create

    async def create(name: str, arguments: Any = None, **more: Any) -> Any:
        if arguments == {"gate": "stuck"}:
            entered.set()
            await stuck.wait()
        return await creating(name, arguments, **more)

    monkeypatch.setattr(engine.manager, "create", create)
    answers: dict[str, dict[str, Any]] = {}
    async with connect() as first, connect() as second, anyio.create_task_group() as group:

        async def call(label: str, client: LegacyClient, gate: str) -> None:
            answers[label] = await client.call("pause", {"gate": gate})

        group.start_soon(call, "first", first, "stuck")
        with anyio.fail_after(10):
            await entered.wait()
        group.start_soon(call, "same", second, "stuck")
        with anyio.fail_after(10):  # not behind the stuck call
            other = await second.call("pause", {"gate": "free"})
        assert other["_meta"][TASK_META]["deferred"] is True
        assert answers == {}  # both identical calls still wait
        stuck.set()
    one, same = answers["first"]["_meta"][TASK_META], answers["same"]["_meta"][TASK_META]
    assert one["taskId"] == same["taskId"]
    assert [one.get("joined"), same.get("joined")].count(True) == 1
    assert len(await _task_ids(engine, "pause")) == 2
    for gate in ("stuck", "free"):
        flows.gate(gate).set()
