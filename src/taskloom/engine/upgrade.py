"""Moving an unfinished run to another loaded version of its workflow, on an operator's
word (``taskloom tasks upgrade``, ADR 0039).

The completed nodes that exist in the target version's graph are kept (their outputs are
checked against the target's node types first); every other node runs on the target's
code. A run that a worker is executing now is not moved: it moves while it waits
(queued, parked on a question or a timer, or waiting for a process with its version).
"""

from collections.abc import Mapping
from datetime import timedelta
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from taskloom.engine.dag import MapNode, Workflow
from taskloom.engine.errors import InvalidRequestError, TaskStateError
from taskloom.engine.fanout import base_node, parse_item_key
from taskloom.engine.manager import TaskManager
from taskloom.engine.models import Task, TaskId
from taskloom.engine.registry import WorkflowRegistry
from taskloom.engine.runs import NodeRun, NodeState
from taskloom.engine.versions import VersionStore

_ONE_MICROSECOND = timedelta(microseconds=1)


class Moved(BaseModel):
    """A run moved to another version: what it was on, and what it keeps."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    task: Task
    from_version: str | None
    kept: tuple[str, ...]
    """Completed nodes (and map items) kept: they do not run again."""


async def move_to_version(
    manager: TaskManager,
    store: VersionStore,
    workflows: WorkflowRegistry,
    task_id: str,
    version: str,
) -> Moved:
    """Move the unfinished run *task_id* to *version* of its workflow (loaded in
    *workflows*), keeping the completed nodes the target has; nothing is written when it
    is refused.

    Raises:
        TaskNotFoundError: no such task.
        UnknownWorkflowError: *version* of its workflow is not loaded here.
        TaskStateError: the task has ended, or a worker is running it now.
        InvalidRequestError: it is on *version* already, or a kept node's output does not
            fit the target's type (the message names the node).
    """
    task = await manager.get(task_id)
    target = workflows.version(task.name, version)
    before = task.workflow_version
    if task.is_terminal:
        raise TaskStateError(f"task {task.id} has ended ({task.state}); only unfinished runs move")
    if before == version:
        raise InvalidRequestError(f"task {task.id} is on {task.name} version {version} already")
    kept: list[str] = []

    def move(current: Task, nodes: Mapping[str, NodeRun]) -> Task:
        if current.is_terminal or current.workflow_version != before:
            raise TaskStateError(f"task {current.id} changed meanwhile; try again")
        kept[:] = _kept(current.id, target, before, nodes)
        note = (
            f"moved from {current.name} version {before} to {version} by an operator; "
            f"kept {len(kept)} completed node(s)"
        )
        return current.model_copy(
            update={
                "workflow_version": version,
                "shape": target.shape(),  # the new version's phases and nodes (ADR 0042)
                "status_message": note,
                "updated_at": max(manager.clock.now(), current.updated_at + _ONE_MICROSECOND),
                "version": current.version + 1,
            }
        )

    moved = await store.move_run(TaskId(task.id), manager.clock.now(), move)
    manager.feed.publish(moved)
    return Moved(task=moved, from_version=before, kept=tuple(kept))


def _kept(
    task_id: str, target: Workflow[Any], before: str | None, nodes: Mapping[str, NodeRun]
) -> list[str]:
    """The completed checkpoints *target* keeps, each output checked against its type.

    Raises:
        InvalidRequestError: one does not fit (the message names it).
    """
    kept = []
    for name, run in nodes.items():
        if run.state is not NodeState.COMPLETED:
            continue
        item = parse_item_key(name) is not None
        node = target.nodes.get(base_node(name))
        if node is None or (item and not isinstance(node, MapNode)):
            continue  # not in the target's graph: it has no use for this output
        adapter = node.item_adapter if isinstance(node, MapNode) and item else node.output_adapter
        try:
            adapter.validate_python(run.output)
        except ValidationError as error:
            problem = error.errors()[0]
            where = ".".join(str(part) for part in problem["loc"])
            raise InvalidRequestError(
                f"task {task_id}: node {name!r}'s output from version {before} does not "
                f"fit version {target.version}'s type"
                f"{f' at {where}' if where else ''}: {problem['msg']}"
            ) from None
        kept.append(name)
    return sorted(kept)
