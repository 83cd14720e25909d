"""Run the official conformance suite's ``tasks-*`` scenarios against taskloom.

``python -m tests.conformance.run TOOLS`` where TOOLS holds ``node_modules`` from
``tests/conformance/package.json`` (``make conformance`` installs it). Starts the real
server, ``taskloom serve --http 127.0.0.1:PORT --workflows tests.conformance.fixtures``
on a fresh SQLite file (its HTTP service with its authentication and limits; no tokens,
so loopback only, as the suite sends no credentials), runs the ten scenarios one by one,
prints one line per scenario and the checks that did not pass. Exit status 1 when a
check fails that is not a known failure (below), or when the server logged a traceback.
"""

import json
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Final, NamedTuple

from tests.helpers import checkout_env, free_port

SCENARIOS: Final = (
    "tasks-lifecycle",
    "tasks-capability-negotiation",
    "tasks-wire-fields",
    "tasks-request-state-removal",
    "tasks-mrtr-input",
    "tasks-request-headers",
    "tasks-dispatch-and-envelope",
    "tasks-status-notifications",
    "tasks-required-task-error",
    "tasks-mrtr-composition",
)
KNOWN_FAILURES: Final[frozenset[str]] = frozenset()
"""``scenario:check`` ids allowed to fail (none today)."""
FIXTURES: Final = "tests.conformance.fixtures"
REPOSITORY: Final = Path(__file__).resolve().parents[2]
CLI: Final = "node_modules/@modelcontextprotocol/conformance/dist/index.js"
NODE: Final = "node_modules/.bin/node"
START_S: Final = 30.0
SCENARIO_S: Final = 180.0


def main(tools: Path) -> int:
    node, cli = tools / NODE, tools / CLI
    if not (node.exists() and cli.exists()):
        print(f"conformance: {tools} has no suite; run `make conformance`", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="taskloom-conformance-") as scratch:
        work = Path(scratch)
        port = free_port()
        log = (work / "server.log").open("w")
        server = subprocess.Popen(
            _serve_command(port, work / "conformance.db"),
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=REPOSITORY,  # tests.conformance.fixtures is imported from here
            env=checkout_env(),
        )
        try:
            if not _listening(port, server):
                log.flush()
                print((work / "server.log").read_text(), file=sys.stderr)
                return 2
            tallies = [
                _scenario(node, cli, f"http://127.0.0.1:{port}/mcp", name, work)
                for name in SCENARIOS
            ]
        finally:
            server.terminate()
            try:
                server.wait(timeout=10)
            except subprocess.TimeoutExpired:
                server.kill()
                server.wait()
            log.close()
        server_log = (work / "server.log").read_text()
    unexpected = sum(tally.unexpected for tally in tallies)
    passed, counted = sum(t.passed for t in tallies), sum(t.counted for t in tallies)
    print(f"conformance: {passed} of {counted} checks passed (skipped checks not counted)")
    if "Traceback" in server_log:
        print("the server logged a traceback:\n" + server_log)
        unexpected += 1
    print("conformance: " + ("every check passed or is a known failure" if not unexpected
                             else f"{unexpected} unexpected failure(s)"))  # fmt: skip
    return 1 if unexpected else 0


class _Tally(NamedTuple):
    passed: int
    counted: int
    """Checks that are not skipped."""
    unexpected: int


def _scenario(node: Path, cli: Path, url: str, name: str, work: Path) -> _Tally:
    """Run one scenario; print its line; its counts."""
    out = work / name
    command = [str(node), str(cli), "server", "--url", url, "--scenario", name, "-o", str(out)]
    subprocess.run(command, capture_output=True, timeout=SCENARIO_S, check=False)
    found = sorted(out.glob("server-*/checks.json"))
    if not found:
        print(f"{name:32} ERROR  no checks.json (the CLI failed)")
        return _Tally(passed=0, counted=0, unexpected=1)
    checks: list[dict[str, Any]] = json.loads(found[-1].read_text())
    counts = {status: sum(c["status"] == status for c in checks) for status in _STATUSES}
    failed = [c for c in checks if c["status"] == "FAILURE"]
    verdict = "FAIL" if failed else ("SKIP" if counts["SKIPPED"] == len(checks) else "PASS")
    print(
        f"{name:32} {verdict:5} {counts['SUCCESS']}/{len(checks)} passed"
        + (f", {counts['SKIPPED']} skipped" if counts["SKIPPED"] else "")
    )
    unexpected = 0
    for check in failed:
        known = f"{name}:{check['id']}" in KNOWN_FAILURES
        unexpected += not known
        message = str(check.get("errorMessage") or "")[:160]
        print(f"    {'known ' if known else ''}FAILURE {check['id']}: {message}")
    counted = len(checks) - counts["SKIPPED"]
    return _Tally(passed=counts["SUCCESS"], counted=counted, unexpected=unexpected)


_STATUSES: Final = ("SUCCESS", "FAILURE", "WARNING", "INFO", "SKIPPED")


def _serve_command(port: int, database: Path) -> list[str]:
    """``taskloom serve`` as a user runs it (``python -m taskloom`` is the same command)."""
    return [
        sys.executable,
        "-m",
        "taskloom",
        "serve",
        "--http",
        f"127.0.0.1:{port}",
        "--db",
        str(database),
        "--workflows",
        FIXTURES,
    ]


def _listening(port: int, server: subprocess.Popen[bytes]) -> bool:
    """Whether *server* listens on *port* within ``START_S`` (a message says why not)."""
    deadline = time.monotonic() + START_S
    while time.monotonic() < deadline:
        if server.poll() is not None:
            print(f"conformance: the server exited with {server.returncode}:", file=sys.stderr)
            return False
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return True
        except OSError:
            time.sleep(0.1)  # polling a port that is not open yet: nothing to wait on
    print(
        f"conformance: the server did not listen on {port} within {START_S:g} s:", file=sys.stderr
    )
    return False


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(".conformance")))
