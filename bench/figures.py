"""The rows every benchmark reports: a figure's median and spread, and its verdict."""

import statistics
from typing import Any

Row = dict[str, Any]


def row(name: str, values: list[float], unit: str, target: str | None = None) -> Row:
    """Median, min and max of *values*; with a *target* such as ``">= 1000"`` or
    ``"< 0.3"``, whether the median meets it."""
    median = statistics.median(values)
    passed: bool | None = None
    if target is not None:
        bound = float(target.split()[-1])
        passed = median >= bound if target.startswith(">=") else median < bound
    return {
        "benchmark": name,
        "median": median,
        "min": min(values),
        "max": max(values),
        "unit": unit,
        "runs": len(values),
        "target": target,
        "passed": passed,
        "note": "",
    }


def p50(values: list[float]) -> float:
    """The middle sample (a sample, unlike the median of an even count)."""
    return sorted(values)[len(values) // 2]


def p99(values: list[float]) -> float:
    """The 99th-percentile sample."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]


def latency(name: str, values: list[float], target: str | None = None, *, digits: int = 2) -> Row:
    """A latency row in milliseconds: p50 as its median, p99 in its note."""
    found = row(name, values, "ms", target)
    found["median"] = p50(values)
    if target is not None:
        found["passed"] = found["median"] < float(target.split()[-1])
    found["note"] = f"p99 {p99(values):.{digits}f} ms"
    return found
