"""A run its worker hands back is announced on PostgreSQL, and another worker claims it at
once rather than at its next poll (the release statement, ADR 0066).

Every worker here polls and beats every 600 s and holds its leases for 1,800 s: a run
that another worker takes over within these tests' bounds was taken because of the
announcement."""

from functools import partial

import anyio
import psycopg
import pytest
from psycopg import sql

from taskloom.bootstrap import open_engine
from taskloom.engine.events import RELEASED
from taskloom.engine.manager import TaskManager
from taskloom.engine.models import TaskId
from taskloom.engine.runs import AttemptOutcome
from taskloom.engine.states import TaskState
from taskloom.engine.submit import submit
from taskloom.persistence.postgres import PostgresTaskStore
from tests import postgres
from tests.helpers import eventually
from tests.integration import pg_worker
from tests.integration.conftest import Heard
from tests.integration.pg_worker import server, worker_process


async def _first_attempt_running(manager: TaskManager, task_id: str) -> None:
    async def running() -> bool:
        attempts = await manager.runs.attempts(TaskId(task_id))
        return any(attempt.attempt == 1 and attempt.outcome is None for attempt in attempts)

    await eventually(running, within_s=15)


@pytest.mark.parametrize("worker_only", [True, False], ids=["worker-only", "listens-to-all"])
async def test_a_run_handed_back_by_a_stopping_worker_is_claimed_by_another_at_once(
    schema: str, worker_only: bool
) -> None:
    async with server(schema) as here:
        async with worker_process(schema) as stopping:
            task = await submit(here.manager, pg_worker.once, {"n": 0})  # hangs on attempt 1
            await _first_attempt_running(here.manager, task.id)
            other = pg_worker.settings(
                postgres.TEST_URL, schema, run_worker=True, worker_only=worker_only
            )
            async with open_engine(other) as taking_over:
                assert isinstance(taking_over.runs, PostgresTaskStore)
                stopping.terminate()  # SIGTERM: a clean stop hands the run back
                with anyio.fail_after(15):
                    await stopping.wait()
                with anyio.fail_after(15):  # its poll is 600 s away, its lease 1,800 s
                    done = await here.manager.wait_until_terminal(task.id)
        assert stopping.returncode == 0
        assert done.state is TaskState.COMPLETED
        assert done.result == 2  # the second attempt, in the other worker
        attempts = await here.manager.runs.attempts(task.id)
        assert [(a.attempt, a.outcome) for a in attempts] == [
            (1, AttemptOutcome.INTERRUPTED),
            (2, AttemptOutcome.COMPLETED),
        ]


async def test_a_run_handed_back_while_one_node_asks_and_another_runs_is_claimed_at_once(
    schema: str,
) -> None:
    async with server(schema) as here:
        async with worker_process(schema) as stopping:
            task = await submit(here.manager, pg_worker.asker, {"n": 0})

            async def asking_and_leased() -> bool:
                current = await here.manager.get(task.id)
                return current.state is TaskState.INPUT_REQUIRED and not current.parked

            await eventually(asking_and_leased, within_s=15)
            other = pg_worker.settings(postgres.TEST_URL, schema, run_worker=True)
            async with open_engine(other):
                stopping.terminate()
                with anyio.fail_after(15):
                    await stopping.wait()
                await eventually(partial(_attempt_started, here.manager, task.id, "busy", 2))
                asked = await here.manager.get(task.id)
                (key,) = asked.input_requests
                await here.manager.provide_input(task.id, key, 7)
                with anyio.fail_after(15):
                    done = await here.manager.wait_until_terminal(task.id)
        assert done.state is TaskState.COMPLETED
        assert done.result == {"asks": 7, "busy": 2}


async def _attempt_started(manager: TaskManager, task_id: str, node: str, attempt: int) -> bool:
    attempts = await manager.runs.attempts(TaskId(task_id))
    return any(each.node == node and each.attempt == attempt for each in attempts)


async def test_a_run_that_ends_is_cancelled_or_parks_is_not_announced_as_released(
    schema: str, heard: Heard
) -> None:
    async with server(schema) as here, worker_process(schema):
        ended = await submit(here.manager, pg_worker.double, {"n": 1})
        with anyio.fail_after(15):
            assert (await here.manager.wait_until_terminal(ended.id)).result == 2
        cancelled = await submit(here.manager, pg_worker.hold, {"n": 0})
        await _first_attempt_running(here.manager, cancelled.id)
        await here.manager.cancel(cancelled.id)
        parked = await submit(here.manager, pg_worker.two_questions, {"n": 0})

        async def asked_and_parked() -> bool:
            current = await here.manager.get(parked.id)
            return current.parked and len(current.input_requests) == 2

        await eventually(asked_and_parked, within_s=15)

        for task_id in (cancelled.id, parked.id):
            await eventually(partial(_lease_gone, schema, task_id), within_s=15)
        # once a later change of the worker's is heard, all it announced before is too
        marker = await submit(here.manager, pg_worker.double, {"n": 2})
        told = heard[id(here.manager)]
        await eventually(lambda: _true((marker.id, "completed") in told), within_s=15)
        assert [task_id for task_id, state in told if state == RELEASED] == []
        assert (ended.id, "completed") in told  # the channel did carry these runs' changes
        assert (cancelled.id, "running") in told
        assert (parked.id, "input_required") in told


async def _lease_gone(schema: str, task_id: str) -> bool:
    async with await psycopg.AsyncConnection.connect(postgres.TEST_URL) as connection:
        query = sql.SQL("SELECT count(*) FROM {}.leases WHERE task_id = %s")
        cursor = await connection.execute(query.format(sql.Identifier(schema)), (task_id,))
        found = await cursor.fetchone()
        return found is not None and found[0] == 0


async def _true(value: bool) -> bool:
    return value
