"""The dashboard's ASGI application: its routes under ``/ui`` (ADR 0030)."""

from collections.abc import Awaitable, Callable
from functools import partial
from typing import Final

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Receive, Scope, Send

from taskloom.engine.errors import StoreUnavailableError, TaskNotFoundError
from taskloom.engine.manager import ANY_OWNER
from taskloom.server.audit import ANONYMOUS
from taskloom.server.audit import write as audit
from taskloom.server.dashboard import actions
from taskloom.server.dashboard.access import COOKIE, Viewer
from taskloom.server.dashboard.context import PREFIX, Dashboard, page, too_many
from taskloom.server.dashboard.detail import detail
from taskloom.server.dashboard.listing import SINCE, BadFilter, Filters, exact_match, listing
from taskloom.server.dashboard.live import Fingerprint, Reading, event_stream
from taskloom.server.dashboard.seen import HEADER, SEEN
from taskloom.server.dashboard.versions import versions_shown
from taskloom.server.errors import retry_after
from taskloom.server.http.authentication import Refusal

FRAGMENT: Final = "fragment"
TOO_MANY_REQUESTS: Final = "Too many requests"
TOO_MANY_FAILURES: Final = "Too many refused tokens from this address"
Handler = Callable[[Dashboard, Viewer, Request], Awaitable[Response]]
Endpoint = Callable[[Request], Awaitable[Response]]


def dashboard_app(dashboard: Dashboard) -> Starlette:
    """The ASGI app serving *dashboard* under ``/ui``."""

    def viewed(handler: Handler) -> Callable[[Request], Awaitable[Response]]:
        return partial(_as_viewer, dashboard, handler)

    def public(handler: Endpoint) -> Endpoint:
        return partial(_per_address, dashboard, handler)

    routes = [
        Route(PREFIX, public(_to_list)),
        Route(f"{PREFIX}/", viewed(_list_page)),
        Route(f"{PREFIX}/events", viewed(_list_events)),
        Route(f"{PREFIX}/tasks/{{task_id}}", viewed(_task_page)),
        Route(f"{PREFIX}/tasks/{{task_id}}/events", viewed(_task_events)),
        Route(f"{PREFIX}/tasks/{{task_id}}/cancel", viewed(actions.cancel), methods=["POST"]),
        Route(f"{PREFIX}/tasks/{{task_id}}/resume", viewed(actions.resume), methods=["POST"]),
        Route(f"{PREFIX}/tasks/{{task_id}}/answer", viewed(actions.answer), methods=["POST"]),
        Route(
            f"{PREFIX}/login", public(partial(actions.login, dashboard)), methods=["GET", "POST"]
        ),
        Route(f"{PREFIX}/logout", public(actions.logout), methods=["POST"]),
        Mount(
            f"{PREFIX}/static",
            _PerAddress(dashboard, StaticFiles(packages=[("taskloom.server.dashboard", "static")])),
            name="static",
        ),
    ]
    return Starlette(routes=routes)


async def _to_list(request: Request) -> Response:
    return RedirectResponse(f"{PREFIX}/", status_code=308)


async def _as_viewer(dashboard: Dashboard, handler: Handler, request: Request) -> Response:
    """*handler*'s answer to *request*'s viewer; during a store outage, a 503 page with
    ``Retry-After``, never a traceback (ADR 0038)."""
    try:
        return await _viewed(dashboard, handler, request)
    except StoreUnavailableError as error:
        response = page(
            "message.html",
            None,
            503,
            title="Database unavailable",
            message="The database does not answer right now; try again shortly.",
        )
        response.headers["Retry-After"] = str(retry_after(error.retry_after_s))
        return response


async def _viewed(dashboard: Dashboard, handler: Handler, request: Request) -> Response:
    throttle = dashboard.throttle
    if dashboard.access.needs_login and (wait_s := throttle.failing(request)) > 0:
        return too_many(None, wait_s, TOO_MANY_FAILURES)
    found = await dashboard.access.viewer(request)
    if found is None:
        if (wait_s := throttle.anonymous(request)) > 0:
            return too_many(None, wait_s, TOO_MANY_REQUESTS)
        if request.method == "GET" and not request.url.path.endswith("/events"):
            return RedirectResponse(f"{PREFIX}/login", status_code=303)
        return page("message.html", None, 401, title="Sign in", message="Sign in first.")
    if isinstance(found, Refusal):
        if found.status == 401:
            throttle.failed(request)
            actions.audit_sign_in(ANONYMOUS, "refused", request, "token not valid")
        response = page("login.html", None, found.status, error=found.message)
        if found.retry_after is not None:
            response.headers["Retry-After"] = found.retry_after
        if found.status == 401:
            response.delete_cookie(COOKIE, path=PREFIX)
        return response
    charged = None if found.owner is None else found.name
    if (wait_s := throttle.principal(charged)) > 0:
        return too_many(found, wait_s, TOO_MANY_REQUESTS)
    return await handler(dashboard, found, request)


async def _per_address(dashboard: Dashboard, handler: Endpoint, request: Request) -> Response:
    """A request naming no principal, charged to its client address."""
    if (wait_s := dashboard.throttle.anonymous(request)) > 0:
        return too_many(None, wait_s, TOO_MANY_REQUESTS)
    return await handler(request)


class _PerAddress:
    """ASGI: the static files, charged to each client's address."""

    def __init__(self, dashboard: Dashboard, app: ASGIApp) -> None:
        self._throttle = dashboard.throttle
        self._app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        wait_s = self._throttle.anonymous(Request(scope))
        if wait_s > 0:
            await too_many(None, wait_s, TOO_MANY_REQUESTS)(scope, receive, send)
            return
        await self._app(scope, receive, send)


async def _list_page(dashboard: Dashboard, viewer: Viewer, request: Request) -> Response:
    try:
        filters = Filters.parse(request.query_params)
        found = await exact_match(dashboard, viewer, filters)
        if found is not None and FRAGMENT not in request.query_params:
            return RedirectResponse(f"{PREFIX}/tasks/{found.id}", status_code=303)
        shown = await listing(dashboard, viewer, filters)
    except BadFilter as error:
        return page("message.html", viewer, 400, title="Bad filter", message=str(error))
    if FRAGMENT in request.query_params:
        response = page(
            "_list.html", viewer, filters=filters, listing=shown, since=_since_choices()
        )
        response.headers[HEADER] = shown.seen()
        return response
    versions = await versions_shown(dashboard, viewer)
    return page(
        "list.html",
        viewer,
        filters=filters,
        listing=shown,
        since=_since_choices(),
        versions=versions,
    )


async def _list_events(dashboard: Dashboard, viewer: Viewer, request: Request) -> Response:
    try:
        filters = Filters.parse(request.query_params)
        await listing(dashboard, viewer, filters)
    except BadFilter as error:
        return page("message.html", viewer, 400, title="Bad filter", message=str(error))

    async def read() -> Reading:
        shown = await listing(dashboard, viewer, filters)
        return Reading(shown.fingerprint(), shown.seen(), False)

    return _live(dashboard, viewer, None, read, request)


async def _task_page(dashboard: Dashboard, viewer: Viewer, request: Request) -> Response:
    task_id = request.path_params["task_id"]
    try:
        shown = await detail(dashboard, viewer, task_id)
    except TaskNotFoundError:
        return not_found(viewer, task_id)
    template = "_task.html" if FRAGMENT in request.query_params else "task.html"
    notice = actions.NOTICES.get(request.query_params.get("notice", ""), "")
    response = page(template, viewer, detail=shown, notice=notice, problems=())
    if FRAGMENT in request.query_params:
        response.headers[HEADER] = shown.seen()
    return response


async def _task_events(dashboard: Dashboard, viewer: Viewer, request: Request) -> Response:
    task_id = request.path_params["task_id"]
    try:
        await dashboard.manager.get(task_id, owner=viewer.owner)
    except TaskNotFoundError:
        return not_found(viewer, task_id)

    async def read() -> Reading:
        try:
            shown = await detail(dashboard, viewer, task_id)
        except TaskNotFoundError:
            return Reading((), "", True)
        return Reading(shown.fingerprint(), shown.seen(), shown.task.is_terminal)

    return _live(dashboard, viewer, task_id, read, request)


def _live(
    dashboard: Dashboard,
    viewer: Viewer,
    task_id: str | None,
    read: Fingerprint,
    request: Request,
) -> Response:
    """The change events of a page (*task_id*'s, or ``None``: the list of the viewer's
    tasks) that shows what *request* names ``seen``, unless the viewer has as many
    streams open as it may."""
    if (slot := dashboard.streams.take(viewer.name)) is None:
        return _too_many_streams(dashboard, viewer)
    return event_stream(
        dashboard.hub,
        task_id,
        read,
        dashboard.recheck_s,
        owner=viewer.owner if task_id is None else ANY_OWNER,
        slot=slot,
        watch=dashboard.access.watch,
        live=viewer.live,
        seen=request.query_params.get(SEEN) or None,
    )


def _too_many_streams(dashboard: Dashboard, viewer: Viewer) -> Response:
    limit = dashboard.streams.limit
    message = f"Too many live pages open (at most {limit} each); close some"
    return page("message.html", viewer, 429, title="Too many live pages", message=message)


def not_found(viewer: Viewer, task_id: str) -> Response:
    """The page for a task the viewer does not see (recorded as a refused read)."""
    audit(viewer.name, "read", "refused", task_id=task_id[:200], method="ui", via="dashboard")
    return page("message.html", viewer, 404, title="Not found", message="No such task.")


def _since_choices() -> list[tuple[str, str]]:
    return [(key, label) for key, (label, _) in SINCE.items()]
