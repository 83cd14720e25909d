"""A one-shot plain host (as MCP Inspector's CLI is): it starts `taskloom serve`, makes one
plain call of a long job, reads the deferred answer, then leaves, by closing the server's
stdin (``stdin``) or by SIGTERM (``sigterm``), and exits without waiting for the job.

``python -m tests.e2e.leaving_host DB stdin|sigterm [serve flags...]``: prints one JSON
line: the task's id, the deferred text, and how long the server took to exit.
"""

import json
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import IO, Any

from tests.helpers import checkout_env

COUNTDOWN = {"start": 72, "tick_s": 1.0}
"""Four lanes of 18 numbers at one a second: 18 s, longer than the host's 1 s wait plus
the server's exit (at most 5 s after stdin closes, 10 s after SIGTERM), so that the
server cannot finish the task itself before it leaves, even on a loaded machine."""


def _send(pipe: IO[bytes], message: dict[str, Any]) -> None:
    pipe.write(json.dumps(message).encode() + b"\n")
    pipe.flush()


def _answer(pipe: IO[bytes], request_id: int) -> dict[str, Any]:
    while True:
        line = pipe.readline()
        if not line:
            raise SystemExit("the server closed its stdout")
        message: dict[str, Any] = json.loads(line)
        if message.get("id") == request_id:
            return message


def main() -> None:
    database, how, *flags = sys.argv[1:]
    with Path(database + ".server.log").open("ab") as errors:
        server = subprocess.Popen(
            [sys.executable, "-m", "taskloom", "serve", "--db", database, *flags],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=errors,
            env=checkout_env(TASKLOOM_PLAIN_WAIT_S="1"),
        )
    assert server.stdin is not None
    assert server.stdout is not None
    _send(
        server.stdin,
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-06-18",
                "capabilities": {},
                "clientInfo": {"name": "leaving-host", "version": "0"},
            },
        },
    )
    _answer(server.stdout, 1)
    _send(server.stdin, {"jsonrpc": "2.0", "method": "notifications/initialized"})
    _send(
        server.stdin,
        {
            "jsonrpc": "2.0",
            "id": 2,
            "method": "tools/call",
            "params": {"name": "countdown", "arguments": COUNTDOWN},
        },
    )
    deferred = _answer(server.stdout, 2)["result"]
    left = time.monotonic()
    if how == "stdin":
        server.stdin.close()
    else:
        server.send_signal(signal.SIGTERM)
    code = server.wait(timeout=30)
    print(
        json.dumps(
            {
                "taskId": deferred["_meta"]["taskloom/task"]["taskId"],
                "text": deferred["content"][0]["text"],
                "isError": deferred["isError"],
                "exit_s": time.monotonic() - left,
                "code": code,
            }
        )
    )


if __name__ == "__main__":
    main()
