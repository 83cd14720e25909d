"""The dashboard's ASGI application: its routes under ``/ui`` (ADR 0030)."""

from collections.abc import Awaitable, Callable
from functools import partial
from typing import Final

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from taskloom.engine.errors import TaskNotFoundError
from taskloom.server.audit import write as audit
from taskloom.server.dashboard import actions
from taskloom.server.dashboard.access import COOKIE, Viewer
from taskloom.server.dashboard.context import PREFIX, Dashboard, page
from taskloom.server.dashboard.detail import detail
from taskloom.server.dashboard.listing import SINCE, BadFilter, Filters, exact_match, listing
from taskloom.server.dashboard.live import event_stream
from taskloom.server.http.authentication import Refusal

FRAGMENT: Final = "fragment"
Handler = Callable[[Dashboard, Viewer, Request], Awaitable[Response]]


def dashboard_app(dashboard: Dashboard) -> Starlette:
    """The ASGI app serving *dashboard* under ``/ui``."""

    def viewed(handler: Handler) -> Callable[[Request], Awaitable[Response]]:
        return partial(_as_viewer, dashboard, handler)

    routes = [
        Route(PREFIX, _to_list),
        Route(f"{PREFIX}/", viewed(_list_page)),
        Route(f"{PREFIX}/events", viewed(_list_events)),
        Route(f"{PREFIX}/tasks/{{task_id}}", viewed(_task_page)),
        Route(f"{PREFIX}/tasks/{{task_id}}/events", viewed(_task_events)),
        Route(f"{PREFIX}/tasks/{{task_id}}/cancel", viewed(actions.cancel), methods=["POST"]),
        Route(f"{PREFIX}/tasks/{{task_id}}/resume", viewed(actions.resume), methods=["POST"]),
        Route(f"{PREFIX}/tasks/{{task_id}}/answer", viewed(actions.answer), methods=["POST"]),
        Route(f"{PREFIX}/login", partial(actions.login, dashboard), methods=["GET", "POST"]),
        Route(f"{PREFIX}/logout", actions.logout, methods=["POST"]),
        Mount(
            f"{PREFIX}/static",
            StaticFiles(packages=[("taskloom.server.dashboard", "static")]),
            name="static",
        ),
    ]
    return Starlette(routes=routes)


async def _to_list(request: Request) -> Response:
    return RedirectResponse(f"{PREFIX}/", status_code=308)


async def _as_viewer(dashboard: Dashboard, handler: Handler, request: Request) -> Response:
    found = await dashboard.access.viewer(request)
    if found is None:
        if request.method == "GET" and not request.url.path.endswith("/events"):
            return RedirectResponse(f"{PREFIX}/login", status_code=303)
        return page("message.html", None, 401, title="Sign in", message="Sign in first.")
    if isinstance(found, Refusal):
        response = page("login.html", None, found.status, error=found.message)
        if found.status == 401:
            response.delete_cookie(COOKIE, path=PREFIX)
        return response
    return await handler(dashboard, found, request)


async def _list_page(dashboard: Dashboard, viewer: Viewer, request: Request) -> Response:
    try:
        filters = Filters.parse(request.query_params)
        found = await exact_match(dashboard, viewer, filters)
        if found is not None and FRAGMENT not in request.query_params:
            return RedirectResponse(f"{PREFIX}/tasks/{found.id}", status_code=303)
        shown = await listing(dashboard, viewer, filters)
    except BadFilter as error:
        return page("message.html", viewer, 400, title="Bad filter", message=str(error))
    template = "_list.html" if FRAGMENT in request.query_params else "list.html"
    return page(template, viewer, filters=filters, listing=shown, since=_since_choices())


async def _list_events(dashboard: Dashboard, viewer: Viewer, request: Request) -> Response:
    try:
        filters = Filters.parse(request.query_params)
        await listing(dashboard, viewer, filters)
    except BadFilter as error:
        return page("message.html", viewer, 400, title="Bad filter", message=str(error))

    async def read() -> tuple[tuple[object, ...], bool]:
        return (await listing(dashboard, viewer, filters)).fingerprint(), False

    return event_stream(dashboard.hub, None, read, dashboard.recheck_s)


async def _task_page(dashboard: Dashboard, viewer: Viewer, request: Request) -> Response:
    task_id = request.path_params["task_id"]
    try:
        shown = await detail(dashboard, viewer, task_id)
    except TaskNotFoundError:
        return not_found(viewer, task_id)
    template = "_task.html" if FRAGMENT in request.query_params else "task.html"
    notice = request.query_params.get("notice", "")[:200]
    return page(template, viewer, detail=shown, notice=notice, problems=())


async def _task_events(dashboard: Dashboard, viewer: Viewer, request: Request) -> Response:
    task_id = request.path_params["task_id"]
    try:
        await dashboard.manager.get(task_id, owner=viewer.owner)
    except TaskNotFoundError:
        return not_found(viewer, task_id)

    async def read() -> tuple[tuple[object, ...], bool]:
        try:
            shown = await detail(dashboard, viewer, task_id)
        except TaskNotFoundError:
            return (), True
        return shown.fingerprint(), shown.task.is_terminal

    return event_stream(dashboard.hub, task_id, read, dashboard.recheck_s)


def not_found(viewer: Viewer, task_id: str) -> Response:
    """The page for a task the viewer does not see (recorded as a refused read)."""
    audit(viewer.name, "read", "refused", task_id=task_id[:200], method="ui", via="dashboard")
    return page("message.html", viewer, 404, title="Not found", message="No such task.")


def _since_choices() -> list[tuple[str, str]]:
    return [(key, label) for key, (label, _) in SINCE.items()]
