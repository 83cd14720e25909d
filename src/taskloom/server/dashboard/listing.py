"""The task list: newest first, filtered, counted by state, a keyset page at a time."""

from dataclasses import dataclass
from datetime import timedelta
from typing import Final
from urllib.parse import urlencode

from starlette.datastructures import QueryParams

from taskloom.engine.errors import InvalidCursorError, TaskNotFoundError
from taskloom.engine.models import MAX_KEY_LENGTH, Task
from taskloom.engine.states import TaskState
from taskloom.server.dashboard.access import Viewer
from taskloom.server.dashboard.context import Dashboard
from taskloom.server.dashboard.seen import digest

PAGE_SIZE: Final = 50
COUNT_LIMIT: Final = 10_000
"""Counts by state stop here (shown as "10,000+"): a count costs at most this many index
reads, whatever the number of tasks."""
SINCE: Final = {
    "1h": ("last hour", timedelta(hours=1)),
    "24h": ("last 24 hours", timedelta(days=1)),
    "7d": ("last 7 days", timedelta(days=7)),
    "30d": ("last 30 days", timedelta(days=30)),
}


class BadFilter(ValueError):
    """A filter or cursor the list cannot use (a one-line reason)."""


@dataclass(frozen=True)
class Filters:
    """The list's query string, checked."""

    state: TaskState | None = None
    workflow: str | None = None
    since: str | None = None
    search: str | None = None
    cursor: str | None = None

    @classmethod
    def parse(cls, params: QueryParams) -> "Filters":
        """The filters of a request's query string.

        Raises:
            BadFilter: an unknown state or period, or a value too long.
        """
        state = params.get("state") or None
        if state is not None and state not in TaskState.__members__.values():
            raise BadFilter(f"unknown state {state[:40]!r}")
        since = params.get("since") or None
        if since is not None and since not in SINCE:
            raise BadFilter(f"unknown period {since[:40]!r}: one of {', '.join(SINCE)}")
        values = [params.get(name, "").strip() or None for name in ("workflow", "q", "cursor")]
        if any(value is not None and len(value) > MAX_KEY_LENGTH for value in values):
            raise BadFilter(f"a filter is longer than {MAX_KEY_LENGTH} characters")
        workflow, search, cursor = values
        return cls(TaskState(state) if state else None, workflow, since, search, cursor)

    def query(self, **changes: str | None) -> str:
        """This list's query string with *changes* (``None`` removes a key); the cursor
        goes unless given."""
        values = {
            "state": self.state.value if self.state else None,
            "workflow": self.workflow,
            "since": self.since,
            "q": self.search,
        }
        values.update(changes)
        kept = {key: value for key, value in values.items() if value}
        return "?" + urlencode(kept) if kept else ""


@dataclass(frozen=True)
class Listing:
    """One page of the list, with the counts and what the filters offer."""

    tasks: tuple[Task, ...]
    counts: dict[str, int]
    next_cursor: str | None
    workflows: tuple[str, ...]
    count_limit: int
    """Counts stop here: a count equal to it means at least that many."""

    def fingerprint(self) -> tuple[object, ...]:
        """What a live list compares to tell whether it changed."""
        return (
            tuple(sorted(self.counts.items())),
            tuple((task.id, task.version) for task in self.tasks),
            self.next_cursor is not None,  # the "Older" link
        )

    def seen(self) -> str:
        """The digest a page shows this with (:mod:`.seen`)."""
        return digest(self.fingerprint())


async def exact_match(dashboard: Dashboard, viewer: Viewer, filters: Filters) -> Task | None:
    """The task whose id is the search, if the viewer sees one."""
    if filters.search is None:
        return None
    try:
        return await dashboard.manager.get(filters.search, owner=viewer.owner)
    except TaskNotFoundError:
        return None


async def listing(dashboard: Dashboard, viewer: Viewer, filters: Filters) -> Listing:
    """The page the filters ask for.

    Raises:
        BadFilter: the cursor was not issued here.
    """
    manager = dashboard.manager
    created_after = None
    if filters.since is not None:
        created_after = manager.clock.now() - SINCE[filters.since][1]
    try:
        page = await manager.list(
            owner=viewer.owner,
            states=[filters.state] if filters.state else None,
            names=[filters.workflow] if filters.workflow else None,
            id_prefix=filters.search,
            created_after=created_after,
            cursor=filters.cursor,
            limit=PAGE_SIZE,
        )
    except InvalidCursorError as error:
        raise BadFilter(str(error)) from None
    limit = COUNT_LIMIT
    counts = await manager.count_by_state(owner=viewer.owner, at_most=limit)
    ordered = {state.value: counts.get(state, 0) for state in TaskState}
    workflows = set(dashboard.workflows)
    if filters.workflow:
        workflows.add(filters.workflow)
    return Listing(page.tasks, ordered, page.next_cursor, tuple(sorted(workflows)), limit)
