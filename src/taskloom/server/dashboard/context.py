"""What the dashboard's pages read and act on, and how they render."""

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import jinja2
from starlette.responses import HTMLResponse

from taskloom.engine.dag import Workflow
from taskloom.engine.history import MAX_STATUS_ROWS
from taskloom.engine.manager import TaskManager
from taskloom.engine.runs import RunStore
from taskloom.server.dashboard.access import CSRF_FIELD, Access, Viewer
from taskloom.server.dashboard.hub import ChangeHub
from taskloom.server.dashboard.streams import StreamSlots
from taskloom.server.dashboard.throttle import UNLIMITED, Throttle
from taskloom.server.http.limits import RateLimiter

PREFIX = "/ui"


@dataclass(frozen=True)
class Dashboard:
    """The engine a dashboard shows, who may look, and where changes come from."""

    manager: TaskManager
    runs: RunStore
    workflows: Mapping[str, Workflow[Any]]
    access: Access
    hub: ChangeHub
    recheck_s: float | None = None
    """Also re-read what a live page shows at this period (changes made by processes
    whose events do not reach this one); ``None``: only on events."""
    throttle: Throttle = UNLIMITED
    """How fast each caller is served (per principal, per address, failed sign-ins)."""
    max_unfinished: int | None = None
    """The most unfinished tasks a principal may have (a resume is refused beyond it):
    the server's ``max_unfinished_per_principal``."""
    streams: StreamSlots = field(default_factory=StreamSlots)
    """How many live streams each principal may hold open."""


_templates = jinja2.Environment(
    loader=jinja2.PackageLoader("taskloom.server.dashboard", "templates"),
    autoescape=True,
    undefined=jinja2.StrictUndefined,
    trim_blocks=True,
    lstrip_blocks=True,
)


def _when(moment: datetime | None) -> str:
    return moment.strftime("%Y-%m-%d %H:%M:%S") if moment is not None else ""


_templates.filters["when"] = _when
_templates.globals["prefix"] = PREFIX
_templates.globals["csrf_field"] = CSRF_FIELD
_templates.globals["question_field"] = "taskloom_question"  # actions.QUESTION_FIELD
_templates.globals["max_status_rows"] = MAX_STATUS_ROWS


def too_many(viewer: Viewer | None, wait_s: float, why: str) -> HTMLResponse:
    """The 429 page: *why*, and when to try again (also in ``Retry-After``)."""
    retry = RateLimiter.retry_after(wait_s)
    message = f"{why}; try again in {retry} s."
    response = page("message.html", viewer, 429, title="Too many requests", message=message)
    response.headers["Retry-After"] = retry
    return response


def page(name: str, viewer: Viewer | None, status_code: int = 200, **values: Any) -> HTMLResponse:
    """The template *name* rendered for *viewer* (no-store: pages show private data)."""
    html = _templates.get_template(name).render(viewer=viewer, **values)
    headers = {
        "Cache-Control": "no-store",
        "Content-Security-Policy": (
            "default-src 'self'; style-src 'self'; script-src 'self'; img-src 'self' data:; "
            "frame-ancestors 'none'; form-action 'self'"
        ),
        "X-Content-Type-Options": "nosniff",
        "Referrer-Policy": "same-origin",  # no-referrer makes a form POST send Origin: null
    }
    return HTMLResponse(html, status_code=status_code, headers=headers)
