"""Retry policies for workflow nodes: how many attempts, how long between them, for what.

The wait between attempts is durable engine state (the runner stores the attempt number
and the time before which the next attempt may not start); this module only computes it,
with tenacity's wait strategies. Nothing here wraps a node call in tenacity: its state
would die with the process.
"""

from typing import Final

from pydantic import BaseModel, ConfigDict, Field
from tenacity import RetryCallState, Retrying
from tenacity.wait import wait_base, wait_exponential, wait_random_exponential

_STATE_OWNER: Final = Retrying()  # tenacity needs a retrying object to describe an attempt

MAX_INTERRUPTIONS: Final = 3
"""The default limit of worker deaths during one node's attempts (the poison-pill guard)."""


class RetryPolicy(BaseModel):
    """When a failed node attempt is tried again, and how many worker deaths a node survives.

    Two budgets, counted apart (ADR 0021): ``max_attempts`` counts real failures and
    timeouts only; ``max_interruptions`` counts attempts whose worker died under them
    (kill -9, a lost host, an outage longer than the store's retries). An interruption
    never uses up a retry, and a failure never counts as an interruption.

    The delay before attempt ``n + 1`` grows as ``initial_delay_s * backoff ** (n - 1)``
    up to ``max_delay_s``. With ``jitter`` (the default, so that a wide fan-out failing at
    once does not retry in lockstep), half of that delay is fixed and half is random.
    """

    model_config = ConfigDict(frozen=True, extra="forbid", arbitrary_types_allowed=True)

    max_attempts: int = Field(default=1, ge=1, le=1000)
    """Failed (or timed out) attempts allowed, the first included (1: never retry).
    Interrupted attempts and attempts that stopped to wait are not counted."""
    max_interruptions: int = Field(default=MAX_INTERRUPTIONS, ge=1, le=1000)
    """Attempts whose worker died while running them, after which the node fails with
    ``WorkerLost`` instead of running again (a node that kills its worker every time)."""
    initial_delay_s: float = Field(default=1.0, ge=0)
    max_delay_s: float = Field(default=60.0, ge=0)
    backoff: float = Field(default=2.0, ge=1)
    jitter: bool = True
    retry_on: tuple[type[BaseException], ...] = (Exception,)
    """Exception types that earn another attempt; timeouts always count as failures."""

    def allows_another(self, failures: int, error: BaseException | None) -> bool:
        """True if a node whose *failures*-th failed attempt (1-based, this one included)
        just ended may be tried again.

        *error* is the exception the attempt raised, or ``None`` for a timeout.
        """
        if failures >= self.max_attempts:
            return False
        return error is None or isinstance(error, self.retry_on)

    def delay_after(self, failures: int) -> float:
        """Seconds to wait after the *failures*-th failed attempt (1-based) before the next."""
        state = RetryCallState(_STATE_OWNER, None, (), {})
        state.attempt_number = failures
        return float(self._wait()(state))

    def _wait(self) -> wait_base:
        if not self.jitter:
            return wait_exponential(
                multiplier=self.initial_delay_s, max=self.max_delay_s, exp_base=self.backoff
            )
        half = self.initial_delay_s / 2
        cap = self.max_delay_s / 2
        return wait_exponential(multiplier=half, max=cap, exp_base=self.backoff) + (
            wait_random_exponential(multiplier=half, max=cap, exp_base=self.backoff)
        )
