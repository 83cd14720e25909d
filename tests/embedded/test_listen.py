"""``subscriptions/listen`` on a host server with DurableTasks: the host's own change events
and taskloom's task changes, on one stream when both are asked for (ADR 0025)."""

from typing import Any

import anyio
import pytest
from mcp import Client

from tests.embedded.host import existing_server
from tests.embedded.test_existing_server import modern
from tests.server import flows
from tests.server.modern_client import ModernClient

pytestmark = pytest.mark.anyio

SUBSCRIPTION = "io.modelcontextprotocol/subscriptionId"
ACK = "notifications/subscriptions/acknowledged"
TASKS = "notifications/tasks"
TOOLS_CHANGED = "notifications/tools/list_changed"


@pytest.fixture(autouse=True)
def _fresh_gates() -> None:
    flows.GATES.clear()


def statuses(client: ModernClient) -> list[str]:
    return [frame["status"] for frame in client.notifications(TASKS)]


async def test_a_listen_for_task_ids_streams_their_changes_and_ends(tmp_path: Any) -> None:
    async with modern(existing_server(tmp_path / "t.db")) as client:
        task_id = await client.start("wait_gate", {"name": "ids"})
        ended: dict[str, Any] = {}

        async def listen() -> None:
            listened = {"notifications": {"taskIds": [task_id, "nope"]}}
            ended.update(await client.request("subscriptions/listen", listened))

        async with anyio.create_task_group() as task_group:
            task_group.start_soon(listen)
            await client.tap.until(lambda: statuses(client) == ["working"])
            flows.gate("ids").set()
        [ack] = client.notifications(ACK)
        assert ack["notifications"] == {"taskIds": [task_id]}
        assert statuses(client) == ["working", "completed"]
        assert ended["_meta"] == ack["_meta"]


async def test_one_stream_carries_the_hosts_events_and_the_task_changes(tmp_path: Any) -> None:
    async with modern(existing_server(tmp_path / "t.db")) as client:
        task_id = await client.start("wait_gate", {"name": "both"})
        asked = {"notifications": {"taskIds": [task_id], "toolsListChanged": True}}
        async with anyio.create_task_group() as task_group:
            task_group.start_soon(client.request, "subscriptions/listen", asked)
            await client.tap.until(lambda: statuses(client) == ["working"])
            flows.gate("both").set()
            await client.tap.until(lambda: statuses(client) == ["working", "completed"])
            await client.call("announce", {})  # the host's own event, after the tasks ended
            await client.tap.until(lambda: bool(client.notifications(TOOLS_CHANGED)))
            task_group.cancel_scope.cancel()  # the host's part lasts until the client leaves
        [ack] = client.notifications(ACK)
        assert ack["notifications"] == {"taskIds": [task_id], "toolsListChanged": True}
        subscription = ack["_meta"][SUBSCRIPTION]
        frames = [*client.notifications(TASKS), *client.notifications(TOOLS_CHANGED)]
        assert all(frame["_meta"] == {SUBSCRIPTION: subscription} for frame in frames)
        methods = [message.get("method") for message in client.tap.messages]
        assert methods.index(ACK) < methods.index(TASKS)  # the one ack is the first frame


async def test_a_listen_for_task_ids_needs_the_extension(tmp_path: Any) -> None:
    async with modern(existing_server(tmp_path / "t.db")) as client:
        for extra in ({}, {"toolsListChanged": True}):
            asked = {"notifications": {"taskIds": ["x"], **extra}}
            error = await client.error("subscriptions/listen", asked, declare=False)
            assert error.code == -32021
            malformed = {"notifications": {"taskIds": "x", **extra}}
            assert (await client.error("subscriptions/listen", malformed)).code == -32602
        assert client.notifications(ACK) == []  # nothing was acknowledged


async def test_the_hosts_own_listen_is_unchanged(tmp_path: Any) -> None:
    async with Client(existing_server(tmp_path / "t.db")) as client:
        async with client.listen(tools_list_changed=True) as subscription:
            assert subscription.honored.tools_list_changed is True
            await client.call_tool("announce", {})
            with anyio.fail_after(10):
                event = await anext(subscription)
        assert type(event).__name__ == "ToolsListChanged"
