"""The audit trail over real HTTP: one record per task action, on both generations and
through the plain tools, with values that cannot break a log line or fake a field."""

import contextlib
import json
import logging
import re
from collections.abc import AsyncIterator
from types import SimpleNamespace
from typing import Any, cast

import httpx2
import mcp_types as types
import pytest
from mcp.client.context import ClientRequestContext
from mcp.shared.exceptions import MCPError
from mcp.shared.inbound import encode_header_value

from taskloom.observability.logs import JsonFormatter, TextFormatter
from taskloom.server import TaskServer
from taskloom.server.middleware import audit_trail
from tests.helpers import eventually
from tests.server import flows
from tests.server.http_support import (
    ANN,
    audit_records,
    http_client,
    modern_headers,
    modern_request,
    serving,
)

FORGED = 'x"\n2026-11-24 00:00:00,000 INFO taskloom.audit: cancel ok principal=root task_id=victim'
"""A value that would forge a second, privileged-looking line in a naive text log."""


@pytest.fixture
async def url(task_server: TaskServer) -> AsyncIterator[str]:
    async with serving(task_server) as endpoint:
        yield endpoint


@pytest.fixture
def trail(caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    caplog.set_level(logging.INFO, logger="taskloom.audit")
    return caplog


async def modern_post(
    url: str, method: str, params: dict[str, Any], *, name: str | None = None
) -> dict[str, Any]:
    """A 2026-07-28 request (tasks extension declared) over HTTP: its JSON-RPC reply."""
    header = encode_header_value(name) if name is not None else None
    async with httpx2.AsyncClient(timeout=20) as http:
        response = await http.post(
            url,
            json=modern_request(method, params, tasks=True),
            headers=modern_headers(ANN, method, header),
        )
    reply: dict[str, Any] = response.json()
    return reply


async def test_each_task_action_is_one_record_on_both_generations(
    url: str, trail: pytest.LogCaptureFixture
) -> None:
    async with http_client(url, ANN) as client:
        legacy = await client.start("gated", {"gate": "audit-legacy"})
        plain = await client.call("countdown", {"start": 2, "tick_s": 0})
        plain_id = plain["_meta"]["taskloom/task"]["taskId"]
        await client.get(legacy)
        await client.list_tasks()
        await client.call("task_status", {"task_id": legacy})
        await client.call("task_list", {})
        await client.cancel(legacy)
        await client.call("task_cancel", {"task_id": plain_id})  # finished: refused
    flows.gate("audit-legacy").set()
    created = await modern_post(url, "tools/call", {"name": "ask", "arguments": {}}, name="ask")
    modern = created["result"]["taskId"]
    await modern_post(url, "tasks/get", {"taskId": modern}, name=modern)
    answer = {"action": "accept", "content": {"name": "Ada"}}
    await modern_post(url, "tasks/update", {"taskId": modern, "inputResponses": {"x": answer}},
                      name=modern)  # fmt: skip
    await modern_post(url, "tasks/cancel", {"taskId": modern}, name=modern)

    ann = {"principal": "ann", "outcome": "ok"}
    call = {**ann, "method": "tools/call"}
    assert audit_records(trail) == [
        {**call, "action": "create", "task_id": legacy, "tool": "gated"},
        {**call, "action": "create", "task_id": plain_id, "tool": "countdown"},
        {**ann, "action": "read", "task_id": legacy, "method": "tasks/get"},
        {**ann, "action": "list", "method": "tasks/list"},
        {**call, "action": "read", "task_id": legacy, "tool": "task_status"},
        {**call, "action": "list", "tool": "task_list"},
        {**ann, "action": "cancel", "task_id": legacy, "method": "tasks/cancel"},
        {**call, "action": "cancel", "task_id": plain_id, "tool": "task_cancel",
         "outcome": "refused", "error_code": -32602},
        {**call, "action": "create", "task_id": modern, "tool": "ask"},
        {**ann, "action": "read", "task_id": modern, "method": "tasks/get"},
        {**ann, "action": "answer", "task_id": modern, "method": "tasks/update"},
        {**ann, "action": "cancel", "task_id": modern, "method": "tasks/cancel"},
    ]  # fmt: skip


async def test_answers_given_to_an_elicitation_are_recorded(
    url: str, trail: pytest.LogCaptureFixture
) -> None:
    replies = iter(
        [
            types.ElicitResult(action="accept", content={"name": 5}),  # does not fit
            types.ElicitResult(action="accept", content={"name": "Ada"}),
        ]
    )

    async def human(
        context: ClientRequestContext, params: types.ElicitRequestParams
    ) -> types.ElicitResult:
        return next(replies)

    async with http_client(url, ANN, elicitation_callback=human) as client:
        task_id = await client.start("ask", {})
        await client.tap.until(lambda: "input_required" in client.statuses(task_id))
        await client.result(task_id)
    answers = [record for record in audit_records(trail) if record["action"] == "answer"]
    asked = {"principal": "ann", "action": "answer", "task_id": task_id, "via": "elicitation"}
    assert answers == [
        {**asked, "outcome": "refused", "method": "tasks/result"},
        {**asked, "outcome": "ok", "method": "tasks/result"},
    ]


async def test_a_plain_call_whose_caller_is_refused_an_unknown_tool_is_recorded(
    url: str, trail: pytest.LogCaptureFixture
) -> None:
    async with http_client(url, ANN) as client:
        await client.error("tools/call", {"name": "no-such-tool", "arguments": {}})
    [record] = audit_records(trail)
    assert record == {
        "principal": "ann",
        "action": "create",
        "outcome": "refused",
        "tool": "no-such-tool",
        "method": "tools/call",
        "error_code": -32602,
    }


LEGACY_FIELDS: list[tuple[str, str, dict[str, Any], str]] = [
    ("tasks/get", "read", {"taskId": FORGED}, "task_id"),
    ("tasks/result", "read", {"taskId": FORGED}, "task_id"),
    ("tasks/cancel", "cancel", {"taskId": FORGED}, "task_id"),
    ("tools/call", "create", {"name": FORGED, "arguments": {}}, "tool"),
    *(
        ("tools/call", action, {"name": tool, "arguments": {"task_id": FORGED}}, "task_id")
        for tool, action in (
            ("task_status", "read"),
            ("task_result", "read"),
            ("task_cancel", "cancel"),
            ("task_attempts", "read"),
        )
    ),
    (
        "tools/call",
        "answer",
        {"name": "task_answer", "arguments": {"task_id": FORGED, "answer": {}}},
        "task_id",
    ),
]
MODERN_FIELDS: list[tuple[str, str, dict[str, Any], str]] = [
    ("tasks/get", "read", {"taskId": FORGED}, "task_id"),
    ("tasks/cancel", "cancel", {"taskId": FORGED}, "task_id"),
    ("tasks/update", "answer", {"taskId": FORGED, "inputResponses": {}}, "task_id"),
    ("tools/call", "create", {"name": FORGED, "arguments": {}}, "tool"),
]


@pytest.mark.parametrize(("method", "action", "params", "field"), LEGACY_FIELDS)
async def test_a_newline_in_a_2025_11_25_value_stays_inside_its_record(
    url: str,
    trail: pytest.LogCaptureFixture,
    method: str,
    action: str,
    params: dict[str, Any],
    field: str,
) -> None:
    async with http_client(url, ANN) as client:
        with contextlib.suppress(MCPError):  # refused or not: either is recorded
            await client.request(method, params)
    _assert_one_safe_record(trail, action, field)


@pytest.mark.parametrize(("method", "action", "params", "field"), MODERN_FIELDS)
async def test_a_newline_in_a_2026_07_28_value_stays_inside_its_record(
    url: str,
    trail: pytest.LogCaptureFixture,
    method: str,
    action: str,
    params: dict[str, Any],
    field: str,
) -> None:
    await modern_post(url, method, params, name=FORGED)
    _assert_one_safe_record(trail, action, field)


def _assert_one_safe_record(trail: pytest.LogCaptureFixture, action: str, field: str) -> None:
    [record] = [r for r in trail.records if r.name == "taskloom.audit"]
    assert record.fields[field] == FORGED  # type: ignore[attr-defined]
    assert record.fields["action"] == action  # type: ignore[attr-defined]
    text, line = TextFormatter().format(record), JsonFormatter().format(record)
    assert "\n" not in text
    assert "\n" not in line
    assert "\n" not in record.getMessage()
    assert _text_fields(text) == record.fields  # type: ignore[attr-defined]
    parsed = json.loads(line)
    assert {key: parsed[key] for key in record.fields} == record.fields  # type: ignore[attr-defined]


_PAIR = re.compile(r' (\w+)=("(?:[^"\\]|\\.)*"|[^ "]+)')


def _text_fields(text: str) -> dict[str, Any]:
    """The ``key=value`` fields of a text line, JSON strings decoded, numbers as numbers."""
    fields: dict[str, Any] = {}
    for key, value in _PAIR.findall(text.split(": ", 1)[1]):
        fields[key] = (
            json.loads(value) if value.startswith('"') or value.lstrip("-").isdigit() else value
        )
    return fields


async def test_a_listen_is_one_read_per_task_it_names(
    url: str, trail: pytest.LogCaptureFixture
) -> None:
    created = await modern_post(
        url, "tools/call", {"name": "countdown", "arguments": {"start": 1, "tick_s": 0}},
        name="countdown",
    )  # fmt: skip
    task_id = created["result"]["taskId"]

    async def finished() -> bool:
        got = await modern_post(url, "tasks/get", {"taskId": task_id}, name=task_id)
        return bool(got["result"]["status"] == "completed")

    await eventually(finished)
    listen = {"notifications": {"taskIds": [task_id, "nope", FORGED]}}
    async with httpx2.AsyncClient(timeout=20) as http:
        streamed = await http.post(  # ends by itself: its one covered task is terminal
            url,
            json=modern_request("subscriptions/listen", listen, tasks=True),
            headers=modern_headers(ANN, "subscriptions/listen"),
        )
    assert streamed.status_code == 200
    read = {"principal": "ann", "action": "read", "method": "subscriptions/listen"}
    refused = {**read, "outcome": "refused", "error_code": -32602}
    listened = [r for r in audit_records(trail) if r["method"] == "subscriptions/listen"]
    assert listened == [
        {**read, "outcome": "ok", "task_id": task_id},
        {**refused, "task_id": "nope"},
        {**refused, "task_id": FORGED},
    ]


async def test_a_listen_refused_as_a_whole_is_one_record(
    url: str, trail: pytest.LogCaptureFixture
) -> None:
    reply = await modern_post(url, "subscriptions/listen", {"notifications": {"taskIds": [1]}})
    assert reply["error"]["code"] == -32602
    assert audit_records(trail) == [
        {"principal": "ann", "action": "read", "method": "subscriptions/listen",
         "outcome": "refused", "error_code": -32602},
    ]  # fmt: skip


async def test_a_notification_is_never_recorded_as_an_action(
    trail: pytest.LogCaptureFixture,
) -> None:
    # The SDK runs Server.middleware for notifications too; a tasks/cancel
    # notification used to be logged as a successful cancel.
    async def handled(ctx: Any) -> None:
        return None

    audit_request = audit_trail("ann")
    for request_id in (None, 7):
        ctx = SimpleNamespace(request_id=request_id, method="tasks/cancel", params={"taskId": "t"})
        await audit_request(cast(Any, ctx), handled)
    assert audit_records(trail) == [
        {"principal": "ann", "action": "cancel", "outcome": "ok", "task_id": "t",
         "method": "tasks/cancel"},
    ]  # fmt: skip


async def test_a_cancel_notification_over_http_changes_and_records_nothing(
    url: str, trail: pytest.LogCaptureFixture
) -> None:
    async with http_client(url, ANN) as client:
        task_id = await client.start("gated", {"gate": "audit-notified"})
        await client.dispatcher.notify("tasks/cancel", {"taskId": task_id})
        assert (await client.get(task_id))["status"] == "working"
    flows.gate("audit-notified").set()
    assert [record["action"] for record in audit_records(trail)] == ["create", "read"]
