"""Access tokens as a careful gateway keeps them: opaque, shown once, stored as a hash.

A token reads ``tl_<id>_<secret>``. The ``id`` (12 hex digits) finds its row; the
``secret`` (32 random bytes, URL-safe base64) is never stored, only its SHA-256, which
is compared in constant time. A plain (unkeyed, fast) hash is enough for a secret of
256 random bits: no dictionary or brute force can invert it (ADR 0028). A token is
bound to one principal, may expire, and is revoked by setting ``revoked_at``: the
verifier reads the row on every request, so a revocation holds from the next one.
"""

import hashlib
import hmac
import secrets
from collections.abc import Collection, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Final, Protocol

from taskloom.engine.ports import Clock
from taskloom.engine.scopes import Grant, Scopes

TOKEN_PREFIX: Final = "tl_"
ID_HEX_DIGITS: Final = 12
SECRET_BYTES: Final = 32
MAX_PRINCIPAL_LENGTH: Final = 200


class TokenState(StrEnum):
    """Whether a token is accepted now."""

    ACTIVE = "active"
    EXPIRED = "expired"
    REVOKED = "revoked"


@dataclass(frozen=True)
class TokenRecord:
    """A stored token: everything but its secret."""

    id: str
    principal: str
    digest: str
    """SHA-256 of the secret, hex."""
    scopes: tuple[str, ...]
    """Written form (``Scopes.written``)."""
    created_at: datetime
    expires_at: datetime | None = None
    revoked_at: datetime | None = None

    def state(self, now: datetime) -> TokenState:
        """Revoked, expired (at or after ``expires_at``) or active, at *now*."""
        if self.revoked_at is not None:
            return TokenState.REVOKED
        if self.expires_at is not None and now >= self.expires_at:
            return TokenState.EXPIRED
        return TokenState.ACTIVE

    def revoked(self, now: datetime) -> "TokenRecord":
        """This token revoked at *now* (a revoked one keeps its first revocation time)."""
        return self if self.revoked_at is not None else replace(self, revoked_at=now)


class TokenStore(Protocol):
    """Where tokens are kept (each method one transaction)."""

    async def add_token(self, record: TokenRecord) -> None:
        """Store a new token."""
        ...

    async def find_token(self, token_id: str) -> TokenRecord | None:
        """The token with this id, or ``None``."""
        ...

    async def list_tokens(self) -> Sequence[TokenRecord]:
        """Every token, oldest first."""
        ...

    async def find_tokens(self, token_ids: Collection[str]) -> Sequence[TokenRecord]:
        """The tokens with these ids (unknown ids are left out), in one read."""
        ...

    async def revoke_token(self, token_id: str, now: datetime) -> TokenRecord | None:
        """Revoke a token (at *now*, unless it already was); ``None``: no such token."""
        ...


def digest(secret: str) -> str:
    """The stored form of a secret: its SHA-256, hex."""
    return hashlib.sha256(secret.encode()).hexdigest()


def mint(
    principal: str,
    *,
    now: datetime,
    expires_in: timedelta | None = None,
    scopes: Scopes | None = None,
) -> tuple[str, TokenRecord]:
    """A new token (to show once) and the record to store.

    Raises:
        ValueError: the principal is empty, too long or not printable, or *expires_in*
            is not positive.
    """
    if not principal or not principal.isprintable() or len(principal) > MAX_PRINCIPAL_LENGTH:
        raise ValueError(
            f"a principal is a printable name of 1 to {MAX_PRINCIPAL_LENGTH} characters"
        )
    if expires_in is not None and expires_in <= timedelta(0):
        raise ValueError("a token's lifetime must be positive")
    token_id = secrets.token_hex(ID_HEX_DIGITS // 2)
    secret = secrets.token_urlsafe(SECRET_BYTES)
    record = TokenRecord(
        id=token_id,
        principal=principal,
        digest=digest(secret),
        scopes=tuple((scopes or Scopes()).written()),
        created_at=now,
        expires_at=now + expires_in if expires_in is not None else None,
    )
    return f"{TOKEN_PREFIX}{token_id}_{secret}", record


def split_token(presented: str) -> tuple[str, str] | None:
    """``(id, secret)`` of a string shaped like a taskloom token, else ``None``."""
    if not presented.startswith(TOKEN_PREFIX):
        return None
    token_id, underscore, secret = presented[len(TOKEN_PREFIX) :].partition("_")
    if not underscore or not secret or len(token_id) != ID_HEX_DIGITS:
        return None
    if any(char not in "0123456789abcdef" for char in token_id):
        return None
    return token_id, secret


class TokenVerifier:
    """Tells the grant of a presented token, reading its row on every call."""

    def __init__(self, store: TokenStore, clock: Clock) -> None:
        self._store = store
        self._clock = clock

    async def any_active(self) -> bool:
        """Whether some stored token is accepted now."""
        now = self._clock.now()
        return any(r.state(now) is TokenState.ACTIVE for r in await self._store.list_tokens())

    async def grant(self, presented: str) -> Grant | None:
        """The principal and scopes of an active token, or ``None`` (unknown, wrong
        secret, expired, revoked, or not shaped like a token)."""
        record = await self.record(presented)
        return Grant(record.principal, Scopes.parse(record.scopes)) if record else None

    async def record(self, presented: str) -> TokenRecord | None:
        """The stored record of an active token, or ``None`` (as :meth:`grant`)."""
        parts = split_token(presented)
        if parts is None:
            return None
        token_id, secret = parts
        record = await self._store.find_token(token_id)
        if record is None:
            return None
        if not hmac.compare_digest(record.digest, digest(secret)):
            return None
        if record.state(self._clock.now()) is not TokenState.ACTIVE:
            return None
        return record

    def seconds_left(self, record: TokenRecord) -> float | None:
        """How long *record* is accepted from now (``None``: it does not expire)."""
        if record.expires_at is None:
            return None
        return (record.expires_at - self._clock.now()).total_seconds()

    async def ended(self, token_ids: Collection[str]) -> dict[str, TokenState]:
        """Which of *token_ids* are no longer accepted, and why (a deleted token counts as
        revoked): one read for them all, however many."""
        if not token_ids:
            return {}
        now = self._clock.now()
        found = {
            record.id: record.state(now) for record in await self._store.find_tokens(token_ids)
        }
        states = {token_id: found.get(token_id, TokenState.REVOKED) for token_id in token_ids}
        return {
            token_id: state for token_id, state in states.items() if state is not TokenState.ACTIVE
        }
