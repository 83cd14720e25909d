"""Streamable HTTP for the TaskServer: bearer tokens, per-principal tasks and limits.

``HttpService`` is imported on first use, so that reading ``HttpSettings`` (the command
line does) does not load the MCP SDK.
"""

from typing import TYPE_CHECKING, Any

from taskloom.server.http.oauth_settings import OAuthSettings
from taskloom.server.http.settings import HttpSettings
from taskloom.server.http.tokens import parse_tokens

if TYPE_CHECKING:
    from taskloom.server.http.service import HttpService

__all__ = ("HttpService", "HttpSettings", "OAuthSettings", "parse_tokens")


def __getattr__(name: str) -> Any:
    if name == "HttpService":
        from taskloom.server.http.service import HttpService  # lazy: see above

        return HttpService
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
