"""Whether the ``ui`` extra is installed, and what ``/ui`` answers when it is not."""

import importlib.util
from typing import Final

from starlette.responses import PlainTextResponse
from starlette.types import Receive, Scope, Send

MISSING_UI: Final = "the dashboard needs the ui extra: pip install 'taskloom[ui]'"


def ui_available() -> bool:
    """Whether the dashboard's template library (jinja2) can be imported."""
    return importlib.util.find_spec("jinja2") is not None


async def missing_extra_app(scope: Scope, receive: Receive, send: Send) -> None:
    """Answer any ``/ui`` request with one line naming the extra (503)."""
    await PlainTextResponse(MISSING_UI + "\n", status_code=503)(scope, receive, send)
