"""An SQLite store that cannot write (a lock held past the store's wait, a full disk)
answers a request with the retryable ``-32032`` and logs one line (ADR 0038)."""

import logging
import sqlite3
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from mcp.shared.memory import create_client_server_memory_streams
from mcp_types import ErrorData

from taskloom.bootstrap import open_engine
from taskloom.config import TaskloomSettings
from taskloom.engine.registry import WorkflowRegistry
from taskloom.engine.worker import WorkerSettings
from taskloom.persistence.sqlite import SqliteSettings, writer
from taskloom.server import ServerSettings, TaskServer
from taskloom.server.http import HttpService, HttpSettings
from taskloom.workflows.countdown import countdown
from tests.server.client import LegacyClient, open_client
from tests.server.http_support import (
    ANN,
    TOKENS,
    bearer,
    initialize_body,
    modern_headers,
    modern_request,
)

STORE_WAIT_S = 0.5


@asynccontextmanager
async def _client(path: Path) -> AsyncIterator[LegacyClient]:
    settings = TaskloomSettings(
        database=SqliteSettings(path=path, store_wait_s=STORE_WAIT_S, busy_timeout_ms=100),
        worker=WorkerSettings(poll_s=0.05, progress_interval_s=0),
        workflow_modules=(),
        load_entry_points=False,
        run_sweeper=False,
    )
    registry = WorkflowRegistry({countdown.name: countdown})
    async with open_engine(settings, workflows=registry) as engine:
        server = TaskServer(engine.manager, engine.workflows, ServerSettings(), runs=engine.runs)
        async with (
            create_client_server_memory_streams() as (client_streams, server_streams),
            anyio.create_task_group() as task_group,
        ):
            task_group.start_soon(lambda: server.serve(*server_streams))
            async with open_client(*client_streams, None) as client:
                yield client
            task_group.cancel_scope.cancel()


@contextmanager
def _locked(path: Path) -> Iterator[None]:
    """Another process's connection holding the file's write lock."""
    other = sqlite3.connect(path, isolation_level=None)
    try:
        other.execute("BEGIN EXCLUSIVE")
        yield
        other.execute("ROLLBACK")
    finally:
        other.close()


def _create() -> dict[str, Any]:
    return {"name": "countdown", "arguments": {"start": 1, "tick_s": 0}, "task": {}}


def _store_lines(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [record for record in caplog.records if record.name == "taskloom.store"]


def _assert_unavailable(error: Any) -> None:
    assert error.code == -32032, error
    assert error.data == {"reason": "store_unavailable", "retryable": True, "retryAfterSeconds": 1}
    assert "retry in 1 s" in error.message


async def test_a_lock_held_past_the_wait_is_a_retryable_answer_and_one_line(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    path = tmp_path / "tasks.db"
    async with _client(path) as client:
        before = (await client.list_tasks())["tasks"]
        with _locked(path):
            for _ in range(3):  # three refused creates, one line
                _assert_unavailable(await client.error("tools/call", _create()))
        assert (await client.list_tasks())["tasks"] == before  # nothing was stored
        task_id = await client.start("countdown", {"start": 1, "tick_s": 0})  # it is back
    lines = _store_lines(caplog)
    assert [record.levelno for record in lines] == [logging.WARNING, logging.INFO], lines
    assert f"SQLite database {path} is unavailable (OperationalError)" in lines[0].getMessage()
    assert "is back after an outage of" in lines[1].getMessage()
    loud = [record for record in caplog.records if record.levelno >= logging.WARNING]
    assert loud == lines[:1], [record.getMessage() for record in loud]
    assert not any(record.exc_info for record in caplog.records)
    assert task_id


async def test_a_full_disk_is_a_retryable_answer_and_one_line(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SQLITE_FULL injected at the driver boundary (a tiny tmpfs needs mount rights)."""
    caplog.set_level(logging.INFO)
    run_batch = writer._run_batch
    full = {"on": False}

    def filling(*args: Any) -> Any:
        if full["on"]:
            error = sqlite3.OperationalError("database or disk is full")
            error.sqlite_errorcode = sqlite3.SQLITE_FULL
            raise error
        return run_batch(*args)

    monkeypatch.setattr(writer, "_run_batch", filling)
    path = tmp_path / "tasks.db"
    async with _client(path) as client:
        before = (await client.list_tasks())["tasks"]
        full["on"] = True
        _assert_unavailable(await client.error("tools/call", _create()))
        _assert_unavailable(await client.error("tools/call", _create()))
        full["on"] = False
        assert (await client.list_tasks())["tasks"] == before
        assert await client.start("countdown", {"start": 1, "tick_s": 0})
    lines = _store_lines(caplog)
    assert [record.levelno for record in lines] == [logging.WARNING, logging.INFO], lines
    assert "is unavailable (OperationalError)" in lines[0].getMessage()
    assert not any(record.exc_info for record in caplog.records)


async def test_over_http_a_locked_store_is_a_503_with_retry_after_on_both_generations(
    tmp_path: Path,
) -> None:
    path = tmp_path / "tasks.db"
    settings = TaskloomSettings(
        database=SqliteSettings(path=path, store_wait_s=STORE_WAIT_S, busy_timeout_ms=100),
        workflow_modules=(),
        load_entry_points=False,
        run_sweeper=False,
    )
    registry = WorkflowRegistry({countdown.name: countdown})
    async with open_engine(settings, workflows=registry) as engine:
        server = TaskServer(engine.manager, engine.workflows, ServerSettings(), runs=engine.runs)
        service = HttpService(
            server, HttpSettings(port=0, tokens=TOKENS), store_wait_s=STORE_WAIT_S
        )
        async with anyio.create_task_group() as task_group:
            with anyio.fail_after(10):
                port = await task_group.start(service.serve)
            url = f"http://127.0.0.1:{port}/mcp"
            try:
                async with httpx2.AsyncClient(timeout=20) as http:
                    opened = await http.post(url, json=initialize_body(), headers=bearer(ANN))
                    session = {**bearer(ANN), "Mcp-Session-Id": opened.headers["mcp-session-id"]}
                    note = {"jsonrpc": "2.0", "method": "notifications/initialized"}
                    await http.post(url, json=note, headers=session)
                    legacy = {
                        "jsonrpc": "2.0",
                        "id": 2,
                        "method": "tools/call",
                        "params": _create(),
                    }
                    modern = modern_request("tools/call", _create(), 3, tasks=True)
                    with _locked(path):
                        answers = [
                            await http.post(url, json=legacy, headers=session),
                            await http.post(
                                url,
                                json=modern,
                                headers=modern_headers(ANN, "tools/call", "countdown"),
                            ),
                        ]
                    fine = await http.post(url, json=legacy, headers=session)
            finally:
                service.stop()
    for answer, request_id in zip(answers, (2, 3), strict=True):
        assert answer.status_code == 503, answer.text
        assert answer.headers["retry-after"] == "1"
        assert answer.headers["content-type"] == "application/json"
        body = answer.json()
        assert body["id"] == request_id
        _assert_unavailable(ErrorData.model_validate(body["error"]))
    assert fine.status_code == 200
