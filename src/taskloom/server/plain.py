"""Plain calls: a workflow called by a host without task support (ADR 0018).

The workflow runs as a task, and the call waits for it at most
``ServerSettings.plain_wait_s``, meanwhile

- sending ``notifications/progress`` on the request's progress token whenever the task
  advances, and at least every ``progress_keepalive_s`` (hosts that reset their timeout
  on progress keep waiting);
- asking the task's questions as ``elicitation/create`` on the call itself, when the
  client declared elicitation (never on 2026-07-28, where a server sends no requests).

Then it answers the task's result, or, if the task has not ended (or waits on a question
nobody can answer on this call), a normal tool result saying that the work goes on: the
task's id, status, progress and questions, and how to follow it with the fallback
tools. From then on the task belongs to no request. A caller that cancels the call or
disconnects before that ends the wait, never the task: hosts send
``notifications/cancelled`` on their own timeouts, and work thrown away cannot be
had back (``task_cancel`` stops a task on purpose).

Every plain result names its task, in a last text line and in ``_meta``; every error
already does (message and ``data.taskId``).

A call that repeats an unfinished call of the same owner, workflow and arguments joins
its task rather than starting another (unless the workflow says ``join_repeats=False``),
and a call with an idempotency key (``_meta["taskloom/idempotencyKey"]``) follows the
task holding it; either answer says it joined (ADR 0040). The deferred answer
recommends a ``task_result`` wait no longer than this call's, and is never an error:
hosts that check results against output schemas are not shown them
(``calls.ToolCalls.list_tools``).
"""

import json
import logging
import math
from collections.abc import Hashable, Mapping
from contextlib import aclosing
from dataclasses import dataclass
from typing import Any, Final

import anyio
import mcp_types as types
from mcp.server.context import ServerRequestContext
from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_PARAMS
from pydantic import JsonValue

from taskloom.engine.dag import Workflow
from taskloom.engine.errors import (
    IdempotencyConflictError,
    InvalidRequestError,
    QuotaExceededError,
)
from taskloom.engine.manager import TaskManager
from taskloom.engine.models import MAX_KEY_LENGTH, Task
from taskloom.engine.states import TaskState
from taskloom.engine.submit import key_holder, submit, unfinished_twin, validated_arguments
from taskloom.server import audit
from taskloom.server.errors import QUOTA_EXCEEDED
from taskloom.server.fallback import DEFAULT_MAX_WAIT_S, status_lines
from taskloom.server.generation import Generation, generation
from taskloom.server.join_locks import JoinLocks
from taskloom.server.push import ProgressPush
from taskloom.server.questions import InputAsker, Unanswered
from taskloom.server.wire import (
    call_tool_result,
    invalid_arguments_result,
    modern_status,
    related_task_meta,
    text_content,
    wire_status,
)

logger = logging.getLogger(__name__)

TASK_META_KEY: Final = "taskloom/task"
"""``_meta`` key of a plain result: ``{"taskId", "status", "deferred"}``, and
``"joined": true`` when the call joined a task an earlier call started."""
IDEMPOTENCY_META_KEY: Final = "taskloom/idempotencyKey"
"""``_meta`` key of a ``tools/call`` request: the call's idempotency key (a string of 1 to
200 characters); the same key gives the same task (``submit``, ADR 0040)."""
JOINED_LINE: Final = (
    "This call joined it: an earlier call with the same arguments (or idempotency key) "
    "started it, so no second job was started."
)

Context = ServerRequestContext[Any, Any]


@dataclass
class _Waited:
    """What a plain call saw of its task."""

    latest: Task
    unanswered: Unanswered | None = None


class PlainCalls:
    """The plain calls of one connection, acting for its *owner*."""

    def __init__(
        self,
        manager: TaskManager,
        *,
        owner: str | None,
        recheck_s: float | None,
        wait_s: float | None,
        keepalive_s: float | None,
        fallback_tools: bool,
        max_unfinished: int | None = None,
        result_wait_s: float = DEFAULT_MAX_WAIT_S,
        after_host: str | None = None,
        creating: JoinLocks | None = None,
    ) -> None:
        """*result_wait_s*: the ``wait_s`` the deferred answer recommends (what
        ``task_result`` waits at most); *after_host*: a sentence on what becomes of the
        task if the host closes this server, for the deferred answer; *creating*: the lock of
        a call's join key is held while it finds or creates its task, shared by every
        connection, so that two identical calls at once make one task (and unrelated
        calls never wait for each other)."""
        self._manager = manager
        self._max_unfinished = max_unfinished
        self._owner = owner
        self._recheck_s = recheck_s
        self._wait_s = math.inf if wait_s is None else wait_s
        self._keepalive_s = keepalive_s
        self._fallback_tools = fallback_tools
        self._result_wait_s = result_wait_s
        self._after_host = after_host
        self._creating = creating if creating is not None else JoinLocks()

    async def run(
        self,
        ctx: Context,
        workflow: Workflow[Any],
        arguments: dict[str, Any] | None,
        answers: Mapping[str, JsonValue] | None = None,
        *,
        idempotency_key: str | None = None,
        until_end: bool = False,
    ) -> dict[str, Any]:
        """Run *workflow* as a task (with *answers* to its questions, if any were asked
        before it exists), or join the unfinished task of the same call (or of
        *idempotency_key*); its ``CallToolResult``, or the deferred answer. With
        *until_end*, wait for the task's end however long it takes (a client that knows
        tasks and holds the tool's output schema, which a deferred answer cannot meet).

        Raises:
            MCPError: the task ended without a result (cancelled, or a server fault).
        """
        try:
            task, joined = await self._task_for(workflow, arguments, answers, idempotency_key)
        except (InvalidRequestError, IdempotencyConflictError) as error:
            audit.note(refused=INVALID_PARAMS)
            return invalid_arguments_result(str(error))
        except QuotaExceededError as error:
            audit.note(refused=QUOTA_EXCEEDED)
            return invalid_arguments_result(f"Quota exceeded: {error}")
        audit.note(task_id=task.id)  # recorded even if the caller leaves before the answer
        if joined:
            logger.info("a plain call of %s joined task %s", workflow.name, task.id)
        speaking = generation(ctx)
        asker = (
            None if speaking is Generation.MODERN else InputAsker(self._manager, ctx, self._owner)
        )
        progress = ProgressPush(ctx.session, progress_token(ctx), related_request_id=ctx.request_id)
        waited = _Waited(task)
        started = anyio.current_time()
        try:
            with anyio.move_on_after(math.inf if until_end else self._wait_s):
                async with anyio.create_task_group() as group:
                    if progress.token is not None and self._keepalive_s is not None:
                        group.start_soon(self._keep_alive, progress, waited, self._keepalive_s)
                    await self._follow(progress, asker, waited, until_end=until_end)
                    group.cancel_scope.cancel()
        except anyio.get_cancelled_exc_class():
            logger.info("the caller left the plain call of task %s; the task goes on", task.id)
            raise
        status = modern_status if speaking is Generation.MODERN else _legacy_status
        latest = waited.latest
        if latest.is_terminal:
            return _named(call_tool_result(latest), latest, status(latest), joined=joined)
        waited_s = anyio.current_time() - started
        deferred = self._deferred(waited, waited_s, joined=joined, joins=workflow.join_repeats)
        return _named(deferred, latest, status(latest), deferred=True, joined=joined)

    async def _task_for(
        self,
        workflow: Workflow[Any],
        arguments: dict[str, Any] | None,
        answers: Mapping[str, JsonValue] | None,
        key: str | None,
    ) -> tuple[Task, bool]:
        """The call's task, and whether it was there already: the task holding *key*, or
        (without a key) the unfinished task of the same call, or a new one."""
        async with self._creating.hold(self._join_key(workflow, arguments, key)):
            if key is None and workflow.join_repeats:
                twin = await unfinished_twin(self._manager, workflow, arguments, owner=self._owner)
                if twin is not None:
                    return twin, True
            held = None if key is None else await key_holder(self._manager, key, owner=self._owner)
            task = await submit(  # with a held key: the task holding it, or a conflict
                self._manager,
                workflow,
                arguments,
                owner=self._owner,
                answers=answers,
                max_unfinished=self._max_unfinished,
                idempotency_key=key,
            )
        return task, held is not None

    def _join_key(
        self, workflow: Workflow[Any], arguments: dict[str, Any] | None, key: str | None
    ) -> Hashable:
        """What two calls that must make one task share: the owner and the idempotency
        key, or the owner, the workflow and its validated arguments (defaults filled in).

        Raises:
            InvalidRequestError: the arguments do not match the input model.
        """
        if key is not None:
            return ("key", self._owner, key)
        wanted = validated_arguments(workflow, arguments)
        canonical = json.dumps(wanted, sort_keys=True, separators=(",", ":"))
        return ("call", self._owner, workflow.name, workflow.version, canonical)

    async def _follow(
        self,
        progress: ProgressPush,
        asker: InputAsker | None,
        waited: _Waited,
        *,
        until_end: bool = False,
    ) -> None:
        """Until the task ends, or (unless *until_end*) waits on a question no one can
        answer on this call."""
        watch = self._manager.watch(
            waited.latest.id, owner=self._owner, recheck_every=self._recheck_s
        )
        async with aclosing(watch) as snapshots:
            async for latest in snapshots:  # the last one is terminal
                waited.latest = latest
                await progress.update(latest)
                if latest.state is TaskState.INPUT_REQUIRED and latest.input_requests:
                    if asker is None:
                        key, question = next(iter(latest.input_requests.items()))
                        waited.unanswered = Unanswered(key, question)
                    else:
                        waited.unanswered = await asker.ask_pending(latest)
                    if waited.unanswered is not None and not until_end:
                        return

    async def _keep_alive(self, progress: ProgressPush, waited: _Waited, every_s: float) -> None:
        """Send a keepalive whenever *every_s* passed without a progress notification."""
        quiet_since = anyio.current_time()
        while True:
            await anyio.sleep_until((progress.sent_at or quiet_since) + every_s)
            if anyio.current_time() >= (progress.sent_at or quiet_since) + every_s:
                await progress.keepalive(waited.latest)

    def _deferred(
        self, waited: _Waited, waited_s: float, *, joined: bool, joins: bool
    ) -> dict[str, Any]:
        """The answer of a call whose task goes on: what it is doing and what to do. A
        normal result (``isError: false``): the work has not failed."""
        task, unanswered = waited.latest, waited.unanswered
        head = f"Not finished yet, and not a failure: task {task.id} goes on after this answer"
        lines = [f"{head} (waited {waited_s:.0f} s)."]
        if joined:
            lines.append(JOINED_LINE)
        lines.extend(status_lines(task))
        if unanswered is not None and unanswered.problems:
            lines.append(f"the last answer did not fit: {'; '.join(unanswered.problems)}")
        if self._after_host is not None:
            lines.append(self._after_host)
        lines.append(self._next_steps(task, joins=joins))
        return {"content": [text_content("\n".join(lines))], "isError": False}

    def _next_steps(self, task: Task, *, joins: bool) -> str:
        quoted = f'task_id "{task.id}"'
        wait = f"task_result with {quoted} and wait_s {self._result_wait_s:g}"
        if not self._fallback_tools:
            return f"Next: poll tasks/get with taskId {task.id} until it ends."
        if task.state is TaskState.INPUT_REQUIRED:
            return (
                f"Next: get the answer (ask the user if needed), call task_answer with "
                f"{quoted} and answer (an object matching the answer schema), then {wait}."
            )
        steps = (
            f"Next: call {wait} (again while it is not finished); task_status shows its "
            "progress, task_cancel stops it."
        )
        if joins:
            steps += " Calling the tool again for the same job joins this task."
        return steps


def _legacy_status(task: Task) -> str:
    return wire_status(task.state)


def _named(
    result: dict[str, Any], task: Task, status: str, *, deferred: bool = False, joined: bool
) -> dict[str, Any]:
    """*result* naming *task*: a last text line, and ``_meta`` (``joined`` only when this
    call joined a task an earlier call started)."""
    content = [*result["content"]]
    if not deferred:
        also = f"; {JOINED_LINE[0].lower()}{JOINED_LINE[1:].rstrip('.')}" if joined else ""
        content.append(text_content(f"(task {task.id}: {status}{also})"))
    named: dict[str, Any] = {"taskId": task.id, "status": status, "deferred": deferred}
    if joined:
        named["joined"] = True
    meta = {
        **(result.get("_meta") or {}),
        **related_task_meta(task.id),
        TASK_META_KEY: named,
    }
    return {**result, "content": content, "_meta": meta}


def complete(result: dict[str, Any]) -> dict[str, Any]:
    """A ``CallToolResult`` dict as the SDK's sieve expects it on every version: 2026-07-28
    requires ``resultType`` (which models default but dicts lack); older versions' sieve
    drops it."""
    return {**result, "resultType": "complete"}


def idempotency_key(ctx: Context) -> str | None:
    """The request's ``_meta["taskloom/idempotencyKey"]``, if it sent one.

    Raises:
        MCPError: ``-32602`` when it is not a string of 1 to 200 characters.
    """
    meta = (ctx.params or {}).get("_meta")
    key = meta.get(IDEMPOTENCY_META_KEY) if isinstance(meta, Mapping) else None
    if key is None:
        return None
    if not isinstance(key, str) or not 1 <= len(key) <= MAX_KEY_LENGTH:
        raise MCPError(
            INVALID_PARAMS,
            f"_meta[{IDEMPOTENCY_META_KEY!r}] must be a string of 1 to {MAX_KEY_LENGTH} characters",
        )
    return key


def progress_token(ctx: Context) -> types.ProgressToken | None:
    """The request's ``_meta.progressToken``, if it sent one."""
    return ctx.meta.get("progress_token") if ctx.meta is not None else None
