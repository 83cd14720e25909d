"""A real ``taskloom serve`` with stored tokens, and the long-lived answers a client holds
open on it: each recorded byte by byte, with when it came and when its stream ended."""

import json
import secrets
import signal
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import anyio
import httpx2
import psycopg
from anyio.abc import Process, TaskGroup
from psycopg import sql

from tests.helpers import checkout_env, free_port, until_http_listening
from tests.postgres import require_server
from tests.server.client import LEGACY
from tests.server.http_support import ACCEPT, ANN, initialize_body, modern_headers, modern_request

CLOSING_BYTES = 200
"""The most a stream may send after its grant ended: one closing message."""


def environment(url: str) -> dict[str, str]:
    return checkout_env() | {
        "TASKLOOM_HTTP": url.removeprefix("http://").removesuffix("/mcp"),
        "TASKLOOM_TOKENS": f"ann:{ANN}",  # a static token of ann, which nothing revokes
        "TASKLOOM_LOG_LEVEL": "info",
    }


async def taskloom(*args: str, env: dict[str, str]) -> str:
    """Run ``taskloom ARGS`` to its end (bounded); its standard output."""
    with anyio.fail_after(30):
        done = await anyio.run_process([sys.executable, "-m", "taskloom", *args], env=env)
    return done.stdout.decode()


@asynccontextmanager
async def database(store: str, tmp_path: Path) -> AsyncIterator[str]:
    """The ``--db`` of a fresh database: an SQLite file, or a PostgreSQL database of its
    own on the test server (dropped after)."""
    if store == "sqlite":
        yield str(tmp_path / "x.db")
        return
    server_url = require_server()
    name = f"revoke_{secrets.token_hex(6)}"
    async with await psycopg.AsyncConnection.connect(server_url, autocommit=True) as admin:
        await admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    try:
        yield server_url.rsplit("/", 1)[0] + f"/{name}"
    finally:
        async with await psycopg.AsyncConnection.connect(server_url, autocommit=True) as admin:
            drop = sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)")
            await admin.execute(drop.format(sql.Identifier(name)))


async def create_token(db: str, env: dict[str, str], *, expires: str = "never") -> str:
    token = await taskloom(
        "tokens", "create", "--principal", "ann", "--expires", expires, "--db", db, env=env
    )
    return token.strip()


async def expiry_of(db: str, token: str, env: dict[str, str]) -> float:
    """When *token* expires, in seconds since the epoch."""
    listed = json.loads(await taskloom("tokens", "list", "--json", "--db", db, env=env))
    (record,) = [each for each in listed if each["id"] == token[3:15]]
    return datetime.fromisoformat(record["expires_at"]).timestamp()


@asynccontextmanager
async def server(db: str, env: dict[str, str], errlog: Path) -> AsyncIterator[Process]:
    """``taskloom serve`` on *db* while inside; stopped with SIGINT (bounded) after."""
    command = [sys.executable, "-m", "taskloom", "serve", "--db", db]
    with errlog.open("w") as log:
        process = await anyio.open_process(command, env=env, stdout=log, stderr=log)
        try:
            yield process
        finally:
            if process.returncode is None:
                process.send_signal(signal.SIGINT)
            with anyio.fail_after(20):
                await process.wait()


@dataclass
class Stream:
    """What one response sent, and when (``anyio.current_time``)."""

    name: str
    status: int | None = None
    closed: anyio.Event = field(default_factory=anyio.Event)
    chunks: list[tuple[float, bytes]] = field(default_factory=list)
    ended_at: float | None = None
    opened: anyio.Event = field(default_factory=anyio.Event)

    def sent_after(self, moment: float) -> int:
        return sum(len(chunk) for at, chunk in self.chunks if at > moment)

    @property
    def text(self) -> str:
        return b"".join(chunk for _, chunk in self.chunks).decode()


async def record(
    http: httpx2.AsyncClient,
    stream: Stream,
    method: str,
    url: str,
    headers: dict[str, str],
    body: dict[str, Any] | None = None,
) -> None:
    """Read *url*'s response to its end into *stream* (``opened`` once its headers came)."""
    try:
        async with http.stream(method, url, headers=headers, json=body) as response:
            stream.status = response.status_code
            stream.opened.set()
            async for chunk in response.aiter_raw():
                stream.chunks.append((anyio.current_time(), chunk))
    except httpx2.HTTPError:
        pass  # a stream cut short ends too
    finally:
        stream.ended_at = anyio.current_time()
        stream.opened.set()
        stream.closed.set()


def sse_data(text: str) -> list[dict[str, Any]]:
    """The JSON of every ``data:`` line of an event stream."""
    lines = text.splitlines()
    return [json.loads(line.removeprefix("data: ")) for line in lines if line.startswith("data: {")]


@dataclass
class Session:
    """A 2025-11-25 session opened over raw HTTP."""

    url: str
    token: str
    session_id: str = ""

    def headers(self, accept: str = ACCEPT) -> dict[str, str]:
        return {
            "Authorization": f"Bearer {self.token}",
            "Accept": accept,
            "Mcp-Session-Id": self.session_id,
            "Mcp-Protocol-Version": LEGACY,
        }

    async def open(self, http: httpx2.AsyncClient) -> None:
        headers = {"Authorization": f"Bearer {self.token}", "Accept": ACCEPT}
        opened = await http.post(self.url, json=initialize_body(), headers=headers)
        assert opened.status_code == 200, opened.text
        self.session_id = opened.headers["mcp-session-id"]
        initialized = {"jsonrpc": "2.0", "method": "notifications/initialized"}
        assert (
            await http.post(self.url, json=initialized, headers=self.headers())
        ).status_code == 202

    async def start_task(self, http: httpx2.AsyncClient, request_id: int = 2) -> str:
        """Start a countdown that runs for minutes; its task id."""
        params = {"name": "countdown", "arguments": {"start": 400, "tick_s": 1}, "task": {}}
        body = {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params}
        answer = await http.post(self.url, json=body, headers=self.headers())
        (created,) = sse_data(answer.text)
        task_id: str = created["result"]["task"]["taskId"]
        return task_id


async def open_streams(
    group: TaskGroup, http: httpx2.AsyncClient, url: str, token: str
) -> dict[str, Stream]:
    """The four streams and two waits, all of *token*, open once this returns."""
    base = url.removesuffix("/mcp")
    session = Session(url, token)
    await session.open(http)
    task_id = await session.start_task(http)
    auth = {"Authorization": f"Bearer {token}", "Accept": "text/event-stream"}
    listen = modern_request("subscriptions/listen", {"notifications": {"taskIds": [task_id]}})
    listen["params"]["_meta"]["io.modelcontextprotocol/clientCapabilities"] = {
        "extensions": {"io.modelcontextprotocol/tasks": {}}
    }
    wait = {"jsonrpc": "2.0", "id": 3, "method": "tasks/result", "params": {"taskId": task_id}}
    long_run = {"name": "countdown", "arguments": {"start": 400, "tick_s": 1}}
    plain = modern_request("tools/call", long_run)  # a host without tasks: it waits
    plain["params"]["_meta"]["progressToken"] = "plain"  # progress commits the stream
    plans: list[tuple[str, str, str, dict[str, str], dict[str, Any] | None]] = [
        ("listen", "POST", url, modern_headers(token, "subscriptions/listen"), listen),
        ("ui events", "GET", f"{base}/ui/events", auth, None),
        ("ui task events", "GET", f"{base}/ui/tasks/{task_id}/events", auth, None),
        ("session GET", "GET", url, session.headers("text/event-stream"), None),
        ("tasks/result wait", "POST", url, session.headers(), wait),
        ("plain call wait", "POST", url, modern_headers(token, "tools/call", "countdown"), plain),
    ]
    streams: dict[str, Stream] = {}
    for name, method, where, headers, body in plans:
        stream = streams[name] = Stream(name)
        group.start_soon(record, http, stream, method, where, headers, body)
        with anyio.fail_after(10):
            await stream.opened.wait()
        assert stream.status == 200, (name, stream.status, stream.text)
    return streams


async def keep_busy(http: httpx2.AsyncClient, url: str) -> None:
    """Run short tasks of ann with its static token, one after another, so that ann's
    live pages have changes to send."""
    call = modern_request("tools/call", {"name": "countdown", "arguments": {"start": 1}})
    while True:
        await http.post(url, json=call, headers=modern_headers(ANN, "tools/call", "countdown"))
        await anyio.sleep(0.1)


async def serving(url: str) -> None:
    await until_http_listening(url)


def new_url() -> str:
    return f"http://127.0.0.1:{free_port()}/mcp"
