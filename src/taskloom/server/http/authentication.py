"""Who presents a bearer token, and what it may do: a :class:`Grant`.

Static tokens (``HttpSettings.tokens``, every scope) are looked up first, then the
database's tokens (``taskloom tokens create``: their principal and scopes, read on every
request, ADR 0028), then a JWT of the OAuth issuer when one is configured (its ``sub``,
every scope). All kinds share one namespace of principals: a static token named ``ann``,
a stored token of ``ann`` and a JWT whose ``sub`` is ``ann`` act as the same owner
(ADR 0029). A refusal carries its HTTP status and the
``WWW-Authenticate`` challenge (RFC 6750 §3), which names the protected resource
metadata when OAuth is on (RFC 9728 §5.1).

:meth:`Authenticator.credential` resolves the principal as a ``LiveGrant``: what can
end it (a stored token's id, an expiry) goes with it, and :attr:`Authenticator.watch`
ends every request and stream it holds once it ends (ADR 0037).
"""

import logging
import time
from dataclasses import dataclass
from typing import Final

from taskloom.engine.scopes import Grant, Scopes
from taskloom.server.http.grant_watch import GrantWatch, LiveGrant
from taskloom.server.http.oauth_settings import OAuthSettings
from taskloom.server.http.settings import HttpSettings
from taskloom.server.http.tokens import BEARER, StoredTokens, TokenTable, bearer

logger = logging.getLogger(__name__)
REALM: Final = 'realm="taskloom"'


@dataclass(frozen=True)
class Refusal:
    """Why a request may not go on: an HTTP status, its challenge and a one-line message."""

    status: int
    challenge: str
    """The ``WWW-Authenticate`` value ("": none)."""
    message: str
    retry_after: str | None = None
    """The ``Retry-After`` value, when retrying later may succeed."""

    @property
    def headers(self) -> dict[str, str]:
        """The headers of the refusal: its challenge and ``Retry-After``, if any."""
        headers = {"WWW-Authenticate": self.challenge} if self.challenge else {}
        if self.retry_after is not None:
            headers["Retry-After"] = self.retry_after
        return headers


class Authenticator:
    """Tells the grant of an ``Authorization`` header, or why there is none."""

    def __init__(self, settings: HttpSettings, stored: StoredTokens | None = None) -> None:
        self._tokens = TokenTable(settings.tokens)
        self._stored = stored
        self._oauth = settings.oauth
        self._challenge = f"Bearer {REALM}"
        self.watch = GrantWatch(stored.ended if stored is not None else None)
        """Ends the requests of grants that were revoked or expired (run it while serving)."""
        if settings.oauth is not None:
            from taskloom.server.http.oauth_extra import require_oauth

            require_oauth()
            from taskloom.server.http.jwt_verifier import JwtVerifier  # the oauth extra
            from taskloom.server.http.resource_metadata import metadata_url

            self.verifier: JwtVerifier | None = JwtVerifier(settings.oauth)
            self._challenge += f', resource_metadata="{metadata_url(settings.oauth)}"'
            if settings.oauth.scopes:
                self._challenge += f', scope="{" ".join(settings.oauth.scopes)}"'
        else:
            self.verifier = None

    def __bool__(self) -> bool:
        return bool(self._tokens) or self._stored is not None or self.verifier is not None

    @property
    def ended_challenge(self) -> str:
        """The ``WWW-Authenticate`` value for a token that stopped being valid."""
        return f'{self._challenge}, error="invalid_token"'

    async def grant(self, authorization: str | None) -> Grant | Refusal:
        """The grant of whoever presents *authorization*, or the refusal to answer with
        (see :meth:`credential`)."""
        found = await self.credential(authorization)
        return found.grant if isinstance(found, LiveGrant) else found

    async def credential(self, authorization: str | None) -> LiveGrant | Refusal:
        """The live grant of whoever presents *authorization*, or the refusal to answer
        with (503 with ``Retry-After`` when a JWT cannot be checked because the issuer's
        keys cannot be fetched)."""
        if authorization is None or not authorization.lower().startswith(BEARER):
            return Refusal(401, self._challenge, "Unauthorized: send Authorization: Bearer <token>")
        principal = self._tokens.principal(authorization)
        if principal is not None:
            return LiveGrant(Grant(principal))
        token = bearer(authorization)
        if self._stored is not None and token is not None:
            record = await self._stored.record(token)
            if record is not None:
                left = self._stored.seconds_left(record)
                expires = time.time() + left if left is not None else None
                grant = Grant(record.principal, Scopes.parse(record.scopes))
                return LiveGrant(grant, token_id=record.id, expires_at=expires)
        if self.verifier is not None and self._oauth is not None:
            from taskloom.server.http.jwks import KeysUnavailable  # the oauth extra

            token = authorization[len(BEARER) :].strip()
            try:
                access = await self.verifier.verify_token(token)
            except KeysUnavailable as error:
                logger.warning("cannot check a bearer token: %s", error)
                return Refusal(
                    503,
                    "",
                    "Service unavailable: the token issuer's keys cannot be fetched",
                    retry_after=error.retry_after,
                )
            if access is not None and access.subject is not None:
                scoped = self._scoped(access.subject, access.scopes, self._oauth)
                if isinstance(scoped, Refusal):
                    return scoped
                expires_at = access.expires_at + self._oauth.leeway_s if access.expires_at else None
                return LiveGrant(scoped, expires_at=expires_at)
        return Refusal(401, self.ended_challenge, "Unauthorized: the bearer token is not valid")

    def _scoped(self, subject: str, scopes: list[str], oauth: OAuthSettings) -> Grant | Refusal:
        missing = [scope for scope in oauth.scopes if scope not in scopes]
        if not missing:
            return Grant(subject)
        challenge = self._challenge.replace(
            f"Bearer {REALM}", f'Bearer {REALM}, error="insufficient_scope"'
        )
        return Refusal(403, challenge, f"Forbidden: the token lacks the scope {' '.join(missing)}")
