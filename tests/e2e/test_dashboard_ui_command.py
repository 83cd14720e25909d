"""``taskloom ui --db PATH`` as a real process (ADR 0030): the dashboard of a database
alone, read-only unless ``--allow-actions``, one line for a missing database."""

import json
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import httpx2
import pytest

from taskloom.engine.manager import TaskManager
from taskloom.engine.states import TaskState
from taskloom.persistence.sqlite import SqliteTaskStore
from tests.e2e.browser import require_browser, screenshot_folder
from tests.e2e.test_dashboard_browser import chromium
from tests.helpers import checkout_env, eventually, free_port

pytestmark = pytest.mark.slow


@asynccontextmanager
async def ui(db: Path, *flags: str) -> AsyncIterator[str]:
    """``taskloom ui`` on a free port; the dashboard's URL. SIGINT and awaited at the end."""
    port = free_port()
    env = checkout_env()
    env.pop("TASKLOOM_TOKENS", None)
    command = [sys.executable, "-m", "taskloom", "ui", "--db", str(db), "--port", str(port)]
    log = db.parent / f"ui-{port}.log"
    with log.open("w") as errlog:
        process = await anyio.open_process([*command, *flags], env=env, stderr=errlog)
        try:
            url = f"http://127.0.0.1:{port}/ui"
            async with httpx2.AsyncClient(timeout=5) as http:

                async def listening() -> bool:
                    try:
                        return (await http.get(f"{url}/")).status_code == 200
                    except httpx2.TransportError:
                        return False

                await eventually(listening, within_s=30, every_s=0.05)
            yield url
        finally:
            process.send_signal(signal.SIGINT)
            with anyio.fail_after(20):
                assert await process.wait() == 0
    assert "serving the dashboard at" in log.read_text()


async def _database(path: Path) -> list[str]:
    async with SqliteTaskStore.open(path) as store:
        manager = TaskManager(store)
        return [
            (await manager.create("countdown", {"start": 1}, owner=owner)).id
            for owner in ("ann", "bob", None)
        ]


async def test_read_only_by_default_then_actions_when_allowed(tmp_path: Path) -> None:
    db = tmp_path / "tasks.db"
    ann, bob, local = await _database(db)
    async with ui(db) as url, httpx2.AsyncClient(timeout=10) as http:
        page = await http.get(f"{url}/")
        assert all(task_id in page.text for task_id in (ann, bob, local))  # the operator
        assert "(read-only)" in page.text
        refused = await http.post(f"{url}/tasks/{ann}/cancel")
        assert refused.status_code == 403
        assert (await http.get("/".join(url.split("/")[:3]) + "/mcp")).status_code == 307
    async with SqliteTaskStore.open(db) as store:
        assert (await TaskManager(store).get(ann)).state is TaskState.QUEUED
    before = _logs(tmp_path)
    flags = ("--allow-actions", "--log-level", "info", "--log-format", "json")
    async with ui(db, *flags) as url, httpx2.AsyncClient(timeout=10) as http:
        page = await http.get(f"{url}/tasks/{ann}")
        assert "Cancel run" in page.text
        csrf = page.text.split('name="taskloom_csrf" value="')[1].split('"')[0]
        done = await http.post(f"{url}/tasks/{ann}/cancel", data={"taskloom_csrf": csrf})
        assert done.status_code == 303
    async with SqliteTaskStore.open(db) as store:
        assert (await TaskManager(store).get(ann)).state is TaskState.CANCELLED
    (log,) = _logs(tmp_path) - before
    audits = _audit_records(log)
    assert [(a["action"], a["outcome"], a["task_id"], a["principal"]) for a in audits] == [
        ("cancel", "ok", ann, "operator")
    ]


def _logs(folder: Path) -> set[Path]:
    return set(folder.glob("ui-*.log"))


def _audit_records(log: Path) -> list[dict[str, str]]:
    records = [json.loads(line) for line in log.read_text().splitlines() if line.startswith("{")]
    return [record for record in records if record.get("logger") == "taskloom.audit"]


def test_a_missing_database_is_one_line(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "taskloom", "ui", "--db", str(tmp_path / "none.db")],
        capture_output=True,
        text=True,
        env=checkout_env(),
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    assert done.stderr == (
        f"taskloom: error: no taskloom database at {tmp_path / 'none.db'} "
        "(pass --db PATH or set TASKLOOM_DB)\n"
    )
    assert not (tmp_path / "none.db").exists()


async def test_the_versions_section_fits_a_phone(tmp_path: Path) -> None:
    """At 390 px the operator's task list, "Workflow versions" included, is no wider than
    the screen: the versions table scrolls inside its own box, not the page."""
    require_browser()
    db = tmp_path / "tasks.db"
    await _database(db)
    with anyio.fail_after(60):
        async with ui(db) as url, chromium() as browser:
            context = await browser.new_context(
                viewport={"width": 390, "height": 844}, is_mobile=True
            )
            phone = await context.new_page()
            await phone.goto(f"{url}/")
            section = phone.get_by_role("region", name="Workflow versions")
            await section.wait_for(timeout=10_000)
            assert await section.locator("tbody tr").count() >= 1
            width = await phone.evaluate("document.documentElement.scrollWidth")
            assert width <= 390, width
            placed = await section.bounding_box()
            assert placed is not None
            assert placed["x"] >= 0
            assert placed["x"] + placed["width"] <= 390, placed
            shots = screenshot_folder(tmp_path)
            await phone.screenshot(path=shots / "versions-390.png", full_page=True)
