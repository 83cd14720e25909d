"""Resuming a finished run as a new task, keeping the nodes that completed.

A terminal task never changes, so a resume is a fork: a new queued task with the same
workflow, version and arguments, whose completed node checkpoints are copied from the
old one in the same transaction that stores it. Only the failed nodes (or a node the
operator names) and every node downstream of them run again; answers to questions are
not copied, so a re-run node asks again.
"""

from dataclasses import dataclass
from typing import Any

from taskloom.engine.dag import MapNode, Workflow
from taskloom.engine.errors import InvalidRequestError, TaskStateError
from taskloom.engine.fanout import base_node
from taskloom.engine.manager import ANY_OWNER, OwnerScope, TaskManager
from taskloom.engine.models import Task
from taskloom.engine.runs import NodeState, RunStore


@dataclass(frozen=True)
class Fork:
    """The new task, the nodes it keeps from the old run and those it runs again."""

    task: Task
    source: Task
    kept: tuple[str, ...]
    rerun: tuple[str, ...]


def downstream(workflow: Workflow[Any], starts: set[str]) -> set[str]:
    """*starts* and every node that depends on one of them, directly or not."""
    dependents = workflow.dependents()
    found = set(starts)
    pending = list(starts)
    while pending:
        for child in dependents[pending.pop()]:
            if child not in found:
                found.add(child)
                pending.append(child)
    return found


async def fork(
    manager: TaskManager,
    runs: RunStore,
    workflow: Workflow[Any],
    task_id: str,
    *,
    from_node: str | None = None,
    owner: OwnerScope = ANY_OWNER,
) -> Fork:
    """Queue a new run of *task_id*'s workflow that re-runs only what must run again.

    Without *from_node*, the nodes that did not complete (and their dependents) run; with
    it, that node and its dependents run again even if they completed.

    Raises:
        TaskNotFoundError: no such task visible to *owner*.
        TaskStateError: the task has not ended (cancel it first).
        InvalidRequestError: *workflow* is not the task's (name or version), the node is
            unknown, or there is nothing to run again.
    """
    source = await manager.get(task_id, owner=owner)
    if not source.is_terminal:
        raise TaskStateError(
            f"task {source.id} is {source.state}; only a finished task can be resumed "
            "(cancel it first)"
        )
    if source.name != workflow.name or source.workflow_version != workflow.version:
        raise InvalidRequestError(
            f"task {source.id} ran {source.name} version {source.workflow_version}; "
            f"this process has {workflow.name} version {workflow.version}, whose "
            "checkpoints cannot be reused"
        )
    if from_node is not None and from_node not in workflow.nodes:
        raise InvalidRequestError(
            f"workflow {workflow.name} has no node {from_node!r} "
            f"(its nodes: {', '.join(workflow.order())})"
        )
    checkpoints = await runs.checkpoints(source.id)
    completed = {name for name, run in checkpoints.items() if run.state is NodeState.COMPLETED}
    # A map has no checkpoint of its own (ADR 0024): it and what follows it run again,
    # which costs little, since its completed items are kept unless it must redo them.
    maps = {name for name, node in workflow.nodes.items() if isinstance(node, MapNode)}
    starts = {from_node} if from_node is not None else set(workflow.nodes) - completed - maps
    if not starts and not maps:
        raise InvalidRequestError(
            f"task {source.id} completed every node; name a node to run again from"
        )
    again = downstream(workflow, starts)
    redone = again | downstream(workflow, maps)
    keep = frozenset(
        name for name in completed if name not in redone and base_node(name) not in again
    )
    task = manager.draft(
        source.name,
        source.arguments,
        owner=source.owner,
        ttl_ms=source.ttl_ms,
        poll_interval_ms=source.poll_interval_ms,
        workflow_version=source.workflow_version,
        status_message=f"resumed from task {source.id}, keeping {len(keep)} completed node(s)",
        shape=workflow.shape(),
    )
    copies = await manager.fork_run(task, source=source.id, nodes=keep)
    order = workflow.order()
    return Fork(
        task=task,
        source=source,
        kept=tuple(name for name in order if name in copies),
        rerun=tuple(name for name in order if name not in copies),
    )
