"""Tasks and their nodes as text for people (the ``--json`` forms are in the commands)."""

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from taskloom.engine.dag import MapNode, Workflow
from taskloom.engine.fanout import base_node, parse_item_key
from taskloom.engine.models import Task
from taskloom.engine.runs import NodeAttempt, NodeRun, NodeState
from taskloom.engine.states import TaskState


@dataclass(frozen=True)
class NodeView:
    """A node (or map item) as an operator reads it."""

    label: str
    """``completed``, ``failed`` (it failed itself), ``stopped`` (the task ended, e.g.
    because another node failed, while it ran), ``cancelled`` (the task was cancelled
    while it ran), ``running``, ``retrying``, ``waiting`` or ``not started``."""
    settled: bool
    busy: bool


def stopped_by_the_end(run: NodeRun) -> bool:
    """The runner stopped *run* because its task ended (it did not fail itself)."""
    return (
        run.state is NodeState.FAILED
        and run.error is not None
        and run.error.error_type == "Cancelled"
    )


def node_view(task: Task, run: NodeRun | None) -> NodeView:
    """How *run* reads within *task*: a node stopped because the task ended is
    ``cancelled`` if the task was cancelled, else ``stopped``, never ``failed``."""
    if run is None:
        return NodeView("not started", settled=False, busy=False)
    if stopped_by_the_end(run):
        label = "cancelled" if task.state is TaskState.CANCELLED else "stopped"
        return NodeView(label, settled=True, busy=False)
    if run.state in (NodeState.COMPLETED, NodeState.FAILED):
        return NodeView(str(run.state), settled=True, busy=False)
    if task.is_terminal:  # the task ended while it ran or waited
        label = "cancelled" if task.state is TaskState.CANCELLED else "stopped"
        return NodeView(label, settled=True, busy=False)
    busy = run.state in (NodeState.RUNNING, NodeState.RETRYING)
    return NodeView(str(run.state), settled=False, busy=busy)


def when(moment: datetime | None) -> str:
    """A UTC time to the second, or ``never``."""
    return moment.strftime("%Y-%m-%d %H:%M:%S UTC") if moment is not None else "never"


def span(seconds: float) -> str:
    """A duration for people: ``0.4 s``, ``12 s``, ``3 min 05 s``, ``2 h 10 min``."""
    if seconds < 10:
        return f"{seconds:.1f} s"
    if seconds < 60:
        return f"{seconds:.0f} s"
    minutes, secs = divmod(round(seconds), 60)
    if minutes < 60:
        return f"{minutes} min {secs:02d} s"
    hours, minutes = divmod(minutes, 60)
    if hours < 48:
        return f"{hours} h {minutes:02d} min"
    return f"{hours // 24} d {hours % 24} h"


def took(task: Task, now: datetime | None = None) -> str:
    """How long *task* ran: from its creation to its end, or to *now* (running)."""
    end = task.updated_at if task.is_terminal else (now or datetime.now(UTC))
    return span(max((end - task.created_at).total_seconds(), 0.0))


def short_json(value: Any, limit: int = 200) -> str:
    """*value* as compact JSON, cut at *limit* characters."""
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def table(rows: Sequence[Sequence[str]]) -> list[str]:
    """Rows as left-aligned columns (the first row is the header)."""
    if not rows:
        return []
    widths = [max(len(row[column]) for row in rows) for column in range(len(rows[0]))]
    return [
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        for row in rows
    ]


def task_lines(task: Task) -> list[str]:
    """Everything a person wants to know about *task*, one fact a line."""
    lines = [
        f"task       {task.id}",
        f"workflow   {task.name} (version {task.workflow_version or '?'})",
        f"state      {task.state}",
        f"status     {task.status_message or ''}".rstrip(),
        f"arguments  {short_json(task.arguments)}",
        f"created    {when(task.created_at)}",
        f"updated    {when(task.updated_at)}",
        f"expires    {when(task.expires_at)}",
    ]
    if task.parent_id is not None:
        lines.append(f"parent     {task.parent_id}")
    if task.progress is not None:
        total = f"/{task.progress.total:g}" if task.progress.total else ""
        lines.append(f"progress   {task.progress.completed:g}{total}")
    for key, request in task.input_requests.items():
        lines.append(f"question   [{key}] {request.message}")
        lines.append(f"           answer schema: {short_json(request.requested_schema)}")
    if task.error is not None:
        lines.append(f"error      {task.error.code}: {task.error.message}")
    if task.state == "completed":
        lines.append(f"result     {short_json(task.result)}")
    return lines


def node_rows(
    workflow: Workflow[Any] | None,
    nodes: Mapping[str, NodeRun],
    attempts: Sequence[NodeAttempt],
) -> list[dict[str, Any]]:
    """One record per node (in workflow order when the workflow is known): its phase,
    state, attempts and how each attempt ended. A map's items follow their map, in item
    order; the map itself (which has no checkpoint of its own) is summed up from them."""
    items: dict[str, list[str]] = {}
    for key in sorted((key for key in nodes if parse_item_key(key)), key=_item_order):
        items.setdefault(base_node(key), []).append(key)
    order = list(workflow.order()) if workflow is not None else []
    plain = set(order)
    order += sorted(key for key in nodes if key not in plain and not parse_item_key(key))
    names: list[str] = []
    for name in order:
        names += [name, *items.get(name, ())]
    names += [key for map_name, keys in items.items() if map_name not in plain for key in keys]
    by_node: dict[str, list[str]] = {}
    for attempt in attempts:  # one pass: a run may have thousands of nodes (map items)
        by_node.setdefault(attempt.node, []).append(str(attempt.outcome or "running"))
    records: list[dict[str, Any]] = []
    for name in names:
        run = nodes.get(name)
        node = workflow.nodes.get(base_node(name)) if workflow is not None else None
        outcomes = by_node.get(name, [])
        record = {
            "node": name,
            "phase": node.phase if node is not None else None,
            "state": str(run.state) if run is not None else "not started",
            "attempts": len(outcomes),
            "outcomes": outcomes,
            "kept": run is not None and not outcomes,
            "error": run.error.message if run is not None and run.error else None,
        }
        if run is None and _is_map(workflow, name):
            record["state"], record["items"] = _map_summary(
                [nodes[key] for key in items.get(name, ())]
            )
        records.append(record)
    return records


_SUMMARY_ORDER = ("failed", "running", "retrying", "waiting")


def _is_map(workflow: Workflow[Any] | None, name: str) -> bool:
    return workflow is not None and isinstance(workflow.nodes.get(name), MapNode)


def _map_summary(runs: Sequence[NodeRun]) -> tuple[str, str]:
    """A map's state from its items' (all alike, else the most pressing one) and the
    count of items in each state, e.g. ``("running", "12 items: 10 completed, 2
    running")``."""
    if not runs:
        return "not started", "no items yet"
    counts: dict[str, int] = {}
    for run in runs:
        counts[str(run.state)] = counts.get(str(run.state), 0) + 1
    state = (
        next(iter(counts))
        if len(counts) == 1
        else next((each for each in _SUMMARY_ORDER if each in counts), min(counts))
    )
    spread = ", ".join(f"{number} {each}" for each, number in sorted(counts.items()))
    return state, f"{len(runs)} item{'s' if len(runs) != 1 else ''}: {spread}"


def _item_order(key: str) -> tuple[str, int]:
    parsed = parse_item_key(key)
    return parsed if parsed is not None else (key, -1)


def node_lines(records: Sequence[Mapping[str, Any]]) -> list[str]:
    """The node records as a table."""
    rows = [["PHASE", "NODE", "STATE", "ATTEMPTS", "NOTE"]]
    for record in records:
        outcomes: list[str] = record["outcomes"]
        note = ", ".join(outcomes) if len(outcomes) > 1 else ""
        if record["kept"]:
            note = "kept from an earlier run"
        if record.get("items"):
            note = record["items"]
        if record["error"]:
            note = (note + "; " if note else "") + record["error"]
        rows.append(
            [
                record["phase"] or "",
                record["node"],
                record["state"],
                str(record["attempts"]),
                note,
            ]
        )
    return table(rows)
