"""An observer that records every event, and a workflow that retries once then fails."""

from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel

from taskloom.engine.dag import NodeContext, Workflow
from taskloom.engine.models import Task
from taskloom.engine.observe import AttemptEnd, AttemptInfo, RunInfo
from taskloom.engine.retry import RetryPolicy


class Empty(BaseModel):
    pass


def flaky_then_broken() -> Workflow[Empty]:
    """``flaky`` fails once then succeeds; ``broken`` (after it) always raises."""
    flow = Workflow("shaky", version="1", input=Empty)

    @flow.node(phase="warm", retry=RetryPolicy(max_attempts=2, initial_delay_s=0, jitter=False))
    async def flaky(ctx: NodeContext[Empty]) -> str:
        if ctx.attempt == 1:
            raise ConnectionError("first try")
        return "ok"

    @flow.node(phase="work", deps=[flaky])
    async def broken(ctx: NodeContext[Empty]) -> str:
        raise ValueError("the secret-ish message")

    return flow


@dataclass
class RecordingObserver:
    """Every event received, in order, as ``(event, details)``."""

    events: list[tuple[str, Any]] = field(default_factory=list)

    def task_created(self, task: Task) -> None:
        self.events.append(("task_created", task.id))

    def task_finished(self, task: Task) -> None:
        self.events.append(("task_finished", (task.id, task.state.value)))

    def run_started(self, run: RunInfo) -> None:
        self.events.append(("run_started", run))

    def run_ended(self, run: RunInfo, outcome: str, duration_s: float) -> None:
        assert duration_s >= 0
        self.events.append(("run_ended", (run, outcome)))

    def attempt_started(self, attempt: AttemptInfo) -> None:
        self.events.append(("attempt_started", (attempt.node, attempt.attempt)))

    def attempt_ended(self, attempt: AttemptInfo, end: AttemptEnd) -> None:
        assert end.duration_s >= 0
        error_type = end.error.error_type if end.error is not None else None
        self.events.append(
            (
                "attempt_ended",
                (attempt.node, attempt.attempt, end.outcome, end.retrying, error_type),
            )
        )

    def named(self, event: str) -> list[Any]:
        """The details of every *event* received."""
        return [details for name, details in self.events if name == event]
