"""The engine's observability port: lifecycle events for logs, metrics and traces.

The manager reports tasks created and finished; the runner reports each run it executes
and each node attempt, with durations and outcomes. Adapters (``taskloom.observability``)
turn them into log lines, Prometheus metrics and OpenTelemetry spans; the engine knows none
of them. An observer must be quick and must not block: it is called inline. One that
raises is logged and otherwise ignored: observing never breaks a run.
"""

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Protocol

from taskloom.engine.models import Task, TaskId
from taskloom.engine.runs import AttemptOutcome, ErrorInfo

__all__ = ("AttemptEnd", "AttemptInfo", "NullObserver", "Observer", "Observers", "RunInfo")

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class RunInfo:
    """One execution of a task's run by this process (a resume is a new execution)."""

    task_id: TaskId
    workflow: str
    resumed: bool
    """The run had been started before (by this or another worker, maybe one that died)."""


@dataclass(frozen=True)
class AttemptInfo:
    """One attempt of one node, within a run."""

    task_id: TaskId
    workflow: str
    node: str
    phase: str
    attempt: int


@dataclass(frozen=True)
class AttemptEnd:
    """How a node attempt ended: its *outcome*, whether another attempt will follow
    (*retrying*), how long it took and, when it raised, its *error*."""

    outcome: AttemptOutcome
    retrying: bool
    duration_s: float
    error: ErrorInfo | None = None


class Observer(Protocol):
    """Receives the engine's lifecycle events."""

    def task_created(self, task: Task) -> None:
        """A task was created (not on an idempotent repeat)."""
        ...

    def task_finished(self, task: Task) -> None:
        """A task reached a terminal state (completed, failed or cancelled) here."""
        ...

    def run_started(self, run: RunInfo) -> None:
        """This process began executing *run*."""
        ...

    def run_ended(self, run: RunInfo, outcome: str, duration_s: float) -> None:
        """This process stopped executing *run*: *outcome* is ``completed``, ``failed``,
        ``cancelled``, ``interrupted`` (shutdown: handed back) or ``lease_lost``."""
        ...

    def attempt_started(self, attempt: AttemptInfo) -> None:
        """A node attempt began."""
        ...

    def attempt_ended(self, attempt: AttemptInfo, end: AttemptEnd) -> None:
        """A node attempt ended, as *end* says."""
        ...


class NullObserver:
    """Observes nothing (the default)."""

    def task_created(self, task: Task) -> None:
        """Ignore."""

    def task_finished(self, task: Task) -> None:
        """Ignore."""

    def run_started(self, run: RunInfo) -> None:
        """Ignore."""

    def run_ended(self, run: RunInfo, outcome: str, duration_s: float) -> None:
        """Ignore."""

    def attempt_started(self, attempt: AttemptInfo) -> None:
        """Ignore."""

    def attempt_ended(self, attempt: AttemptInfo, end: AttemptEnd) -> None:
        """Ignore."""


class Observers:
    """Several observers as one; an observer that raises does not stop the others.

    Nested ``Observers`` are flattened and ``NullObserver`` dropped, so an event costs
    one call per observer that does something; an event an observer inherits from
    ``NullObserver`` (ignores) is not even passed to it.
    """

    def __init__(self, observers: Iterable[Observer]) -> None:
        flat: list[Observer] = []
        for observer in observers:
            if isinstance(observer, Observers):
                flat.extend(observer._observers)
            elif type(observer) is not NullObserver:
                flat.append(observer)
        self._observers: tuple[Observer, ...] = tuple(flat)
        self._task_created = _listening(flat, "task_created")
        self._task_finished = _listening(flat, "task_finished")
        self._run_started = _listening(flat, "run_started")
        self._run_ended = _listening(flat, "run_ended")
        self._attempt_started = _listening(flat, "attempt_started")
        self._attempt_ended = _listening(flat, "attempt_ended")

    @property
    def empty(self) -> bool:
        """No observer that does something: an event need not even be built."""
        return not self._observers

    def task_created(self, task: Task) -> None:
        """Tell every observer."""
        _tell(self._task_created, task)

    def task_finished(self, task: Task) -> None:
        """Tell every observer."""
        _tell(self._task_finished, task)

    def run_started(self, run: RunInfo) -> None:
        """Tell every observer."""
        _tell(self._run_started, run)

    def run_ended(self, run: RunInfo, outcome: str, duration_s: float) -> None:
        """Tell every observer."""
        _tell(self._run_ended, run, outcome, duration_s)

    def attempt_started(self, attempt: AttemptInfo) -> None:
        """Tell every observer."""
        _tell(self._attempt_started, attempt)

    def attempt_ended(self, attempt: AttemptInfo, end: AttemptEnd) -> None:
        """Tell every observer."""
        _tell(self._attempt_ended, attempt, end)


def _listening(observers: Iterable[Observer], event: str) -> tuple[Callable[..., None], ...]:
    """The bound methods of *observers* for *event*, but those ``NullObserver`` gives
    them (which ignore it)."""
    ignored = getattr(NullObserver, event)
    return tuple(
        getattr(observer, event)
        for observer in observers
        if getattr(type(observer), event, None) is not ignored
    )


def _tell(calls: tuple[Callable[..., None], ...], *event: Any) -> None:
    """Call each of *calls* with *event*; one that raises is logged, the others go on."""
    for call in calls:
        try:
            call(*event)
        except Exception:
            logger.exception("observer %s failed", _owner(call))


def _owner(call: Callable[..., None]) -> str:
    """The name of the class of the observer *call* is a method of."""
    return type(getattr(call, "__self__", call)).__name__
