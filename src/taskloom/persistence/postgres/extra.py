"""Whether the ``postgres`` extra (psycopg and psycopg-pool) is installed."""

from typing import Final

from taskloom.engine.errors import require_extra

EXTRA: Final = "postgres"
MISSING: Final = (
    "a postgresql:// database needs the PostgreSQL extra: pip install 'taskloom[postgres]'"
)
_DRIVER: Final = ("psycopg", "psycopg_pool")


def require_driver() -> None:
    """Import the driver, or say which extra to install.

    Raises:
        MissingExtraError: psycopg or psycopg-pool is not installed (the original
            ``ModuleNotFoundError`` is its ``__cause__``).
    """
    require_extra(EXTRA, _DRIVER, MISSING)
