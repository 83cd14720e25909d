"""Observability adapters of the engine's lifecycle events: log lines, Prometheus metrics
and OpenTelemetry spans (see docs/observability.md)."""

from typing import TYPE_CHECKING, Any

from taskloom.engine.observe import Observer, Observers
from taskloom.observability.logs import LogObserver, configure_logging
from taskloom.observability.tracing import TraceObserver

if TYPE_CHECKING:
    from taskloom.observability.metrics import Metrics


def standard_observer(metrics: "Metrics | None" = None, *, logs: bool = True) -> Observer:
    """Spans, lifecycle log records unless *logs* is false (commands that show progress
    themselves), and *metrics* when given (a process serving ``/metrics``)."""
    observers: list[Observer] = [TraceObserver()]
    if logs:
        observers.append(LogObserver())
    if metrics is not None:
        observers.append(metrics)
    return Observers(observers)


def __getattr__(name: str) -> Any:
    """``Metrics`` loads ``prometheus_client`` on first use, not with this package."""
    if name == "Metrics":
        from taskloom.observability.metrics import Metrics

        return Metrics
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ("LogObserver", "Metrics", "TraceObserver", "configure_logging", "standard_observer")
