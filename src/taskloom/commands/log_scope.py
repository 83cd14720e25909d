"""The logging a command sets up lasts as long as the command.

``serve``, ``worker`` and ``ui`` send the root logger to the ``sys.stderr`` of their
start (``--log-format``, ``--log-level``), and every command gives it a default handler
there. In a process of its own that ends with the process; called in-process
(:func:`taskloom.cli.main` from a program or a test) it must not outlive the call: a
handler still bound to a stream its owner has since closed would make each later record,
from any thread, a "Logging error" instead of a line.
"""

import logging
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def logging_kept() -> Iterator[None]:
    """Give the root logger back its handlers and level as they were on entry, closing
    the handlers added meanwhile."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    try:
        yield
    finally:
        for added in [handler for handler in root.handlers if handler not in handlers]:
            root.removeHandler(added)
            added.close()
        for handler in handlers:
            if handler not in root.handlers:
                root.addHandler(handler)
        root.setLevel(level)
