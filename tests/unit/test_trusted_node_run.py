"""``trusted_node_run`` builds the checkpoint pydantic's own constructors build."""

from datetime import UTC, datetime

import pytest
from pydantic import ValidationError

from taskloom.engine.runs import ErrorInfo, NodeRun, NodeState, trusted_node_run

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
