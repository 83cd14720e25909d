"""``ping`` follows the specification of each generation: 2025-11-25 answers it with an
empty result; 2026-07-28 removed it (with the handshake), so it is an unknown method
there: ``-32601``, HTTP 404 as that revision's transport maps the code."""

import httpx2

from taskloom.server import TaskServer
from tests.e2e.live_streams import Session, sse_data
from tests.server.http_support import ANN, modern_headers, modern_request, serving


async def test_ping_is_answered_on_2025_11_25_and_unknown_on_2026_07_28(
    task_server: TaskServer,
) -> None:
    async with serving(task_server) as url, httpx2.AsyncClient(timeout=20) as http:
        session = Session(url, ANN)
        await session.open(http)
        ping = {"jsonrpc": "2.0", "id": 5, "method": "ping"}
        answer = await http.post(url, json=ping, headers=session.headers())
        assert sse_data(answer.text) == [{"jsonrpc": "2.0", "id": 5, "result": {}}]

        modern = await http.post(
            url, json=modern_request("ping", {}, 6), headers=modern_headers(ANN, "ping")
        )
        assert modern.status_code == 404
        assert modern.json()["id"] == 6
        assert modern.json()["error"]["code"] == -32601
