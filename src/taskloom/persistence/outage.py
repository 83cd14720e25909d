"""One line when a database goes away and one when it is back (ADR 0038).

A store reports each operation that reached its database (:meth:`Outage.answered`) and
each that gave up because it could not (:meth:`Outage.failed`). The first give-up logs a
WARNING naming the database (never a password) and the driver's error class; the first
answer after it logs an INFO with the outage's length and calls the store's wake-ups,
so that work waiting for the database goes on at once. Every failure in between is
silent here: the callers answer "store unavailable, retry later" without a traceback.
"""

import logging
import time
from collections.abc import Callable

logger = logging.getLogger("taskloom.store")


class Outage:
    """Whether one database is answering, as its store's operations found it."""

    def __init__(self, target: str, *, retry_after_s: float = 5.0) -> None:
        self.target = target
        """The database, as messages name it (``PostgreSQL user@host:5432/db``)."""
        self.retry_after_s = retry_after_s
        """When to try again, as the answers to callers say it (the store's wait)."""
        self._first_failure: float | None = None
        """When an operation first failed to reach the database (monotonic)."""
        self._down = False
        self._back_at = -float("inf")
        """When the database was last back after an outage (monotonic)."""
        self._wake_ups: list[Callable[[], None]] = []

    @property
    def down(self) -> bool:
        """True from the first operation that gave up until the next that succeeded."""
        return self._down

    def on_back(self, wake_up: Callable[[], None]) -> None:
        """Call *wake_up* (a cheap, non-blocking callback) whenever the database is back."""
        self._wake_ups.append(wake_up)

    def stumbled(self) -> None:
        """An attempt failed and will be retried: the outage, if any, started here."""
        if self._first_failure is None:
            self._first_failure = time.monotonic()

    def failed(self, error: BaseException, *, started: float | None = None) -> None:
        """An operation gave up on the database because of *error* (the driver's); one
        that *started* (``time.monotonic()``) before the database was last back is a
        stale verdict and says nothing about now."""
        if started is not None and started < self._back_at:
            return
        self.stumbled()
        if self._down:
            return
        self._down = True
        logger.warning(
            "%s is unavailable (%s): requests are answered 'store unavailable, retry "
            "later' and work waits until it is back",
            self.target,
            type(error).__name__,
        )

    def answered(self) -> None:
        """An operation reached the database."""
        started, self._first_failure = self._first_failure, None
        if not self._down:
            return
        self._down = False
        self._back_at = time.monotonic()
        length = self._back_at - started if started is not None else 0.0
        logger.info("%s is back after an outage of %.1f s", self.target, length)
        for wake_up in self._wake_ups:
            wake_up()
