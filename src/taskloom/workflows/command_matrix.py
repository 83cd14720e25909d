"""`command_matrix`: run checks in parallel, then ask before a final command.

The deployment-readiness case: each command runs in a node of its own (phase ``run``), with
its own timeout and retries; exit codes, durations and output tails are collected. The
``confirm`` node then asks the requestor whether to run the ``final`` command (only if every
command passed, unless ``ask_on_failure``), and ``final`` runs it if the answer is yes.

A failing command is an outcome, not a crash: the task completes and its result says
``ok: false``. The task fails only when a command cannot be run at all as asked (e.g. the
operator has since removed its program from the allow-list).

It executes programs, so it is disabled until the operator lists the programs it may
start (``allowed_programs``, see :mod:`taskloom.workflows.programs`); calls are checked
against that list when submitted, again when the run starts, and once more before each
start. No shell is used unless the operator sets ``allow_shell``.
"""

import re
import shlex
from typing import Final, Literal, Self

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationInfo,
    field_validator,
    model_validator,
)

from taskloom.engine.dag import Node, NodeContext, Workflow, settings_of
from taskloom.engine.retry import RetryPolicy
from taskloom.workflows.processes import Finished, run_program
from taskloom.workflows.programs import ProgramNotAllowedError, check_entries, resolve_program

MAX_COMMANDS: Final = 16
"""Command slots: a DAG is static, so the matrix has this many ``run`` nodes (unused ones
finish at once)."""
MAX_RETRIES: Final = 10
SHELL: Final = "/bin/sh"
_ENV_NAME: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_LOADER_VARIABLES: Final = ("LD_", "DYLD_")


class CommandMatrixSettings(BaseModel):
    """What the operator allows; by default nothing, so every call is refused."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    allowed_programs: tuple[str, ...] = ()
    """Programs a command may start: names (``make``), absolute paths (``/usr/bin/make``)
    or ``*`` for any. Empty: command_matrix refuses every call."""
    allow_shell: bool = False
    """Allow ``shell`` commands (run by ``/bin/sh -c``, which can start any program)."""
    kill_grace_s: float = Field(default=2.0, ge=0, le=60)
    """After a timeout or a cancel, how long a command's processes get between SIGTERM and
    SIGKILL."""

    @field_validator("allowed_programs")
    @classmethod
    def _entries(cls, entries: tuple[str, ...]) -> tuple[str, ...]:
        return check_entries(entries)

    @property
    def enabled(self) -> bool:
        """True if some command could be allowed."""
        return bool(self.allowed_programs) or self.allow_shell


class CommandSpec(BaseModel):
    """One command: a program and its arguments (`argv`), or a `shell` line."""

    model_config = ConfigDict(extra="forbid")

    argv: list[str] | None = Field(
        default=None, min_length=1, max_length=1000, description='e.g. ["pytest", "-q"]'
    )
    shell: str | None = Field(
        default=None, min_length=1, description="a /bin/sh line (only if the operator allows)"
    )
    name: str | None = Field(default=None, max_length=200, description="a label for reports")
    cwd: str | None = Field(default=None, description="working directory (default: the worker's)")
    env: dict[str, str] = Field(default_factory=dict, description="variables added to the worker's")
    timeout_s: float = Field(default=300, gt=0, le=86_400)
    retries: int = Field(default=0, ge=0, le=MAX_RETRIES, description="more attempts if it fails")

    @model_validator(mode="after")
    def _well_formed(self) -> Self:
        if (self.argv is None) == (self.shell is None):
            raise ValueError("give exactly one of argv and shell")
        texts = [*(self.argv or ()), self.shell or "", self.cwd or "", *self.env.values()]
        if any("\0" in text for text in texts):
            raise ValueError("a command cannot contain a NUL character")
        for variable in self.env:
            if not _ENV_NAME.fullmatch(variable):
                raise ValueError(f"{variable!r} is not an environment variable name")
            if variable.startswith(_LOADER_VARIABLES):
                raise ValueError(f"{variable} cannot be set: it would load code into any program")
        return self

    def command_line(self) -> list[str]:
        """The argv to start (before the program is resolved)."""
        return list(self.argv) if self.argv is not None else [SHELL, "-c", self.shell or ""]

    def label(self) -> str:
        """Its name, or its command line."""
        return self.name or self.shell or shlex.join(self.argv or ())


def _check(spec: CommandSpec, settings: CommandMatrixSettings) -> str:
    """The program to execute for *spec*; raises ProgramNotAllowedError."""
    if spec.shell is not None:
        if not settings.allow_shell:
            raise ProgramNotAllowedError("shell commands are not allowed; give argv instead")
        return SHELL
    return resolve_program(spec.command_line()[0], settings.allowed_programs, cwd=spec.cwd)


class CommandMatrixInput(BaseModel):
    """Run commands in parallel (each with its own timeout and retries), collect exit codes
    and output tails, then ask before running a final command."""

    model_config = ConfigDict(extra="forbid")

    commands: list[CommandSpec] = Field(min_length=1, max_length=MAX_COMMANDS)
    final: CommandSpec | None = Field(default=None, description="run only if confirmed")
    question: str | None = Field(
        default=None, max_length=2000, description="what to ask before the final command"
    )
    ask_on_failure: bool = Field(
        default=False, description="offer the final command even if a command failed"
    )
    tail_lines: int = Field(default=20, ge=0, le=500, description="output lines kept per stream")

    @field_validator("commands", "final")
    @classmethod
    def _allowed(
        cls, value: list[CommandSpec] | CommandSpec | None, info: ValidationInfo
    ) -> list[CommandSpec] | CommandSpec | None:
        settings = settings_of(info, CommandMatrixSettings)
        if not settings.enabled:
            raise ValueError(
                "command_matrix is disabled: the operator allows no programs "
                "(workflow_settings.command_matrix.allowed_programs)"
            )
        specs = value if isinstance(value, list) else [value] if value is not None else []
        for number, spec in enumerate(specs, start=1):
            try:
                _check(spec, settings)
            except ProgramNotAllowedError as error:
                which = f"command {number}" if isinstance(value, list) else "the final command"
                raise ValueError(f"{which} ({spec.label()}): {error}") from None
        return value


CommandStatus = Literal["passed", "failed", "timed_out", "not_started"]


class CommandOutcome(BaseModel):
    """How a command ended (after its retries)."""

    name: str
    status: CommandStatus
    exit_code: int | None
    duration_s: float
    attempts: int
    stdout_tail: str
    stderr_tail: str
    error: str | None = None


class Decision(BaseModel):
    """Whether the final command runs, and why."""

    asked: bool
    run_final: bool
    reason: str


class FinalAnswer(BaseModel):
    """The requestor's answer to the question before the final command."""

    run_final: bool = Field(description="true to run the final command now")


class MatrixResult(BaseModel):
    """What a finished matrix reports."""

    ok: bool
    """Every command passed (and the final one too, if it ran)."""
    passed: int
    failed: int
    commands: list[CommandOutcome]
    decision: Decision
    final: CommandOutcome | None


class CommandFailedError(Exception):
    """A command failed an attempt that its retries allow to repeat."""


def _settings(ctx: NodeContext[CommandMatrixInput]) -> CommandMatrixSettings:
    settings = ctx.settings
    return settings if isinstance(settings, CommandMatrixSettings) else CommandMatrixSettings()


async def _execute(ctx: NodeContext[CommandMatrixInput], spec: CommandSpec) -> CommandOutcome:
    """One attempt of *spec*; raises CommandFailedError if it failed and may retry."""
    settings = _settings(ctx)
    argv = [_check(spec, settings), *spec.command_line()[1:]]
    finished = await run_program(
        argv,
        cwd=spec.cwd,
        env=spec.env,
        timeout_s=spec.timeout_s,
        tail_lines=ctx.input.tail_lines,
        kill_grace_s=settings.kill_grace_s,
    )
    status = _status(finished)
    outcome = CommandOutcome(
        name=spec.label(),
        status=status,
        exit_code=finished.exit_code,
        duration_s=round(finished.duration_s, 3),
        attempts=ctx.attempt,
        stdout_tail=finished.stdout,
        stderr_tail=finished.stderr,
        error=finished.error,
    )
    if status in ("failed", "timed_out") and ctx.attempt <= spec.retries:
        detail = (
            f"timed out after {spec.timeout_s:g} s"
            if finished.timed_out
            else (f"exit code {finished.exit_code}")
        )
        last = finished.stderr.rsplit("\n", 1)[-1]
        raise CommandFailedError(f"{spec.label()}: {detail}" + (f": {last}" if last else ""))
    return outcome


def _status(finished: Finished) -> CommandStatus:
    if finished.error is not None:
        return "not_started"
    if finished.timed_out:
        return "timed_out"
    return "passed" if finished.exit_code == 0 else "failed"


_RETRY: Final = RetryPolicy(
    max_attempts=MAX_RETRIES + 1,
    initial_delay_s=1.0,
    max_delay_s=30.0,
    retry_on=(CommandFailedError,),
)


command_matrix = Workflow(
    "command_matrix",
    version="1",
    input=CommandMatrixInput,
    output=MatrixResult,
    settings=CommandMatrixSettings,
    title="Command matrix",
    description=(
        "Run commands in parallel (each with its own timeout and retries), collect exit "
        "codes and output tails, then ask before a final command. Disabled unless the "
        "operator allows programs."
    ),
    phases=["run", "confirm", "final", "report"],
    max_concurrency=MAX_COMMANDS,
)


def _slot(index: int) -> Node[CommandOutcome | None]:
    @command_matrix.node(name=f"command_{index:02}", phase="run", retry=_RETRY)
    async def run(ctx: NodeContext[CommandMatrixInput]) -> CommandOutcome | None:
        if index >= len(ctx.input.commands):
            return None
        return await _execute(ctx, ctx.input.commands[index])

    return run


slots = [_slot(index) for index in range(MAX_COMMANDS)]


def _outcomes(ctx: NodeContext[CommandMatrixInput]) -> list[CommandOutcome]:
    return [outcome for slot in slots if (outcome := ctx.output(slot)) is not None]


@command_matrix.node(phase="confirm", deps=slots)
async def confirm(ctx: NodeContext[CommandMatrixInput]) -> Decision:
    """Ask whether to run the final command (if there is one and it may be offered)."""
    final = ctx.input.final
    if final is None:
        return Decision(asked=False, run_final=False, reason="no final command")
    outcomes = _outcomes(ctx)
    failed = sum(outcome.status != "passed" for outcome in outcomes)
    if failed and not ctx.input.ask_on_failure:
        return Decision(
            asked=False, run_final=False, reason=f"{failed} of {len(outcomes)} commands failed"
        )
    question = ctx.input.question or (
        f"{len(outcomes) - failed} of {len(outcomes)} commands passed. "
        f"Run the final command `{final.label()}`?"
    )
    answer = await ctx.ask(question, FinalAnswer)
    reason = "confirmed" if answer.run_final else "declined"
    return Decision(asked=True, run_final=answer.run_final, reason=reason)


@command_matrix.node(phase="final", deps=[confirm], retry=_RETRY)
async def final(ctx: NodeContext[CommandMatrixInput]) -> CommandOutcome | None:
    """Run the final command if the answer was yes."""
    if ctx.input.final is None or not ctx.output(confirm).run_final:
        return None
    return await _execute(ctx, ctx.input.final)


@command_matrix.node(phase="report", deps=[*slots, confirm, final])
async def summary(ctx: NodeContext[CommandMatrixInput]) -> MatrixResult:
    """Every outcome, and whether all passed."""
    outcomes = _outcomes(ctx)
    last = ctx.output(final)
    passed = sum(outcome.status == "passed" for outcome in outcomes)
    return MatrixResult(
        ok=passed == len(outcomes) and (last is None or last.status == "passed"),
        passed=passed,
        failed=len(outcomes) - passed,
        commands=outcomes,
        decision=ctx.output(confirm),
        final=last,
    )
