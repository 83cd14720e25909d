"""2026-07-28 push: ``subscriptions/listen`` with ``taskIds`` streams ``notifications/tasks``
(the contract's rule M35)."""

from typing import Any

import anyio

from tests.server import flows
from tests.server.conftest import Connect
from tests.server.modern_client import EXT, ModernClient

SUBSCRIPTION = "io.modelcontextprotocol/subscriptionId"
TASKS = "notifications/tasks"
ACK = "notifications/subscriptions/acknowledged"


def _listen(task_ids: Any) -> dict[str, Any]:
    return {"notifications": {"taskIds": task_ids}}


def _without(wire: dict[str, Any], *keys: str) -> dict[str, Any]:
    return {key: value for key, value in wire.items() if key not in keys}


async def test_m35_listen_pushes_each_change_as_tasks_get_shows_it(modern: ModernClient) -> None:
    task_id = await modern.start("gated", {"gate": "m35"})
    ended: dict[str, Any] = {}

    async def listen() -> None:
        ended.update(await modern.request("subscriptions/listen", _listen([task_id, "nope"])))

    async with anyio.create_task_group() as task_group:
        task_group.start_soon(listen)
        await modern.tap.until(lambda: bool(modern.notifications(TASKS)))
        flows.gate("m35").set()
    # the stream ended by itself: its one task is terminal
    [ack] = modern.notifications(ACK)
    subscription = ack["_meta"][SUBSCRIPTION]
    assert ack["notifications"] == {"taskIds": [task_id]}  # the unknown id is left out
    frames = modern.notifications(TASKS)
    assert [frame["status"] for frame in frames] == ["working", "completed"]
    assert all(frame["_meta"] == {SUBSCRIPTION: subscription} for frame in frames)
    final = await modern.get(task_id)
    assert _without(frames[-1], "_meta") == _without(final, "_meta", "resultType")
    assert ended["_meta"][SUBSCRIPTION] == subscription
    methods = [message.get("method") for message in modern.tap.messages]
    assert methods.index(ACK) < methods.index(TASKS)  # the ack is the first frame
    assert "notifications/progress" not in methods
    assert "notifications/message" not in methods


async def test_m35_listen_shows_questions_as_they_come_and_go(modern: ModernClient) -> None:
    task_id = await modern.start("ask", {})

    async def listen() -> None:
        await modern.request("subscriptions/listen", _listen([task_id]))

    async with anyio.create_task_group() as task_group:
        task_group.start_soon(listen)
        await modern.tap.until(
            lambda: any(f["status"] == "input_required" for f in modern.notifications(TASKS))
        )
        asked = next(f for f in modern.notifications(TASKS) if f["status"] == "input_required")
        [key] = asked["inputRequests"]
        await modern.update(task_id, {key: {"action": "accept", "content": {"name": "Di"}}})
    last = modern.notifications(TASKS)[-1]
    assert last["status"] == "completed"
    assert last["result"]["content"][0]["text"] == "Hello, Di!"


async def test_m35_listen_for_tasks_needs_the_extension(modern: ModernClient) -> None:
    error = await modern.error("subscriptions/listen", _listen(["x"]), declare=False)
    assert error.code == -32021
    assert error.data == {"requiredCapabilities": {"extensions": {EXT: {}}}}
    assert modern.notifications(ACK) == []


async def test_m35_malformed_task_ids_are_32602(modern: ModernClient) -> None:
    for task_ids in ("x", [5], [""], ["x"] * 101 + [str(n) for n in range(101)]):
        assert (await modern.error("subscriptions/listen", _listen(task_ids))).code == -32602


async def test_m35_a_stream_covering_nothing_ends_after_its_ack(modern: ModernClient) -> None:
    ended = await modern.request("subscriptions/listen", {"notifications": {}}, declare=False)
    assert ended["resultType"] == "complete"
    assert modern.notifications(ACK)[0]["notifications"] == {"taskIds": []}


async def test_m35_listen_does_not_exist_on_2025_11_25(connect: Connect) -> None:
    async with connect() as legacy:
        error = await legacy.error("subscriptions/listen", _listen(["x"]))
        assert error.code == -32601
