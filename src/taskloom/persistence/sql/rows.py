"""Tasks and checkpoints to rows and back, in either dialect. A task's ``body`` is the
task as JSON; its other columns are indexed copies."""

import json
from functools import cache
from typing import Any, Final

from pydantic import JsonValue, ValidationError

from taskloom.engine.errors import CorruptDatabaseError
from taskloom.engine.models import Task, TaskId
from taskloom.engine.runs import (
    AttemptOutcome,
    ErrorInfo,
    NodeAttempt,
    NodeRun,
    NodeState,
    trusted_node_run,
)
from taskloom.persistence.sql import bodies
from taskloom.persistence.sql.dialect import Dialect
from taskloom.persistence.sql.script import Statement

_INSERTED = (
    "id, name, owner, state, version, updated_at, expires_at, idempotency_key, parent_id,"
    " {created}, workflow_version, body"
)
NODE_COLUMNS = (
    "node, state, attempt, failures, interruptions, not_before, waiting_for, output, error,"
    " updated_at"
)
ATTEMPT_COLUMNS = "task_id, node, attempt, worker, started_at, ended_at, outcome, error"


def insert_sql(d: Dialect) -> str:
    """The insert of a task row (positional parameters: :func:`insert_row`)."""
    return (
        f"INSERT INTO tasks ({_INSERTED.format(created=d.created)})"
        f" VALUES ({', '.join([d.positional] * 12)})"
    )


def insert_row(d: Dialect, task: Task) -> tuple[Any, ...]:
    """Parameters of :func:`insert_sql` for *task*."""
    return (
        task.id,
        task.name,
        task.owner,
        task.state.value,
        task.version,
        d.time(task.updated_at),
        d.stored(task.expires_at),
        task.idempotency_key,
        task.parent_id,
        d.time(task.created_at),
        task.workflow_version,
        _body(task),
    )


def update(d: Dialect, new: Task) -> Statement:
    """Write *new* over its row (which the writing transaction holds: see ADR 0032)."""
    return Statement(
        _update_sql(d),
        {
            "state": new.state.value,
            "version": new.version,
            "updated_at": d.time(new.updated_at),
            "parked": new.parked,
            "wake_at": d.stored(new.wake_at),
            "body": _body(new),
            "id": new.id,
        },
    )


@cache
def _update_sql(d: Dialect) -> str:
    p = d.parameter
    return (
        f"UPDATE tasks SET state = {p('state')}, version = {p('version')},"
        f" updated_at = {p('updated_at')}, parked = {p('parked')}, wake_at = {p('wake_at')},"
        f" body = {p('body')} WHERE id = {p('id')}"
    )


@cache
def live(d: Dialect, table: str = "") -> str:
    """A condition that hides expired tasks (the parameter ``now``)."""
    column = f"{table}.expires_at" if table else "expires_at"
    return f"({column} IS NULL OR {column} > {d.parameter('now')})"


def owned(d: Dialect, owner: str | None, parameters: dict[str, object], table: str = "") -> str:
    """The condition that a task is *owner*'s (``None``: the local user's)."""
    column = f"{table}.owner" if table else "owner"
    if owner is None:
        return f"{column} IS NULL"
    parameters["owner"] = owner
    return f"{column} = {d.parameter('owner')}"


def task_from_body(body: str) -> Task:
    """The task stored in a ``body`` column (a large one parsed once: :mod:`.bodies`).

    Raises:
        CorruptDatabaseError: the stored JSON is not a valid task.
    """
    try:
        task = bodies.known(body)
        if task is not None:
            return task
        task = Task.model_validate_json(body)
    except ValidationError as error:
        raise CorruptDatabaseError(
            f"a stored task is unreadable: {error.errors()[0]['msg']}"
        ) from error
    bodies.keep(body, task)
    return task


def _body(task: Task) -> str:
    """*task* as its ``body`` column, its shape remembered as what that text holds."""
    return bodies.written(task)


_NODE_STATES: Final[dict[object, NodeState]] = {state.value: state for state in NodeState}


def node_run(d: Dialect, row: tuple[Any, ...]) -> NodeRun:
    """A ``node_runs`` row (:data:`NODE_COLUMNS`) as a checkpoint. Not validated again:
    the columns' types and checks hold what the model would check (every node's start
    and end reads one)."""
    node, state, attempt, failures, interruptions, not_before, waiting_for, output, error, at = row
    return trusted_node_run(
        node=node,
        state=_NODE_STATES.get(state) or NodeState(state),  # cheaper than the enum's call
        attempt=attempt,
        failures=failures,
        interruptions=interruptions,
        not_before=d.read(not_before),
        waiting_for=waiting_for,
        output=_json(output),
        error=_error(error),
        updated_at=d.moment(at),
    )


def node_attempt(d: Dialect, row: tuple[Any, ...]) -> NodeAttempt:
    """A ``node_attempts`` row (:data:`ATTEMPT_COLUMNS`) as an attempt."""
    task_id, node, attempt, worker, started_at, ended_at, outcome, error = row
    return NodeAttempt(
        task_id=TaskId(task_id),
        node=node,
        attempt=attempt,
        worker=worker,
        started_at=d.moment(started_at),
        ended_at=d.read(ended_at),
        outcome=AttemptOutcome(outcome) if outcome is not None else None,
        error=_error(error),
    )


def _error(text: str | None) -> ErrorInfo | None:
    return ErrorInfo.model_validate_json(text) if text is not None else None


def _json(text: str | None) -> JsonValue:
    if text is None:
        return None
    value: JsonValue = json.loads(text)
    return value
