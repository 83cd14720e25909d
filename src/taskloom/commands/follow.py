"""Following a run to its end with a progress view; Ctrl-C cancels it or detaches.

The outcome decides the exit code: 0 completed, 1 failed, 130 cancelled.
"""

import json
import signal
import sys
from contextlib import aclosing, suppress
from typing import Any, Final, Literal

import anyio

from taskloom.commands.base import EXIT_CANCELLED, EXIT_FAILED, EXIT_OK
from taskloom.commands.progress_view import ProgressView
from taskloom.commands.prompt import Prompter
from taskloom.engine.dag import Workflow
from taskloom.engine.errors import TaskStateError
from taskloom.engine.manager import TaskManager
from taskloom.engine.models import Task
from taskloom.engine.runs import NodeState, RunStore
from taskloom.engine.states import TaskState

OnInterrupt = Literal["cancel", "detach"]
CTRL_C_REASON: Final = "cancelled from the command line (Ctrl-C)"
RECHECK_S: Final = 0.2
"""How often the store is read again for changes made by another process."""

MAX_RESULT_SHOWN: Final = 4_000
"""Longer results are not printed at the end of a run (``tasks result`` shows them)."""


def exit_code(task: Task) -> int:
    """0 for a completed task, 1 for a failed one, 130 for a cancelled one."""
    if task.state is TaskState.COMPLETED:
        return EXIT_OK
    if task.state is TaskState.CANCELLED:
        return EXIT_CANCELLED
    return EXIT_FAILED


async def follow(
    manager: TaskManager,
    runs: RunStore,
    workflow: Workflow[Any] | None,
    task: Task,
    *,
    on_interrupt: OnInterrupt,
) -> int:
    """Draw *task*'s progress until it ends; print how it ended; return the exit code.

    When the input is a terminal, the task's questions are asked there. On Ctrl-C (or
    SIGTERM), ``cancel`` cancels the task and waits for its nodes to stop,
    and ``detach`` stops watching (the task goes on; exit code 130).
    """
    view = ProgressView(workflow, sys.stdout, live=sys.stdout.isatty())
    final: Task | None = None
    prompter = Prompter(manager, task.id, view) if sys.stdin.isatty() else None
    async with anyio.create_task_group() as task_group:
        watching = anyio.CancelScope()
        task_group.start_soon(_signals, manager, task.id, on_interrupt, watching, view)
        with watching:
            watch = manager.watch(task.id, recheck_every=RECHECK_S)
            async with aclosing(watch) as snapshots:
                async for current in snapshots:
                    view.update(current, await runs.checkpoints(current.id))
                    final = current
                    if prompter is not None:
                        for key in prompter.new_questions(current.input_requests):
                            request = current.input_requests[key]
                            task_group.start_soon(prompter.ask, key, request)
        task_group.cancel_scope.cancel()
    view.close()
    assert final is not None
    if not final.is_terminal:
        print(f"Stopped watching; task {final.id} goes on ({final.state}).")
        return EXIT_CANCELLED
    await _outcome(runs, workflow, final)
    return exit_code(final)


async def _signals(
    manager: TaskManager,
    task_id: str,
    on_interrupt: OnInterrupt,
    watching: anyio.CancelScope,
    view: ProgressView,
) -> None:
    interrupted = False
    with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async for _ in signals:
            if interrupted or on_interrupt == "detach":
                watching.cancel()  # stop waiting (a second Ctrl-C while cancelling)
                continue
            interrupted = True
            view.note("Ctrl-C: cancelling the task and stopping its nodes...")
            with suppress(TaskStateError):  # it ended meanwhile: its outcome stands
                await manager.cancel(task_id, reason=CTRL_C_REASON)


async def _outcome(runs: RunStore, workflow: Workflow[Any] | None, task: Task) -> None:
    nodes = await runs.checkpoints(task.id)
    completed = [name for name, run in nodes.items() if run.state is NodeState.COMPLETED]
    if workflow is not None:
        completed = [name for name in workflow.order() if name in completed]
    total = len(workflow.nodes) if workflow is not None else len(nodes)
    if task.state is TaskState.COMPLETED:
        print(f"Completed: task {task.id} ({task.status_message or 'done'}).")
        shown = json.dumps(task.result, indent=2, ensure_ascii=False)
        if len(shown) <= MAX_RESULT_SHOWN:
            print(f"Result:\n{shown}")
        else:
            print(f"Result: {len(shown):,} characters of JSON: taskloom tasks result {task.id}")
        return
    kept = ", ".join(completed) or "none"
    if task.state is TaskState.CANCELLED:
        print(f"Cancelled: task {task.id}: {task.status_message or 'cancelled'}.")
    else:
        reason = task.error.message if task.error is not None else task.status_message
        print(f"Failed: task {task.id}: {reason}")
    print(f"  nodes completed before it ended ({len(completed)}/{total}): {kept}")
    print(f"  run the rest later with: taskloom tasks resume {task.id}")
