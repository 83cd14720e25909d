"""Observability adapters of the engine's lifecycle events: log lines, Prometheus metrics
and OpenTelemetry spans (see docs/observability.md)."""

from taskloom.engine.observe import Observer, Observers
from taskloom.observability.logs import LogObserver, configure_logging
from taskloom.observability.metrics import Metrics
from taskloom.observability.tracing import TraceObserver


def standard_observer(metrics: Metrics | None = None, *, logs: bool = True) -> Observer:
    """Spans, lifecycle log records unless *logs* is false (commands that show progress
    themselves), and *metrics* when given (a process serving ``/metrics``)."""
    observers: list[Observer] = [TraceObserver()]
    if logs:
        observers.append(LogObserver())
    if metrics is not None:
        observers.append(metrics)
    return Observers(observers)


__all__ = ("LogObserver", "Metrics", "TraceObserver", "configure_logging", "standard_observer")
