"""Counters, gauges and histograms rendered in the Prometheus text exposition format
(version 0.0.4), with no dependency: the few metric kinds taskloom needs are simple.

Not thread-safe: update and render them from one event loop.
"""

import math
from collections.abc import Iterable, Sequence
from typing import Final

DEFAULT_BUCKETS: Final = (0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 3600.0)
"""Seconds: node attempts and tasks last from milliseconds to an hour."""

Labels = tuple[str, ...]


class _Metric:
    kind = ""

    def __init__(self, name: str, help_text: str, labels: Sequence[str] = ()) -> None:
        self.name = name
        self.help = help_text
        self.labels = tuple(labels)

    def _check(self, values: Labels) -> None:
        if len(values) != len(self.labels):
            raise ValueError(f"{self.name} takes labels {self.labels}, got {values}")

    def render(self) -> Iterable[str]:
        """The metric's ``# HELP``, ``# TYPE`` and sample lines."""
        yield f"# HELP {self.name} {_escape_help(self.help)}"
        yield f"# TYPE {self.name} {self.kind}"
        yield from self._samples()

    def _samples(self) -> Iterable[str]:
        raise NotImplementedError


class Counter(_Metric):
    """A count that only goes up, by label values."""

    kind = "counter"

    def __init__(self, name: str, help_text: str, labels: Sequence[str] = ()) -> None:
        super().__init__(name, help_text, labels)
        self._values: dict[Labels, float] = {}

    def inc(self, *values: str, amount: float = 1.0) -> None:
        """Add *amount* to the series of these label *values*."""
        self._check(values)
        self._values[values] = self._values.get(values, 0.0) + amount

    def value(self, *values: str) -> float:
        """The series' current value (0 if never incremented)."""
        return self._values.get(values, 0.0)

    def _samples(self) -> Iterable[str]:
        for values, value in sorted(self._values.items()):
            yield f"{self.name}{_labels(self.labels, values)} {_number(value)}"


class Gauge(Counter):
    """A value that goes up and down, by label values."""

    kind = "gauge"

    def dec(self, *values: str, amount: float = 1.0) -> None:
        """Subtract *amount* from the series of these label *values*."""
        self.inc(*values, amount=-amount)


class Histogram(_Metric):
    """Observations counted in cumulative buckets, with their sum and count."""

    kind = "histogram"

    def __init__(
        self,
        name: str,
        help_text: str,
        labels: Sequence[str] = (),
        buckets: Sequence[float] = DEFAULT_BUCKETS,
    ) -> None:
        super().__init__(name, help_text, labels)
        self.buckets = tuple(sorted(buckets))
        self._series: dict[Labels, _Series] = {}

    def observe(self, value: float, *values: str) -> None:
        """Count *value* in the series of these label *values*."""
        self._check(values)
        series = self._series.setdefault(values, _Series(len(self.buckets)))
        series.add(value, self.buckets)

    def count(self, *values: str) -> int:
        """How many observations the series has."""
        series = self._series.get(values)
        return series.count if series is not None else 0

    def _samples(self) -> Iterable[str]:
        names = (*self.labels, "le")
        for values, series in sorted(self._series.items()):
            for bound, count in zip(self.buckets, series.counts, strict=True):
                yield f"{self.name}_bucket{_labels(names, (*values, _number(bound)))} {count}"
            yield f"{self.name}_bucket{_labels(names, (*values, '+Inf'))} {series.count}"
            yield f"{self.name}_sum{_labels(self.labels, values)} {_number(series.total)}"
            yield f"{self.name}_count{_labels(self.labels, values)} {series.count}"


class _Series:
    def __init__(self, buckets: int) -> None:
        self.counts = [0] * buckets  # cumulative: each bucket counts values <= its bound
        self.count = 0
        self.total = 0.0

    def add(self, value: float, bounds: Sequence[float]) -> None:
        for index, bound in enumerate(bounds):
            if value <= bound:
                self.counts[index] += 1
        self.count += 1
        self.total += value


def render(metrics: Iterable[_Metric]) -> str:
    """*metrics* in the text exposition format (ending with a newline)."""
    return "".join(f"{line}\n" for metric in metrics for line in metric.render())


def _labels(names: Sequence[str], values: Sequence[str]) -> str:
    if not names:
        return ""
    pairs = zip(names, values, strict=True)
    return "{" + ",".join(f'{name}="{_escape_value(value)}"' for name, value in pairs) + "}"


def _escape_value(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _escape_help(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def _number(value: float) -> str:
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return repr(float(value)) if value != int(value) else str(int(value))
