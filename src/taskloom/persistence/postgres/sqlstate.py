"""Which PostgreSQL errors are worth a second try, decided by SQLSTATE (ADR 0017).

psycopg's exception classes are no guide: in psycopg 3.3 ``DeadlockDetected`` and
``SerializationFailure`` are not ``TransactionRollback``. The SQLSTATE is the server's
own verdict, so the class (its first two characters) decides, with a few codes of a
class overruled either way.
"""

from typing import Final

import psycopg

TRANSIENT_CLASSES: Final = frozenset(
    {
        "08",  # connection exception: the connection or the server went away
        "40",  # transaction rollback: serialization failure, deadlock
        "53",  # insufficient resources: too many connections, out of memory
    }
)
TRANSIENT_CODES: Final = frozenset(
    {
        "55P03",  # lock not available
        "57P01",  # admin shutdown (the server is stopping or a backend was terminated)
        "57P02",  # crash shutdown (another backend crashed)
        "57P03",  # cannot connect now (the server is starting or recovering)
        "57P05",  # idle session timeout (the connection is gone, a new one works)
    }
)
PERMANENT_CODES: Final = frozenset(
    {
        "08004",  # the server rejected the connection (e.g. an unsupported protocol)
        "08007",  # transaction resolution unknown: the write may have landed
        "08P01",  # protocol violation: a bug, not an outage
        "40002",  # integrity constraint violation: the same data fails again
        "40003",  # statement completion unknown: the write may have landed
        "53100",  # disk full: an operator must act
        "53400",  # configuration limit exceeded: an operator must act
    }
)
CONTENTION_CODES: Final = frozenset({"55P03"})
"""Besides class 40: the transient errors that mean "busy", not "unavailable"."""


def is_transient(error: BaseException) -> bool:
    """True for failures that left nothing behind and may pass on a second try.

    A driver error without a SQLSTATE is transient when it is operational (libpq lost or
    could not open the connection); a commit that fails that way is reported by the
    caller, never retried.
    """
    if not isinstance(error, psycopg.Error):
        return False
    state = error.sqlstate
    if state is None:
        return isinstance(error, psycopg.OperationalError)
    if state in PERMANENT_CODES:
        return False
    return state[:2] in TRANSIENT_CLASSES or state in TRANSIENT_CODES


def is_contention(error: psycopg.Error) -> bool:
    """True when the server refused because of other transactions (rollback, locks)."""
    state = error.sqlstate or ""
    return state[:2] == "40" or state in CONTENTION_CODES
