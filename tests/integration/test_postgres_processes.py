"""A server here and a worker in another OS process, on one PostgreSQL database."""

import anyio

from taskloom.bootstrap import open_engine
from taskloom.engine.manager import TaskManager
from taskloom.engine.models import TaskFailure
from taskloom.engine.runs import AttemptOutcome
from taskloom.engine.states import TaskState
from taskloom.engine.submit import submit
from tests import postgres
from tests.helpers import eventually
from tests.integration import pg_worker
from tests.integration.pg_worker import server, worker_process


async def _until_reported(manager: TaskManager, task_id: str, status: str) -> None:
    """Until *task_id*'s node has reported *status* (bounded)."""
    with anyio.fail_after(15), manager.subscribe([task_id]) as changes:
        current = await manager.get(task_id)
        while current.status_message is None or status not in current.status_message:
            current = await changes.receive()


async def test_work_submitted_here_runs_in_the_worker_process(schema: str) -> None:
    async with server(schema) as here, worker_process(schema):
        task = await submit(here.manager, pg_worker.double, {"n": 21})
        with anyio.fail_after(15):
            done = await here.manager.wait_until_terminal(task.id)
        assert done.result == 42
        (attempt,) = await here.runs.attempts(task.id)
        assert attempt.outcome is AttemptOutcome.COMPLETED
        assert here.worker is None  # so the worker that ran it was the other process's


async def test_a_cancel_made_here_reaches_the_node_running_in_the_worker_process(
    schema: str,
) -> None:
    async with server(schema) as here, worker_process(schema):
        task = await submit(here.manager, pg_worker.hold, {"n": 1})
        await _until_reported(here.manager, task.id, "holding")
        cancelled = await here.manager.cancel(task.id, reason="stop")
        assert cancelled.state is TaskState.CANCELLED

        async def the_node_saw_it() -> bool:
            attempts = await here.runs.attempts(task.id)
            return [a.outcome for a in attempts] == [AttemptOutcome.CANCELLED]

        await eventually(the_node_saw_it, within_s=15)


async def test_a_failure_written_here_without_the_lease_stops_the_node_in_the_worker(
    schema: str,
) -> None:
    """A declined question fails the run without its lease (``server/questions.py``)
    while a worker may still hold it: the worker-only process hears the failure on the
    work channel and stops the node (its poll and heartbeat are minutes away)."""
    async with server(schema) as here, worker_process(schema):
        task = await submit(here.manager, pg_worker.hold, {"n": 1})
        await _until_reported(here.manager, task.id, "holding")
        failed = await here.manager.fail(
            task.id, TaskFailure(code="input_declined", message="declined")
        )
        assert failed.state is TaskState.FAILED

        async def the_node_stopped() -> bool:
            attempts = await here.runs.attempts(task.id)
            return all(attempt.outcome is not None for attempt in attempts)

        await eventually(the_node_stopped, within_s=15)


async def test_a_live_worker_takes_over_the_runs_of_a_killed_worker_process(schema: str) -> None:
    async with server(schema) as here:
        async with worker_process(schema, lease_s=1.0) as process:
            task = await submit(here.manager, pg_worker.once, {"n": 1})
            await _until_reported(here.manager, task.id, "hanging")
            process.kill()  # SIGKILL: no interrupted attempt recorded, no lease released
            await process.wait()
        live = pg_worker.settings(
            postgres.TEST_URL, schema, run_worker=True, poll_s=0.05, lease_s=1.0
        )
        async with open_engine(live) as other:
            assert other.worker is not None
            with anyio.fail_after(15):
                done = await here.manager.wait_until_terminal(task.id)
        assert done.state is TaskState.COMPLETED
        assert done.result == 2
        attempts = [(a.attempt, a.outcome) for a in await here.runs.attempts(task.id)]
        assert attempts == [(1, AttemptOutcome.INTERRUPTED), (2, AttemptOutcome.COMPLETED)]
        workers = [a.worker for a in await here.runs.attempts(task.id)]
        assert workers[1] == other.worker.worker_id != workers[0]
