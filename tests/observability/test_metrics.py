"""taskloom's metrics in ``prometheus_client``: counted from the engine's events, with the
library's process and GC metrics, served on an address of their own (ADR 0034)."""

import socket
from datetime import timedelta

import anyio
import httpx2
import pytest

from taskloom.engine.errors import InvalidRequestError
from taskloom.engine.manager import TaskManager
from taskloom.observability import standard_observer
from taskloom.observability.metrics import Metrics
from taskloom.observability.metrics_server import (
    metrics_endpoint,
    parse_address,
    start_metrics_server,
)
from taskloom.observability.version_watch import watch_versions
from taskloom.persistence.memory import InMemoryTaskStore
from taskloom.testing import FakeClock
from tests.observability.scrape import samples, value
from tests.observability.test_observer import engine, run_shaky

pytestmark = pytest.mark.anyio


async def test_a_retry_and_a_failure_are_counted_with_their_labels() -> None:
    metrics = Metrics()
    async with engine(standard_observer(metrics, logs=False)) as manager:
        await run_shaky(manager)
    text = metrics.render()
    shaky = {"workflow": "shaky"}
    assert value(text, "taskloom_tasks_created_total", **shaky) == 1
    assert value(text, "taskloom_tasks_finished_total", **shaky, state="failed") == 1
    assert value(text, "taskloom_task_duration_seconds_count", **shaky, state="failed") == 1
    attempts = "taskloom_node_attempts_total"
    assert value(text, attempts, **shaky, phase="warm", outcome="failed") == 1
    assert value(text, attempts, **shaky, phase="warm", outcome="completed") == 1
    assert value(text, attempts, **shaky, phase="work", outcome="failed") == 1
    assert value(text, "taskloom_node_errors_total", **shaky, error_type="ConnectionError") == 1
    assert value(text, "taskloom_node_errors_total", **shaky, error_type="ValueError") == 1
    assert value(text, "taskloom_runs_in_progress", **shaky) == 0
    buckets = {
        dict(labels)["le"]
        for (name, labels) in samples(text)
        if name == "taskloom_node_attempt_duration_seconds_bucket"
    }
    assert {"0.01", "1.0", "3600.0", "+Inf"} <= buckets
    assert "the secret-ish message" not in text


def test_the_process_and_gc_metrics_come_with_the_library() -> None:
    names = {name for name, _ in samples(Metrics().render())}
    assert {"process_cpu_seconds_total", "process_resident_memory_bytes"} <= names
    assert "python_gc_collections_total" in names
    assert "python_info" in names


def test_each_metrics_has_its_own_registry() -> None:
    first, second = Metrics(), Metrics()  # the library's global registry would refuse this
    first.tasks_created.labels("a").inc()
    assert value(first.render(), "taskloom_tasks_created_total", workflow="a") == 1
    assert value(second.render(), "taskloom_tasks_created_total", workflow="a") is None


async def test_a_metrics_server_is_scraped_over_http_and_closed() -> None:
    metrics = Metrics()
    metrics.tasks_created.labels("countdown").inc()
    server = start_metrics_server("127.0.0.1", 0, metrics)
    try:
        assert server.url == f"http://127.0.0.1:{server.port}/metrics"
        async with httpx2.AsyncClient(timeout=5) as http:
            scraped = await http.get(server.url)
        assert scraped.status_code == 200
        assert scraped.headers["content-type"].startswith("text/plain")
        assert value(scraped.text, "taskloom_tasks_created_total", workflow="countdown") == 1
    finally:
        server.close()
    async with httpx2.AsyncClient(timeout=5) as http:
        with pytest.raises(httpx2.ConnectError):  # nobody listens any more
            await http.get(server.url)


def test_a_taken_port_is_one_clear_error() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(InvalidRequestError, match=f"cannot serve metrics on 127.0.0.1:{port}"):
            start_metrics_server("127.0.0.1", port, Metrics())


@pytest.mark.parametrize("address", ["9464", "localhost:", ":9464", "host:port", "h:70000"])
def test_an_address_that_is_not_host_port_is_refused(address: str) -> None:
    with pytest.raises(InvalidRequestError, match="--metrics wants HOST:PORT"):
        parse_address(address)


def test_addresses() -> None:
    assert parse_address("127.0.0.1:9464") == ("127.0.0.1", 9464)
    assert parse_address("[::1]:0") == ("::1", 0)


def test_no_address_serves_nothing() -> None:
    with metrics_endpoint(None) as served:
        assert served is None
    with metrics_endpoint("127.0.0.1:0") as served:
        assert served is not None
        assert served.port > 0


async def test_runs_of_a_version_no_process_has_show_in_the_metrics() -> None:
    """A watcher reads the store's records: a version with unfinished runs that no live
    process has is counted with the age of its oldest run, and leaves the gauges once a
    process with it records itself (ADR 0039)."""
    store = InMemoryTaskStore()
    clock = FakeClock()
    manager = TaskManager(store, clock=clock)
    await manager.create("vflow", {}, workflow_version="1")
    await manager.create("vflow", {}, workflow_version="1")
    await manager.create("vflow", {}, workflow_version="2")
    now = clock.now()
    await store.record_loaded("new", [("vflow", "2")], now, now + timedelta(minutes=10))
    clock.advance(90)
    metrics = Metrics()
    with anyio.move_on_after(0.5):
        await watch_versions(metrics, store, clock, every_s=0.01)
    text = metrics.render()
    waiting = {"workflow": "vflow", "version": "1"}
    assert value(text, "taskloom_runs_waiting_for_a_version", **waiting) == 2
    assert value(text, "taskloom_oldest_run_waiting_for_a_version_seconds", **waiting) == 90
    assert value(text, "taskloom_runs_waiting_for_a_version", workflow="vflow", version="2") is None
    await store.record_loaded("old", [("vflow", "1")], clock.now(), clock.now() + timedelta(1))
    with anyio.move_on_after(0.5):
        await watch_versions(metrics, store, clock, every_s=0.01)
    assert value(metrics.render(), "taskloom_runs_waiting_for_a_version", **waiting) is None
