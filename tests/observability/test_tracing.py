"""OpenTelemetry spans: node attempts nest under their task's span, failures are errors."""

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import INVALID_SPAN, ProxyTracer, Span, StatusCode

from taskloom.observability.tracing import NODE_SPAN, TASK_SPAN, TraceObserver
from tests.observability.test_observer import engine, run_shaky


def _attributes(span: ReadableSpan) -> dict[str, object]:
    return dict(span.attributes or {})


async def test_node_spans_nest_under_the_task_span_with_errors_marked() -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    async with engine(TraceObserver(provider.get_tracer("tests"))) as manager:
        done = await run_shaky(manager)
    spans = exporter.get_finished_spans()
    [task] = [span for span in spans if span.name == TASK_SPAN]
    nodes = [span for span in spans if span.name == NODE_SPAN]
    assert _attributes(task) == {
        "taskloom.task_id": done.id,
        "taskloom.workflow": "shaky",
        "taskloom.resumed": False,
        "taskloom.outcome": "failed",
    }
    assert task.status.status_code is StatusCode.ERROR
    assert task.context is not None
    for node in nodes:
        assert node.parent is not None
        assert node.parent.span_id == task.context.span_id
        assert node.context is not None
        assert node.context.trace_id == task.context.trace_id
    by_attempt = {
        (_attributes(node)["taskloom.node"], _attributes(node)["taskloom.attempt"]): node
        for node in nodes
    }
    assert set(by_attempt) == {("flaky", 1), ("flaky", 2), ("broken", 1)}
    first = by_attempt["flaky", 1]
    assert _attributes(first)["taskloom.outcome"] == "failed"
    assert _attributes(first)["taskloom.retrying"] is True
    assert _attributes(first)["error.type"] == "ConnectionError"
    assert first.status.status_code is StatusCode.ERROR
    assert by_attempt["flaky", 2].status.status_code is StatusCode.UNSET
    assert _attributes(by_attempt["flaky", 2])["taskloom.phase"] == "warm"
    assert _attributes(by_attempt["broken", 1])["error.type"] == "ValueError"


async def test_without_an_sdk_the_default_tracer_does_nothing() -> None:
    async with engine(TraceObserver()) as manager:
        done = await run_shaky(manager)
    assert done.error is not None
    assert done.error.code == "node_failed"


async def test_without_a_provider_no_span_is_started_until_one_is_set(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The API's no-op spans cost microseconds a node: none is started while the global
    tracer provider is unset, and spans start as soon as the application sets one."""
    started: list[str] = []

    def start_span(self: ProxyTracer, name: str, **_: object) -> Span:
        started.append(name)
        return INVALID_SPAN

    monkeypatch.setattr(ProxyTracer, "start_span", start_span)
    observer = TraceObserver()
    async with engine(observer) as manager:
        await run_shaky(manager)
    assert started == []
    monkeypatch.setattr(trace, "get_tracer_provider", TracerProvider)  # as if set
    async with engine(observer) as manager:
        await run_shaky(manager)
    assert started.count(TASK_SPAN) == 1
    assert started.count(NODE_SPAN) > 1
