"""Runs a suite: per task a fresh workspace, the agent, then the graders.

Tasks run concurrently up to a limit. Ctrl-C (task cancellation) stops the run but
still returns what finished; unfinished tasks are marked not run, their partial
workspaces and ledgers kept.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from evalctl._agent.runtime import run_agent
from evalctl._agent.tools import tool_validators
from evalctl._errors import ProviderSetupError, UsageError
from evalctl._files import snapshot
from evalctl._plugin.options import provider_options as checked_provider_options
from evalctl._plugin.registry import Registry, use_registry
from evalctl._plugin.specs import CheckResult, GraderSpec
from evalctl._plugin.types import AgentResult, ExitStatus, SandboxRequest
from evalctl._report.results import (
    ERROR,
    FAILED,
    NOT_RUN,
    PASSED,
    CheckOutcome,
    RunResult,
    TaskResult,
)
from evalctl._run.agents import AgentChoice, choose_agent
from evalctl._run.integrity import (
    protected_changes,
    protected_changes_during_grading,
    remove_bytecode_caches,
    restore_seed,
    write_verify_files,
)
from evalctl._run.sandboxing import SandboxChoice, choose_sandbox, open_sandbox
from evalctl._run.setup import SetupFailed, prepare_workspace, run_setup
from evalctl._suite.model import Suite, Task
from evalctl._version import __version__
from evalctl._workspace import (
    Workspace,
    grading_state,
    ledger_path,
    new_run_directory,
    new_workspace,
    sandbox_environment,
)


@dataclass
class RunOptions:
    provider: str = "scripted"
    model: str | None = None
    provider_options: Mapping[str, Any] = field(default_factory=dict)
    concurrency: int | None = None
    out_dir: Path = Path("eval_reports")
    only: tuple[str, ...] = ()
    tags: tuple[str, ...] = ()
    repeat: int = 1
    sandbox: str | None = None  # --sandbox NAME: chosen by the user, by name
    sandbox_options: Mapping[str, str] = field(default_factory=dict)  # --sandbox-option
    config_sandbox: str | None = None  # `sandbox` in evalctl.toml
    config_sandbox_options: Mapping[str, Any] = field(default_factory=dict)
    agent: str | None = None  # --agent NAME
    agent_options: Mapping[str, Any] = field(default_factory=dict)  # --agent-option
    config_agent: str | None = None  # `agent` in evalctl.toml
    config_agent_options: Mapping[str, Any] = field(default_factory=dict)
    config_agents: Mapping[str, Any] = field(default_factory=dict)  # [agents.NAME] presets


ProgressCallback = Callable[[str, Task, TaskResult | None], None]


def select_tasks(suite: Suite, only: tuple[str, ...], tags: tuple[str, ...]) -> list[Task]:
    known = {t.id for t in suite.tasks}
    unknown = [i for i in only if i not in known]
    if unknown:
        raise UsageError(f"--only names unknown task(s) {', '.join(unknown)}; the suite has "
                         f"{', '.join(sorted(known))}")
    selected = [t for t in suite.tasks
                if (not only or t.id in only) and (not tags or set(tags) & set(t.tags))]
    if not selected:
        raise UsageError("no task matches the --only/--tag selection")
    return selected


@dataclass
class PreparedRun:
    """Everything resolved before any task starts, so bad input fails early."""

    suite: Suite
    tasks: list[Task]
    provider: Any
    concurrency: int
    options: RunOptions
    registry: Registry
    run_dir: Path
    sandbox: SandboxChoice
    agent: AgentChoice
    # Exit statuses that make a task an error, not a failure: the kernel's and those
    # the provider declares (the scripted provider's script_error, say).
    error_statuses: frozenset[str] = ExitStatus.ERRORS


def prepare_run(suite: Suite, registry: Registry, options: RunOptions) -> PreparedRun:
    tasks = select_tasks(suite, options.only, options.tags)
    spec = registry.get("provider", options.provider)
    for task in tasks:
        for check in task.checks:
            registry.get("grader", check["type"])
    provider_options = dict(options.provider_options)
    if options.model:
        provider_options["model"] = options.model
    provider_options = checked_provider_options(spec, provider_options)
    try:
        provider = spec.create(provider_options)
    except UsageError as exc:
        raise ProviderSetupError(str(exc)) from None
    sandbox = choose_sandbox(
        registry, spec, flag=options.sandbox, flag_options=options.sandbox_options,
        suite_default=suite.sandbox, config_name=options.config_sandbox,
        config_options=options.config_sandbox_options)
    agent = choose_agent(registry, flag=options.agent, flag_options=options.agent_options,
                         config_name=options.config_agent,
                         config_options=options.config_agent_options,
                         config_presets=options.config_agents)
    tool_validators()  # one-time setup belongs before the first task, not inside it
    concurrency = options.concurrency or min(
        spec.default_concurrency, sandbox.spec.default_concurrency or spec.default_concurrency)
    if concurrency < 1:
        raise UsageError("--concurrency must be at least 1")
    if options.repeat < 1:
        raise UsageError("--repeat must be at least 1")
    try:
        run_dir = new_run_directory(options.out_dir)
    except OSError as exc:
        raise UsageError(f"cannot create a run directory under {options.out_dir}: "
                         f"{exc.strerror or exc}") from None
    return PreparedRun(suite, tasks, provider, concurrency, options, registry, run_dir,
                       sandbox, agent, ExitStatus.ERRORS | set(spec.error_statuses))


async def grade(check: Mapping[str, Any], spec: GraderSpec, workspace: Path,
                result: AgentResult) -> CheckOutcome:
    """One check; a grader that raises is a failed check with the exception as detail."""
    try:
        if inspect.iscoroutinefunction(spec.grade):
            answer = await spec.grade(dict(check), workspace, result)
        else:
            answer = await asyncio.to_thread(spec.grade, dict(check), workspace, result)
        if not isinstance(answer, CheckResult):
            raise TypeError(f"grade() returned {type(answer).__name__}, expected "
                            "evalctl.CheckResult")
    except UsageError as exc:  # configuration, not a bug: say so, without alarm
        return CheckOutcome(spec.name, spec.kind, False,
                            f"the {spec.name} check cannot run: {exc}", error=True,
                            rate=spec.rate)
    except Exception as exc:
        return CheckOutcome(spec.name, spec.kind, False,
                            f"grader crashed: {type(exc).__name__}: {exc}", error=True,
                            rate=spec.rate)
    return CheckOutcome(spec.name, spec.kind, bool(answer.passed), str(answer.detail),
                        usage=answer.usage, cost=answer.cost, rate=spec.rate,
                        suspected_gaming=bool(answer.suspected_gaming))


def attempt_name(task: Task, attempt: int, repeat: int) -> str:
    """The workspace (and ledger) name of one attempt: the task id, or id@attempt."""
    return task.id if repeat == 1 else f"{task.id}@{attempt}"


def _sandbox_request(task: Task, workspace: Workspace, prepared: PreparedRun, name: str,
                     purpose: str) -> SandboxRequest:
    # Graders get a HOME and TMPDIR of their own: nothing the agent left in its own
    # (a planted config file, say) takes part in grading. Setup prepares the agent's.
    home, tmp = grading_state(workspace) if purpose == "grading" else \
        (workspace.home, workspace.tmp)
    # Setup has its own network allowance (installing the project, say): that sandbox only.
    network = task.setup.network if purpose == "setup" and task.setup else task.network
    return SandboxRequest(workspace.root, home, tmp, sandbox_environment(home, tmp),
                          network=network, options=prepared.sandbox.options,
                          purpose=purpose, attempt=name)


async def run_task(task: Task, prepared: PreparedRun, attempt: int = 1) -> TaskResult:
    name = attempt_name(task, attempt, prepared.options.repeat)
    workspace = new_workspace(prepared.run_dir, name)
    try:
        verify = await prepare_workspace(task, workspace)
        await run_setup(task, workspace, lambda: open_sandbox(
            prepared.sandbox, _sandbox_request(task, workspace, prepared, name, "setup")))
    except SetupFailed as exc:
        return TaskResult(task.id, ERROR, exit_status=ExitStatus.SETUP_ERROR, tags=task.tags,
                          attempt=attempt, workspace=str(workspace.root),
                          ledger=str(workspace.ledger_path), error=str(exc))
    sandbox_request = _sandbox_request(task, workspace, prepared, name, "agent")
    try:
        sandbox = await open_sandbox(prepared.sandbox, sandbox_request)
    except Exception as exc:
        return _sandbox_failure(task, workspace, attempt, exc)
    try:
        agent = await run_agent(task, prepared.provider, workspace, sandbox,
                                agent=prepared.agent.spec.run, options=prepared.agent.options,
                                name=prepared.agent.name, env=sandbox_request.env)
    finally:
        await sandbox.close()  # nothing the agent started outlives its turn at the work
    if agent.turns == 0 and agent.exit_status in prepared.error_statuses:
        # The model never answered: the workspace is the seed, and grading it would only
        # add failures that are not the agent's (a missing file, say) to the error.
        return _result(task, ERROR, [], agent, workspace, attempt)
    # Between the agent and the graders: evidence of tampering, then the hidden files.
    integrity = [outcome for outcome in (
        protected_changes(task, agent.files_changed), restore_seed(task, workspace),
        write_verify_files(verify, workspace)) if outcome is not None]
    before_grading = snapshot(workspace.root) if task.protected else {}
    try:
        agent.sandbox = await open_sandbox(
            prepared.sandbox, _sandbox_request(task, workspace, prepared, name, "grading"))
    except Exception as exc:
        return _sandbox_failure(task, workspace, attempt, exc)
    try:
        checks = list(integrity)
        for check in task.checks:
            # Again before every check: one that ran the agent's code may have left a
            # forged cache for the next.
            remove_bytecode_caches(workspace.root)
            checks.append(await grade(check, prepared.registry.graders[check["type"]],
                                      workspace.root, agent))
    finally:
        await agent.sandbox.close()
    late = protected_changes_during_grading(task, before_grading, snapshot(workspace.root)) \
        if task.protected else None
    if late is not None:
        checks.append(late)
    # Only mechanical checks decide the task; a judge's error shows in its own section.
    mechanical = [c for c in checks if c.kind == "mechanical"]
    if agent.exit_status in prepared.error_statuses or any(c.error for c in mechanical):
        status = ERROR
    elif all(c.passed for c in mechanical):
        status = PASSED
    else:
        status = FAILED
    return _result(task, status, checks, agent, workspace, attempt)


def _result(task: Task, status: str, checks: list[CheckOutcome], agent: AgentResult,
            workspace: Workspace, attempt: int) -> TaskResult:
    return TaskResult(
        task_id=task.id, status=status, checks=checks, exit_status=agent.exit_status,
        error=agent.error, turns=agent.turns, tool_calls=agent.tool_calls, usage=agent.usage,
        cost=agent.cost, duration=agent.duration, workspace=str(workspace.root),
        ledger=str(workspace.ledger_path), tags=task.tags, attempt=attempt,
    )


def _sandbox_failure(task: Task, workspace: Workspace, attempt: int,
                     exc: Exception) -> TaskResult:
    """A sandbox that cannot start is the machine's problem, not the agent's: an error."""
    return TaskResult(task.id, ERROR, exit_status=ExitStatus.INTERNAL_ERROR, tags=task.tags,
                      attempt=attempt, workspace=str(workspace.root),
                      ledger=str(workspace.ledger_path),
                      error=f"the sandbox failed to start: {type(exc).__name__}: {exc}")


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


async def execute(prepared: PreparedRun, progress: ProgressCallback | None = None) -> RunResult:
    """Run the prepared tasks. Cancellation ends the run early with what finished."""
    with use_registry(prepared.registry):
        return await _execute(prepared, progress)


async def _execute(prepared: PreparedRun, progress: ProgressCallback | None) -> RunResult:
    run_dir = prepared.run_dir
    started_at = _now()
    gate = asyncio.Semaphore(prepared.concurrency)
    notify = progress or (lambda *_: None)

    async def guarded(task: Task, attempt: int) -> TaskResult:
        async with gate:
            notify("start", task, None)
            begun = time.monotonic()
            result = await run_task(task, prepared, attempt)
            result.duration = round(time.monotonic() - begun, 4)
            notify("finish", task, result)
            return result

    repeat = prepared.options.repeat
    attempts = [(task, attempt) for task in prepared.tasks for attempt in range(1, repeat + 1)]
    pending = [asyncio.ensure_future(guarded(task, attempt)) for task, attempt in attempts]
    interrupted = False
    try:
        await asyncio.gather(*pending, return_exceptions=True)
    except asyncio.CancelledError:
        interrupted = True
        for future in pending:
            future.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
        current = asyncio.current_task()
        if current is not None:
            current.uncancel()

    close = getattr(prepared.provider, "aclose", None)
    if close is not None:
        with contextlib.suppress(Exception):
            await close()

    results = []
    for (task, attempt), future in zip(attempts, pending, strict=True):
        if future.done() and not future.cancelled() and future.exception() is None:
            results.append(future.result())
        elif future.done() and not future.cancelled():
            # A bug in evalctl or a plugin: recorded as this task's error, so the run
            # still reports everything else.
            exc = future.exception()
            results.append(TaskResult(
                task.id, ERROR, exit_status=ExitStatus.INTERNAL_ERROR, tags=task.tags,
                attempt=attempt, error=f"internal error: {type(exc).__name__}: {exc}"))
        else:
            name = attempt_name(task, attempt, repeat)
            started = (run_dir / name).is_dir()
            results.append(TaskResult(
                task.id, NOT_RUN, exit_status=ExitStatus.ABORTED if started else None,
                error="the run was interrupted", tags=task.tags, attempt=attempt,
                workspace=str(run_dir / name) if started else None,
                ledger=str(ledger_path(run_dir, name)) if started else None))
    registry = prepared.registry
    return RunResult(
        suite_path=str(prepared.suite.path),
        suite_name=prepared.suite.name,
        suite_sha256=prepared.suite.sha256,
        provider=prepared.options.provider,
        model=prepared.options.model,
        started_at=started_at,
        finished_at=_now(),
        evalctl_version=__version__,
        plugin_versions={p.name: p.version for p in registry.plugins if p.status == "ok"},
        tasks=results,
        interrupted=interrupted,
        run_directory=str(run_dir),
        repeat=repeat,
        rate_names=tuple(sorted({spec.rate for spec in registry.graders.values() if spec.rate})),
        sandbox=prepared.sandbox.to_dict(),
        agent=prepared.agent.to_dict(),
    )

