"""The one entry point the composition root calls: the ``/ui`` app for an open engine,
or the one-line answer naming the ``ui`` extra when it is not installed."""

from collections.abc import Mapping
from typing import Any

from starlette.types import ASGIApp

from taskloom.engine.dag import Workflow
from taskloom.engine.manager import TaskManager
from taskloom.engine.runs import RunStore
from taskloom.server.dashboard.extra import missing_extra_app, ui_available
from taskloom.server.dashboard.hub import ChangeHub
from taskloom.server.http.authentication import Authenticator
from taskloom.server.http.limits import RateLimiter
from taskloom.server.http.settings import HttpSettings


def ui_app(
    manager: TaskManager,
    runs: RunStore,
    workflows: Mapping[str, Workflow[Any]],
    hub: ChangeHub,
    *,
    authenticator: Authenticator | None,
    allow_actions: bool = True,
    operator: bool = False,
    recheck_s: float | None = None,
    http: HttpSettings | None = None,
    limiter: RateLimiter | None = None,
    max_unfinished: int | None = None,
    max_streams: int | None = None,
) -> ASGIApp:
    """The dashboard of this engine (see ``Access`` for *authenticator*, *allow_actions*
    and *operator*, ``Dashboard`` for *recheck_s*); start ``hub.follow(manager)`` too.
    With *http*, requests are throttled as they say (``Throttle``), charging
    principals to *limiter*, the MCP endpoint's; without, unlimited (tests).
    *max_unfinished*: the server's ``max_unfinished_per_principal`` (a resume counts);
    *max_streams*: open live streams per principal (default ``MAX_STREAMS_PER_PRINCIPAL``)."""
    if not ui_available():
        return missing_extra_app
    from taskloom.server.dashboard.access import Access  # the ui extra from here on
    from taskloom.server.dashboard.app import dashboard_app
    from taskloom.server.dashboard.context import Dashboard
    from taskloom.server.dashboard.streams import StreamSlots
    from taskloom.server.dashboard.throttle import UNLIMITED, Throttle

    access = Access(authenticator, allow_actions=allow_actions, operator=operator)
    throttle = Throttle.of(http, limiter) if http is not None else UNLIMITED
    streams = StreamSlots() if max_streams is None else StreamSlots(max_streams)
    dashboard = Dashboard(
        manager, runs, workflows, access, hub, recheck_s, throttle, max_unfinished, streams
    )
    return dashboard_app(dashboard)
