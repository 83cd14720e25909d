"""Whether an address names this machine only."""

import ipaddress
from typing import Final

LOOPBACK_NAMES: Final = frozenset({"localhost"})


def is_loopback(host: str) -> bool:
    """Whether *host* names this machine only (``127.0.0.0/8``, ``::1``, ``localhost``)."""
    if host.lower() in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
