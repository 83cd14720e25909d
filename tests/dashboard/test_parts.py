"""The dashboard's parts: the graph's layout, the question forms, the live stream."""

from datetime import UTC, datetime

import anyio
import pytest
from pydantic import BaseModel, JsonValue

from taskloom.engine.dag import MapContext, NodeContext, Workflow
from taskloom.engine.manager import TaskManager
from taskloom.engine.models import Task, TaskId
from taskloom.engine.runs import NodeRun, NodeState
from taskloom.engine.states import TaskState
from taskloom.persistence.memory import InMemoryTaskStore
from taskloom.server.dashboard import live
from taskloom.server.dashboard.forms import JSON_FIELD, answer, fields
from taskloom.server.dashboard.graph import layout
from taskloom.server.dashboard.hub import ChangeHub
from taskloom.server.dashboard.live import Reading, event_stream
from taskloom.server.dashboard.seen import digest
from taskloom.server.dashboard.streams import StreamSlots

NOW = datetime(2026, 11, 24, tzinfo=UTC)


class Empty(BaseModel):
    pass


def _flow() -> Workflow[Empty]:
    flow = Workflow("flow", version="1", input=Empty)

    @flow.node(phase="get")
    async def fetch(ctx: NodeContext[Empty]) -> list[int]:
        return [1, 2, 3]

    @flow.map(over=fetch, phase="work")
    async def score(ctx: MapContext[Empty, int]) -> int:
        return ctx.item

    @flow.node(phase="work", deps=[score])
    async def total(ctx: NodeContext[Empty]) -> int:
        return 0

    return flow


def _task(state: TaskState = TaskState.RUNNING) -> Task:
    return Task(
        id=TaskId("t" * 22),
        name="flow",
        arguments={},
        owner=None,
        state=state,
        created_at=NOW,
        updated_at=NOW,
        ttl_ms=None,
        version=2,
    )


def _run(node: str, state: NodeState, attempt: int = 1, failures: int = 0) -> NodeRun:
    return NodeRun(node=node, state=state, attempt=attempt, failures=failures, updated_at=NOW)


def test_phases_are_columns_and_a_map_is_one_box_with_its_items_counted() -> None:
    nodes = {
        "fetch": _run("fetch", NodeState.COMPLETED),
        "score[0]": _run("score[0]", NodeState.COMPLETED),
        "score[1]": _run("score[1]", NodeState.RUNNING),
        "score[2]": _run("score[2]", NodeState.RETRYING, attempt=2, failures=1),
    }
    graph = layout(_task(), _flow().shape(), nodes)
    assert [phase for phase, _ in graph.phases] == ["get", "work"]
    boxes = {box.name: box for box in graph.boxes}
    assert set(boxes) == {"fetch", "score", "total"}
    assert boxes["score"].is_map
    assert (boxes["score"].state, boxes["score"].detail) == (
        "running",
        "3 items: 1 completed, 1 retrying, 1 running",
    )
    assert (boxes["total"].state, boxes["total"].detail) == ("not started", "not started")
    assert boxes["fetch"].x < boxes["score"].x == boxes["total"].x
    assert len(graph.edges) == 2
    assert graph.width > 0
    assert graph.height > 0


def test_without_the_workflow_the_checkpoints_are_drawn() -> None:
    graph = layout(
        _task(),
        None,
        {"a": _run("a", NodeState.FAILED, failures=1), "m[0]": _run("m[0]", NodeState.COMPLETED)},
    )
    boxes = {box.name: box for box in graph.boxes}
    assert boxes["a"].detail == "attempt 1, 1 failed"
    assert boxes["m"].is_map


def test_a_flat_object_schema_becomes_one_field_per_property() -> None:
    schema: dict[str, JsonValue] = {
        "type": "object",
        "properties": {
            "name": {"type": "string", "title": "Name", "description": "Who"},
            "size": {"type": "number"},
            "count": {"type": "integer"},
            "ok": {"type": "boolean"},
            "level": {"type": "string", "enum": ["low", "high"]},
        },
        "required": ["name"],
    }
    made = fields(schema)
    assert [(f.name, f.kind, f.required) for f in made] == [
        ("name", "text", True),
        ("size", "number", False),
        ("count", "integer", False),
        ("ok", "checkbox", False),
        ("level", "select", False),
    ]
    assert made[0].help == "Who"
    assert made[4].choices == ("low", "high")
    form = {"name": "x", "size": "1.5", "count": "2", "level": "", "ok": "on"}
    assert answer(schema, form) == {"name": "x", "size": 1.5, "count": 2, "ok": True}
    assert answer(schema, {"name": "x", "count": "two"}) == {
        "name": "x",
        "count": "two",
        "ok": False,
    }


def test_any_other_schema_is_answered_as_json() -> None:
    schema: dict[str, JsonValue] = {"type": "array", "items": {"type": "integer"}}
    assert [f.name for f in fields(schema)] == [JSON_FIELD]
    assert answer(schema, {JSON_FIELD: "[1, 2]"}) == [1, 2]
    assert answer(schema, {JSON_FIELD: "[1,"}) == "[1,"


def _reading(value: object, *, ended: bool = False) -> Reading:
    return Reading((value,), digest((value,)), ended)


async def test_the_stream_sends_a_change_when_what_it_shows_changed_then_ends() -> None:
    hub = ChangeHub()
    shown = {"value": 1, "ended": False}

    async def read() -> Reading:
        return _reading(shown["value"], ended=bool(shown["ended"]))

    stream = event_stream(hub, "t1", read, None)
    chunks = aiter(stream.body_iterator)
    assert await anext(chunks) == "retry: 2000\n\n"
    async with anyio.create_task_group() as group:

        async def change() -> None:
            await anyio.wait_all_tasks_blocked()
            hub.changed("other", "ann")  # not this stream's task: no wake
            shown["value"] = 2
            hub.changed("t1", "ann")

        group.start_soon(change)
        with anyio.fail_after(5):
            assert await anext(chunks) == "event: change\ndata: {}\n\n"
    shown["ended"] = True
    hub.changed("t1", "ann")
    with anyio.fail_after(5):
        rest = [chunk async for chunk in chunks]
    assert rest == ["event: end\ndata: {}\n\n"]  # a wake sends no keepalive


@pytest.mark.parametrize("task_id", [None, "t1"])
async def test_a_page_that_shows_an_older_state_gets_a_change_at_once(
    task_id: str | None,
) -> None:
    """The page names what it shows (``?seen=``): a change made between its render and
    its stream's first read is sent at once, with no later change to wake the stream."""

    async def read() -> Reading:
        return _reading(2)

    seen = _reading(1).seen
    chunks = aiter(event_stream(ChangeHub(), task_id, read, None, seen=seen).body_iterator)
    assert await anext(chunks) == "retry: 2000\n\n"
    with anyio.fail_after(5):
        assert await anext(chunks) == "event: change\ndata: {}\n\n"


async def test_a_page_that_shows_what_the_stream_reads_gets_no_change(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Given the digest of its first read, the stream sends nothing but keepalives."""
    monkeypatch.setattr(live, "KEEPALIVE_S", 0.01)

    async def read() -> Reading:
        return _reading(2)

    seen = _reading(2).seen
    chunks = aiter(event_stream(ChangeHub(), "t1", read, None, seen=seen).body_iterator)
    assert await anext(chunks) == "retry: 2000\n\n"
    with anyio.fail_after(5):
        assert [await anext(chunks) for _ in range(3)] == [": keepalive\n\n"] * 3


async def test_a_page_of_an_ended_task_that_shows_an_older_state_gets_the_end() -> None:
    """The end makes the page refresh once: no change before it (two refreshes)."""

    async def read() -> Reading:
        return _reading(2, ended=True)

    stream = event_stream(ChangeHub(), "t1", read, None, seen=_reading(1).seen)
    with anyio.fail_after(5):
        chunks = [chunk async for chunk in stream.body_iterator]
    assert chunks == ["retry: 2000\n\n", "event: end\ndata: {}\n\n"]


def test_a_digest_is_short_and_takes_only_parts_that_encode_alike_everywhere() -> None:
    parts = (3, (TaskState.RUNNING, "a"), ((1, True), None))
    assert digest(parts) == digest((3, ("running", "a"), ((1, True), None)))
    assert len(digest(parts)) == 16
    assert int(digest(parts), 16) >= 0
    assert digest((1,)) != digest(("1",)) != digest(((1,),))
    for loose in (0.5, NOW, [1]):
        with pytest.raises(TypeError):
            digest((loose,))


@pytest.mark.parametrize("task_id", [None, "t1"])
def test_a_listener_of_every_task_and_of_one_task_are_woken(task_id: str | None) -> None:
    hub = ChangeHub()
    with hub.listen(task_id) as listener:
        hub.changed("t1", "ann")
        assert listener._woken.is_set()
    assert not hub._listeners


def test_a_list_listener_wakes_only_for_the_tasks_its_viewer_sees() -> None:
    hub = ChangeHub()
    with (
        hub.listen(None, "bob") as bob,
        hub.listen(None) as operator,
        hub.listen("t1") as page,
    ):
        hub.changed("t1", "ann")
        assert not bob._woken.is_set()
        assert operator._woken.is_set()
        assert page._woken.is_set()
        hub.changed("t2", "bob")
        assert bob._woken.is_set()
    with hub.listen(None) as listing, hub.listen("t1") as page:
        hub.node_changed("t1")  # a list shows no node
        assert page._woken.is_set()
        assert not listing._woken.is_set()


async def test_another_process_s_changes_are_read_only_while_a_page_is_open() -> None:
    """On PostgreSQL every change of every process is announced: a server with no page
    open must not read them for the dashboard (one read per change, per server)."""
    manager = TaskManager(InMemoryTaskStore())
    task = await manager.create("job", {})
    reads: list[str] = []
    read = manager.get

    async def counted(task_id: str, **kwargs: object) -> Task:
        reads.append(task_id)
        return await read(task_id, **kwargs)  # type: ignore[arg-type]

    manager.get = counted  # type: ignore[method-assign]
    hub = ChangeHub()
    async with anyio.create_task_group() as group:
        group.start_soon(hub.follow, manager)
        await anyio.wait_all_tasks_blocked()
        await manager.notice(task.id, "running")
        assert reads == []
        with hub.listen(None) as listing:
            await manager.notice(task.id, "running")
            assert reads == [task.id]
            with anyio.fail_after(5):
                await listing.wait()
        await manager.notice(task.id, "completed")
        assert reads == [task.id]
        group.cancel_scope.cancel()


async def test_a_wake_that_changes_nothing_shown_sends_nothing() -> None:
    hub = ChangeHub()
    reads = 0
    shown = {"value": 1}
    read_again = anyio.Event()

    async def read() -> Reading:
        nonlocal reads
        reads += 1
        if reads == 2:
            read_again.set()
        return _reading(shown["value"])

    stream = event_stream(hub, None, read, None, owner="bob")
    chunks = aiter(stream.body_iterator)
    assert await anext(chunks) == "retry: 2000\n\n"
    async with anyio.create_task_group() as group:

        async def change() -> None:
            await anyio.wait_all_tasks_blocked()
            hub.changed("t1", "bob")  # bob's task, but what the list shows is the same
            await read_again.wait()
            shown["value"] = 2
            hub.changed("t1", "bob")

        group.start_soon(change)
        with anyio.fail_after(5):
            assert await anext(chunks) == "event: change\ndata: {}\n\n"


async def test_a_keepalive_goes_on_a_timer(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(live, "KEEPALIVE_S", 0.01)

    async def read() -> Reading:
        return Reading((), digest(()), False)

    chunks = aiter(event_stream(ChangeHub(), None, read, None).body_iterator)
    assert await anext(chunks) == "retry: 2000\n\n"
    with anyio.fail_after(5):
        assert await anext(chunks) == ": keepalive\n\n"


def test_a_principal_holds_at_most_its_streams_and_gives_them_back() -> None:
    slots = StreamSlots(2)
    first, second = slots.take("ann"), slots.take("ann")
    assert first is not None
    assert second is not None
    assert slots.take("ann") is None
    assert slots.take("bob") is not None
    first()
    first()  # twice: still one slot
    third = slots.take("ann")
    assert third is not None
    assert slots.take("ann") is None
