"""Worker slots: a stable worker id per process slot on one database, held by a file lock.

A process takes the first free slot (an exclusive ``flock`` on ``<db>.slots/<n>.lock``)
and keeps it until it exits. The operating system drops the lock when the process dies,
even by ``kill -9``, so a process that gets a slot knows that the slot's previous holder
is dead, and may take back that holder's runs at once instead of waiting for their
leases to expire.
"""

import fcntl
import os
import socket
from pathlib import Path
from typing import Self

from taskloom.engine.errors import PersistenceError

MAX_SLOTS = 256


class WorkerSlot:
    """An exclusive slot number for this process on one database file."""

    def __init__(self, database: Path) -> None:
        # Next to the real file: every name of one database (a symlink too) shares slots,
        # or two live processes would get one worker id and renew each other's leases.
        database = database.resolve()
        self._folder = database.with_name(database.name + ".slots")
        self._fd: int | None = None
        self.number: int | None = None

    @property
    def worker_id(self) -> str:
        """The stable id of whichever process holds this slot."""
        if self.number is None:
            raise RuntimeError("the slot is not held")
        return f"{socket.gethostname()}:slot-{self.number}"

    def acquire(self) -> Self:
        """Take the first free slot.

        Raises:
            PersistenceError: no slot is free, or the slot folder cannot be used.
        """
        try:
            self._folder.mkdir(parents=True, exist_ok=True)
            for number in range(MAX_SLOTS):
                fd = os.open(self._folder / f"{number}.lock", os.O_RDWR | os.O_CREAT, 0o600)
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    os.close(fd)
                    continue
                self._fd, self.number = fd, number
                return self
        except OSError as error:
            raise PersistenceError(
                f"cannot take a worker slot in {self._folder}: {error}"
            ) from error
        raise PersistenceError(f"all {MAX_SLOTS} worker slots of {self._folder} are taken")

    def release(self) -> None:
        """Give the slot up (the operating system also does this when the process ends)."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = self.number = None

    def __enter__(self) -> Self:
        return self.acquire()

    def __exit__(self, *exc_info: object) -> None:
        self.release()
