"""How many model calls a run makes at once, adapted to what the service allows.

When a provider says it is rate limited (`RateLimited`: HTTP 429 or overloaded, after
its own retries), the run halves how many calls it lets run at once and the call
waits and is asked again; each run of successes as long as the current limit raises
it by one, back up to the run's concurrency (additive increase, multiplicative
decrease, as TCP does). So a big run backs off instead of hammering the API, and
speeds up again instead of staying slow.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections.abc import AsyncIterator

RATE_LIMIT_RETRIES = 8  # refusals in a row before one call counts as a provider error
MAX_BACKOFF_SECONDS = 60.0


class CallThrottle:
    def __init__(self, ceiling: int):
        self.ceiling = max(1, ceiling)
        self.limit = self.ceiling
        self.lowest = self.ceiling  # for the report: how far the run had to back off
        self.in_flight = 0
        self._successes = 0
        # Calls that started before the last decrease do not lower the limit again: a
        # burst of refusals for calls made together is one signal, not one per call.
        self._generation = 0
        self._changed = asyncio.Condition()

    @contextlib.asynccontextmanager
    async def slot(self) -> AsyncIterator[int]:
        """Hold one of the `limit` call slots; yields the generation to report back."""
        async with self._changed:
            await self._changed.wait_for(lambda: self.in_flight < self.limit)
            self.in_flight += 1
        try:
            yield self._generation
        finally:
            async with self._changed:
                self.in_flight -= 1
                self._changed.notify_all()

    def succeeded(self) -> None:
        if self.limit >= self.ceiling:
            return
        self._successes += 1
        if self._successes >= self.limit:
            self.limit += 1
            self._successes = 0

    def rate_limited(self, generation: int) -> None:
        if generation != self._generation:
            return
        self._generation += 1
        self._successes = 0
        self.limit = max(1, self.limit // 2)
        self.lowest = min(self.lowest, self.limit)


def backoff_seconds(refusals: int, retry_after: float | None) -> float:
    """How long to wait before asking again: what the service said, else exponential
    backoff with jitter (1, 2, 4... seconds, at most a minute)."""
    if retry_after is not None and retry_after >= 0:
        return min(float(retry_after), MAX_BACKOFF_SECONDS)
    base = min(2.0 ** (refusals - 1), MAX_BACKOFF_SECONDS)
    return base * (0.5 + random.random() / 2)
