"""The engine's metrics, counted from its lifecycle events, in ``prometheus_client``
(ADR 0034), for ``GET /metrics``.

Counts are this process's: a task is counted as created by the process that created it
and as finished by the one that moved it to its terminal state (a separate worker, or
the server for a cancel). Labels are bounded: workflow names, phases, states, outcomes
and error types, never task ids or node names (a fan-out has thousands of nodes).

Each :class:`Metrics` has a registry of its own (never the library's global one: a host
program may use it, and tests make many), holding taskloom's metrics and the library's
process, platform and garbage-collector collectors. ``prometheus_client`` is imported
only by processes that serve metrics (ADR 0022).
"""

from collections.abc import Sequence
from datetime import datetime
from functools import partial
from typing import Final

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)
from prometheus_client.gc_collector import GCCollector
from prometheus_client.platform_collector import PlatformCollector
from prometheus_client.process_collector import ProcessCollector

from taskloom.engine.models import Task
from taskloom.engine.observe import AttemptEnd, AttemptInfo, RunInfo
from taskloom.engine.runs import FAILURE_OUTCOMES, AttemptOutcome
from taskloom.engine.versions import VersionLine

BUCKETS: Final = (0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 3600.0)
"""Seconds: node attempts and tasks last from milliseconds to an hour."""


class Metrics:
    """Every taskloom metric, updated as an engine :class:`~taskloom.engine.observe.Observer`;
    thread-safe (a metrics server thread may render while the event loop counts)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        ProcessCollector(registry=self.registry)
        PlatformCollector(registry=self.registry)
        GCCollector(registry=self.registry)
        counter = partial(Counter, registry=self.registry)
        gauge = partial(Gauge, registry=self.registry)
        histogram = partial(Histogram, buckets=BUCKETS, registry=self.registry)
        by_state, by_outcome = ("workflow", "state"), ("workflow", "phase", "outcome")
        by_version = ("workflow", "version")
        self.tasks_created = counter("taskloom_tasks_created", "Tasks created.", ["workflow"])
        self.tasks_finished = counter(
            "taskloom_tasks_finished", "Tasks that reached a terminal state, by state.", by_state
        )
        self.task_duration = histogram(
            "taskloom_task_duration_seconds",
            "Time from a task's creation to its terminal state.",
            by_state,
        )
        self.runs_in_progress = gauge(
            "taskloom_runs_in_progress", "Runs this process is executing.", ["workflow"]
        )
        self.runs_resumed = counter(
            "taskloom_runs_resumed",
            "Runs resumed from their checkpoints (after a stop, a crash or a lost lease).",
            ["workflow"],
        )
        self.node_attempts = counter(
            "taskloom_node_attempts", "Node attempts ended, by outcome.", by_outcome
        )
        self.node_errors = counter(
            "taskloom_node_errors",
            "Node attempts that failed or timed out, by error type.",
            ["workflow", "error_type"],
        )
        self.attempt_duration = histogram(
            "taskloom_node_attempt_duration_seconds",
            "Duration of node attempts, by outcome.",
            by_outcome,
        )
        self.runs_waiting_for_a_version = gauge(
            "taskloom_runs_waiting_for_a_version",
            "Unfinished runs of a workflow version that no live process has loaded.",
            by_version,
        )
        self.oldest_waiting_for_a_version = gauge(
            "taskloom_oldest_run_waiting_for_a_version_seconds",
            "Age of the oldest unfinished run of a workflow version no live process has.",
            by_version,
        )
        self._attempt_children: dict[tuple[str, str, AttemptOutcome], tuple[Counter, Histogram]]
        self._attempt_children = {}
        """Each label set's children of the attempts' counter and histogram, looked up
        once (``labels`` checks, converts and locks at each call); these two metrics are
        never cleared."""

    def versions_seen(self, lines: Sequence[VersionLine], now: datetime) -> None:
        """Set the gauges of the versions no live process has from a version report
        (``taskloom.engine.versions.version_report``); versions that are served again
        leave the gauges."""
        self.runs_waiting_for_a_version.clear()
        self.oldest_waiting_for_a_version.clear()
        for line in lines:
            if not line.orphaned or line.version is None:
                continue
            self.runs_waiting_for_a_version.labels(line.name, line.version).set(line.unfinished)
            age = (now - line.oldest).total_seconds() if line.oldest is not None else 0.0
            self.oldest_waiting_for_a_version.labels(line.name, line.version).set(max(age, 0.0))

    def render(self) -> str:
        """Every metric in the Prometheus text format, version 0.0.4."""
        return generate_latest(self.registry).decode()

    # -- the engine's Observer ------------------------------------------------------------

    def task_created(self, task: Task) -> None:
        """Count it."""
        self.tasks_created.labels(task.name).inc()

    def task_finished(self, task: Task) -> None:
        """Count it, and how long it took since its creation."""
        self.tasks_finished.labels(task.name, task.state.value).inc()
        seconds = (task.updated_at - task.created_at).total_seconds()
        self.task_duration.labels(task.name, task.state.value).observe(max(seconds, 0.0))

    def run_started(self, run: RunInfo) -> None:
        """Count it as in progress (and resumed, if it is)."""
        self.runs_in_progress.labels(run.workflow).inc()
        if run.resumed:
            self.runs_resumed.labels(run.workflow).inc()

    def run_ended(self, run: RunInfo, outcome: str, duration_s: float) -> None:
        """No longer in progress."""
        self.runs_in_progress.labels(run.workflow).dec()

    def attempt_started(self, attempt: AttemptInfo) -> None:
        """Nothing: attempts are counted as they end."""

    def attempt_ended(self, attempt: AttemptInfo, end: AttemptEnd) -> None:
        """Count it, its duration and its error."""
        key = (attempt.workflow, attempt.phase, end.outcome)
        children = self._attempt_children.get(key)
        if children is None:
            labels = (attempt.workflow, attempt.phase, end.outcome.value)
            children = self.node_attempts.labels(*labels), self.attempt_duration.labels(*labels)
            self._attempt_children[key] = children
        count, duration = children
        count.inc()
        duration.observe(end.duration_s)
        if end.error is not None and end.outcome in FAILURE_OUTCOMES:
            self.node_errors.labels(attempt.workflow, end.error.error_type).inc()
