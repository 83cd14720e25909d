"""Whether the ``oauth`` extra (PyJWT with its cryptography, and httpx2) is installed."""

from typing import Final

from taskloom.engine.errors import require_extra

EXTRA: Final = "oauth"
MISSING: Final = "OAuth needs the oauth extra: pip install 'taskloom[oauth]'"
_MODULES: Final = ("jwt", "cryptography", "httpx2")


def require_oauth() -> None:
    """Import what OAuth needs, or say which extra to install.

    Raises:
        MissingExtraError: one of its modules is not installed (the original
            ``ModuleNotFoundError`` is its ``__cause__``).
    """
    require_extra(EXTRA, _MODULES, MISSING)
