"""Issue 26, items 1 and 6: every node box of a run is drawn in the state a person should
read, at 1280 and 390 px, in a real Chromium against a real ``taskloom serve --http``.

Runs: three cancelled ones (from the dashboard, from ``taskloom tasks cancel`` in another
process, and over MCP while a map runs), a failed one, one waiting for an answer and a
completed map. No node of a cancelled run is failed, retrying, running or waiting, its
page never speaks of a failed node and offers to resume "from where it stopped". On a
phone the task list keeps its state and date columns on screen, the graph says it
scrolls, and a failed node is one tap away.
"""

import sys
from pathlib import Path
from typing import TYPE_CHECKING

import anyio
import pytest

from tests.e2e.browser import require_browser, screenshot_folder
from tests.e2e.test_dashboard_browser import (
    WAIT_MS,
    Server,
    chromium,
    serving,
    sign_in,
    until_node,
    until_task,
)
from tests.e2e.test_stdio_server import REPOSITORY
from tests.server.http_support import ANN, http_client

if TYPE_CHECKING:
    from playwright.async_api import FloatRect, Route

pytestmark = pytest.mark.slow

WIDTHS = (1280, 390)
CANCELLED_NEVER = frozenset({"failed", "retrying", "running", "waiting"})


async def _cancel_from_another_process(server_db: Path, task_id: str) -> None:
    await anyio.run_process(
        [sys.executable, "-m", "taskloom", "tasks", "cancel", task_id, "--db", str(server_db)],
        check=True,
        cwd=REPOSITORY,
    )


def _on_a_phone(placed: "FloatRect") -> bool:
    """The box is within the 390 px of the screen."""
    return placed["x"] >= 0 and placed["x"] + placed["width"] <= 390


async def _boxes(page: object, server: Server, task_id: str) -> dict[str, str]:
    """Every node box of *task_id*'s page: name to drawn state."""
    from playwright.async_api import Page

    assert isinstance(page, Page)
    await page.goto(f"{server.base}/tasks/{task_id}")
    boxes = page.locator("svg.graph g.node")
    found = {}
    for box in await boxes.all():
        name = await box.get_attribute("data-node")
        state = await box.get_attribute("data-state")
        assert name is not None
        assert state is not None
        found[name] = state
        classes = (await box.get_attribute("class") or "").split()
        assert state.replace(" ", "-") in classes  # drawn (coloured) as it is named
    return found


async def test_every_node_box_shows_what_happened_at_1280_and_390_px(tmp_path: Path) -> None:
    require_browser()
    shots = screenshot_folder(tmp_path)
    with anyio.fail_after(110):
        async with serving(tmp_path) as server, chromium() as browser:
            async with http_client(server.mcp, ANN) as mcp:
                by_dashboard = await mcp.start("crawl", {})
                by_cli = await mcp.start("crawl", {})
                failed = await mcp.start("fragile", {})
                waiting = await mcp.start("approval", {})
                mapped = await mcp.start("pipeline", {})

                desk = await sign_in(browser, server, ANN, viewport={"width": 1280, "height": 900})
                await desk.goto(f"{server.base}/tasks/{by_dashboard}")
                await until_node(desk, "walk", "running")
                await desk.get_by_role("button", name="Cancel run").click()
                await until_task(desk, "cancelled")

                await desk.goto(f"{server.base}/tasks/{by_cli}")
                await until_node(desk, "walk", "running")
                await _cancel_from_another_process(tmp_path / "x.db", by_cli)
                await until_task(desk, "cancelled")

                map_cancelled = await mcp.start("pipeline", {})
                await desk.goto(f"{server.base}/tasks/{map_cancelled}")
                await until_node(desk, "score", "running")
                await mcp.cancel(map_cancelled)
                await until_task(desk, "cancelled")

                await desk.goto(f"{server.base}/tasks/{mapped}")
                await until_task(desk, "completed")
                await desk.goto(f"{server.base}/tasks/{failed}")
                await until_task(desk, "failed")
                await desk.goto(f"{server.base}/tasks/{waiting}")
                await until_task(desk, "input_required")

            expected = {
                by_dashboard: {"walk": "cancelled"},
                by_cli: {"walk": "cancelled"},
                failed: {"download": "completed", "parse": "failed", "publish": "not started"},
                waiting: {"decide": "waiting"},
                mapped: {
                    "fetch": "completed",
                    "settings": "completed",
                    "score": "completed",
                    "report": "completed",
                },
            }
            phone = await sign_in(
                browser, server, ANN, viewport={"width": 390, "height": 844}, is_mobile=True
            )
            for width, page in zip(WIDTHS, (desk, phone), strict=True):
                for task_id, states in expected.items():
                    assert await _boxes(page, server, task_id) == states, (width, task_id)
                boxes = await _boxes(page, server, map_cancelled)
                assert set(boxes) == {"fetch", "settings", "score", "report"}
                assert boxes["score"] == "cancelled", boxes  # the map under way when cancelled
                assert boxes["report"] == "not started"
                for task_id in (by_dashboard, by_cli, map_cancelled):
                    boxes = await _boxes(page, server, task_id)
                    assert not CANCELLED_NEVER & set(boxes.values()), boxes
                    text = (await page.locator("main").inner_text()).lower()
                    assert "failed node" not in text
                    assert "failed:" not in text
                    await page.get_by_role("button", name="Resume from where it stopped").wait_for()
                await _boxes(page, server, mapped)
                assert "4 items: 4 completed" in (
                    await page.locator('g[data-node="score"]').text_content() or ""
                )
                await page.screenshot(path=shots / f"states-map-{width}.png", full_page=True)

            # On the phone: a failed node is one tap away, and the graph says it scrolls.
            # The page's live region is fetched again when the run's events end: held
            # until after the tap, that swap must leave the tapped node where it was, and
            # the nodes' table the reader opened open.
            released = anyio.Event()

            async def held(route: "Route") -> None:
                await released.wait()
                await route.continue_()

            await phone.route("**/tasks/*?fragment=1", held)
            try:
                await _boxes(phone, server, failed)
                assert await phone.locator(".scroll-cue").first.is_visible()
                await phone.get_by_role("link", name="parse").click()
                parse = phone.locator('g[data-node="parse"] rect').first
                await parse.wait_for()
                placed = await parse.bounding_box()
                assert placed is not None
                assert _on_a_phone(placed), placed
                await phone.get_by_text("Nodes as a table").click()  # opened before the swap
            finally:
                released.set()  # never a request held past a failure
            await phone.locator("#live[data-refreshed]").wait_for(state="attached", timeout=WAIT_MS)
            await phone.unroute("**/tasks/*?fragment=1")
            placed = await parse.bounding_box()
            assert placed is not None
            assert _on_a_phone(placed), ("after the live swap", placed)
            assert (
                await phone.locator("details:has(summary:text('Nodes as a table'))").get_attribute(
                    "open"
                )
                is not None
            ), "the swap folded the table the reader had opened"
            await phone.get_by_role("button", name="Resume from the failed node").wait_for()
            await phone.screenshot(path=shots / "states-failed-390.png", full_page=True)

            # The task list at 390 px: each row's state and date are on screen.
            await phone.goto(f"{server.base}/")
            rows = phone.locator("tbody tr[data-task]")
            await rows.first.wait_for(timeout=WAIT_MS)
            assert await rows.count() == 6
            for row in await rows.all():
                for cell in ("td.state .pill", "td.created"):
                    placed = await row.locator(cell).bounding_box()
                    assert placed is not None, cell
                    assert _on_a_phone(placed), (cell, placed)
            width = await phone.evaluate("document.documentElement.scrollWidth")
            assert width <= 390  # nothing wider than the phone: no hidden column
            await phone.screenshot(path=shots / "states-list-390.png", full_page=True)
