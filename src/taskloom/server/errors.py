"""The one mapping from engine errors to JSON-RPC errors, and the protocol errors.

Every code the server answers with is chosen here: handlers raise engine errors (or
the helpers below), and the ``error_boundary`` middleware turns them into ``MCPError``s
with :func:`to_mcp_error`. The errors a *finished task* answers with (cancelled, server
fault) are wire shapes: ``taskloom.server.wire``.
"""

import logging
import math
import re
from collections.abc import Mapping
from typing import Final

from mcp.shared.exceptions import MCPError
from mcp_types import (
    HEADER_MISMATCH,
    INTERNAL_ERROR,
    INVALID_PARAMS,
    INVALID_REQUEST,
    METHOD_NOT_FOUND,
    MISSING_REQUIRED_CLIENT_CAPABILITY,
    PARSE_ERROR,
)
from pydantic import ValidationError

from taskloom.engine.errors import (
    IdempotencyConflictError,
    IllegalTransitionError,
    InvalidRequestError,
    OutcomeUnknownError,
    PersistenceError,
    QuotaExceededError,
    StoreUnavailableError,
    TaskloomError,
    TaskNotFoundError,
    TaskStateError,
    UnknownWorkflowError,
)
from taskloom.engine.states import TaskState, is_terminal
from taskloom.server.generation import TASKS_EXTENSION
from taskloom.server.wire import wire_status

logger = logging.getLogger(__name__)


QUOTA_EXCEEDED: Final = -32031
"""The principal has as many unfinished tasks as it may (a taskloom code, beside
``-32030`` Forbidden); nothing was created."""
STORE_UNAVAILABLE: Final = -32032
"""The task store did not answer within its wait (a database outage, a lock held by
another process, a full disk): nothing was done, and the same request may succeed
after ``data.retryAfterSeconds`` (ADR 0038; HTTP 503 with ``Retry-After``)."""
ECHO_LIMIT: Final = 100
"""Most characters of a client's value an error message repeats."""


def echoed(value: str) -> str:
    """A client's *value* as an error message may repeat it: as is when short and
    printable, else quoted with its control characters escaped and cut to ``ECHO_LIMIT``,
    so a message stays one short line whatever the request held."""
    if len(value) <= ECHO_LIMIT and value.isprintable():
        return value
    shown = repr(value[:ECHO_LIMIT])
    return f"{shown}… ({len(value)} characters)" if len(value) > ECHO_LIMIT else shown


def to_mcp_error(error: TaskloomError) -> MCPError:
    """The JSON-RPC error a requestor gets for an engine *error*."""
    match error:
        case TaskNotFoundError():
            # Same message for unknown, expired and foreign ids: nothing to probe.
            return MCPError(INVALID_PARAMS, f"Task not found: {echoed(error.task_id)}")
        case IllegalTransitionError(target=TaskState.CANCELLED) if is_terminal(error.current):
            status = wire_status(error.current)
            return MCPError(
                INVALID_PARAMS, f"Cannot cancel task: already in terminal status '{status}'"
            )
        case QuotaExceededError():
            return MCPError(
                QUOTA_EXCEEDED, f"Quota exceeded: {error}", {"maxUnfinishedTasks": error.limit}
            )
        case UnknownWorkflowError():
            return MCPError(INVALID_PARAMS, str(error))
        case InvalidRequestError() | IdempotencyConflictError() | TaskStateError():
            return MCPError(INVALID_PARAMS, str(error))
        case StoreUnavailableError():
            # the store logged the outage once (taskloom.store); no line per request
            logger.debug("answered store unavailable: %s", error)
            unknown = isinstance(error, OutcomeUnknownError)
            return store_unavailable(error.retry_after_s, outcome_unknown=unknown)
        case PersistenceError():
            logger.error("task store failure: %s", error, exc_info=error)
            return MCPError(INTERNAL_ERROR, f"The task store failed: {error}")
        case _:
            logger.error("engine error: %s", error, exc_info=error)
            return MCPError(INTERNAL_ERROR, str(error))


def store_unavailable(retry_after_s: float, *, outcome_unknown: bool = False) -> MCPError:
    """``-32032``: the store is unavailable; retry after *retry_after_s* (whole seconds,
    at least 1). With *outcome_unknown*, the connection broke while the request's write
    was committing: it may have been done (``data.outcome`` is ``"unknown"``). The
    message names no host, path or driver (ADR 0023)."""
    seconds = retry_after(retry_after_s)
    data: dict[str, object] = {
        "reason": "store_unavailable",
        "retryable": True,
        "retryAfterSeconds": seconds,
    }
    if outcome_unknown:
        data["outcome"] = "unknown"
        message = (
            "Task store unavailable while committing: the request may or may not have "
            f"been done; check, or retry with the same idempotency key, in {seconds} s"
        )
    else:
        message = f"Task store unavailable: nothing was done; retry in {seconds} s"
    return MCPError(STORE_UNAVAILABLE, message, data)


def retry_after(seconds: float) -> int:
    """Whole seconds, at least 1, as ``Retry-After`` and ``retryAfterSeconds`` say it."""
    return max(1, math.ceil(seconds))


def http_status(code: int, data: object) -> tuple[int, dict[str, str]] | None:
    """The HTTP status and headers for a JSON-RPC error a POST is answered with alone,
    where its code calls for one: 503 with ``Retry-After`` for ``-32032``."""
    if code != STORE_UNAVAILABLE:
        return None
    seconds = data.get("retryAfterSeconds") if isinstance(data, dict) else None
    retry = seconds if isinstance(seconds, int) and seconds > 0 else 1
    return 503, {"Retry-After": str(retry)}


_PROBLEMS: Final[Mapping[str, str]] = {
    "missing": "is required",
    "extra_forbidden": "is not allowed",
    "string_type": "must be a string",
    "int_type": "must be an integer",
    "int_parsing": "must be an integer",
    "int_from_float": "must be an integer",
    "float_type": "must be a number",
    "float_parsing": "must be a number",
    "bool_type": "must be true or false",
    "bool_parsing": "must be true or false",
    "dict_type": "must be an object",
    "model_type": "must be an object",
    "model_attributes_type": "must be an object",
    "list_type": "must be an array",
    "tuple_type": "must be an array",
    "literal_error": "is not one of the allowed values",
    "enum": "is not one of the allowed values",
    "string_too_short": "is too short",
    "string_too_long": "is too long",
    "too_short": "has too few items",
    "too_long": "has too many items",
}
"""What a pydantic error type means, in words that name no library model or type."""
_FIELD: Final = re.compile(r"[a-z_][A-Za-z0-9_]{0,63}")
"""A protocol field name (camelCase); model names (capitalised) and union tags are not."""


def invalid_params(error: ValidationError) -> MCPError:
    """``-32602`` for request params that did not validate, saying where and what is
    wrong in plain words: no model name, library version, documentation URL or input."""
    problems = error.errors(include_url=False, include_input=False, include_context=False)
    first = problems[0] if problems else None
    where, what = "params", "are not valid"
    if first is not None:
        where = _where(first["loc"])
        what = _PROBLEMS.get(first["type"], "is not valid")
    more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
    return MCPError(INVALID_PARAMS, f"Invalid params: {where} {what}{more}")


def _where(loc: tuple[int | str, ...]) -> str:
    parts = list(loc[1:] if loc[:1] == ("params",) else loc)
    path = "params"
    for part in parts:
        if isinstance(part, int):
            path += f"[{part}]"
        elif _FIELD.fullmatch(part):
            path += f".{part}"
    return path


def parse_error() -> MCPError:
    """A body (or line) that is not JSON."""
    return MCPError(PARSE_ERROR, "Parse error: the message is not valid JSON")


def invalid_request(problem: str) -> MCPError:
    """Well-formed JSON that is not one JSON-RPC request, notification or response."""
    return MCPError(INVALID_REQUEST, f"Invalid Request: {problem}")


def tool_needs_task(name: str) -> MCPError:
    """A ``required`` tool called without ``params.task`` (MUST be -32601)."""
    return MCPError(
        METHOD_NOT_FOUND, f"Tool {name!r} runs only as a task: call it with params.task"
    )


def tool_forbids_task(name: str) -> MCPError:
    """``params.task`` on a tool whose taskSupport is forbidden (SHOULD be -32601)."""
    return MCPError(METHOD_NOT_FOUND, f"Tool {name!r} does not support task augmentation")


def invalid_ttl() -> MCPError:
    """A ``params.task.ttl`` that is not a number (the SDK lets ``true`` through as 1)."""
    return MCPError(INVALID_PARAMS, "task.ttl must be a number of milliseconds")


def not_on_this_version(method: str, version: str) -> MCPError:
    """A method this server does not serve at the connection's protocol *version*."""
    return MCPError(METHOD_NOT_FOUND, f"Method not found: {method} (protocol {version})", method)


def unknown_tool(name: str) -> MCPError:
    """A ``tools/call`` naming no tool of this server."""
    return MCPError(INVALID_PARAMS, f"Unknown tool: {echoed(name)}")


def missing_tasks_extension(what: str) -> MCPError:
    """2026-07-28: *what* needs the tasks extension, which this request did not declare."""
    return MCPError(
        MISSING_REQUIRED_CLIENT_CAPABILITY,
        f"{what} needs the {TASKS_EXTENSION} extension: declare it in the request's "
        "_meta client capabilities",
        {"requiredCapabilities": {"extensions": {TASKS_EXTENSION: {}}}},
    )


def task_id_header_mismatch(header: str | None, task_id: object) -> MCPError:
    """An ``Mcp-Name`` header missing, or naming another task than ``params.taskId`` (HTTP)."""
    if header is None:
        return MCPError(
            HEADER_MISMATCH, f"the Mcp-Name header is missing; it must be params.taskId {task_id!r}"
        )
    return MCPError(
        HEADER_MISMATCH, f"Mcp-Name header {header!r} does not match params.taskId {task_id!r}"
    )


def answers_did_not_fit(
    task_id: str, key: str, question: str, problems: tuple[str, ...], *, asks: int
) -> MCPError:
    """``tasks/result`` gave up asking: the requestor's answers to the question *key*
    kept breaking its schema. The task still waits for that answer."""
    return MCPError(
        INVALID_PARAMS,
        f"Task {task_id} still waits for an answer to {echoed(question)!r}: {asks} answers "
        f"did not fit its schema ({'; '.join(problems)}); call tasks/result again to be "
        "asked again",
        {"taskId": task_id, "status": "input_required", "question": key},
    )
