"""The transition table, checked pair by pair."""

import itertools

import pytest

from taskloom.engine.errors import IllegalTransitionError
from taskloom.engine.states import (
    ACTIVE_STATES,
    TERMINAL_STATES,
    TRANSITIONS,
    TaskState,
    check_transition,
    is_terminal,
)

EXPECTED_LEGAL = {
    (TaskState.QUEUED, TaskState.RUNNING),
    (TaskState.QUEUED, TaskState.FAILED),
    (TaskState.QUEUED, TaskState.CANCELLED),
    (TaskState.RUNNING, TaskState.QUEUED),
    (TaskState.RUNNING, TaskState.INPUT_REQUIRED),
    (TaskState.RUNNING, TaskState.COMPLETED),
    (TaskState.RUNNING, TaskState.FAILED),
    (TaskState.RUNNING, TaskState.CANCELLED),
    (TaskState.INPUT_REQUIRED, TaskState.RUNNING),
    (TaskState.INPUT_REQUIRED, TaskState.QUEUED),
    (TaskState.INPUT_REQUIRED, TaskState.FAILED),
    (TaskState.INPUT_REQUIRED, TaskState.CANCELLED),
}


def test_the_table_names_every_state() -> None:
    assert set(TRANSITIONS) == set(TaskState)


@pytest.mark.parametrize(("current", "target"), list(itertools.product(TaskState, TaskState)))
def test_every_pair_is_legal_exactly_when_expected(current: TaskState, target: TaskState) -> None:
    if (current, target) in EXPECTED_LEGAL:
        check_transition("t1", current, target)
    else:
        with pytest.raises(IllegalTransitionError) as raised:
            check_transition("t1", current, target)
        assert raised.value.current is current
        assert raised.value.target is target
        assert f"from {current} to {target}" in str(raised.value)


def test_terminal_states_are_exactly_completed_failed_and_cancelled() -> None:
    assert {TaskState.COMPLETED, TaskState.FAILED, TaskState.CANCELLED} == TERMINAL_STATES
    assert all(is_terminal(state) for state in TERMINAL_STATES)
    assert not any(is_terminal(state) for state in ACTIVE_STATES)


def test_every_active_state_can_reach_every_terminal_state() -> None:
    for start in ACTIVE_STATES:
        reachable: set[TaskState] = set()
        frontier = {start}
        while frontier:
            state = frontier.pop()
            for target in TRANSITIONS[state]:
                if target not in reachable:
                    reachable.add(target)
                    frontier.add(target)
        assert reachable >= TERMINAL_STATES, start


def test_states_are_stored_by_their_lowercase_value() -> None:
    assert [state.value for state in TaskState] == [
        "queued",
        "running",
        "input_required",
        "completed",
        "failed",
        "cancelled",
    ]
