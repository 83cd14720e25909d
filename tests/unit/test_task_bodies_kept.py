"""Large task bodies parsed once per process (ADR 0051): a hit is the task its exact text
holds, small bodies are not kept, and what is kept stays within its count and text; a
large shape's text is dumped once and spliced into the same body text (ADR 0060)."""

from datetime import UTC, datetime
from typing import cast

from taskloom.engine.models import Task, TaskId
from taskloom.engine.shape import NodeShape, RunShape
from taskloom.engine.states import TaskState
from taskloom.persistence.sql import bodies, rows
from taskloom.persistence.sql.bodies import LARGE, Kept, ShapeTexts
from taskloom.persistence.sql.dialect import SQLITE

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def _shape(nodes: int) -> RunShape:
    return RunShape(
        phases=("p",),
        nodes=tuple(NodeShape(name=f"node_{index}", phase="p") for index in range(nodes)),
    )


def _task(nodes: int, version: int = 1) -> Task:
    shape = _shape(nodes)
    return Task(
        id=TaskId("t1"),
        name="a",
        arguments={},
        owner=None,
        state=TaskState.RUNNING,
        created_at=NOW,
        updated_at=NOW,
        ttl_ms=None,
        version=version,
        shape=shape,
    )


def test_a_large_body_is_parsed_once_and_read_back_as_the_task_it_holds() -> None:
    task = _task(500)
    body = task.model_dump_json()
    assert len(body) >= LARGE
    first = rows.task_from_body(body)
    assert first == task
    again = rows.task_from_body("".join(list(body)))  # an equal text, not the object
    assert again == first
    assert again.shape is first.shape  # not parsed again


def test_a_task_written_is_known_by_the_body_written() -> None:
    task = _task(500, version=7)
    body = cast(dict[str, str], rows.update(SQLITE, task).parameters)["body"]
    read = rows.task_from_body(body)
    assert read == task
    assert read.shape is task.shape  # not parsed
    changed = task.model_copy(update={"version": 8})
    assert rows.task_from_body(changed.model_dump_json()) == changed  # another text: parsed


def test_small_bodies_are_not_kept() -> None:
    kept = Kept()
    small = _task(1)
    body = small.model_dump_json()
    kept.keep(body, small)
    assert kept.known(body) is None
    assert len(kept) == 0


def test_what_is_kept_stays_within_its_count_and_its_text() -> None:
    tasks = [_task(300, version=version) for version in range(1, 6)]
    bodies = [task.model_dump_json() for task in tasks]
    by_count = Kept(count=2, characters=10 * len(bodies[0]))
    for body, task in zip(bodies, tasks, strict=True):
        by_count.keep(body, task)
    assert [by_count.known(body) for body in bodies] == [None, None, None, *tasks[3:]]
    each = len(bodies[0]) + len(tasks[0].model_dump_json(exclude={"shape"}))  # body and rest
    by_text = Kept(count=10, characters=3 * each)
    for body, task in zip(bodies, tasks, strict=True):
        by_text.keep(body, task)
    assert len(by_text) == 3  # five bodies of one length: the newest three fit
    assert by_text.known(bodies[-1]) == tasks[-1]
    too_large = Kept(count=10, characters=len(bodies[0]) - 1)
    too_large.keep(bodies[0], tasks[0])
    assert len(too_large) == 0


def test_a_task_read_is_not_shared_with_later_reads() -> None:
    """A reader that changes what a task it read holds (a workflow's input field typed
    ``Any`` is the task's own list) changes neither later reads nor what is written next."""
    task = _task(500).model_copy(update={"arguments": {"items": [1, 2]}})
    body = task.model_dump_json()
    first = rows.task_from_body(body)
    cast(list[int], first.arguments["items"]).append(3)
    assert rows.task_from_body(body).arguments == {"items": [1, 2]}
    written = cast(dict[str, str], rows.update(SQLITE, task).parameters)["body"]
    cast(list[int], task.arguments["items"]).append(4)
    assert rows.task_from_body(written).arguments == {"items": [1, 2]}


def test_a_task_written_is_read_back_as_its_text_holds() -> None:
    """A value the body's JSON cannot hold as it is (a non-finite float is written
    ``null``) is read back as the text holds it, here as in another process."""
    task = _task(500).model_copy(update={"result": {"x": float("inf")}})
    body = cast(dict[str, str], rows.update(SQLITE, task).parameters)["body"]
    assert rows.task_from_body(body).result == {"x": None}


def test_a_large_shape_is_written_as_the_task_dumps_it() -> None:
    """A body whose shape's text was dumped once and spliced in (ADR 0060) is the text
    ``model_dump_json`` makes, whatever the rest of the task holds."""
    for arguments, ended in (
        ({}, []),
        ({"ended_children": [1], "shape": None, "text": 'a"}\u2028\u00e9'}, [TaskId("c1")]),
        ({"nested": {"version": 3}}, [TaskId('x","ended_children":['), TaskId("c2")]),
    ):
        task = _task(200, version=4).model_copy(
            update={"arguments": arguments, "ended_children": ended, "result": [1.5, None]}
        )
        assert bodies.written(task) == task.model_dump_json()
        assert bodies.written(task) == task.model_dump_json()  # the shape's text kept
        small = _task(bodies.SPLICED_NODES - 1).model_copy(update={"arguments": arguments})
        assert bodies.written(small) == small.model_dump_json()


def test_a_shape_is_dumped_once_while_kept() -> None:
    texts = ShapeTexts(count=2, characters=10**6)
    shapes = [_shape(100) for _ in range(3)]
    first = texts.text(shapes[0])
    assert texts.text(shapes[0]) is first
    assert first == shapes[0].model_dump_json()
    texts.text(shapes[1])
    texts.text(shapes[2])
    assert len(texts) == 2  # the oldest dropped
    assert texts.text(shapes[0]) is not first  # dumped again
    too_small = ShapeTexts(characters=len(first) - 1)
    assert too_small.text(shapes[0]) == first
    assert len(too_small) == 0


def test_a_body_of_the_same_length_and_ends_is_not_taken_for_another() -> None:
    """A body is looked up by its length and ends, and a hit is compared whole: another
    text with the same ends (a node renamed in the middle of the shape) is parsed."""
    task = _task(500)
    body = task.model_dump_json()
    kept = Kept()
    kept.keep(body, task)
    renamed = body.replace('"node_250"', '"node_x50"')
    assert renamed != body
    assert (len(renamed), renamed[:200], renamed[-200:]) == (len(body), body[:200], body[-200:])
    assert kept.known(renamed) is None
    assert kept.known("".join(list(body))) == task


def test_a_shape_dropped_by_its_caller_is_not_taken_for_a_new_one() -> None:
    """A shape's text is kept by the shape's ``id``, which CPython gives a new object
    once the old one is freed: the kept shape is held, so a new shape is never taken for
    one its caller dropped."""
    texts = ShapeTexts(count=10_000, characters=10**9)
    dropped = _shape(140)
    freed = id(dropped)
    texts.text(dropped)
    del dropped
    for index in range(2_000):
        shape = RunShape(
            phases=("p",),
            nodes=tuple(NodeShape(name=f"n{index}_{node}", phase="p") for node in range(140)),
        )
        assert texts.text(shape) == shape.model_dump_json()
        if id(shape) == freed:  # a new object at the dropped one's address
            break
        del shape


def test_bodies_of_the_same_length_and_ends_are_kept_side_by_side() -> None:
    """Two versions of a run's body whose shapes differ only in the middle share a key:
    both are kept, neither pushing the other out."""
    task = _task(500)
    body = task.model_dump_json()
    nodes = list(_shape(500).nodes)
    nodes[250] = NodeShape(name="node_x50", phase="p")
    renamed_task = task.model_copy(update={"shape": RunShape(phases=("p",), nodes=tuple(nodes))})
    renamed = renamed_task.model_dump_json()
    assert bodies._key(renamed) == bodies._key(body)
    assert renamed != body
    kept = Kept()
    kept.keep(body, task)
    kept.keep(renamed, renamed_task)
    assert kept.known(body) == task
    assert kept.known(renamed) == renamed_task
    kept.keep(body, task)  # kept again: not twice
    assert len(kept) == 2
