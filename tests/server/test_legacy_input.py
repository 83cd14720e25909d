"""input_required on 2025-11-25: questions asked through elicitation/create during
tasks/result, with the related-task _meta (contract §2.12, checklist L23, L24)."""

from typing import Any

import anyio
import mcp_types as types
from mcp.client.context import ClientRequestContext

from taskloom.bootstrap import Engine
from taskloom.engine.states import TaskState
from taskloom.server.questions import MAX_ASKS
from tests.server.client import LegacyClient
from tests.server.conftest import Connect

RELATED = "io.modelcontextprotocol/related-task"


class Human:
    """Answers elicitations with a script of results, recording what it was asked."""

    def __init__(self, *answers: types.ElicitResult) -> None:
        self.answers = list(answers)
        self.asked: list[dict[str, Any]] = []
        self.client: LegacyClient | None = None
        self.status_meanwhile: list[str] = []

    async def __call__(
        self, context: ClientRequestContext, params: types.ElicitRequestParams
    ) -> types.ElicitResult:
        self.asked.append(params.model_dump(by_alias=True, exclude_none=True))
        if self.client is not None:  # a tasks/get in parallel with the exchange
            task_id = self.asked[-1]["_meta"][RELATED]["taskId"]
            self.status_meanwhile.append((await self.client.get(task_id))["status"])
        return self.answers.pop(0)


def _accept(**content: Any) -> types.ElicitResult:
    return types.ElicitResult(action="accept", content=content)


async def _until_input_required(client: LegacyClient, task_id: str) -> None:
    await client.tap.until(lambda: "input_required" in client.statuses(task_id))


async def test_l23_tasks_result_asks_through_elicitation_and_returns_the_result(
    connect: Connect,
) -> None:
    human = Human(_accept(name="Luca"))
    async with connect(elicitation_callback=human) as client:
        human.client = client
        task_id = await client.start("ask", {})
        await _until_input_required(client, task_id)
        assert (await client.get(task_id))["statusMessage"] == "Your name?"
        result = await client.result(task_id)
        await client.tap.until(lambda: "completed" in client.statuses(task_id))
    assert result["content"] == [{"type": "text", "text": "Hello, Luca!"}]
    assert result["_meta"] == {RELATED: {"taskId": task_id}}
    (asked,) = human.asked
    assert asked["message"] == "Your name?"
    assert asked["_meta"] == {RELATED: {"taskId": task_id}}
    assert asked["requestedSchema"]["required"] == ["name"]
    assert human.status_meanwhile == ["input_required"]
    statuses = client.statuses(task_id)
    assert statuses[0] == "input_required"
    assert statuses[-1] == "completed"


async def test_l23_an_answer_that_does_not_fit_is_asked_again(connect: Connect) -> None:
    human = Human(_accept(nom="Luca"), _accept(name="Luca"))
    async with connect(elicitation_callback=human) as client:
        task_id = await client.start("ask", {})
        await _until_input_required(client, task_id)
        result = await client.result(task_id)
    assert result["content"][0]["text"] == "Hello, Luca!"
    assert len(human.asked) == 2
    assert "please correct" in human.asked[1]["message"]


async def test_tasks_result_ends_with_a_clear_error_after_three_answers_that_do_not_fit(
    connect: Connect,
) -> None:
    human = Human(*[_accept(nom="Luca")] * MAX_ASKS)
    async with connect(elicitation_callback=human) as client:
        task_id = await client.start("ask", {})
        await _until_input_required(client, task_id)
        with anyio.fail_after(10):  # the bug: tasks/result stopped asking and never returned
            error = await client.error("tasks/result", {"taskId": task_id})
        task = await client.get(task_id)
    assert len(human.asked) == MAX_ASKS
    assert error.code == types.INVALID_PARAMS
    assert error.message == (
        f"Task {task_id} still waits for an answer to 'Your name?': 3 answers did not fit its "
        "schema (answer: 'name' is a required property); call tasks/result again to be asked again"
    )
    assert error.data == {"taskId": task_id, "status": "input_required", "question": "greet#1"}
    assert task["status"] == "input_required"  # nothing lost: a new tasks/result asks again


async def test_l24_a_declined_question_fails_the_task(connect: Connect) -> None:
    human = Human(types.ElicitResult(action="decline"))
    async with connect(elicitation_callback=human) as client:
        task_id = await client.start("ask", {})
        await _until_input_required(client, task_id)
        result = await client.result(task_id)
        task = await client.get(task_id)
    assert result["isError"] is True
    assert result["content"][0]["text"] == "the requestor declined to answer: Your name?"
    assert task["status"] == "failed"


async def test_l24_a_dismissed_question_cancels_the_task(connect: Connect) -> None:
    human = Human(types.ElicitResult(action="cancel"))
    async with connect(elicitation_callback=human) as client:
        task_id = await client.start("ask", {})
        await _until_input_required(client, task_id)
        error = await client.error("tasks/result", {"taskId": task_id})
        assert error.code == -32603
        assert (await client.get(task_id))["status"] == "cancelled"


async def test_a_client_without_elicitation_is_not_asked_and_can_answer_later(
    connect: Connect, engine: Engine
) -> None:
    async with connect() as plain, connect(elicitation_callback=Human(_accept(name="Ada"))) as able:
        task_id = await plain.start("ask", {})
        await _until_input_required(plain, task_id)
        # The first client's tasks/result cannot ask; it waits while another connection does.
        async with anyio.create_task_group() as task_group:
            outcome: list[dict[str, Any]] = []

            async def wait_for_result() -> None:
                outcome.append(await plain.result(task_id))

            task_group.start_soon(wait_for_result)
            assert (await plain.get(task_id))["status"] == "input_required"
            await able.result(task_id)
    assert outcome[0]["content"][0]["text"] == "Hello, Ada!"
    assert (await engine.manager.get(task_id)).state is TaskState.COMPLETED
