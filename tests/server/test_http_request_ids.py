"""A 2025-11-25 session over real HTTP: a request reusing the id of one still in flight
is refused ``-32600`` naming the id (never HTTP 200 with an empty body), and every
answer goes to the stream of the request it answers."""

from functools import partial

import anyio
import httpx2

from taskloom.server import TaskServer
from tests.e2e.live_streams import Session, Stream, record, sse_data
from tests.helpers import eventually
from tests.server import flows
from tests.server.http_support import ANN, serving


def _request(request_id: int | str, method: str, task_id: str) -> dict[str, object]:
    return {"jsonrpc": "2.0", "id": request_id, "method": method, "params": {"taskId": task_id}}


async def test_a_reused_id_in_flight_is_refused_and_answers_never_cross(
    task_server: TaskServer,
) -> None:
    async with (
        serving(task_server) as url,
        httpx2.AsyncClient(timeout=httpx2.Timeout(20)) as http,
        anyio.create_task_group() as group,
    ):
        session = Session(url, ANN)
        await session.open(http)
        params = {"name": "gated", "arguments": {"gate": "ids"}, "task": {}}
        call = {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": params}
        (created,) = sse_data((await http.post(url, json=call, headers=session.headers())).text)
        task_id = created["result"]["task"]["taskId"]

        waiting = Stream("tasks/result 7")
        group.start_soon(
            record,
            http,
            waiting,
            "POST",
            url,
            session.headers(),
            _request(7, "tasks/result", task_id),
        )
        with anyio.fail_after(10):
            await waiting.opened.wait()
        reused = await http.post(
            url, json=_request(7, "tasks/get", task_id), headers=session.headers()
        )
        assert reused.status_code == 400
        assert reused.json() == {
            "jsonrpc": "2.0",
            "id": 7,
            "error": {
                "code": -32600,
                "message": "Invalid request: request id 7 is still in flight",
            },
        }
        as_text = await http.post(
            url, json=_request("7", "tasks/get", task_id), headers=session.headers()
        )
        assert as_text.status_code == 400  # the transport keys streams by str(id): one id

        abandoned = Stream("tasks/result 9, abandoned")
        with anyio.move_on_after(0.5):
            await record(
                http,
                abandoned,
                "POST",
                url,
                session.headers(),
                _request(9, "tasks/result", task_id),
            )
        refused = await http.post(
            url, json=_request(9, "tasks/cancel", task_id), headers=session.headers()
        )
        assert (refused.status_code, refused.json()["error"]["code"]) == (400, -32600)
        assert "request id 9 is still in flight" in refused.json()["error"]["message"]

        flows.gate("ids").set()
        with anyio.fail_after(10):
            await waiting.closed.wait()
        (answer,) = sse_data(waiting.text)
        assert answer["id"] == 7
        assert answer["result"]["structuredContent"] == {"opened": "ids"}

        async def free(request_id: int) -> bool:
            body = _request(request_id, "tasks/get", task_id)
            return (await http.post(url, json=body, headers=session.headers())).status_code == 200

        await eventually(partial(free, 9))  # the abandoned wait has answered (nowhere)
        assert await free(7)  # answered: the id is free again
        group.cancel_scope.cancel()
