"""Version transactions of the SQLite store (``engine.versions.VersionStore``)."""

import json
import sqlite3
from collections.abc import Iterable
from datetime import datetime
from typing import cast

from taskloom.engine.claims import WorkflowKey
from taskloom.engine.states import ACTIVE_STATES
from taskloom.engine.versions import AHEAD_AT_MOST, FORGET_AFTER, StoredVersion, version_sort_key
from taskloom.persistence.sqlite import rows

_ACTIVE = ", ".join(f"'{state.value}'" for state in sorted(ACTIVE_STATES))


def record_loaded(
    raw: sqlite3.Connection,
    process: str,
    loaded: Iterable[WorkflowKey],
    now: datetime,
    until: datetime,
) -> None:
    """See :meth:`taskloom.engine.versions.VersionStore.record_loaded`."""
    raw.execute("DELETE FROM processes WHERE expires_at <= ?", (rows.micros(now - FORGET_AFTER),))
    raw.execute(
        "INSERT INTO processes (id, loaded, seen_at, expires_at) VALUES (?, ?, ?, ?)"
        " ON CONFLICT (id) DO UPDATE SET loaded = excluded.loaded,"
        " seen_at = excluded.seen_at, expires_at = excluded.expires_at",
        (process, json.dumps(sorted(loaded)), rows.micros(now), rows.micros(until)),
    )


def forget_process(raw: sqlite3.Connection, process: str) -> None:
    """See :meth:`taskloom.engine.versions.VersionStore.forget_process`."""
    raw.execute("DELETE FROM processes WHERE id = ?", (process,))


def live_versions(raw: sqlite3.Connection, now: datetime) -> frozenset[WorkflowKey]:
    """See :meth:`taskloom.engine.versions.VersionStore.live_versions`."""
    found = raw.execute(
        "SELECT loaded FROM processes WHERE expires_at > ?", (rows.micros(now),)
    ).fetchall()
    return frozenset((name, version) for (loaded,) in found for name, version in json.loads(loaded))


def first_live_process(raw: sqlite3.Connection, now: datetime) -> str | None:
    """See :meth:`taskloom.engine.versions.VersionStore.first_live_process`."""
    (first,) = raw.execute(
        "SELECT min(id) FROM processes WHERE expires_at > ? AND seen_at <= ?",
        (rows.micros(now), rows.micros(now + AHEAD_AT_MOST)),
    ).fetchone()
    return cast(str | None, first)


def unfinished_versions(raw: sqlite3.Connection, now: datetime) -> list[StoredVersion]:
    """See :meth:`taskloom.engine.versions.VersionStore.unfinished_versions`."""
    found = raw.execute(
        "SELECT name, workflow_version, count(*), min(created_us)"
        f" FROM tasks WHERE state IN ({_ACTIVE}) AND {rows.LIVE} GROUP BY 1, 2",
        (rows.micros(now),),
    ).fetchall()
    stored = [
        StoredVersion(name=name, version=version, unfinished=count, oldest=rows.from_micros(oldest))
        for name, version, count, oldest in found
    ]
    return sorted(stored, key=lambda each: version_sort_key(each.name, each.version))
