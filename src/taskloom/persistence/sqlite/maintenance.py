"""Health of a database file, for ``taskloom db check``: SQLite's own checks and counts."""

import sqlite3

from pydantic import BaseModel, ConfigDict

from taskloom.persistence.sqlite import schema


class StoreHealth(BaseModel):
    """What a check found: problems (none when healthy), schema version and task counts."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    problems: tuple[str, ...]
    schema_version: int
    latest_version: int
    tasks_by_state: dict[str, int]
    leases: int


def health(raw: sqlite3.Connection) -> StoreHealth:
    """Run ``integrity_check`` and ``foreign_key_check`` and count what the file holds."""
    problems = [str(row[0]) for row in raw.execute("PRAGMA integrity_check(20)") if row[0] != "ok"]
    orphans = raw.execute("PRAGMA foreign_key_check").fetchall()
    if orphans:
        problems.append(f"{len(orphans)} row(s) refer to tasks that do not exist")
    counts = dict(raw.execute("SELECT state, count(*) FROM tasks GROUP BY state ORDER BY state"))
    leases = raw.execute("SELECT count(*) FROM leases").fetchone()[0]
    return StoreHealth(
        problems=tuple(problems),
        schema_version=raw.execute("PRAGMA user_version").fetchone()[0],
        latest_version=schema.latest_version(),
        tasks_by_state={str(state): int(count) for state, count in counts.items()},
        leases=int(leases),
    )
