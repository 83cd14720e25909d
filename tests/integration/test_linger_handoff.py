"""What a stopping stdio server hands to a lingering worker (ADR 0040): only tasks its
own process created or ran, not those its change feed shows of other processes (the
SQLite foreign-change poll)."""

from datetime import timedelta
from pathlib import Path

import anyio

from taskloom.bootstrap import open_engine
from taskloom.commands.common import open_database, open_store
from taskloom.config import TaskloomSettings
from taskloom.engine.observe import Observers
from taskloom.engine.states import TaskState
from taskloom.engine.submit import submit
from taskloom.linger import UnfinishedTasks
from taskloom.persistence.sqlite import SqliteSettings
from taskloom.workflows.countdown import countdown


async def test_only_this_process_s_creates_and_runs_are_handed_off(tmp_path: Path) -> None:
    database = tmp_path / "x.db"
    async with open_store(database, create=True):
        pass  # created and migrated
    unfinished = UnfinishedTasks()
    settings = TaskloomSettings(
        database=SqliteSettings(path=database), run_worker=False, run_sweeper=False
    )
    async with (
        open_engine(settings, observer=Observers([unfinished])) as engine,
        open_database(database) as other,
    ):
        with engine.manager.subscribe() as feed:
            theirs = await other.manager.create("countdown", {"start": 4})
            await other.manager.claim(
                worker="elsewhere",
                workflows=frozenset({"countdown"}),
                lease_for=timedelta(hours=1),
                limit=1,
            )
            with anyio.fail_after(10):  # the poll publishes it here as running
                while (seen := await feed.receive()).id != theirs.id:
                    pass
            assert seen.state is TaskState.RUNNING
        assert not await unfinished.any_left(engine.manager)
        mine = await submit(engine.manager, countdown, {"start": 4})
        assert await unfinished.any_left(engine.manager)
        await other.manager.cancel(mine.id)
        assert not await unfinished.any_left(engine.manager)
