"""Following a run to its end with a progress view; Ctrl-C cancels it or detaches.

The outcome decides the exit code: 0 completed, 1 failed, 130 cancelled.
"""

import json
import signal
import sys
from collections.abc import Sequence
from contextlib import aclosing, suppress
from typing import Any, Final, Literal

import anyio

from taskloom.commands.base import EXIT_CANCELLED, EXIT_FAILED, EXIT_OK
from taskloom.commands.common import RECHECK_S
from taskloom.commands.progress_view import ProgressView
from taskloom.commands.prompt import Prompter
from taskloom.commands.say import say
from taskloom.engine.dag import Workflow
from taskloom.engine.errors import TaskStateError
from taskloom.engine.manager import TaskManager
from taskloom.engine.models import Task
from taskloom.engine.runs import NodeState, RunStore
from taskloom.engine.states import TaskState
from taskloom.engine.versions import waiting_for_process
from taskloom.engine.view import node_view

OnInterrupt = Literal["cancel", "detach"]
CTRL_C_REASON: Final = "cancelled from the command line (Ctrl-C)"
READER_LEFT_REASON: Final = "cancelled: the reader of the command's output left (broken pipe)"

UNCLAIMED_NOTE_S: Final = 5.0
"""How long ``tasks watch`` waits for a queued task to be claimed before saying that no
worker serves it."""

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
    flags: str = "",
    intro: Sequence[str] = (),
) -> int:
    """Print the *intro* lines, then draw *task*'s progress until it ends; print how it ended; return the exit code.

    When the input is a terminal, the task's questions are asked there. On Ctrl-C (or
    SIGTERM), ``cancel`` cancels the task and waits for its nodes to stop,
    and ``detach`` stops watching (the task goes on; exit code 130): then a task still
    queued after :data:`UNCLAIMED_NOTE_S` is said to have no worker. When the reader of
    stdout leaves (``| head -1``), ``cancel`` cancels the task as Ctrl-C does and
    ``detach`` stops watching with exit code 0, both printing nothing more. *flags*
    (``--db ...``) are added to the commands it prints, so they work when copied.
    """
    reader_left = anyio.Event()
    view = ProgressView(
        workflow, sys.stdout, live=sys.stdout.isatty(), on_reader_left=reader_left.set
    )
    final: Task | None = None
    prompter = Prompter(manager, task.id, view, flags) if sys.stdin.isatty() else None
    async with anyio.create_task_group() as task_group:
        watching = anyio.CancelScope()
        task_group.start_soon(_signals, manager, task.id, on_interrupt, watching, view)
        task_group.start_soon(
            _when_reader_leaves, manager, task.id, on_interrupt, watching, reader_left
        )
        for line in intro:
            view.note(line)
        if on_interrupt == "detach" and not task.is_terminal:
            task_group.start_soon(_unclaimed, manager, task, view, flags)
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
    if reader_left.is_set():  # stdout is the null device: nothing more to say
        return exit_code(final) if final.is_terminal else EXIT_OK
    if not final.is_terminal:
        say(f"Stopped watching; task {final.id} goes on ({final.state}).")
        return EXIT_CANCELLED
    await _outcome(runs, workflow, final, flags)
    return exit_code(final)


async def _unclaimed(manager: TaskManager, task: Task, view: ProgressView, flags: str) -> None:
    """Say so once when *task* stays queued: no worker on this database serves its
    workflow (or all are busy)."""
    await anyio.sleep(UNCLAIMED_NOTE_S)
    current = await manager.get(task.id)
    marked = current.status_message == waiting_for_process(current, frozenset())  # ADR 0039
    if current.state is TaskState.QUEUED and (current.updated_at == task.updated_at or marked):
        version = f" version {current.workflow_version}" if current.workflow_version else ""
        view.note(
            f"Task {task.id} is still queued after {UNCLAIMED_NOTE_S:g} s: no worker on this "
            f"database runs {task.name}{version} (or all are busy). Start one with: "
            f"taskloom worker{flags}"
        )


async def _when_reader_leaves(
    manager: TaskManager,
    task_id: str,
    on_interrupt: OnInterrupt,
    watching: anyio.CancelScope,
    reader_left: anyio.Event,
) -> None:
    """``cancel`` (this process runs the task) cancels it, as Ctrl-C does, so that it is
    not left running with no runner; ``detach`` stops watching."""
    await reader_left.wait()
    if on_interrupt == "detach":
        watching.cancel()
        return
    with suppress(TaskStateError):  # it ended meanwhile: its outcome stands
        await manager.cancel(task_id, reason=READER_LEFT_REASON)


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


async def _outcome(runs: RunStore, workflow: Workflow[Any] | None, task: Task, flags: str) -> None:
    nodes = await runs.checkpoints(task.id)
    completed = [name for name, run in nodes.items() if run.state is NodeState.COMPLETED]
    failed = [name for name, run in nodes.items() if node_view(task, run).label == "failed"]
    if workflow is not None:
        completed = [name for name in workflow.order() if name in completed]
    total = len(workflow.nodes) if workflow is not None else len(nodes)
    if task.state is TaskState.COMPLETED:
        say(f"Completed: task {task.id} ({task.status_message or 'done'}).")
        shown = json.dumps(task.result, indent=2, ensure_ascii=False)
        if len(shown) <= MAX_RESULT_SHOWN:
            say(f"Result:\n{shown}")
        else:
            say(
                f"Result: {len(shown):,} characters of JSON: taskloom tasks result {task.id}{flags}"
            )
        return
    kept = ", ".join(completed) or "none"
    if task.state is TaskState.CANCELLED:
        say(f"Cancelled: task {task.id}: {task.status_message or 'cancelled'}.")
    else:
        reason = task.error.message if task.error is not None else task.status_message
        say(f"Failed: task {task.id}: {reason}")
        if failed:
            say(f"  failed: {', '.join(failed)}")
    say(f"  nodes completed before it ended ({len(completed)}/{total}): {kept}")
    say(f"  run the rest later with: taskloom tasks resume {task.id} --run{flags}")
