"""`python -m taskloom serve` as a real process, spoken to at 2026-07-28 over stdio:
per-request envelopes declaring the tasks extension, no ``initialize``."""

import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import pytest
from mcp.client.stdio import StdioServerParameters, stdio_client

from tests.helpers import checkout_env
from tests.server.modern_client import EXT, ModernClient, open_modern_client

REPOSITORY = Path(__file__).resolve().parents[2]
SUBSCRIPTION = "io.modelcontextprotocol/subscriptionId"


@asynccontextmanager
async def serving(tmp_path: Path) -> AsyncIterator[ModernClient]:
    """A 2026-07-28 client of `python -m taskloom serve` on tmp_path/x.db."""
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "taskloom", "serve", "--db", str(tmp_path / "x.db")],
        env=checkout_env({}, TASKLOOM_WORKFLOWS="tests.server.flows"),
        cwd=tmp_path,
    )
    with (tmp_path / "stderr.log").open("a") as errlog:
        async with (
            stdio_client(params, errlog=errlog) as streams,
            open_modern_client(*streams) as client,
        ):
            yield client


@pytest.mark.slow
async def test_a_real_server_serves_the_tasks_extension(tmp_path: Path) -> None:
    with anyio.fail_after(60):
        async with serving(tmp_path) as client:
            discovered = await client.request("server/discover", {})
            assert discovered["capabilities"]["extensions"][EXT] == {}

            done = await client.start("countdown", {"start": 3, "tick_s": 0})
            assert (await client.get(done))["taskId"] == done  # committed before the answer
            finished = await client.until(done)
            assert finished["status"] == "completed"
            assert finished["result"]["structuredContent"] == {"counted": 3, "lanes": 4}

            slow = await client.start("countdown", {"start": 400, "tick_s": 0.05})
            assert await client.cancel(slow) == {
                "resultType": "complete",
                "_meta": finished["_meta"],  # the SDK's serverInfo stamp, nothing else
            }
            assert (await client.until(slow))["status"] == "cancelled"
            assert (await client.cancel(slow))["resultType"] == "complete"  # still an ack

            asking = await client.start("ask", {"question": "Who are you?"})
            waiting = await client.until(asking, {"input_required"})
            [(key, request)] = waiting["inputRequests"].items()
            assert request["params"]["message"] == "Who are you?"
            answer = {"action": "accept", "content": {"name": "Grace"}}
            await client.update(asking, {key: answer})
            answered = await client.until(asking)
            assert answered["result"]["content"] == [{"type": "text", "text": "Hello, Grace!"}]

            pushed = await client.start("countdown", {"start": 20, "tick_s": 0.01})
            listen = {"notifications": {"taskIds": [pushed]}}
            ended = await client.request("subscriptions/listen", listen)  # ends with the task
            frames = client.notifications("notifications/tasks")
            assert frames[-1]["status"] == "completed"
            subscription = ended["_meta"][SUBSCRIPTION]  # the listen request's id
            assert frames[-1]["_meta"] == {SUBSCRIPTION: subscription}

            failing = await client.until(await client.start("fails"))
            assert failing["status"] == "completed"
            assert failing["result"]["isError"] is True

        async with serving(tmp_path) as again:  # a new process on the same database
            assert await again.get(done) == finished
    assert "Traceback" not in (tmp_path / "stderr.log").read_text()


@pytest.mark.slow
async def test_a_question_survives_a_restart_and_tasks_update_resumes_it(tmp_path: Path) -> None:
    with anyio.fail_after(60):
        async with serving(tmp_path) as client:  # E4 at 2026-07-28
            task_id = await client.start("ask", {"question": "Still there?"})
            asked = (await client.until(task_id, {"input_required"}))["inputRequests"]
        async with serving(tmp_path) as again:
            waiting = await again.get(task_id)
            assert waiting["status"] == "input_required"
            assert waiting["inputRequests"] == asked  # the same keys and questions
            [key] = asked
            await again.update(task_id, {key: {"action": "accept", "content": {"name": "Yes"}}})
            done = await again.until(task_id)
    assert done["result"]["content"] == [{"type": "text", "text": "Hello, Yes!"}]
    assert "Traceback" not in (tmp_path / "stderr.log").read_text()
