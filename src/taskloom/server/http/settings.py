"""Settings of the Streamable HTTP endpoint: where it listens, who may call it, limits."""

from typing import Final, Self

from pydantic import BaseModel, ConfigDict, Field, model_validator

from taskloom.server.http.loopback import is_loopback
from taskloom.server.http.oauth_settings import OAuthSettings

__all__ = ("HttpSettings", "OAuthSettings", "is_loopback")

MIN_TOKEN_LENGTH: Final = 16


class HttpSettings(BaseModel):
    """How ``taskloom serve --http`` listens, authenticates and limits its callers."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    host: str = "127.0.0.1"
    """The address to listen on; one that is not loopback needs tokens."""
    port: int = Field(default=8765, ge=0, le=65535)
    """0: any free port (tests)."""
    path: str = "/mcp"
    """The URL path of the MCP endpoint."""
    tokens: dict[str, str] = Field(default_factory=dict, repr=False)
    """Bearer token -> the principal it identifies (never logged, never in a repr). With
    none (and no ``oauth`` nor ``stored_tokens``), the endpoint serves only on a loopback
    address, as the local user."""
    oauth: OAuthSettings | None = None
    """Accept JWT access tokens of an external authorization server too (principal: their
    ``sub``) and publish this endpoint's OAuth protected resource metadata."""
    stored_tokens: bool = False
    """Also accept the database's tokens (``taskloom tokens create``); the command line
    turns it on. If the database holds an active token when the server starts, every
    caller needs a token; with none (and no ``tokens`` nor ``oauth``), only a loopback
    address serves, as the local user."""
    max_body_bytes: int = Field(default=1024 * 1024, gt=0)
    """Largest request body accepted (HTTP 413 beyond)."""
    rate_per_minute: float | None = Field(default=600, gt=0)
    """Requests per minute per principal, bursting up to as many (HTTP 429 beyond);
    ``None``: unlimited."""
    sign_in_failures_per_minute: float = Field(default=10, gt=0)
    """Failed dashboard sign-ins (a token refused, by the form or on a ``/ui`` request)
    per minute per client address, bursting up to as many: beyond, ``/ui`` answers that
    address HTTP 429 before checking any token."""
    max_sessions: int = Field(default=1_000, gt=0)
    """Open sessions at most (HTTP 503 beyond)."""
    max_sessions_per_principal: int = Field(default=100, gt=0)
    """Open sessions of one named principal at most (HTTP 429 beyond), so that one
    principal cannot take every session; the local user is held by ``max_sessions``
    alone."""
    session_idle_s: float = Field(default=5 * 60, gt=0)
    """A session with no request in flight (an open GET stream counts) for this long is
    closed (its tasks go on). A client polling ``tasks/get`` every few seconds, or
    holding its GET stream open, keeps its session; one that comes back after longer
    opens a new one and finds its tasks (they belong to the principal)."""
    header_timeout_s: float = Field(default=10.0, gt=0)
    """A connection that has not sent a complete request head (request line and
    headers) this long after it opened, or after the first byte of its next request,
    is closed."""

    @model_validator(mode="after")
    def _safe(self) -> Self:
        for token, principal in self.tokens.items():
            if len(token) < MIN_TOKEN_LENGTH:
                raise ValueError(
                    f"the token of {principal!r} is too short (at least {MIN_TOKEN_LENGTH} "
                    "characters)"
                )
            if not principal or not principal.isprintable():
                raise ValueError("every token needs a principal name (printable, not empty)")
        if not self.authenticates and not self.stored_tokens and not is_loopback(self.host):
            raise ValueError(
                f"refusing to serve HTTP on {self.host} without tokens: configure tokens "
                "(TASKLOOM_TOKENS or --tokens-file), OAuth (--oauth-issuer and "
                "--oauth-audience) or bind a loopback address such as 127.0.0.1"
            )
        if not self.path.startswith("/"):
            raise ValueError(f"the HTTP path must start with '/': {self.path!r}")
        return self

    @property
    def authenticates(self) -> bool:
        """Whether callers must present a bearer token (static tokens or OAuth)."""
        return bool(self.tokens) or self.oauth is not None

    @property
    def url(self) -> str:
        """The endpoint's URL (with the configured port)."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}{self.path}"
