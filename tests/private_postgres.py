"""A throwaway PostgreSQL cluster of one test's own, which the test may stop and start
(the shared test server is never restarted: other tests and sessions use it).

It needs PostgreSQL's server programs (``initdb``, ``pg_ctl``: Debian's ``postgresql``
package, which ``scripts/ensure-postgres.sh`` installs). Run as root, they run as the
``postgres`` user. Without them the calling test fails with the reason."""

import glob
import os
import pwd
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.helpers import free_port


def _programs() -> Path:
    found = shutil.which("pg_ctl")
    if found is not None:
        return Path(found).parent
    versions = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"), key=_version)
    if not versions:
        pytest.fail(
            "no PostgreSQL server programs (pg_ctl, initdb) for a private cluster; "
            "run scripts/ensure-postgres.sh",
            pytrace=False,
        )
    return Path(versions[-1]).parent


def _version(path: str) -> int:
    return int(Path(path).parts[-3]) if Path(path).parts[-3].isdigit() else 0


@dataclass(frozen=True)
class PrivateCluster:
    """A cluster in a temporary directory, listening on 127.0.0.1:*port* (trust auth)."""

    bin: Path
    home: Path
    port: int

    @property
    def url(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def _run(self, program: str, *args: str, check: bool = True) -> None:
        command = [str(self.bin / program), *args]
        if os.geteuid() == 0:  # the server refuses to run as root
            command = ["runuser", "-u", "postgres", "--", *command]
        ran = subprocess.run(command, check=False, capture_output=True, text=True, timeout=60)
        if check and ran.returncode != 0:
            pytest.fail(f"{program} failed: {ran.stderr.strip() or ran.stdout.strip()}")

    def start(self) -> None:
        """Start the server; returns once it accepts connections."""
        options = (
            f"-p {self.port} -k {self.home} -c listen_addresses=127.0.0.1 -c fsync=off"
            " -c max_connections=50"
        )
        self._run(
            "pg_ctl",
            "-D",
            str(self.home / "data"),
            "-o",
            options,
            "-w",
            "start",
            "-l",
            str(self.home / "server.log"),
        )

    def stop(self) -> None:
        """Stop the server at once (``fast``: sessions are terminated, not waited for)."""
        self._run("pg_ctl", "-D", str(self.home / "data"), "-m", "fast", "-w", "stop")

    def crash(self) -> None:
        """Stop the server as a crash would (``immediate``: no shutdown checkpoint; the
        next start recovers from the WAL)."""
        self._run("pg_ctl", "-D", str(self.home / "data"), "-m", "immediate", "-w", "stop")


@contextmanager
def private_cluster() -> Iterator[PrivateCluster]:
    """A new cluster, started; stopped and deleted on exit."""
    programs = _programs()
    home = Path(tempfile.mkdtemp(prefix="taskloom-pg-"))
    try:
        if os.geteuid() == 0:
            owner = pwd.getpwnam("postgres")
            os.chown(home, owner.pw_uid, owner.pw_gid)
        cluster = PrivateCluster(programs, home, free_port())
        cluster._run(
            "initdb",
            "-D",
            str(home / "data"),
            "-A",
            "trust",
            "-U",
            "postgres",
            "--no-sync",
            "-E",
            "UTF8",
        )
        cluster.start()
        try:
            yield cluster
        finally:
            cluster._run("pg_ctl", "-D", str(home / "data"), "-m", "immediate", "stop", check=False)
    finally:
        shutil.rmtree(home, ignore_errors=True)
