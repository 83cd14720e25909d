"""What differs between the two SQL stores in the text of the shared statements."""

import json
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Final

_EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)


def from_micros(value: int) -> datetime:
    """The UTC datetime for :func:`micros` output."""
    return _EPOCH + timedelta(microseconds=value)


def micros(moment: datetime) -> int:
    """Microseconds since the Unix epoch (exact, unlike float timestamps)."""
    delta = moment - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def _utc(moment: datetime) -> datetime:
    return moment.astimezone(UTC)


@dataclass(frozen=True, eq=False)
class Dialect:
    """One SQL store's spelling of the shared statements. Compared and hashed by
    identity (there are two): statement texts are built once per dialect and cached."""

    parameter: Callable[[str], str]
    """The placeholder of a named parameter."""
    positional: str
    """The placeholder of a positional parameter."""
    time: Callable[[datetime], Any]
    """A datetime as a column stores it."""
    moment: Callable[[Any], datetime]
    """A stored time column as a UTC datetime."""
    position: str
    """The column of a task's position (creation order)."""
    created: str
    """The column of a task's creation time."""
    history_key: str
    """The column of ``task_history`` naming the task."""
    history_task: str
    """The value of :attr:`history_key` for the task id bound as ``task``."""
    row_lock: str = ""
    """Appended to a read of task rows about to be written (writers queue on it)."""
    share_lock: bool = False
    """Whether a read of a lease row the transaction relies on locks it (:meth:`shared`)."""
    delete_lock: str = ""
    """Appended to a read of a row the transaction may delete (writers queue on it)."""
    skip_locked: str = ""
    """Appended to a choice of rows to delete (rows another writer holds are left)."""
    fuses: bool = False
    """Whether writing statements may be fused into one (writable ``WITH`` clauses)."""
    arrays: bool = False
    """Whether a list is bound as one array parameter (``= ANY``; else one JSON text)."""
    lateral: bool = False
    """Whether a subquery in ``FROM`` may read the columns of the tables before it
    (``LATERAL``)."""
    recorded_version: str = "t.workflow_version"
    """The version a task recorded, as an SQL expression (the column schema 8 added)."""

    @property
    def folds_fence(self) -> bool:
        """Whether a lease fence and the writes it allows may be one statement (a writable
        ``WITH`` and a share-locking read; see :mod:`.fence`)."""
        return self.fuses and self.share_lock

    def stored(self, moment: datetime | None) -> Any:
        """*moment* as a column stores it (``None`` stays ``None``)."""
        return None if moment is None else self.time(moment)

    def shared(self, table: str = "") -> str:
        """Appended to a read of the lease row (of *table*, in a join) to hold it."""
        if not self.share_lock:
            return ""
        return f" FOR SHARE OF {table}" if table else " FOR SHARE"

    def skipping(self, table: str) -> str:
        """Appended to a choice of *table*'s rows to claim: rows another writer holds
        are passed over, the others held."""
        return f"{self.row_lock} OF {table} SKIP LOCKED" if self.row_lock else ""

    def read(self, value: Any) -> datetime | None:
        """A nullable stored time as a datetime."""
        return None if value is None else self.moment(value)


SQLITE: Final = Dialect(
    parameter=lambda name: f":{name}",
    positional="?",
    time=micros,
    moment=from_micros,
    position="seq",
    created="created_us",
    history_key="task_seq",
    history_task="(SELECT seq FROM tasks WHERE id = :task)",
)
"""One writer holds the whole database (``BEGIN IMMEDIATE``): no row locks."""

POSTGRES: Final = Dialect(
    parameter=lambda name: f"%({name})s",
    positional="%s",
    time=lambda moment: moment,
    moment=_utc,
    position="position",
    created="created_at",
    history_key="task_id",
    history_task="%(task)s",
    row_lock=" FOR NO KEY UPDATE",
    share_lock=True,
    delete_lock=" FOR UPDATE",
    skip_locked=" FOR UPDATE SKIP LOCKED",
    fuses=True,
    arrays=True,
    lateral=True,
)
"""Writers lock task rows (``FOR NO KEY UPDATE``, which leaves the foreign-key checks of
checkpoint inserts alone) before lease rows; each statement is a round trip."""


def is_in(d: Dialect, column: str, name: str, values: list[Any], parameters: dict[str, Any]) -> str:
    """The condition "*column* is one of *values*", binding them as one parameter *name*,
    whatever their number: an array (``= ANY``) where the dialect has arrays, else a JSON
    list read by ``json_each`` (a list of placeholders would meet the drivers' limits:
    65,535 parameters on PostgreSQL's wire, 32,766 in SQLite)."""
    texts = [str(value) for value in values]
    if d.arrays:
        parameters[name] = texts
        return f"{column} = ANY({d.parameter(name)}::text[])"
    parameters[name] = json.dumps(texts)
    return f"{column} IN (SELECT value FROM json_each({d.parameter(name)}))"
