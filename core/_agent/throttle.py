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
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from evalctl._agent.cassette import CassetteRecorder
from evalctl._agent.ledger import Ledger
from evalctl._errors import (
    ProviderError,
    RateLimited,
    RequestRejected,
    describe_crash,
    stops_the_run,
)
from evalctl._plugin.tooldefs import ARGUMENTS_MAX_DEPTH, UNUSABLE_ARGUMENTS
from evalctl._plugin.types import ModelRequest, ModelTurn, TokenUsage
from evalctl._schema_check import odd_number, unusable_numbers

RATE_LIMIT_RETRIES = 8  # refusals in a row before one call counts as a provider error
MAX_BACKOFF_SECONDS = 60.0


SpendCallback = Callable[[TokenUsage, "float | None"], None]
UNTHROTTLED = 1 << 30


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
        generation = await self.acquire()
        try:
            yield generation
        finally:
            await self.release()

    async def acquire(self) -> int:
        """Wait for one of the `limit` call slots and take it; returns the generation to
        report back with `rate_limited`. (`slot()` is the usual way; a limiter shared
        across machines, such as a Ray actor's, calls this and `release` remotely.)"""
        async with self._changed:
            await self._changed.wait_for(lambda: self.in_flight < self.limit)
            self.in_flight += 1
        return self._generation

    async def release(self) -> None:
        """Give back a slot `acquire` took."""
        async with self._changed:
            self.in_flight -= 1
            self._changed.notify_all()

    async def settle(self, generation: int, outcome: str | None) -> int:
        """A call made elsewhere ended (`SharedThrottle`): count its outcome ("ok",
        "rate_limited", or None for any other failure), give back its slot, and return
        the limit now."""
        if outcome == "ok":
            self.succeeded()
        elif outcome == "rate_limited":
            self.rate_limited(generation)
        await self.release()
        return self.limit

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


class SharedThrottle:
    """The run's throttle when it lives elsewhere (an attempt run on another machine,
    whose calls share one limit with every other attempt of the run): the same interface
    as CallThrottle, over `remote`, an object with `async acquire() -> int` and `async
    release(generation, outcome) -> int` (the limit now; CallThrottle.settle is one),
    outcome "ok", "rate_limited" or None (the call failed otherwise). The outcome travels
    with the release, so a call costs two round trips."""

    def __init__(self, remote: Any, limit: int = 1):
        self.remote = remote
        self.limit = limit  # as last known here: for the ledger's rate_limited lines
        # The outcome of each call in flight, by the asyncio task making it (a CLI
        # agent's calls through the model proxy can be concurrent).
        self._outcomes: dict[Any, str | None] = {}

    @contextlib.asynccontextmanager
    async def slot(self) -> AsyncIterator[int]:
        generation = int(await self.remote.acquire())
        caller = asyncio.current_task()
        self._outcomes[caller] = None
        try:
            yield generation
        finally:
            now = await self.remote.release(generation, self._outcomes.pop(caller, None))
            if isinstance(now, int):
                self.limit = now

    def succeeded(self) -> None:
        self._outcomes[asyncio.current_task()] = "ok"

    def rate_limited(self, generation: int) -> None:
        self._outcomes[asyncio.current_task()] = "rate_limited"
        self.limit = max(1, self.limit // 2)


def backoff_seconds(refusals: int, retry_after: float | None) -> float:
    """How long to wait before asking again: what the service said, else exponential
    backoff with jitter (1, 2, 4... seconds, at most a minute)."""
    if retry_after is not None and retry_after >= 0:
        return min(float(retry_after), MAX_BACKOFF_SECONDS)
    base = min(2.0 ** (refusals - 1), MAX_BACKOFF_SECONDS)
    return base * (0.5 + random.random() / 2)


@dataclass
class ModelCalls:
    """One attempt's model calls, whoever makes them (the built-in loop, or a CLI agent
    through the model proxy): each goes through the run's throttle (a rate-limited call
    waits and is asked again, the run lowering its concurrency meanwhile, up to
    RATE_LIMIT_RETRIES times), and each turn that comes back is counted here, in memory,
    and told to `on_spend` (the run budget). The attempt's totals are these counts, never
    the ledger read back: an agent may delete or mangle its ledger. Each exchange (the
    request, and the turn or the error that answered it) goes to `cassette`, when the
    attempt keeps one; `attempt` is stamped on every request (which attempt of its task
    this is, for a provider that serves recorded attempts)."""

    provider: Any
    ledger: Ledger
    throttle: CallThrottle = field(default_factory=lambda: CallThrottle(UNTHROTTLED))
    on_spend: SpendCallback | None = None
    cassette: CassetteRecorder | None = None
    attempt: int = 1
    turns: int = 0
    usage: TokenUsage = field(default_factory=TokenUsage)
    cost: float | None = 0.0  # None once any turn was unpriced: never a silent $0

    async def complete(self, request: ModelRequest) -> ModelTurn:
        request.attempt = self.attempt
        if self.cassette is None:
            return await self._complete(request)
        try:
            turn = await self._complete(request)
        except ProviderError as exc:
            self.cassette.record(request, error=str(exc), status=RequestRejected.RECORDED
                                 if isinstance(exc, RequestRejected) else exc.status)
            raise
        except BaseException as exc:  # a broken provider: replayed as the error it was
            if not stops_the_run(exc):
                self.cassette.record(request, error=f"the provider raised {describe_crash(exc)}")
            raise
        if isinstance(turn, ModelTurn):
            self.cassette.record(request, turn)
        return turn

    async def _complete(self, request: ModelRequest) -> ModelTurn:
        refusals = 0
        while True:
            async with self.throttle.slot() as generation:
                try:
                    turn: ModelTurn = await self.provider.complete(request)
                except RateLimited as exc:
                    self.throttle.rate_limited(generation)
                    refusals += 1
                    if refusals > RATE_LIMIT_RETRIES:
                        raise ProviderError(f"still rate limited after {refusals} tries: "
                                            f"{exc}") from None
                    wait = backoff_seconds(refusals, exc.retry_after)
                    self.ledger.append("rate_limited", error=str(exc), wait=round(wait, 3),
                                       concurrency=self.throttle.limit)
                else:
                    self.throttle.succeeded()
                    if isinstance(turn, ModelTurn):  # anything else fails its caller
                        turn = usable_turn(turn)
                        self._count(turn)
                    return turn
            await asyncio.sleep(wait)  # outside the slot: a waiting call holds none

    def _count(self, turn: ModelTurn) -> None:
        self.turns += 1
        self.usage = self.usage + turn.usage
        self.cost = None if self.cost is None or turn.cost is None else self.cost + turn.cost
        if self.on_spend is not None:
            self.on_spend(turn.usage, turn.cost)


def usable_turn(turn: ModelTurn) -> ModelTurn:
    """`turn` with the arguments of each tool call that evalctl could not record, check or
    send back (nested deeper than ARGUMENTS_MAX_DEPTH, or holding a number no JSON holds:
    a model's 1e999 is an infinity to Python's JSON reader) replaced by a note of why, in
    its calls and in the content blocks echoed to the model. The call then fails with that
    reason, as an invalid call does, and the attempt goes on."""
    problems = {call.id: why for call in turn.tool_calls
                if (why := arguments_problem(call.arguments)) is not None}
    if not problems:
        return turn
    calls = [replace(call, arguments={UNUSABLE_ARGUMENTS: problems[call.id]})
             if call.id in problems else call for call in turn.tool_calls]
    raw = turn.raw_content
    if isinstance(raw, list):
        raw = [{**block, "input": {UNUSABLE_ARGUMENTS: problems[block.get("id")]}}
               if isinstance(block, dict) and block.get("type") == "tool_use"
               and block.get("id") in problems else block for block in raw]
    return replace(turn, tool_calls=calls, raw_content=raw)


def arguments_problem(arguments: Any) -> str | None:
    """Why a tool call's arguments cannot be used, or None. Iterative: the value may be
    as deep as the model made it. One walk; the numbers' own, which says where, only
    when this one met an odd number."""
    pending: list[tuple[Any, int]] = [(arguments, 1)]
    odd = False
    while pending:
        value, depth = pending.pop()
        if depth > ARGUMENTS_MAX_DEPTH:
            return f"they nest deeper than {ARGUMENTS_MAX_DEPTH} levels"
        if isinstance(value, Mapping):  # as unusable_numbers walks them
            pending.extend((inner, depth + 1) for inner in value.values())
        elif isinstance(value, list | tuple):
            pending.extend((inner, depth + 1) for inner in value)
        else:
            odd = odd or odd_number(value)
    for path, why in unusable_numbers(arguments) if odd else ():
        where = "".join(f"[{step!r}]" for step in path)
        return f"arguments{where}: {why}"
    return None

