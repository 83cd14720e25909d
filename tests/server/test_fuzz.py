"""Property: thousands of random ``tasks/*`` and ``tools/call`` requests, from two
principals at both protocol generations (and at 2025-06-18, which has no Tasks), each get
a valid result or an error code the contract allows (``fuzz_requests.ALLOWED``), and
leave every stored task as it was, unless its owner legitimately cancelled or answered
it and the server said so. Results for another principal's task, or lists showing one,
fail the property too, and so does an error message that is not one short line.

The engine (SQLite in tmp) runs no worker, so nothing but these requests moves a task.
Each principal keeps a task in every state; each example (a batch of requests) is
checked against a snapshot of them, and the tasks it legitimately changed are replaced.
"""

from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from mcp.shared.exceptions import MCPError
from mcp.shared.memory import create_client_server_memory_streams
from mcp_types import ErrorData

from taskloom.bootstrap import Engine, open_engine
from taskloom.config import TaskloomSettings
from taskloom.engine.manager import TaskManagerSettings
from taskloom.engine.models import InputRequest, Task, TaskFailure
from taskloom.engine.registry import WorkflowRegistry
from taskloom.engine.states import TaskState
from taskloom.persistence.sqlite import SqliteSettings
from taskloom.server import ServerSettings, TaskServer
from taskloom.testing import FakeClock
from tests.server import flows
from tests.server.client import LEGACY, open_client
from tests.server.fuzz_requests import (
    ACTIVE,
    INPUT_KEY,
    OLDER,
    STATES,
    TASK_ID_METHODS,
    Huge,
    Ref,
    Request,
    allowed_codes,
    envelope,
    requests,
)
from tests.server.modern_client import MODERN, open_modern_client

PRINCIPALS = ("ann", "bob")
NAME_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"name": {"type": "string"}},
    "required": ["name"],
}


@dataclass(repr=False)
class Fuzzed:
    """The engine, and one raw connection per principal and protocol version."""

    engine: Engine
    dispatchers: dict[tuple[str, str], Any] = field(default_factory=dict, repr=False)
    seeded: dict[tuple[str, str], Task] = field(default_factory=dict, repr=False)


@pytest.fixture
async def fuzzed(tmp_path: Path, clock: FakeClock) -> AsyncIterator[Fuzzed]:
    settings = TaskloomSettings(
        database=SqliteSettings(path=tmp_path / "fuzz.db", synchronous="NORMAL"),
        tasks=TaskManagerSettings(default_page_size=3, max_ttl_ms=600_000),
        workflow_modules=(),
        load_entry_points=False,
        run_worker=False,
        run_sweeper=False,
    )
    served = (flows.gated, flows.must_task, flows.ask)
    registry = WorkflowRegistry({w.name: w for w in served})
    async with (
        open_engine(settings, clock=clock, workflows=registry) as engine,
        anyio.create_task_group() as task_group,
    ):
        server = TaskServer(
            engine.manager, engine.workflows, ServerSettings(recheck_s=None), runs=engine.runs
        )
        fuzzed = Fuzzed(engine)
        async with (
            _connection(task_group, server, "ann", LEGACY) as ann_legacy,
            _connection(task_group, server, "bob", LEGACY) as bob_legacy,
            _connection(task_group, server, "ann", MODERN) as ann_modern,
            _connection(task_group, server, "bob", MODERN) as bob_modern,
            _connection(task_group, server, "ann", OLDER) as ann_older,
            _connection(task_group, server, "bob", OLDER) as bob_older,
        ):
            fuzzed.dispatchers = {
                ("ann", LEGACY): ann_legacy,
                ("bob", LEGACY): bob_legacy,
                ("ann", MODERN): ann_modern,
                ("bob", MODERN): bob_modern,
                ("ann", OLDER): ann_older,
                ("bob", OLDER): bob_older,
            }
            await _seed(engine, fuzzed.seeded, set())
            yield fuzzed
        task_group.cancel_scope.cancel()


@asynccontextmanager
async def _connection(
    task_group: anyio.abc.TaskGroup, server: TaskServer, owner: str, version: str
) -> AsyncIterator[Any]:
    async with create_client_server_memory_streams() as (client_streams, server_streams):
        task_group.start_soon(lambda: server.serve(*server_streams, owner=owner))
        if version != MODERN:
            async with open_client(*client_streams, version) as client:
                yield client.dispatcher
        else:
            async with open_modern_client(*client_streams) as modern:
                yield modern.dispatcher


async def _seed(engine: Engine, seeded: dict[tuple[str, str], Task], spent: set[str]) -> None:
    """Keep a task in every state for each principal, by (owner, state): create those
    missing, and replace those a request legitimately changed (ids in *spent*)."""
    manager = engine.manager
    for owner in PRINCIPALS:
        for state in STATES:
            if (owner, state) in seeded and seeded[owner, state].id not in spent:
                continue
            task = await manager.create("gated", {"gate": f"{owner}-{state}"}, owner=owner)
            if state != "queued":
                task = await manager.start(task.id)
            match state:
                case "input_required":
                    question = InputRequest(message="Your name?", requested_schema=NAME_SCHEMA)
                    task = await manager.require_input(task.id, INPUT_KEY, question)
                case "completed":
                    task = await manager.complete(task.id, {"opened": owner})
                case "failed":
                    failure = TaskFailure(code="node_failed", message="told to fail")
                    task = await manager.fail(task.id, failure)
                case "cancelled":
                    task = await manager.cancel(task.id, owner=owner)
            seeded[owner, state] = task


def _resolve(value: Any, principal: str, seeded: Mapping[tuple[str, str], Task]) -> Any:
    """*value* with every :class:`Ref` replaced by the id of the task it names."""
    if isinstance(value, Ref):
        owner = principal if value.whose == "own" else _other(principal)
        return seeded[owner, value.state].id
    if isinstance(value, Huge):
        return "x" * value.size
    if isinstance(value, dict):
        return {key: _resolve(item, principal, seeded) for key, item in value.items()}
    if isinstance(value, list):
        return [_resolve(item, principal, seeded) for item in value]
    return value


def _other(principal: str) -> str:
    return "bob" if principal == "ann" else "ann"


def _params(request: Request, seeded: Mapping[tuple[str, str], Task]) -> dict[str, Any] | None:
    """The wire params of *request* (params that are no object are sent as none/empty)."""
    params = _resolve(request.params, request.principal, seeded)
    extra = _resolve(request.meta, request.principal, seeded)
    if request.version != MODERN:
        if not isinstance(params, dict):
            return None
        if not isinstance(params.get("_meta", {}), dict):
            # The SDK's client refuses to send a non-object ``_meta`` (it raises before
            # sending), so such a request never reaches the server from this client.
            params = {key: value for key, value in params.items() if key != "_meta"}
        return {**params, "_meta": extra} if extra else params
    body = dict(params) if isinstance(params, dict) else {}
    body["_meta"] = {**extra, **envelope(request.declare, request.variant)}
    return body


ANSWERED_TO: dict[Any, TaskState] = {
    "accept": TaskState.RUNNING,
    "decline": TaskState.FAILED,  # docs/server.md: decline fails the task
    "cancel": TaskState.CANCELLED,
}


@dataclass
class Ledger:
    """What the server acknowledged: for each seeded task an owner may have changed, the
    states the acknowledged cancels and answers may have moved it to."""

    changed: dict[str, set[TaskState]] = field(default_factory=dict)

    def allow(self, task_id: str, *states: TaskState) -> None:
        self.changed.setdefault(task_id, set()).update(states)


def _answered_states(params: dict[str, Any]) -> list[TaskState]:
    """Where an acknowledged ``tasks/update`` may move an ``input_required`` task."""
    responses = params.get("inputResponses")
    answer = responses.get(INPUT_KEY) if isinstance(responses, dict) else None
    action = answer.get("action") if isinstance(answer, dict) else None
    moved = ANSWERED_TO.get(action) if isinstance(action, str) else None
    return [TaskState.INPUT_REQUIRED] if moved is None else [moved]


def _well_formed(request: Request) -> bool:
    """A plain ``tasks/get`` or ``tasks/cancel`` naming a seeded task, at a version that
    serves it (the extension declared on 2026-07-28), with no odd ``_meta``."""
    params = request.params
    return (
        request.method in {"tasks/get", "tasks/cancel"}
        and (request.version == LEGACY or (request.version == MODERN and request.declare))
        and isinstance(params, dict)
        and set(params) == {"taskId"}
        and isinstance(params["taskId"], Ref)
        and not request.meta
    )


async def _send(fuzzed: Fuzzed, request: Request, params: dict[str, Any] | None) -> Any:
    dispatcher = fuzzed.dispatchers[request.principal, request.version]
    with anyio.fail_after(5):  # a hang is a failure, not a wait
        try:
            result: dict[str, Any] = await dispatcher.send_raw_request(request.method, params)
        except MCPError as error:
            return error.error
    return result


async def _check_answer(
    fuzzed: Fuzzed,
    request: Request,
    params: dict[str, Any] | None,
    answer: Any,
    seeded: Mapping[tuple[str, str], Task],
    ledger: Ledger,
) -> None:
    """*answer* is an allowed error, or a result only the caller's own task may give."""
    where = (request, params, answer)
    by_id: dict[str, tuple[str, str]] = {task.id: key for key, task in seeded.items()}
    target = params.get("taskId") if isinstance(params, dict) else None
    whose = by_id.get(target) if isinstance(target, str) else None
    own = whose is not None and whose[0] == request.principal
    if own and whose is not None and _well_formed(request) and target not in ledger.changed:
        must_succeed = request.method == "tasks/get" or (
            request.method == "tasks/cancel" and (request.version == MODERN or whose[1] in ACTIVE)
        )
        assert must_succeed is not isinstance(answer, ErrorData), ("wrongly refused", *where)
    if isinstance(answer, ErrorData):
        allowed = allowed_codes(request.version, request.method)
        if (  # the cancelled/failed task's own error (ADR 0008, ADR 0010)
            request.method == "tasks/result"
            and own
            and whose is not None
            and whose[1] in {"cancelled", "failed"}
        ):
            allowed = allowed | {-32603}
        assert answer.code in allowed, where
        assert "Traceback" not in answer.message, where
        assert "\n" not in answer.message, ("a one-line error", *where)
        assert len(answer.message) <= 500, ("a short error", *where)
        return
    if request.method in TASK_ID_METHODS:
        assert own, ("a result for a task that is not the caller's", *where)
        assert whose is not None
        # On any other task, an acknowledged cancel or update changes nothing.
        if request.method == "tasks/cancel" and whose[1] in ACTIVE:
            ledger.allow(str(target), TaskState.CANCELLED)
        if request.method == "tasks/update" and whose[1] == "input_required":
            assert isinstance(params, dict)
            ledger.allow(str(target), *_answered_states(params))
    if request.method == "tasks/list":
        for listed in answer["tasks"]:
            task = await fuzzed.engine.manager.get(listed["taskId"])
            assert task.owner == request.principal, where
    if request.method == "tools/call":
        created = answer.get("task", {}).get("taskId") or answer.get("taskId")
        if created is not None:
            task = await fuzzed.engine.manager.get(created)
            assert task.owner == request.principal, where


def _check_store(
    before: Mapping[tuple[str, str], Task], after: Mapping[tuple[str, str], Task], ledger: Ledger
) -> None:
    """Each seeded task is as it was, unless its owner's cancel/answer was acknowledged."""
    for key, old in before.items():
        new = after[key]
        if old.id in ledger.changed:
            assert new.owner == old.owner, (old, new)
            assert new.result == old.result, (old, new)
            assert new.state in ledger.changed[old.id], (old, new)
        else:
            assert new == old, (old, new)


@settings(
    max_examples=350,  # about 2,000 requests: hypothesis averages ~6 a batch
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(batch=st.lists(requests(), min_size=1, max_size=40))
async def test_random_requests_get_spec_errors_and_leave_the_store_intact(
    fuzzed: Fuzzed, batch: list[Request]
) -> None:
    manager = fuzzed.engine.manager
    seeded = dict(fuzzed.seeded)
    ledger = Ledger()
    for request in batch:
        params = _params(request, seeded)
        answer = await _send(fuzzed, request, params)
        await _check_answer(fuzzed, request, params, answer, seeded, ledger)
    after = {key: await manager.get(task.id) for key, task in seeded.items()}
    _check_store(seeded, after, ledger)
    await _seed(fuzzed.engine, fuzzed.seeded, set(ledger.changed))
    for (principal, version), dispatcher in fuzzed.dispatchers.items():  # still serving
        body: dict[str, Any] = {"taskId": seeded[principal, "completed"].id}
        if version == MODERN:
            body["_meta"] = envelope(True, 0)
        with anyio.fail_after(10):
            if version == OLDER:
                assert await dispatcher.send_raw_request("ping", None) == {}
            else:
                got = await dispatcher.send_raw_request("tasks/get", body)
                assert got["status"] == "completed"
