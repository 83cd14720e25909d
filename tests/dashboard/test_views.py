"""The dashboard's pages and actions (ADR 0030), over ASGI: principals, filters, pages,
the sign-in cookie, CSRF tokens, answers checked like every answer, the audit trail."""

import logging
import re

import httpx2
import pytest

from taskloom.engine.manager import TaskManager
from taskloom.engine.models import InputRequest
from taskloom.engine.states import TaskState
from taskloom.persistence.memory import InMemoryTaskStore
from taskloom.server.dashboard import extra
from taskloom.server.dashboard.access import COOKIE, CSRF_FIELD
from taskloom.server.dashboard.hub import ChangeHub
from taskloom.server.dashboard.listing import PAGE_SIZE
from taskloom.server.dashboard.mount import ui_app
from tests.dashboard.support import ANN, BOB, Site, site
from tests.server.http_support import audit_records

QUESTION = {
    "type": "object",
    "properties": {
        "reviewer": {"type": "string", "minLength": 2, "title": "Reviewer"},
        "count": {"type": "integer"},
        "ok": {"type": "boolean"},
    },
    "required": ["reviewer"],
}


def _rows(html: str) -> list[str]:
    return re.findall(r'<tr data-task="([^"]+)">', html)


def _csrf(html: str) -> str:
    found = re.search(rf'name="{CSRF_FIELD}" value="([0-9a-f]+)"', html)
    assert found is not None, html
    return found.group(1)


async def _asking(shown: Site, owner: str = "ann") -> str:
    manager = shown.manager
    task = await manager.start((await manager.create("approval", owner=owner)).id)
    request = InputRequest(message="Who reviews?", requested_schema=QUESTION)
    await manager.require_input(task.id, "decide#1", request)
    return task.id


async def test_each_principal_sees_only_its_own_tasks() -> None:
    async with site() as shown:
        mine = [(await shown.manager.create("job", owner="ann")).id for _ in range(3)]
        theirs = (await shown.manager.create("job", owner="bob")).id
        page = await shown.page("/ui/")
        assert page.status_code == 200
        assert _rows(page.text) == mine[::-1]  # newest first
        assert re.search(r"queued</span> 3</a>", page.text)
        assert (await shown.page(f"/ui/tasks/{theirs}")).status_code == 404
        assert (await shown.page(f"/ui/tasks/{mine[0]}", token=BOB)).status_code == 404
        assert _rows((await shown.page("/ui/", token=BOB)).text) == [theirs]
        assert (await shown.page(f"/ui/?q={mine[0]}", token=BOB)).status_code == 200


async def test_without_a_token_the_form_asks_for_one_and_a_bad_one_is_refused() -> None:
    async with site() as shown:
        page = await shown.page("/ui/", token=None)
        assert (page.status_code, page.headers["location"]) == (303, "/ui/login")
        assert (await shown.page("/ui/", token="nope")).status_code == 401
        form = await shown.page("/ui/login", token=None)
        assert '<label for="token">Access token</label>' in form.text
        refused = await shown.http.post("/ui/login", data={"token": "nope"})
        assert refused.status_code == 401
        assert "not valid" in refused.text
        assert COOKIE not in refused.headers.get("set-cookie", "")


async def test_signing_in_stores_the_token_in_a_strict_http_only_cookie() -> None:
    async with site() as shown:
        await shown.manager.create("job", owner="ann")
        signed = await shown.http.post("/ui/login", data={"token": ANN})
        assert signed.status_code == 303
        cookie = signed.headers["set-cookie"]
        assert cookie.startswith(f"{COOKIE}={ANN};")
        for attribute in ("HttpOnly", "Path=/ui", "SameSite=strict"):
            assert attribute.lower() in cookie.lower(), cookie
        shown.http.cookies.set(COOKIE, ANN)
        page = await shown.http.get("/ui/")
        assert len(_rows(page.text)) == 1
        assert "Sign out" in page.text
        out = await shown.http.post("/ui/logout")
        assert f'{COOKIE}=""' in out.headers["set-cookie"]


async def test_a_form_post_without_its_csrf_token_is_refused_and_recorded(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="taskloom.audit")
    async with site() as shown:
        task = await shown.manager.create("job", owner="ann")
        shown.http.cookies.set(COOKIE, ANN)
        refused = await shown.http.post(f"/ui/tasks/{task.id}/cancel", data={CSRF_FIELD: "0"})
        assert refused.status_code == 403
        assert (await shown.manager.get(task.id)).state is TaskState.QUEUED
        page = await shown.http.get(f"/ui/tasks/{task.id}")
        done = await shown.http.post(
            f"/ui/tasks/{task.id}/cancel", data={CSRF_FIELD: _csrf(page.text)}
        )
        assert done.status_code == 303
        assert (await shown.manager.get(task.id)).state is TaskState.CANCELLED
    records = [r for r in audit_records(caplog) if r.get("via") == "dashboard"]
    assert [(r["action"], r["outcome"], r.get("reason")) for r in records] == [
        ("cancel", "refused", "csrf"),
        ("cancel", "ok", None),
    ]
    assert all(r["principal"] == "ann" and r["task_id"] == task.id for r in records)


async def test_a_bearer_header_needs_no_csrf_token_and_cannot_reach_another_task(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="taskloom.audit")
    async with site() as shown:
        task = await shown.manager.create("job", owner="ann")
        assert (await shown.post(f"/ui/tasks/{task.id}/cancel", {}, token=BOB)).status_code == 404
        assert (await shown.post(f"/ui/tasks/{task.id}/cancel", {})).status_code == 303
        again = await shown.post(f"/ui/tasks/{task.id}/cancel", {})
        assert again.headers["location"].endswith("?notice=already-ended")
    outcomes = [(r["principal"], r["outcome"]) for r in audit_records(caplog)]
    assert outcomes == [("bob", "refused"), ("ann", "ok"), ("ann", "refused")]


async def test_an_answer_is_checked_against_the_question_schema() -> None:
    async with site() as shown:
        task_id = await _asking(shown)
        page = await shown.page(f"/ui/tasks/{task_id}")
        assert '<label for="f-1-reviewer">Reviewer' in page.text
        assert 'type="checkbox" id="f-3-ok"' in page.text
        bad = await shown.post(
            f"/ui/tasks/{task_id}/answer", {"taskloom_question": "decide#1", "reviewer": "x"}
        )
        assert bad.status_code == 422
        assert "too short" in bad.text
        assert (await shown.manager.get(task_id)).state is TaskState.INPUT_REQUIRED
        good = await shown.post(
            f"/ui/tasks/{task_id}/answer",
            {"taskloom_question": "decide#1", "reviewer": "dana", "count": "3", "ok": "on"},
        )
        assert good.status_code == 303
        answered = await shown.manager.get(task_id)
        assert answered.input_responses == {
            "decide#1": {"reviewer": "dana", "count": 3, "ok": True}
        }
        gone = await shown.post(
            f"/ui/tasks/{task_id}/answer", {"taskloom_question": "decide#1", "reviewer": "eve"}
        )
        assert gone.headers["location"].endswith("?notice=not-pending")


async def test_read_only_dashboards_and_read_scoped_tokens_change_nothing() -> None:
    async with site(allow_actions=False) as shown:
        task = await shown.manager.create("job", owner="ann")
        page = await shown.page(f"/ui/tasks/{task.id}")
        assert "Cancel run" not in page.text
        assert "(read-only)" in page.text
        assert (await shown.post(f"/ui/tasks/{task.id}/cancel", {})).status_code == 403
        assert (await shown.manager.get(task.id)).state is TaskState.QUEUED


async def test_filters_search_and_pages() -> None:
    async with site() as shown:
        manager = shown.manager
        old = await manager.create("report", owner="ann")
        shown.clock.advance(2 * 86_400)
        jobs = [(await manager.create("job", owner="ann")).id for _ in range(PAGE_SIZE + 2)]
        await manager.cancel(jobs[0])
        assert _rows((await shown.page("/ui/?workflow=report")).text) == [old.id]
        assert _rows((await shown.page("/ui/?state=cancelled")).text) == [jobs[0]]
        recent = _rows((await shown.page("/ui/?since=24h")).text)
        assert old.id not in recent
        assert len(recent) == PAGE_SIZE
        found = await shown.page(f"/ui/?q={old.id}")
        assert found.headers["location"] == f"/ui/tasks/{old.id}"
        assert _rows((await shown.page(f"/ui/?q={old.id[:10]}")).text) == [old.id]
        first = await shown.page("/ui/")
        assert _rows(first.text) == jobs[::-1][:PAGE_SIZE]
        older = re.search(r'href="(/ui/\?cursor=[^"]+)" rel="next"', first.text)
        assert older is not None
        second = await shown.page(older.group(1).replace("&amp;", "&"))
        assert _rows(second.text) == [jobs[1], jobs[0], old.id]
        for bad in ("state=nope", "since=2y", "cursor=forged", f"q={'x' * 300}"):
            assert (await shown.page(f"/ui/?{bad}")).status_code == 400, bad


async def test_counts_stop_at_the_cap(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("taskloom.server.dashboard.listing.COUNT_LIMIT", 2)
    async with site() as shown:
        for _ in range(3):
            await shown.manager.create("job", owner="ann")
        await shown.manager.cancel((await shown.manager.create("job", owner="ann")).id)
        page = (await shown.page("/ui/")).text
        assert re.search(r"queued</span> 2\+</a>", page)
        assert re.search(r"cancelled</span> 1</a>", page)


async def test_without_tokens_the_local_user_sees_its_tasks_and_the_operator_all() -> None:
    async with site(tokens=None) as shown:
        local = await shown.manager.create("job", owner=None)
        await shown.manager.create("job", owner="ann")
        assert _rows((await shown.page("/ui/", token=None)).text) == [local.id]
    async with site(tokens=None, operator=True, allow_actions=False) as shown:
        await shown.manager.create("job", owner=None)
        await shown.manager.create("job", owner="ann")
        assert len(_rows((await shown.page("/ui/", token=None)).text)) == 2


async def test_pages_forbid_inline_scripts_and_caching() -> None:
    async with site() as shown:
        page = await shown.page("/ui/")
        assert "script-src 'self'" in page.headers["content-security-policy"]
        assert page.headers["cache-control"] == "no-store"
        assert "<script>" not in page.text
        asset = await shown.page("/ui/static/app.js", token=None)
        assert asset.status_code == 200
        assert "text/event-stream" in asset.text


async def test_without_the_ui_extra_ui_answers_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("taskloom.server.dashboard.mount.ui_available", lambda: False)
    store = InMemoryTaskStore()
    app = ui_app(TaskManager(store), store, {}, ChangeHub(), authenticator=None)
    transport = httpx2.ASGITransport(app=app)
    async with httpx2.AsyncClient(transport=transport, base_url="http://ui.test") as http:
        answer = await http.get("/ui/tasks/x")
    assert answer.status_code == 503
    assert answer.text == extra.MISSING_UI + "\n"
    assert "pip install 'taskloom[ui]'" in answer.text


def _history(html: str) -> list[tuple[str, str]]:
    """The task page's stored changes: (state, cause) in order."""
    return re.findall(
        r'<li class="change" data-state="([a-z_]+)">.*?<span class="cause">([a-z]+)</span>', html
    )


async def test_the_task_page_shows_the_stored_history_of_changes() -> None:
    async with site() as shown:
        task_id = await _asking(shown)
        await shown.manager.provide_input(task_id, "decide#1", {"reviewer": "Ann"})
        await shown.manager.complete(task_id, {"ok": True}, status_message="approved")
        page = await shown.page(f"/ui/tasks/{task_id}")
        assert _history(page.text) == [
            ("queued", "created"),
            ("running", "claimed"),
            ("input_required", "question"),
            ("running", "answer"),
            ("completed", "completed"),
        ]
        assert "</span>: Who reviews?</li>" in page.text
        assert "</span>: approved</li>" in page.text
        assert "were not kept" not in page.text


async def test_progress_is_one_history_line_that_reads_the_latest_message() -> None:
    async with site() as shown:
        manager = shown.manager
        task = await manager.start((await manager.create("job", owner="ann")).id)
        for tick in range(60):  # past the store's cap of 50 status-only rows
            await manager.report_progress(task.id, completed=tick, message=f"tick {tick}")
        page = await shown.page(f"/ui/tasks/{task.id}")
        assert len(_history(page.text)) == 2
        assert re.findall(
            r"<span class=\"progress-line\" data-progress>([^<]*)</span>", page.text
        ) == ["tick 59"]
        assert "tick 49" not in page.text
        assert "were not kept" not in page.text
