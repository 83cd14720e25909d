"""A worker: claims runs from the store, executes them, and keeps their leases alive.

Any number of workers (threads of one process or many processes) may share a store:
claims are atomic, and every write of a run is fenced by its lease token, so a run is
executed by one worker at a time even when a presumed-dead worker wakes up.

A store that fails (a database outage longer than its retries) is never fatal to a
worker: a failed claim or heartbeat is logged and tried again at its next period, and a
run whose write failed is dropped and its lease handed back once the store answers, so
that this or another worker resumes it from its checkpoints (ADR 0017).
"""

import contextlib
import logging
import secrets
import socket
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from datetime import datetime, timedelta
from typing import Any

import anyio
from anyio.abc import TaskStatus
from pydantic import BaseModel, ConfigDict, Field

from taskloom.engine.claims import ClaimRule
from taskloom.engine.dag import Workflow
from taskloom.engine.errors import StoreUnavailableError, TaskloomError, TaskNotFoundError
from taskloom.engine.manager import TaskManager
from taskloom.engine.models import Task, TaskId
from taskloom.engine.registry import loaded_versions, workflow_for
from taskloom.engine.runner import RunExecution
from taskloom.engine.runs import ClaimedRun, Lease, RunStore
from taskloom.engine.states import TaskState, is_terminal
from taskloom.engine.versions import VersionStore, mark_if_first

logger = logging.getLogger(__name__)

_MARK_EVERY_S = 15.0
"""How often a worker looks for queued runs that no live process can take, to say so in
their status message (at its first record, then at most this often)."""

_CLAIMABLE_STATES = frozenset({TaskState.QUEUED, TaskState.INPUT_REQUIRED})
"""The states in which another process's change may make a run claimable (a new or
parked run, an answer arriving for one)."""

_MOST_UNREAD = 64
"""New runs a full worker remembers to read later; older ones wait for its polls."""
_MOST_ENDED_KEPT = 64
"""Announced ends of runs this worker did not execute, kept for a claim in flight: the
window is one claim's round trip, in which few runs of a fleet end."""

_FORGET_S = 2.0
"""How long a stopping worker tries to drop its record of loaded versions."""


class WorkerSettings(BaseModel):
    """How many runs a worker takes on, and how it keeps and finds them."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    max_runs: int = Field(default=100, ge=1)
    """Runs executed at once by this worker."""
    max_runs_per_owner: int | None = Field(default=None, ge=1)
    """Runs of one named principal executed at once by this worker; by default half of
    ``max_runs`` (at least 1), so one principal cannot take every slot and another's
    task starts at once (ADR 0028). The local user (tasks with no owner: stdio, the CLI,
    HTTP without tokens) is never capped: it is the only caller there is. Claims are fair
    across owners either way."""
    node_concurrency: int = Field(default=16, ge=1)
    """Nodes run at once within one run, unless its workflow says otherwise."""
    lease_s: float = Field(default=10.0, gt=0)
    """How long a run stays claimed without a heartbeat; another worker may then take it."""
    heartbeat_s: float | None = Field(default=None, gt=0)
    """Heartbeat period; a third of ``lease_s`` by default."""
    poll_s: float = Field(default=1.0, gt=0)
    """How often to look for work that no in-process notification announced (other
    processes' tasks, expired leases)."""
    progress_interval_s: float = Field(default=0.1, ge=0)
    """Shortest time between two progress writes of one run."""
    eager_start: bool = True
    """Start a task created in this process at once, claimed by the create's own
    transaction, when this worker has a free slot, loads its workflow's version, its
    owner is under ``max_runs_per_owner`` and no older run waits for the slot;
    otherwise the task is queued as any other (ADR 0046). While the worker claims, a
    create of the local user may take a free slot the claim did not ask for: a worker
    that creates the local user's tasks leaves half its free slots (rounded down) out of
    a claim when its last claim found fewer runs than it asked for and nothing woke it
    since (ADR 0075)."""
    input_recheck_s: float | None = Field(default=1.0, gt=0)
    """Unused since ADR 0021 (kept so existing configurations still load): no node waits
    in a worker; a parked run is claimed again when its answer arrives (this process's
    notifications, PostgreSQL's NOTIFY, or the next poll)."""


def per_owner_limit(settings: WorkerSettings) -> int:
    """The runs of one owner a worker executes at once (see ``max_runs_per_owner``)."""
    if settings.max_runs_per_owner is not None:
        return settings.max_runs_per_owner
    return max(1, settings.max_runs // 2)


def default_worker_id() -> str:
    """A worker id that says where the worker runs and tells incarnations apart."""
    return f"{socket.gethostname()}-{secrets.token_hex(4)}"


class Worker:
    """Runs workflows' tasks from a store until cancelled."""

    def __init__(
        self,
        manager: TaskManager,
        workflows: Mapping[str, Workflow[Any]],
        *,
        settings: WorkerSettings | None = None,
        worker_id: str | None = None,
        reclaim_from: str | None = None,
    ) -> None:
        self.manager = manager
        self.runs: RunStore = manager.runs
        """Where node checkpoints and leases go; task state goes through the manager."""
        self.workflows = workflows
        """The workflows it runs: a registry's every version, or one per name."""
        self._loaded = loaded_versions(workflows)
        self._rule = ClaimRule.of(self._loaded)
        self.settings = settings or WorkerSettings()
        self.worker_id = worker_id or default_worker_id()
        self._reclaim_from = reclaim_from
        self._executions: dict[TaskId, RunExecution] = {}
        self._finished: dict[RunExecution, anyio.Event] = {}
        """Set once an execution's body has ended (a replacement waits for it)."""
        self._held_until: dict[RunExecution, float] = {}
        """The latest each execution's lease may run out (``anyio.current_time()``): the
        start of the claim or renewal that set it plus ``lease_s``."""
        self._wake = anyio.Event()
        self._saturated = False
        """Runs may be waiting for a free slot: look again as soon as one frees up."""
        self._claiming = False
        """A claim is under way (its store may count leases of runs ending meanwhile)."""
        self._claim_limit = 0
        """The runs the claim under way may take (0 when none is): an eager start meanwhile
        needs a free slot beyond them."""
        self._offered = False
        """Whether a create of the local user offered this worker a task since its last
        claim: it creates such tasks itself, so its next claim leaves slots for their
        eager starts (a named owner's create never starts during a claim)."""
        self._ended_in_claim: Counter[str] = Counter()
        """Runs of named owners that ended while the claim under way was being made."""
        self._unread: dict[TaskId, None] = {}
        """New runs of other processes not read while every slot was taken (oldest first)."""
        self._ended_unadopted: dict[TaskId, None] = {}
        """Runs another process ended (a cancel) while this worker did not execute them,
        newest last: one its claim or eager create was taking meanwhile is read again
        once adopted, so a cancel announced before the claim returned still stops it."""
        self._owners: dict[TaskId, str | None] = {}
        """The owner of each run in ``_executions`` (for the per-owner limit)."""
        self._dropped: dict[TaskId, Lease] = {}
        """Leases of runs stopped by an error, to hand back once the store answers."""
        self._task_group: anyio.abc.TaskGroup | None = None
        self._idle = False
        """Its last claim found fewer runs than it asked for, and nothing woke it since:
        no older run can be waiting for it, so a new one may start eagerly (ADR 0046), in
        a slot that a claim under way did not ask for (ADR 0075)."""
        self._reserved: dict[TaskId, str | None] = {}
        """Slots held for tasks whose eager create is committing: task id -> owner. A
        claim counts them as taken, against ``max_runs`` and the owner's cap alike."""
        self._leaving: list[Callable[[TaskId], None]] = []
        """Called with a run's id as this worker stops executing it (:meth:`leaving`)."""

    @property
    def active_runs(self) -> int:
        """Runs this worker is executing now."""
        return len(self._executions)

    def executes(self, task_id: str) -> bool:
        """Whether this worker is executing *task_id*'s run now."""
        return task_id in self._executions

    @contextlib.contextmanager
    def leaving(self, listener: Callable[[TaskId], None]) -> Iterator[None]:
        """Within the block, call *listener* with a run's id each time this worker stops
        executing it: it ended, lost its lease, was dropped or stopped, or a claim of the
        same run replaced its execution. Every change that execution made in this
        process has been published by then (a final write that outlives its bound
        excepted; a replaced execution's body may still be stopping). A listener that
        raises is logged and does not stop the worker."""
        self._leaving.append(listener)
        try:
            yield
        finally:
            self._leaving.remove(listener)

    def _left(self, task_id: TaskId) -> None:
        for listener in tuple(self._leaving):
            try:
                listener(task_id)
            except Exception:  # a listener's fault must not end the worker's runs
                logger.exception("worker %s: a listener of runs leaving failed", self.worker_id)

    def wake(self) -> None:
        """Look for work now rather than at the next poll."""
        self._idle = False  # work may be waiting: a new run must not overtake it
        self._wake.set()

    def reserve(self, task: Task) -> "EagerSlot | None":
        """A slot to run *task*, about to be created, at once (eager start: see
        ``WorkerSettings.eager_start``), or ``None``: it goes through the queue."""
        if task.owner is None:
            self._offered = True  # a claim leaves slots out for such creates (ADR 0075)
        if not self._idle or self._task_group is None:
            return None
        if self._free_slots() <= self._claim_limit:
            return None  # none free, or every free one may go to the claim under way
        if self._claiming and task.owner is not None:
            return None  # that claim may fill the owner's cap: it counted what it saw
        if not self._rule.admits(task, None, self.manager.clock.now()):
            return None  # the claim's own rule: a version this worker has loaded
        if task.owner is not None and self._held_by(task.owner) >= per_owner_limit(self.settings):
            return None
        self._reserved[task.id] = task.owner
        return EagerSlot(self, task.id)

    def release_slot(self, task_id: TaskId, *, unused: bool = False) -> None:
        """Free the slot :meth:`reserve` held for task *task_id*; *unused*: no run took
        it (nothing was created), so work that a claim or a full worker left waiting for
        it (the claim counted it as taken) is looked for now."""
        owner = self._reserved.pop(task_id)
        if unused and (self._claiming or self._saturated or self._was_full(owner)):
            self.wake()

    def _was_full(self, owner: str | None, freed: int = 1) -> bool:
        """Whether *owner* held every slot it may before *freed* of its slots were freed."""
        limit = per_owner_limit(self.settings)
        return owner is not None and self._held_by(owner) + freed >= limit

    def start_eagerly(self, run: ClaimedRun, asked: float) -> None:
        """Run *run* now: its create, begun at *asked*, claimed it for this worker. A
        worker stopped meanwhile leaves it: its lease lapses and any worker resumes it."""
        if self._task_group is not None:
            self._adopt(run, asked, self._task_group)

    def hand_back(self, lease: Lease) -> None:
        """Give *lease* back at the next heartbeat or claim that the store answers (a
        create that claimed its run may have committed although it failed): not at
        once, when a store that just failed is likely to fail again."""
        self._dropped[lease.task_id] = lease

    def _free_slots(self) -> int:
        return self.settings.max_runs - len(self._executions) - len(self._reserved)

    def _held_by(self, owner: str) -> int:
        """Slots *owner*'s runs hold here, reserved ones included."""
        running = sum(1 for task_id in self._executions if self._owners.get(task_id) == owner)
        return running + sum(1 for reserved in self._reserved.values() if reserved == owner)

    @contextlib.contextmanager
    def _offering(self) -> Iterator[None]:
        """Offer this worker for eager starts while it runs (if its settings say so);
        once it stops, a reservation still committing finds no task group to start in."""
        try:
            if self.settings.eager_start:
                with self.manager.eager_starts(self):
                    yield
            else:
                yield
        finally:
            self._idle = False
            self._task_group = None

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Claim and execute runs until cancelled (the runs in flight are then cancelled
        too; their leases expire and another worker resumes them from their checkpoints)."""
        async with anyio.create_task_group() as task_group:
            self._task_group = task_group
            task_group.start_soon(self._heartbeat)
            if isinstance(self.runs, VersionStore):
                await task_group.start(self._announce, self.runs)
            task_group.start_soon(self._fence)
            await task_group.start(self._watch)
            task_status.started()
            with self._offering(), self.manager.hearing_released_runs(self._released):
                while True:
                    try:
                        await self._claim(task_group)
                    except Exception as error:  # noqa: BLE001  # never fatal: try next poll
                        _log_failure(self.worker_id, "claim", error, self.settings.poll_s)
                    with anyio.move_on_after(self.settings.poll_s):
                        await self._wake.wait()
                    self._wake = anyio.Event()

    async def _claim(self, task_group: anyio.abc.TaskGroup) -> None:
        with contextlib.suppress(Exception):  # the heartbeat hands back too, and logs it
            await self._hand_back()  # a dropped run is claimable again at once
        free = self._free_slots()
        if free <= 0:
            self._idle = False
            self._saturated = True
            return
        # An idle worker that creates local tasks leaves half its free slots out of a claim,
        # for creates to start eagerly while it is under way; otherwise each claim would
        # queue the creates made meanwhile, whose wakes make the next claim, and under a
        # steady load eager start would stay off (ADR 0075).
        spare = free // 2 if self._idle and self._offered else 0
        self._idle, self._offered = spare > 0, False
        limit = free - spare
        asked = anyio.current_time()
        self._claiming, self._claim_limit, self._ended_in_claim = True, limit, Counter()
        try:
            claimed = await self.manager.claim(
                worker=self.worker_id,
                workflows=frozenset(self._loaded),  # only the versions it has (ADR 0039)
                lease_for=timedelta(seconds=self.settings.lease_s),
                limit=limit,
                reclaim_from=self._reclaim_from,
                per_owner=per_owner_limit(self.settings),
                reserved=dict(self._reserved),  # held too: an owner's cap counts them
            )
        except BaseException:
            self._idle = False  # whether work waits is unknown: no eager start until told
            raise
        finally:
            self._claiming, self._claim_limit = False, 0
        self._reclaim_from = None  # a dead incarnation's runs are taken back once, at start
        for run in claimed:
            self._adopt(run, asked, task_group)
        if any(self._was_full(owner, n) for owner, n in self._ended_in_claim.items()):
            self.wake()  # the claim may have counted their leases: its owner's runs wait
        self._saturated = len(claimed) == limit
        if self._saturated:
            self.wake()  # there may be more
        else:  # the queue held nothing more for it, unless a wake came during the claim
            self._idle = not self._wake.is_set()
            if self._unread:  # read beside the claims: a slow read never holds one up
                task_group.start_soon(self._read_unread, list(self._unread))
                self._unread = {}

    async def _read_unread(self, unread: list[TaskId]) -> None:
        """Read the runs other processes queued while every slot was taken (not read
        then, :meth:`_wants`) once a claim found none of them claimable: one parked on a
        timer shorter than the poll period gets its wake, as if read when announced. A
        store that fails a read ends them (the polls find those runs)."""
        try:
            for task_id in unread:
                if task_id in self._executions:
                    continue
                with contextlib.suppress(TaskNotFoundError):  # ended and gone meanwhile
                    self._react(await self.manager.get(task_id))
        except Exception as error:  # noqa: BLE001  # never fatal: the polls find them
            _log_failure(self.worker_id, "reading new runs", error, self.settings.poll_s)

    def _adopt(self, run: ClaimedRun, asked: float, task_group: anyio.abc.TaskGroup) -> None:
        """Put *run*, claimed by a transaction that began at *asked*, in the map of
        executions (the heartbeat renews its lease from then on) and start it."""
        execution = self._execution(run)
        replaced = self._executions.get(run.task.id)
        if replaced is not None:  # our lease had expired: its body must end first
            replaced.stop(lost_lease=True)
        self._executions[run.task.id] = execution
        if replaced is not None:
            self._left(run.task.id)
        self._finished[execution] = anyio.Event()
        self._held_until[execution] = asked + self.settings.lease_s
        self._owners[run.task.id] = run.task.owner
        task_group.start_soon(self._execute, execution, replaced)
        if self._ended_unadopted.pop(run.task.id, "not announced") is None:
            # Another process ended it while the claim (or the eager create) that took it
            # was under way: its announcement found no execution to stop; read it now.
            task_group.start_soon(self.manager.notice, run.task.id)  # published, so reacted to

    def _execution(self, claimed: ClaimedRun) -> RunExecution:
        return RunExecution(
            claimed=claimed,
            workflow=self._workflow_of(claimed.task),
            manager=self.manager,
            node_concurrency=self.settings.node_concurrency,
            progress_interval_s=self.settings.progress_interval_s,
        )

    def _workflow_of(self, task: Task) -> Workflow[Any]:
        """The version of its workflow *task* runs on: the one it started with."""
        workflow = workflow_for(self.workflows, task.name, task.workflow_version)
        if workflow is None:  # the claim admits only loaded versions
            raise AssertionError(f"claimed {task.id} of {task.name} {task.workflow_version}")
        return workflow

    async def _execute(self, execution: RunExecution, replaced: RunExecution | None) -> None:
        """Execute *execution*, once the body of the execution it *replaced* (the same
        run, claimed again by this worker after its lease expired) has ended: a run never
        has two bodies at once (ADR 0038)."""
        try:
            if replaced is not None and replaced in self._finished:
                await self._finished[replaced].wait()
            await execution.execute()
        except Exception as error:  # one run's failure never ends the worker
            logger.log(
                logging.INFO if _is_outage(error) else logging.WARNING,  # the store said it
                "worker %s dropped run %s: %s; its lease is handed back once the store answers",
                self.worker_id,
                execution.task_id,
                _describe(error),
                exc_info=not _is_store_failure(error),
            )
            self._dropped[execution.task_id] = execution.lease
        finally:
            self._held_until.pop(execution, None)
            self._finished.pop(execution).set()
            if self._executions.get(execution.task_id) is execution:  # not replaced
                del self._executions[execution.task_id]
                self._left(execution.task_id)
                if self._owner_was_full(execution) or self._saturated:
                    self.wake()  # a slot freed up for work that was left waiting
            if execution.parked_until is not None:
                self._wake_at(execution.parked_until)

    def _owner_was_full(self, ended: RunExecution) -> bool:
        """Whether the owner of *ended* held every slot it may before it ended; during a
        claim (whose store may have counted the lease of *ended*), the claim's end asks
        once it has taken its runs."""
        owner = self._owners.pop(ended.task_id, None)
        if owner is None:
            return False
        if self._claiming:
            self._ended_in_claim[owner] += 1
            return False
        return self._was_full(owner)

    async def _watch(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """React to this process's changes at once: new work, and cancellations."""
        with self.manager.subscribe(wants=self._wants) as changes:
            task_status.started()
            async for task in changes:
                self._react(task)

    def _wants(self, task_id: TaskId, state: TaskState) -> bool:
        """Whether another process's change of *task_id* to *state* may concern this
        worker (:meth:`_react`): work it may claim, or a run it executes. Other workers'
        claims and ends are not read (each would cost a read per worker), nor a new run
        while every slot is taken: the worker claims as soon as a slot frees up."""
        if task_id in self._executions:
            return True
        if is_terminal(state):
            self._ended_unadopted[task_id] = None  # see _adopt: a claim may be taking it
            if len(self._ended_unadopted) > _MOST_ENDED_KEPT:
                del self._ended_unadopted[next(iter(self._ended_unadopted))]
            return False
        if state is TaskState.QUEUED and self._free_slots() <= 0:
            self._idle = False  # as a wake would: work may be waiting for this worker
            self._saturated = True
            self._unread[task_id] = None  # read if the claim a free slot makes comes back short
            if len(self._unread) > _MOST_UNREAD:
                del self._unread[next(iter(self._unread))]  # the polls find the oldest
            return False
        return state in _CLAIMABLE_STATES

    def _released(self, task_id: TaskId) -> None:
        """Another process handed back the run of *task_id* (``events.RELEASED``):
        claim now if a slot is free, else as soon as one frees up. Not read: the claim's
        rule decides whether this worker may take it (a version it has loaded)."""
        if task_id in self._executions:
            return
        if self._free_slots() > 0:
            self.wake()
        else:
            self._saturated = True  # a slot that frees up claims at once

    def _react(self, task: Task | None, task_id: TaskId | None = None) -> None:
        if task is None:
            execution = self._executions.get(task_id) if task_id is not None else None
            if execution is not None:
                execution.stop()
            return
        execution = self._executions.get(task.id)
        if execution is not None and task.is_terminal:
            execution.stop()
        elif execution is not None or not self._rule.has_version(task.name, task.workflow_version):
            return
        elif task.parked:  # claimable once its wait is over (an answer sets wake_at)
            if task.wake_at is not None:
                self._wake_at(task.wake_at)
        elif task.state is TaskState.QUEUED:
            self.wake()

    def _wake_at(self, when: datetime) -> None:
        """Look for work at *when* (a parked run's timer). Later than a poll period from
        now, the polls find it (to within ``poll_s``)."""
        delay = (when - self.manager.clock.now()).total_seconds()
        if delay <= 0:
            self.wake()
        elif delay < self.settings.poll_s and self._task_group is not None:
            self._task_group.start_soon(self._wake_after, delay)

    async def _wake_after(self, delay: float) -> None:
        await anyio.sleep(delay)
        self.wake()

    async def _announce(
        self, versions: VersionStore, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        """Record in the store, every heartbeat period, the versions this worker has
        loaded (live for three periods), so that a run waiting for a version no process
        has says so (ADR 0039); forget the record when the worker stops. Every 15 s, and
        once before its first claim, mark those runs if this worker is the first of the
        live records: one process of a fleet reads the unfinished runs (ADR 0068)."""
        period = self.settings.heartbeat_s or self.settings.lease_s / 3
        loaded = frozenset(self._loaded)
        next_mark = self.manager.clock.now()
        started = False
        try:
            while True:
                now = self.manager.clock.now()
                try:
                    until = now + timedelta(seconds=3 * period)
                    await versions.record_loaded(self.worker_id, loaded, now, until)
                    if next_mark <= now:  # one process of the fleet marks (ADR 0068)
                        await mark_if_first(self.manager, versions, self.worker_id)
                        next_mark = now + timedelta(seconds=_MARK_EVERY_S)
                except Exception as error:  # noqa: BLE001  # never fatal: try next period
                    _log_failure(self.worker_id, "recording its versions", error, period)
                if not started:
                    task_status.started()
                    started = True
                await anyio.sleep(period)
        finally:
            with anyio.move_on_after(_FORGET_S, shield=True):
                try:
                    await versions.forget_process(self.worker_id)
                except Exception as error:  # noqa: BLE001  # it lapses on its own
                    logger.debug(
                        "worker %s: forgetting its record failed: %s", self.worker_id, error
                    )

    async def _heartbeat(self) -> None:
        period = self.settings.heartbeat_s or self.settings.lease_s / 3
        while True:
            await anyio.sleep(period)
            try:
                await self._beat()
            except Exception as error:  # noqa: BLE001  # never fatal: try at the next period
                _log_failure(self.worker_id, "heartbeat", error, period)

    async def _beat(self) -> None:
        """Hand back the leases of dropped runs, renew the others, and stop the runs whose
        lease is gone or whose task ended."""
        await self._hand_back()  # before a renewal could keep those leases alive
        # Only runs claimed before the renewal began can be missing from it because
        # their lease is gone; a claim committed meanwhile may be invisible to it.
        judged = list(self._executions.items())
        asked = anyio.current_time()
        held = await self.runs.renew_leases(
            worker=self.worker_id,
            now=self.manager.clock.now,  # read inside the attempt that commits (ADR 0038)
            lease_for=timedelta(seconds=self.settings.lease_s),
        )
        # a run whose own write (its end, a park) dropped the lease has not lost it
        gone = [(task_id, run) for task_id, run in judged if task_id not in held]
        lost = [task_id for task_id, run in gone if not run.dropping_lease and run.end is None]
        if lost:
            logger.warning(
                "worker %s lost the lease of %d run(s) to another worker and stopped them: %s",
                self.worker_id,
                len(lost),
                ", ".join(lost[:5]) + (", ..." if len(lost) > 5 else ""),
            )
        for task_id, execution in judged:
            if task_id not in held:
                if not execution.dropping_lease:
                    execution.stop(lost_lease=True)
            else:
                if execution in self._held_until:
                    self._held_until[execution] = asked + self.settings.lease_s
                self._react(held[task_id], task_id)

    async def _hand_back(self) -> None:
        """Give back the leases of the runs stopped by an error or by the fence."""
        for task_id, lease in list(self._dropped.items()):
            await self.runs.release_lease(lease)
            if self._dropped.get(task_id) is lease:
                del self._dropped[task_id]

    async def _fence(self) -> None:
        """Stop the runs whose lease may run out before a renewal lands (the store did
        not answer in time): once it has, another worker may claim them, and a run never
        has two bodies at once, across processes too (ADR 0038). Their leases are handed
        back when the store answers, so that they resume from their checkpoints at once."""
        margin = self.settings.lease_s / 5
        warned = -float("inf")
        while True:
            await anyio.sleep(min(margin, 1.0) / 2)
            now = anyio.current_time()
            doomed = [
                execution
                for execution, until in self._held_until.items()
                if until - margin <= now and execution.end is None
            ]
            for execution in doomed:
                del self._held_until[execution]
                execution.stop(lost_lease=True)
                self._dropped[execution.task_id] = execution.lease
            if doomed:
                loud = now - warned >= self.settings.lease_s  # one WARNING per lease period
                warned = now if loud else warned
                logger.log(
                    logging.WARNING if loud else logging.INFO,
                    "worker %s stopped %d run(s) whose lease it could not renew within "
                    "%.3g s (the store did not answer); they resume from their checkpoints",
                    self.worker_id,
                    len(doomed),
                    self.settings.lease_s - margin,
                )


class EagerSlot:
    """A slot a worker holds for one task while its eager create commits
    (:class:`taskloom.engine.eager.Reservation`); used once."""

    def __init__(self, worker: Worker, task_id: TaskId) -> None:
        self._worker = worker
        self._task_id = task_id
        self.asked = anyio.current_time()
        """Before the commit: the lease it writes lasts at least until ``asked +
        lease_s``, which the worker's fence counts from."""
        self._used = False

    @property
    def worker(self) -> str:
        """See :class:`taskloom.engine.eager.Reservation`."""
        return self._worker.worker_id

    @property
    def lease_for(self) -> timedelta:
        """See :class:`taskloom.engine.eager.Reservation`."""
        return timedelta(seconds=self._worker.settings.lease_s)

    def start(self, run: ClaimedRun) -> None:
        """See :class:`taskloom.engine.eager.Reservation`."""
        self._use()
        self._worker.start_eagerly(run, self.asked)

    def cancel(self, lease: Lease | None) -> None:
        """See :class:`taskloom.engine.eager.Reservation`."""
        self._use(unused=lease is None)
        if lease is not None:  # the store just failed: the polls find what waits
            self._worker.hand_back(lease)

    def _use(self, *, unused: bool = False) -> None:
        if self._used:
            raise RuntimeError("this eager slot was used already")
        self._used = True
        self._worker.release_slot(self._task_id, unused=unused)


def _is_store_failure(error: BaseException) -> bool:
    """True for an error the store raised on purpose (possibly inside a group)."""
    if isinstance(error, BaseExceptionGroup):
        return all(_is_store_failure(inner) for inner in error.exceptions)
    return isinstance(error, TaskloomError)


def _is_outage(error: BaseException) -> bool:
    """True when the store was unavailable (possibly inside a group): the store logs that
    once, so the worker's own lines about it stay below WARNING."""
    if isinstance(error, BaseExceptionGroup):
        return all(_is_outage(inner) for inner in error.exceptions)
    return isinstance(error, StoreUnavailableError)


def _describe(error: BaseException) -> str:
    while isinstance(error, BaseExceptionGroup) and len(error.exceptions) == 1:
        error = error.exceptions[0]
    return f"{type(error).__name__}: {error}"


def _log_failure(worker: str, what: str, error: Exception, retry_in: float) -> None:
    logger.log(
        logging.DEBUG if _is_outage(error) else logging.WARNING,
        "worker %s: %s failed, trying again in %.3g s: %s",
        worker,
        what,
        retry_in,
        _describe(error),
        exc_info=not _is_store_failure(error),
    )
