"""Claims and lease renewal, for both SQL stores.

A claim reads the claimable runs (:mod:`taskloom.persistence.claims`, the rule of
:class:`taskloom.engine.claims.ClaimRule`) fairly across owners (ADR 0028), then takes
each lease by a conditional upsert: the verdict that settles a race with a claim that
read an older snapshot. Where rows are locked, candidates are held with ``SKIP LOCKED``
(workers never queue behind each other) and leases are taken in task id order, the order
in which :func:`renew_leases` locks them (no deadlock).

What a claim writes for one run, :func:`take`, is written once: a claim applies it to
each run it takes, and an eager start's create (ADR 0046, :func:`create_claimed`) to the
run it has just inserted.
"""

from collections.abc import Callable, Mapping
from datetime import datetime, timedelta
from typing import Final

from taskloom.engine import claims
from taskloom.engine.claims import ClaimAtCreate, ClaimRule
from taskloom.engine.models import Task, TaskId
from taskloom.engine.runs import ClaimedRun, ClaimTerms, Instant, Lease, NodeRun, at
from taskloom.engine.states import TaskState
from taskloom.persistence.claims import ACTIVE, claimable
from taskloom.persistence.sql import history, rows, runs, tasks
from taskloom.persistence.sql.dialect import Dialect
from taskloom.persistence.sql.script import Script, Statement, ask

_NO_CAP = 2**62


_SQLITE_CLAIM_INDEX: Final = "tasks_state_owner_seq"
"""SQLite's index on (state, owner, seq) that a claim reads (schema 11)."""


_FEW: Final = "NOT (SELECT yes FROM crowded)"
"""True when no active state has ``MOST_OWNERS`` owners (each branch tests it first, so
the branch not taken reads nothing)."""
MOST_OWNERS: Final = 256
"""Owners with runs in one active state up to which a claim reads each one's first
candidates; from this many on it ranks every claimable run, as before ADR 0067 (an
owner costs an index probe and a read, about 11 us on PostgreSQL, where ranking costs
about 1 us a run: many owners with a few runs each are ranked faster)."""


def _owners_in(state: str, index: int) -> str:
    """The CTE ``o{index}(who, n)``: the owners with a task in *state*, one index probe
    each (a loose scan of the index on (state, owner, position)), numbered, at most
    ``MOST_OWNERS`` (then a ``NULL`` row if fewer). Owners whose tasks have all ended are
    never visited."""
    return (
        f"o{index}(who, n) AS (SELECT min(owner), 1 FROM tasks WHERE state = '{state}'"
        f" UNION ALL SELECT (SELECT min(t.owner) FROM tasks t WHERE t.state = '{state}'"
        f" AND t.owner > o.who), o.n + 1 FROM o{index} o"
        f" WHERE o.who IS NOT NULL AND o.n < {MOST_OWNERS})"
    )


def _first_candidates(d: Dialect, owner: str | None, state: str, condition: str) -> str:
    """Joined to a row naming an owner: the claimable runs (*condition*) of one owner
    (*owner*, an SQL expression; ``None``: the local user) in *state*, oldest first, as
    many as a claim may rank (:func:`_beyond`), as ``f`` with the columns ``id``,
    ``version`` and ``pos``. The index on (state, owner, position) gives them in order,
    so the read stops there: the runs queued behind them are never read (ADR 0067). No
    run beyond its owner's first that many can be chosen: those all rank before it.

    The read is held to that index, since other indexes give the same order once the
    owner and the state are fixed (on position alone, on (state, position), on (owner,
    position), on (owner, name, position)), and a planner that misjudged an owner's
    share (a generic plan takes every owner for an equal share) walked one of them
    through another owner's whole backlog. SQLite is told the index (``INDEXED BY``: an
    error, not a slow claim, if it ever could not use it). PostgreSQL has no such hint:
    the state and the owner are tested as ranges of one value and the rows asked for in
    the index's order, so that no other index gives that order and any other read would
    sort the owner's whole state to find the first few; and each run's lease is looked
    up as the run is read, which keeps that order."""
    p, position = d.parameter, d.position
    window = _beyond(d, p("limit"))
    leased = " LEFT JOIN leases l ON l.task_id = t.id WHERE"
    if d.lateral:
        whose = "t.owner IS NULL" if owner is None else f"t.owner >= {owner} AND t.owner <= {owner}"
        # each run's lease looked up in turn (a subquery the planner cannot merge): a
        # hash of the leases would give the rows out of order, to be sorted after all
        leased = (
            " LEFT JOIN LATERAL (SELECT * FROM leases l WHERE l.task_id = t.id OFFSET 0) l"
            " ON TRUE WHERE"
        )
        return (
            f" CROSS JOIN LATERAL (SELECT t.id, t.version, t.{position} AS pos FROM tasks t"
            f"{leased} t.state >= '{state}' AND t.state <= '{state}' AND {whose}"
            f" AND {condition} ORDER BY t.state, t.owner, t.{position}{window}) f"
        )
    # no LATERAL (SQLite): the same read as a correlated list of rowids, each looked up
    whose = "t.owner IS NULL" if owner is None else f"t.owner = {owner}"
    return (
        f" JOIN (SELECT id, version, {position} AS pos FROM tasks) f ON f.pos IN ("
        f"SELECT t.{position} FROM tasks t INDEXED BY {_SQLITE_CLAIM_INDEX}{leased}"
        f" t.state = '{state}' AND {whose} AND {condition} ORDER BY t.{position}{window})"
    )


def _beyond(d: Dialect, limit: str) -> str:
    """How far the ranked candidates go: where rows are locked, past the first *limit*,
    so that a claim skips the candidates another claim holds (``SKIP LOCKED``) or took
    since its snapshot (``t.version = c.version``, re-checked on the newest row) and
    takes the next ones, rather than coming back empty while work waits; where one
    writer holds the database, the first *limit* are free."""
    return f" LIMIT {limit} * 4 + 16" if d.row_lock else f" LIMIT {limit}"


def claim_runs(
    d: Dialect, terms: ClaimTerms, takes: "Takes | None" = None
) -> Script[list[ClaimedRun]]:
    """See :meth:`taskloom.engine.runs.RunStore.claim_runs`: an owner's turn is the
    leases it holds of *worker* plus the candidate's rank among its own, oldest first.
    Only each owner's first candidates of each state are read (:func:`_first_candidates`),
    never the whole queue, unless ``MOST_OWNERS`` owners have runs in one state (ADR
    0067). The runs are taken by *takes* (:func:`take_each` by default; PostgreSQL's
    store takes them all with one statement, ADR 0055)."""
    takes = take_each if takes is None else takes
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
    p = d.parameter
    held, reserved = _held(d, terms.get("reserved", {}))
    first_reads = " UNION ALL ".join(
        [
            f"SELECT f.id, f.version, f.pos, n.who FROM (SELECT who FROM o{index}"
            f" WHERE who IS NOT NULL AND {_FEW}) n{_first_candidates(d, 'n.who', state, condition)}"
            for index, state in enumerate(ACTIVE)
        ]
        + [
            f"SELECT f.id, f.version, f.pos, '' AS who"
            f" FROM (SELECT 1 WHERE {_FEW}) n{_first_candidates(d, None, state, condition)}"
            for state in ACTIVE
        ]
    )
    owners = ", ".join(_owners_in(state, index) for index, state in enumerate(ACTIVE))
    crowded = " OR ".join(
        f"EXISTS (SELECT 1 FROM o{index} WHERE n = {MOST_OWNERS} AND who IS NOT NULL)"
        for index in range(len(ACTIVE))
    )
    rank = "row_number() OVER (PARTITION BY c.who ORDER BY c.pos) AS rank"
    found = yield from ask(
        Statement(
            f"WITH RECURSIVE held AS ({held}), {owners},"
            f" crowded(yes) AS (SELECT {crowded}),"
            # few owners: their first candidates, read through the index (ADR 0067)
            f" firsts AS (SELECT c.id, c.version, c.pos, c.who, {rank} FROM ({first_reads}) c),"
            # many owners: every claimable run, ranked (one row costs less than one owner)
            f" everyone AS (SELECT c.id, c.version, c.pos, c.who, {rank} FROM ("
            f"  SELECT t.id, t.version, t.{d.position} AS pos, coalesce(t.owner, '') AS who"
            # (the gate as the outer loop, for SQLite; as a filter tested once, for PostgreSQL)
            "  FROM (SELECT 1 AS go FROM crowded WHERE yes) g CROSS JOIN tasks t"
            "  LEFT JOIN leases l ON l.task_id = t.id"
            f"  WHERE (SELECT yes FROM crowded) AND {condition}) c),"
            " ready AS (SELECT * FROM firsts UNION ALL SELECT * FROM everyone),"
            " chosen AS ("
            "  SELECT r.id, r.version, r.pos, coalesce(h.n, 0) + r.rank AS turn"
            "  FROM ready r LEFT JOIN held h ON h.who = r.who"
            f"  WHERE (r.who = '' OR coalesce(h.n, 0) + r.rank <= {p('cap')})"
            f"  ORDER BY turn, r.pos{_beyond(d, p('limit'))}),"
            " picked AS ("
            "  SELECT c.id, c.turn, c.pos FROM chosen c JOIN tasks t ON t.id = c.id"
            f"  WHERE t.version = c.version ORDER BY c.turn, c.pos LIMIT {p('limit')}"
            f"{d.skipping('t')})"
            " SELECT t.body, l.task_id IS NOT NULL,"
            " EXISTS (SELECT 1 FROM node_runs n WHERE n.task_id = t.id)"
            " FROM picked c JOIN tasks t ON t.id = c.id"
            " LEFT JOIN leases l ON l.task_id = t.id ORDER BY c.turn, c.pos",
            {
                **parameters,
                **reserved,
                "worker": worker,
                "now": d.time(moment),
                "cap": per_owner if per_owner is not None else _NO_CAP,
                "limit": terms["limit"],
            },
            prepare=True,  # its plan costs more than its execution (ADR 0067)
        )
    )
    ranked = [(rows.task_from_body(body), bool(had), bool(ran)) for body, had, ran in found.rows]
    candidates = [(task, had) for task, had, _ in ranked]
    unread = {task.id for task, had, ran in ranked if not (had or ran)}
    expires = moment + terms["lease_for"]
    taking: list[Taking] = []
    # Python's order of these ASCII ids is PostgreSQL's ``COLLATE "C"``.
    for task, _ in sorted(candidates, key=lambda candidate: candidate[0].id):
        started, lease = claims.take(
            task, worker=worker, token=claims.new_token(), expires_at=expires, start=terms["start"]
        )
        taking.append((task, started, lease))
    # Neither a lease nor a checkpoint when ranked, and a take that changes the row (a
    # queued or parked run): a claim of it since the ranking's snapshot changed its
    # version, so the re-check on the locked row left it out; no holder can have written
    # a checkpoint, and there are none to read (ADR 0063). A running run without a lease
    # (handed back before its first node) is claimed without a change of its row: a
    # worker may have claimed it, run a node and handed it back since the snapshot.
    fresh = frozenset(
        task.id for task, started, _ in taking if task.id in unread and started is not task
    )
    taken = yield from takes(d, taking, moment, reclaim_from, fresh)
    claimed: dict[TaskId, ClaimedRun] = {}
    had = {task.id: had_lease for task, had_lease in candidates}
    for task, started, lease in taking:
        nodes = taken.get(task.id)
        if nodes is None:
            continue  # another worker took it since our snapshot
        resumed = had[task.id] or bool(nodes) or task.state is not TaskState.QUEUED
        claimed[task.id] = ClaimedRun(task=started, lease=lease, nodes=nodes, resumed=resumed)
    return [claimed[task.id] for task, _ in candidates if task.id in claimed]


Taking = tuple[Task, Task, Lease]
"""A run a claim takes: the task read, the task as the claim leaves it, the lease."""
Takes = Callable[
    [Dialect, list[Taking], datetime, str | None, frozenset[TaskId]],
    Script[dict[TaskId, dict[str, NodeRun]]],
]
"""What takes the runs of a claim, in task id order: the checkpoints of each taken. The
last argument: the runs known to have none (queued or parked, with no lease nor
checkpoint when ranked: ADR 0063)."""


def take_each(
    d: Dialect,
    taking: list[Taking],
    now: datetime,
    reclaim_from: str | None,
    fresh: frozenset[TaskId] = frozenset(),
) -> Script[dict[TaskId, dict[str, NodeRun]]]:
    """:data:`Takes` one run after another: :func:`take`, each run's checkpoints read in
    the round trip of its task's write where the dialect fuses them (so *fresh* saves
    nothing here)."""
    taken: dict[TaskId, dict[str, NodeRun]] = {}
    for task, started, lease in taking:
        nodes = yield from _taken_checkpoints(
            d, task, started, lease, now=now, reclaim_from=reclaim_from
        )
        if nodes is not None:
            taken[task.id] = nodes
    return taken


def _held(d: Dialect, reserved: Mapping[TaskId, str | None]) -> tuple[str, dict[str, object]]:
    """The query of the runs each owner holds of the claiming worker (``who``, ``n``):
    its live leases, and the runs *reserved* for its eager creates in flight (ADR 0046),
    each counted once whether its create has committed or not; and its parameters."""
    p = d.parameter
    leases = (
        f" FROM leases l JOIN tasks t ON t.id = l.task_id WHERE l.worker = {p('worker')}"
        f" AND l.expires_at > {p('now')}"
    )
    if not reserved:
        return f"SELECT coalesce(t.owner, '') AS who, count(*) AS n{leases} GROUP BY 1", {}
    parameters: dict[str, object] = {}
    for index, (task_id, owner) in enumerate(reserved.items()):
        parameters[f"r{index}"], parameters[f"r{index}o"] = task_id, owner or ""
    ids = ", ".join(p(f"r{index}") for index in range(len(reserved)))
    owners = " UNION ALL ".join(
        f"SELECT CAST({p(f'r{index}o')} AS TEXT)" for index in range(len(reserved))
    )
    query = (
        f"SELECT who, count(*) AS n FROM (SELECT coalesce(t.owner, '') AS who{leases}"
        f" AND l.task_id NOT IN ({ids}) UNION ALL {owners}) h GROUP BY who"
    )
    return query, parameters


def take(
    d: Dialect,
    task: Task,
    started: Task,
    lease: Lease,
    *,
    now: datetime,
    reclaim_from: str | None = None,
    inserted: bool = False,
) -> Script[bool]:
    """Write what claiming *task* writes (:func:`taskloom.engine.claims.take` gave
    *started* and *lease*): the lease, inserted or taken over from one expired at *now*
    (or *reclaim_from*'s), then, if taken, *started* over *task* with its history row
    (*inserted*: the row was inserted as *started* by this transaction's create, so
    only the history row). ``False``: the run's lease is another worker's (taken
    since the claim's snapshot)."""
    if not (yield from _lease(d, lease, now=now, reclaim_from=reclaim_from)):
        return False
    if started is not task and inserted:
        yield from history.record(d, task, started)
    elif started is not task:
        yield from tasks.put(d, task, started)
    return True


def _taken_checkpoints(
    d: Dialect,
    task: Task,
    started: Task,
    lease: Lease,
    *,
    now: datetime,
    reclaim_from: str | None,
) -> Script[dict[str, NodeRun] | None]:
    """:func:`take`, the run's checkpoints read in the round trip of *started*'s write
    where the dialect fuses them (ADR 0055); ``None``: not taken."""
    if not (yield from _lease(d, lease, now=now, reclaim_from=reclaim_from)):
        return None
    writes = tasks.put(d, task, started) if started is not task else None
    return (yield from tasks.before(writes, runs.node_runs(d, task.id)))


def _lease(d: Dialect, lease: Lease, *, now: datetime, reclaim_from: str | None) -> Script[bool]:
    """*lease* inserted, or taken over from one expired at *now* (or *reclaim_from*'s);
    ``False``: another worker's."""
    p = d.parameter
    taken = yield from ask(
        Statement(
            "INSERT INTO leases (task_id, worker, token, expires_at)"
            f" VALUES ({p('task')}, {p('worker')}, {p('token')}, {p('expires')})"
            " ON CONFLICT (task_id) DO UPDATE SET worker = excluded.worker,"
            " token = excluded.token, expires_at = excluded.expires_at"
            f" WHERE leases.expires_at <= {p('now')} OR leases.worker = {p('reclaim')}",
            {
                "task": lease.task_id,
                "worker": lease.worker,
                "token": lease.token,
                "expires": d.time(lease.expires_at),
                "now": d.time(now),
                "reclaim": reclaim_from,
            },
        )
    )
    return taken.rowcount == 1


Create = Callable[[Task, datetime, Task], Script[tuple[Task, bool]]]
"""A dialect's ``create`` script (``SqlStore._create``): the task, inserted as the
third argument, unless its owner's live task holds its idempotency key."""


def create_claimed(
    d: Dialect, create: Create, task: Task, claim: ClaimAtCreate, now: Instant
) -> Script[tuple[Task, ClaimedRun | None]]:
    """See :meth:`taskloom.engine.runs.RunStore.create_claimed`: the dialect's *create*
    of the row as the claim leaves it, then what a claim of the new run writes
    (:func:`take`: its lease and its ``claimed`` history row), in one transaction."""
    moment = at(now)  # in this transaction attempt: a retry never commits a stale lease
    run = claim.applied(task, moment)
    stored, created = yield from create(task, task.created_at, run.task)
    if not created:
        return stored, None
    if not (yield from take(d, task, run.task, run.lease, now=moment, inserted=True)):
        raise AssertionError(f"new task {task.id} already has a lease")
    return run.task, run


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
