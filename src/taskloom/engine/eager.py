"""Eager start (ADR 0046): the create that commits a task also claims its run, for a
worker of the same process that has a free slot, which then runs it at once.

The manager offers each task it is about to create to the workers registered with
:meth:`taskloom.engine.manager.TaskManager.eager_starts`; one that may take it answers
with a :class:`Reservation` (its slot is held from then on), and the create's own
transaction stores the task already claimed (``RunStore.create_claimed``). The manager
then tells the reservation how the commit went: :meth:`Reservation.start` with the
claimed run, or :meth:`Reservation.cancel`.
"""

from datetime import timedelta
from typing import Protocol

from taskloom.engine.models import Task
from taskloom.engine.runs import ClaimedRun, Lease


class Reservation(Protocol):
    """A worker's run slot held for one task while its create commits."""

    @property
    def worker(self) -> str:
        """The id of the worker whose lease the create writes."""
        ...

    @property
    def lease_for(self) -> timedelta:
        """How long that lease lasts without a heartbeat."""
        ...

    def start(self, run: ClaimedRun) -> None:
        """The create committed with the claim: run *run* now (no wake, no claim)."""
        ...

    def cancel(self, lease: Lease | None) -> None:
        """Free the slot: nothing was stored claimed (``None``), or the commit failed
        and may still have landed, so *lease* is handed back once the store answers."""
        ...


class EagerStarter(Protocol):
    """A worker that may run tasks as they are created (see :class:`Reservation`)."""

    def reserve(self, task: Task) -> Reservation | None:
        """A slot for *task* (about to be created, queued), or ``None`` when it must go
        through the queue: no free slot, its owner at its cap, a workflow version not
        loaded, or older runs may be waiting (ADR 0046)."""
        ...
