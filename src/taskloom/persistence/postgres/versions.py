"""Version transactions of the PostgreSQL store (``engine.versions.VersionStore``)."""

import json
from collections.abc import Iterable
from datetime import datetime
from typing import cast

from taskloom.engine.claims import WorkflowKey
from taskloom.engine.states import ACTIVE_STATES
from taskloom.engine.versions import AHEAD_AT_MOST, FORGET_AFTER, StoredVersion, version_sort_key
from taskloom.persistence.postgres.driver import Connection

_ACTIVE = ", ".join(f"'{state.value}'" for state in sorted(ACTIVE_STATES))


async def record_loaded(
    process: str,
    loaded: Iterable[WorkflowKey],
    now: datetime,
    until: datetime,
    connection: Connection,
) -> None:
    """See :meth:`taskloom.engine.versions.VersionStore.record_loaded`."""
    await connection.execute("DELETE FROM processes WHERE expires_at <= %s", (now - FORGET_AFTER,))
    await connection.execute(
        "INSERT INTO processes (id, loaded, seen_at, expires_at) VALUES (%s, %s, %s, %s)"
        " ON CONFLICT (id) DO UPDATE SET loaded = excluded.loaded,"
        " seen_at = excluded.seen_at, expires_at = excluded.expires_at",
        (process, json.dumps(sorted(loaded)), now, until),
    )


async def forget_process(process: str, connection: Connection) -> None:
    """See :meth:`taskloom.engine.versions.VersionStore.forget_process`."""
    await connection.execute("DELETE FROM processes WHERE id = %s", (process,))


async def live_versions(now: datetime, connection: Connection) -> frozenset[WorkflowKey]:
    """See :meth:`taskloom.engine.versions.VersionStore.live_versions`."""
    cursor = await connection.execute(
        "SELECT loaded::text FROM processes WHERE expires_at > %s", (now,)
    )
    found = await cursor.fetchall()
    return frozenset((name, version) for (loaded,) in found for name, version in json.loads(loaded))


async def first_live_process(now: datetime, connection: Connection) -> str | None:
    """See :meth:`taskloom.engine.versions.VersionStore.first_live_process`."""
    cursor = await connection.execute(
        "SELECT min(id) FROM processes WHERE expires_at > %s AND seen_at <= %s",
        (now, now + AHEAD_AT_MOST),
    )
    found = await cursor.fetchone()
    return None if found is None else cast(str | None, found[0])


async def unfinished_versions(now: datetime, connection: Connection) -> list[StoredVersion]:
    """See :meth:`taskloom.engine.versions.VersionStore.unfinished_versions`."""
    cursor = await connection.execute(
        "SELECT name, workflow_version, count(*), min(created_at)"
        f" FROM tasks WHERE state IN ({_ACTIVE})"
        " AND (expires_at IS NULL OR expires_at > %s) GROUP BY 1, 2",
        (now,),
    )
    stored = [
        StoredVersion(name=name, version=version, unfinished=count, oldest=oldest)
        for name, version, count, oldest in await cursor.fetchall()
    ]
    return sorted(stored, key=lambda each: version_sort_key(each.name, each.version))
