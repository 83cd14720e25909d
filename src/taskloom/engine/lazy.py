"""Names a package exports but imports on first use (PEP 562): ``import taskloom`` stays
cheap, and each name still reads as a plain attribute after its first lookup."""

import importlib
import sys
from collections.abc import Iterable, Mapping
from typing import Any


class LazyNames:
    """The ``__getattr__`` and ``__dir__`` of *package*: each name of *modules* (name:
    the module that defines it) is imported when first looked up."""

    def __init__(self, package: str, modules: Mapping[str, str], public: Iterable[str]) -> None:
        self._package = package
        self._modules = dict(modules)
        self._public = frozenset(public)

    def load(self, name: str) -> Any:
        """The value of *name*, imported now and kept as the package's attribute."""
        module = self._modules.get(name)
        if module is None:
            raise AttributeError(f"module {self._package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        setattr(sys.modules[self._package], name, value)  # the next lookup is a plain one
        return value

    def names(self) -> list[str]:
        """What ``dir(package)`` lists: its attributes and every exported name."""
        return sorted({*vars(sys.modules[self._package]), *self._public})
