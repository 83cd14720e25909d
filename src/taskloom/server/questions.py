"""Asking the requestor a task's pending questions through ``elicitation/create``.

2025-11-25 §2.12: a task waiting for input shows ``input_required``; when the requestor
calls ``tasks/result``, the server sends each pending question as an elicitation on
that request's stream, carrying the related-task ``_meta``, and stores the answer (the
engine re-checks it against the question's schema). A plain call of a client that
declared elicitation is asked the same way, on the call itself (ADR 0018). The
questions live in the store, not in this process, so any later request (after a
reconnect or a restart) asks again whatever is still unanswered.

Each answer is an audit record (``taskloom.server.audit``). Outcomes (ADR 0008):
``accept`` answers the question; ``decline`` fails the task
(``input_declined``), ``cancel`` (dismissed) cancels it. After ``MAX_ASKS`` answers
that do not fit, or when the client cannot be asked, the asker reports the question
:class:`Unanswered` and its caller decides (it never waits on an answer that cannot
come on this request).
"""

import contextlib
import logging
from dataclasses import dataclass
from typing import Any, Final

import mcp_types as types
from mcp.server.context import ServerRequestContext
from mcp.shared.exceptions import MCPError
from mcp.shared.message import ServerMessageMetadata

from taskloom.engine.errors import (
    InputNotRequestedError,
    InvalidAnswerError,
    TaskNotFoundError,
    TaskStateError,
)
from taskloom.engine.manager import TaskManager
from taskloom.engine.models import InputRequest, Task, TaskFailure
from taskloom.server import audit
from taskloom.server.wire import related_task_meta

logger = logging.getLogger(__name__)

MAX_ASKS: Final = 3
"""How often one question is asked on one request before it is left unanswered there
(answers that do not fit its schema)."""

_ELICITATION: Final = types.ClientCapabilities(elicitation=types.ElicitationCapability())


@dataclass(frozen=True)
class Unanswered:
    """A question this request could not get a fitting answer to."""

    key: str
    question: InputRequest
    problems: tuple[str, ...] = ()
    """Why the last answer did not fit; empty when the client cannot be asked at all."""


class InputAsker:
    """Asks over one request (``tasks/result`` or a plain call); gives up for good if the
    client cannot answer."""

    def __init__(
        self, manager: TaskManager, ctx: ServerRequestContext[Any, Any], owner: str | None
    ) -> None:
        self._manager = manager
        self._ctx = ctx
        self._owner = owner
        self._able = ctx.session.check_client_capability(_ELICITATION)

    @property
    def able(self) -> bool:
        """Whether the client can still be asked (it declared elicitation and has not
        failed an elicitation request)."""
        return self._able

    async def ask_pending(self, task: Task) -> Unanswered | None:
        """Ask each question *task* waits on, storing the answers; the first question
        left without a fitting answer, if any."""
        for key, question in task.input_requests.items():
            if not self._able:
                return Unanswered(key, question)
            unanswered = await self._ask(task.id, key, question)
            if unanswered is not None:
                return unanswered
        return None

    async def _ask(self, task_id: str, key: str, question: InputRequest) -> Unanswered | None:
        message = question.message
        problems: tuple[str, ...] = ()
        for _ in range(MAX_ASKS):
            answer = await self._elicit(task_id, message, question)
            if answer is None:
                return Unanswered(key, question)
            if answer.action == "decline":
                self._audit(task_id, "declined")
                await self._end(task_id, declined=True, question=question.message)
                return None
            if answer.action == "cancel":
                self._audit(task_id, "dismissed")
                await self._end(task_id, declined=False, question=question.message)
                return None
            try:
                await self._manager.provide_input(
                    task_id, key, answer.content or {}, owner=self._owner
                )
            except InvalidAnswerError as error:
                self._audit(task_id, "refused")
                problems = tuple(error.problems[:3])
                message = f"{question.message} (please correct: {'; '.join(problems)})"
                continue
            except (InputNotRequestedError, TaskNotFoundError, TaskStateError):
                return None  # answered through another channel, or the task ended meanwhile
            self._audit(task_id, "ok")
            return None
        return Unanswered(key, question, problems)

    def _audit(self, task_id: str, outcome: audit.Outcome) -> None:
        audit.answered(task_id, owner=self._owner, outcome=outcome, method=self._ctx.method)

    async def _elicit(
        self, task_id: str, message: str, question: InputRequest
    ) -> types.ElicitResult | None:
        params = types.ElicitRequestFormParams.model_validate(
            {
                "message": message,
                "requestedSchema": question.requested_schema,
                "_meta": related_task_meta(task_id),
            }
        )
        try:
            return await self._ctx.session.send_request(
                types.ElicitRequest(params=params),
                types.ElicitResult,
                metadata=ServerMessageMetadata(related_request_id=self._ctx.request_id),
            )
        except MCPError as error:
            logger.info("the client did not answer an elicitation for %s: %s", task_id, error)
            self._able = False
            return None

    async def _end(self, task_id: str, *, declined: bool, question: str) -> None:
        await refuse(
            self._manager, task_id, owner=self._owner, declined=declined, question=question
        )


async def refuse(
    manager: TaskManager, task_id: str, *, owner: str | None, declined: bool, question: str
) -> None:
    """The requestor would not answer *question*: *declined* fails the task
    (``input_declined``), otherwise (dismissed) it is cancelled. Both generations use it."""
    with contextlib.suppress(TaskNotFoundError, TaskStateError):  # ended meanwhile
        if declined:
            failure = TaskFailure(
                code="input_declined",
                message=f"the requestor declined to answer: {question}",
            )
            await manager.fail(task_id, failure)
        else:
            await manager.cancel(
                task_id, owner=owner, reason=f"the requestor dismissed the question: {question}"
            )
