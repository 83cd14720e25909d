"""`GET /metrics` on the HTTP endpoint: who may read it, which methods, which path wins."""

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import anyio
import httpx2

from taskloom.server import TaskServer
from taskloom.server.http import HttpService, HttpSettings
from tests.server.http_support import ACCEPT, ANN, TOKENS, bearer, initialize_body

EXPOSITION = "# HELP up Up.\n# TYPE up gauge\nup 1\n"


@asynccontextmanager
async def serving(
    task_server: TaskServer, metrics: Callable[[], str] | None, **settings: Any
) -> AsyncIterator[str]:
    """The endpoint with *metrics*; yields its base URL (no path)."""
    service = HttpService(task_server, HttpSettings(port=0, **settings), metrics=metrics)
    async with anyio.create_task_group() as task_group:
        with anyio.fail_after(10):
            port = await task_group.start(service.serve)
        try:
            yield f"http://127.0.0.1:{port}"
        finally:
            service.stop()


async def test_metrics_need_a_valid_token_when_tokens_are_configured(
    task_server: TaskServer,
) -> None:
    async with (
        serving(task_server, lambda: EXPOSITION, tokens=TOKENS) as base,
        httpx2.AsyncClient() as http,
    ):
        anonymous = await http.get(f"{base}/metrics")
        wrong = await http.get(f"{base}/metrics", headers=bearer(ANN + "x"))
        scraped = await http.get(f"{base}/metrics", headers=bearer(ANN))
        head = await http.head(f"{base}/metrics", headers=bearer(ANN))
        posted = await http.post(f"{base}/metrics", headers=bearer(ANN))
    assert (anonymous.status_code, wrong.status_code) == (401, 401)
    assert scraped.status_code == head.status_code == 200
    assert scraped.text == EXPOSITION
    assert scraped.headers["content-type"] == "text/plain; version=0.0.4; charset=utf-8"
    assert (posted.status_code, posted.headers["allow"]) == (405, "GET")


async def test_on_loopback_without_tokens_metrics_are_open(task_server: TaskServer) -> None:
    async with serving(task_server, lambda: EXPOSITION) as base, httpx2.AsyncClient() as http:
        scraped = await http.get(f"{base}/metrics")
    assert (scraped.status_code, scraped.text) == (200, EXPOSITION)


async def test_without_metrics_the_path_is_not_found(task_server: TaskServer) -> None:
    async with serving(task_server, None) as base, httpx2.AsyncClient() as http:
        missing = await http.get(f"{base}/metrics")
    assert missing.status_code == 404


async def test_an_mcp_endpoint_at_metrics_keeps_its_path(task_server: TaskServer) -> None:
    accept = {"Accept": ACCEPT}
    async with (
        serving(task_server, lambda: EXPOSITION, path="/metrics") as base,
        httpx2.AsyncClient(timeout=20) as http,
    ):
        opened = await http.post(f"{base}/metrics", json=initialize_body(), headers=accept)
    assert opened.status_code == 200
    assert "mcp-session-id" in opened.headers
