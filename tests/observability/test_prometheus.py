"""The Prometheus text format: help, type, escaped labels, cumulative buckets."""

import re

import pytest

from taskloom.observability.prometheus import Counter, Gauge, Histogram, render

SAMPLE = re.compile(
    r'^[a-zA-Z_:][a-zA-Z0-9_:]*(\{([a-zA-Z_][a-zA-Z0-9_]*="(\\.|[^"\\])*",?)*\})? '
    r"(-?[0-9.e+-]+|\+Inf|-Inf|NaN)$"
)


def assert_valid(text: str) -> None:
    """Every line is a ``# HELP``/``# TYPE`` comment or a well-formed sample."""
    assert text.endswith("\n")
    for line in text.splitlines():
        if line.startswith("# "):
            assert re.match(r"^# (HELP|TYPE) [a-zA-Z_:][a-zA-Z0-9_:]* ", line), line
        else:
            assert SAMPLE.match(line), line


def test_counters_and_gauges_render_each_series() -> None:
    created = Counter("jobs_total", "Jobs.\nMany.", ["workflow"])
    created.inc("a")
    created.inc("a")
    created.inc('we"ird\\name\n')
    running = Gauge("jobs_running", "Running.", ["workflow"])
    running.inc("a")
    running.dec("a")
    text = render([created, running])
    assert_valid(text)
    assert "# HELP jobs_total Jobs.\\nMany.\n" in text
    assert "# TYPE jobs_total counter\n" in text
    assert 'jobs_total{workflow="a"} 2\n' in text
    assert 'jobs_total{workflow="we\\"ird\\\\name\\n"} 1\n' in text
    assert 'jobs_running{workflow="a"} 0\n' in text


def test_histograms_count_in_cumulative_buckets() -> None:
    latency = Histogram("latency_seconds", "Latency.", ["op"], buckets=[0.1, 1])
    for value in (0.05, 0.5, 5):
        latency.observe(value, "x")
    text = render([latency])
    assert_valid(text)
    assert 'latency_seconds_bucket{op="x",le="0.1"} 1\n' in text
    assert 'latency_seconds_bucket{op="x",le="1"} 2\n' in text
    assert 'latency_seconds_bucket{op="x",le="+Inf"} 3\n' in text
    assert 'latency_seconds_sum{op="x"} 5.55\n' in text
    assert 'latency_seconds_count{op="x"} 3\n' in text


def test_the_wrong_number_of_labels_is_refused() -> None:
    with pytest.raises(ValueError, match="takes labels"):
        Counter("c_total", "C.", ["a", "b"]).inc("only-one")
