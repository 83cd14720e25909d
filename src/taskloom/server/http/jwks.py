"""The authorization server's signing keys (its JWK Set), fetched over HTTP and cached.

Keys are fetched on first use, from ``jwks_url`` or from the ``jwks_uri`` of the
issuer's metadata (RFC 8414 ``oauth-authorization-server``, else OpenID Connect
discovery), and used for ``jwks_cache_s``. A token signed by a key the set does not
hold fetches it again (the issuer may have rotated its keys), at most once per
``jwks_min_refresh_s``, so made-up key ids cannot make us hammer the issuer.

An outage of the issuer cannot multiply fetches or waits (ADR 0037):

- one fetch at a time: concurrent callers join the fetch in flight (single flight),
  and nobody waits for it longer than ``jwks_timeout_s`` after it started, which bounds
  every caller's wait by the same limit;
- a failed fetch is backed off, before the first success as after it: 1 s after the
  first failure, then twice as long after each further one, at most
  ``MAX_BACKOFF_S`` (30 s). Meanwhile a caller with no keys to use is refused at once
  (:class:`KeysUnavailable` says when to retry), and a caller with keys uses them; the
  first call after the backoff fetches again, and a success ends the backoff;
- a document is read as a stream and abandoned as soon as it passes
  ``MAX_DOCUMENT_BYTES`` (1 MiB).
"""

import json
import logging
import math
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
FIRST_BACKOFF_S: Final = 1.0
MAX_BACKOFF_S: Final = 30.0


class KeysUnavailable(TaskloomError):
    """The issuer's keys cannot be fetched (unreachable, not JSON, no usable key)."""

    def __init__(self, message: str, *, retry_after_s: float = FIRST_BACKOFF_S) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s
        """When a new fetch may be tried (the ``Retry-After`` of the 503)."""

    @property
    def retry_after(self) -> str:
        """``retry_after_s`` as a ``Retry-After`` value: whole seconds, at least 1."""
        return str(max(1, math.ceil(self.retry_after_s)))


class _Flight:
    """One fetch in progress, which every caller that needs keys meanwhile joins."""

    def __init__(self, deadline: float) -> None:
        self.deadline = deadline
        self.done = anyio.Event()
        self.error: KeysUnavailable | None = None


class JwksCache:
    """The signing keys of one issuer, by key id (``kid``)."""

    def __init__(
        self, settings: OAuthSettings, *, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._settings = settings
        self._clock = clock
        self._jwks_url = settings.jwks_url
        self._keys: dict[str | None, PyJWK] = {}
        self._fetched_at: float | None = None
        """When keys were last fetched (``None``: never)."""
        self._flight: _Flight | None = None
        self._failures = 0
        self._retry_at: float | None = None
        """While fetches fail: when the next may start."""
        self.fetches = 0
        """How many times the key set was fetched (for tests and metrics)."""

    async def key(self, kid: str | None) -> PyJWK | None:
        """The key named *kid* (without one: the set's only key), or ``None``.

        Raises:
            KeysUnavailable: no keys were ever fetched, and fetching them failed or is
                backed off.
        """
        if self._stale():
            await self._refresh()
        found = self._pick(kid)
        if found is None and self._may_refresh():
            await self._refresh()
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

    async def _refresh(self) -> None:
        """Join the fetch in flight, or start one unless fetches are backed off.

        Raises:
            KeysUnavailable: no keys to fall back on, and the fetch failed or may not
                be tried yet.
        """
        flight = self._flight
        if flight is None:
            now = self._clock()
            if self._retry_at is not None and now < self._retry_at:
                if not self._keys:
                    raise KeysUnavailable(
                        "cannot fetch the issuer's keys: the last fetch failed, retrying later",
                        retry_after_s=self._retry_at - now,
                    )
                return
            flight = self._flight = _Flight(now + self._settings.jwks_timeout_s)
            try:
                with anyio.CancelScope(shield=True):  # the joiners need its outcome
                    await self._fly(flight)
            finally:
                self._flight = None
                flight.done.set()
        else:
            with anyio.move_on_after(max(flight.deadline - self._clock(), 0)):
                await flight.done.wait()
            if not flight.done.is_set():  # pragma: no cover  # the fetch is bounded too
                raise KeysUnavailable("cannot fetch the issuer's keys: timed out")
        if flight.error is not None and not self._keys:
            retry_at = self._retry_at if self._retry_at is not None else self._clock()
            raise KeysUnavailable(
                str(flight.error), retry_after_s=max(retry_at - self._clock(), 0)
            ) from flight.error.__cause__

    async def _fly(self, flight: _Flight) -> None:
        try:
            with anyio.fail_after(max(flight.deadline - self._clock(), 0)):
                keys = await self._fetch()
        except (KeysUnavailable, TimeoutError, httpx2.HTTPError) as error:
            reason = str(error) or type(error).__name__
            self._failures += 1
            backoff = min(FIRST_BACKOFF_S * 2 ** (self._failures - 1), MAX_BACKOFF_S)
            self._retry_at = self._clock() + backoff
            flight.error = KeysUnavailable(
                f"cannot fetch the issuer's keys: {reason}", retry_after_s=backoff
            )
            flight.error.__cause__ = error
            if self._keys:
                logger.warning("cannot refresh the issuer's keys (keeping the old): %s", reason)
            else:
                logger.warning(
                    "cannot fetch the issuer's keys (retry in %g s): %s", backoff, reason
                )
            return
        self._keys, self._fetched_at = keys, self._clock()
        self._failures, self._retry_at = 0, None

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
    """The JSON object at *url*, read no further than ``MAX_DOCUMENT_BYTES``."""
    body = bytearray()
    async with client.stream("GET", url, headers={"Accept": "application/json"}) as response:
        if response.status_code != 200:
            raise KeysUnavailable(f"{url} answered HTTP {response.status_code}")
        async for chunk in response.aiter_bytes():
            body += chunk
            if len(body) > MAX_DOCUMENT_BYTES:
                raise KeysUnavailable(f"{url} answered more than {MAX_DOCUMENT_BYTES} bytes")
    try:
        document = json.loads(body)
    except (ValueError, RecursionError) as error:
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
