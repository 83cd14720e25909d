"""A live page's timings and the server's keepalive stay in the order ADR 0069 needs: a
quiet, healthy stream reads its keepalive after the page's proof time and before its
silence limit, so it proves itself and is never dropped for silence."""

import re
from importlib import resources

from taskloom.server.dashboard import live


def _page_constant(name: str) -> int:
    script = resources.files("taskloom.server.dashboard").joinpath("static/app.js").read_text()
    found = re.search(rf"\b{name}\s*=\s*(\d+)\s*[;,]", script)
    assert found is not None, f"app.js no longer sets {name}"
    return int(found.group(1))


def test_a_quiet_stream_proves_itself_with_its_keepalive_before_it_counts_as_silent() -> None:
    proven_ms = _page_constant("PROVEN_MS")
    silent_ms = _page_constant("SILENT_MS")
    keepalive_ms = live.KEEPALIVE_S * 1000
    assert proven_ms < keepalive_ms < silent_ms
    assert proven_ms == 10_000  # the figure ADR 0069, docs/dashboard.md and the tests give
