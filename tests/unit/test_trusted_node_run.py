"""``trusted_node_run`` and ``completed_end`` build what pydantic's own constructors build."""

from datetime import UTC, datetime

import pytest
from pydantic import JsonValue, ValidationError

from taskloom.engine.runs import (
    AttemptOutcome,
    ErrorInfo,
    NodeEnd,
    NodeRun,
    NodeStart,
    NodeState,
    completed_end,
    trusted_node_run,
    trusted_start,
)

FIELDS = {
    "node": "leaf[3]",
    "state": NodeState.FAILED,
    "attempt": 2,
    "failures": 1,
    "interruptions": 1,
    "not_before": datetime(2026, 11, 26, 12, 0, tzinfo=UTC),
    "waiting_for": None,
    "output": {"items": [1, 2.5, "three", None]},
    "error": ErrorInfo(error_type="ValueError", message="bad", fingerprint="f"),
    "updated_at": datetime(2026, 11, 26, 12, 1, tzinfo=UTC),
}


def test_equal_to_the_validated_and_the_constructed_model() -> None:
    trusted = trusted_node_run(**FIELDS)  # type: ignore[arg-type]
    validated = NodeRun(**FIELDS)
    assert trusted == validated == NodeRun.model_construct(**FIELDS)  # type: ignore[arg-type]
    assert trusted.model_dump() == validated.model_dump()
    assert trusted.model_dump_json() == validated.model_dump_json()
    assert trusted.model_fields_set == validated.model_fields_set
    assert repr(trusted) == repr(validated)


def test_behaves_as_a_frozen_model() -> None:
    trusted = trusted_node_run(**FIELDS)  # type: ignore[arg-type]
    with pytest.raises(ValidationError):
        trusted.attempt = 3  # type: ignore[misc]
    copied = trusted.model_copy(update={"attempt": 3})
    assert copied.attempt == 3
    assert trusted.attempt == 2  # the copy's fields are its own
    assert copied.model_fields_set == trusted.model_fields_set
    assert NodeRun.model_validate(trusted.model_dump()) == trusted


def test_a_completed_end_equals_the_validated_one() -> None:
    output: JsonValue = {"items": [1, 2.5, "three", None], "done": True}
    trusted = completed_end("leaf[3]", 2, output)
    validated = NodeEnd(
        node="leaf[3]",
        attempt=2,
        outcome=AttemptOutcome.COMPLETED,
        state=NodeState.COMPLETED,
        output=output,
    )
    assert trusted == validated
    assert trusted.model_dump_json() == validated.model_dump_json()
    assert repr(trusted) == repr(validated)


def test_a_completed_end_sets_the_fields_validation_sets() -> None:
    # validation sets the fields given, not the defaults: a dump of the set fields (or
    # a copy's) must not differ between the trusted end and the validated one
    trusted = completed_end("leaf[3]", 2, [1, 2])
    validated = NodeEnd(
        node="leaf[3]",
        attempt=2,
        outcome=AttemptOutcome.COMPLETED,
        state=NodeState.COMPLETED,
        output=[1, 2],
    )
    assert trusted.model_fields_set == validated.model_fields_set
    assert trusted.model_dump(exclude_unset=True) == validated.model_dump(exclude_unset=True)
    copied = trusted.model_copy(update={"attempt": 3})
    assert copied.model_fields_set == validated.model_copy(update={"attempt": 3}).model_fields_set


def test_the_shared_fields_set_is_never_changed_by_a_copy() -> None:
    first = trusted_node_run(**FIELDS)  # type: ignore[arg-type]
    before = set(first.model_fields_set)
    first.model_copy(update={"attempt": 3})
    first.model_copy(deep=True)
    end = completed_end("leaf[3]", 2, None)
    end.model_copy(update={"waiting_for": "x"})
    assert trusted_node_run(**FIELDS).model_fields_set == before  # type: ignore[arg-type]
    assert completed_end("a", 1, None).model_fields_set == end.model_fields_set


@pytest.mark.parametrize("interrupted", [None, 2])
def test_a_trusted_start_equals_the_validated_one(interrupted: int | None) -> None:
    trusted = trusted_start("leaf[3]", 3, 1, interrupted)
    validated = NodeStart(
        node="leaf[3]", attempt=3, interruptions=1, interrupted_attempt=interrupted
    )
    assert trusted == validated
    assert trusted.model_dump_json() == validated.model_dump_json()
    assert trusted.model_fields_set == validated.model_fields_set
    assert repr(trusted) == repr(validated)
