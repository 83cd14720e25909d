"""Questions a workflow asks before its task exists, as 2026-07-28 multi round-trip
requests (MRTR; ADR 0019).

A ``tools/call`` of a workflow that declares questions (``Workflow(..., asks=[...])``)
is answered ``resultType: "input_required"`` with one ``elicitation/create`` input
request per unanswered question; the client retries the call with ``inputResponses``
(keyed as asked) and echoes ``requestState``. Once every question is answered, the call
goes on as any other: a task (``resultType: "task"``) or a plain result; the answers are
stored with the task and nothing of the rounds carries over to it.

``requestState`` carries the answers of earlier rounds only when a retry left some
question unanswered. It is not signed, and it needs not be: it holds nothing the client
could not send as ``inputResponses`` itself, and every answer in it is validated again,
against this tool's questions, exactly like a fresh one. Refusals are ``-32602``: a
response to a question that is no elicitation result, an answer that does not fit its
question, a ``requestState`` this server did not issue for this tool. A ``decline`` or
``cancel`` ends the call with a tool error; no task is created.
"""

import base64
import binascii
import json
from dataclasses import dataclass, field
from typing import Any, Final

import mcp_types as types
from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_PARAMS
from pydantic import JsonValue, ValidationError

from taskloom.engine.dag import Question, Workflow
from taskloom.engine.models import InputRequest
from taskloom.server.errors import echoed
from taskloom.server.wire import input_request, text_content

STATE_PREFIX: Final = "taskloom.mrtr.v1."


@dataclass(frozen=True)
class Round:
    """One round's outcome: every answer (``reply`` is ``None``), or the reply to send
    instead of going on (more questions, or a tool error after a refusal)."""

    answers: dict[str, JsonValue] = field(default_factory=dict)
    reply: dict[str, Any] | None = None


def gather(workflow: Workflow[Any], params: types.CallToolRequestParams) -> Round:
    """The answers to *workflow*'s questions carried by this call, or what to reply.

    Raises:
        MCPError: ``-32602`` for a malformed response, answer or ``requestState``.
    """
    if not workflow.asks or not _fits(workflow, params.arguments):
        return Round()  # nothing to ask; or arguments to refuse before asking anything
    answers = _carried(workflow, params.request_state)
    responses = params.input_responses or {}
    for question in workflow.asks:
        response = responses.get(question.key)
        if response is None:
            continue  # keys the call was not asked are ignored
        if not isinstance(response, types.ElicitResult):
            raise MCPError(
                INVALID_PARAMS,
                f"inputResponses[{question.key!r}] is not an elicitation result "
                "({action, content})",
            )
        if response.action != "accept":
            return Round(reply=_refused(question, declined=response.action == "decline"))
        try:
            answers[question.key] = question.parse(response.content or {})
        except ValueError as error:
            raise MCPError(INVALID_PARAMS, f"inputResponses[{question.key!r}]: {error}") from None
    missing = [question for question in workflow.asks if question.key not in answers]
    if not missing:
        return Round(answers=answers)
    reply: dict[str, Any] = {
        "resultType": "input_required",
        "inputRequests": {question.key: _input_request(question) for question in missing},
    }
    if answers:
        reply["requestState"] = _state(workflow.name, answers)
    return Round(answers=answers, reply=reply)


def _input_request(question: Question[Any]) -> dict[str, Any]:
    return input_request(
        InputRequest(message=question.message, requested_schema=question.requested_schema)
    )


def _refused(question: Question[Any], *, declined: bool) -> dict[str, Any]:
    """The tool error a call ends with when its requestor will not answer (no task)."""
    how = "declined to answer" if declined else "dismissed the question"
    text = f"the requestor {how}: {question.message}"
    return {"content": [text_content(text)], "isError": True, "resultType": "complete"}


def _fits(workflow: Workflow[Any], arguments: dict[str, Any] | None) -> bool:
    try:
        workflow.parse_arguments(arguments or {})
    except ValidationError:
        return False
    return True


def _state(tool: str, answers: dict[str, JsonValue]) -> str:
    body = json.dumps({"tool": tool, "answers": answers}, separators=(",", ":"))
    return STATE_PREFIX + base64.urlsafe_b64encode(body.encode()).decode()


def _carried(workflow: Workflow[Any], state: str | None) -> dict[str, JsonValue]:
    """The answers an echoed ``requestState`` carries, validated again like fresh ones."""
    if state is None:
        return {}
    refused = MCPError(
        INVALID_PARAMS,
        f"requestState {echoed(state)} was not issued by this server for {workflow.name!r}",
    )
    if not state.startswith(STATE_PREFIX):
        raise refused
    try:
        decoded = json.loads(base64.urlsafe_b64decode(state.removeprefix(STATE_PREFIX)))
    except (binascii.Error, ValueError):
        raise refused from None
    if not (
        isinstance(decoded, dict)
        and decoded.get("tool") == workflow.name
        and isinstance(decoded.get("answers"), dict)
    ):
        raise refused
    try:
        return workflow.parse_answers(decoded["answers"])
    except ValueError:
        raise refused from None
