"""OAuth 2.0 Protected Resource Metadata (RFC 9728), served by the SDK's own handler.

Served at ``/.well-known/oauth-protected-resource`` followed by the path of the
endpoint's public URL (RFC 9728 §3.1, where MCP hosts look first) and, for hosts that
look only there, at ``/.well-known/oauth-protected-resource`` itself.
"""

from typing import Final
from urllib.parse import urlsplit

from mcp.server.auth.handlers.metadata import ProtectedResourceMetadataHandler
from mcp.server.auth.routes import build_resource_metadata_url, cors_middleware
from mcp.shared.auth import ProtectedResourceMetadata
from pydantic import AnyHttpUrl
from starlette.routing import Route, Router

from taskloom.server.http.oauth_settings import OAuthSettings

WELL_KNOWN: Final = "/.well-known/oauth-protected-resource"


def metadata_url(settings: OAuthSettings) -> str:
    """The public URL of the metadata document (for ``WWW-Authenticate``)."""
    return str(build_resource_metadata_url(AnyHttpUrl(settings.audience)))


def metadata_app(settings: OAuthSettings) -> Router:
    """The ASGI app serving the metadata document (404 for other paths). URLs are kept
    as configured (the model preserves an empty path: issuers compare as strings)."""
    metadata = ProtectedResourceMetadata.model_validate(
        {
            "resource": settings.audience,
            "authorization_servers": [settings.issuer],
            "scopes_supported": list(settings.scopes) or None,
            "resource_name": "taskloom",
        }
    )
    handler = ProtectedResourceMetadataHandler(metadata)
    endpoint = cors_middleware(handler.handle, ["GET", "OPTIONS"])
    paths = dict.fromkeys((urlsplit(metadata_url(settings)).path, WELL_KNOWN))
    return Router(
        routes=[Route(path, endpoint=endpoint, methods=["GET", "OPTIONS"]) for path in paths]
    )
