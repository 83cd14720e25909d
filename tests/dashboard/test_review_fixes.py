"""What review #18 found the dashboard let through: a resume past the token's scopes
or the unfinished-task quota, cross-site forms (a forged sign-in), notices written by
a link. Each as the browser or a script would meet it, over ASGI."""

import logging
from collections.abc import Collection
from datetime import UTC, datetime

import pytest
from pydantic import BaseModel

from taskloom.engine.dag import NodeContext, Workflow
from taskloom.engine.states import TaskState
from taskloom.engine.tokens import TokenRecord, TokenState
from taskloom.server.dashboard.access import COOKIE, CSRF_FIELD
from tests.dashboard.support import ANN, Site, site
from tests.dashboard.test_views import _csrf
from tests.server.http_support import audit_records

SCOPED = "scoped-token-0004"


class Empty(BaseModel):
    pass


def _flow(name: str) -> Workflow[Empty]:
    flow = Workflow(name, version="1", input=Empty)

    @flow.node()
    async def only(ctx: NodeContext[Empty]) -> int:
        return 1

    return flow


class _Grants:
    """One stored token of ``ann``, scoped to the workflow ``job``."""

    async def record(self, token: str) -> TokenRecord | None:
        if token != SCOPED:
            return None
        return TokenRecord("0" * 12, "ann", "", ("workflows:job",), datetime.now(UTC))

    def seconds_left(self, record: TokenRecord) -> float | None:
        return None

    async def ended(self, token_ids: Collection[str]) -> dict[str, TokenState]:
        return {}


async def _cancelled(shown: Site, name: str) -> str:
    task = await shown.manager.create(name, owner="ann", workflow_version="1")
    await shown.manager.cancel(task.id)
    return task.id


def _dashboard_records(caplog: pytest.LogCaptureFixture) -> list[tuple[str, str, str | None]]:
    return [
        (r["action"], r["outcome"], r.get("reason"))
        for r in audit_records(caplog)
        if r.get("via") == "dashboard"
    ]


async def test_a_resume_is_refused_outside_the_tokens_workflow_scopes_and_past_the_quota(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="taskloom.audit")
    workflows = {"job": _flow("job"), "other": _flow("other")}
    async with site(workflows=workflows, stored=_Grants(), max_unfinished=1) as shown:
        other = await _cancelled(shown, "other")
        refused = await shown.post(f"/ui/tasks/{other}/resume", {}, token=SCOPED)
        assert refused.status_code == 404
        job = await _cancelled(shown, "job")
        queued = await shown.manager.create("job", owner="ann", workflow_version="1")
        over = await shown.post(f"/ui/tasks/{job}/resume", {}, token=SCOPED)
        assert over.status_code == 429
        assert "too many unfinished tasks" in over.text
        assert len((await shown.manager.list(owner="ann")).tasks) == 3  # nothing started
        await shown.manager.cancel(queued.id)
        done = await shown.post(f"/ui/tasks/{job}/resume", {}, token=SCOPED)
        assert done.status_code == 303
        assert done.headers["location"].endswith("?notice=resumed")
        # Cancel and list go by owner alone, as tasks/cancel and tasks/list over MCP do.
        still = await shown.manager.create("other", owner="ann", workflow_version="1")
        assert (await shown.page("/ui/", token=SCOPED)).text.count(still.id) >= 1
        assert (await shown.post(f"/ui/tasks/{still.id}/cancel", {}, token=SCOPED)).is_redirect
        assert (await shown.manager.get(still.id)).state is TaskState.CANCELLED
    assert _dashboard_records(caplog) == [
        ("create", "refused", "not found"),
        ("create", "refused", "quota"),
        ("create", "ok", None),
        ("cancel", "ok", None),
    ]


@pytest.mark.parametrize(
    "headers",
    [
        {"Origin": "http://evil.test"},
        {"Origin": "null"},
        {"Sec-Fetch-Site": "cross-site"},
        {"Referer": "http://evil.test/page"},
    ],
)
async def test_a_form_sent_from_another_site_is_refused_and_recorded(
    headers: dict[str, str], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="taskloom.audit")
    async with site() as shown:
        forged = await shown.http.post("/ui/login", data={"token": ANN}, headers=headers)
        assert forged.status_code == 403
        assert COOKIE not in forged.cookies
        own = await shown.http.post(
            "/ui/login", data={"token": ANN}, headers={"Origin": "http://ui.test"}
        )
        assert own.status_code == 303
        task = await shown.manager.create("job", owner="ann")
        csrf = _csrf((await shown.http.get(f"/ui/tasks/{task.id}")).text)
        cancel = await shown.http.post(
            f"/ui/tasks/{task.id}/cancel", data={CSRF_FIELD: csrf}, headers=headers
        )
        assert cancel.status_code == 403
        assert (await shown.manager.get(task.id)).state is TaskState.QUEUED
        assert (await shown.http.post("/ui/logout", headers=headers)).status_code == 403
    records = [(r["action"], r["outcome"], r.get("reason")) for r in audit_records(caplog)]
    assert records == [
        ("sign_in", "refused", "cross-site"),
        ("sign_in", "ok", None),
        ("cancel", "refused", "cross-site"),
    ]


async def test_a_task_page_says_only_the_notices_it_knows() -> None:
    async with site() as shown:
        task = await shown.manager.create("job", owner="ann")
        known = await shown.page(f"/ui/tasks/{task.id}?notice=cancelled")
        assert '<p class="notice" role="status">Cancelled.</p>' in known.text
        spoof = "Your session expired, sign in at evil.test"
        forged = await shown.page(f"/ui/tasks/{task.id}", params={"notice": spoof})
        assert forged.status_code == 200
        assert "evil.test" not in forged.text
        assert 'class="notice"' not in forged.text
