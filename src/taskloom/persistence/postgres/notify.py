"""Changes made by other processes, as PostgreSQL announces them (LISTEN/NOTIFY).

Migration 0002 makes every committed insert or update of a task send
``<schema> <origin> <task id> <state>`` on :data:`CHANNEL`; migration 0009 also sends the
changes a worker acts on on :data:`WORK_CHANNEL` (ADR 0062). A run handed back by its
worker changes no task row: :func:`release_statement` announces it on both, with
``released`` (``events.RELEASED``) in place of a state (ADR 0066). A store listens to one
channel on one connection of its own and hands each foreign change of its schema to a
callback; its own changes (same origin) are skipped, since they were published in-process
already.
"""

from collections.abc import Awaitable, Callable
from typing import Final

import anyio
import psycopg
from anyio.abc import TaskStatus

from taskloom.engine.errors import DatabaseUnavailableError
from taskloom.engine.events import RELEASED
from taskloom.engine.models import TaskId
from taskloom.engine.runs import Lease
from taskloom.persistence.postgres.driver import connect
from taskloom.persistence.postgres.settings import PostgresSettings
from taskloom.persistence.sql.script import Statement

CHANNEL: Final = "taskloom_changes"
"""Every committed change of a task."""
WORK_CHANNEL: Final = "taskloom_work"
"""The changes a worker acts on: new work (queued), a parked run made claimable or
given a timer, a cancel or a failure (migration 0009); what a process that only runs a
worker listens to."""
_RECONNECT_FIRST_S: Final = 0.1

OnChange = Callable[[TaskId, str], Awaitable[None]]
"""Called with a changed task's id and its new state, as the notification says."""


_RELEASE_SQL: Final = (
    "WITH gone AS (DELETE FROM leases WHERE task_id = %(task)s AND token = %(token)s"
    " RETURNING task_id)"
    " SELECT pg_notify(channel, concat_ws(' ', %(schema)s::text,"
    " coalesce(current_setting('taskloom.origin', true), ''), t.id, %(released)s::text))"
    " FROM gone JOIN tasks t ON t.id = gone.task_id"
    f" CROSS JOIN (VALUES ('{CHANNEL}'), ('{WORK_CHANNEL}')) AS channels (channel)"
    " WHERE t.state IN ('running', 'input_required') AND NOT t.parked"
)


def release_statement(lease: Lease, schema: str) -> Statement:
    """Drop *lease* and, if its run is still active and not parked (handed back: its
    worker stops, or stopped it after an error or the fence; ``input_required`` too, when
    one node asks while another runs), announce the run as ``released`` on both channels,
    as the triggers announce a change: sent when the transaction commits. A run's own end
    drops its lease with the task's final write, and a run that parks is parked first:
    neither is announced here. One statement."""
    parameters = {
        "task": lease.task_id,
        "token": lease.token,
        "schema": schema,
        "released": RELEASED,
    }
    return Statement(_RELEASE_SQL, parameters)


def foreign_change(payload: str, *, schema: str, origin: str) -> TaskId | None:
    """The task id in *payload* if another store changed a task of *schema*, else ``None``."""
    parts = payload.split(" ")
    if len(parts) != 4 or parts[0] != schema or parts[1] == origin:
        return None
    return TaskId(parts[2])


async def listen(
    settings: PostgresSettings,
    database: str,
    origin: str,
    on_change: OnChange,
    *,
    channel: str = CHANNEL,
    on_reconnect: Callable[[], None] = lambda: None,
    task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """Call *on_change* for every task another process changes (its id and new state),
    as *channel* announces it (:data:`CHANNEL`: every change; :data:`WORK_CHANNEL`: those
    a worker acts on), until cancelled.

    A lost connection is re-opened with backoff (at most ``reconnect_max_s`` between two
    tries); changes announced while it was down are not replayed, so *on_reconnect* is
    called once it listens again (the store wakes its workers up; they also poll).

    Raises:
        DatabaseUnavailableError: the first connection could not be opened.
    """
    started = False
    lost = False
    delay = _RECONNECT_FIRST_S
    while True:
        try:
            connection = await connect(settings, database, origin=origin)
        except DatabaseUnavailableError:
            if not started:
                raise
            await anyio.sleep(delay)
            delay = min(delay * 2, settings.reconnect_max_s)
            continue
        try:
            await connection.execute(f"LISTEN {channel}")
            if not started:
                task_status.started()
                started = True
            elif delay > _RECONNECT_FIRST_S or lost:
                on_reconnect()
            delay = _RECONNECT_FIRST_S
            lost = False
            async for notice in connection.notifies():
                task_id = foreign_change(notice.payload, schema=settings.schema_name, origin=origin)
                if task_id is not None:
                    await on_change(task_id, notice.payload.rsplit(" ", 1)[-1])
        except psycopg.OperationalError:
            lost = True
            await anyio.sleep(delay)
            delay = min(delay * 2, settings.reconnect_max_s)
        finally:
            with anyio.CancelScope(shield=True):
                await connection.close()
