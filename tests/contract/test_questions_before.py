"""Questions a workflow asks before its task exists (``Workflow(..., asks=[...])``), on
every store: answered at submit, or asked by the task before its first node runs."""

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio
import pytest
from pydantic import BaseModel

from taskloom.engine.dag import NodeContext, Question, Workflow
from taskloom.engine.errors import InvalidRequestError
from taskloom.engine.manager import TaskManager
from taskloom.engine.models import Task
from taskloom.engine.ports import TaskStore
from taskloom.engine.states import TaskState
from taskloom.engine.submit import submit
from taskloom.engine.worker import Worker, WorkerSettings
from taskloom.testing import FakeClock
from taskloom.validation import JsonSchemaValidator

FAST = WorkerSettings(poll_s=0.05, progress_interval_s=0, input_recheck_s=None)


class Empty(BaseModel):
    pass


class Name(BaseModel):
    name: str


class Sure(BaseModel):
    sure: bool


NAME = Question("user_name", "Your name?", Name)
SURE = Question("sure", "Really?", Sure)


def _flow(ran: list[str]) -> Workflow[Empty]:
    flow = Workflow("hello", version="1", input=Empty, asks=[NAME, SURE])

    @flow.node()
    async def hello(ctx: NodeContext[Empty]) -> str:
        ran.append("hello")
        return f"Hello, {ctx.answer(NAME).name}{'!' if ctx.answer(SURE).sure else '?'}"

    return flow


@pytest.fixture
def manager(store: TaskStore, clock: FakeClock) -> TaskManager:
    return TaskManager(store, clock=clock, validator=JsonSchemaValidator())


@asynccontextmanager
async def running(
    manager: TaskManager, store: TaskStore, flow: Workflow[Empty]
) -> AsyncIterator[None]:
    worker = Worker(manager, {flow.name: flow}, settings=FAST, worker_id="w")
    async with anyio.create_task_group() as task_group:
        await task_group.start(worker.run)
        yield
        task_group.cancel_scope.cancel()


async def _finish(manager: TaskManager, task: Task) -> Task:
    with anyio.fail_after(10):
        return await manager.wait_until_terminal(task.id)


async def test_answers_given_at_submit_are_stored_and_no_question_is_asked(
    manager: TaskManager, store: TaskStore
) -> None:
    ran: list[str] = []
    flow = _flow(ran)
    async with running(manager, store, flow):
        task = await submit(
            manager, flow, answers={"user_name": {"name": "Ada"}, "sure": {"sure": True}}
        )
        assert task.input_responses == {"user_name": {"name": "Ada"}, "sure": {"sure": True}}
        done = await _finish(manager, task)
    assert done.state is TaskState.COMPLETED
    assert done.result == "Hello, Ada!"
    assert done.input_requests == {}


async def test_unanswered_questions_are_asked_together_before_any_node_runs(
    manager: TaskManager, store: TaskStore
) -> None:
    ran: list[str] = []
    flow = _flow(ran)
    async with running(manager, store, flow):
        task = await submit(manager, flow, answers={"sure": {"sure": False}})
        with anyio.fail_after(10), manager.subscribe([task.id]) as changes:
            current = await manager.get(task.id)
            while current.state is not TaskState.INPUT_REQUIRED:
                current = await changes.receive()
        assert set(current.input_requests) == {"user_name"}  # "sure" was answered already
        question = current.input_requests["user_name"]
        assert question.message == "Your name?"
        assert question.requested_schema == Name.model_json_schema()
        assert ran == []
        await manager.provide_input(task.id, "user_name", {"name": "Bo"})
        done = await _finish(manager, task)
    assert done.result == "Hello, Bo?"
    assert ran == ["hello"]


async def test_every_question_is_outstanding_at_once_without_answers(
    manager: TaskManager, store: TaskStore
) -> None:
    flow = _flow([])
    async with running(manager, store, flow):
        task = await submit(manager, flow)
        with anyio.fail_after(10), manager.subscribe([task.id]) as changes:
            current = await manager.get(task.id)
            while set(current.input_requests) != {"user_name", "sure"}:
                current = await changes.receive()
        await manager.provide_input(task.id, "sure", {"sure": True})
        assert (await manager.get(task.id)).state is TaskState.INPUT_REQUIRED
        await manager.provide_input(task.id, "user_name", {"name": "Cy"})
        done = await _finish(manager, task)
    assert done.result == "Hello, Cy!"


@pytest.mark.parametrize(
    ("answers", "message"),
    [
        ({"user_name": {"nom": "Ada"}}, "user_name.*name: Field required"),
        ({"colour": {"name": "Ada"}}, "'colour' is not a question"),
    ],
)
async def test_a_bad_answer_at_submit_is_refused_before_a_task_exists(
    manager: TaskManager, store: TaskStore, answers: dict[str, object], message: str
) -> None:
    with pytest.raises(InvalidRequestError, match=message):
        await submit(manager, _flow([]), answers=answers)
    assert (await manager.list()).tasks == ()
