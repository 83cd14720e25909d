"""Bearer tokens: reading them from configuration, and telling who presents one.

Two kinds: the static ``principal:token`` entries of the configuration
(:class:`TokenTable`), and the database's tokens (``taskloom tokens create``), checked
by the :class:`StoredTokens` that ``bootstrap`` hands over (ADR 0028; the engine's
``TokenVerifier``), which also tells which tokens in use have ended (ADR 0037).
"""

import hashlib
import hmac
from collections.abc import Collection, Mapping
from typing import Final, Protocol

from taskloom.engine.tokens import TokenRecord, TokenState

BEARER: Final = "bearer "


class StoredTokens(Protocol):
    """The database's tokens (``taskloom.engine.tokens.TokenVerifier``)."""

    async def record(self, presented: str) -> TokenRecord | None:
        """The record of a presented token (``None``: not an active one)."""
        ...

    def seconds_left(self, record: TokenRecord) -> float | None:
        """How long *record* is accepted from now (``None``: it does not expire)."""
        ...

    async def ended(self, token_ids: Collection[str]) -> dict[str, TokenState]:
        """Which of *token_ids* are no longer accepted, and why (one read)."""
        ...


def bearer(authorization: str | None) -> str | None:
    """The token of an ``Authorization: Bearer <token>`` value, or ``None``."""
    if authorization is None or not authorization.lower().startswith(BEARER):
        return None
    return authorization[len(BEARER) :].strip() or None


def parse_tokens(text: str, *, source: str) -> dict[str, str]:
    """Tokens from ``principal:token`` entries, one per line or comma-separated; blank
    lines and ``#`` comments are skipped. Errors name the entry, never the token.

    Raises:
        ValueError: an entry is malformed, or a token is given twice.
    """
    tokens: dict[str, str] = {}
    entries = [part for line in text.splitlines() for part in line.split(",")]
    for number, raw in enumerate(entries, start=1):
        entry = raw.strip()
        if not entry or entry.startswith("#"):
            continue
        principal, colon, token = entry.partition(":")
        principal, token = principal.strip(), token.strip()
        if not colon or not principal or not token:
            raise ValueError(f"{source}: entry {number} is not 'principal:token'")
        if token in tokens:
            raise ValueError(f"{source}: entry {number} ({principal!r}) repeats another's token")
        tokens[token] = principal
    return tokens


class TokenTable:
    """Looks up the principal of a presented token, in constant time per known token."""

    def __init__(self, tokens: Mapping[str, str]) -> None:
        self._digests = {_digest(token): principal for token, principal in tokens.items()}

    def __bool__(self) -> bool:
        return bool(self._digests)

    def principal(self, authorization: str | None) -> str | None:
        """The principal of an ``Authorization: Bearer <token>`` value, or ``None``."""
        if authorization is None or not authorization.lower().startswith(BEARER):
            return None
        presented = _digest(authorization[len(BEARER) :].strip())
        found = None
        for digest, principal in self._digests.items():  # no early exit: same time for all
            if hmac.compare_digest(digest, presented):
                found = principal
        return found


def _digest(token: str) -> bytes:
    return hashlib.sha256(token.encode()).digest()
