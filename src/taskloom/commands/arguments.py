"""What each command's handler receives: its flags and arguments, typed and frozen.

click parses the command line into these (:func:`taskloom.commands.dispatch.dispatch`
builds the class a handler's parameter names); a test checks that each class has
exactly the parameters of its command. ``serve`` and ``worker`` receive
:class:`~taskloom.commands.setting.Values` (their flags are the setting table's).
"""

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Literal, Protocol


class Where(Protocol):
    """The database and the workflow modules a command was given."""

    @property
    def db(self) -> str: ...

    @property
    def workflows(self) -> Sequence[str]: ...


@dataclass(frozen=True, kw_only=True)
class DbArgs:
    """A command on a database, printing text or ``--json``."""

    db: str
    json: bool


@dataclass(frozen=True, kw_only=True)
class TaskArgs(DbArgs):
    """A command on tasks, with the workflows that ran them (``--workflows``)."""

    workflows: Sequence[str]


@dataclass(frozen=True, kw_only=True)
class TaskIdArgs(TaskArgs):
    """A command on one task."""

    task_id: str


@dataclass(frozen=True, kw_only=True)
class ListArgs(TaskArgs):
    """``tasks list``."""

    state: Sequence[str]
    workflow: str | None
    since: str | None
    limit: int
    cursor: str | None


@dataclass(frozen=True, kw_only=True)
class ResultArgs(TaskIdArgs):
    """``tasks result``."""

    wait: bool


@dataclass(frozen=True, kw_only=True)
class CancelArgs(TaskIdArgs):
    """``tasks cancel``."""

    reason: str


@dataclass(frozen=True, kw_only=True)
class AnswerArgs(TaskIdArgs):
    """``tasks answer``."""

    answer: str
    key: str | None


@dataclass(frozen=True, kw_only=True)
class ResumeArgs(TaskIdArgs):
    """``tasks resume``."""

    from_node: str | None
    run: bool
    settings: str | None


@dataclass(frozen=True, kw_only=True)
class UpgradeArgs(TaskArgs):
    """``tasks upgrade``."""

    task_ids: Sequence[str]
    to_version: str
    all_of: str | None


@dataclass(frozen=True, kw_only=True)
class DeleteArgs(TaskArgs):
    """``tasks delete``."""

    task_ids: Sequence[str]


@dataclass(frozen=True, kw_only=True)
class PurgeArgs(TaskArgs):
    """``tasks purge``."""

    older_than: timedelta
    state: Sequence[str]


@dataclass(frozen=True, kw_only=True)
class WorkflowArgs:
    """``workflows show``."""

    name: str
    json: bool
    workflows: Sequence[str]


@dataclass(frozen=True, kw_only=True)
class RunArgs:
    """``run``."""

    workflow: str
    input_text: str | None
    input_flag: str | None
    ttl: timedelta | Literal["forever"] | None
    db: str
    workflows: Sequence[str]
    settings: str | None


@dataclass(frozen=True, kw_only=True)
class TokenCreateArgs(DbArgs):
    """``tokens create``."""

    principal: str
    expires: str
    scope: Sequence[str]


@dataclass(frozen=True, kw_only=True)
class TokenArgs(DbArgs):
    """``tokens revoke``."""

    id: str
