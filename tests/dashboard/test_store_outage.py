"""A store outage on a dashboard page is a 503 with ``Retry-After``, never a 500 with a
traceback (issue 28, ADR 0038)."""

from typing import Any

import pytest

from taskloom.engine.errors import DatabaseUnavailableError
from tests.dashboard.support import site


async def test_a_page_during_an_outage_is_503_with_retry_after(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with site(tokens=None) as shown:

        async def unavailable(*args: Any, **kwargs: Any) -> Any:
            raise DatabaseUnavailableError("the database is down", retry_after_s=4.2)

        monkeypatch.setattr(shown.runs, "list", unavailable)  # every page reads through it
        answer = await shown.http.get("/ui/")
    assert answer.status_code == 503
    assert answer.headers["Retry-After"] == "5"
    assert "Database unavailable" in answer.text
    assert not [record for record in caplog.records if record.exc_info]
