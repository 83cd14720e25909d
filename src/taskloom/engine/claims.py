"""Which runs a worker may claim: the one rule every store applies (ADR 0039).

A run is claimable when its task is active and unexpired, its workflow (name, and the
version it records) is one the claiming process has loaded, no other worker holds a live
lease on it (or the lease is a dead earlier incarnation's), and it is not parked on a
wait that is still running. The in-memory store evaluates :meth:`ClaimRule.admits`; the
SQL stores render the same rule with ``taskloom.persistence.claims``; one contract suite
and a test comparing both on the same rows keep them equal.

Fairness across owners (ADR 0028) orders the claimable runs; it is not part of the rule.

What a claim writes for one run is :func:`take`, the one function every store's claim
and the claim a create makes for eager start (:class:`ClaimAtCreate`, ADR 0046) apply.
"""

import secrets
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Final

from taskloom.engine.models import Task, TaskMutation, ensure_successor
from taskloom.engine.runs import ClaimedRun, Lease
from taskloom.engine.states import ACTIVE_STATES, TaskState

WorkflowKey = tuple[str, str]
"""A workflow's (name, version)."""

ANY_VERSION: Final = None
"""In :attr:`ClaimRule.workflows`: every version of the name is claimable."""


def versions_by_name(
    workflows: Iterable[str | WorkflowKey],
) -> dict[str, frozenset[str] | None]:
    """*workflows* as name -> versions (``None``: any version); a bare name means every
    version of it, a (name, version) pair that version only."""
    found: dict[str, frozenset[str] | None] = {}
    for entry in workflows:
        if isinstance(entry, str):
            found[entry] = ANY_VERSION
        else:
            name, version = entry
            if name in found and found[name] is ANY_VERSION:
                continue
            found[name] = (found.get(name) or frozenset()) | {version}
    return found


@dataclass(frozen=True)
class ClaimRule:
    """The runs one worker may claim now."""

    workflows: Mapping[str, frozenset[str] | None] = field(default_factory=dict)
    """Loaded workflows: name -> versions (``None``: any version). A run that recorded
    no version (created outside :func:`taskloom.engine.submit.submit`) is claimable by
    any loaded version of its name."""
    reclaim_from: str | None = None
    """A dead earlier incarnation of the worker, whose live leases may be taken over."""

    @classmethod
    def of(
        cls, workflows: Iterable[str | WorkflowKey], reclaim_from: str | None = None
    ) -> "ClaimRule":
        """The rule for a worker that loaded *workflows* (names or (name, version) pairs)."""
        return cls(versions_by_name(workflows), reclaim_from)

    @property
    def is_empty(self) -> bool:
        """True when no run can be claimable (no workflow loaded)."""
        return not self.workflows

    def has_version(self, name: str, version: str | None) -> bool:
        """Whether a run of *name* that recorded *version* is one of the loaded workflows."""
        if name not in self.workflows:
            return False
        versions = self.workflows[name]
        return versions is ANY_VERSION or version is None or version in versions

    def admits(self, task: Task, lease: Lease | None, now: datetime) -> bool:
        """Whether *task*, currently held by *lease* (if any), may be claimed at *now*."""
        return (
            task.state in ACTIVE_STATES
            and not task.is_expired(now)
            and self.has_version(task.name, task.workflow_version)
            and (lease is None or lease.expires_at <= now or lease.worker == self.reclaim_from)
            and (not task.parked or (task.wake_at is not None and task.wake_at <= now))
        )


def new_token() -> str:
    """A fresh lease token (the fence of every write of the run it leases)."""
    return secrets.token_hex(16)


def take(
    task: Task, *, worker: str, token: str, expires_at: datetime, start: TaskMutation
) -> tuple[Task, Lease]:
    """What claiming *task* writes: the task as the claim leaves it (a queued or parked
    run moved by *start*, checked as its successor; any other run unchanged) and
    *worker*'s lease on it until *expires_at*. The store writes both, and the history
    row of the task's change (``entry_for``), in the claim's transaction."""
    started = task
    if task.state is TaskState.QUEUED or task.parked:
        started = start(task)
        ensure_successor(task, started)
    return started, Lease(task_id=task.id, worker=worker, token=token, expires_at=expires_at)


@dataclass(frozen=True)
class ClaimAtCreate:
    """A claim made by the transaction that creates the run (eager start, ADR 0046):
    the new task is stored already claimed by *worker*, exactly as :func:`take` leaves
    it, with the history rows ``created`` then ``claimed``."""

    worker: str
    token: str
    """Chosen before the commit, so the worker can hand the lease back if the commit's
    outcome is unknown."""
    lease_for: timedelta
    start: TaskMutation
    """The claim's change of the task (``claim_start``), as for a queued run."""

    def applied(self, task: Task, now: datetime) -> ClaimedRun:
        """*task* (new, queued) claimed at *now* (read inside the transaction attempt
        that commits): the run to start, with its lease until *now* + ``lease_for``."""
        started, lease = take(
            task,
            worker=self.worker,
            token=self.token,
            expires_at=now + self.lease_for,
            start=self.start,
        )
        return ClaimedRun(task=started, lease=lease, nodes={}, resumed=False)

    def lease(self, task: Task, expires_at: datetime) -> Lease:
        """The lease this claim gives its worker on *task*, until *expires_at* (what the
        worker hands back when the commit's outcome is unknown)."""
        return Lease(task_id=task.id, worker=self.worker, token=self.token, expires_at=expires_at)
