"""When the reader of the output leaves (``taskloom ... | head -1``)."""

import os
import sys


def silence_stdout() -> None:
    """Point stdout at the null device, as Python's documentation on SIGPIPE advises,
    so that later writes, and the flush at exit, do not fail again."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, sys.stdout.fileno())
    finally:
        os.close(devnull)
