"""Which runs a worker may claim: the one rule every store applies (ADR 0039).

A run is claimable when its task is active and unexpired, its workflow (name, and the
version it records) is one the claiming process has loaded, no other worker holds a live
lease on it (or the lease is a dead earlier incarnation's), and it is not parked on a
wait that is still running. The in-memory store evaluates :meth:`ClaimRule.admits`; the
SQL stores render the same rule with ``taskloom.persistence.claims``; one contract suite
and a test comparing both on the same rows keep them equal.

Fairness across owners (ADR 0028) orders the claimable runs; it is not part of the rule.
"""

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Final

from taskloom.engine.models import Task
from taskloom.engine.runs import Lease
from taskloom.engine.states import ACTIVE_STATES

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
