"""Refusing a misspelled keyword where ``**options`` takes the keys of a ``TypedDict``."""

from collections.abc import Collection, Mapping


def check_keywords(callee: str, given: Mapping[str, object], allowed: Collection[str]) -> None:
    """Refuse a key of *given* that is not in *allowed*, as Python refuses an unknown
    keyword argument (``**options: Unpack[...]`` would otherwise take a misspelled one
    silently).

    Raises:
        TypeError: a key of *given* is not in *allowed*.
    """
    unknown = sorted(set(given).difference(allowed))
    if unknown:
        raise TypeError(f"{callee}() got an unexpected keyword argument {unknown[0]!r}")
