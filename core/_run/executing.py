"""The run's side of an executor: the attempts it hands over, and what it does with what
comes back.

Whatever the executor (`local`, a cluster's), the run keeps everything that decides what a
result means: the budget gate and the progress display (`Attempt.start`), moving aside an
earlier try on resume, the durable journal line per attempt (exactly one: an attempt
that already has a result refuses another), and the internal error that records a bug
without losing the rest of the run. The executor only decides where and when attempts
run.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from evalctl._agent.throttle import CallThrottle
from evalctl._errors import describe_crash, plugin_failure_ignored, stops_the_run
from evalctl._plugin.types import Attempt, ExecutionPlan, ExitStatus
from evalctl._report.journal import Journal, JournalContents
from evalctl._report.results import ERROR, TaskResult
from evalctl._run.budget import RunBudget
from evalctl._run.portable import PortableAttempt, receive
from evalctl._run.runner import (
    PreparedRun,
    _retire,
    attempt_name,
    plugin_versions,
    run_task,
)
from evalctl._suite.model import Task
from evalctl._text import escape_text
from evalctl._version import __version__


@dataclass
class RunState:
    """What the attempts of one session share: the journal, throttle, budget, progress."""

    prepared: PreparedRun
    journal: Journal
    throttle: CallThrottle
    budget: RunBudget
    notify: Callable[[str, Task, TaskResult | None], None]
    session: int = 0

    @property
    def contents(self) -> JournalContents:
        return self.journal.contents


class RunAttempt(Attempt):
    """An attempt of this run (evalctl.Attempt, as executors see it)."""

    def __init__(self, state: RunState, task: Task, number: int):
        self.state = state
        self.task = task
        self.task_id = task.id
        self.number = number
        self.name = attempt_name(task, number, state.prepared.options.repeat)
        self.result: TaskResult | None = None  # set once: a second result is refused
        self.journaled = False

    def __repr__(self) -> str:
        return f"<evalctl.Attempt {self.name}>"

    async def start(self) -> bool:
        state = self.state
        budget = state.budget
        if budget.capped and budget.exhausted():
            budget.reached_reason = budget.exhausted()
            return False  # reported not run, with the reason; a resume can continue it
        state.notify("start", self.task, None)
        if state.prepared.options.resume is not None:
            run_dir = state.prepared.run_dir
            into = _unused(run_dir / ".retired" / f"session-{state.session}" / self.name)
            retired = await asyncio.to_thread(_retire, run_dir, self.name, into,
                                              self.task.source)
            if retired is not None:
                # A journaled (errored) attempt's spend is counted already, from its
                # result; a killed one's only its ledger knows.
                finished = (self.task_id, self.number) in state.contents.results
                state.journal.retired(self.name, str(into),
                                      {} if finished else retired[0].to_dict(),
                                      0.0 if finished else retired[1])
        return True

    async def run(self) -> TaskResult:
        self._unfinished()
        begun = time.monotonic()
        try:
            result = await run_task(self.task, self.state.prepared, self.number,
                                    throttle=self.state.throttle, budget=self.state.budget)
        except BaseException as exc:
            # A bug in evalctl or a plugin: recorded as this attempt's error, so the run
            # still reports everything else; a plugin's SystemExit too (an agent's, a
            # sandbox's), which ended evalctl with exit 0 and no reports.
            if stops_the_run(exc):
                raise
            result = self._error(f"internal error: {describe_crash(exc)}",
                                 ExitStatus.INTERNAL_ERROR)
        result.duration = round(time.monotonic() - begun, 4)
        return self._finish(result)

    def portable(self) -> PortableAttempt:
        prepared = self.state.prepared
        return PortableAttempt(
            task=self.task, number=self.number, name=self.name,
            repeat=prepared.options.repeat, run_dir=str(prepared.run_dir),
            provider=prepared.options.provider, provider_options=dict(prepared.provider_options),
            sandbox=prepared.sandbox.to_dict(), agent=prepared.agent.to_dict(),
            error_statuses=frozenset(prepared.error_statuses), evalctl_version=__version__,
            plugins=plugin_versions(prepared.registry))

    async def accept(self, outcome: bytes, host: str | None = None) -> TaskResult:
        self._unfinished()
        try:
            result = await asyncio.to_thread(receive, outcome, self.state.prepared.run_dir,
                                             self.name, self.task_id, self.number)
        except ValueError as exc:
            return self.failed(str(exc))
        if host is not None and result.host is None:
            result.host = host
        # Spent elsewhere, counted here as it arrives: a remote attempt's turns reach the
        # budget when it ends, so the run may end above its cap by what attempts then
        # running spend, as a local run does.
        budget = self.state.budget
        budget.charge(result.usage, result.cost)
        for check in result.checks:
            if check.usage is not None:
                budget.charge(check.usage, check.cost)
        return self._finish(result)

    def failed(self, reason: str) -> TaskResult:
        return self._finish(self._error(reason, ExitStatus.EXECUTOR_ERROR))

    def _error(self, reason: str, status: str) -> TaskResult:
        run_dir = self.state.prepared.run_dir
        return TaskResult(self.task_id, ERROR, exit_status=status, tags=self.task.tags,
                          attempt=self.number, workspace=str(run_dir / self.name),
                          error=escape_text(reason))

    def _unfinished(self) -> None:
        if self.result is not None:
            raise RuntimeError(f"attempt {self.name} already has a result")

    def _finish(self, result: TaskResult) -> TaskResult:
        self._unfinished()
        self.result = result
        return result


@dataclass
class RunPlan(ExecutionPlan):
    """The attempts of one session, as the executor sees them (evalctl.ExecutionPlan)."""

    attempts: list[RunAttempt]
    concurrency: int | None
    default_concurrency: int
    model_calls: int
    by_key: dict[tuple[str, int], RunAttempt] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.by_key = {(a.task_id, a.number): a for a in self.attempts}


@dataclass
class Driven:
    """How the executor's run ended: interrupted (Ctrl-C), or a failure of its own."""

    interrupted: bool = False
    failure: str | None = None


async def drive(state: RunState, plan: RunPlan) -> Driven:
    """Run the plan through the run's executor, journaling each result as it comes."""
    prepared = state.prepared
    executor = prepared.executor.executor
    outcome = Driven()
    stream: Any = None
    try:
        stream = executor.execute(plan)
        async for result in stream:
            attempt = plan.by_key.get((getattr(result, "task_id", None),
                                       getattr(result, "attempt", None)))
            if attempt is None or attempt.result is not result or attempt.journaled:
                raise RuntimeError(f"it yielded {result!r}, which is not the result of one "
                                   "of its attempts yet to be reported (yield once what run, "
                                   "accept or failed return)")
            attempt.journaled = True
            await state.journal.record(result)  # durable before the attempt counts as done
            state.notify("finish", attempt.task, result)
    except asyncio.CancelledError:
        outcome.interrupted = True
        current = asyncio.current_task()
        if current is not None:
            current.uncancel()
    except BaseException as exc:  # the executor's own failure: the run reports what finished
        if stops_the_run(exc):  # a SystemExit is the executor's failure, as elsewhere
            raise
        outcome.failure = (f"the {prepared.executor.spec.name} executor failed: "
                           f"{describe_crash(exc)}")
    finally:
        close = getattr(stream, "aclose", None)
        if close is not None:
            with plugin_failure_ignored():
                await close()
    # A result the executor had not yielded yet (the run stopped) is journaled anyway:
    # an attempt that finished is never lost.
    for attempt in plan.attempts:
        if attempt.result is not None and not attempt.journaled:
            attempt.journaled = True
            await state.journal.record(attempt.result)
    return outcome


def new_plan(state: RunState, attempts: list[tuple[Task, int]]) -> RunPlan:
    prepared = state.prepared
    return RunPlan([RunAttempt(state, task, number) for task, number in attempts],
                   prepared.options.concurrency, prepared.concurrency, prepared.concurrency)


def _unused(into: Path) -> Path:
    """`into`, or beside it a name nothing has taken (`<name>.2`, ...): a session number
    counts the journal's resume lines, and a resume line torn by a crash numbered the
    next session the same, whose retiring then stopped the run ("Directory not empty")."""
    candidate, number = into, 1
    while os.path.lexists(candidate):
        number += 1
        candidate = into.with_name(f"{into.name}.{number}")
    return candidate
