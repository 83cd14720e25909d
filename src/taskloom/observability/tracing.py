"""OpenTelemetry spans for runs and node attempts, through the OpenTelemetry API only.

Without an SDK configured by the application (``opentelemetry-sdk`` and a
``TracerProvider``), the API's tracer is a no-op: then no span is even started (the
API's no-op spans cost microseconds a node and show nothing), until one is set. Each
execution of a run is a ``taskloom.task`` span; each node attempt a ``taskloom.node`` span
whose parent is its run's span. A failed attempt or run has the ERROR status with the
error's type (never its message: it may quote secret arguments).
"""

from typing import Final

from opentelemetry import trace
from opentelemetry.trace import (
    INVALID_SPAN_CONTEXT,
    NonRecordingSpan,
    ProxyTracerProvider,
    Span,
    Status,
    StatusCode,
    Tracer,
)

from taskloom.engine.models import Task, TaskId
from taskloom.engine.observe import AttemptEnd, AttemptInfo, RunInfo
from taskloom.engine.runs import FAILURE_OUTCOMES

TASK_SPAN = "taskloom.task"
NODE_SPAN = "taskloom.node"
_UNTRACED: Final[Span] = NonRecordingSpan(INVALID_SPAN_CONTEXT)
"""The span of a run started while no tracer provider was set: its attempts have none."""


class TraceObserver:
    """Starts and ends the spans of runs and attempts as the engine reports them."""

    def __init__(self, tracer: Tracer | None = None) -> None:
        self._tracer = tracer if tracer is not None else trace.get_tracer("taskloom")
        self._provided = tracer is not None
        """A tracer was given, or the global one has a provider (set once, ever)."""
        self._runs: dict[TaskId, Span] = {}  # a process runs a task once at a time
        self._attempts: dict[AttemptInfo, Span] = {}

    def _recording(self) -> bool:
        """Whether spans may record: a tracer was given, or the application has set the
        global tracer provider (until it does, the global tracer is the API's no-op)."""
        if not self._provided:
            self._provided = not isinstance(trace.get_tracer_provider(), ProxyTracerProvider)
        return self._provided

    def task_created(self, task: Task) -> None:
        """No span: a task's span is its execution."""

    def task_finished(self, task: Task) -> None:
        """No span: the run's span ends with :meth:`run_ended`."""

    def run_started(self, run: RunInfo) -> None:
        """Start the run's span; none without a tracer provider (should one be set
        meanwhile, the run's attempts have no spans either: the next run's have)."""
        if not self._recording():
            self._runs[run.task_id] = _UNTRACED
            return
        self._runs[run.task_id] = self._tracer.start_span(
            TASK_SPAN,
            attributes={
                "taskloom.task_id": run.task_id,
                "taskloom.workflow": run.workflow,
                "taskloom.resumed": run.resumed,
            },
        )

    def run_ended(self, run: RunInfo, outcome: str, duration_s: float) -> None:
        """End the run's span with its outcome."""
        span = self._runs.pop(run.task_id, None)
        if span is None:
            return
        span.set_attribute("taskloom.outcome", outcome)
        if outcome == "failed":
            span.set_status(Status(StatusCode.ERROR, "the task failed"))
        span.end()

    def attempt_started(self, attempt: AttemptInfo) -> None:
        """Start the attempt's span, under its run's span; none under a run that has none
        (the provider's check, an environment lookup, is made once a run, not a node)."""
        parent = self._runs.get(attempt.task_id)
        if parent is _UNTRACED or (parent is None and not self._recording()):
            return
        context = trace.set_span_in_context(parent) if parent is not None else None
        self._attempts[attempt] = self._tracer.start_span(
            NODE_SPAN,
            context=context,
            attributes={
                "taskloom.task_id": attempt.task_id,
                "taskloom.workflow": attempt.workflow,
                "taskloom.node": attempt.node,
                "taskloom.phase": attempt.phase,
                "taskloom.attempt": attempt.attempt,
            },
        )

    def attempt_ended(self, attempt: AttemptInfo, end: AttemptEnd) -> None:
        """End the attempt's span with its outcome (and error type)."""
        if not self._attempts:
            return
        span = self._attempts.pop(attempt, None)
        if span is None:
            return
        span.set_attribute("taskloom.outcome", end.outcome.value)
        span.set_attribute("taskloom.retrying", end.retrying)
        if end.outcome in FAILURE_OUTCOMES:
            error_type = end.error.error_type if end.error is not None else end.outcome.value
            span.set_attribute("error.type", error_type)
            span.set_status(Status(StatusCode.ERROR, error_type))
        span.end()
