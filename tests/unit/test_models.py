"""The task model's timestamps and ids."""

import re
from datetime import UTC, datetime, timedelta, timezone

import pytest
from pydantic import ValidationError

from taskloom.engine.errors import InvalidRequestError
from taskloom.engine.ids import new_task_id
from taskloom.engine.manager import TaskManager
from taskloom.engine.models import Task, TaskId
from taskloom.engine.states import TaskState
from taskloom.testing import FakeClock, InMemoryTaskStore

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def _task(created_at: object) -> Task:
    return Task.model_validate(
        {
            "id": TaskId("t1"),
            "name": "a",
            "arguments": {},
            "owner": None,
            "state": TaskState.QUEUED,
            "created_at": created_at,
            "updated_at": NOW,
            "ttl_ms": None,
            "version": 1,
        }
    )


@pytest.mark.parametrize(
    "moment",
    [
        NOW.replace(tzinfo=None),
        NOW.astimezone(timezone(timedelta(hours=1))),
        "2026-01-01T01:00:00+01:00",
        "2026-01-01T00:00:00",
    ],
)
def test_a_timestamp_must_be_timezone_aware_utc(moment: object) -> None:
    with pytest.raises(ValidationError) as caught:
        _task(moment)
    assert caught.value.errors()[0]["loc"] == ("created_at",)


@pytest.mark.parametrize(
    "moment", [NOW, NOW.replace(tzinfo=timezone(timedelta(0), "Z")), "2026-01-01T00:00:00Z"]
)
def test_any_timestamp_at_offset_zero_is_kept(moment: object) -> None:
    created_at = _task(moment).created_at
    assert created_at == NOW
    assert created_at.utcoffset() == timedelta(0)
    if isinstance(moment, datetime):
        assert created_at is moment  # kept as given, not converted
    assert Task.model_validate_json(_task(moment).model_dump_json()).created_at == NOW


def test_a_manager_on_a_clock_without_a_timezone_refuses_to_create() -> None:
    class NaiveClock(FakeClock):
        def now(self) -> datetime:
            return super().now().replace(tzinfo=None)

    manager = TaskManager(InMemoryTaskStore(), clock=NaiveClock())
    with pytest.raises(InvalidRequestError, match="created_at"):
        manager.draft("a")


def test_task_ids_are_24_url_safe_characters_never_starting_with_a_dash() -> None:
    ids = {new_task_id() for _ in range(2000)}
    assert len(ids) == 2000
    assert all(re.fullmatch(r"[A-Za-z0-9_-]{24}", task_id) for task_id in ids)
    assert not [task_id for task_id in ids if task_id.startswith("-")]
