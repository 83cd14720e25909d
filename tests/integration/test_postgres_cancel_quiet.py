"""Issue 26, item 5: cancelling a running map on PostgreSQL logs no psycopg warning and
keeps the pool's connections (a query cancelled mid-flight made psycopg close its
connection: "query cancellation interrupted", then "discarding closed connection")."""

import logging
from typing import cast

import anyio
import pytest
from pydantic import BaseModel

from taskloom.bootstrap import open_engine
from taskloom.config import TaskloomSettings
from taskloom.engine.dag import MapContext, NodeContext, Workflow
from taskloom.engine.models import TaskId
from taskloom.engine.registry import WorkflowRegistry
from taskloom.engine.states import TaskState
from taskloom.engine.submit import submit
from taskloom.persistence.postgres import PostgresSettings, PostgresTaskStore
from tests.helpers import eventually


class Empty(BaseModel):
    pass


busy = Workflow("busy", version="1", input=Empty)


@busy.node()
async def items(ctx: NodeContext[Empty]) -> list[int]:
    return list(range(3000))


@busy.map(over=items, concurrency=16)
async def work(ctx: MapContext[Empty, int]) -> int:
    await anyio.sleep(0.005)  # short items: most of the time is spent writing checkpoints
    return ctx.item


@pytest.mark.parametrize("rounds", [3])
async def test_cancelling_a_running_map_keeps_the_pool_and_logs_no_warning(
    database: PostgresSettings, caplog: pytest.LogCaptureFixture, rounds: int
) -> None:
    caplog.set_level(logging.WARNING)
    settings = TaskloomSettings(database=database)
    async with open_engine(settings, workflows=WorkflowRegistry({"busy": busy})) as engine:
        manager = engine.manager
        pool = cast("PostgresTaskStore", engine.runs)._db.pool
        for _ in range(rounds):
            task = await submit(manager, busy, {})

            async def items_running(task_id: TaskId = task.id) -> bool:
                checkpoints = await engine.runs.checkpoints(task_id)
                return sum(name.startswith("work[") for name in checkpoints) >= 32

            await eventually(items_running, within_s=30)
            await manager.cancel(task.id)
            done = await manager.wait_until_terminal(task.id, recheck_every=0.1)
            assert done.state is TaskState.CANCELLED
        stats = pool.get_stats()
    psycopg_records = [
        record for record in caplog.records if record.name.startswith(("psycopg", "taskloom"))
    ]
    assert not [
        record.getMessage() for record in psycopg_records if record.levelno >= logging.WARNING
    ]
    assert stats.get("returns_bad", 0) == 0, stats
    assert stats.get("connections_lost", 0) == 0, stats
