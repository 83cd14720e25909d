"""Claims and lease renewal, for both SQL stores.

A claim reads the claimable runs (:mod:`taskloom.persistence.claims`, the rule of
:class:`taskloom.engine.claims.ClaimRule`) fairly across owners (ADR 0028), then takes
each lease by a conditional upsert: the verdict that settles a race with a claim that
read an older snapshot. Where rows are locked, candidates are held with ``SKIP LOCKED``
(workers never queue behind each other) and leases are taken in task id order, the order
in which :func:`renew_leases` locks them (no deadlock).
"""

import secrets
from datetime import timedelta

from taskloom.engine.claims import ClaimRule
from taskloom.engine.models import Task, TaskId, ensure_successor
from taskloom.engine.runs import ClaimedRun, ClaimTerms, Instant, Lease, at
from taskloom.engine.states import TaskState
from taskloom.persistence.claims import claimable
from taskloom.persistence.sql import rows, runs, tasks
from taskloom.persistence.sql.dialect import Dialect
from taskloom.persistence.sql.script import Script, Statement, ask

_NO_CAP = 2**62


def claim_runs(d: Dialect, terms: ClaimTerms) -> Script[list[ClaimedRun]]:
    """See :meth:`taskloom.engine.runs.RunStore.claim_runs`: an owner's turn is the
    leases it holds of *worker* plus the candidate's rank among its own, oldest first."""
    worker, reclaim_from, per_owner = (
        terms["worker"],
        terms.get("reclaim_from"),
        terms.get("per_owner"),
    )
    rule = ClaimRule.of(terms["workflows"], reclaim_from)
    if rule.is_empty or terms["limit"] < 1:
        return []
    moment = at(
        terms["now"]
    )  # in this transaction attempt: a retried claim never commits a stale lease
    condition, parameters = claimable(rule, d)
    p, position = d.parameter, d.position
    found = yield from ask(
        Statement(
            "WITH held AS ("
            "  SELECT coalesce(t.owner, '') AS who, count(*) AS n FROM leases l"
            f"  JOIN tasks t ON t.id = l.task_id WHERE l.worker = {p('worker')}"
            f"  AND l.expires_at > {p('now')} GROUP BY 1),"
            " ready AS ("
            f"  SELECT t.id, t.{position} AS pos, coalesce(t.owner, '') AS who,"
            f"   row_number() OVER (PARTITION BY coalesce(t.owner, '') ORDER BY t.{position})"
            f"   AS rank FROM tasks t LEFT JOIN leases l ON l.task_id = t.id WHERE {condition}),"
            " chosen AS ("
            "  SELECT r.id, r.pos, coalesce(h.n, 0) + r.rank AS turn"
            "  FROM ready r LEFT JOIN held h ON h.who = r.who"
            f"  WHERE (r.who = '' OR coalesce(h.n, 0) + r.rank <= {p('cap')})"
            f"  ORDER BY turn, r.pos LIMIT {p('limit')})"
            " SELECT t.body, l.task_id IS NOT NULL FROM chosen c JOIN tasks t ON t.id = c.id"
            f" LEFT JOIN leases l ON l.task_id = t.id ORDER BY c.turn, c.pos{d.skipping('t')}",
            {
                **parameters,
                "worker": worker,
                "now": d.time(moment),
                "cap": per_owner if per_owner is not None else _NO_CAP,
                "limit": terms["limit"],
            },
        )
    )
    candidates = [(rows.task_from_body(body), bool(had)) for body, had in found.rows]
    claimed: dict[TaskId, ClaimedRun] = {}
    expires = moment + terms["lease_for"]
    # Python's order of these ASCII ids is PostgreSQL's ``COLLATE "C"``.
    for task, had_lease in sorted(candidates, key=lambda candidate: candidate[0].id):
        lease = Lease(
            task_id=task.id, worker=worker, token=secrets.token_hex(16), expires_at=expires
        )
        taken = yield from ask(
            Statement(
                "INSERT INTO leases (task_id, worker, token, expires_at)"
                f" VALUES ({p('task')}, {p('worker')}, {p('token')}, {p('expires')})"
                " ON CONFLICT (task_id) DO UPDATE SET worker = excluded.worker,"
                " token = excluded.token, expires_at = excluded.expires_at"
                f" WHERE leases.expires_at <= {p('now')} OR leases.worker = {p('reclaim')}",
                {
                    "task": task.id,
                    "worker": worker,
                    "token": lease.token,
                    "expires": d.time(expires),
                    "now": d.time(moment),
                    "reclaim": reclaim_from,
                },
            )
        )
        if taken.rowcount != 1:
            continue  # another worker took it since our snapshot
        nodes = yield from runs.node_runs(d, task.id)
        started = task
        if task.state is TaskState.QUEUED or task.parked:
            started = terms["start"](task)
            ensure_successor(task, started)
            yield from tasks.put(d, task, started)
        resumed = had_lease or bool(nodes) or task.state is not TaskState.QUEUED
        claimed[task.id] = ClaimedRun(task=started, lease=lease, nodes=nodes, resumed=resumed)
    return [claimed[task.id] for task, _ in candidates if task.id in claimed]


def renew_leases(
    d: Dialect, *, worker: str, now: Instant, lease_for: timedelta
) -> Script[dict[TaskId, Task | None]]:
    """See :meth:`taskloom.engine.runs.RunStore.renew_leases`.

    Where rows are locked, they are locked in ``task_id`` order (bytewise, ``COLLATE
    "C"``, as Python sorts the ASCII ids) before the update, the order in which
    :func:`claim_runs` takes leases: a bare multi-row ``UPDATE`` locks in the heap's
    order, which deadlocked with a claim taking over some of the same (expired) leases.
    """
    p = d.parameter
    parameters = {"expires": d.time(at(now) + lease_for), "worker": worker}
    if d.row_lock:
        found = yield from ask(
            Statement(
                "WITH held AS ("
                f"  SELECT task_id FROM leases WHERE worker = {p('worker')}"
                f'  ORDER BY task_id COLLATE "C"{d.row_lock}),'
                " renewed AS ("
                f"  UPDATE leases l SET expires_at = {p('expires')} FROM held"
                f"  WHERE l.task_id = held.task_id AND l.worker = {p('worker')}"
                "  RETURNING l.task_id)"
                " SELECT r.task_id, t.body FROM renewed r LEFT JOIN tasks t ON t.id = r.task_id",
                parameters,
            )
        )
    else:  # one writer holds the whole database
        yield Statement(
            f"UPDATE leases SET expires_at = {p('expires')} WHERE worker = {p('worker')}",
            parameters,
        )
        found = yield from ask(
            Statement(
                "SELECT l.task_id, t.body FROM leases l LEFT JOIN tasks t ON t.id = l.task_id"
                f" WHERE l.worker = {p('worker')}",
                parameters,
            )
        )
    return {
        TaskId(task_id): rows.task_from_body(body) if body is not None else None
        for task_id, body in found.rows
    }
