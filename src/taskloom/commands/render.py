"""Tasks and their nodes as text for people (the ``--json`` forms are in the commands)."""

import json
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from taskloom.engine.fanout import base_node, parse_item_key
from taskloom.engine.history import Cause, HistoryEntry
from taskloom.engine.models import Task
from taskloom.engine.runs import NodeAttempt, NodeRun
from taskloom.engine.shape import RunShape
from taskloom.engine.view import map_view, node_view, progress_text


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


def task_facts(task: Task) -> list[tuple[str, str]]:
    """Everything a person wants to know about *task*, one fact a pair."""
    facts = [
        ("task", task.id),
        ("workflow", f"{task.name} (version {task.workflow_version or '?'})"),
        ("state", f"{task.state}" + (f" after {took(task)}" if task.is_terminal else "")),
        ("status", task.status_message or ""),
        ("arguments", short_json(task.arguments)),
        ("created", when(task.created_at)),
        ("updated", when(task.updated_at)),
        ("expires", when(task.expires_at)),
    ]
    if task.parent_id is not None:
        facts.append(("parent", task.parent_id))
    progress = progress_text(task)
    if progress is not None:
        facts.append(("progress", progress))
    for key, request in task.input_requests.items():
        facts.append(("question", f"[{key}] {request.message}"))
        facts.append(("", f"answer schema: {short_json(request.requested_schema)}"))
    if task.error is not None:
        facts.append(("error", f"{task.error.code}: {task.error.message}"))
    if task.state == "completed":
        facts.append(("result", short_json(task.result)))
    return facts


def task_lines(task: Task) -> list[str]:
    """:func:`task_facts` as plain lines."""
    return [f"{key:<10} {value}".rstrip() for key, value in task_facts(task)]


def node_rows(
    shape: RunShape | None,
    task: Task,
    nodes: Mapping[str, NodeRun],
    attempts: Sequence[NodeAttempt],
) -> list[dict[str, Any]]:
    """One record per node (in the order of the run's *shape* when known): its phase,
    state as an operator reads it (:func:`node_view`), attempts, how each ended, when it
    started and ended and how long it took. A map's items follow their map, in item order,
    each with ``item_of``; the map itself (which has no checkpoint of its own) is summed
    up from them."""
    items: dict[str, list[str]] = {}
    for key in sorted((key for key in nodes if parse_item_key(key)), key=_item_order):
        items.setdefault(base_node(key), []).append(key)
    known = shape.by_name() if shape is not None else {}
    order = list(known)
    plain = set(order)
    order += sorted(key for key in nodes if key not in plain and not parse_item_key(key))
    names: list[str] = []
    for name in order:
        names += [name, *items.get(name, ())]
    names += [key for map_name, keys in items.items() if map_name not in plain for key in keys]
    by_node: dict[str, list[NodeAttempt]] = {}
    for attempt in attempts:  # one pass: a run may have thousands of nodes (map items)
        by_node.setdefault(attempt.node, []).append(attempt)
    records: list[dict[str, Any]] = []
    for name in names:
        run = nodes.get(name)
        node = known.get(base_node(name))
        tried = by_node.get(name, [])
        view = node_view(task, run)
        record: dict[str, Any] = {
            "node": name,
            "phase": node.phase if node is not None else None,
            "state": view.label,
            "attempts": len(tried),
            "outcomes": [str(attempt.outcome or "running") for attempt in tried],
            "kept": run is not None and not tried,
            "error": run.error.message
            if run is not None and run.error and view.label == "failed"
            else None,
            **_times(tried, task),
        }
        if parse_item_key(name) is not None:
            record["item_of"] = base_node(name)
        if run is None and node is not None and node.is_map:
            record.update(_map_record(task, nodes, items.get(name, []), by_node, node.items))
        records.append(record)
    return records


def _map_record(
    task: Task,
    nodes: Mapping[str, NodeRun],
    keys: Sequence[str],
    by_node: Mapping[str, Sequence[NodeAttempt]],
    planned: int | None,
) -> dict[str, Any]:
    """A map's state, item counts (of *planned* items, when known) and times, from its
    items'."""
    state, counts = map_view(task, [nodes[key] for key in keys], planned)
    tried = [attempt for key in keys for attempt in by_node.get(key, ())]
    return {"state": state, "items": counts, **_times(tried, task)}


def _times(tried: Sequence[NodeAttempt], task: Task) -> dict[str, Any]:
    """When the attempts started and ended (``None`` while one runs) and the seconds
    between."""
    if not tried:
        return {"started_at": None, "ended_at": None, "seconds": None}
    started = min(attempt.started_at for attempt in tried)
    running = any(attempt.ended_at is None for attempt in tried)
    ended = None if running else max(attempt.ended_at or started for attempt in tried)
    until = ended or (task.updated_at if task.is_terminal else datetime.now(UTC))
    return {
        "started_at": started.isoformat(),
        "ended_at": ended.isoformat() if ended is not None else None,
        "seconds": round(max((until - started).total_seconds(), 0.0), 3),
    }


def _item_order(key: str) -> tuple[str, int]:
    parsed = parse_item_key(key)
    return parsed if parsed is not None else (key, -1)


def node_table(records: Sequence[Mapping[str, Any]]) -> tuple[list[str], list[list[str]]]:
    """The node records as a table for people: phases in order (named once), a map's
    items folded into its row except those that failed, durations, and a note that says
    why a node failed (only where it did), was kept or stopped."""
    headers = ["PHASE", "NODE", "STATE", "ATTEMPTS", "TOOK", "NOTE"]
    rows: list[list[str]] = []
    phase_shown: str | None = None
    for record in records:
        if record.get("item_of") and record["state"] != "failed":
            continue
        outcomes: list[str] = record["outcomes"]
        note = ", ".join(outcomes) if len(outcomes) > 1 else ""
        if record["kept"]:
            note = "kept from an earlier run"
        if record.get("items"):
            note = record["items"]
        if record["state"] == "stopped":
            note = "stopped when the task ended"
        if record["error"]:
            note = (note + "; " if note else "") + record["error"]
        phase = record["phase"] or ""
        seconds = record["seconds"]
        rows.append(
            [
                phase if phase != phase_shown else "",
                ("  " if record.get("item_of") else "") + record["node"],
                record["state"],
                str(record["attempts"]) if record["attempts"] else "",
                span(seconds) if seconds is not None else "",
                note,
            ]
        )
        phase_shown = phase
    return headers, rows


def node_lines(records: Sequence[Mapping[str, Any]]) -> list[str]:
    """The node records as plain text lines (:func:`node_table`)."""
    headers, rows = node_table(records)
    return table([headers, *rows])


def timeline(
    task: Task,
    records: Sequence[Mapping[str, Any]],
    history: Sequence[HistoryEntry] = (),
    *,
    limit: int = 40,
) -> list[tuple[str, str]]:
    """What happened, in order: the task's creation, each change of its state in its
    stored *history* (with what caused it: a question, an answer, a retry's wait...),
    each node's (or map's) start and end, and the task's end, as (offset from creation,
    event); at most *limit* events, the first and last halves kept."""
    changes = [entry for entry in history if entry.state_changed or entry.version == 1]
    events: list[tuple[datetime, str]] = [(task.created_at, "task created")]
    for entry in changes:
        if entry.cause in (Cause.CREATED, Cause.MIGRATED) or (
            task.is_terminal and entry.state == task.state
        ):
            continue  # the creation is first, the end last, whatever their stamps say
        events.append((entry.at, f"task {entry.state} ({entry.cause})"))
    for record in records:
        if record.get("item_of") or record["started_at"] is None:
            continue
        name = record["node"] + (" (map)" if record.get("items") else "")
        events.append((datetime.fromisoformat(record["started_at"]), f"{name} started"))
        if record["ended_at"] is not None:
            ended = datetime.fromisoformat(record["ended_at"])
            events.append((ended, f"{name} {record['state']}"))
    events.sort(key=lambda event: event[0])
    if task.is_terminal:  # last, though its time may be a hair before a node's end
        events.append((max(task.updated_at, events[-1][0]), f"task {task.state}"))
    shown = [(f"+{span((at - task.created_at).total_seconds())}", what) for at, what in events]
    if len(shown) > limit:
        half = limit // 2
        hidden = len(shown) - 2 * half
        shown = [
            *shown[:half],
            ("...", f"{hidden} more events (--json has every attempt)"),
            *shown[-half:],
        ]
    return shown
