"""The authorization server's signing keys (its JWK Set), fetched over HTTP and cached.

Keys are fetched on first use, from ``jwks_url`` or from the ``jwks_uri`` of the
issuer's metadata (RFC 8414 ``oauth-authorization-server``, else OpenID Connect
discovery), and used for ``jwks_cache_s``. A token signed by a key the set does not
hold fetches it again (the issuer may have rotated its keys), at most once per
``jwks_min_refresh_s``, so made-up key ids cannot make us hammer the issuer. Every
fetch is bounded by ``jwks_timeout_s``; concurrent callers share one fetch.
"""

import logging
import time
from collections.abc import Callable
from typing import Any, Final
from urllib.parse import urlsplit, urlunsplit

import anyio
import httpx2
from jwt import PyJWK
from jwt.exceptions import PyJWTError

from taskloom.engine.errors import TaskloomError
from taskloom.server.http.oauth_settings import OAuthSettings, secure_url

logger = logging.getLogger(__name__)
MAX_DOCUMENT_BYTES: Final = 1024 * 1024


class KeysUnavailable(TaskloomError):
    """The issuer's keys cannot be fetched (unreachable, not JSON, no usable key)."""


class JwksCache:
    """The signing keys of one issuer, by key id (``kid``)."""

    def __init__(
        self, settings: OAuthSettings, *, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._settings = settings
        self._clock = clock
        self._lock = anyio.Lock()
        self._jwks_url = settings.jwks_url
        self._keys: dict[str | None, PyJWK] = {}
        self._fetched_at: float | None = None
        self.fetches = 0
        """How many times the key set was fetched (for tests and metrics)."""

    async def key(self, kid: str | None) -> PyJWK | None:
        """The key named *kid* (without one: the set's only key), or ``None``.

        Raises:
            KeysUnavailable: no keys were ever fetched, and fetching them failed.
        """
        if self._stale():
            await self._refresh(self._fetched_at)
        found = self._pick(kid)
        if found is None and self._may_refresh():
            await self._refresh(self._fetched_at)
            found = self._pick(kid)
        return found

    def _pick(self, kid: str | None) -> PyJWK | None:
        if kid is None and len(self._keys) == 1:
            return next(iter(self._keys.values()))
        return self._keys.get(kid)

    def _stale(self) -> bool:
        fetched = self._fetched_at
        return fetched is None or self._clock() - fetched >= self._settings.jwks_cache_s

    def _may_refresh(self) -> bool:
        fetched = self._fetched_at
        return fetched is None or self._clock() - fetched >= self._settings.jwks_min_refresh_s

    async def _refresh(self, seen: float | None) -> None:
        async with self._lock:
            if self._fetched_at != seen:
                return  # another caller fetched while this one waited
            try:
                with anyio.fail_after(self._settings.jwks_timeout_s):
                    keys = await self._fetch()
            except (KeysUnavailable, TimeoutError, httpx2.HTTPError) as error:
                reason = str(error) or type(error).__name__
                if not self._keys:
                    raise KeysUnavailable(f"cannot fetch the issuer's keys: {reason}") from error
                logger.warning("cannot refresh the issuer's keys (keeping the old): %s", reason)
                self._fetched_at = self._clock()  # retry after min_refresh_s, not at once
                return
            self._keys, self._fetched_at = keys, self._clock()

    async def _fetch(self) -> dict[str | None, PyJWK]:
        self.fetches += 1
        async with httpx2.AsyncClient(timeout=self._settings.jwks_timeout_s) as client:
            if self._jwks_url is None:
                self._jwks_url = await _discover(client, self._settings.issuer)
            document = await _get_json(client, self._jwks_url)
        keys = _usable_keys(document)
        if not keys:
            raise KeysUnavailable(f"no usable signing key at {self._jwks_url}")
        logger.info("fetched %d signing key(s) from %s", len(keys), self._jwks_url)
        return keys


def metadata_urls(issuer: str) -> tuple[str, str]:
    """Where an issuer's metadata is: RFC 8414 §3.1 (the well-known part before the
    issuer's path), then OpenID Connect Discovery (after it)."""
    parts = urlsplit(issuer)
    path = parts.path.rstrip("/")
    rfc8414 = urlunsplit(
        (parts.scheme, parts.netloc, f"/.well-known/oauth-authorization-server{path}", "", "")
    )
    oidc = urlunsplit(
        (parts.scheme, parts.netloc, f"{path}/.well-known/openid-configuration", "", "")
    )
    return rfc8414, oidc


async def _discover(client: httpx2.AsyncClient, issuer: str) -> str:
    for url in metadata_urls(issuer):
        try:
            document = await _get_json(client, url)
        except KeysUnavailable:
            continue
        jwks_uri = document.get("jwks_uri")
        if document.get("issuer") != issuer:
            raise KeysUnavailable(f"the metadata at {url} names another issuer")
        if not isinstance(jwks_uri, str) or not secure_url(jwks_uri):
            raise KeysUnavailable(f"the metadata at {url} has no https jwks_uri")
        return jwks_uri
    raise KeysUnavailable(f"no authorization server metadata for {issuer}")


async def _get_json(client: httpx2.AsyncClient, url: str) -> dict[str, Any]:
    response = await client.get(url, headers={"Accept": "application/json"})
    if response.status_code != 200:
        raise KeysUnavailable(f"{url} answered HTTP {response.status_code}")
    if len(response.content) > MAX_DOCUMENT_BYTES:
        raise KeysUnavailable(f"{url} answered more than {MAX_DOCUMENT_BYTES} bytes")
    try:
        document = response.json()
    except ValueError as error:
        raise KeysUnavailable(f"{url} did not answer JSON") from error
    if not isinstance(document, dict):
        raise KeysUnavailable(f"{url} did not answer a JSON object")
    return document


def _usable_keys(document: dict[str, Any]) -> dict[str | None, PyJWK]:
    """The signature keys of a JWK Set, by ``kid`` (others are skipped)."""
    keys: dict[str | None, PyJWK] = {}
    entries = document.get("keys")
    for entry in entries if isinstance(entries, list) else []:
        if not isinstance(entry, dict) or entry.get("use", "sig") != "sig":
            continue
        try:
            key = PyJWK(entry)
        except (PyJWTError, ValueError, TypeError) as error:
            logger.info("skipping a key of the issuer's set: %s", error)
            continue
        kid = entry.get("kid")
        keys[kid if isinstance(kid, str) else None] = key
    return keys
