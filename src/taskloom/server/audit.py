"""The audit trail (contract §2.16): one record per task action, with structured fields.

A record is an INFO record of the ``taskloom.audit`` logger whose message is a fixed
phrase (``"read refused"``) and whose ``fields`` (as in ``taskloom.events``) say who did
what: ``principal`` (``local`` for the owner-less stdio user), ``action``, ``outcome``,
then, when known, ``task_id``, ``tool``, ``method``, ``error_code`` and ``via``. No value
of a request ever reaches the message; the log formats write the fields escaped (JSON
strings in both), so a task id holding a newline stays inside its field. Never
arguments, results, answers or tokens.

Actions: ``create`` (a tool call of a workflow: task-augmented, server-directed or
plain), ``read`` (``tasks/get``, ``tasks/result``, ``task_status``, ``task_result``,
``task_attempts``), ``list`` (``tasks/list``, ``task_list``, ``tasks_last_failed``),
``cancel`` (``tasks/cancel``, ``task_cancel``) and ``answer`` (``tasks/update``,
``task_answer``, and each answer given to an elicitation), and ``sign_in`` (the
dashboard's sign-in form; a refused token is recorded under the principal
``anonymous`` with the client address). A ``subscriptions/listen``
naming tasks is one ``read`` per task it names, written when the stream is acknowledged
(a listen lasts until its tasks end): ``ok`` for a task it covers, ``refused`` with
``-32602`` for one it leaves out (unknown, expired or another principal's), as
``tasks/get`` would answer; a listen refused as a whole is one record. Outcomes: ``ok``,
``refused`` (a JSON-RPC error, or a plain tool's error result, with its code),
``error`` (``-32603``), ``interrupted`` (the request was cancelled or its caller left)
and, for answers to an elicitation, ``declined`` and ``dismissed``. The server ending
an open request, stream or session because its bearer token was revoked or expired
is ``end`` with the outcome ``revoked`` or ``expired``, its ``method`` naming what was
ended (``POST /mcp``, ``GET /ui/events``, ``session``) and ``via`` ``mcp`` or
``dashboard`` (ADR 0037).

The ``audit_trail`` middleware (``middleware.py``) opens an :class:`AuditEntry` per
request and writes it when the request ends; handlers that learn more on the way
(which task a plain call created, why a plain tool refused) add it with :func:`note`.
JSON-RPC notifications are never recorded: they are not requests and get no answer.
"""

import logging
from collections.abc import Mapping
from contextvars import ContextVar, Token
from dataclasses import dataclass
from typing import Any, Final, Literal

from mcp_types import INTERNAL_ERROR, INVALID_PARAMS

AUDIT_LOGGER: Final = "taskloom.audit"
LOCAL_PRINCIPAL: Final = "local"
ANONYMOUS: Final = "anonymous"
"""Who a record names when the caller presented no token that identifies anyone."""
VALUE_LIMIT: Final = 200
"""Most characters of a client's value (task id, tool name) a record keeps."""

Action = Literal["create", "read", "list", "cancel", "answer", "sign_in", "end"]
Outcome = Literal[
    "ok", "refused", "error", "interrupted", "declined", "dismissed", "revoked", "expired"
]

METHOD_ACTIONS: Final[Mapping[str, Action]] = {
    "tasks/get": "read",
    "tasks/result": "read",
    "tasks/list": "list",
    "tasks/cancel": "cancel",
    "tasks/update": "answer",
    "subscriptions/listen": "read",
}
PLAIN_TOOL_ACTIONS: Final[Mapping[str, Action]] = {
    "task_status": "read",
    "task_result": "read",
    "task_attempts": "read",
    "task_list": "list",
    "tasks_last_failed": "list",
    "task_cancel": "cancel",
    "task_answer": "answer",
}
"""The fallback and history tools (``fallback.py``, ``history.py``), by what they do."""

logger = logging.getLogger(AUDIT_LOGGER)


@dataclass
class AuditEntry:
    """What one request did, filled in while it runs."""

    principal: str
    action: Action
    method: str
    task_id: str | None = None
    tool: str | None = None
    outcome: Outcome = "ok"
    error_code: int | None = None
    settled: bool = False
    """Its records were written before the request ended (:func:`looked_up`)."""

    def failed(self, code: int) -> None:
        """The request was answered with the JSON-RPC error *code*."""
        self.outcome = "error" if code == INTERNAL_ERROR else "refused"
        self.error_code = code

    def write(self) -> None:
        """Log this entry (once, when the request has ended), unless it was settled."""
        if not self.settled:
            write(self.principal, self.action, self.outcome, **self._details())

    def _details(self) -> dict[str, Any]:
        return {
            "task_id": self.task_id,
            "tool": self.tool,
            "method": self.method,
            "error_code": self.error_code,
        }


_current: ContextVar[AuditEntry | None] = ContextVar("taskloom_audit_entry", default=None)


def principal(owner: str | None) -> str:
    """How a record names *owner*."""
    return LOCAL_PRINCIPAL if owner is None else owner


def entry_for(
    owner: str | None, method: str, params: Mapping[str, Any] | None
) -> AuditEntry | None:
    """The entry a request of *method* opens, or ``None`` when it is no task action."""
    params = params or {}
    who = principal(owner)
    action = METHOD_ACTIONS.get(method)
    if action is not None:
        return AuditEntry(who, action, method, task_id=clipped(params.get("taskId")))
    if method != "tools/call":
        return None
    tool = clipped(params.get("name"))
    action = PLAIN_TOOL_ACTIONS.get(tool or "", "create")
    arguments = params.get("arguments")
    task_id = clipped(arguments.get("task_id")) if isinstance(arguments, dict) else None
    if action == "create":
        task_id = None  # known once created (:func:`created_task`, :func:`note`)
    return AuditEntry(who, action, method, task_id=task_id, tool=tool)


def clipped(value: object) -> str | None:
    """A client's string as a record keeps it (cut at ``VALUE_LIMIT``); other types
    are not kept."""
    if not isinstance(value, str):
        return None
    return value if len(value) <= VALUE_LIMIT else value[:VALUE_LIMIT] + "…"


def created_task(result: object) -> str | None:
    """The id of the task a ``tools/call`` result says was created: a 2025-11-25
    ``CreateTaskResult`` (nested), a 2026-07-28 one (``resultType: task``), or a plain
    result naming its task (``_meta["taskloom/task"]``)."""
    if not isinstance(result, dict):
        return None
    nested = result.get("task")
    if isinstance(nested, dict) and isinstance(nested.get("taskId"), str):
        return str(nested["taskId"])
    if result.get("resultType") == "task" and isinstance(result.get("taskId"), str):
        return str(result["taskId"])
    named = (result.get("_meta") or {}).get("taskloom/task")
    if isinstance(named, dict) and isinstance(named.get("taskId"), str):
        return str(named["taskId"])
    return None


def opened(entry: AuditEntry) -> Token[AuditEntry | None]:
    """Make *entry* the current request's (until :func:`closed` with the token)."""
    return _current.set(entry)


def closed(token: Token[AuditEntry | None]) -> None:
    """The request of the entry :func:`opened` returned *token* for has ended."""
    _current.reset(token)


def note(*, task_id: str | None = None, refused: int | None = None) -> None:
    """Tell the current request's entry (if any) which task it acted on, or that it was
    refused with *refused* (the JSON-RPC code its plain-tool error result stands for)."""
    entry = _current.get()
    if entry is None:
        return
    if task_id is not None:
        entry.task_id = clipped(task_id)
    if refused is not None:
        entry.failed(refused)


def looked_up(found: Mapping[str, bool]) -> None:
    """Settle the current request's entry (if any) as one ``read`` per task id of
    *found*: ``ok`` if it was visible, else ``refused`` with ``-32602`` (as a
    ``tasks/get`` of it); the entry itself is then not written."""
    entry = _current.get()
    if entry is None:
        return
    entry.settled = True
    for task_id, visible in found.items():
        outcome: Outcome = "ok" if visible else "refused"
        write(
            entry.principal,
            entry.action,
            outcome,
            task_id=clipped(task_id),
            method=entry.method,
            error_code=None if visible else INVALID_PARAMS,
        )


def answered(task_id: str, *, owner: str | None, outcome: Outcome, method: str) -> None:
    """Record an answer the requestor gave to an elicitation about *task_id* during a
    request of *method* (``tasks/result``, or a plain ``tools/call``)."""
    write(principal(owner), "answer", outcome, task_id=task_id, method=method, via="elicitation")


def recording() -> bool:
    """Whether records are logged (``taskloom.audit`` enabled for INFO; not by default):
    when not, no request needs an entry."""
    return logger.isEnabledFor(logging.INFO)


def write(who: str, action: Action, outcome: Outcome, **details: object) -> None:
    """Log one record: the message names the action and outcome; the fields hold all."""
    if not recording():
        return
    fields: dict[str, object] = {"principal": who, "action": action, "outcome": outcome}
    fields.update({key: value for key, value in details.items() if value is not None})
    logger.info("%s %s", action, outcome, extra={"fields": fields})
