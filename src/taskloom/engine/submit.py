"""Starting a workflow run: validate its input, then create its task durably."""

from collections.abc import Iterable, Mapping
from typing import Any, Literal

from pydantic import ValidationError

from taskloom.engine.dag import Workflow
from taskloom.engine.errors import InvalidRequestError, QuotaExceededError
from taskloom.engine.manager import DEFAULT, Sentinel, TaskManager
from taskloom.engine.models import Task
from taskloom.engine.states import ACTIVE_STATES


async def submit(
    manager: TaskManager,
    workflow: Workflow[Any],
    arguments: Mapping[str, Any] | None = None,
    *,
    owner: str | None = None,
    ttl_ms: int | Literal[Sentinel.DEFAULT] | None = DEFAULT,
    idempotency_key: str | None = None,
    answers: Mapping[str, Any] | None = None,
    max_unfinished: int | None = None,
) -> Task:
    """Create a queued task that runs *workflow* with *arguments*; a worker picks it up.

    The arguments are validated against the workflow's input model (and its operator
    settings, see ``Workflow.parse_input``) first and stored with its defaults filled in.
    *answers* answer some or all of the workflow's questions (``Workflow.asks``) by key;
    the task asks the others before its first node runs. With *max_unfinished*, a named
    *owner* that already has that many unfinished tasks (queued, running or waiting for
    input) gets none more; the local user (``owner=None``) is never limited.

    Raises:
        QuotaExceededError: *owner* has *max_unfinished* unfinished tasks (nothing stored).
        InvalidRequestError: the arguments do not match the input model or are refused by
            the workflow's settings, or an answer is not one to a question of the
            workflow or does not fit it (the message says which field and why).
    """
    try:
        validated = workflow.parse_arguments(arguments or {})
    except ValidationError as error:
        accepted = workflow.input_schema().get("properties", {})
        raise InvalidRequestError(arguments_problem(workflow.name, error, accepted)) from error
    try:
        stored_answers = workflow.parse_answers(answers or {})
    except ValueError as error:
        raise InvalidRequestError(f"invalid answers for {workflow.name}: {error}") from None
    await check_quota(manager, owner, max_unfinished)
    return await manager.create(
        workflow.name,
        validated.model_dump(mode="json"),
        owner=owner,
        ttl_ms=ttl_ms,
        idempotency_key=idempotency_key,
        workflow_version=workflow.version,
        input_responses=stored_answers,
        shape=workflow.shape(),
    )


async def check_quota(manager: TaskManager, owner: str | None, max_unfinished: int | None) -> None:
    """Refuse one more task to *owner* when it already has *max_unfinished* unfinished
    tasks (queued, running or waiting for input); the local user (``None``) and a
    ``None`` limit are never limited. Every way of starting a task calls this.

    Raises:
        QuotaExceededError: *owner* is at its limit.
    """
    if owner is None or max_unfinished is None:
        return
    unfinished = await manager.count(owner=owner, states=ACTIVE_STATES)
    if unfinished >= max_unfinished:
        raise QuotaExceededError(owner=owner, limit=max_unfinished)


def arguments_problem(tool: str, error: ValidationError, accepted: Iterable[str]) -> str:
    """One line for the first problem with a call's arguments to *tool*; an unknown key
    is named with the keys *accepted*."""
    problem = error.errors()[0]
    where = ".".join(str(part) for part in problem["loc"]) or "arguments"
    if problem["type"] == "extra_forbidden":
        known = ", ".join(accepted) or "none"
        return f"invalid arguments for {tool}: unknown argument {where!r} (it takes: {known})"
    return f"invalid arguments for {tool}: {where}: {problem['msg']}"
