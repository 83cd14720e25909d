"""The in-memory TaskStore: the reference model for every other store, and a test fake."""

from bisect import bisect_left
from collections import Counter
from collections.abc import Collection, Iterable, Sequence
from datetime import datetime, timedelta
from functools import partial
from typing import Any, Unpack

import anyio

from taskloom.engine import cascade, runs
from taskloom.engine.claims import ClaimAtCreate, ClaimRule, WorkflowKey, new_token, take
from taskloom.engine.errors import (
    LeaseLostError,
    TaskNotFoundError,
    TaskStateError,
)
from taskloom.engine.history import MAX_STATUS_ROWS, HistoryEntry, entry_for
from taskloom.engine.models import (
    StorePage,
    Task,
    TaskId,
    TaskMutation,
    TaskQuery,
    ensure_successor,
)
from taskloom.engine.ports import Finished, finished_states
from taskloom.engine.states import TaskState
from taskloom.engine.tokens import TokenRecord
from taskloom.engine.versions import (
    AHEAD_AT_MOST,
    FORGET_AFTER,
    RunMove,
    StoredVersion,
    running_now,
    version_sort_key,
)

_Key = tuple[str | None, str]


class InMemoryTaskStore:
    """Keeps tasks in dicts. Each method runs without awaiting after its first checkpoint,
    so it is atomic on the event loop. Nothing survives the process."""

    def __init__(self) -> None:
        self._tasks: dict[int, Task] = {}
        self._positions: dict[TaskId, int] = {}
        self._order: list[int] = []
        self._keys: dict[_Key, TaskId] = {}
        self._next_position = 1
        self._leases: dict[TaskId, runs.Lease] = {}
        self._nodes: dict[TaskId, dict[str, runs.NodeRun]] = {}
        self._attempts: dict[TaskId, list[runs.NodeAttempt]] = {}
        self._children: dict[TaskId, list[TaskId]] = {}
        self._tokens: dict[str, TokenRecord] = {}
        self._history: dict[TaskId, list[HistoryEntry]] = {}
        self._processes: dict[str, tuple[frozenset[WorkflowKey], datetime, datetime]] = {}
        """Each process's loaded versions, when its record lapses (ADR 0039) and when it was
        seen (ADR 0068)."""

    async def add_token(self, record: TokenRecord) -> None:
        """See :meth:`taskloom.engine.tokens.TokenStore.add_token`."""
        await anyio.lowlevel.checkpoint()
        if record.id in self._tokens:
            raise ValueError(f"token {record.id} exists")
        self._tokens[record.id] = record

    async def find_token(self, token_id: str) -> TokenRecord | None:
        """See :meth:`taskloom.engine.tokens.TokenStore.find_token`."""
        await anyio.lowlevel.checkpoint()
        return self._tokens.get(token_id)

    async def list_tokens(self) -> Sequence[TokenRecord]:
        """See :meth:`taskloom.engine.tokens.TokenStore.list_tokens`."""
        await anyio.lowlevel.checkpoint()
        return sorted(self._tokens.values(), key=lambda record: (record.created_at, record.id))

    async def find_tokens(self, token_ids: Collection[str]) -> Sequence[TokenRecord]:
        """See :meth:`taskloom.engine.tokens.TokenStore.find_tokens`."""
        await anyio.lowlevel.checkpoint()
        return [self._tokens[each] for each in token_ids if each in self._tokens]

    async def revoke_token(self, token_id: str, now: datetime) -> TokenRecord | None:
        """See :meth:`taskloom.engine.tokens.TokenStore.revoke_token`."""
        await anyio.lowlevel.checkpoint()
        record = self._tokens.get(token_id)
        if record is None:
            return None
        self._tokens[token_id] = record = record.revoked(now)
        return record

    async def create(self, task: Task, now: datetime) -> tuple[Task, bool]:
        """See :meth:`taskloom.engine.ports.TaskStore.create`."""
        await anyio.lowlevel.checkpoint()
        if task.idempotency_key is not None:
            holder_id = self._keys.get((task.owner, task.idempotency_key))
            if holder_id is not None:
                holder = self._live(holder_id, now)
                if holder is not None:
                    return holder, False
                self._remove(self._positions[holder_id])  # an expired holder frees the key
        self._insert(task)
        return task, True

    def _insert(self, task: Task) -> None:
        """Store the new *task* at the next position, with its history's first row."""
        position = self._next_position
        self._next_position += 1
        self._tasks[position] = task
        self._positions[task.id] = position
        self._order.append(position)
        self._record(None, task)
        if task.idempotency_key is not None:
            self._keys[(task.owner, task.idempotency_key)] = task.id
        if task.parent_id is not None:
            self._children.setdefault(task.parent_id, []).append(task.id)

    async def get(self, task_id: TaskId, now: datetime) -> Task | None:
        """See :meth:`taskloom.engine.ports.TaskStore.get`."""
        await anyio.lowlevel.checkpoint()
        return self._live(task_id, now)

    async def history(
        self, task_id: TaskId, now: datetime
    ) -> tuple[Task, Sequence[HistoryEntry]] | None:
        """See :meth:`taskloom.engine.ports.TaskStore.history`."""
        await anyio.lowlevel.checkpoint()
        task = self._live(task_id, now)
        if task is None:
            return None
        return task, tuple(self._history.get(task.id, ()))

    async def list(self, query: TaskQuery, now: datetime) -> StorePage:
        """See :meth:`taskloom.engine.ports.TaskStore.list`."""
        await anyio.lowlevel.checkpoint()
        end = len(self._order) if query.before is None else bisect_left(self._order, query.before)
        found: list[Task] = []
        last_position: int | None = None
        for index in range(end - 1, -1, -1):
            position = self._order[index]
            task = self._tasks[position]
            if task.is_expired(now) or not _matches(task, query):
                continue
            if len(found) == query.limit:
                return StorePage(tasks=tuple(found), next_before=last_position)
            found.append(task)
            last_position = position
        return StorePage(tasks=tuple(found), next_before=None)

    async def count(self, query: TaskQuery, now: datetime) -> int:
        """See :meth:`taskloom.engine.ports.TaskStore.count`."""
        await anyio.lowlevel.checkpoint()
        return sum(
            1 for task in self._tasks.values() if not task.is_expired(now) and _matches(task, query)
        )

    async def count_by_state(
        self, *, owner: str | None, match_owner: bool, now: datetime, at_most: int | None = None
    ) -> dict[TaskState, int]:
        """See :meth:`taskloom.engine.ports.TaskStore.count_by_state`."""
        await anyio.lowlevel.checkpoint()
        counts: dict[TaskState, int] = {}
        for task in self._tasks.values():
            if not task.is_expired(now) and (not match_owner or task.owner == owner):
                counts[task.state] = counts.get(task.state, 0) + 1
        if at_most is None:
            return counts
        return {state: min(count, at_most) for state, count in counts.items()}

    async def update(
        self, task_id: TaskId, now: datetime, mutate: TaskMutation, fence: runs.Lease | None = None
    ) -> Task:
        """See :meth:`taskloom.engine.ports.TaskStore.update`."""
        await anyio.lowlevel.checkpoint()
        current = self._current(task_id, now)
        if fence is not None:
            self._check_fence(fence)
        return self._write(current, mutate, fence, now)

    async def purge_expired(self, now: datetime, limit: int) -> int:
        """See :meth:`taskloom.engine.ports.TaskStore.purge_expired`."""
        await anyio.lowlevel.checkpoint()
        expired = [position for position, task in self._tasks.items() if task.is_expired(now)][
            :limit
        ]
        for position in expired:
            self._remove(position)
        return len(expired)

    async def delete_finished(self, **which: Unpack[Finished]) -> int:
        """See :meth:`taskloom.engine.ports.TaskStore.delete_finished`."""
        await anyio.lowlevel.checkpoint()
        wanted = finished_states(which)
        task_ids, finished_before = which.get("task_ids"), which.get("finished_before")
        chosen = None if task_ids is None else set(task_ids)
        doomed = [
            position
            for position, task in self._tasks.items()
            if task.state in wanted
            and (chosen is None or task.id in chosen)
            and (finished_before is None or task.updated_at < finished_before)
        ][: which["limit"]]
        for position in doomed:
            self._remove(position)
        return len(doomed)

    # -- versions (VersionStore) ----------------------------------------------------------

    async def record_loaded(
        self, process: str, loaded: Iterable[WorkflowKey], now: datetime, until: datetime
    ) -> None:
        """See :meth:`taskloom.engine.versions.VersionStore.record_loaded`."""
        await anyio.lowlevel.checkpoint()
        for other, (_, lapses, _) in list(self._processes.items()):
            if lapses <= now - FORGET_AFTER:
                del self._processes[other]
        self._processes[process] = (frozenset(loaded), until, now)

    async def forget_process(self, process: str) -> None:
        """See :meth:`taskloom.engine.versions.VersionStore.forget_process`."""
        await anyio.lowlevel.checkpoint()
        self._processes.pop(process, None)

    async def live_versions(self, now: datetime) -> frozenset[WorkflowKey]:
        """See :meth:`taskloom.engine.versions.VersionStore.live_versions`."""
        await anyio.lowlevel.checkpoint()
        live: frozenset[WorkflowKey] = frozenset()
        for loaded, lapses, _ in self._processes.values():
            if lapses > now:
                live |= loaded
        return live

    async def first_live_process(self, now: datetime) -> str | None:
        """See :meth:`taskloom.engine.versions.VersionStore.first_live_process`."""
        await anyio.lowlevel.checkpoint()
        ahead = now + AHEAD_AT_MOST
        live = [
            process
            for process, (_, lapses, seen) in self._processes.items()
            if lapses > now and seen <= ahead
        ]
        return min(live, default=None)

    async def unfinished_versions(self, now: datetime) -> Sequence[StoredVersion]:
        """See :meth:`taskloom.engine.versions.VersionStore.unfinished_versions`."""
        await anyio.lowlevel.checkpoint()
        found: dict[tuple[str, str | None], tuple[int, datetime]] = {}
        for task in self._tasks.values():
            if task.is_terminal or task.is_expired(now):
                continue
            key = (task.name, task.workflow_version)
            count, oldest = found.get(key, (0, task.created_at))
            found[key] = (count + 1, min(oldest, task.created_at))
        return [
            StoredVersion(name=name, version=version, unfinished=count, oldest=oldest)
            for (name, version), (count, oldest) in sorted(found.items(), key=_version_sort)
        ]

    async def move_run(self, task_id: TaskId, now: datetime, move: RunMove) -> Task:
        """See :meth:`taskloom.engine.versions.VersionStore.move_run`."""
        await anyio.lowlevel.checkpoint()
        current = self._current(task_id, now)
        lease = self._leases.get(task_id)
        if lease is not None and lease.expires_at > now:
            raise TaskStateError(running_now(task_id, lease.worker))
        nodes = dict(self._nodes.get(task_id, {}))
        return self._write(current, lambda task: move(task, nodes), None, now)

    # -- runs (RunStore) ------------------------------------------------------------------

    async def claim_runs(self, **terms: Unpack[runs.ClaimTerms]) -> Sequence[runs.ClaimedRun]:
        """See :meth:`taskloom.engine.runs.RunStore.claim_runs`."""
        await anyio.lowlevel.checkpoint()
        now = runs.at(terms["now"])  # after the checkpoint: the time this claim commits at
        worker, per_owner = terms["worker"], terms.get("per_owner")
        claimed: list[runs.ClaimedRun] = []
        reserved = terms.get("reserved", {})
        held = Counter(
            self._tasks[self._positions[task_id]].owner
            for task_id, lease in self._leases.items()
            if lease.worker == worker
            and lease.expires_at > now
            and task_id in self._positions
            and task_id not in reserved  # counted once, below, committed or not
        )
        held.update(reserved.values())
        rule = ClaimRule.of(terms["workflows"], terms.get("reclaim_from"))
        ranks: Counter[str | None] = Counter()
        ready: list[tuple[int, int]] = []  # (turn, position)
        for position in self._order:
            task = self._tasks[position]
            if not rule.admits(task, self._leases.get(task.id), now):
                continue
            ranks[task.owner] += 1
            turn = held[task.owner] + ranks[task.owner]
            if per_owner is None or task.owner is None or turn <= per_owner:
                ready.append((turn, position))
        for _, position in sorted(ready)[: terms["limit"]]:
            task = self._tasks[position]
            lease = self._leases.get(task.id)
            started, new_lease = take(
                task,
                worker=worker,
                token=new_token(),
                expires_at=now + terms["lease_for"],
                start=terms["start"],
            )
            self._take(task, started, new_lease)
            nodes = dict(self._nodes.get(task.id, {}))
            resumed = lease is not None or bool(nodes) or task.state is not TaskState.QUEUED
            claimed.append(
                runs.ClaimedRun(task=started, lease=new_lease, nodes=nodes, resumed=resumed)
            )
        return claimed

    async def create_claimed(
        self, task: Task, claim: ClaimAtCreate, now: runs.Instant
    ) -> tuple[Task, runs.ClaimedRun | None]:
        """See :meth:`taskloom.engine.runs.RunStore.create_claimed`."""
        stored, created = await self.create(task, task.created_at)
        if not created:  # nothing awaited since the create: one atomic step
            return stored, None
        run = claim.applied(task, runs.at(now))
        self._take(task, run.task, run.lease)
        return run.task, run

    def _take(self, task: Task, started: Task, lease: runs.Lease) -> None:
        """Write what claiming *task* writes (``claims.take`` gave *started* and
        *lease*): *started* over *task* with its history row, and the lease."""
        if started is not task:
            self._tasks[self._positions[task.id]] = started
            self._record(task, started)
        self._leases[task.id] = lease

    async def renew_leases(
        self, *, worker: str, now: runs.Instant, lease_for: timedelta
    ) -> dict[TaskId, Task | None]:
        """See :meth:`taskloom.engine.runs.RunStore.renew_leases`."""
        await anyio.lowlevel.checkpoint()
        now = runs.at(now)
        held: dict[TaskId, Task | None] = {}
        for task_id, lease in list(self._leases.items()):
            if lease.worker == worker:
                self._leases[task_id] = lease.model_copy(update={"expires_at": now + lease_for})
                position = self._positions.get(task_id)
                held[task_id] = self._tasks[position] if position is not None else None
        return held

    async def release_lease(self, lease: runs.Lease) -> None:
        """See :meth:`taskloom.engine.runs.RunStore.release_lease`."""
        await anyio.lowlevel.checkpoint()
        self._release(lease)

    def _release(self, lease: runs.Lease) -> None:
        current = self._leases.get(lease.task_id)
        if current is not None and current.token == lease.token:
            del self._leases[lease.task_id]

    async def start_node(
        self, lease: runs.Lease, start: runs.NodeStart, now: datetime
    ) -> runs.NodeRun:
        """See :meth:`taskloom.engine.runs.RunStore.start_node`."""
        await anyio.lowlevel.checkpoint()
        self._check_fence(lease)
        task = self._tasks[self._positions[lease.task_id]]
        if task.is_terminal:
            raise TaskStateError(f"task {task.id} is {task.state}; no node may start")
        history = self._attempts.setdefault(lease.task_id, [])
        if start.interrupted_attempt is not None:
            for index, attempt in enumerate(history):
                if (attempt.node, attempt.attempt) == (start.node, start.interrupted_attempt) and (
                    attempt.ended_at is None
                ):
                    history[index] = attempt.model_copy(
                        update={"ended_at": now, "outcome": runs.AttemptOutcome.INTERRUPTED}
                    )
        nodes = self._nodes.setdefault(lease.task_id, {})
        run = nodes[start.node] = runs.node_started(nodes.get(start.node), start, now)
        history.append(
            runs.NodeAttempt(
                task_id=lease.task_id,
                node=start.node,
                attempt=start.attempt,
                worker=lease.worker,
                started_at=now,
            )
        )
        return run

    async def end_node(self, lease: runs.Lease, end: runs.NodeEnd, now: datetime) -> runs.NodeRun:
        """See :meth:`taskloom.engine.runs.RunStore.end_node`."""
        await anyio.lowlevel.checkpoint()
        run = self._ended(lease, end, now)
        self._record_end(lease, end, run, now)
        return run

    async def finish_run(
        self, lease: runs.Lease, end: runs.NodeEnd, now: datetime, mutate: TaskMutation
    ) -> tuple[runs.NodeRun, Task]:
        """See :meth:`taskloom.engine.runs.RunStore.finish_run`."""
        await anyio.lowlevel.checkpoint()
        current = self._current(lease.task_id, now)
        run = self._ended(lease, end, now)
        new = mutate(current)
        ensure_successor(current, new)
        self._record_end(lease, end, run, now)  # every check passed: now write both
        return run, self._write(current, lambda _: new, lease, now)

    async def attempts(self, task_id: TaskId) -> Sequence[runs.NodeAttempt]:
        """See :meth:`taskloom.engine.runs.RunStore.attempts`."""
        await anyio.lowlevel.checkpoint()
        return sorted(
            self._attempts.get(task_id, []), key=lambda a: (a.started_at, a.node, a.attempt)
        )

    async def failed_attempts(
        self, query: runs.FailureQuery, now: datetime
    ) -> Sequence[runs.NodeAttempt]:
        """See :meth:`taskloom.engine.runs.RunStore.failed_attempts`."""
        await anyio.lowlevel.checkpoint()
        failed = [
            attempt
            for task_id, history in self._attempts.items()
            if (task := self._live(task_id, now)) is not None
            and (not query.match_owner or task.owner == query.owner)
            for attempt in history
            if attempt.outcome in runs.FAILURE_OUTCOMES and attempt.ended_at is not None
        ]
        failed.sort(key=lambda a: (a.ended_at, a.task_id, a.node, a.attempt), reverse=True)
        return failed[: query.limit]

    async def checkpoints(self, task_id: TaskId) -> dict[str, runs.NodeRun]:
        """See :meth:`taskloom.engine.runs.RunStore.checkpoints`."""
        await anyio.lowlevel.checkpoint()
        return dict(self._nodes.get(task_id, {}))

    async def fork_run(
        self, task: Task, *, source: TaskId, nodes: frozenset[str], now: datetime
    ) -> dict[str, runs.NodeRun]:
        """See :meth:`taskloom.engine.runs.RunStore.fork_run`."""
        await anyio.lowlevel.checkpoint()
        if self._live(source, now) is None:
            raise TaskNotFoundError(source)
        copies = {
            name: run
            for name, run in self._nodes.get(source, {}).items()
            if name in nodes and run.state is runs.NodeState.COMPLETED
        }
        self._insert(task)
        if copies:
            self._nodes[task.id] = dict(copies)
        return copies

    def _current(self, task_id: TaskId, now: datetime) -> Task:
        current = self._live(task_id, now)
        if current is None:
            raise TaskNotFoundError(task_id)
        return current

    def _write(
        self, current: Task, mutate: TaskMutation, fence: runs.Lease | None, now: datetime
    ) -> Task:
        """Store ``mutate(current)`` by the one rule of :mod:`taskloom.engine.cascade`."""
        rule = cascade.write(current, mutate, fence, now)
        return cascade.execute(rule, partial(self._answer, now))

    def _answer(self, now: datetime, effect: cascade.Effect) -> cascade.Answer:
        """Execute one effect of a write (see :mod:`taskloom.engine.cascade`)."""
        match effect:
            case cascade.Put(before, after):
                self._record(before, after)
                self._tasks[self._positions[after.id]] = after
            case cascade.Drop(lease, ends_run):
                self._release(lease)
                if ends_run:
                    self._close_abandoned(lease.task_id, now)
            case cascade.Read(task_id, children=False):
                return self._live(task_id, now)
            case cascade.Read(task_id):
                found = (self._live(child, now) for child in self._children.get(task_id, ()))
                return [child for child in found if child is not None and not child.is_terminal]
        return None

    def _record(self, before: Task | None, after: Task) -> None:
        """Append the history row of writing *after* (ADR 0036), with the write."""
        entry = entry_for(before, after)
        if entry is None:
            return
        rows = self._history.setdefault(after.id, [])
        if entry.state_changed or sum(not row.state_changed for row in rows) < MAX_STATUS_ROWS:
            rows.append(entry)

    def _close_abandoned(self, task_id: TaskId, now: datetime) -> None:
        """End the attempts a run leaves open as it ends (see ``RunStore``): interrupted,
        their nodes ``retrying`` with one more interruption."""
        history = self._attempts.get(task_id, [])
        for index, attempt in enumerate(history):
            if attempt.ended_at is None:
                history[index] = attempt.model_copy(
                    update={"ended_at": now, "outcome": runs.AttemptOutcome.INTERRUPTED}
                )
        nodes = self._nodes.get(task_id, {})
        for name, run in nodes.items():
            nodes[name] = runs.node_interrupted(run, now)

    def _ended(self, lease: runs.Lease, end: runs.NodeEnd, now: datetime) -> runs.NodeRun:
        """The node's checkpoint after *end*, once the fence and its state allow it (nothing
        is stored yet)."""
        self._check_fence(lease)
        run = runs.node_ended(self._nodes.get(lease.task_id, {}).get(end.node), end, now)
        if run is None:
            raise LeaseLostError(f"node {end.node!r} of task {lease.task_id} is not running")
        return run

    def _record_end(
        self, lease: runs.Lease, end: runs.NodeEnd, run: runs.NodeRun, now: datetime
    ) -> None:
        self._nodes[lease.task_id][end.node] = run
        history = self._attempts[lease.task_id]
        for index, attempt in enumerate(history):
            if (attempt.node, attempt.attempt) == (end.node, end.attempt):
                history[index] = attempt.model_copy(
                    update={"ended_at": now, "outcome": end.outcome, "error": end.error}
                )

    def _check_fence(self, lease: runs.Lease) -> None:
        current = self._leases.get(lease.task_id)
        if current is None or current.token != lease.token:
            raise LeaseLostError(
                f"the lease of worker {lease.worker} on task {lease.task_id} is gone"
            )

    @property
    def tasks(self) -> tuple[Task, ...]:
        """Every stored task, expired ones included, oldest first (for inspection)."""
        return tuple(self._tasks[position] for position in self._order)

    def _live(self, task_id: TaskId | None, now: datetime) -> Task | None:
        position = self._positions.get(task_id) if task_id is not None else None
        if position is None:
            return None
        task = self._tasks[position]
        return None if task.is_expired(now) else task

    def _remove(self, position: int) -> None:
        task = self._tasks.pop(position)
        del self._positions[task.id]
        self._leases.pop(task.id, None)
        self._nodes.pop(task.id, None)
        self._attempts.pop(task.id, None)
        self._history.pop(task.id, None)
        del self._order[bisect_left(self._order, position)]
        if task.idempotency_key is not None:
            self._keys.pop((task.owner, task.idempotency_key), None)
        if task.parent_id is not None and task.id in self._children.get(task.parent_id, ()):
            self._children[task.parent_id].remove(task.id)
        self._children.pop(task.id, None)


def _matches(task: Task, query: TaskQuery) -> bool:
    if query.match_owner and task.owner != query.owner:
        return False
    if query.parent_id is not None and task.parent_id != query.parent_id:
        return False
    if query.names is not None and task.name not in query.names:
        return False
    if query.id_prefix is not None and not task.id.startswith(query.id_prefix):
        return False
    if query.idempotency_key is not None and (
        task.idempotency_key != query.idempotency_key or task.owner != query.owner
    ):
        return False
    if query.created_after is not None and task.created_at < query.created_after:
        return False
    if query.created_before is not None and task.created_at >= query.created_before:
        return False
    return query.states is None or task.state in query.states


def _version_sort(item: tuple[tuple[str, str | None], Any]) -> tuple[str, tuple[int, ...], str]:
    (name, version), _ = item
    return version_sort_key(name, version)
