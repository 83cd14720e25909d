"""The engine's metrics, counted from its lifecycle events, for ``GET /metrics``.

Counts are this process's: a task is counted as created by the process that created it
and as finished by the one that moved it to its terminal state (a separate worker, or
the server for a cancel). Labels are bounded: workflow names, phases, states, outcomes
and error types, never task ids or node names (a fan-out has thousands of nodes).
"""

from taskloom.engine.models import Task
from taskloom.engine.observe import AttemptInfo, RunInfo
from taskloom.engine.runs import FAILURE_OUTCOMES, AttemptOutcome, ErrorInfo
from taskloom.observability.prometheus import Counter, Gauge, Histogram, render


class Metrics:
    """Every taskloom metric, updated as an engine :class:`~taskloom.engine.observe.Observer`."""

    def __init__(self) -> None:
        self.tasks_created = Counter("taskloom_tasks_created_total", "Tasks created.", ["workflow"])
        self.tasks_finished = Counter(
            "taskloom_tasks_finished_total",
            "Tasks that reached a terminal state, by state.",
            ["workflow", "state"],
        )
        self.task_duration = Histogram(
            "taskloom_task_duration_seconds",
            "Time from a task's creation to its terminal state.",
            ["workflow", "state"],
        )
        self.runs_in_progress = Gauge(
            "taskloom_runs_in_progress", "Runs this process is executing.", ["workflow"]
        )
        self.runs_resumed = Counter(
            "taskloom_runs_resumed_total",
            "Runs resumed from their checkpoints (after a stop, a crash or a lost lease).",
            ["workflow"],
        )
        self.node_attempts = Counter(
            "taskloom_node_attempts_total",
            "Node attempts ended, by outcome.",
            ["workflow", "phase", "outcome"],
        )
        self.node_errors = Counter(
            "taskloom_node_errors_total",
            "Node attempts that failed or timed out, by error type.",
            ["workflow", "error_type"],
        )
        self.attempt_duration = Histogram(
            "taskloom_node_attempt_duration_seconds",
            "Duration of node attempts, by outcome.",
            ["workflow", "phase", "outcome"],
        )

    def render(self) -> str:
        """Every metric in the Prometheus text format."""
        return render(
            (
                self.tasks_created,
                self.tasks_finished,
                self.task_duration,
                self.runs_in_progress,
                self.runs_resumed,
                self.node_attempts,
                self.node_errors,
                self.attempt_duration,
            )
        )

    # -- the engine's Observer ------------------------------------------------------------

    def task_created(self, task: Task) -> None:
        """Count it."""
        self.tasks_created.inc(task.name)

    def task_finished(self, task: Task) -> None:
        """Count it, and how long it took since its creation."""
        self.tasks_finished.inc(task.name, task.state.value)
        seconds = (task.updated_at - task.created_at).total_seconds()
        self.task_duration.observe(max(seconds, 0.0), task.name, task.state.value)

    def run_started(self, run: RunInfo) -> None:
        """Count it as in progress (and resumed, if it is)."""
        self.runs_in_progress.inc(run.workflow)
        if run.resumed:
            self.runs_resumed.inc(run.workflow)

    def run_ended(self, run: RunInfo, outcome: str, duration_s: float) -> None:
        """No longer in progress."""
        self.runs_in_progress.dec(run.workflow)

    def attempt_started(self, attempt: AttemptInfo) -> None:
        """Nothing: attempts are counted as they end."""

    def attempt_ended(
        self,
        attempt: AttemptInfo,
        outcome: AttemptOutcome,
        *,
        retrying: bool,
        duration_s: float,
        error: ErrorInfo | None,
    ) -> None:
        """Count it, its duration and its error."""
        labels = (attempt.workflow, attempt.phase, outcome.value)
        self.node_attempts.inc(*labels)
        self.attempt_duration.observe(duration_s, *labels)
        if error is not None and outcome in FAILURE_OUTCOMES:
            self.node_errors.inc(attempt.workflow, error.error_type)
