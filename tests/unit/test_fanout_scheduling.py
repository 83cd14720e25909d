"""ADR 0058: a workflow's order without ``graphlib``'s calls per node, and the lanes
that run a static fan-out's nodes without a coroutine of their own per node."""

import graphlib
import random

import anyio
import pytest

from taskloom.engine.dag import dependency_order
from taskloom.engine.runner import _EndedNodes


def _random_graph(chooser: random.Random) -> dict[str, tuple[str, ...]]:
    """A random DAG, its keys shuffled; some dependencies named before their own key."""
    names = [f"n{index}" for index in chooser.sample(range(200), chooser.randint(1, 40))]
    graph = {
        name: tuple(chooser.sample(names[:position], chooser.randint(0, min(position, 6))))
        for position, name in enumerate(names)
    }
    items = list(graph.items())
    chooser.shuffle(items)
    return dict(items)


def test_the_order_is_graphlibs_static_order() -> None:
    chooser = random.Random(58)
    for _ in range(2000):
        graph = _random_graph(chooser)
        assert dependency_order(graph) == tuple(graphlib.TopologicalSorter(graph).static_order())


def test_a_dependency_that_is_no_key_is_ordered_as_graphlib_orders_it() -> None:
    graph = {"b": ("a", "x"), "c": ("b",), "a": ()}
    assert dependency_order(graph) == tuple(graphlib.TopologicalSorter(graph).static_order())


def test_a_cycle_raises_graphlibs_error_naming_it() -> None:
    with pytest.raises(graphlib.CycleError) as raised:
        dependency_order({"top": (), "a": ("top", "b"), "b": ("a",)})
    assert set(raised.value.args[1]) == {"a", "b"}


@pytest.mark.anyio
async def test_ended_nodes_wake_the_taker_once_and_lose_no_name() -> None:
    """The event is set by the first name put since the last take only: a taker waiting
    is woken by it, and names put after it are taken with it, in order."""
    ended = _EndedNodes()
    taken: list[list[str]] = []

    async def take_twice() -> None:
        taken.append(await ended.taken())
        taken.append(await ended.taken())

    with anyio.fail_after(5):
        async with anyio.create_task_group() as task_group:
            task_group.start_soon(take_twice)
            await anyio.wait_all_tasks_blocked()
            for name in ("a", "b", "c"):
                ended.put(name)
            await anyio.wait_all_tasks_blocked()
            ended.put("d")
    assert taken == [["a", "b", "c"], ["d"]]


@pytest.mark.anyio
async def test_a_name_put_between_takes_is_taken_without_another_put() -> None:
    """A name put after a take and before the next call (the scheduler running a node
    alone, inline, then taking it) finds the event already set: the next take returns it
    at once, and a later name put while the taker waits still wakes it."""
    ended = _EndedNodes()
    with anyio.fail_after(5):
        ended.put("a")
        assert await ended.taken() == ["a"]
        ended.put("b")  # the event is still the set one: nothing sets a new one
        ended.put("c")
        assert await ended.taken() == ["b", "c"]
        async with anyio.create_task_group() as task_group:
            taken: list[list[str]] = []

            async def take() -> None:
                taken.append(await ended.taken())

            task_group.start_soon(take)
            await anyio.wait_all_tasks_blocked()
            assert taken == []  # nothing put since the last take: it waits
            ended.put("d")
    assert taken == [["d"]]
