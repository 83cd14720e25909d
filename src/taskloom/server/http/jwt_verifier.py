"""JWT access tokens of the configured issuer, checked as the SDK's ``TokenVerifier``.

A token is accepted when its header names an allowed public-key algorithm, it is signed
by the issuer's key of its ``kid`` (``jwks.JwksCache``), and its claims say the issuer
(``iss``), this endpoint (``aud``), a ``sub`` and an ``exp`` still ahead (``nbf`` and
``iat``, when present, not ahead), all within ``leeway_s``. The principal is ``sub``.
Why a token was refused is logged at INFO; the token never is.
"""

import logging
from typing import Any, Final

import jwt
from jwt.exceptions import PyJWTError
from mcp.server.auth.provider import AccessToken

from taskloom.server.http.jwks import JwksCache
from taskloom.server.http.oauth_settings import OAuthSettings

logger = logging.getLogger(__name__)
REQUIRED_CLAIMS: Final = ["exp", "iss", "aud", "sub"]
MAX_SUBJECT_LENGTH: Final = 255


class JwtVerifier:
    """Verifies the issuer's JWT access tokens (``mcp.server.auth.provider.TokenVerifier``)."""

    def __init__(self, settings: OAuthSettings, keys: JwksCache | None = None) -> None:
        self._settings = settings
        self.keys = keys if keys is not None else JwksCache(settings)

    async def verify_token(self, token: str) -> AccessToken | None:
        """The token's access info, or ``None`` if it is not a valid token of the issuer
        for this endpoint.

        Raises:
            KeysUnavailable: the issuer's keys cannot be fetched.
        """
        checked = await self._check(token)
        if isinstance(checked, str):
            logger.info("bearer token refused: %s", checked)
            return None
        return checked

    async def _check(self, token: str) -> AccessToken | str:
        """The token's access info, or why it is refused."""
        try:
            header = jwt.get_unverified_header(token)
        except PyJWTError:
            return "not a JWT"
        algorithm, kid = header.get("alg"), header.get("kid")
        if algorithm not in self._settings.algorithms:
            return f"algorithm {algorithm!r} is not accepted"
        key = await self.keys.key(kid if isinstance(kid, str) else None)
        if key is None:
            return f"signed by an unknown key (kid {kid!r})"
        try:
            claims: dict[str, Any] = jwt.decode(
                token,
                key,
                algorithms=list(self._settings.algorithms),
                audience=self._settings.audience,
                issuer=self._settings.issuer,
                leeway=self._settings.leeway_s,
                options={"require": REQUIRED_CLAIMS},
            )
        except PyJWTError as error:
            return str(error)
        subject = claims["sub"]
        if not _valid_subject(subject):
            return "sub is not a printable string"
        return AccessToken(
            token=token,
            client_id=str(claims.get("client_id") or claims.get("azp") or ""),
            scopes=token_scopes(claims),
            expires_at=int(claims["exp"]),
            resource=self._settings.audience,
            subject=subject,
            claims=claims,
        )


def token_scopes(claims: dict[str, Any]) -> list[str]:
    """The scopes a token grants: ``scope`` (RFC 9068, space-separated) or ``scp`` (a
    list or a string, as some authorization servers write it)."""
    granted = claims.get("scope", claims.get("scp"))
    if isinstance(granted, str):
        return granted.split()
    if isinstance(granted, list):
        return [item for item in granted if isinstance(item, str)]
    return []


def _valid_subject(subject: object) -> bool:
    return (
        isinstance(subject, str)
        and 0 < len(subject) <= MAX_SUBJECT_LENGTH
        and subject.isprintable()
    )
