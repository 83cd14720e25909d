"""A hypothesis state machine drives the TaskManager with random operations on each store.

The model is a plain dict of what every task should look like. After every step the
invariants are checked against the real store: every live task reads back exactly as
modelled (so nothing committed is lost, not even across a reopen of the database),
terminal states never change, expired tasks are invisible, and listing page by page
returns every live task exactly once, newest first.

The machine runs synchronously (hypothesis drives it) and reaches the async manager
through an anyio blocking portal: one event loop in a helper thread for the whole case.
"""

import shutil
import tempfile
from contextlib import AbstractContextManager, ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import pytest
from anyio.from_thread import BlockingPortal, start_blocking_portal
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    consumes,
    initialize,
    invariant,
    multiple,
    precondition,
    rule,
)
from pydantic import JsonValue

from taskloom.engine.errors import (
    IdempotencyConflictError,
    IllegalTransitionError,
    InputNotRequestedError,
    TaskNotFoundError,
    TaskStateError,
)
from taskloom.engine.manager import TaskManager, TaskManagerSettings
from taskloom.engine.models import InputRequest, Task, TaskFailure
from taskloom.engine.ports import TaskStore
from taskloom.engine.states import TaskState, check_transition, is_terminal
from taskloom.persistence.postgres import PostgresSettings, PostgresTaskStore
from taskloom.persistence.sqlite import SqliteTaskStore
from taskloom.testing import FakeClock, InMemoryTaskStore
from tests import postgres

pytestmark = pytest.mark.slow

_QUESTION = InputRequest(message="go on?", requested_schema={"type": "boolean"})
_JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53), 2**53) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner),
    max_leaves=6,
)


@dataclass
class Expected:
    """What the model says a task must look like."""

    name: str
    arguments: dict[str, JsonValue]
    state: TaskState = TaskState.QUEUED
    created_at_s: float = 0.0
    ttl_s: float | None = None
    result: JsonValue = None
    questions: set[str] = field(default_factory=set)
    answers: dict[str, JsonValue] = field(default_factory=dict)
    version: int = 1
    key: str | None = None


class TaskManagerMachine(RuleBasedStateMachine):
    """Random operations on a TaskManager, checked against a dict after every step."""

    kind: ClassVar[str] = "memory"

    tasks = Bundle("tasks")

    def __init__(self) -> None:
        super().__init__()
        self._stack = ExitStack()
        self.portal: BlockingPortal = self._stack.enter_context(
            start_blocking_portal(backend="asyncio")
        )
        self.folder = Path(tempfile.mkdtemp(prefix="taskloom-stateful-"))
        self._stack.callback(shutil.rmtree, self.folder, ignore_errors=True)
        self.clock = FakeClock()
        self.elapsed_s = 0.0
        self.model: dict[str, Expected] = {}
        self.gone: set[str] = set()
        """Tasks that expired (and may have been purged): never visible again."""
        self.creations = 0
        self._store_cm: AbstractContextManager[TaskStore] | None = None
        self.manager = self._open()

    def _open(self) -> TaskManager:
        store: TaskStore
        if self.kind == "memory":
            store = getattr(self, "_memory", None) or InMemoryTaskStore()
            self._memory = store
        elif self.kind == "sqlite":
            self._store_cm = self.portal.wrap_async_context_manager(
                SqliteTaskStore.open(self.folder / "tasks.db")
            )
            store = self._store_cm.__enter__()
        else:
            if not hasattr(self, "_schema"):
                postgres.require_server()
                self._schema = postgres.new_schema_name()
                self._stack.callback(postgres.drop_schema_now, self._schema)
            self._store_cm = self.portal.wrap_async_context_manager(
                PostgresTaskStore.open(
                    PostgresSettings(url=postgres.TEST_URL, schema_name=self._schema)
                )
            )
            store = self._store_cm.__enter__()
        return TaskManager(
            store,
            clock=self.clock,
            settings=TaskManagerSettings(default_ttl_ms=None, max_ttl_ms=None),
        )

    def _close(self) -> None:
        if self._store_cm is not None:
            self._store_cm.__exit__(None, None, None)
            self._store_cm = None

    def teardown(self) -> None:
        self._close()
        self._stack.close()

    def call(self, function: Any, *args: Any, **kwargs: Any) -> Any:
        """Run one manager coroutine on the portal's event loop."""
        return self.portal.call(lambda: function(*args, **kwargs))

    def live(self) -> dict[str, Expected]:
        return {task_id: exp for task_id, exp in self.model.items() if task_id not in self.gone}

    def _check_move(self, task_id: str, target: TaskState, action: Any, *args: Any) -> Task | None:
        """Attempt a transition; it must land exactly when the table allows it."""
        expected = self.model[task_id]
        if task_id in self.gone:
            with pytest.raises(TaskNotFoundError):
                self.call(action, task_id, *args)
            return None
        legal = target in _targets(expected.state)
        if not legal:
            with pytest.raises(TaskStateError):
                self.call(action, task_id, *args)
            return None
        task: Task = self.call(action, task_id, *args)
        expected.state = target
        expected.version += 1
        if is_terminal(target):
            expected.questions.clear()  # nobody can answer a finished task
        return task

    # -- rules ----------------------------------------------------------------------------

    @initialize()
    def start_empty(self) -> None:
        assert self.call(self.manager.list).tasks == ()

    @rule(
        target=tasks,
        arguments=st.dictionaries(st.sampled_from("abc"), _JSON, max_size=2),
        ttl_s=st.none() | st.sampled_from([1.0, 5.0, 30.0]),
        keyed=st.booleans(),
    )
    def create(self, arguments: dict[str, JsonValue], ttl_s: float | None, keyed: bool) -> Any:
        self.creations += 1
        key = f"key-{self.creations % 3}" if keyed else None
        holder = next(
            (task_id for task_id, exp in self.live().items() if key is not None and exp.key == key),
            None,
        )
        ttl_ms = None if ttl_s is None else int(ttl_s * 1000)
        if holder is not None:
            if self.model[holder].arguments == arguments and self.model[holder].name == "job":
                again = self.call(
                    self.manager.create, "job", arguments, ttl_ms=ttl_ms, idempotency_key=key
                )
                assert again.id == holder
            else:
                with pytest.raises(IdempotencyConflictError):
                    self.call(
                        self.manager.create, "job", arguments, ttl_ms=ttl_ms, idempotency_key=key
                    )
            return multiple()
        task = self.call(self.manager.create, "job", arguments, ttl_ms=ttl_ms, idempotency_key=key)
        self.model[task.id] = Expected(
            name="job", arguments=arguments, created_at_s=self.elapsed_s, ttl_s=ttl_s, key=key
        )
        return task.id

    @rule(task_id=tasks)
    def start(self, task_id: str) -> None:
        self._check_move(task_id, TaskState.RUNNING, self.manager.start)

    @rule(task_id=tasks)
    def requeue(self, task_id: str) -> None:
        self._check_move(task_id, TaskState.QUEUED, self.manager.requeue)

    @rule(task_id=tasks, done=st.integers(0, 10))
    def progress(self, task_id: str, done: int) -> None:
        expected = self.model[task_id]
        if task_id in self.gone:
            with pytest.raises(TaskNotFoundError):
                self.call(self.manager.report_progress, task_id, completed=done)
        elif expected.state in (TaskState.RUNNING, TaskState.INPUT_REQUIRED):
            task = self.call(self.manager.report_progress, task_id, completed=done, total=10)
            expected.version += 1
            assert task.progress is not None
            assert task.progress.completed == done
        else:
            with pytest.raises(TaskStateError):
                self.call(self.manager.report_progress, task_id, completed=done)

    @rule(task_id=tasks, key=st.sampled_from(["q1", "q2"]))
    def ask(self, task_id: str, key: str) -> None:
        expected = self.model[task_id]
        if expected.state is TaskState.INPUT_REQUIRED and task_id not in self.gone:
            self.call(self.manager.require_input, task_id, key, _QUESTION)
            expected.version += 1
            expected.questions.add(key)
            return
        if self._check_move(
            task_id, TaskState.INPUT_REQUIRED, self.manager.require_input, key, _QUESTION
        ):
            expected.questions.add(key)

    @rule(task_id=tasks, key=st.sampled_from(["q1", "q2"]), answer=st.booleans())
    def answer(self, task_id: str, key: str, answer: bool) -> None:
        expected = self.model[task_id]
        if task_id in self.gone:
            with pytest.raises(TaskNotFoundError):
                self.call(self.manager.provide_input, task_id, key, answer)
        elif key not in expected.questions:
            with pytest.raises(InputNotRequestedError):
                self.call(self.manager.provide_input, task_id, key, answer)
        else:
            self.call(self.manager.provide_input, task_id, key, answer)
            expected.version += 1
            expected.questions.discard(key)
            expected.answers[key] = answer
            if not expected.questions and expected.state is TaskState.INPUT_REQUIRED:
                expected.state = TaskState.RUNNING

    @precondition(lambda self: any(exp.questions for exp in self.live().values()))
    @rule(data=st.data(), answer=st.booleans())
    def answer_a_pending_question(self, data: st.DataObject, answer: bool) -> None:
        """Steer towards the interesting case: a question that is really waiting."""
        waiting = [task_id for task_id, exp in self.live().items() if exp.questions]
        task_id = data.draw(st.sampled_from(waiting))
        key = data.draw(st.sampled_from(sorted(self.model[task_id].questions)))
        self.answer(task_id, key, answer)

    @rule(
        task_id=tasks,
        how=st.sampled_from(["complete", "fail", "cancel"]),
        result=_JSON,
    )
    def finish(self, task_id: str, how: str, result: JsonValue) -> None:
        """One rule for the three endings, so that tasks live long enough to be interesting."""
        if how == "complete":
            if self._check_move(task_id, TaskState.COMPLETED, self.manager.complete, result):
                self.model[task_id].result = result
        elif how == "fail":
            failure = TaskFailure(code="boom", message="it broke")
            self._check_move(task_id, TaskState.FAILED, self.manager.fail, failure)
        else:
            self._check_move(task_id, TaskState.CANCELLED, self.manager.cancel)

    @precondition(lambda self: self._in_state(TaskState.QUEUED, TaskState.RUNNING))
    @rule(data=st.data(), key=st.sampled_from(["q1", "q2"]))
    def advance_a_live_task(self, data: st.DataObject, key: str) -> None:
        """Steer towards deep states: start a queued task or make a running one ask."""
        candidates = self._in_state(TaskState.QUEUED, TaskState.RUNNING)
        task_id = data.draw(st.sampled_from(candidates))
        if self.model[task_id].state is TaskState.QUEUED:
            self.start(task_id)
        else:
            self.ask(task_id, key)

    def _in_state(self, *states: TaskState) -> list[str]:
        # in creation order: ids are random, so sorting them would make replays differ
        return [task_id for task_id, exp in self.live().items() if exp.state in states]

    @rule(task_id=consumes(tasks))
    def forget(self, task_id: str) -> None:
        """Stop operating on a task (the invariants still check it)."""

    @rule(seconds=st.sampled_from([0.5, 2.0, 10.0]))
    def time_passes(self, seconds: float) -> None:
        self.clock.advance(seconds)
        self.elapsed_s += seconds
        for task_id, expected in self.model.items():
            if (
                expected.ttl_s is not None
                and self.elapsed_s >= expected.created_at_s + expected.ttl_s
            ):
                self.gone.add(task_id)

    @rule()
    def sweep(self) -> None:
        self.call(self.manager.purge_expired)

    @precondition(lambda self: self.kind != "memory")
    @rule()
    def reopen(self) -> None:
        """Close the database and open it again: nothing committed may be lost."""
        self._close()
        self.manager = self._open()

    # -- invariants -----------------------------------------------------------------------

    @invariant()
    def every_task_reads_as_modelled(self) -> None:
        for task_id, expected in self.model.items():
            if task_id in self.gone:
                with pytest.raises(TaskNotFoundError):
                    self.call(self.manager.get, task_id)
                continue
            task: Task = self.call(self.manager.get, task_id)
            assert task.state is expected.state, task_id
            assert task.version == expected.version
            assert task.arguments == expected.arguments
            assert set(task.input_requests) == expected.questions
            assert task.input_responses == expected.answers
            if expected.state is TaskState.COMPLETED:
                assert task.result == expected.result
            if is_terminal(expected.state):
                assert task.is_terminal

    @invariant()
    def pages_cover_every_live_task_once_newest_first(self) -> None:
        seen: list[Task] = []
        cursor: str | None = None
        while True:
            page = self.call(self.manager.list, limit=3, cursor=cursor)
            seen += page.tasks
            if page.next_cursor is None:
                break
            cursor = page.next_cursor
        ids = [task.id for task in seen]
        assert len(ids) == len(set(ids)), "a task was listed twice"
        assert set(ids) == set(self.live()), "a live task was skipped or a dead one listed"
        created = [task.created_at for task in seen]
        assert created == sorted(created, reverse=True)


def _targets(state: TaskState) -> frozenset[TaskState]:
    legal: set[TaskState] = set()
    for target in TaskState:
        try:
            check_transition("model", state, target)
        except IllegalTransitionError:
            continue
        legal.add(target)
    return frozenset(legal)


class SqliteTaskManagerMachine(TaskManagerMachine):
    kind = "sqlite"


class PostgresTaskManagerMachine(TaskManagerMachine):
    kind = "postgres"


_SETTINGS = settings(
    max_examples=60,
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)

TestTaskManagerOnMemory = TaskManagerMachine.TestCase
TestTaskManagerOnMemory.settings = _SETTINGS
TestTaskManagerOnSqlite = SqliteTaskManagerMachine.TestCase
TestTaskManagerOnSqlite.settings = _SETTINGS
TestTaskManagerOnPostgres = PostgresTaskManagerMachine.TestCase
TestTaskManagerOnPostgres.settings = settings(_SETTINGS, max_examples=20)
