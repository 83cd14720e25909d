"""The at-least-once window on PostgreSQL, entered on purpose: a node's body has returned
(its side effect happened) but its worker process dies before the node's end commits.

A worker process (``pg_worker``) runs the ``window`` workflow (``first``, then ``last``;
each body leaves a completion mark as its last action). The test locks the held node's
checkpoint row from a connection of its own, lets the body go on (the ``go`` file), and
waits until the mark is written and the worker's end write waits for that lock: the body
has returned and its checkpoint has not committed. Then it SIGKILLs the worker, ends the
dead worker's database sessions (so the write in flight never commits), releases the lock
and starts another worker. What the engine promises (docs/workflows.md, "What the runner
guarantees"; ADR 0004), checked for the end of ``first`` (an end of its own) and of
``last`` (the run's final write, its end and the result together):

- the held node runs again: its first attempt is recorded as ``interrupted`` (one
  interruption, no failure) and a second attempt completes;
- its body ran to its end once per attempt, twice in all; the other node once;
- the run completes once, with the rerun's output in its result; the node that had
  completed is not run again; no lease and no open attempt is left.
"""

import signal
import sys
from collections import Counter
from pathlib import Path
from typing import Any, Final

import anyio
import psycopg
import pytest
from psycopg import sql

from taskloom.bootstrap import open_engine
from taskloom.engine.history import Cause
from taskloom.engine.runs import AttemptOutcome, NodeState
from taskloom.engine.states import TaskState, is_terminal
from taskloom.engine.submit import submit
from tests import postgres
from tests.helpers import eventually, helper_process
from tests.integration import pg_worker

pytestmark = pytest.mark.slow

ROOT: Final = Path(__file__).resolve().parents[2]
LEASE_S: Final = 1.0
"""The killed worker's lease: the next worker takes its run over once it expires."""
TAKEOVER_S: Final = 30.0


def _worker(schema: str) -> list[str]:
    """The command of a ``pg_worker`` process on *schema*."""
    command = [sys.executable, "-m", "tests.integration.pg_worker"]
    return [*command, postgres.TEST_URL, schema, str(LEASE_S)]


class Hold:
    """The test's own connections: one holds a checkpoint row locked, one (autocommit)
    reads and ends sessions."""

    def __init__(
        self,
        schema: str,
        holder: psycopg.AsyncConnection[Any],
        admin: psycopg.AsyncConnection[Any],
    ) -> None:
        self.schema = schema
        self.holder = holder
        self.admin = admin

    async def _rows(self, query: str, *params: object) -> list[tuple[Any, ...]]:
        cursor = await self.admin.execute(
            sql.SQL(query).format(schema=sql.Identifier(self.schema)), params
        )
        return await cursor.fetchall()

    async def running(self, task_id: str, node: str) -> bool:
        """Whether *node*'s first attempt has started (its checkpoint row is there)."""
        rows = await self._rows(
            "SELECT state, attempt FROM {schema}.node_runs WHERE task_id = %s AND node = %s",
            task_id,
            node,
        )
        return rows == [("running", 1)]

    async def lock(self, task_id: str, node: str) -> None:
        """Lock *node*'s checkpoint row until :meth:`release`: its end cannot commit."""
        await self.holder.execute(
            sql.SQL("SELECT 1 FROM {} WHERE task_id = %s AND node = %s FOR UPDATE").format(
                sql.Identifier(self.schema, "node_runs")
            ),
            (task_id, node),
        )

    async def blocked(self, name: str) -> bool:
        """Whether a session called *name* waits for the lock :meth:`lock` took."""
        rows = await self._rows(
            "SELECT pid FROM pg_stat_activity WHERE application_name = %s"
            " AND %s::int = ANY(pg_blocking_pids(pid))",
            name,
            self.holder.info.backend_pid,
        )
        return bool(rows)

    async def end_sessions(self, name: str) -> None:
        """End every session called *name*, a dead process's, and wait until they are
        gone. PostgreSQL notices a dead client only when it next reads from it: a
        session whose statement waits for a lock runs it once the lock is released, and
        a statement sent alone (a node's end is one) commits as it ends, fenced by a
        lease that still lasts: the end would be written after all (seen without this),
        by a process already dead."""
        await self._rows(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = %s",
            name,
        )

        async def gone() -> bool:
            left = await self._rows(
                "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s", name
            )
            return left == [(0,)]

        await eventually(gone)

    async def release(self) -> None:
        await self.holder.rollback()

    async def leases(self) -> int:
        ((count,),) = await self._rows("SELECT count(*) FROM {schema}.leases")
        return int(count)


def _marks(path: Path) -> Counter[tuple[str, int]]:
    """The completion marks, as (node, attempt), each with how often it was left."""
    if not path.exists():
        return Counter()
    lines = path.read_text(encoding="utf-8").splitlines()
    return Counter((node, int(attempt)) for _, node, attempt in map(str.split, lines))


@pytest.mark.parametrize("held", ["first", "last"])
async def test_a_worker_killed_between_a_body_and_its_checkpoint_runs_the_node_again(
    schema: str, held: str, tmp_path: Path
) -> None:
    marks, go = tmp_path / "marks", tmp_path / "go"
    other = "last" if held == "first" else "first"
    arguments = {"marks": str(marks), "held": held, "go": str(go)}
    settings = pg_worker.settings(postgres.TEST_URL, schema, run_worker=False)
    async with (
        open_engine(settings) as here,
        await psycopg.AsyncConnection.connect(postgres.TEST_URL) as holder,
        await psycopg.AsyncConnection.connect(postgres.TEST_URL, autocommit=True) as admin,
    ):
        hold = Hold(schema, holder, admin)
        async with helper_process(_worker(schema), cwd=ROOT) as worker:
            name = worker.ready  # its sessions' application name
            task = await submit(here.manager, pg_worker.window, arguments)

            async def started() -> bool:
                return await hold.running(task.id, held)

            await eventually(started, within_s=30)
            await hold.lock(task.id, held)
            await anyio.Path(go).touch()

            async def in_the_window() -> bool:  # the body returned; its end waits
                return (held, 1) in _marks(marks) and await hold.blocked(name)

            await eventually(in_the_window, within_s=30)
            worker.process.kill()
            with anyio.fail_after(10):
                assert await worker.process.wait() == -signal.SIGKILL
            await hold.end_sessions(name)
        await hold.release()

        # As the kill left it: the body's side effect happened, its checkpoint did not.
        before = await here.runs.checkpoints(task.id)
        killed = before[held]
        assert (killed.state, killed.attempt, killed.output) == (NodeState.RUNNING, 1, None)
        assert [(a.node, a.attempt, a.outcome) for a in await here.runs.attempts(task.id)] == [
            *([("first", 1, AttemptOutcome.COMPLETED)] if held == "last" else []),
            (held, 1, None),
        ]
        assert (await here.manager.get(task.id)).state is TaskState.RUNNING
        assert await hold.leases() == 1

        live = pg_worker.settings(
            postgres.TEST_URL, schema, run_worker=True, poll_s=0.05, lease_s=LEASE_S
        )
        async with open_engine(live) as taking_over:
            assert taking_over.worker is not None
            with anyio.fail_after(TAKEOVER_S):
                done = await here.manager.wait_until_terminal(task.id)

        # The run completed once, with the rerun's output; nothing else ran again.
        assert done.state is TaskState.COMPLETED, done.error
        by = {"first": 1, "last": 1, held: 2}
        assert done.result == f"first by attempt {by['first']}, last by attempt {by['last']}"
        _, history = await here.manager.history(task.id)
        assert [entry.cause for entry in history if is_terminal(entry.state)] == [Cause.COMPLETED]
        after = await here.runs.checkpoints(task.id)
        rerun = after[held]
        assert (rerun.state, rerun.attempt, rerun.failures, rerun.interruptions) == (
            NodeState.COMPLETED,
            2,
            0,
            1,
        )
        assert (after[other].state, after[other].attempt) == (NodeState.COMPLETED, 1)
        if before.get(other) is not None:  # completed before the kill: untouched since
            assert after[other] == before[other]
        attempts = {(a.node, a.attempt): a for a in await here.runs.attempts(task.id)}
        assert {key: a.outcome for key, a in attempts.items()} == {
            (held, 1): AttemptOutcome.INTERRUPTED,
            (held, 2): AttemptOutcome.COMPLETED,
            (other, 1): AttemptOutcome.COMPLETED,
        }
        assert attempts[held, 2].worker == taking_over.worker.worker_id != attempts[held, 1].worker
        # Each attempt's body ran to its end once: the held node's twice in all.
        assert _marks(marks) == {(held, 1): 1, (held, 2): 1, (other, 1): 1}
        assert await hold.leases() == 0
