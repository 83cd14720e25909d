"""The middleware chain is declared once, in order, and a create is returned, not raised."""

import logging
from types import SimpleNamespace
from typing import Any, cast

import anyio
import pytest
from mcp.server._otel import OpenTelemetryMiddleware
from mcp.shared.exceptions import MCPError

from taskloom.engine.scopes import Scopes
from taskloom.server import TaskServer
from taskloom.server.embedded import AnsweredSignal
from taskloom.server.middleware import CREATE_TASK_METHOD, Context, middleware_chain
from taskloom.server.push import TaskFollowers
from taskloom.server.scopes import FORBIDDEN, ConnectionScopes
from tests.helpers import eventually
from tests.server.client import LegacyClient
from tests.server.modern_client import ModernClient

EVERY_LAYER = (
    "end_with_request",
    "audit_trail",
    "error_boundary",
    "check_generation",
    "check_task_routing",
    "limit_results",
    "enforce_scopes",
    "advertise_tasks",
    "route_task_creation",
)


def test_the_chain_is_declared_outermost_first() -> None:
    read_only = ConnectionScopes(Scopes(read_only=True), frozenset({"countdown"}))
    chain = middleware_chain("alice", max_result_bytes=1000, scoped=read_only)
    assert tuple(layer.name for layer in chain) == EVERY_LAYER


def test_layers_that_are_off_are_left_out_and_the_rest_keep_their_order() -> None:
    chain = middleware_chain(None, max_result_bytes=None)
    expected = tuple(n for n in EVERY_LAYER if n not in {"limit_results", "enforce_scopes"})
    assert tuple(layer.name for layer in chain) == expected


async def test_a_connection_installs_the_chain_in_its_order(task_server: TaskServer) -> None:
    read_only = Scopes(read_only=True)
    async with anyio.create_task_group() as task_group:
        followers = TaskFollowers(task_server.manager, AnsweredSignal(), task_group)
        server = task_server.connection_server(followers, "alice", read_only)
    sdk_own, *installed = server.middleware
    assert isinstance(sdk_own, OpenTelemetryMiddleware)  # the SDK's, outermost
    assert [_name_of(middleware) for middleware in installed] == [
        "end_with_request",
        "audit_trail.<locals>.audit_request",
        "error_boundary",
        "check_generation",
        "check_task_routing",
        "limit_results.<locals>.result_limit",
        "enforce_scopes.<locals>.scoped",
        "advertise_tasks",
        "route_task_creation",
    ]


def _name_of(middleware: object) -> str:
    return str(getattr(middleware, "__qualname__", type(middleware).__qualname__))


async def test_a_read_only_chain_refuses_a_create_of_every_workflow_it_serves(
    task_server: TaskServer,
) -> None:
    """``TaskServer.middleware`` finds the workflows served itself: given only the scopes,
    its scope check still knows which tool calls start tasks."""
    installed = task_server.middleware("alice", Scopes(read_only=True))
    scoped = installed[EVERY_LAYER.index("enforce_scopes")]
    create = SimpleNamespace(
        method="tools/call", params={"name": "countdown", "arguments": {}, "task": {}}
    )

    async def not_reached(ctx: Context) -> Any:
        raise AssertionError("a read-only connection started a task")

    with pytest.raises(MCPError) as refused:
        await scoped(cast(Context, create), not_reached)
    assert refused.value.error.code == FORBIDDEN


async def test_a_legacy_create_answers_the_create_task_result(client: LegacyClient) -> None:
    result = await client.request(
        "tools/call", {"name": "countdown", "arguments": {"start": 1}, "task": {"ttl": 60_000}}
    )
    assert set(result) == {"task"}
    assert result["task"]["status"] == "working"
    assert result["task"]["ttl"] == 60_000


async def test_the_create_method_is_not_callable_from_the_wire(
    client: LegacyClient, modern: ModernClient
) -> None:
    params = {"name": "countdown", "arguments": {"start": 1}, "task": {}}
    for error in (
        await client.error(CREATE_TASK_METHOD, params),
        await modern.error(CREATE_TASK_METHOD, params),
    ):
        assert (error.code, error.message) == (-32601, "Method not found")
    assert not (await client.request("tasks/list"))["tasks"]  # nothing was created


async def test_a_task_augmented_call_is_checked_as_the_sdk_checks_a_tools_call(
    client: LegacyClient,
) -> None:
    """The same surface check as the SDK's, in its order: the first problem named is
    the one the same call without ``task`` hears (the params model alone would name
    ``params.name`` first)."""
    bad = {"name": 5, "arguments": [1]}
    plain = await client.error("tools/call", bad)
    created = await client.error("tools/call", {**bad, "task": {}})
    assert plain.message == "Invalid params: params.arguments must be an object (and 1 more)"
    assert (created.code, created.message) == (plain.code, plain.message)


async def test_a_notification_named_like_a_create_is_dropped_quietly(
    client: LegacyClient, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    params = {"name": "countdown", "arguments": {"start": 1}, "task": {}}
    await client.dispatcher.notify(CREATE_TASK_METHOD, params)
    await client.dispatcher.notify("tools/call", {**params, "task": "bad"})
    await client.dispatcher.notify("tools/call", params)

    async def all_dropped() -> bool:
        return sum(_dropped(record) for record in caplog.records) == 3

    await eventually(all_dropped)
    assert not [record for record in caplog.records if record.levelno >= logging.WARNING]
    assert not (await client.request("tasks/list"))["tasks"]


def _dropped(record: logging.LogRecord) -> bool:
    return record.getMessage() in {
        f"no handler for notification {CREATE_TASK_METHOD}",
        "no handler for notification tools/call",
    }
