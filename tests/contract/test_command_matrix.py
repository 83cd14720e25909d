"""The built-in `command_matrix` on a real Worker over every store, with real processes."""

import os
import signal
import sys
from pathlib import Path
from typing import Any

import pytest

from taskloom.engine.dag import Workflow
from taskloom.engine.errors import InvalidRequestError
from taskloom.engine.manager import TaskManager
from taskloom.engine.ports import TaskStore
from taskloom.engine.runs import AttemptOutcome
from taskloom.engine.states import TaskState
from taskloom.engine.submit import submit
from taskloom.testing import FakeClock
from taskloom.validation import JsonSchemaValidator
from taskloom.workflows.command_matrix import MatrixResult, command_matrix
from tests.contract.harness import finish, run_store, running, until_state
from tests.helpers import eventually

PYTHON = sys.executable

RENDEZVOUS = """
import pathlib, sys, time
mine, theirs = map(pathlib.Path, sys.argv[1:3])
mine.touch()
deadline = time.monotonic() + 20
while not theirs.exists():
    if time.monotonic() > deadline:
        sys.exit(9)
    time.sleep(0.01)
print("met", theirs.name)
"""

COUNTER = """
import pathlib, sys
counter = pathlib.Path(sys.argv[1])
count = int(counter.read_text()) + 1 if counter.exists() else 1
counter.write_text(str(count))
print(f"attempt {count}", file=sys.stderr)
sys.exit(0 if count >= int(sys.argv[2]) else 1)
"""

STUBBORN = """
import os, pathlib, signal, subprocess, sys, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
pathlib.Path(sys.argv[1]).write_text(f"{os.getpid()} {child.pid}")
time.sleep(30)
"""


@pytest.fixture
def manager(store: TaskStore, clock: FakeClock) -> TaskManager:
    return TaskManager(store, clock=clock, validator=JsonSchemaValidator())


@pytest.fixture
def matrix() -> Workflow[Any]:
    return command_matrix.configure({"allowed_programs": [PYTHON], "kill_grace_s": 0.2})


def py(script: str, *args: object, **options: Any) -> dict[str, Any]:
    return {"argv": [PYTHON, "-c", script, *map(str, args)], **options}


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"  # a zombie is dead, only not reaped


def _pids(path: Path) -> list[int]:
    return [int(pid) for pid in path.read_text().split()]


async def _all_gone(pids: list[int]) -> None:
    """Wait until none of *pids* runs (a grandchild dies a moment after its SIGKILL)."""

    async def gone() -> bool:
        return not any(_alive(pid) for pid in pids)

    await eventually(gone)


async def _run(manager: TaskManager, store: TaskStore, flow: Workflow[Any], **args: Any) -> Any:
    async with running(manager, store, flow):
        done = await finish(manager, await submit(manager, flow, args))
    assert done.state is TaskState.COMPLETED, done.error
    return MatrixResult.model_validate(done.result)


async def test_commands_run_in_parallel_with_exit_codes_and_output_tails(
    manager: TaskManager, store: TaskStore, matrix: Workflow[Any], tmp_path: Path
) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    noisy = "import sys\nfor i in range(50): print(i)\nprint('bad', file=sys.stderr)\nsys.exit(3)"
    result = await _run(
        manager,
        store,
        matrix,
        commands=[
            py(RENDEZVOUS, a, b, name="left"),  # each waits for the other: only parallel
            py(RENDEZVOUS, b, a, name="right"),  # runs can finish
            py(noisy, name="noisy"),
        ],
        tail_lines=3,
    )
    assert not result.ok
    assert (result.passed, result.failed) == (2, 1)
    by_name = {outcome.name: outcome for outcome in result.commands}
    assert list(by_name) == ["left", "right", "noisy"]
    assert (by_name["left"].status, by_name["left"].exit_code) == ("passed", 0)
    assert by_name["left"].stdout_tail == "met b"
    assert by_name["right"].stdout_tail == "met a"
    noisy_outcome = by_name["noisy"]
    assert (noisy_outcome.status, noisy_outcome.exit_code) == ("failed", 3)
    assert noisy_outcome.stdout_tail == "47\n48\n49"
    assert noisy_outcome.stderr_tail == "bad"
    assert noisy_outcome.attempts == 1
    assert (result.decision.asked, result.decision.reason) == (False, "no final command")


async def test_each_command_is_retried_as_often_as_it_says(
    manager: TaskManager, store: TaskStore, matrix: Workflow[Any], tmp_path: Path
) -> None:
    result = await _run(
        manager,
        store,
        matrix,
        commands=[
            py(COUNTER, tmp_path / "three", 3, retries=2, name="third time lucky"),
            py(COUNTER, tmp_path / "never", 99, retries=1, name="hopeless"),
        ],
    )
    lucky, hopeless = result.commands
    assert (lucky.status, lucky.attempts, lucky.stderr_tail) == ("passed", 3, "attempt 3")
    assert (hopeless.status, hopeless.attempts, hopeless.exit_code) == ("failed", 2, 1)
    attempts = await run_store(store).attempts((await manager.list()).tasks[0].id)
    lucky_attempts = [a for a in attempts if a.node == "command_00"]
    assert [a.outcome for a in lucky_attempts] == [
        AttemptOutcome.FAILED,
        AttemptOutcome.FAILED,
        AttemptOutcome.COMPLETED,
    ]
    assert lucky_attempts[0].error is not None
    assert lucky_attempts[0].error.message == "third time lucky: exit code 1: attempt 1"
    assert (tmp_path / "never").read_text() == "2"


async def test_a_timeout_kills_the_command_and_everything_it_started(
    manager: TaskManager, store: TaskStore, matrix: Workflow[Any], tmp_path: Path
) -> None:
    pids = tmp_path / "pids"
    result = await _run(
        manager, store, matrix, commands=[py(STUBBORN, pids, timeout_s=3, name="stuck")]
    )
    (outcome,) = result.commands
    assert (outcome.status, outcome.exit_code) == ("timed_out", None)
    await _all_gone(_pids(pids))  # it ignored SIGTERM: SIGKILL came


async def test_cancelling_the_task_kills_running_commands(
    manager: TaskManager, store: TaskStore, matrix: Workflow[Any], tmp_path: Path
) -> None:
    first, second = tmp_path / "first", tmp_path / "second"
    async with running(manager, store, matrix):
        task = await submit(
            manager,
            matrix,
            {"commands": [py(STUBBORN, first, timeout_s=60), py(STUBBORN, second, timeout_s=60)]},
        )

        async def both_started() -> bool:
            return all(
                path.exists() and len(path.read_text().split()) == 2 for path in (first, second)
            )

        await eventually(both_started, within_s=20)
        await manager.cancel(task.id, reason="stop")

        async def cancellations_recorded() -> bool:
            attempts = await run_store(store).attempts(task.id)
            return sum(a.outcome is AttemptOutcome.CANCELLED for a in attempts) == 2

        await eventually(cancellations_recorded)
    assert (await manager.get(task.id)).state is TaskState.CANCELLED
    await _all_gone([*_pids(first), *_pids(second)])


ESCAPER = """
import os, pathlib, subprocess, sys
daemon = subprocess.Popen(
    [sys.executable, "-c", "import time; time.sleep(30)"], start_new_session=True
)
pathlib.Path(sys.argv[1]).write_text(str(daemon.pid))
print("left a daemon holding stdout")
"""


async def test_a_program_that_exits_is_done_even_if_a_daemon_holds_its_output(
    manager: TaskManager, store: TaskStore, matrix: Workflow[Any], tmp_path: Path
) -> None:
    pid_file = tmp_path / "daemon"
    try:
        result = await _run(manager, store, matrix, commands=[py(ESCAPER, pid_file, timeout_s=60)])
    finally:
        for pid in _pids(pid_file) if pid_file.exists() else ():
            os.kill(pid, signal.SIGKILL)
    (outcome,) = result.commands
    assert (outcome.status, outcome.exit_code) == ("passed", 0)
    assert outcome.stdout_tail == "left a daemon holding stdout"


@pytest.mark.parametrize("answer", [True, False])
async def test_the_final_command_runs_only_if_the_requestor_says_yes(
    manager: TaskManager, store: TaskStore, matrix: Workflow[Any], tmp_path: Path, answer: bool
) -> None:
    marker = tmp_path / "deployed"
    arguments = {
        "commands": [py("print('checks ok')")],
        "final": py(f"open({str(marker)!r}, 'w').write('yes')", name="deploy"),
    }
    async with running(manager, store, matrix):
        task = await submit(manager, matrix, arguments)
        waiting = await until_state(manager, task, TaskState.INPUT_REQUIRED)
        (key,) = waiting.input_requests
        question = waiting.input_requests[key]
        assert question.message == "1 of 1 commands passed. Run the final command `deploy`?"
        assert "run_final" in str(question.requested_schema)
        await manager.provide_input(task.id, key, {"run_final": answer})
        done = await finish(manager, task)
    result = MatrixResult.model_validate(done.result)
    assert result.decision.asked
    assert result.decision.run_final is answer
    assert marker.exists() is answer
    if answer:
        assert result.final is not None
        assert (result.final.name, result.final.status) == ("deploy", "passed")
        assert result.decision.reason == "confirmed"
    else:
        assert result.final is None
        assert result.decision.reason == "declined"
    assert result.ok


async def test_a_failed_check_withholds_the_final_command_without_asking(
    manager: TaskManager, store: TaskStore, matrix: Workflow[Any], tmp_path: Path
) -> None:
    result = await _run(
        manager,
        store,
        matrix,
        commands=[py("raise SystemExit(1)"), py("pass")],
        final=py("raise SystemExit('must not run')"),
    )
    assert result.decision.model_dump() == {
        "asked": False,
        "run_final": False,
        "reason": "1 of 2 commands failed",
    }
    assert result.final is None
    assert not result.ok


async def test_a_program_that_cannot_start_is_reported(
    manager: TaskManager, store: TaskStore, tmp_path: Path
) -> None:
    flow = command_matrix.configure({"allowed_programs": ["no-such-program-xyz", PYTHON]})
    result = await _run(
        manager,
        store,
        flow,
        commands=[
            {"argv": ["no-such-program-xyz"], "retries": 3},
            py("pass", cwd=str(tmp_path / "missing")),
        ],
    )
    missing_program, missing_dir = result.commands
    assert (missing_program.status, missing_program.attempts) == ("not_started", 1)
    assert missing_program.error == "program 'no-such-program-xyz' was not found"
    assert missing_dir.error == f"working directory {str(tmp_path / 'missing')!r} does not exist"


@pytest.mark.parametrize(
    ("settings", "arguments", "message"),
    [
        ({}, {"commands": [{"argv": ["true"]}]}, "command_matrix is disabled: the operator"),
        (
            {"allowed_programs": [PYTHON]},
            {"commands": [{"argv": [PYTHON]}, {"argv": ["rm", "-rf", "x"]}]},
            "commands: Value error, command 2 \\(rm -rf x\\): program 'rm' is not in allowed",
        ),
        (
            {"allowed_programs": ["python3"]},
            {"commands": [{"argv": ["./python3"]}]},
            "program './python3' is not allowed \\(a path must resolve",
        ),
        (
            {"allowed_programs": [PYTHON]},
            {"commands": [{"argv": [PYTHON]}], "final": {"argv": ["sh", "-c", "x"]}},
            "final: Value error, the final command \\(sh -c x\\): program 'sh' is not",
        ),
        (
            {"allowed_programs": [PYTHON]},
            {"commands": [{"shell": "echo hi"}]},
            "shell commands are not allowed; give argv instead",
        ),
        (
            {"allowed_programs": ["*"]},
            {"commands": [{"argv": ["true"], "env": {"LD_PRELOAD": "/tmp/x.so"}}]},
            "LD_PRELOAD cannot be set",
        ),
        (
            {"allowed_programs": ["*"]},
            {"commands": [{"argv": ["true"], "shell": "true"}]},
            "give exactly one of argv and shell",
        ),
    ],
)
async def test_a_command_the_operator_does_not_allow_is_refused_before_a_task_exists(
    manager: TaskManager, settings: dict[str, Any], arguments: dict[str, Any], message: str
) -> None:
    flow = command_matrix.configure(settings) if settings else command_matrix
    with pytest.raises(InvalidRequestError, match=message):
        await submit(manager, flow, arguments)
    assert not (await manager.list()).tasks


async def test_a_queued_call_is_checked_again_when_its_run_starts(
    manager: TaskManager, store: TaskStore, matrix: Workflow[Any]
) -> None:
    task = await submit(manager, matrix, {"commands": [py("pass")]})
    async with running(manager, store, command_matrix):  # the operator withdrew the list
        done = await finish(manager, task)
    assert done.state is TaskState.FAILED
    assert done.error is not None
    assert done.error.code == "invalid_input"
    assert "command_matrix is disabled" in done.error.message


async def test_shell_commands_run_only_when_allowed(manager: TaskManager, store: TaskStore) -> None:
    flow = command_matrix.configure({"allow_shell": True})
    result = await _run(manager, store, flow, commands=[{"shell": "echo $((6 * 7)) | tr 4 x"}])
    assert result.commands[0].stdout_tail == "x2"
    assert result.commands[0].name == "echo $((6 * 7)) | tr 4 x"


async def test_the_matrix_is_bounded_by_its_slots(
    manager: TaskManager, matrix: Workflow[Any]
) -> None:
    with pytest.raises(InvalidRequestError, match="at most 16 items"):
        await submit(manager, matrix, {"commands": [py("pass")] * 17})
