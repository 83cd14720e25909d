"""ADR 0036: the dashboard is rate-limited as the MCP endpoint is (one allowance per
principal, shared), requests naming no principal per client address, and refused
tokens per client address (then a clear 429 page, before any token is checked), each
refused sign-in in the audit trail."""

import logging

import httpx2
import pytest

from taskloom.server.dashboard.access import COOKIE
from taskloom.server.http.limits import RateLimiter
from taskloom.server.http.settings import HttpSettings
from tests.dashboard.support import ANN, BOB, TOKENS, site
from tests.server.http_support import audit_records


class _Frozen:
    """A clock that does not move: no allowance comes back during a test."""

    def __call__(self) -> float:
        return 1_000.0


def _settings(**limits: float) -> HttpSettings:
    return HttpSettings(tokens=dict(TOKENS), **limits)


async def test_failed_sign_ins_are_throttled_per_address_and_recorded(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="taskloom.audit")
    async with site(limits=_settings(sign_in_failures_per_minute=3)) as shown:
        for _ in range(3):
            refused = await shown.http.post("/ui/login", data={"token": "guess-guess-guess"})
            assert refused.status_code == 401
        throttled = await shown.http.post("/ui/login", data={"token": ANN})
        assert throttled.status_code == 429
        assert int(throttled.headers["Retry-After"]) >= 1
        assert "Too many refused sign-ins from this address; try again in" in throttled.text
        assert COOKIE not in throttled.cookies
        # a bad cookie counts as a failure too, and is refused while the address waits
        shown.http.cookies.set(COOKIE, "not-a-token")
        assert (await shown.http.get("/ui/")).status_code == 429
        transport = httpx2.ASGITransport(app=shown.app, client=("10.0.0.9", 5))
        async with httpx2.AsyncClient(transport=transport, base_url="http://ui.test") as other:
            signed = await other.post("/ui/login", data={"token": ANN})
            assert signed.status_code == 303  # another address is not held back
    records = [r for r in audit_records(caplog) if r["action"] == "sign_in"]
    assert [(r["principal"], r["outcome"], r["reason"]) for r in records[:4]] == [
        *[("anonymous", "refused", "token not valid")] * 3,
        ("anonymous", "refused", "too many failures"),
    ]
    assert records[0]["client"] == "127.0.0.1"
    assert (records[-1]["principal"], records[-1]["outcome"], records[-1]["client"]) == (
        "ann",
        "ok",
        "10.0.0.9",
    )
    assert all(r["via"] == "dashboard" for r in records)


async def test_pages_share_each_principal_allowance_with_the_mcp_endpoint() -> None:
    limiter = RateLimiter(3, clock=_Frozen())
    assert limiter.admit("ann") == 0  # a request of ann's to /mcp
    async with site(limits=_settings(rate_per_minute=3), limiter=limiter) as shown:
        assert (await shown.page("/ui/")).status_code == 200
        assert (await shown.page("/ui/")).status_code == 200
        throttled = await shown.page("/ui/")
        assert throttled.status_code == 429
        assert "Too many requests; try again in" in throttled.text
        assert throttled.headers["Retry-After"] == "20"
        assert (await shown.page("/ui/", token=BOB)).status_code == 200
    assert limiter.admit("ann") > 0  # and /mcp refuses ann now too


async def test_a_successful_sign_in_is_charged_to_its_principal() -> None:
    limiter = RateLimiter(1, clock=_Frozen())
    async with site(limits=_settings(rate_per_minute=1), limiter=limiter) as shown:
        assert (await shown.http.post("/ui/login", data={"token": ANN})).status_code == 303
        assert (await shown.http.post("/ui/login", data={"token": ANN})).status_code == 429


async def test_requests_naming_no_principal_are_limited_per_address() -> None:
    async with site(limits=_settings(rate_per_minute=2)) as shown:
        assert (await shown.http.get("/ui/login")).status_code == 200
        assert (await shown.http.get("/ui/static/app.css")).status_code == 200
        assert (await shown.http.get("/ui/login")).status_code == 429
        assert (await shown.http.get("/ui/static/app.css")).status_code == 429
