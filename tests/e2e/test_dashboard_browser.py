"""The dashboard (issue 18) in a real headless Chromium against a real ``taskloom serve
--http``, two principals: ann signs in, watches a running workflow's nodes change state
without reloading, answers a question (a wrong answer first), cancels a run and resumes
a failed one; bob sees none of it. Every action is in the audit trail. Each page is
saved as a screenshot (see ``tests/e2e/browser.py``)."""

import signal
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
import pytest

from tests.e2e.browser import CHROMIUM, require_browser, screenshot_folder
from tests.helpers import checkout_env, free_port, until_http_listening
from tests.server.http_support import ANN, BOB, http_client

if TYPE_CHECKING:
    from playwright.async_api import Browser, Page

WAIT_MS = 10_000
pytestmark = pytest.mark.slow


@dataclass(frozen=True)
class Server:
    base: str
    mcp: str
    log: Path
    broken: Path


@asynccontextmanager
async def serving(tmp_path: Path, address: str | None = None) -> AsyncIterator[Server]:
    """``taskloom serve --http`` with the dashboard's test workflows, ann's and bob's
    tokens (at *address*, else a free port); interrupted (SIGINT) and awaited on the way
    out."""
    address = address or f"127.0.0.1:{free_port()}"
    broken = tmp_path / "broken"
    broken.touch()
    env = checkout_env() | {
        "TASKLOOM_HTTP": address,
        "TASKLOOM_TOKENS": f"ann:{ANN},bob:{BOB}",
        "TASKLOOM_WORKFLOWS": "tests.e2e.dashboard_flows",
        "TASKLOOM_E2E_BROKEN": str(broken),
        "TASKLOOM_LOG_LEVEL": "info",
    }
    command = [sys.executable, "-m", "taskloom", "serve", "--db", str(tmp_path / "x.db")]
    log = tmp_path / "stderr.log"
    with log.open("w") as errlog:
        process = await anyio.open_process(command, env=env, stdout=errlog, stderr=errlog)
        try:
            await until_http_listening(f"http://{address}/mcp")
            yield Server(f"http://{address}/ui", f"http://{address}/mcp", log, broken)
        finally:
            process.send_signal(signal.SIGINT)
            with anyio.fail_after(20):
                await process.wait()


@asynccontextmanager
async def chromium() -> AsyncIterator["Browser"]:
    from playwright.async_api import async_playwright

    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(
            executable_path=str(CHROMIUM), args=["--no-sandbox"]
        )
        try:
            yield browser
        finally:
            await browser.close()


async def sign_in(browser: "Browser", server: Server, token: str, **context: Any) -> "Page":
    page = await (await browser.new_context(**context)).new_page()
    page.set_default_timeout(WAIT_MS)
    await page.goto(f"{server.base}/")
    assert page.url.endswith("/ui/login")
    await page.get_by_label("Access token").fill(token)
    await page.get_by_role("button", name="Sign in").click()
    await page.wait_for_url(f"{server.base}/")
    return page


async def node_state(page: "Page", node: str) -> str | None:
    return await page.locator(f'g[data-node="{node}"]').get_attribute("data-state")


async def svg_text(page: "Page", selector: str) -> str:
    return await page.locator(selector).text_content() or ""


async def until_node(page: "Page", node: str, state: str) -> None:
    await page.locator(f'g[data-node="{node}"][data-state="{state}"]').wait_for()


async def until_task(page: "Page", state: str) -> None:
    await page.locator(f'.summary .pill[data-state="{state}"]').wait_for()


async def wire_history(page: "Page") -> list[str]:
    """The task's stored state changes as the wire names them (queued and running are
    both ``working``), repeats folded."""
    changes = page.locator(".history li.change")
    states = [await each.get_attribute("data-state") for each in await changes.all()]
    wire = ["working" if state in ("queued", "running") else str(state) for state in states]
    return [state for index, state in enumerate(wire) if index == 0 or wire[index - 1] != state]


async def test_two_principals_use_the_dashboard_in_a_real_browser(tmp_path: Path) -> None:
    require_browser()
    shots = screenshot_folder(tmp_path)
    with anyio.fail_after(90):
        async with serving(tmp_path) as server, chromium() as browser:
            async with http_client(server.mcp, ANN) as ann_mcp:
                crawl = await ann_mcp.start("crawl", {})
                fragile = await ann_mcp.start("fragile", {})
                approval = await ann_mcp.start("approval", {})
            async with http_client(server.mcp, BOB) as bob_mcp:
                bobs = await bob_mcp.start("crawl", {})

            login = await (await browser.new_context()).new_page()
            await login.goto(f"{server.base}/login")
            await login.screenshot(path=shots / "dashboard-login.png")
            await login.get_by_label("Access token").fill("not-a-token")
            await login.get_by_role("button", name="Sign in").click()
            assert "not valid" in await login.get_by_role("alert").inner_text()

            ann = await sign_in(browser, server, ANN, viewport={"width": 1200, "height": 800})
            rows = ann.locator("tbody tr[data-task]")
            assert {await row.get_attribute("data-task") for row in await rows.all()} == {
                crawl,
                fragile,
                approval,
            }

            # A new task appears on the open list, then its nodes change state on its
            # open page, no reload.
            async with http_client(server.mcp, ANN) as ann_mcp:
                pipeline = await ann_mcp.start("pipeline", {})
            await ann.locator(f'tr[data-task="{pipeline}"] a').click()
            await ann.wait_for_url(f"{server.base}/tasks/{pipeline}")
            assert await node_state(ann, "report") == "not started"
            await until_node(ann, "score", "running")
            await ann.screenshot(path=shots / "dashboard-task-running.png", full_page=True)
            await until_node(ann, "report", "completed")
            await until_task(ann, "completed")
            assert "4 items: 4 completed" in await svg_text(ann, "svg.graph")
            assert "report #1" in await svg_text(ann, "svg.timeline")
            await ann.screenshot(path=shots / "dashboard-task-completed.png", full_page=True)

            # A question: a wrong answer is refused with the schema's reason, then answered.
            await ann.goto(f"{server.base}/tasks/{approval}")
            await ann.get_by_label("Reviewer").wait_for()
            await ann.screenshot(path=shots / "dashboard-question.png", full_page=True)
            await ann.get_by_label("Reviewer").fill("x")
            await ann.get_by_role("button", name="Answer").click()
            assert "too short" in await ann.get_by_role("alert").inner_text()
            await ann.get_by_label("Reviewer").fill("dana")
            await ann.get_by_label("Approve the release").check()
            await ann.get_by_label("Risk").select_option("high")
            await ann.get_by_role("button", name="Answer").click()
            await until_task(ann, "completed")
            assert '"approved by dana"' in await ann.locator("pre").nth(1).inner_text()
            # Its stored history, live: asked, answered, completed.
            await ann.locator('.history li.change[data-state="completed"]').wait_for()
            assert await wire_history(ann) == ["working", "input_required", "working", "completed"]
            causes = await ann.locator(".history li.change .cause").all_inner_texts()
            assert causes[0] == "created"
            assert {"question", "answer"} <= set(causes)
            assert causes[-1] == "completed"

            # Cancel a run.
            await ann.goto(f"{server.base}/tasks/{crawl}")
            await until_node(ann, "walk", "running")
            await ann.get_by_role("button", name="Cancel run").click()
            await until_task(ann, "cancelled")

            # Resume a failed run from its failed node, once the cause is gone.
            await ann.goto(f"{server.base}/tasks/{fragile}")
            await until_task(ann, "failed")
            assert "the input file is truncated" in await ann.locator(".error").inner_text()
            await ann.screenshot(path=shots / "dashboard-task-failed.png", full_page=True)
            server.broken.unlink()
            await ann.get_by_role("button", name="Resume from the failed node").click()
            await ann.wait_for_url(lambda url: f"/tasks/{fragile}" not in url)
            await until_task(ann, "completed")
            resumed = ann.url.split("/tasks/")[1].split("?")[0]
            assert await node_state(ann, "download") == "completed"
            assert "download #" not in await svg_text(ann, "svg.timeline")  # kept

            await ann.goto(f"{server.base}/")
            await ann.locator(f'tr[data-task="{resumed}"]').wait_for()
            await ann.screenshot(path=shots / "dashboard-list.png", full_page=True)
            phone = await sign_in(
                browser, server, ANN, viewport={"width": 390, "height": 844}, is_mobile=True
            )
            await phone.goto(f"{server.base}/tasks/{pipeline}")
            await phone.screenshot(path=shots / "dashboard-phone.png", full_page=True)

            # Bob sees only his own task, and none of ann's pages.
            bob = await sign_in(browser, server, BOB)
            bob_rows = bob.locator("tbody tr[data-task]")
            assert [await row.get_attribute("data-task") for row in await bob_rows.all()] == [bobs]
            for task_id in (crawl, fragile, approval, pipeline, resumed):
                response = await bob.goto(f"{server.base}/tasks/{task_id}")
                assert response is not None
                assert response.status == 404
            await bob.goto(f"{server.base}/?q={pipeline[:10]}")
            assert await bob.locator("tbody tr[data-task]").count() == 0

    audit = [line for line in server.log.read_text().splitlines() if "taskloom.audit" in line]
    dashboard = [line for line in audit if "via=dashboard" in line]
    assert any("answer refused principal=ann" in line for line in dashboard), dashboard
    assert any("answer ok principal=ann" in line for line in dashboard), dashboard
    assert any("cancel ok principal=ann" in line and crawl in line for line in dashboard)
    assert any("create ok principal=ann" in line and resumed in line for line in dashboard)
    assert sum("read refused principal=bob" in line for line in dashboard) == 5
