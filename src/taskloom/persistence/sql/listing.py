"""Reads and deletions of many tasks, for both SQL stores: pages, counts, purges."""

from datetime import datetime
from typing import Final

from taskloom.engine.models import StorePage, TaskQuery
from taskloom.engine.ports import Finished, finished_states
from taskloom.engine.states import TaskState
from taskloom.persistence.sql import rows
from taskloom.persistence.sql.dialect import Dialect, is_in
from taskloom.persistence.sql.script import Script, Statement, ask

_LAST_CHARACTER: Final = "\U0010ffff"
_MAX_POSITION: Final = 2**63 - 1


def page(d: Dialect, query: TaskQuery, now: datetime) -> Script[StorePage]:
    """See :meth:`taskloom.engine.ports.TaskStore.list`: newest first, by position."""
    where, parameters = yield from _matching(d, query, now)
    where.append(f"{d.position} < {d.parameter('before')}")
    parameters["before"] = query.before if query.before is not None else _MAX_POSITION
    parameters["limit"] = query.limit + 1
    found = yield from ask(
        Statement(
            f"SELECT {d.position}, body FROM tasks WHERE {' AND '.join(where)}"
            f" ORDER BY {d.position} DESC LIMIT {d.parameter('limit')}",
            parameters,
        )
    )
    shown = found.rows[: query.limit]
    tasks = tuple(rows.task_from_body(body) for _, body in shown)
    next_before = shown[-1][0] if len(found.rows) > query.limit else None
    return StorePage(tasks=tasks, next_before=next_before)


def count(d: Dialect, query: TaskQuery, now: datetime) -> Script[int]:
    """See :meth:`taskloom.engine.ports.TaskStore.count`."""
    where, parameters = yield from _matching(d, query, now)
    found = yield from ask(
        Statement(f"SELECT count(*) FROM tasks WHERE {' AND '.join(where)}", parameters)
    )
    row = found.one()
    return int(row[0]) if row is not None else 0


def _matching(
    d: Dialect, query: TaskQuery, now: datetime
) -> Script[tuple[list[str], dict[str, object]]]:
    """The conditions (and their parameters) of the live tasks *query* filters for."""
    p = d.parameter
    parameters: dict[str, object] = {"now": d.time(now)}
    where = [rows.live(d)]
    if query.match_owner:
        where.append(rows.owned(d, query.owner, parameters))
    if query.states is not None:
        states = sorted(state.value for state in query.states)
        where.append(is_in(d, "state", "s", states, parameters))
    if query.parent_id is not None:
        where.append(f"parent_id = {p('parent')}")
        parameters["parent"] = query.parent_id
    if query.names is not None:
        where.append(is_in(d, "name", "n", sorted(query.names), parameters))
    if query.id_prefix is not None:
        where.append(f"id >= {p('prefix')} AND id < {p('prefix_end')}")
        parameters.update(prefix=query.id_prefix, prefix_end=query.id_prefix + _LAST_CHARACTER)
    if query.idempotency_key is not None:  # the terms of the (owner, key) index
        where.append(f"coalesce(owner, '') = {p('key_owner')} AND idempotency_key = {p('key')}")
        parameters.update(key_owner=query.owner or "", key=query.idempotency_key)
    bounds = (("after", query.created_after, ">="), ("until", query.created_before, "<"))
    for name, bound, operator in bounds:
        if bound is not None:
            where.append(f"{d.position} {operator} {p(name)}")
            parameters[name] = yield from _first_created_at(d, bound)
    return where, parameters


def _first_created_at(d: Dialect, moment: datetime) -> Script[int]:
    """The position of the first task created at or after *moment* (past the last one if
    none): positions follow creation order, so a time bound is a position bound."""
    found = yield from ask(
        Statement(
            f"SELECT {d.position} FROM tasks WHERE {d.created} >= {d.parameter('moment')}"
            f" ORDER BY {d.created}, {d.position} LIMIT 1",
            {"moment": d.time(moment)},
        )
    )
    row = found.one()
    return int(row[0]) if row is not None else _MAX_POSITION


def count_by_state(
    d: Dialect, owner: str | None, match_owner: bool, at_most: int | None
) -> Script[dict[TaskState, int]]:
    """See :meth:`taskloom.engine.ports.TaskStore.count_by_state`."""
    parameters: dict[str, object] = {}
    mine = f" AND {rows.owned(d, owner, parameters)}" if match_owner else ""
    if at_most is None:
        condition = mine.removeprefix(" AND ")
        found = yield from ask(
            Statement(
                f"SELECT state, count(*) FROM tasks {'WHERE ' if condition else ''}{condition}"
                " GROUP BY state",
                parameters,
            )
        )
        return {TaskState(state): int(number) for state, number in found.rows}
    counts = {}
    parameters["at_most"] = at_most
    for state in TaskState:  # one capped count each, read from the (owner, state) index
        parameters["state"] = state.value
        found = yield from ask(
            Statement(
                f"SELECT count(*) FROM (SELECT 1 FROM tasks WHERE state = {d.parameter('state')}"
                f"{mine} LIMIT {d.parameter('at_most')}) AS capped",
                dict(parameters),
            )
        )
        row = found.one()
        if row is not None and row[0]:
            counts[state] = int(row[0])
    return counts


def purge_expired(d: Dialect, now: datetime, limit: int) -> Script[int]:
    """See :meth:`taskloom.engine.ports.TaskStore.purge_expired`."""
    p = d.parameter
    deleted = yield from ask(
        Statement(
            f"DELETE FROM tasks WHERE {d.position} IN (SELECT {d.position} FROM tasks"
            f" WHERE expires_at <= {p('now')} ORDER BY expires_at LIMIT {p('limit')}"
            f"{d.skip_locked})",
            {"now": d.time(now), "limit": limit},
        )
    )
    return deleted.rowcount


def delete_finished(d: Dialect, which: Finished) -> Script[int]:
    """See :meth:`taskloom.engine.ports.TaskStore.delete_finished` (terminal states only)."""
    p = d.parameter
    parameters: dict[str, object] = {"limit": which["limit"]}
    ended = sorted(state.value for state in finished_states(which))
    where = [is_in(d, "state", "s", ended, parameters)]
    task_ids, finished_before = which.get("task_ids"), which.get("finished_before")
    if task_ids is not None:
        where.append(is_in(d, "id", "i", [str(each) for each in task_ids], parameters))
    if finished_before is not None:
        where.append(f"updated_at < {p('before')}")
        parameters["before"] = d.time(finished_before)
    deleted = yield from ask(
        Statement(
            f"DELETE FROM tasks WHERE {d.position} IN (SELECT {d.position} FROM tasks"
            f" WHERE {' AND '.join(where)} ORDER BY {d.position} LIMIT {p('limit')}"
            f"{d.skip_locked})",
            parameters,
        )
    )
    return deleted.rowcount
