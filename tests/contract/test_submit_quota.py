"""``submit`` on every store (ADR 0033, ADR 0040): the unfinished-task quota counts queued,
running and waiting tasks, and a retried create with a held idempotency key gets its task
whatever the quota says; a held key with other arguments is a conflict."""

import pytest
from pydantic import BaseModel

from taskloom.engine.dag import NodeContext, Workflow
from taskloom.engine.errors import IdempotencyConflictError, QuotaExceededError
from taskloom.engine.manager import TaskManager
from taskloom.engine.models import InputRequest
from taskloom.engine.submit import submit, unfinished_twin

QUESTION = InputRequest(message="go on?", requested_schema={"type": "boolean"})


class JobInput(BaseModel):
    n: int = 1


job = Workflow("job", version="1", input=JobInput)


@job.node()
async def run_job(ctx: NodeContext[JobInput]) -> int:
    return ctx.input.n


async def test_a_task_waiting_for_input_counts_toward_the_quota(manager: TaskManager) -> None:
    waiting = await submit(manager, job, {"n": 1}, owner="ann", max_unfinished=1)
    await manager.start(waiting.id)
    await manager.require_input(waiting.id, "go", QUESTION)
    with pytest.raises(QuotaExceededError):
        await submit(manager, job, {"n": 2}, owner="ann", max_unfinished=1)
    await manager.provide_input(waiting.id, "go", True)
    await manager.complete(waiting.id, {"n": 1})
    await submit(manager, job, {"n": 2}, owner="ann", max_unfinished=1)  # room again


async def test_a_retried_create_at_the_limit_gets_its_task(manager: TaskManager) -> None:
    first = await submit(manager, job, {"n": 1}, owner="ann", idempotency_key="k", max_unfinished=1)
    again = await submit(manager, job, {"n": 1}, owner="ann", idempotency_key="k", max_unfinished=1)
    assert again.id == first.id
    with pytest.raises(QuotaExceededError):
        await submit(manager, job, {"n": 1}, owner="ann", idempotency_key="new", max_unfinished=1)
    with pytest.raises(IdempotencyConflictError, match=f"already used for task {first.id}"):
        await submit(manager, job, {"n": 5}, owner="ann", idempotency_key="k", max_unfinished=1)
    assert await manager.count(owner="ann", states={first.state}) == 1


async def test_keys_are_per_owner(manager: TaskManager) -> None:
    ann = await submit(manager, job, {"n": 1}, owner="ann", idempotency_key="k")
    bob = await submit(manager, job, {"n": 1}, owner="bob", idempotency_key="k")
    local = await submit(manager, job, {"n": 1}, idempotency_key="k")
    assert len({ann.id, bob.id, local.id}) == 3
    assert (await manager.list(owner="bob", idempotency_key="k")).tasks == (bob,)
    assert (await manager.list(owner=None, idempotency_key="k")).tasks == (local,)


async def test_the_unfinished_twin_of_a_call(manager: TaskManager) -> None:
    first = await submit(manager, job, {}, owner="ann")
    assert await unfinished_twin(manager, job, {"n": 1}, owner="ann") == first  # defaults
    assert await unfinished_twin(manager, job, {"n": 2}, owner="ann") is None
    assert await unfinished_twin(manager, job, {}, owner="bob") is None
    await manager.start(first.id)
    await manager.complete(first.id, {"n": 1})
    assert await unfinished_twin(manager, job, {}, owner="ann") is None


async def test_a_call_joins_no_run_of_another_version(manager: TaskManager) -> None:
    job_v2 = Workflow("job", version="2", input=JobInput)

    @job_v2.node()
    async def run_job_v2(ctx: NodeContext[JobInput]) -> int:
        return ctx.input.n * 2

    old = await submit(manager, job, {"n": 1}, owner="ann")
    assert await unfinished_twin(manager, job_v2, {"n": 1}, owner="ann") is None
    new = await submit(manager, job_v2, {"n": 1}, owner="ann")
    assert await unfinished_twin(manager, job_v2, {"n": 1}, owner="ann") == new
    assert await unfinished_twin(manager, job, {"n": 1}, owner="ann") == old
    unversioned = await manager.create("job", {"n": 3}, owner="ann")  # recorded no version
    assert await unfinished_twin(manager, job_v2, {"n": 3}, owner="ann") == unversioned
