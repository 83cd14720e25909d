"""Executes one claimed run: its DAG in dependency order, each node checkpointed.

Ready nodes run in parallel (up to the workflow's concurrency) in one anyio task group,
each started as soon as its dependencies have settled. Every attempt's start and end are
committed (the output with the end, in one transaction); a completed node is never run
again. The attempt that completes the DAG (every other node settled) commits its end
together with the task's result (``RunStore.finish_run``, ADR 0015): one transaction
fewer per run, and no window in which the node is done but the task is not. Retry waits
are stored, so a crash during a backoff neither loses nor resets the count. The run's cancel scope is cancelled when
the task is cancelled or the lease is lost: the running nodes see the cancellation at
their next await, and no further node starts.
"""

import contextlib
import time
from collections import deque
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any, Final

import anyio
import anyio.lowlevel
from anyio.abc import TaskGroup
from pydantic import JsonValue, ValidationError

from taskloom.engine.children import child_idempotency_key, child_result
from taskloom.engine.dag import MapContext, MapNode, Node, NodeContext, Workflow
from taskloom.engine.errors import (
    IllegalTransitionError,
    InvalidRequestError,
    LeaseLostError,
    TaskloomError,
    TaskNotFoundError,
    TaskStateError,
    WaitOverError,
)
from taskloom.engine.fanout import ItemFailure, item_key, parse_item_key
from taskloom.engine.fingerprint import describe
from taskloom.engine.manager import TaskManager
from taskloom.engine.models import InputRequest, Progress, TaskFailure
from taskloom.engine.observe import AttemptEnd, AttemptInfo, Observers, RunInfo
from taskloom.engine.progress import RunProgress
from taskloom.engine.retry import MAX_INTERRUPTIONS
from taskloom.engine.runs import (
    AttemptOutcome,
    ClaimedRun,
    ErrorInfo,
    NodeEnd,
    NodeRun,
    NodeState,
    completed_end,
    ends_queued,
    trusted_start,
)
from taskloom.engine.submit import arguments_problem
from taskloom.engine.waits import NodeWaits, Wait

_FINAL_WRITE_S: Final = 10.0
_NONE: Final[frozenset[str]] = frozenset()


class RunEnd(StrEnum):
    """How a run's execution ended (or is ending): the one record of it, which decides
    what happens to the attempts in flight and to the lease, and what is reported."""

    COMPLETED = "completed"
    """The result is stored; the store dropped the lease with it."""
    FAILED = "failed"
    """The failure is stored; the store dropped the lease with it."""
    PARKED = "parked"
    """Handed back while its nodes wait (ADR 0021); the lease dropped with that write."""
    CANCELLED = "cancelled"
    """The task is over otherwise (cancelled, or a node failed for good): attempts in
    flight are recorded as cancelled; the lease is handed back."""
    LEASE_LOST = "lease_lost"
    """Another worker owns the run now: nothing more is written."""
    INTERRUPTED = "interrupted"
    """Stopped without a verdict (the worker shuts down, a final write never returned):
    attempts in flight are recorded as interrupted and the lease is handed back."""

    @property
    def is_written(self) -> bool:
        """True once the run wrote its own end: nothing is left to stop."""
        return self in (RunEnd.COMPLETED, RunEnd.FAILED, RunEnd.PARKED)

    @property
    def holds_lease(self) -> bool:
        """True if the lease is still this run's, to hand back."""
        return not self.is_written and self is not RunEnd.LEASE_LOST


class _NodeFailed(Exception):
    def __init__(
        self, node: Node[Any], attempts: int, error: ErrorInfo, key: str | None = None
    ) -> None:
        super().__init__(node.name)
        self.node = node
        self.key = key or node.name
        """The node run that failed: the node, or one item of a map (``node[3]``)."""
        self.attempts = attempts
        self.error = error


@dataclass(slots=True)
class _Step:
    """One node run to execute: a plain node (keyed by its name) or one item of a map
    (not frozen: one is made per node run, and a frozen one is made slower)."""

    node: Node[Any]
    key: str
    index: int | None = None
    item: Any = None

    @property
    def may_fail(self) -> bool:
        """True if its failure does not fail the run."""
        if self.index is None:
            return self.node.may_fail
        return isinstance(self.node, MapNode) and self.node.on_item_failure == "continue"


class RunExecution:
    """One run of a workflow, owned by this process through its lease."""

    def __init__(
        self,
        *,
        claimed: ClaimedRun,
        workflow: Workflow[Any],
        manager: TaskManager,
        node_concurrency: int,
        progress_interval_s: float,
    ) -> None:
        self.task_id = claimed.task.id
        self.lease = claimed.lease
        self.workflow = workflow
        self._task = claimed.task
        self._manager = manager
        self._runs = manager.runs  # node checkpoints; task state goes through the manager
        self._end_step = self._end_queued if ends_queued(self._runs) else self._end_shielded
        """How a step's end is written: shielded from cancellation unless the store
        commits a node's end once called, waited for or not (ADR 0056)."""
        self._nodes: dict[str, NodeRun] = dict(claimed.nodes)
        self._outputs: dict[str, JsonValue] = {}
        self._answers: dict[str, JsonValue] = {}
        self._failed: set[str] = set()
        self.progress = RunProgress(workflow)
        for run in claimed.nodes.values():
            self._remember(run)
        limit = workflow.max_concurrency or node_concurrency
        self._run_limit = limit
        nodes = workflow.nodes  # a large workflow is limited without a look at each node
        limited = limit < len(nodes) or any(isinstance(node, MapNode) for node in nodes.values())
        self._limiter = anyio.Semaphore(limit) if limited else None
        """``None`` when every node may run at once anyway. A semaphore, not a capacity
        limiter: a slot is taken and given back by the same step, so the limiter's record
        of which task holds one buys nothing, and costs 0.7 us a node (ADR 0056)."""
        self._progress_interval_s = progress_interval_s
        self.cancel_scope = anyio.CancelScope()
        self.end: RunEnd | None = None
        """How the run ended or is ending; ``None`` while it runs on."""
        self._observer = manager.observer
        self._attempts_unobserved = isinstance(self._observer, Observers) and self._observer.empty
        """No observer to tell of each attempt: an attempt builds no report (ADR 0051)."""
        self._info = RunInfo(task_id=self.task_id, workflow=workflow.name, resumed=claimed.resumed)
        self.dropping_lease = False
        """True while a write that drops the lease with it (the run's end, a park) is under
        way: a heartbeat that no longer finds the lease then has not lost it (ADR 0038)."""
        self.parked_until: datetime | None = None
        """When the run, parked because its nodes wait, may be claimed again (timers)."""

    def stop(self, *, lost_lease: bool = False) -> None:
        """Cancel the running nodes because the task ended elsewhere (a cancel) or, with
        *lost_lease*, because another worker owns the run now. Cancelling the worker
        without calling this is a shutdown: attempts in flight are recorded as
        interrupted and the run is handed back for another worker to resume."""
        if self.end is not None and self.end.is_written:
            return  # the run has written its own end: nothing is left to stop
        lost = lost_lease or self.end is RunEnd.LEASE_LOST
        self.end = RunEnd.LEASE_LOST if lost else RunEnd.CANCELLED
        self.cancel_scope.cancel()

    async def execute(self) -> None:
        """Run the DAG to its end and record the task's outcome (if still ours to record)."""
        started = time.perf_counter()
        self._observer.run_started(self._info)
        try:
            with self.cancel_scope:
                try:
                    await self._execute()
                except* LeaseLostError:
                    if self.end is None or not self.end.is_written:  # not a write racing
                        self.end = RunEnd.LEASE_LOST  # the outcome that dropped the lease
                except* (TaskStateError, TaskNotFoundError):
                    pass  # the task ended or vanished under us: its state says why
        finally:
            end = self.end = self.end or RunEnd.INTERRUPTED
            if end.holds_lease:  # on shutdown, a cancel, an error: hand it back
                with anyio.move_on_after(_FINAL_WRITE_S, shield=True):
                    await self._runs.release_lease(self.lease)
            self._observer.run_ended(self._info, end.value, time.perf_counter() - started)

    async def _execute(self) -> None:
        recorded = self._task.workflow_version
        if recorded is not None and recorded != self.workflow.version:  # a caller's mistake:
            # workers only claim runs of the versions they have loaded (ADR 0039)
            await self._fail(
                "version_mismatch",
                f"this run was started by {self.workflow.name} version "
                f"{self._task.workflow_version}; this process has version "
                f"{self.workflow.version}, so it cannot resume it",
            )
            return
        try:
            # a copy: a node may change its input in place, never the task it came from
            workflow_input = self.workflow.parse_input(_copied(self._task.arguments))
        except ValidationError as error:
            await self._fail("invalid_input", f"invalid input: {error.errors()[0]['msg']}")
            return
        if self.workflow.asks:
            answers = await self._ask_first()
            if answers is None:
                return  # parked until the questions are answered
            self._answers = answers
        while True:
            failures: list[_NodeFailed] = []
            try:
                async with anyio.create_task_group() as task_group:
                    self.progress.publish_in(
                        task_group, self._write_progress, self._progress_interval_s
                    )
                    try:
                        await self._run_dag(task_group, workflow_input)
                    finally:
                        self.progress.stop()  # not a cancel: that costs more than the run
            except* _NodeFailed as group:
                failures = _failures_in(group)
            if failures:
                await self._fail_node(failures[0])
                return
            if self.end is not None:
                return  # the last node's end wrote (or tried to write) the outcome
            waits = self._waits()
            if not waits:
                break
            if await self._park(waits):
                return
            # what a node waited for arrived meanwhile: go on with the nodes it woke
        try:
            result = self.workflow.build_result(self._outputs)
        except ValueError as error:
            await self._fail_invalid_output(error)
            return
        with anyio.move_on_after(_FINAL_WRITE_S, shield=True):
            await self._final_write(
                self._manager.complete(
                    self.task_id,
                    result,
                    status_message=self.progress.summary,
                    progress=self._final_progress(),
                    lease=self.lease,
                ),
                RunEnd.COMPLETED,
            )

    async def _ask_first(self) -> dict[str, JsonValue] | None:
        """The answers to the workflow's questions (``Workflow.asks``): those not given
        before the task existed are asked now, all at once, before any node runs. While
        any is unanswered the run is parked (``None``): no worker waits for a person."""
        keys = [question.key for question in self.workflow.asks]
        manager = self._manager
        while True:
            task = await manager.get(self.task_id)
            for question in self.workflow.asks:
                if question.key in task.input_responses or question.key in task.input_requests:
                    continue
                request = InputRequest(
                    message=question.message, requested_schema=question.requested_schema
                )
                task = await manager.require_input(
                    self.task_id, question.key, request, lease=self.lease
                )
            missing = [key for key in keys if key not in task.input_responses]
            if not missing:
                return {key: task.input_responses[key] for key in keys}
            if await self._park([Wait("input", key) for key in missing]):
                return None

    # -- waiting --------------------------------------------------------------------------

    def _waits(self) -> list[Wait]:
        """What the run's waiting nodes wait for."""
        return [
            wait
            for run in self._nodes.values()
            if run.state is NodeState.WAITING and (wait := _wait_of(run)) is not None
        ]

    def _wait_over(self, run: NodeRun) -> bool:
        wait = _wait_of(run)
        return wait is None or wait.is_over(self._task, self._now())

    async def _park(self, waits: Sequence[Wait]) -> bool:
        """Hand the run back until what *waits* name arrives (the lease is dropped with
        the write). False if one of them arrived meanwhile: the run goes on."""
        self.dropping_lease = True
        try:
            self._task = await self._manager.park(self.task_id, waits, lease=self.lease)
        except WaitOverError:
            self.dropping_lease = False
            self._task = await self._manager.get(self.task_id)
            return False
        except IllegalTransitionError:
            self.end = RunEnd.CANCELLED  # cancelled meanwhile: nothing is left to park
            return True
        self.end = RunEnd.PARKED  # the store dropped the lease with that write
        self.parked_until = self._task.wake_at
        return True

    # -- scheduling ---------------------------------------------------------------------

    async def _run_dag(self, task_group: TaskGroup, workflow_input: Any) -> None:
        """Start each node once its dependencies have settled; return when all have."""
        nodes = self.workflow.nodes
        dependents = self.workflow.dependents()
        waiting = {name: len(node.deps) for name, node in nodes.items()}
        ready = deque(name for name, count in waiting.items() if count == 0)
        unsettled = len(waiting)

        def settle(name: str) -> None:
            nonlocal unsettled
            unsettled -= 1
            for dependent in dependents[name]:
                waiting[dependent] -= 1
                if waiting[dependent] == 0:
                    ready.append(dependent)

        ended = _EndedNodes()
        lanes = _Lanes(task_group, self._run_limit, nodes, self._run_step, workflow_input, ended)
        running = 0
        while True:
            while ready:
                name = ready.popleft()
                if self._settled(name):
                    settle(name)
                    continue
                running += 1
                if running == 1 and not ready:  # alone (a chain, one node): no task needed
                    await self._run_node(name, workflow_input, ended)
                elif isinstance(nodes[name], MapNode):
                    task_group.start_soon(self._run_node, name, workflow_input, ended)
                else:
                    lanes.add(name)
            if unsettled == 0 or running == 0:  # done, or every node left waits (or waits
                return  # for one that does): the run parks
            names = await ended.taken()  # all that ended meanwhile: one wake-up
            running -= len(names)
            # one not settled (it, or an item of it, waits) leaves its dependents waiting
            moved = [name for name in names if name in self._outputs or name in self._failed]
            for name in moved:
                settle(name)
            if moved and unsettled:  # the last node's news travels with the outcome
                self.progress.phase_moved()

    def _remember(self, run: NodeRun) -> None:
        """Keep the outputs and counters in step with a node's newest checkpoint."""
        self._nodes[run.node] = run
        if run.state not in (NodeState.COMPLETED, NodeState.FAILED):
            return
        item = parse_item_key(run.node)
        if item is not None:  # an item's output joins its map's once all items settled
            node = self.workflow.nodes.get(item[0])
            if node is not None:
                self.progress.item_settled(node, run.node)
            return
        if run.state is NodeState.COMPLETED:
            self._outputs[run.node] = run.output
        else:
            self._failed.add(run.node)
        self.progress.settled(self.workflow.nodes[run.node])

    def _remember_step(self, step: _Step, run: NodeRun) -> None:
        """:meth:`_remember` for *step*'s own checkpoint: whether it is an item, and of
        which map, is known, its key not parsed (every node's end passes here)."""
        self._nodes[run.node] = run
        if run.state is not NodeState.COMPLETED and run.state is not NodeState.FAILED:
            return
        if step.index is not None:
            self.progress.item_settled(step.node, run.node)
            return
        if run.state is NodeState.COMPLETED:
            self._outputs[run.node] = run.output
        else:
            self._failed.add(run.node)
        self.progress.settled(step.node)

    def _settled(self, name: str) -> bool:
        run = self._nodes.get(name)
        if run is None:  # a map has no row of its own: it settles in memory
            return name in self._outputs or name in self._failed
        if run.state is NodeState.COMPLETED:
            return True
        if run.state is NodeState.FAILED:
            node = self.workflow.nodes[name]
            if node.may_fail:
                return True
            self.end = RunEnd.CANCELLED
            raise _NodeFailed(node, run.attempt, run.error or _unknown_error())
        return False

    async def _run_node(self, name: str, workflow_input: Any, ended: "_EndedNodes") -> None:
        node = self.workflow.nodes[name]
        if isinstance(node, MapNode):
            await self._run_map(node, workflow_input)
        else:
            await self._run_step(_Step(node, name), workflow_input)
        ended.put(name)

    async def _run_step(self, step: _Step, workflow_input: Any) -> None:
        # A stopping worker stops here: nothing below need yield when a slot is free,
        # and a shielded store write delivers no cancel (PostgreSQL's start_node).
        await anyio.lowlevel.checkpoint_if_cancelled()
        limiter = self._limiter
        if limiter is None:
            await self._attempts(step, workflow_input)
            return
        try:  # a free slot is taken at once: no checkpoint, no turn of the event loop
            limiter.acquire_nowait()
        except anyio.WouldBlock:
            await limiter.acquire()
        try:
            await self._attempts(step, workflow_input)
        finally:
            limiter.release()

    # -- dynamic fan-out (ADR 0024) -------------------------------------------------------

    async def _run_map(self, node: MapNode[Any], workflow_input: Any) -> None:
        """Run every item of *node* not settled yet, at most its concurrency at once:
        that many tasks take the items in order, one after another (10,000 items cost
        64 tasks, not 10,000); once every item has settled, put the map's output
        together."""
        items = self._items_of(node)
        self.progress.items_planned(node, len(items))
        lanes = min(node.concurrency or self._run_limit, self._run_limit, len(items))
        pending = self._pending_items(node, items)
        async with anyio.create_task_group() as task_group:
            for _ in range(lanes):
                task_group.start_soon(self._run_items, pending, workflow_input)
        self._settle_map(node, len(items))

    def _pending_items(self, node: MapNode[Any], items: list[Any]) -> Iterator[_Step]:
        """The items of *node* not settled yet, in order (shared by the map's tasks)."""
        for index, item in enumerate(items):
            key = item_key(node.name, index)
            if not self._item_settled(node, key):
                yield _Step(node, key, index, item)

    async def _run_items(self, pending: Iterator[_Step], workflow_input: Any) -> None:
        for step in pending:
            await self._run_step(step, workflow_input)

    def _items_of(self, node: MapNode[Any]) -> list[Any]:
        """The items of *node*: the stored output of the node it maps over, as its type
        (stored, so a resumed run expands to the same items)."""
        if node.over in self._failed:
            raise _NodeFailed(node, 0, _map_error(node, f"{node.over!r} failed: no items"))
        items = self.workflow.nodes[node.over].output_adapter.validate_python(
            self._outputs[node.over]
        )
        if not isinstance(items, list | tuple):
            raise _NodeFailed(node, 0, _map_error(node, f"{node.over!r} returned no list"))
        return list(items)

    def _item_settled(self, node: MapNode[Any], key: str) -> bool:
        run = self._nodes.get(key)
        if run is None or run.state not in (NodeState.COMPLETED, NodeState.FAILED):
            return False
        if run.state is NodeState.FAILED and node.on_item_failure == "fail":
            self.end = RunEnd.CANCELLED
            raise _NodeFailed(node, run.attempt, run.error or _unknown_error(), key)
        return True

    def _settle_map(self, node: MapNode[Any], count: int) -> None:
        """Store the map's output, in item order, if every item has settled (an item
        that waits leaves the map unsettled until it runs again)."""
        runs = [self._nodes.get(item_key(node.name, index)) for index in range(count)]
        settled = (NodeState.COMPLETED, NodeState.FAILED)
        if not all(run is not None and run.state in settled for run in runs):
            return
        results: list[JsonValue] = []
        failures: list[JsonValue] = []
        for index, run in enumerate(runs):
            assert run is not None  # checked above
            if run.state is NodeState.COMPLETED:
                results.append(run.output)
                continue
            results.append(None)
            error = run.error or _unknown_error()
            failure = ItemFailure(index=index, error_type=error.error_type, message=error.message)
            failures.append(failure.model_dump(mode="json"))
        if node.on_item_failure == "fail":
            self._outputs[node.name] = results
        else:
            self._outputs[node.name] = {"results": results, "failures": failures}
        self.progress.settled(node)

    # -- attempts -------------------------------------------------------------------------

    async def _attempts(self, step: _Step, workflow_input: Any) -> None:
        node = step.node
        previous = self._nodes.get(step.key)
        attempt = previous.attempt if previous is not None else 0
        interruptions = previous.interruptions if previous is not None else 0
        interrupted: int | None = None
        if previous is not None and previous.state is NodeState.WAITING:
            if not self._wait_over(previous):
                return  # still waiting: it is not running, so no worker death counts
        elif previous is not None and previous.state is NodeState.RUNNING:
            interrupted = previous.attempt  # its worker died mid-attempt
            interruptions += 1
            if interruptions >= node.retry.max_interruptions:
                await self._give_up_interrupted(step, previous, interruptions)
                return
        elif previous is not None and previous.state is NodeState.RETRYING:
            await self._sleep_until_due(previous)
        while True:
            attempt += 1
            start = trusted_start(step.key, attempt, interruptions, interrupted)
            self._nodes[step.key] = await self._runs.start_node(self.lease, start, self._now())
            interrupted = None
            end, waits = await self._observed_attempt(step, attempt, workflow_input)
            if waits is not None:
                with anyio.CancelScope(shield=True):
                    run, self._task = await self._manager.wait_node(end, waits, lease=self.lease)
                self._remember(run)
                return
            if (
                end.state is NodeState.COMPLETED
                and step.index is None
                and self._completes_dag(node)
            ):
                await self._finish(node, end)
                return
            await self._end_step(step, end)
            if end.state is NodeState.COMPLETED:
                return
            if end.state is NodeState.RETRYING:
                self.progress.status(f"retrying {step.key} (attempt {attempt + 1})")
                await self._sleep_until_due(self._nodes[step.key])
                continue
            if step.may_fail:
                return
            self.end = RunEnd.CANCELLED  # the siblings stopped now are cancelled, not interrupted
            raise _NodeFailed(node, attempt, end.error or _unknown_error(), step.key)

    async def _end_shielded(self, step: _Step, end: NodeEnd) -> None:
        """Record *end*, its caller's cancel held off until the store has answered."""
        with anyio.CancelScope(shield=True):
            self._remember_step(step, await self._runs.end_node(self.lease, end, self._now()))

    async def _end_queued(self, step: _Step, end: NodeEnd) -> None:
        """Record *end* in a store that commits it once called (``runs.ends_queued``): a
        cancel while this waits stops the run here and the end lands all the same, as
        the shielded wait would have seen it land."""
        self._remember_step(step, await self._runs.end_node(self.lease, end, self._now()))

    def _completes_dag(self, node: Node[Any]) -> bool:
        """True if every node but *node* has settled for good: completed, or failed and
        allowed to (a node is settled once, so counting them is enough)."""
        nodes = self.workflow.nodes
        return len(self._outputs) + len(self._failed) == len(nodes) - 1 and all(
            nodes[name].may_fail for name in self._failed
        )

    async def _finish(self, node: Node[Any], end: NodeEnd) -> None:
        """Record *end*, the attempt that completes the DAG, with the task's result in one
        transaction. An invalid result records the end alone and fails the task; a task
        cancelled meanwhile keeps its cancellation and the end is recorded alone, as when
        the two were separate writes."""
        self.end = RunEnd.INTERRUPTED  # until the write says otherwise (it may never return)
        self.progress.stop()  # the outcome carries the last word: no progress write races it
        with anyio.move_on_after(_FINAL_WRITE_S, shield=True):
            try:
                result = self.workflow.build_result({**self._outputs, node.name: end.output})
            except ValueError as error:
                self._remember(await self._runs.end_node(self.lease, end, self._now()))
                await self._fail_invalid_output(error)
                return
            await self._final_write(self._complete_with(end, result), RunEnd.COMPLETED)
            if self.end is RunEnd.CANCELLED:
                self._remember(await self._runs.end_node(self.lease, end, self._now()))

    async def _complete_with(self, end: NodeEnd, result: JsonValue) -> None:
        run, _ = await self._manager.complete_run(
            end,
            result,
            status_message=self.progress.summary,
            progress=self._final_progress(),
            lease=self.lease,
        )
        self._remember(run)

    def _final_progress(self) -> Progress:
        return Progress(completed=len(self._nodes), total=len(self._nodes))

    async def _observed_attempt(
        self, step: _Step, attempt: int, workflow_input: Any
    ) -> tuple[NodeEnd, NodeWaits | None]:
        """:meth:`_attempt`, reported to the observer (also when it is cancelled)."""
        if self._attempts_unobserved:
            return await self._attempt(step, attempt, workflow_input)
        node = step.node
        info = AttemptInfo(
            task_id=self.task_id,
            workflow=self.workflow.name,
            node=step.key,
            phase=node.phase,
            attempt=attempt,
        )
        self._observer.attempt_started(info)
        started = time.perf_counter()
        end: NodeEnd | None = None
        try:
            end, waits = await self._attempt(step, attempt, workflow_input)
            return end, waits
        finally:
            if end is not None:
                outcome, retrying = end.outcome, end.state is NodeState.RETRYING
            else:  # stopped: cancelled with its task, or handed back (shutdown, lost lease)
                cancelled = self.end is RunEnd.CANCELLED
                outcome = AttemptOutcome.CANCELLED if cancelled else AttemptOutcome.INTERRUPTED
                retrying = not cancelled
            took = time.perf_counter() - started
            error = end.error if end is not None else None
            self._observer.attempt_ended(info, AttemptEnd(outcome, retrying, took, error))

    async def _attempt(
        self, step: _Step, attempt: int, workflow_input: Any
    ) -> tuple[NodeEnd, NodeWaits | None]:
        """Run one attempt; its end, and what it waits for if it stopped to wait."""
        node = step.node
        context = self._context(step, attempt, workflow_input)
        dump = node.dump_item_output if isinstance(node, MapNode) else node.dump_output
        error: BaseException | None = None
        try:
            if node.timeout_s is None:
                output = dump(await node.function(context))
                timed_out = False
            else:
                with anyio.move_on_after(node.timeout_s) as scope:
                    output = dump(await node.function(context))
                timed_out = scope.cancelled_caught
            if not timed_out:
                return completed_end(step.key, attempt, output), None
        except NodeWaits as waits:
            waiting = NodeEnd(
                node=step.key,
                attempt=attempt,
                outcome=AttemptOutcome.WAITING,
                state=NodeState.WAITING,
                waiting_for=waits.wait.encode(),
                not_before=waits.due,
            )
            return waiting, waits
        except anyio.get_cancelled_exc_class():
            with anyio.move_on_after(_FINAL_WRITE_S, shield=True):
                await self._record_stopped(step, attempt)
            raise
        except (LeaseLostError, TaskStateError):
            raise
        except Exception as exception:  # noqa: BLE001  # a node's failure is data
            error = exception
        info = describe(
            error, workflow=self.workflow.name, node=node.name, timeout_s=node.timeout_s
        )
        outcome = AttemptOutcome.TIMED_OUT if error is None else AttemptOutcome.FAILED
        failures = self._nodes[step.key].failures + 1  # interruptions and waits not counted
        if node.retry.allows_another(failures, error):
            delay = node.retry.delay_after(failures)
            retrying = NodeEnd(
                node=step.key,
                attempt=attempt,
                outcome=outcome,
                state=NodeState.RETRYING,
                error=info,
                not_before=self._now() + timedelta(seconds=delay),
            )
            return retrying, None
        failed = NodeEnd(
            node=step.key, attempt=attempt, outcome=outcome, state=NodeState.FAILED, error=info
        )
        return failed, None

    def _context(self, step: _Step, attempt: int, workflow_input: Any) -> NodeContext[Any]:
        node = step.node
        failed = frozenset(self._failed.intersection(node.deps)) if self._failed else _NONE
        context: dict[str, Any] = {
            "task_id": self.task_id,
            "node": node,
            "attempt": attempt,
            "input": workflow_input,
            "outputs": self._outputs,
            "failed": failed,
            "runtime": _Runtime(self, step),
            "settings": self.workflow.settings,
            "answers": self._answers,
        }
        if step.index is None:
            return NodeContext(**context)
        return MapContext(item=step.item, index=step.index, **context)

    async def _record_stopped(self, step: _Step, attempt: int) -> None:
        if self.end is RunEnd.LEASE_LOST:
            return  # the run is someone else's now: nothing here is ours to record
        if self.end is RunEnd.CANCELLED:
            end = NodeEnd(
                node=step.key,
                attempt=attempt,
                outcome=AttemptOutcome.CANCELLED,
                state=NodeState.FAILED,
                error=ErrorInfo(
                    error_type="Cancelled",
                    message="the task was cancelled",
                    fingerprint="cancelled",
                ),
            )
        else:  # this worker is shutting down: the next worker re-runs the node
            end = NodeEnd(
                node=step.key,
                attempt=attempt,
                outcome=AttemptOutcome.INTERRUPTED,
                state=NodeState.RETRYING,
            )
        with contextlib.suppress(TaskloomError):
            await self._runs.end_node(self.lease, end, self._now())

    async def _give_up_interrupted(
        self, step: _Step, previous: NodeRun, interruptions: int
    ) -> None:
        node = step.node
        info = ErrorInfo(
            error_type="WorkerLost",
            message=f"its worker stopped {interruptions} times while running it",
            fingerprint=describe(
                RuntimeError("worker lost"),
                workflow=self.workflow.name,
                node=node.name,
                timeout_s=None,
            ).fingerprint,
        )
        end = NodeEnd(
            node=step.key,
            attempt=previous.attempt,
            outcome=AttemptOutcome.INTERRUPTED,
            state=NodeState.FAILED,
            error=info,
            interruptions=interruptions,
        )
        self._remember(await self._runs.end_node(self.lease, end, self._now()))
        if not step.may_fail:
            self.end = RunEnd.CANCELLED
            raise _NodeFailed(node, previous.attempt, info, step.key)

    async def _sleep_until_due(self, run: NodeRun) -> None:
        if run.not_before is not None:
            delay = (run.not_before - self._now()).total_seconds()
            if delay > 0:
                await self._manager.clock.sleep(delay)

    # -- outcome --------------------------------------------------------------------------

    async def _fail_node(self, failure: _NodeFailed) -> None:
        node, error = failure.node, failure.error
        await self._fail(
            "node_failed",
            f"node {failure.key!r} failed after {failure.attempts} attempt(s): "
            f"{error.error_type}: {error.message}",
            error_type=error.error_type,
            fingerprint=error.fingerprint,
            details={"node": failure.key, "phase": node.phase, "attempts": failure.attempts},
        )

    async def _fail_invalid_output(self, error: ValueError) -> None:
        await self._fail("invalid_output", f"the workflow's result is invalid: {error}")

    async def _fail(
        self,
        code: str,
        message: str,
        *,
        error_type: str | None = None,
        fingerprint: str | None = None,
        details: JsonValue = None,
    ) -> None:
        failure = TaskFailure(
            code=code,
            message=message,
            error_type=error_type,
            fingerprint=fingerprint,
            details=details,
        )
        with anyio.move_on_after(_FINAL_WRITE_S, shield=True):
            await self._final_write(
                self._manager.fail(self.task_id, failure, lease=self.lease), RunEnd.FAILED
            )

    async def _final_write(self, write: Awaitable[object], outcome: RunEnd) -> None:
        self.dropping_lease = True
        try:
            await write
        except IllegalTransitionError:
            self.end = RunEnd.CANCELLED  # cancelled meanwhile: the cancellation stands
        except LeaseLostError:
            self.end = RunEnd.LEASE_LOST
        else:
            self.end = outcome  # the store dropped the lease with that write

    async def _write_progress(self, completed: float, total: float, message: str) -> None:
        with contextlib.suppress(TaskStateError):  # ended meanwhile: its final status says it
            await self._manager.report_progress(
                self.task_id,
                completed=completed,
                total=total,
                message=message,
                lease=self.lease,
                planned_items=self.progress.planned_items,
            )

    def _now(self) -> datetime:
        return self._manager.clock.now()


class _Lanes:
    """Plain nodes to run, taken in order by at most *limit* tasks (lanes), each running
    one node after another: 1,000 ready nodes cost 64 tasks, not 1,000 (ADR 0051). A lane
    runs each node's step itself and says it ended: no coroutine of its own per node
    (ADR 0058)."""

    def __init__(
        self,
        task_group: TaskGroup,
        limit: int,
        nodes: Mapping[str, Node[Any]],
        run_step: Callable[[_Step, Any], Awaitable[None]],
        workflow_input: Any,
        ended: "_EndedNodes",
    ) -> None:
        self._task_group = task_group
        self._limit = limit
        self._nodes = nodes
        self._run_step = run_step
        self._input = workflow_input
        self._ended = ended
        self._queued: deque[str] = deque()
        self._lanes = 0

    def add(self, name: str) -> None:
        """Run node *name* in a free lane, or once a lane is free."""
        self._queued.append(name)
        if self._lanes < self._limit:
            self._lanes += 1
            self._task_group.start_soon(self._lane)

    async def _lane(self) -> None:
        queued, nodes, run_step, put = self._queued, self._nodes, self._run_step, self._ended.put
        try:
            while queued:
                name = queued.popleft()
                await run_step(_Step(nodes[name], name), self._input)
                put(name)  # not reached if it raised: as :meth:`RunExecution._run_node`
        finally:
            self._lanes -= 1


class _EndedNodes:
    """The names of nodes whose run ended, in the order they ended."""

    def __init__(self) -> None:
        self._names: list[str] = []
        self._arrived = anyio.Event()

    def put(self, name: str) -> None:
        names = self._names
        names.append(name)
        if len(names) == 1:  # the first since the last take: the others found it set
            self._arrived.set()

    async def taken(self) -> list[str]:
        """Every name put since the last call (at least one: waits for it), in order:
        the lanes end many nodes per commit, and the scheduler takes them all at once."""
        while not self._names:
            self._arrived = anyio.Event()
            await self._arrived.wait()
        names, self._names = self._names, []
        return names


class _Runtime:
    """The runner's side of a node's context: progress, questions and durable sleeps.

    A question or a sleep is known by its key, ``<node>#<n>`` (the node's n-th question
    in this attempt) or ``<node>#sleep<n>``: a node re-run after its wait makes the same
    calls in the same order, and those already answered or elapsed return at once."""

    def __init__(self, run: RunExecution, step: _Step) -> None:
        self._run = run
        self._step = step
        self._questions = 0
        self._sleeps = 0
        self._children = 0

    async def report(self, completed: float, total: float | None, message: str | None) -> None:
        step = self._step
        self._run.progress.node_reported(step.node, completed, total, message, key=step.key)

    async def ask(self, message: str, schema: dict[str, JsonValue]) -> JsonValue:
        self._questions += 1
        key = f"{self._step.key}#{self._questions}"
        run = self._run
        task = await run._manager.get(run.task_id)
        if key in task.input_responses:
            return task.input_responses[key]
        request = InputRequest(message=message, requested_schema=schema)
        raise NodeWaits(Wait("input", key), question=request)

    async def sleep(self, seconds: float) -> None:
        self._sleeps += 1
        key = f"{self._step.key}#sleep{self._sleeps}"
        run = self._run
        now = run._now()
        task = await run._manager.get(run.task_id)
        due = task.timers.get(key)
        if due is None:
            if seconds <= 0:
                return
            due = now + timedelta(seconds=seconds)
        elif due <= now:
            return
        raise NodeWaits(Wait("timer", key), due=due)

    async def child(self, workflow: Workflow[Any], arguments: dict[str, JsonValue]) -> JsonValue:
        """Start the child (once: its idempotency key is this call's), and return its
        result once it has ended, or end the attempt to wait for it (ADR 0026). A retry
        of the node after a failed attempt starts new children (the key counts them)."""
        self._children += 1
        run, step = self._run, self._step
        failures = run._nodes[step.key].failures
        call = f"{step.key}#child{self._children}" + (f"@{failures}" if failures else "")
        try:
            validated = workflow.parse_arguments(arguments)
        except ValidationError as error:
            accepted = workflow.input_schema().get("properties", {})
            raise InvalidRequestError(arguments_problem(workflow.name, error, accepted)) from None
        parent = run._task
        child = await run._manager.create(
            workflow.name,
            validated.model_dump(mode="json"),
            owner=parent.owner,
            ttl_ms=parent.ttl_ms,
            idempotency_key=child_idempotency_key(parent.id, call),
            workflow_version=workflow.version,
            parent_id=parent.id,
            shape=workflow.shape(),
        )
        if child.is_terminal:
            return child_result(child)
        raise NodeWaits(Wait("child", child.id))


def _copied(arguments: dict[str, JsonValue]) -> dict[str, JsonValue]:
    """*arguments* with each of their objects and arrays copied (the rest of a JSON value
    cannot change): as private as ``copy.deepcopy``'s, in less than half its time (it
    keeps a memo of every object), on the loop once per claim of a run."""
    return {key: _copied_value(value) for key, value in arguments.items()}


def _copied_value(value: JsonValue) -> JsonValue:
    if isinstance(value, dict):
        return _copied(value)
    if isinstance(value, list):
        return [_copied_value(item) for item in value]
    return value


def _wait_of(run: NodeRun) -> Wait | None:
    """What a waiting node waits for; ``None`` for a wait this version cannot read (a
    newer version's kind), which counts as over: the node runs again rather than never."""
    try:
        return Wait.parse(run.waiting_for or "")
    except ValueError:
        return None


def _failures_in(group: BaseExceptionGroup[_NodeFailed]) -> list[_NodeFailed]:
    """The node failures in *group*, also those of a map's items (a nested group)."""
    found: list[_NodeFailed] = []
    for error in group.exceptions:
        if isinstance(error, BaseExceptionGroup):
            found += _failures_in(error)
        elif isinstance(error, _NodeFailed):
            found.append(error)
    return found


def _map_error(node: Node[Any], message: str) -> ErrorInfo:
    return ErrorInfo(
        error_type="MapItemsError",
        message=f"map {node.name!r} has no items: {message}",
        fingerprint=f"map-items:{node.name}",
    )


def _unknown_error() -> ErrorInfo:
    return ErrorInfo(error_type="Unknown", message="no error was recorded", fingerprint="unknown")


__all__ = ("MAX_INTERRUPTIONS", "RunEnd", "RunExecution")
