"""Blocking and CPU-bound code in a node, without losing the node's cancel.

A node runs on the event loop: code that blocks it (a long read, hashing, a parse) stalls
every task of the process, and a cancel cannot reach it. Run such code with
:meth:`NodeContext.run_blocking <taskloom.engine.dag.NodeContext.run_blocking>`: it goes
to a worker thread, and the node waits for the thread to end, so a cancelled node never
leaves a thread burning a core behind it. Python cannot stop a thread from outside, so the
function must look for the cancel itself: it calls :func:`check_cancelled` often (every
few milliseconds of work), which raises once the node is cancelled.

Code that cannot check (a C extension's long call, a third-party parser) goes to a worker
process with :meth:`NodeContext.run_in_process
<taskloom.engine.dag.NodeContext.run_in_process>`: a cancel kills the process at once.
The function and its arguments must then be picklable (a module-level function).
"""

from collections.abc import Callable
from typing import TypeVar, TypeVarTuple

import anyio
import anyio.from_thread
import anyio.to_thread

T = TypeVar("T")
Args = TypeVarTuple("Args")


def check_cancelled() -> None:
    """In a function run by ``run_blocking``: raise if the node has been cancelled.

    The exception ends the function; the node then ends as cancelled (or timed out).
    Outside a worker thread of taskloom (or anyio) it does nothing, so the same function
    can be called directly, e.g. in a unit test.
    """
    try:
        anyio.from_thread.check_cancelled()
    except RuntimeError:  # not in a worker thread (NoEventLoopError is a RuntimeError)
        return


async def run_blocking(function: Callable[[*Args], T], *args: *Args) -> T:
    """``function(*args)`` in a worker thread; returns (or raises) what it does.

    A cancel of the caller is seen by :func:`check_cancelled` in *function*; this waits
    for *function* to end either way, so no thread outlives its node.
    """
    return await anyio.to_thread.run_sync(function, *args)


async def run_in_process(function: Callable[[*Args], T], *args: *Args) -> T:
    """``function(*args)`` in a worker process, killed at once if the caller is cancelled.

    *function* and *args* must be picklable; the result too.
    """
    import anyio.to_process  # its subprocess machinery loads with the first such call

    return await anyio.to_process.run_sync(function, *args, cancellable=True)
