"""Settings of OAuth: the external authorization server whose JWT access tokens we accept.

Reading them needs no JOSE library: the ``oauth`` extra is imported only when the
endpoint is built (``oauth_extra.require_oauth``).
"""

from typing import Final, Self
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from taskloom.server.http.loopback import is_loopback

ASYMMETRIC: Final = frozenset(
    {"RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA"}
)
"""The signature algorithms a token may use: public-key ones only (never ``none``, never
an HMAC, whose key would have to be the public one)."""


class OAuthSettings(BaseModel):
    """An OAuth 2.1 resource server's view of its authorization server (MCP authorization)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    issuer: str
    """The authorization server's issuer URL, exactly as its tokens' ``iss`` says it
    (https, or http on a loopback address)."""
    audience: str
    """This endpoint's public URL (e.g. ``https://mcp.example.com/mcp``): the ``resource``
    of its protected resource metadata, and the ``aud`` every token must carry."""
    jwks_url: str | None = None
    """Where the issuer's signing keys are; ``None``: the ``jwks_uri`` of the issuer's
    metadata (``/.well-known/oauth-authorization-server``, else ``openid-configuration``)."""
    algorithms: tuple[str, ...] = ("RS256", "ES256")
    """Signature algorithms accepted (public-key ones only)."""
    leeway_s: float = Field(default=30, ge=0, le=300)
    """Clock skew allowed on ``exp``, ``nbf`` and ``iat``."""
    scopes: tuple[str, ...] = ()
    """Scopes every token must carry (HTTP 403 without); listed in the metadata."""
    jwks_timeout_s: float = Field(default=5, gt=0, le=60)
    """Longest wait for the issuer's metadata or keys."""
    jwks_cache_s: float = Field(default=3600, gt=0)
    """How long fetched keys are used before they are fetched again."""
    jwks_min_refresh_s: float = Field(default=30, ge=0)
    """A token signed by an unknown key fetches the keys again at most this often."""

    @field_validator("issuer", "jwks_url")
    @classmethod
    def _secure(cls, url: str | None) -> str | None:
        if url is not None and not secure_url(url):
            raise ValueError(f"must be an https URL (http only on a loopback address): {url!r}")
        return url

    @field_validator("audience")
    @classmethod
    def _url(cls, url: str) -> str:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname or parts.fragment:
            raise ValueError(f"must be this endpoint's http(s) URL, e.g. https://host/mcp: {url!r}")
        return url

    @field_validator("scopes")
    @classmethod
    def _scope_tokens(cls, scopes: tuple[str, ...]) -> tuple[str, ...]:
        for scope in scopes:  # RFC 6749 §3.3: printable ASCII but space, " and backslash
            if not scope or any(not "!" <= char <= "~" or char in '"\\' for char in scope):
                raise ValueError(f"not an OAuth scope: {scope!r}")
        return scopes

    @model_validator(mode="after")
    def _algorithms(self) -> Self:
        unsafe = [name for name in self.algorithms if name not in ASYMMETRIC]
        if unsafe or not self.algorithms:
            raise ValueError(
                f"algorithms must be public-key ones ({', '.join(sorted(ASYMMETRIC))}), "
                f"not {', '.join(unsafe) or 'none'}"
            )
        return self


def secure_url(url: str) -> bool:
    """Whether *url* is https, or http on a loopback address."""
    parts = urlsplit(url)
    if not parts.hostname:
        return False
    return parts.scheme == "https" or (parts.scheme == "http" and is_loopback(parts.hostname))
