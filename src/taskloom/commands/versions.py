"""Workflow versions in a database (ADR 0039): what each stored version still needs and
who has it, for ``taskloom workflows list``, ``taskloom tasks list`` and the metrics."""

import sys
from datetime import UTC, datetime
from typing import Any

import anyio

from taskloom.commands.base import CommandError
from taskloom.commands.common import open_store
from taskloom.engine.claims import WorkflowKey
from taskloom.engine.errors import TaskloomError
from taskloom.engine.versions import VersionLine, VersionStore, version_report
from taskloom.persistence.postgres import is_postgres_url


async def read_report(db: str, loaded_here: frozenset[WorkflowKey]) -> list[VersionLine] | None:
    """The versions of *db* (stored runs, live processes) beside *loaded_here*; ``None``
    when there is no database yet (an SQLite file that does not exist), or it cannot be
    read (said on stderr: too old a schema, unreachable)."""
    if not is_postgres_url(db) and not await anyio.Path(db).is_file():
        return None
    try:
        async with open_store(db, read_only=True) as store:
            if not isinstance(store, VersionStore):
                return None
            now = datetime.now(UTC)
            live = await store.live_versions(now)
            stored = await store.unfinished_versions(now)
    except (TaskloomError, CommandError) as error:  # the loaded versions are still worth it
        print(f"taskloom: the versions in {db} are not shown: {error}", file=sys.stderr)
        return None
    return version_report(loaded_here, live, stored)


def note(line: VersionLine) -> str:
    """What an operator should know of *line*, in a few words."""
    return line.note


def loaded_where(line: VersionLine) -> str:
    """``here``, ``workers``, both, or ``no``."""
    places = [
        place
        for place, has in (("here", line.loaded_here), ("workers", line.loaded_elsewhere))
        if has
    ]
    return ", ".join(places) or "no"


def line_json(line: VersionLine) -> dict[str, Any]:
    """One version as ``--json`` shows it."""
    return {
        **line.model_dump(mode="json"),
        "safe_to_remove": line.safe_to_remove,
        "waiting_for_a_process": line.orphaned,
        "note": note(line),
    }
