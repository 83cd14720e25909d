"""What the dashboard changes: cancel, answer, resume (each written to the audit trail),
and signing in and out."""

from typing import Final
from urllib.parse import quote

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from taskloom.engine.errors import (
    IllegalTransitionError,
    InputNotRequestedError,
    InvalidAnswerError,
    InvalidRequestError,
    QuotaExceededError,
    TaskloomError,
    TaskNotFoundError,
    TaskStateError,
)
from taskloom.engine.fork import fork
from taskloom.engine.registry import workflow_for
from taskloom.engine.submit import check_quota
from taskloom.server.audit import ANONYMOUS, Action, Outcome
from taskloom.server.audit import write as audit
from taskloom.server.dashboard.access import COOKIE, CSRF_FIELD, Viewer
from taskloom.server.dashboard.context import PREFIX, Dashboard, page, too_many
from taskloom.server.dashboard.detail import detail
from taskloom.server.dashboard.forms import answer as form_answer
from taskloom.server.dashboard.origin import cross_site
from taskloom.server.dashboard.throttle import address
from taskloom.server.http.authentication import Refusal

MAX_FORM_FIELDS: Final = 200
TOKEN_FIELD: Final = "token"
QUESTION_FIELD: Final = "taskloom_question"
NOTICES: Final = {
    "cancelled": "Cancelled.",
    "already-ended": "The task had already ended.",
    "answered": "Answer stored.",
    "not-pending": "That question is no longer pending.",
    "resumed": "Resumed: the completed nodes are kept, the others run again.",
}
"""What a task page says after an action, by the code in its ``?notice=`` (a URL
carries a code, never the text: a link cannot make the page say something else)."""
CROSS_SITE: Final = "Refused: this form was sent from another site."


async def _checked_form(
    dashboard: Dashboard, viewer: Viewer, request: Request, action: Action
) -> dict[str, str] | Response:
    """The POSTed form, or the refusal: no CSRF token, read-only viewer."""
    task_id = request.path_params["task_id"][:200]
    if cross_site(request):
        _audit(viewer, action, "refused", task_id, "cross-site")
        return page("message.html", viewer, 403, title="Refused", message=CROSS_SITE)
    async with request.form(max_files=0, max_fields=MAX_FORM_FIELDS) as form:
        values = {key: value for key, value in form.items() if isinstance(value, str)}
    if not dashboard.access.csrf_ok(viewer, values.get(CSRF_FIELD)):
        _audit(viewer, action, "refused", task_id, "csrf")
        return page("message.html", viewer, 403, title="Refused", message="Reload the page.")
    if not viewer.may_act:
        _audit(viewer, action, "refused", task_id, "read-only")
        message = "This dashboard is read-only for you."
        return page("message.html", viewer, 403, title="Refused", message=message)
    return values


async def cancel(dashboard: Dashboard, viewer: Viewer, request: Request) -> Response:
    """Cancel the task, then show it."""
    task_id = request.path_params["task_id"]
    form = await _checked_form(dashboard, viewer, request, "cancel")
    if isinstance(form, Response):
        return form
    try:
        await dashboard.manager.cancel(
            task_id, reason="cancelled from the dashboard", owner=viewer.owner
        )
    except TaskNotFoundError:
        _audit(viewer, "cancel", "refused", task_id, "not found")
        return _not_found(viewer)
    except IllegalTransitionError:
        _audit(viewer, "cancel", "refused", task_id, "already ended")
        return _back(task_id, "already-ended")
    _audit(viewer, "cancel", "ok", task_id)
    return _back(task_id, "cancelled")


async def answer(dashboard: Dashboard, viewer: Viewer, request: Request) -> Response:
    """Answer the question *key*: checked against its schema by the engine, as every
    answer is; a bad answer shows the problems and the question stays pending."""
    task_id = request.path_params["task_id"]
    form = await _checked_form(dashboard, viewer, request, "answer")
    if isinstance(form, Response):
        return form
    key = form.get(QUESTION_FIELD, "")
    manager = dashboard.manager
    try:
        task = await manager.get(task_id, owner=viewer.owner)
        request_ = task.input_requests.get(key)
        if request_ is None:
            raise InputNotRequestedError(task_id=task.id, key=key)
        value = form_answer(request_.requested_schema, form)
        await manager.provide_input(task_id, key, value, owner=viewer.owner)
    except TaskNotFoundError:
        _audit(viewer, "answer", "refused", task_id, "not found")
        return _not_found(viewer)
    except InvalidAnswerError as error:
        _audit(viewer, "answer", "refused", task_id, "invalid answer")
        shown = await detail(dashboard, viewer, task_id)
        return page(
            "task.html", viewer, 422, detail=shown, notice="", problems=tuple(error.problems)
        )
    except (InputNotRequestedError, TaskStateError):
        _audit(viewer, "answer", "refused", task_id, "not asked")
        return _back(task_id, "not-pending")
    _audit(viewer, "answer", "ok", task_id)
    return _back(task_id, "answered")


async def resume(dashboard: Dashboard, viewer: Viewer, request: Request) -> Response:
    """Resume a failed (or cancelled) run from its failed nodes: a new task keeping the
    completed nodes (ADR 0012's fork); show the new task. As starting a task over MCP:
    only for a workflow the token's scopes see, within the unfinished-task quota."""
    task_id = request.path_params["task_id"]
    form = await _checked_form(dashboard, viewer, request, "create")
    if isinstance(form, Response):
        return form
    try:
        task = await dashboard.manager.get(task_id, owner=viewer.owner)
        if not viewer.scopes.sees(task.name):  # not served to it, as over MCP
            raise TaskNotFoundError(task_id)
        workflow = workflow_for(dashboard.workflows, task.name, task.workflow_version)
        if workflow is None:
            raise InvalidRequestError(
                f"this server does not run the workflow {task.name} version {task.workflow_version}"
            )
        if isinstance(viewer.owner, str):
            await check_quota(dashboard.manager, viewer.owner, dashboard.max_unfinished)
        forked = await fork(
            dashboard.manager, dashboard.runs, workflow, task_id, owner=viewer.owner
        )
    except TaskNotFoundError:
        _audit(viewer, "create", "refused", task_id, "not found")
        return _not_found(viewer)
    except QuotaExceededError as error:
        _audit(viewer, "create", "refused", task_id, "quota")
        return page("message.html", viewer, 429, title="Too many tasks", message=str(error))
    except (TaskStateError, InvalidRequestError) as error:
        _audit(viewer, "create", "refused", task_id, "not resumable")
        shown = await detail(dashboard, viewer, task_id)
        return page("task.html", viewer, 409, detail=shown, notice=str(error), problems=())
    except TaskloomError:
        _audit(viewer, "create", "error", task_id, "resume failed")
        raise
    audit(
        viewer.name,
        "create",
        "ok",
        task_id=forked.task.id,
        method="ui/resume",
        via="dashboard",
        source=forked.source.id,
    )
    return _back(forked.task.id, "resumed")


async def login(dashboard: Dashboard, request: Request) -> Response:
    """The sign-in form; a valid token is stored in an HttpOnly, SameSite=Strict cookie."""
    access = dashboard.access
    if not access.needs_login:
        return RedirectResponse(f"{PREFIX}/", status_code=303)
    if request.method == "GET":
        return page("login.html", None, error="")
    if cross_site(request):  # a forged sign-in would sign the victim in as the forger
        audit_sign_in(ANONYMOUS, "refused", request, "cross-site")
        return page("message.html", None, 403, title="Refused", message=CROSS_SITE)
    throttle = dashboard.throttle
    if (wait_s := throttle.failing(request)) > 0:
        audit_sign_in(ANONYMOUS, "refused", request, "too many failures")
        return too_many(None, wait_s, "Too many refused sign-ins from this address")
    async with request.form(max_files=0, max_fields=4) as form:
        token = form.get(TOKEN_FIELD)
    token = token.strip() if isinstance(token, str) else ""
    found = await access.grant(f"Bearer {token}") if token else Refusal(401, "", "")
    if isinstance(found, Refusal):
        if found.status != 503:
            throttle.failed(request)
        audit_sign_in(ANONYMOUS, "refused", request, "token not valid")
        message = found.message if found.status == 503 else "That token is not valid."
        return page("login.html", None, 401 if found.status != 503 else 503, error=message)
    if (wait_s := throttle.principal(found.principal)) > 0:
        audit_sign_in(found.principal, "refused", request, "rate limit")
        return too_many(None, wait_s, "Too many requests")
    audit_sign_in(found.principal, "ok", request)
    response = RedirectResponse(f"{PREFIX}/", status_code=303)
    response.set_cookie(
        COOKIE,
        token,
        path=PREFIX,
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
    )
    return response


async def logout(request: Request) -> Response:
    """Forget the cookie (a cross-site POST cannot: it carries no cookie, SameSite)."""
    if cross_site(request):
        return page("message.html", None, 403, title="Refused", message=CROSS_SITE)
    response = RedirectResponse(f"{PREFIX}/login", status_code=303)
    response.delete_cookie(COOKIE, path=PREFIX, httponly=True, samesite="strict")
    return response


def audit_sign_in(who: str, outcome: Outcome, request: Request, reason: str = "") -> None:
    """Record a sign-in (the form's, or a token a ``/ui`` request presents, refused)."""
    audit(
        who,
        "sign_in",
        outcome,
        client=address(request),
        method="ui",
        via="dashboard",
        reason=reason or None,
    )


def _back(task_id: str, notice: str) -> Response:
    """Show *task_id* saying the notice *notice* (a key of ``NOTICES``)."""
    return RedirectResponse(
        f"{PREFIX}/tasks/{quote(task_id, safe='')}?notice={quote(notice)}", status_code=303
    )


def _not_found(viewer: Viewer) -> Response:
    return page("message.html", viewer, 404, title="Not found", message="No such task.")


def _audit(
    viewer: Viewer, action: Action, outcome: Outcome, task_id: str, reason: str = ""
) -> None:
    audit(
        viewer.name,
        action,
        outcome,
        task_id=task_id[:200],
        method="ui",
        via="dashboard",
        reason=reason or None,
    )
