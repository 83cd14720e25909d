"""The middleware chain is declared once, in order, and a create is returned, not raised."""

from taskloom.engine.scopes import Scopes
from taskloom.server import TaskServer
from taskloom.server.middleware import CREATE_TASK_METHOD, middleware_chain
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
    chain = middleware_chain(
        "alice", max_result_bytes=1000, scopes=Scopes(read_only=True), workflows=frozenset()
    )
    assert tuple(layer.name for layer in chain) == EVERY_LAYER


def test_layers_that_are_off_are_left_out_and_the_rest_keep_their_order() -> None:
    chain = middleware_chain(None, max_result_bytes=None)
    expected = tuple(n for n in EVERY_LAYER if n not in {"limit_results", "enforce_scopes"})
    assert tuple(layer.name for layer in chain) == expected


async def test_a_connection_installs_the_chain_in_its_order(task_server: TaskServer) -> None:
    read_only = Scopes(read_only=True)
    installed = task_server.middleware("alice", read_only, frozenset({"countdown"}))
    chain = middleware_chain(
        "alice",
        max_result_bytes=task_server.settings.max_result_bytes,
        scopes=read_only,
        workflows=frozenset({"countdown"}),
    )
    names = [getattr(middleware, "__qualname__", None) for middleware in installed]
    assert names == [getattr(layer.middleware, "__qualname__", None) for layer in chain]
    assert "scoped" in str(names[EVERY_LAYER.index("enforce_scopes")])


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
