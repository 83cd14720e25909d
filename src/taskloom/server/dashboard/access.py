"""Who looks at the dashboard: the same principals as the MCP endpoint (ADR 0030).

A request is authenticated by its ``Authorization: Bearer`` header, or by the token the
login form stored in the ``taskloom_token`` cookie (``HttpOnly``, ``SameSite=Strict``,
``Path=/ui``); the token is checked by the endpoint's :class:`Authenticator` on every
request, so a revoked or expired token stops working at once; a live page's stream
opened with it ends within a second of the revocation (ADR 0037). Without any token
configured, every caller is the local user, as over MCP (or, for ``taskloom ui`` on a
database alone, the operator, who sees every task).

Forms that change something carry a synchronizer token: an HMAC, under a key made when
the process starts, of the credential the request presents; a POST without the right
one is refused. A request with an ``Authorization`` header needs none (a browser never
adds that header to a forged cross-site request).
"""

import hashlib
import hmac
import secrets
from dataclasses import dataclass
from typing import Final

from starlette.requests import Request

from taskloom.engine.manager import ANY_OWNER, OwnerScope
from taskloom.engine.scopes import EVERYTHING, Grant, Scopes
from taskloom.server.audit import LOCAL_PRINCIPAL
from taskloom.server.http.authentication import Authenticator, Refusal
from taskloom.server.http.grant_watch import GrantWatch, LiveGrant

COOKIE: Final = "taskloom_token"
CSRF_FIELD: Final = "taskloom_csrf"
OPERATOR: Final = "operator"


@dataclass(frozen=True)
class Viewer:
    """The principal behind a request: whose tasks it sees, and what it may do."""

    owner: OwnerScope
    """Passed to the manager: a principal, ``None`` (the local user) or every owner."""
    name: str
    """How pages and the audit trail name it."""
    csrf: str
    """The synchronizer token its forms carry."""
    may_act: bool
    """Whether it may cancel, answer and resume (not read-only)."""
    by_header: bool
    """It authenticated with an ``Authorization`` header (no CSRF token needed)."""
    signed_in: bool
    """It logged in with the form (it can log out)."""
    scopes: Scopes = EVERYTHING
    """Its token's scopes: a task of a workflow they do not see cannot be resumed."""
    live: LiveGrant | None = None
    """Its grant and what can end it (``None``: no token, the local user)."""


class Access:
    """Tells the viewer of a request, or why there is none."""

    def __init__(
        self, authenticator: Authenticator | None, *, allow_actions: bool, operator: bool
    ) -> None:
        """*authenticator* ``None`` or empty: no tokens, the caller is the local user
        (every owner's when *operator*); *allow_actions* ``False``: read-only for all."""
        self._auth = authenticator if authenticator else None
        self._allow_actions = allow_actions
        self._operator = operator
        self._key = secrets.token_bytes(32)
        self.watch = authenticator.watch if authenticator is not None else GrantWatch()
        """Ends a live page's stream once its token ends (the authenticator's)."""

    @property
    def needs_login(self) -> bool:
        """Whether callers must present a token."""
        return self._auth is not None

    async def viewer(self, request: Request) -> Viewer | Refusal | None:
        """The request's viewer; a refusal (a bad or unverifiable token); or ``None``
        when it presents no token and one is needed (the login form)."""
        if self._auth is None:
            owner: OwnerScope = ANY_OWNER if self._operator else None
            name = OPERATOR if self._operator else LOCAL_PRINCIPAL
            return Viewer(owner, name, self._sign("local"), self._allow_actions, False, False)
        header = request.headers.get("authorization")
        cookie = request.cookies.get(COOKIE)
        if header is None and not cookie:
            return None
        credential = header if header is not None else f"Bearer {cookie}"
        assert self._auth is not None
        live = await self._auth.credential(credential)
        if isinstance(live, Refusal):
            return live
        found = live.grant
        may_act = self._allow_actions and not found.scopes.read_only
        signed_in = header is None
        return Viewer(
            found.principal,
            found.principal,
            self._sign(credential),
            may_act,
            not signed_in,
            signed_in,
            found.scopes,
            live,
        )

    async def grant(self, authorization: str) -> Grant | Refusal:
        """The grant of an ``Authorization`` value (the login form checks its token)."""
        assert self._auth is not None
        return await self._auth.grant(authorization)

    def csrf_ok(self, viewer: Viewer, presented: str | None) -> bool:
        """Whether a POST of *viewer* carrying *presented* may go on."""
        if viewer.by_header:
            return True
        return presented is not None and hmac.compare_digest(presented, viewer.csrf)

    def _sign(self, credential: str) -> str:
        return hmac.new(self._key, credential.encode(), hashlib.sha256).hexdigest()
