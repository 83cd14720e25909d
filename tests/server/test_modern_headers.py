"""M31 without an HTTP stack: the ``Mcp-Name`` check of ``tasks/*`` on a request that came
over HTTP (the SDK checks the header only for ``tools/call``). The check is one server
middleware, ``taskloom.server.middleware.check_task_routing``; ``test_http_limits.py`` runs it
over real HTTP and ``make conformance`` through the official suite."""

from types import SimpleNamespace
from typing import Any

import pytest
from mcp.shared.exceptions import MCPError

from taskloom.server.middleware import check_task_routing

METHODS = ["tasks/get", "tasks/update", "tasks/cancel"]


def _request(method: str, version: str, headers: dict[str, str] | None) -> Any:
    """What the middleware sees of a request (``headers`` is None off HTTP)."""
    return SimpleNamespace(
        method=method,
        params={"taskId": "t1"},
        protocol_version=version,
        request=SimpleNamespace(headers=headers) if headers is not None else None,
    )


async def _passed(ctx: Any) -> bool:
    """True when the middleware lets the request through to the handler."""

    async def call_next(_: Any) -> dict[str, Any]:
        return {"handled": True}

    return await check_task_routing(ctx, call_next) == {"handled": True}


@pytest.mark.parametrize("method", METHODS)
async def test_m31_a_matching_mcp_name_is_accepted(method: str) -> None:
    assert await _passed(_request(method, "2026-07-28", {"mcp-name": "t1"}))
    assert await _passed(_request(method, "2025-11-25", {"mcp-name": "t1"}))


@pytest.mark.parametrize("method", METHODS)
async def test_m31_a_mismatched_mcp_name_is_32020_before_any_handler(method: str) -> None:
    for version in ("2026-07-28", "2025-11-25"):
        with pytest.raises(MCPError) as raised:
            await _passed(_request(method, version, {"mcp-name": "another-task"}))
        assert raised.value.error.code == -32020
        assert "another-task" in raised.value.error.message


async def test_a_missing_mcp_name_is_refused_only_on_2026() -> None:
    with pytest.raises(MCPError) as raised:
        await _passed(_request("tasks/get", "2026-07-28", {}))
    assert raised.value.error.code == -32020
    assert "missing" in raised.value.error.message
    assert await _passed(_request("tasks/get", "2025-11-25", {}))  # predates the header


async def test_off_http_and_on_other_methods_nothing_is_checked() -> None:
    assert await _passed(_request("tasks/get", "2026-07-28", None))
    assert await _passed(_request("tools/call", "2026-07-28", {"mcp-name": "other"}))
