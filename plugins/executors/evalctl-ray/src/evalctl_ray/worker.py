"""What runs on the cluster: one attempt as a Ray task, and the run's model-call limit as
a Ray actor.

Imported by the driver when a run uses the executor, and by Ray's workers when they run
a task (by reference: this module must be installed on every node, with evalctl and the
run's plugins in the same versions).
"""

from __future__ import annotations

import asyncio
import socket
from typing import Any

import ray

import evalctl


@ray.remote(num_cpus=0)
class ModelCallLimit:
    """The run's one limit on model calls at once, for every worker (evalctl's own
    throttle: halved on a rate limit, grown back with successes), so adding nodes does
    not multiply 429s. Slots are counted per holder (a Ray task's id, the same for each
    try of a task), so the slots of a try lost with its node are given back when the
    attempt is tried again."""

    def __init__(self, ceiling: int):
        self.throttle = evalctl.call_throttle(ceiling)
        self.held: dict[str, int] = {}

    async def acquire(self, holder: str) -> int:
        generation = await self.throttle.acquire()
        self.held[holder] = self.held.get(holder, 0) + 1
        return generation

    async def release(self, holder: str, generation: int, outcome: str | None) -> int:
        if self.held.get(holder, 0) <= 0:
            return self.throttle.limit  # forgotten already: an earlier try's late release
        self.held[holder] -= 1
        return await self.throttle.settle(generation, outcome)

    async def forget(self, holder: str) -> int:
        """Give back every slot `holder` still holds; how many there were."""
        count = self.held.pop(holder, 0)
        for _ in range(count):
            await self.throttle.release()
        return count

    def limit(self) -> int:
        return self.throttle.limit


class _ActorThrottle:
    """The limit as `evalctl.run_portable` wants it, over the actor."""

    def __init__(self, actor: Any, holder: str):
        self.actor = actor
        self.holder = holder

    async def acquire(self) -> int:
        return await self.actor.acquire.remote(self.holder)

    async def release(self, generation: int, outcome: str | None) -> int:
        return await self.actor.release.remote(self.holder, generation, outcome)


def where() -> str:
    """This worker, for the report: its host name and Ray node id."""
    return f"{socket.gethostname()} (node {ray.get_runtime_context().get_node_id()[:12]})"


@ray.remote
def run_attempt(payload: Any, limit: Any, workspace: bool) -> tuple[bytes, str]:
    """One attempt on this worker: its workspace, sandboxes, agent and graders all here,
    in a scratch directory removed afterwards. Returns the packed outcome and where it ran.
    A try lost with its worker is retried by Ray (max_retries); nothing it did reaches the
    run, which only ever sees the outcome of the try that finished."""
    holder = ray.get_runtime_context().get_task_id() or "driver"
    host = where()
    ray.get(limit.forget.remote(holder))  # slots an earlier, lost try of this task held

    async def attempt() -> bytes:
        return await evalctl.run_portable(payload, throttle=_ActorThrottle(limit, holder),
                                          workspace=workspace, host=host)

    return asyncio.run(attempt()), host
