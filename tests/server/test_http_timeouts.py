"""The HTTP endpoint's timeouts: a connection late with its request head is closed
while others are served; an idle session closes, a polling one stays open."""

import anyio
import httpx2
from anyio.abc import SocketStream

from taskloom.server import TaskServer
from tests.helpers import eventually
from tests.server.http_support import ANN, bearer, http_client, initialize_body, serving

HEAD_TIMEOUT_S = 0.5
BOUND_S = 10 * HEAD_TIMEOUT_S
"""How long a test waits for the server to close a late connection (a bound, not a
measure)."""


async def _closed_by_server(stream: SocketStream) -> bool:
    """Whether the server closes *stream* (read to its end; it sends no response)."""
    try:
        with anyio.fail_after(BOUND_S):
            while True:
                await stream.receive()
    except (anyio.EndOfStream, anyio.BrokenResourceError):
        return True


def _port(url: str) -> int:
    return int(url.split(":")[2].split("/")[0])


async def test_half_a_request_line_and_a_stall_is_closed_while_others_are_served(
    task_server: TaskServer,
) -> None:
    async with (
        serving(task_server, header_timeout_s=HEAD_TIMEOUT_S) as url,
        await anyio.connect_tcp("127.0.0.1", _port(url)) as stalled,
    ):
        await stalled.send(b"POST /mc")
        async with httpx2.AsyncClient(timeout=5) as http:
            served = await http.post(url, json=initialize_body(), headers=bearer(ANN))
        assert served.status_code == 200
        assert await _closed_by_server(stalled)


async def test_a_head_dribbled_a_byte_at_a_time_is_closed(task_server: TaskServer) -> None:
    async with (
        serving(task_server, header_timeout_s=HEAD_TIMEOUT_S) as url,
        await anyio.connect_tcp("127.0.0.1", _port(url)) as slow,
    ):
        request = b"GET /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Padding: " + b"a" * 10_000

        async def dribble() -> None:
            for byte in request:  # 10 s at this pace: far beyond the timeout
                await slow.send(bytes([byte]))
                await anyio.sleep(0.001)

        async with anyio.create_task_group() as group:
            group.start_soon(dribble)
            assert await _closed_by_server(slow)
            group.cancel_scope.cancel()


async def test_a_connection_that_never_sends_is_closed(task_server: TaskServer) -> None:
    async with (
        serving(task_server, header_timeout_s=HEAD_TIMEOUT_S) as url,
        await anyio.connect_tcp("127.0.0.1", _port(url)) as silent,
    ):
        assert await _closed_by_server(silent)


async def test_a_whole_head_is_served_and_its_connection_kept_alive(
    task_server: TaskServer,
) -> None:
    async with (
        serving(task_server, header_timeout_s=HEAD_TIMEOUT_S) as url,
        httpx2.AsyncClient(timeout=5) as http,
    ):
        first = await http.post(url, json=initialize_body(), headers=bearer(ANN))
        second = await http.post(url, json=initialize_body(), headers=bearer(ANN))
    assert (first.status_code, second.status_code) == (200, 200)


async def test_a_polling_session_stays_open_and_an_idle_one_closes(
    task_server: TaskServer,
) -> None:
    idle_s = 0.5
    async with (
        serving(task_server, session_idle_s=idle_s) as url,
        http_client(url, ANN) as polling,
        httpx2.AsyncClient(timeout=5) as http,
    ):
        opened = await http.post(url, json=initialize_body(), headers=bearer(ANN))
        idle = {**bearer(ANN), "Mcp-Session-Id": opened.headers["mcp-session-id"]}
        task_id = await polling.start("gated", {"gate": "polled"})
        for _ in range(12):  # three idle periods of a client polling four times in each
            assert (await polling.get(task_id))["status"] == "working"
            await anyio.sleep(idle_s / 4)
        ping = {"jsonrpc": "2.0", "id": 2, "method": "ping"}

        async def idle_one_closed() -> bool:
            return (await http.post(url, json=ping, headers=idle)).status_code == 404

        await eventually(idle_one_closed, within_s=10, every_s=0.1)
        assert (await polling.get(task_id))["status"] == "working"
