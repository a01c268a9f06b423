"""The `local` executor: every attempt in this process, concurrently, on one event loop.

Up to the run's concurrency (`--concurrency`, else what the provider and sandbox
suggest) attempts run at once, in suite order; each result is handed back the moment
its attempt finishes. A fixed pool of workers pulls the next attempt, so a 10,000-attempt
run holds a handful of tasks, not 10,000.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from typing import Any

import evalctl

_DONE = object()


class LocalExecutor:
    async def execute(self, plan: evalctl.ExecutionPlan) -> AsyncIterator[evalctl.TaskResult]:
        import asyncio  # here, not at the top: `evalctl list-plugins` never needs it

        limit = plan.concurrency or plan.default_concurrency
        attempts = iter(plan.attempts)
        finished: asyncio.Queue[Any] = asyncio.Queue()

        async def worker() -> None:
            try:
                for attempt in attempts:  # shared: each worker takes the next attempt
                    if await attempt.start():
                        finished.put_nowait(await attempt.run())
            except Exception as exc:  # start() failing is a bug: end the run, say so
                finished.put_nowait(exc)
            finally:
                finished.put_nowait(_DONE)

        workers = [asyncio.ensure_future(worker())
                   for _ in range(max(1, min(limit, len(plan.attempts))))]
        running = len(workers)
        try:
            while running:
                item = await finished.get()
                if item is _DONE:
                    running -= 1
                elif isinstance(item, Exception):
                    raise item
                else:
                    yield item
        finally:
            for task in workers:
                task.cancel()
            await asyncio.gather(*workers, return_exceptions=True)


def create(options: Mapping[str, Any]) -> LocalExecutor:
    return LocalExecutor()


@evalctl.hookimpl
def evalctl_register_executors(register):
    register(evalctl.ExecutorSpec(
        name="local",
        create=create,
        description="Runs every attempt here, in this process, up to --concurrency at once "
                    "(the default).",
        default=True,
    ))
