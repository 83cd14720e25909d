"""The one mapping from engine errors and states to the wire."""

import logging
from typing import Any, cast

import pytest
from mcp.server.context import ServerRequestContext
from mcp.shared.exceptions import MCPError

from taskloom.engine.errors import (
    DatabaseBusyError,
    DatabaseUnavailableError,
    DiskFullError,
    IdempotencyConflictError,
    IllegalTransitionError,
    InvalidCursorError,
    OutcomeUnknownError,
    PersistenceError,
    TaskloomError,
    TaskNotFoundError,
)
from taskloom.engine.states import TaskState
from taskloom.server.errors import STORE_UNAVAILABLE, http_status, to_mcp_error
from taskloom.server.middleware import error_boundary
from taskloom.server.wire import WIRE_STATUS


def test_every_engine_state_has_a_wire_status() -> None:
    assert set(WIRE_STATUS) == set(TaskState)
    assert WIRE_STATUS[TaskState.QUEUED] == WIRE_STATUS[TaskState.RUNNING] == "working"


@pytest.mark.parametrize(
    ("error", "code"),
    [
        (TaskNotFoundError("t1"), -32602),
        (InvalidCursorError("zz"), -32602),
        (IdempotencyConflictError(key="k", existing_task_id="t1"), -32602),
        (IllegalTransitionError(task_id="t", current=TaskState.FAILED, target="cancelled"), -32602),
        (DatabaseBusyError("locked"), -32032),
        (DatabaseUnavailableError("PostgreSQL u@h:5432/db is unavailable"), -32032),
        (DiskFullError("full"), -32032),
        (OutcomeUnknownError("the connection failed while committing"), -32032),
        (PersistenceError("something else stored"), -32603),
        (TaskloomError("something else"), -32603),
    ],
)
def test_engine_errors_map_to_json_rpc_codes(error: TaskloomError, code: int) -> None:
    assert to_mcp_error(error).code == code


def test_an_unavailable_store_is_a_retryable_error_that_names_no_host(
    caplog: pytest.LogCaptureFixture,
) -> None:
    error = DatabaseUnavailableError(
        "PostgreSQL app@db.internal:5432/tasks is unavailable: connection refused",
        retry_after_s=4.2,
    )
    answer = to_mcp_error(error)
    assert answer.code == STORE_UNAVAILABLE == -32032
    assert answer.error.data == {
        "reason": "store_unavailable",
        "retryable": True,
        "retryAfterSeconds": 5,
    }
    assert "db.internal" not in answer.message
    assert "retry in 5 s" in answer.message
    assert not [record for record in caplog.records if record.levelno >= logging.WARNING]
    assert http_status(answer.code, answer.error.data) == (503, {"Retry-After": "5"})
    assert http_status(-32603, None) is None
    unknown = to_mcp_error(OutcomeUnknownError("broke while committing", retry_after_s=5))
    assert unknown.code == -32032
    assert unknown.error.data == {
        "reason": "store_unavailable",
        "retryable": True,
        "retryAfterSeconds": 5,
        "outcome": "unknown",
    }


def test_cancelling_a_terminal_task_names_its_status() -> None:
    error = IllegalTransitionError(
        task_id="t", current=TaskState.FAILED, target=TaskState.CANCELLED
    )
    assert to_mcp_error(error).message == "Cannot cancel task: already in terminal status 'failed'"


async def test_the_boundary_turns_a_crash_into_a_generic_32603() -> None:
    async def crash(ctx: Any) -> None:
        raise RuntimeError("secret detail")

    with pytest.raises(MCPError) as raised:
        await error_boundary(cast(ServerRequestContext[Any, Any], _Ctx()), crash)
    assert raised.value.code == -32603
    assert raised.value.message == "Internal error"


class _Ctx:
    method = "tools/call"
