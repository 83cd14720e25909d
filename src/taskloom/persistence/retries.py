"""How a store retries an operation a transient database error stopped: the same policy
on every store (tenacity's exponential backoff with jitter, within a window, sleeping
through anyio), each store naming its own transient errors and its pace."""

from collections.abc import Callable

import anyio
from tenacity import AsyncRetrying, retry_if_exception, stop_after_delay, wait_exponential_jitter


def transient_retries(
    is_transient: Callable[[BaseException], bool],
    *,
    within_s: float,
    first_s: float,
    max_s: float,
    jitter_s: float,
) -> AsyncRetrying:
    """Attempts of an operation until it succeeds, fails with an error not
    *is_transient*, or *within_s* has passed (the last error is raised as it is)."""
    return AsyncRetrying(
        retry=retry_if_exception(is_transient),
        stop=stop_after_delay(within_s),
        wait=wait_exponential_jitter(multiplier=first_s, max=max_s, jitter=jitter_s),
        sleep=anyio.sleep,
        reraise=True,
    )
