"""Starting a workflow run: validate its input, then create its task durably."""

from collections.abc import Iterable, Mapping
from typing import Any, Final, Literal

from pydantic import BaseModel, ValidationError

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
    input) gets none more; the local user (``owner=None``) is never limited. With an
    *idempotency_key* the owner already holds, the task holding it is returned (the
    same name and arguments) whatever the quota says: a retry creates nothing.

    Raises:
        QuotaExceededError: *owner* has *max_unfinished* unfinished tasks (nothing stored).
        IdempotencyConflictError: the key is held by a task of another workflow or with
            other arguments.
        InvalidRequestError: the arguments do not match the input model or are refused by
            the workflow's settings, or an answer is not one to a question of the
            workflow or does not fit it (the message says which field and why).
    """
    validated = _validated(workflow, arguments)
    try:
        stored_answers = workflow.parse_answers(answers or {})
    except ValueError as error:
        raise InvalidRequestError(f"invalid answers for {workflow.name}: {error}") from None
    held = None
    if idempotency_key is not None:
        held = await key_holder(manager, idempotency_key, owner=owner)
    if held is None:  # a retry with a held key stores nothing, so it costs no quota
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


async def key_holder(manager: TaskManager, key: str, *, owner: str | None) -> Task | None:
    """The live task *owner* holds *key* with, if any."""
    page = await manager.list(owner=owner, idempotency_key=key, limit=1)
    return page.tasks[0] if page.tasks else None


JOIN_SCAN_LIMIT: Final = 1_000
"""The most unfinished tasks of one workflow :func:`unfinished_twin` reads (the default
quota of a named principal)."""


async def unfinished_twin(
    manager: TaskManager,
    workflow: Workflow[Any],
    arguments: Mapping[str, Any] | None,
    *,
    owner: str | None,
) -> Task | None:
    """The newest unfinished task *owner* started of *workflow* with these *arguments*
    (compared once validated, defaults filled in), that is not a child task and runs
    *workflow*'s version (or recorded none): a call never joins a run of another
    version, which another process runs and whose result has that version's shape.
    ``None`` if there is none among its newest ``JOIN_SCAN_LIMIT`` unfinished ones
    (ADR 0040).

    Raises:
        InvalidRequestError: the arguments do not match the input model.
    """
    wanted = _validated(workflow, arguments).model_dump(mode="json")
    size = min(100, manager.settings.max_page_size)
    cursor, read = None, 0
    while read < JOIN_SCAN_LIMIT:
        page = await manager.list(
            owner=owner, states=ACTIVE_STATES, names=[workflow.name], limit=size, cursor=cursor
        )
        for task in page.tasks:
            if (
                task.parent_id is None
                and task.workflow_version in (None, workflow.version)
                and task.arguments == wanted
            ):
                return task
        read += len(page.tasks)
        cursor = page.next_cursor
        if cursor is None:
            break
    return None


def validated_arguments(workflow: Workflow[Any], arguments: Mapping[str, Any] | None) -> Any:
    """*arguments* as a task of *workflow* stores them: validated, defaults filled in.

    Raises:
        InvalidRequestError: they do not match the input model.
    """
    return _validated(workflow, arguments).model_dump(mode="json")


def _validated(workflow: Workflow[Any], arguments: Mapping[str, Any] | None) -> BaseModel:
    """*arguments* parsed by *workflow*'s input model (defaults filled in).

    Raises:
        InvalidRequestError: they do not match it (the message says which field and why).
    """
    try:
        parsed: BaseModel = workflow.parse_arguments(arguments or {})
    except ValidationError as error:
        accepted = workflow.input_schema().get("properties", {})
        raise InvalidRequestError(arguments_problem(workflow.name, error, accepted)) from error
    return parsed


def arguments_problem(tool: str, error: ValidationError, accepted: Iterable[str]) -> str:
    """One line for the first problem with a call's arguments to *tool*; an unknown key
    is named with the keys *accepted*."""
    problem = error.errors()[0]
    where = ".".join(str(part) for part in problem["loc"]) or "arguments"
    if problem["type"] == "extra_forbidden":
        known = ", ".join(accepted) or "none"
        return f"invalid arguments for {tool}: unknown argument {where!r} (it takes: {known})"
    return f"invalid arguments for {tool}: {where}: {problem['msg']}"
