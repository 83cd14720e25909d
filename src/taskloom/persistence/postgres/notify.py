"""Changes made by other processes, as PostgreSQL announces them (LISTEN/NOTIFY).

Migration 0002 makes every committed insert or update of a task send
``<schema> <origin> <task id> <state>`` on :data:`CHANNEL`. A store listens on one
connection of its own and hands each foreign change of its schema to a callback; its own
changes (same origin) are skipped, since they were published in-process already.
"""

from collections.abc import Awaitable, Callable
from typing import Final

import anyio
import psycopg
from anyio.abc import TaskStatus

from taskloom.engine.errors import DatabaseUnavailableError
from taskloom.engine.models import TaskId
from taskloom.persistence.postgres.driver import connect
from taskloom.persistence.postgres.settings import PostgresSettings

CHANNEL: Final = "taskloom_changes"
_RECONNECT_FIRST_S: Final = 0.1
_RECONNECT_MAX_S: Final = 5.0

OnChange = Callable[[TaskId], Awaitable[None]]


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
    task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """Call *on_change* for every task another process changes, until cancelled.

    A lost connection is re-opened with backoff; changes announced while it was down are
    not replayed (workers still poll, and heartbeats still notice cancellations).

    Raises:
        DatabaseUnavailableError: the first connection could not be opened.
    """
    started = False
    delay = _RECONNECT_FIRST_S
    while True:
        try:
            connection = await connect(settings, database, origin=origin)
        except DatabaseUnavailableError:
            if not started:
                raise
            await anyio.sleep(delay)
            delay = min(delay * 2, _RECONNECT_MAX_S)
            continue
        try:
            await connection.execute(f"LISTEN {CHANNEL}")
            if not started:
                task_status.started()
                started = True
            delay = _RECONNECT_FIRST_S
            async for notice in connection.notifies():
                task_id = foreign_change(notice.payload, schema=settings.schema_name, origin=origin)
                if task_id is not None:
                    await on_change(task_id)
        except psycopg.OperationalError:
            await anyio.sleep(delay)
            delay = min(delay * 2, _RECONNECT_MAX_S)
        finally:
            with anyio.CancelScope(shield=True):
                await connection.close()
