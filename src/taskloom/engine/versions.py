"""Workflow versions across processes (ADR 0039): which versions the live processes have
loaded, which versions stored runs wait for, and what an operator may remove.

Each worker records the (name, version) pairs it has loaded in the store, with a time
after which the record lapses (a few heartbeat periods). A run whose version no live
process has loaded is *waiting for a process*: no worker fails it or takes it; it
resumes once a process with that version starts.
"""

from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Final, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict

from taskloom.engine.claims import WorkflowKey
from taskloom.engine.errors import TaskNotFoundError, TaskStateError
from taskloom.engine.models import Task, TaskId, UtcDatetime
from taskloom.engine.registry import version_order
from taskloom.engine.runs import NodeRun
from taskloom.engine.states import TaskState

if TYPE_CHECKING:
    from taskloom.engine.manager import TaskManager

FORGET_AFTER: Final = timedelta(days=1)
"""A process record that lapsed this long ago is deleted (its process is gone)."""
AHEAD_AT_MOST: Final = timedelta(minutes=1)
"""A process record seen later than this after a reader's *now* was written by a clock
that runs ahead: it does not take part in choosing the process that marks (ADR 0068), so
a dead process whose clock ran ahead does not stop the fleet's marking until its record
lapses by the others' clocks (a live one only marks alongside the first)."""


def version_sort_key(name: str, version: str | None) -> tuple[str, tuple[int, ...], str]:
    """Sort by name, then versions as numbers (ADR 0039), non-numbers by text."""
    return (name, version_order(version or "") or (), version or "")


class StoredVersion(BaseModel):
    """The unfinished runs of one (name, recorded version) in the store."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    version: str | None
    """``None``: runs that recorded no version."""
    unfinished: int
    oldest: UtcDatetime
    """When the oldest of them was created."""


RunMove = Callable[[Task, Mapping[str, NodeRun]], Task]
"""The change :meth:`VersionStore.move_run` makes: the task and its checkpoints, both as
stored now, to the task's next version (or an engine error that refuses the move)."""


@runtime_checkable
class VersionStore(Protocol):
    """What processes have loaded, and what stored runs need. Each method is one
    transaction."""

    async def record_loaded(
        self, process: str, loaded: Iterable[WorkflowKey], now: datetime, until: datetime
    ) -> None:
        """Record that *process* has *loaded* these versions, live until *until*; forget
        records that lapsed long ago."""
        ...

    async def forget_process(self, process: str) -> None:
        """Drop *process*'s record (it stops)."""
        ...

    async def live_versions(self, now: datetime) -> frozenset[WorkflowKey]:
        """Every (name, version) some process whose record is live at *now* has loaded."""
        ...

    async def first_live_process(self, now: datetime) -> str | None:
        """The first id, in the store's order of text, among the processes whose record
        is live at *now* and was seen no later than ``AHEAD_AT_MOST`` after *now* (its
        clock ran ahead); ``None`` when none is. Every process of one store gets the
        same answer from the same records (ADR 0068)."""
        ...

    async def unfinished_versions(self, now: datetime) -> Sequence[StoredVersion]:
        """Per (name, recorded version), the unexpired unfinished runs: how many and when
        the oldest was created; sorted by name, then version."""
        ...

    async def move_run(self, task_id: TaskId, now: datetime, move: RunMove) -> Task:
        """Store ``move(task, checkpoints)`` over the unfinished task *task_id*, in one
        transaction, unless a worker holds a live lease on it.

        Raises:
            TaskNotFoundError: no live task has this id.
            TaskStateError: a worker is running it now.
            TaskloomError: whatever *move* raised (nothing is written).
        """
        ...


def running_now(task_id: TaskId, worker: str) -> str:
    """Why a run cannot move to another version now."""
    return (
        f"task {task_id} is running in worker {worker}; a run moves to another version "
        "only while no worker runs it (stop that worker, or wait until the run waits)"
    )


def waiting_for_process(task: Task, live: frozenset[WorkflowKey]) -> str | None:
    """What *task* waits for when no live process has its version: ``"waiting for a
    process that has vflow version 1"``; ``None`` when some process can take it (or it
    has ended, or waits for a person)."""
    version = task.workflow_version
    if task.is_terminal or task.state is TaskState.INPUT_REQUIRED or version is None:
        return None
    if (task.name, version) in live:
        return None
    return f"waiting for a process that has {task.name} version {version}"


class VersionLine(BaseModel):
    """One workflow version as an operator sees it: where it is loaded, what it has left."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    version: str | None
    loaded_here: bool
    """This process has it (it would run its runs)."""
    loaded_elsewhere: bool
    """A live process (a worker) has it, per the store's records."""
    newest: bool
    """The newest version of its workflow loaded here or by a live process: new calls
    get it (on PostgreSQL a process with only older ones serves its own newest)."""
    unfinished: int
    oldest: UtcDatetime | None
    """Creation of its oldest unfinished run."""

    @property
    def safe_to_remove(self) -> bool:
        """No unfinished run needs it, and new calls do not get it."""
        return self.unfinished == 0 and not self.newest

    @property
    def orphaned(self) -> bool:
        """Unfinished runs need it and no live process (nor this one) has it."""
        return self.unfinished > 0 and not (self.loaded_here or self.loaded_elsewhere)

    @property
    def note(self) -> str:
        """What an operator should know of it, in a few words."""
        runs = f"{self.unfinished} unfinished run{'s' if self.unfinished != 1 else ''}"
        if self.orphaned:
            waits = "run waits" if self.unfinished == 1 else "runs wait"
            return f"no process has it: {self.unfinished} {waits}"
        if self.newest:
            return "newest: new calls get it"
        if self.safe_to_remove:
            return "safe to remove"
        return f"draining: {runs}"


def version_report(
    loaded_here: Iterable[WorkflowKey],
    live: frozenset[WorkflowKey],
    stored: Sequence[StoredVersion],
) -> list[VersionLine]:
    """Every version loaded here, by a live process, or needed by a stored unfinished run,
    sorted by name then version (as numbers). The newest of a workflow is taken over
    this process's versions and the live processes' alike: listed from a machine that
    loads none, the version the workers serve is still the newest, never "safe to
    remove"."""
    here = frozenset(loaded_here)
    loaded = sorted(here | live, key=lambda key: version_sort_key(*key))
    newest = dict(loaded)  # the last wins
    counts = {(each.name, each.version): each for each in stored}
    keys: set[tuple[str, str | None]] = {*here, *live, *counts}
    lines = []
    for key in sorted(keys, key=lambda key: version_sort_key(*key)):
        name, version = key
        found = counts.get(key)
        lines.append(
            VersionLine(
                name=name,
                version=version,
                loaded_here=key in here,
                loaded_elsewhere=key in live,
                newest=newest.get(name) == version,
                unfinished=found.unfinished if found is not None else 0,
                oldest=found.oldest if found is not None else None,
            )
        )
    return lines


MARKED_PER_PASS: Final = 100
PAGES_PER_PASS: Final = 20
"""At most this many runs of one version get their status message per pass."""


async def mark_waiting_runs(manager: "TaskManager", store: VersionStore) -> int:
    """Write "waiting for a process that has vflow version 1" as the status message of
    queued runs whose version no live process has (so MCP clients and the dashboard,
    which show the stored message, say it too); a process that has the version replaces
    it as it claims the run. Return how many were written."""
    now = manager.clock.now()
    live = await store.live_versions(now)
    stored = await store.unfinished_versions(now)
    written = 0
    for line in version_report((), live, stored):
        if not line.orphaned or line.version is None:
            continue
        async for task in _queued_of(manager, line.name, line.version):
            message = waiting_for_process(task, live)
            if message is None or task.status_message == message:
                continue
            try:
                await manager.note_queued(task.id, message)
            except (TaskStateError, TaskNotFoundError):
                continue  # claimed, cancelled or deleted meanwhile
            written += 1
    return written


async def mark_if_first(manager: "TaskManager", store: VersionStore, process: str) -> int | None:
    """The fleet's pass (ADR 0068): :func:`mark_waiting_runs` when *process* is the
    first of the live process records (:meth:`VersionStore.first_live_process`), or none
    is live, so one process of a fleet reads the unfinished runs each period and the
    others skip it (a process alone marks every period, as before). Return how many runs
    it marked; ``None`` when another process marks."""
    first = await store.first_live_process(manager.clock.now())
    if first is not None and first != process:
        return None
    return await mark_waiting_runs(manager, store)


async def _queued_of(manager: "TaskManager", name: str, version: str) -> AsyncIterator[Task]:
    """Up to ``MARKED_PER_PASS`` queued runs of *name* at *version*, newest first, read
    a page at a time (at most ``PAGES_PER_PASS``): runs of live versions of the same
    workflow may queue before them, and must not hide them."""
    cursor: str | None = None
    found = 0
    for _ in range(PAGES_PER_PASS):
        page = await manager.list(
            states=[TaskState.QUEUED], names=[name], limit=MARKED_PER_PASS, cursor=cursor
        )
        for task in page.tasks:
            if task.workflow_version == version:
                yield task
                found += 1
                if found >= MARKED_PER_PASS:
                    return
        cursor = page.next_cursor
        if cursor is None:
            return
