"""The host's own extensions see every call of a taskloom tool, a 2025-11-25 create
included (ADR 0025, ADR 0045): an interceptor listed before DurableTasks may refuse it."""

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import mcp_types as types
import pytest
from mcp.server.context import CallNext, HandlerResult
from mcp.server.extension import Extension
from mcp.server.mcpserver import MCPServer
from mcp.shared.exceptions import MCPError

from taskloom.bootstrap import durable_tasks
from taskloom.server.middleware import CREATE_TASK_METHOD, Context
from taskloom.server.scopes import FORBIDDEN
from tests.embedded.host import settings, slow_sum
from tests.embedded.test_existing_server import legacy
from tests.helpers import eventually

pytestmark = pytest.mark.anyio

CREATE = {"name": "slow_sum", "arguments": {"a": 1}, "task": {}}


@dataclass(frozen=True)
class Seen:
    """One call an interceptor saw: its method, tool, whether it asked for a task, and
    what the rest of the chain answered (``None``: it raised)."""

    method: str
    tool: str
    task: bool
    answer: Any


@dataclass
class Policy(Extension):
    """A host's policy extension: records every tool call, refuses those in *refused*."""

    refused: frozenset[str] = frozenset()
    seen: list[Seen] = field(default_factory=list)
    identifier = "com.example/policy"

    async def intercept_tool_call(
        self, params: types.CallToolRequestParams, ctx: Context, call_next: CallNext
    ) -> HandlerResult:
        if params.name in self.refused:
            self.seen.append(Seen(ctx.method, params.name, params.task is not None, None))
            raise MCPError(FORBIDDEN, f"policy: {params.name} is not allowed")
        answer = await call_next(ctx)
        self.seen.append(Seen(ctx.method, params.name, params.task is not None, answer))
        return answer


def _host(database: Path, policy: Policy) -> MCPServer[None]:
    tasks = durable_tasks([slow_sum], settings(database))
    return MCPServer("mine", extensions=[policy, tasks], lifespan=tasks.lifespan)


async def test_an_interceptor_before_durable_tasks_refuses_a_create(tmp_path: Path) -> None:
    policy = Policy(refused=frozenset({"slow_sum"}))
    async with legacy(_host(tmp_path / "t.db", policy)) as client:
        plain = await client.error("tools/call", {"name": "slow_sum", "arguments": {"a": 1}})
        created = await client.error("tools/call", CREATE)
        assert (plain.code, plain.message) == (FORBIDDEN, "policy: slow_sum is not allowed")
        assert (created.code, created.message) == (plain.code, plain.message)
        assert not (await client.request("tasks/list"))["tasks"]  # no task was created
    assert [(seen.method, seen.task) for seen in policy.seen] == [
        ("tools/call", False),
        ("tools/call", True),
    ]


async def test_an_interceptor_sees_a_create_as_a_tools_call_and_its_create_task_result(
    tmp_path: Path,
) -> None:
    policy = Policy()
    async with legacy(_host(tmp_path / "t.db", policy)) as client:
        created = await client.request("tools/call", CREATE)
        assert created["task"]["status"] == "working"
        assert [task["taskId"] for task in (await client.request("tasks/list"))["tasks"]] == [
            created["task"]["taskId"]
        ]
    [seen] = policy.seen
    assert (seen.method, seen.tool, seen.task) == ("tools/call", "slow_sum", True)
    assert seen.answer["task"]["taskId"] == created["task"]["taskId"]


async def test_a_host_middleware_sees_what_the_module_docstring_says(tmp_path: Path) -> None:
    """One given to ``MCPServer`` sees ``tools/call``; one appended once the lifespan
    started runs inside ``DurableTasks.route`` and sees ``taskloom/createTask``."""
    outer: list[str] = []
    inner: list[str] = []

    def recording(methods: list[str]) -> Any:
        async def record(ctx: Context, call_next: CallNext) -> HandlerResult:
            if ctx.request_id is not None and ctx.method != "initialize":
                methods.append(ctx.method)
            return await call_next(ctx)

        return record

    tasks = durable_tasks([slow_sum], settings(tmp_path / "t.db"))
    mcp: MCPServer[None] = MCPServer(
        "mine", extensions=[tasks], lifespan=tasks.lifespan, middleware=[recording(outer)]
    )
    async with legacy(mcp) as client:
        mcp.middleware.append(recording(inner))
        await client.request("tools/call", CREATE)
    assert outer == ["tools/call"]
    assert inner == [CREATE_TASK_METHOD]


async def test_a_notification_named_like_a_create_is_dropped_quietly(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    async with legacy(_host(tmp_path / "t.db", Policy())) as client:
        await client.dispatcher.notify(CREATE_TASK_METHOD, CREATE)
        await client.dispatcher.notify("tools/call", {**CREATE, "task": "bad"})

        async def both_dropped() -> bool:
            dropped = {
                f"no handler for notification {m}" for m in (CREATE_TASK_METHOD, "tools/call")
            }
            return sum(record.getMessage() in dropped for record in caplog.records) == 2

        await eventually(both_dropped)
        assert not [record for record in caplog.records if record.levelno >= logging.WARNING]
        assert not (await client.request("tasks/list"))["tasks"]
