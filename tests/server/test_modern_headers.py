"""M31 without an HTTP stack: the ``Mcp-Name`` check of ``tasks/*`` on a request that came
over HTTP (the SDK checks the header only for ``tools/call``; ``make conformance`` runs it
over real HTTP)."""

from types import SimpleNamespace
from typing import Any

import mcp_types as types
import pytest
from mcp.shared.exceptions import MCPError

from taskloom.bootstrap import Engine
from taskloom.engine.states import TaskState
from taskloom.server.modern import ModernTasks, UpdateTaskParams
from tests.server.modern_client import EXT


def _http_request(method: str, headers: dict[str, str]) -> Any:
    """What the handler sees of a 2026-07-28 request that came over HTTP."""
    capabilities = types.ClientCapabilities(extensions={EXT: {}})
    return SimpleNamespace(
        method=method,
        protocol_version="2026-07-28",
        session=SimpleNamespace(client_capabilities=capabilities),
        request=SimpleNamespace(headers=headers),
    )


async def test_m31_a_matching_mcp_name_is_accepted(engine: Engine) -> None:
    task = await engine.manager.create("gated", {"gate": "m31"}, workflow_version="1")
    tasks = ModernTasks(engine.manager, owner=None)
    ctx = _http_request("tasks/get", {"mcp-name": task.id})
    got = await tasks.get(ctx, types.GetTaskRequestParams(task_id=task.id))
    assert got["taskId"] == task.id


async def _call(tasks: ModernTasks, ctx: Any, method: str, task_id: str) -> dict[str, Any]:
    match method:
        case "tasks/get":
            return await tasks.get(ctx, types.GetTaskRequestParams(task_id=task_id))
        case "tasks/update":
            params = UpdateTaskParams.model_validate({"taskId": task_id, "inputResponses": {}})
            return await tasks.update(ctx, params)
        case _:
            return await tasks.cancel(ctx, types.CancelTaskRequestParams(task_id=task_id))


@pytest.mark.parametrize("method", ["tasks/get", "tasks/update", "tasks/cancel"])
async def test_m31_a_mismatched_mcp_name_is_32020_before_any_lookup(
    engine: Engine, method: str
) -> None:
    task = await engine.manager.create("gated", {"gate": "m31"}, workflow_version="1")
    tasks = ModernTasks(engine.manager, owner=None)
    ctx = _http_request(method, {"mcp-name": "another-task"})
    with pytest.raises(MCPError) as raised:
        await _call(tasks, ctx, method, task.id)
    assert raised.value.error.code == -32020
    assert "another-task" in raised.value.error.message
    assert (await engine.manager.get(task.id)).state is not TaskState.CANCELLED
