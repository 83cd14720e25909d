"""How fast the dashboard serves each caller (ADR 0036).

- A request with a viewer is charged to its principal in the MCP endpoint's own
  per-principal limiter (the same allowance, whichever door it comes in by).
- A request naming no principal (the sign-in form, static files, signing out) is
  charged to its client address, at the same rate.
- A refused token (the sign-in form's, a header's or a cookie's) is charged to its
  client address in a small bucket of its own; once that is empty, the address is
  refused before any token is checked, so guessing tokens costs time.

The client address is the connection's peer: behind a proxy, all its callers share one.
"""

from dataclasses import dataclass
from typing import Self

from starlette.requests import Request

from taskloom.server.http.limits import RateLimiter
from taskloom.server.http.settings import HttpSettings


@dataclass(frozen=True)
class Throttle:
    """The dashboard's three limiters (``None``: unlimited)."""

    principals: RateLimiter | None
    addresses: RateLimiter | None
    failures: RateLimiter | None

    @classmethod
    def of(cls, settings: HttpSettings, principals: RateLimiter | None) -> Self:
        """The limits *settings* ask for, sharing *principals* with the MCP endpoint."""
        per_minute = settings.rate_per_minute
        return cls(
            principals=principals,
            addresses=RateLimiter(per_minute) if per_minute is not None else None,
            failures=RateLimiter(settings.sign_in_failures_per_minute),
        )

    def principal(self, principal: str | None) -> float:
        """Charge one request to *principal*: 0 if admitted, else the seconds to wait."""
        return self.principals.admit(principal) if self.principals is not None else 0.0

    def anonymous(self, request: Request) -> float:
        """Charge one request naming no principal to its address (0: admitted)."""
        return self.addresses.admit(address(request)) if self.addresses is not None else 0.0

    def failing(self, request: Request) -> float:
        """Seconds until the request's address may present a token again (0: now)."""
        return self.failures.wait_s(address(request)) if self.failures is not None else 0.0

    def failed(self, request: Request) -> None:
        """Charge one refused token to the request's address."""
        if self.failures is not None:
            self.failures.admit(address(request))


UNLIMITED = Throttle(principals=None, addresses=None, failures=None)


def address(request: Request) -> str:
    """The request's client address (the connection's peer)."""
    return request.client.host if request.client is not None else "unknown"
