"""What keeps a lingering worker alive (ADR 0040): queued or running runs its worker may
claim, that is of the workflow names and versions it loaded (ADR 0039)."""

from pydantic import BaseModel

from taskloom.engine.dag import NodeContext, Workflow
from taskloom.engine.manager import TaskManager
from taskloom.engine.registry import WorkflowRegistry
from taskloom.engine.submit import submit
from taskloom.linger import work_left


class In(BaseModel):
    n: int = 1


def _version(number: str) -> Workflow[In]:
    flow = Workflow("vflow", version=number, input=In)

    @flow.node()
    async def run(ctx: NodeContext[In]) -> str:
        return number

    return flow


async def test_a_run_of_a_version_not_loaded_is_no_work_left(manager: TaskManager) -> None:
    old, new = _version("1"), _version("2")
    loaded = WorkflowRegistry({"vflow": new})
    orphan = await submit(manager, old, {})
    assert not await work_left(manager, loaded)  # a v1 process runs it, not this one
    await manager.start(orphan.id)
    assert not await work_left(manager, loaded)
    assert await work_left(manager, WorkflowRegistry({"vflow": old}))
    mine = await submit(manager, new, {})
    assert await work_left(manager, loaded)
    await manager.start(mine.id)
    assert await work_left(manager, loaded)
    await manager.complete(mine.id, "2")
    assert not await work_left(manager, loaded)
    await manager.create("vflow", {"n": 1})  # recorded no version: any version runs it
    assert await work_left(manager, loaded)
    assert not await work_left(manager, WorkflowRegistry({}))
