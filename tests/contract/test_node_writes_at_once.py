"""Many node starts and ends written at once, on every store (SQLite merges those of one
run in one batch into one call, ADR 0051; PostgreSQL sends those of any runs that wait
at one moment as one statement, ADR 0052): each caller gets its own checkpoint, an end
of a node not running is refused alone and writes nothing, a stale lease refuses its
run's writes and no other run's, and a start that fails (not a refusal) fails alone."""

from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta
from functools import partial
from typing import Any, cast

import pytest

from taskloom.engine.errors import LeaseLostError
from taskloom.engine.manager import TaskManager, claim_start
from taskloom.engine.ports import TaskStore
from taskloom.engine.runs import (
    AttemptOutcome,
    ErrorInfo,
    Lease,
    NodeEnd,
    NodeStart,
    NodeState,
    RunStore,
    node_ended,
)
from taskloom.persistence.sql.store import SqlStore
from taskloom.persistence.sqlite import SqliteTaskStore, nodes
from taskloom.testing import FakeClock
from tests.helpers import all_at_once

NODES = [f"n{index}" for index in range(40)]


async def _lease(manager: TaskManager, store: TaskStore, clock: FakeClock) -> Lease:
    await manager.create("job")
    (claimed,) = await cast(RunStore, store).claim_runs(
        worker="w",
        workflows=frozenset({"job"}),
        now=clock.now(),
        lease_for=timedelta(seconds=10),
        limit=1,
        start=claim_start(clock.now()),
    )
    return claimed.lease


async def _at_once(calls: list[Callable[[], Awaitable[Any]]]) -> list[Any]:
    """Every call's value or error, the calls made concurrently (one writer batch)."""
    return list(await all_at_once(calls))


def _end(node: str, attempt: int = 1, output: int = 0) -> NodeEnd:
    return NodeEnd(
        node=node,
        attempt=attempt,
        outcome=AttemptOutcome.COMPLETED,
        state=NodeState.COMPLETED,
        output=output,
    )


async def test_each_start_and_end_gets_its_own_checkpoint(
    manager: TaskManager, store: TaskStore, clock: FakeClock
) -> None:
    runs = cast(RunStore, store)
    lease = await _lease(manager, store, clock)
    now = clock.now()
    started = await _at_once(
        [partial(runs.start_node, lease, NodeStart(node=node, attempt=1), now) for node in NODES]
    )
    assert [(run.node, run.state, run.attempt) for run in started] == [
        (node, NodeState.RUNNING, 1) for node in NODES
    ]
    clock.advance(1)
    later = clock.now()
    ends = [_end(node, output=index) for index, node in enumerate(NODES)]
    ends[5] = _end(NODES[5], attempt=2)  # not the running attempt: refused alone
    ended = await _at_once([partial(runs.end_node, lease, end, later) for end in ends])
    assert isinstance(ended[5], LeaseLostError)
    assert "is not running" in str(ended[5])
    for index, run in enumerate(ended):
        if index == 5:
            continue
        assert (run.node, run.state, run.output, run.updated_at) == (
            NODES[index],
            NodeState.COMPLETED,
            index,
            later,
        )
    stored = await runs.checkpoints(lease.task_id)
    assert stored[NODES[5]].state is NodeState.RUNNING  # the refused end wrote nothing
    assert {node: stored[node] for node in NODES if node != NODES[5]} == {
        run.node: run for index, run in enumerate(ended) if index != 5
    }
    attempts = {(each.node, each.attempt): each for each in await runs.attempts(lease.task_id)}
    assert attempts[NODES[5], 1].ended_at is None
    assert all(attempts[node, 1].outcome is AttemptOutcome.COMPLETED for node in NODES[6:])


async def test_a_stale_lease_refuses_every_one_and_writes_nothing(
    manager: TaskManager, store: TaskStore, clock: FakeClock
) -> None:
    runs = cast(RunStore, store)
    lease = await _lease(manager, store, clock)
    now = clock.now()
    await runs.start_node(lease, NodeStart(node="a", attempt=1), now)
    stale = lease.model_copy(update={"token": "not-the-token"})
    before = await runs.checkpoints(lease.task_id), list(await runs.attempts(lease.task_id))
    found = await _at_once(
        [
            *(
                partial(runs.start_node, stale, NodeStart(node=node, attempt=1), now)
                for node in NODES
            ),
            lambda: runs.end_node(stale, _end("a"), now),
        ]
    )
    assert all(isinstance(each, LeaseLostError) for each in found)
    assert (await runs.checkpoints(lease.task_id), list(await runs.attempts(lease.task_id))) == (
        before
    )


async def test_two_runs_at_once_a_lost_lease_refuses_only_its_own_run(
    manager: TaskManager, store: TaskStore, clock: FakeClock
) -> None:
    """Two runs' starts, then their ends, written at once (one statement each on
    PostgreSQL), one run's with a lease it lost: that run's writes are refused and write
    nothing, the other run's land, each with its own checkpoint."""
    runs = cast(RunStore, store)
    kept, lost = await _lease(manager, store, clock), await _lease(manager, store, clock)
    stale = lost.model_copy(update={"token": "not-the-token"})
    now = clock.now()
    half = NODES[:20]
    await _at_once(
        [partial(runs.start_node, lost, NodeStart(node=node, attempt=1), now) for node in half]
    )
    before = await runs.checkpoints(lost.task_id), list(await runs.attempts(lost.task_id))
    started = await _at_once(
        [
            partial(runs.start_node, lease, NodeStart(node=node, attempt=attempt), now)
            for node in half
            for lease, attempt in ((kept, 1), (stale, 2))
        ]
    )
    assert [type(each) for each in started[1::2]] == [LeaseLostError] * len(half)
    assert [(run.node, run.state) for run in started[::2]] == [
        (node, NodeState.RUNNING) for node in half
    ]
    clock.advance(1)
    later = clock.now()
    ended = await _at_once(
        [
            partial(runs.end_node, lease, _end(node, output=index), later)
            for index, node in enumerate(half)
            for lease in (kept, stale)
        ]
    )
    assert [type(each) for each in ended[1::2]] == [LeaseLostError] * len(half)
    assert [(run.node, run.output) for run in ended[::2]] == [
        (node, index) for index, node in enumerate(half)
    ]
    assert await runs.checkpoints(kept.task_id) == {run.node: run for run in ended[::2]}
    assert (await runs.checkpoints(lost.task_id), list(await runs.attempts(lost.task_id))) == (
        before
    )


async def test_a_merged_start_that_fails_fails_alone(
    manager: TaskManager, store: TaskStore, clock: FakeClock
) -> None:
    """A second start of an attempt already started breaks the attempts' key (in the
    SQL stores): that start fails, the others merged with it land (SQLite's writer runs
    each member alone, PostgreSQL sends each write of the failed statement alone)."""
    if not isinstance(store, SqlStore):
        pytest.skip("the memory store has no key to break")
    runs = cast(RunStore, store)
    lease = await _lease(manager, store, clock)
    now = clock.now()
    await runs.start_node(lease, NodeStart(node=NODES[3], attempt=1), now)
    found = await _at_once(
        [partial(runs.start_node, lease, NodeStart(node=node, attempt=1), now) for node in NODES]
    )
    assert isinstance(found[3], Exception)
    assert all(run.state is NodeState.RUNNING for index, run in enumerate(found) if index != 3)
    stored = await runs.checkpoints(lease.task_id)
    assert set(stored) == set(NODES)


async def test_sqlite_merges_them(
    manager: TaskManager, store: TaskStore, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    if not isinstance(store, SqliteTaskStore):
        pytest.skip("the group-commit writer is SQLite's")
    merged: list[tuple[str, int]] = []

    def spy(kind: str, many: Any) -> Any:
        def counted(payloads: Any, raw: Any) -> Any:
            merged.append((kind, len(payloads)))
            return many(payloads, raw)

        return counted

    monkeypatch.setattr(nodes, "start_many", spy("start", nodes.start_many))
    monkeypatch.setattr(nodes, "end_many", spy("end", nodes.end_many))
    runs = cast(RunStore, store)
    lease = await _lease(manager, store, clock)
    now = clock.now()
    await _at_once(
        [partial(runs.start_node, lease, NodeStart(node=node, attempt=1), now) for node in NODES]
    )
    await _at_once([partial(runs.end_node, lease, _end(node), now) for node in NODES])
    assert sum(count for kind, count in merged if kind == "start") == len(NODES)
    assert sum(count for kind, count in merged if kind == "end") == len(NODES)
    assert len(merged) <= 4  # 80 writes, merged by kind in their batches


def _ends(attempt: int, now: datetime) -> list[NodeEnd]:
    """One end of each kind a runner writes, for nodes ``k0`` to ``k5``."""
    error = ErrorInfo(error_type="ValueError", message=f"bad {attempt}", fingerprint="f")
    return [
        NodeEnd(
            node="k0",
            attempt=attempt,
            outcome=AttemptOutcome.COMPLETED,
            state=NodeState.COMPLETED,
            output={"a": [1, 2.5, None, "x"], "attempt": attempt},
        ),
        NodeEnd(
            node="k1",
            attempt=attempt,
            outcome=AttemptOutcome.FAILED,
            state=NodeState.RETRYING,
            error=error,
            not_before=now + timedelta(seconds=3),
        ),
        NodeEnd(
            node="k2",
            attempt=attempt,
            outcome=AttemptOutcome.TIMED_OUT,
            state=NodeState.FAILED,
            error=error,
            output="dropped: only a completed node keeps one",
        ),
        NodeEnd(
            node="k3",
            attempt=attempt,
            outcome=AttemptOutcome.WAITING,
            state=NodeState.WAITING,
            waiting_for="timer:t",
            not_before=now + timedelta(hours=1),
        ),
        NodeEnd(
            node="k4",
            attempt=attempt,
            outcome=AttemptOutcome.INTERRUPTED,
            state=NodeState.FAILED,
            error=error,
            interruptions=3,
        ),
        NodeEnd(
            node="k5",
            attempt=attempt,
            outcome=AttemptOutcome.CANCELLED,
            state=NodeState.FAILED,
        ),
    ]


async def test_merged_ends_leave_the_checkpoints_node_ended_states(
    manager: TaskManager, store: TaskStore, clock: FakeClock
) -> None:
    """Ends of every kind, after starts that carry failures, interruptions, an error and
    an output over (a completed end after a retrying one among them): each answer, and each row stored, is ``engine.runs.node_ended`` of
    the checkpoint the start left (ADR 0051 builds a merged end's answer from the
    running row rather than reading it back)."""
    runs = cast(RunStore, store)
    lease = await _lease(manager, store, clock)
    names = [f"k{index}" for index in range(6)]
    for attempt in (1, 2):
        now = clock.now()
        starts = [
            NodeStart(
                node=name,
                attempt=attempt,
                interruptions=attempt - 1,
                interrupted_attempt=None if attempt == 1 or index % 2 else attempt - 1,
            )
            for index, name in enumerate(names)
        ]
        started = await _at_once([partial(runs.start_node, lease, s, now) for s in starts])
        clock.advance(1)
        later = clock.now()
        # each kind of end moves to the next node at attempt 2: the completed end then
        # follows a failed attempt's error and retry time (ADR 0054's constant text)
        ends = sorted(
            (
                end.model_copy(update={"node": names[(index + attempt - 1) % len(names)]})
                for index, end in enumerate(_ends(attempt, later))
            ),
            key=lambda end: names.index(end.node),
        )
        ended = await _at_once([partial(runs.end_node, lease, end, later) for end in ends])
        expected = [node_ended(run, end, later) for run, end in zip(started, ends, strict=True)]
        assert ended == expected
        stored = await runs.checkpoints(lease.task_id)
        assert [stored[name] for name in names] == expected
        clock.advance(1)


async def test_merged_starts_close_the_attempts_they_resume_from(
    manager: TaskManager, store: TaskStore, clock: FakeClock
) -> None:
    """Starts that name an interrupted attempt close it (and only those); the others'
    attempts stay open."""
    runs = cast(RunStore, store)
    lease = await _lease(manager, store, clock)
    now = clock.now()
    await _at_once(
        [partial(runs.start_node, lease, NodeStart(node=node, attempt=1), now) for node in NODES]
    )
    clock.advance(1)
    later = clock.now()
    resumed = NODES[::2]
    await _at_once(
        [
            partial(
                runs.start_node,
                lease,
                NodeStart(node=node, attempt=2, interruptions=1, interrupted_attempt=1),
                later,
            )
            for node in resumed
        ]
    )
    attempts = {(each.node, each.attempt): each for each in await runs.attempts(lease.task_id)}
    for node in NODES:
        first = attempts[node, 1]
        if node in resumed:
            assert (first.outcome, first.ended_at) == (AttemptOutcome.INTERRUPTED, later)
            assert attempts[node, 2].ended_at is None
        else:
            assert (first.outcome, first.ended_at) == (None, None)
            assert (node, 2) not in attempts
    stored = await runs.checkpoints(lease.task_id)
    assert {
        node: (stored[node].attempt, stored[node].interruptions) for node in resumed
    } == dict.fromkeys(resumed, (2, 1))


async def _end_an_ended_node_again(runs: RunStore, lease: Lease, clock: FakeClock) -> None:
    """Every node started; ``n5`` ended (a failure, to retry); then the same attempt of
    every node ended at once: ``n5``'s is refused and leaves its attempt as it was."""
    now = clock.now()
    await _at_once(
        [partial(runs.start_node, lease, NodeStart(node=node, attempt=1), now) for node in NODES]
    )
    error = ErrorInfo(error_type="ValueError", message="bad", fingerprint="f")
    failed = NodeEnd(
        node=NODES[5],
        attempt=1,
        outcome=AttemptOutcome.FAILED,
        state=NodeState.RETRYING,
        error=error,
        not_before=now + timedelta(seconds=5),
    )
    await runs.end_node(lease, failed, now)
    before = [each for each in await runs.attempts(lease.task_id) if each.node == NODES[5]]
    clock.advance(1)
    later = clock.now()
    ended = await _at_once([partial(runs.end_node, lease, _end(node), later) for node in NODES])
    assert isinstance(ended[5], LeaseLostError)
    assert all(run.state is NodeState.COMPLETED for i, run in enumerate(ended) if i != 5)
    after = [each for each in await runs.attempts(lease.task_id) if each.node == NODES[5]]
    assert after == before
    assert before[0].outcome is AttemptOutcome.FAILED
    assert (await runs.checkpoints(lease.task_id))[NODES[5]].state is NodeState.RETRYING


async def test_an_end_of_a_node_that_ended_that_attempt_writes_nothing(
    manager: TaskManager, store: TaskStore, clock: FakeClock
) -> None:
    """The attempt's row exists: only the check that the node runs it refuses the end
    (a merged end's read of the running rows, on SQLite; ADR 0051's amendment)."""
    await _end_an_ended_node_again(
        cast(RunStore, store), await _lease(manager, store, clock), clock
    )


async def test_sqlite_an_end_retried_alone_after_a_failed_merge_writes_nothing_refused(
    manager: TaskManager, store: TaskStore, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A merged end that fails (not a refusal) is retried member by member, each by the
    shared script: the refused one still writes nothing."""
    if not isinstance(store, SqliteTaskStore):
        pytest.skip("the merge and its fallback are SQLite's writer's")
    failures: list[int] = []

    def failing(payloads: Any, raw: Any) -> Any:
        if len(payloads) > 1:
            failures.append(len(payloads))
            raise RuntimeError("a merged end that fails")
        return real(payloads, raw)

    real = nodes.end_many
    monkeypatch.setattr(nodes, "end_many", failing)
    await _end_an_ended_node_again(
        cast(RunStore, store), await _lease(manager, store, clock), clock
    )
    assert failures  # the merged call failed and its members ran alone
