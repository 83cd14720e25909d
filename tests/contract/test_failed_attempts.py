"""``RunStore.failed_attempts`` on every store: newest first, owner-scoped, live tasks only."""

from datetime import timedelta
from typing import cast

from pydantic import BaseModel

from taskloom.engine.dag import NodeContext, Workflow
from taskloom.engine.manager import TaskManager
from taskloom.engine.ports import TaskStore
from taskloom.engine.retry import RetryPolicy
from taskloom.engine.runs import AttemptOutcome, FailureQuery, RunStore
from taskloom.engine.states import TaskState
from taskloom.engine.submit import submit
from taskloom.testing import FakeClock
from tests.contract.test_runner import _finish, running


class Empty(BaseModel):
    pass


flaky = Workflow("flaky", version="1", input=Empty)


@flaky.node(retry=RetryPolicy(max_attempts=2, initial_delay_s=1, jitter=False))
async def wobble(ctx: NodeContext[Empty]) -> str:
    raise ConnectionError(f"refused on try {ctx.attempt}")


async def test_failed_attempts_are_newest_first_per_owner_and_vanish_with_their_task(
    manager: TaskManager, store: TaskStore, clock: FakeClock
) -> None:
    runs = cast(RunStore, store)
    async with running(manager, store, flaky):
        mine = await _finish(manager, await submit(manager, flaky, owner="ann", ttl_ms=60_000))
        theirs = await _finish(manager, await submit(manager, flaky, owner="bob"))
    assert mine.state is theirs.state is TaskState.FAILED
    now = clock.now()

    anns = await runs.failed_attempts(FailureQuery(owner="ann", match_owner=True), now)
    assert [(a.task_id, a.node, a.attempt) for a in anns] == [
        (mine.id, "wobble", 2),
        (mine.id, "wobble", 1),
    ]
    assert all(a.outcome is AttemptOutcome.FAILED for a in anns)
    assert anns[0].error is not None
    assert anns[0].error.error_type == "ConnectionError"
    assert anns[0].error.message == "refused on try 2"

    everyone = await runs.failed_attempts(FailureQuery(limit=3), now)
    assert len(everyone) == 3
    assert everyone[0].task_id == theirs.id  # it ended last
    assert await runs.failed_attempts(FailureQuery(match_owner=True), now) == []

    later = now + timedelta(minutes=5)  # ann's task has expired by then
    assert await runs.failed_attempts(FailureQuery(owner="ann", match_owner=True), later) == []
