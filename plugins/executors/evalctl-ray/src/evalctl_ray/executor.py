"""The driver's side: connect to the cluster, keep it busy, bring each result back.

Attempts are submitted as the cluster has room for them (its CPUs over `num_cpus` per
attempt, at most `--concurrency` when given, looked at again as nodes come and go), each
right after `attempt.start()` passes the budget gate; each outcome is accepted into the
run directory as it arrives, in whatever order the workers finish.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import time
from collections.abc import AsyncIterator, Mapping
from typing import Any

import evalctl

CAPACITY_SECONDS = 5.0  # how long a look at the cluster's size is trusted
DEFAULT_RETRIES = 3


CONNECT_SECONDS = 10.0


def reachable(address: str) -> None:
    """A cluster's HOST:PORT that nothing answers on is refused at once: Ray itself keeps
    trying to reach it for minutes."""
    if address in ("auto", "local"):
        return
    host, _, port = address.removeprefix("ray://").rpartition(":")
    if not host or not port.isdigit():
        raise evalctl.UsageError(f"address={address}: expected auto, local, HOST:PORT or "
                                 "ray://HOST:PORT")
    import socket

    try:
        socket.create_connection((host.strip("[]"), int(port)), CONNECT_SECONDS).close()
    except OSError as exc:
        raise evalctl.UsageError(
            f"cannot reach the Ray cluster at {address}: {exc.strerror or exc}; start one "
            "with `ray start --head` (and `ray start --address HEAD:PORT` on the other "
            "nodes), or use --executor-option address=local for one machine") from None


def ray_reason(exc: BaseException) -> str:
    """Ray's reason for not connecting, without its advice to set "the `--address`
    flag": a flag of Ray's own command line, which evalctl does not have (a newcomer
    tried it). Its other sentences are kept."""
    sentences = re.split(r"(?<=\.)\s+", str(exc).strip())
    kept = " ".join(s for s in sentences if "--address" not in s).rstrip(". ")
    return kept or str(exc)


class RayExecutor:
    def __init__(self, options: Mapping[str, Any]):
        # Ray reports usage statistics to its makers unless told not to; a run of evalctl
        # does not phone home on the user's behalf (set RAY_USAGE_STATS_ENABLED=1 to allow).
        os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
        if str(options.get("address", "auto")) == "local":
            # A one-machine Ray: with clusters off, Ray binds and connects on 127.0.0.1
            # only, instead of the machine's routable address (read when ray is imported).
            os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
        import ray

        self.ray = ray
        self.address = str(options.get("address", "auto"))
        self.num_cpus = float(options.get("num_cpus", 1))
        self.memory_mb = options.get("memory_mb")
        self.max_retries = int(options.get("max_retries", DEFAULT_RETRIES))
        self.workspace = bool(options.get("workspace", True))
        forward = list(options.get("forward_env", []))
        missing = [name for name in forward if name not in os.environ]
        if missing:
            raise evalctl.UsageError(f"forward_env names {', '.join(missing)}, not set here")
        env = {name: os.environ[name] for name in forward}
        self.owns = not ray.is_initialized()
        if self.owns:
            self._connect(env)
        self._capacity: tuple[float, int] | None = None

    def _connect(self, env: Mapping[str, str]) -> None:
        ray = self.ray
        runtime_env = {"env_vars": dict(env)} if env else None
        quiet = {"logging_level": "WARNING", "log_to_driver": False}
        reachable(self.address)
        try:
            if self.address.startswith("ray://"):
                ray.init(self.address, runtime_env=runtime_env, logging_level="WARNING")
            elif self.address == "local":
                # One machine: every address loopback, nothing reachable from elsewhere.
                ray.init(include_dashboard=False, runtime_env=runtime_env,
                         _node_ip_address="127.0.0.1", **quiet)
            else:
                ray.init(address=self.address, runtime_env=runtime_env, **quiet)
        except (ConnectionError, RuntimeError, ValueError) as exc:
            name_one = "name a running one with --executor-option address=HOST:PORT, " \
                if self.address == "auto" else ""
            raise evalctl.UsageError(
                f"cannot reach the Ray cluster at {self.address}: {ray_reason(exc)}; "
                f"{name_one}start one with `ray start --head` (and `ray start --address "
                "HEAD:PORT` on the other nodes), or use --executor-option address=local for "
                "one machine") from None

    def window(self, plan: evalctl.ExecutionPlan) -> int:
        """How many attempts to have on the cluster at once: as many as its CPUs hold,
        at most --concurrency."""
        now = time.monotonic()
        if self._capacity is None or now - self._capacity[0] > CAPACITY_SECONDS:
            cpus = float(self.ray.cluster_resources().get("CPU", 0))
            self._capacity = (now, max(1, int(cpus // self.num_cpus)))
        size = self._capacity[1]
        return min(size, plan.concurrency) if plan.concurrency else size

    def head_node(self) -> str:
        """The head node's id (where the driver runs, if no node says it is the head)."""
        for node in self.ray.nodes():
            if node.get("Alive") and "node:__internal_head__" in node.get("Resources", {}):
                return str(node["NodeID"])
        return self.ray.get_runtime_context().get_node_id()

    async def execute(self, plan: evalctl.ExecutionPlan) -> AsyncIterator[evalctl.TaskResult]:
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        from evalctl_ray.worker import ModelCallLimit, run_attempt

        ray = self.ray
        # The limit lives on the head node, whose loss ends the cluster anyway; should it
        # go all the same, Ray starts it again and the calls waiting on it are retried.
        limit = ModelCallLimit.options(
            scheduling_strategy=NodeAffinitySchedulingStrategy(self.head_node(), soft=True),
            max_restarts=-1, max_task_retries=-1,
        ).remote(max(plan.model_calls, self.window(plan)))
        options: dict[str, Any] = {"num_cpus": self.num_cpus, "max_retries": self.max_retries,
                                   "retry_exceptions": False}
        if self.memory_mb:
            options["memory"] = int(self.memory_mb) * 1024 * 1024
        task = run_attempt.options(**options)
        waiting = iter(plan.attempts)
        running: dict[asyncio.Future[Any], tuple[evalctl.Attempt, Any]] = {}
        exhausted = False
        try:
            while True:
                while not exhausted and len(running) < self.window(plan):
                    attempt = next(waiting, None)
                    if attempt is None:
                        exhausted = True
                    elif await attempt.start():
                        ref = task.remote(attempt.portable(), limit, self.workspace)
                        running[asyncio.wrap_future(ref.future())] = (attempt, ref)
                if not running:
                    return
                done, _ = await asyncio.wait(running, return_when=asyncio.FIRST_COMPLETED)
                for future in done:
                    attempt, _ref = running.pop(future)
                    yield await self._result(attempt, future)
        finally:
            for _attempt, ref in running.values():
                with contextlib.suppress(Exception):
                    ray.cancel(ref)  # interrupts the task: its sandboxes close, its scratch goes
            with contextlib.suppress(Exception):
                ray.kill(limit)

    async def _result(self, attempt: evalctl.Attempt, future: asyncio.Future[Any]
                      ) -> evalctl.TaskResult:
        from ray import exceptions

        try:
            outcome, host = future.result()
        except exceptions.RayTaskError as exc:  # the attempt raised on its worker
            cause = exc.cause if isinstance(exc.cause, BaseException) else exc
            return attempt.failed(f"the attempt failed on the Ray cluster: "
                                  f"{type(cause).__name__}: {cause}")
        except exceptions.RayError as exc:  # lost with its worker more than max_retries
            return attempt.failed(f"the Ray cluster lost this attempt (tried "
                                  f"{self.max_retries + 1} times): {type(exc).__name__}: "
                                  f"{exc}")
        return await attempt.accept(outcome, host=host)

    async def aclose(self) -> None:
        if self.owns and self.ray.is_initialized():
            self.ray.shutdown()
