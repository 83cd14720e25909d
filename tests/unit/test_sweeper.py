"""The TTL sweeper outlives a store that fails: it logs and sweeps again later."""

import logging
from datetime import datetime

import anyio
import pytest

from taskloom.engine.errors import DatabaseUnavailableError
from taskloom.engine.manager import TaskManager, TaskManagerSettings
from taskloom.testing import InMemoryTaskStore


class DownThenUp(InMemoryTaskStore):
    """A store whose first two sweeps fail as a database outage would."""

    def __init__(self) -> None:
        super().__init__()
        self.sweeps = 0
        self.recovered = anyio.Event()

    async def purge_expired(self, now: datetime, limit: int) -> int:
        self.sweeps += 1
        if self.sweeps <= 2:
            raise DatabaseUnavailableError("PostgreSQL test is unavailable")
        self.recovered.set()
        return await super().purge_expired(now, limit)


async def test_a_failed_sweep_is_logged_and_the_sweeper_goes_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    store = DownThenUp()
    manager = TaskManager(store, settings=TaskManagerSettings(sweep_interval_s=0.01))
    with caplog.at_level(logging.DEBUG, logger="taskloom.engine.manager"):
        async with anyio.create_task_group() as task_group:
            task_group.start_soon(manager.run_sweeper)
            with anyio.fail_after(10):
                await store.recovered.wait()
            task_group.cancel_scope.cancel()
    failures = [r.getMessage() for r in caplog.records if "TTL sweep failed" in r.getMessage()]
    assert len(failures) == 2
    # an unavailable store is announced once by the store itself, not at every sweep
    assert all(r.levelno == logging.DEBUG for r in caplog.records if "TTL sweep" in r.getMessage())
    assert "DatabaseUnavailableError: PostgreSQL test is unavailable" in failures[0]
