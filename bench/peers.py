"""The peer's own virtualenv (``bench/.peers/venv``) and the Redis it may use.

fastmcp and fastmcp-tasks are pinned at 4.1.2 (later releases need a newer ``certifi``
than the package index here has). They go into a venv of their own, never into the
project's, and only for the full ``make bench``.
"""

import socket
import subprocess
import sys
from pathlib import Path
from typing import Final

PEER_VERSION: Final = "4.1.2"
VENV: Final = Path(__file__).resolve().parent / ".peers" / "venv"
REDIS: Final = ("127.0.0.1", 6379)


def peer_python() -> Path:
    """The peer venv's interpreter, creating the venv and installing the peer if needed."""
    python = VENV / "bin" / "python"
    check = [str(python), "-c", "import fastmcp, fastmcp_tasks; print(fastmcp.__version__)"]
    if python.exists():
        found = subprocess.run(check, capture_output=True, text=True, check=False)
        if found.returncode == 0 and found.stdout.strip() == PEER_VERSION:
            return python
    subprocess.run([sys.executable, "-m", "venv", str(VENV)], check=True)
    pins = [f"fastmcp=={PEER_VERSION}", f"fastmcp-tasks=={PEER_VERSION}"]
    subprocess.run([str(python), "-m", "pip", "install", "--quiet", *pins], check=True)
    return python


def redis_answers() -> bool:
    """Whether a Redis server answers PING on 127.0.0.1:6379."""
    try:
        with socket.create_connection(REDIS, timeout=1) as connection:
            connection.sendall(b"PING\r\n")
            return connection.recv(16).startswith(b"+PONG")
    except OSError:
        return False
