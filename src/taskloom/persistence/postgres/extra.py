"""Whether the ``postgres`` extra (psycopg and psycopg-pool) is installed."""

import importlib
from typing import Final

from taskloom.engine.errors import MissingExtraError

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
    for module in _DRIVER:
        try:
            importlib.import_module(module)
        except ModuleNotFoundError as error:
            if (error.name or "").split(".")[0] not in _DRIVER:
                raise
            raise MissingExtraError(MISSING, extra=EXTRA) from error
