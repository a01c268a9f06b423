"""Runs a suite: per task a fresh workspace, the agent, then the graders.

The run's executor (a plugin: `local` runs attempts concurrently here, up to a limit)
decides where and when attempts run; see executing.py. Each finished attempt is journaled (durably)
the moment it finishes, and the run's result is rendered from the journal, so a run
killed by any means keeps every finished attempt and can be resumed. Ctrl-C (task
cancellation) stops the run but still returns what finished; unfinished tasks are
marked not run, their partial workspaces and ledgers kept. A run budget stops new
attempts once it is spent.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import contextvars
import inspect
import os
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from evalctl._agent.cassette import CassetteRecorder
from evalctl._agent.ledger import Ledger, ledger_spend
from evalctl._agent.runtime import run_agent
from evalctl._agent.throttle import CallThrottle
from evalctl._agent.tools import tool_validators
from evalctl._blocking import off_loop
from evalctl._errors import (
    ProviderSetupError,
    SuiteError,
    UsageError,
    describe_crash,
    plugin_failure_ignored,
    stops_the_run,
)
from evalctl._files import ConfinementError
from evalctl._plugin.options import provider_options as checked_provider_options
from evalctl._plugin.registry import DISABLE_ENV, Registry, use_registry
from evalctl._plugin.types import AgentResult, ExitStatus, Sandbox, SandboxRequest, TokenUsage
from evalctl._report.journal import (
    Journal,
    JournalContents,
    attempts_to_run,
    build_run,
    differences,
    now,
)
from evalctl._report.journal import attempt_name as _attempt_name
from evalctl._report.results import (
    ERROR,
    CheckOutcome,
    RunResult,
    TaskResult,
    plugin_parts,
    plugin_shown,
)
from evalctl._run.agents import AgentChoice, agent_preflight, choose_agent
from evalctl._run.budget import RunBudget
from evalctl._run.executors import ExecutorChoice, choose_executor
from evalctl._run.grading import (
    GradingSandboxFailed,
    attempt_status,
    grade_attempt,
    make_repositories_safe,
    make_repositories_safe_now,
)
from evalctl._run.grading import grade as grade  # where tests and evalctl.testing find it
from evalctl._run.sandboxing import SandboxChoice, choose_sandbox, open_sandbox
from evalctl._run.setup import SetupFailed, prepare_workspace, run_setup
from evalctl._sources.model import Source
from evalctl._suite.model import Suite, Task
from evalctl._suite.rules import preflight_refusal
from evalctl._text import escape_text
from evalctl._version import __version__
from evalctl._workspace import (
    Workspace,
    cassette_path,
    grading_state,
    new_run_directory,
    new_workspace,
    retire_attempt,
    sandbox_environment,
    seed_workspace,
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
    # Where evalctl.toml sets `sandbox` ("FILE:LINE"), for messages; not an identity option.
    config_sandbox_origin: str | None = None
    agent: str | None = None  # --agent NAME
    agent_options: Mapping[str, Any] = field(default_factory=dict)  # --agent-option
    config_agent: str | None = None  # `agent` in evalctl.toml
    config_agent_options: Mapping[str, Any] = field(default_factory=dict)
    config_agents: Mapping[str, Any] = field(default_factory=dict)  # [agents.NAME] presets
    max_cost: float | None = None  # --max-cost: USD for the whole run
    max_tokens: int | None = None  # --max-tokens: tokens for the whole run
    # How attempts are scheduled; not an identity option: a resume may use another.
    executor: str | None = None  # --executor NAME
    executor_options: Mapping[str, Any] = field(default_factory=dict)  # --executor-option
    config_executor: str | None = None  # `executor` in evalctl.toml
    config_executor_options: Mapping[str, Any] = field(default_factory=dict)
    resume: JournalContents | None = None  # --resume: the journal of the run to continue
    retry_errors: bool = False  # --retry-errors: with resume, rerun attempts in error


# The options that decide what a run's results mean: a resumed run must have the same.
# (Concurrency, reporters and the budget may change between sessions.)
IDENTITY_OPTIONS = ("provider", "model", "provider_options", "only", "tags", "repeat",
                    "sandbox", "sandbox_options", "config_sandbox", "config_sandbox_options",
                    "agent", "agent_options", "config_agent", "config_agent_options",
                    "config_agents")


def identity_of(options: RunOptions) -> dict[str, Any]:
    """The options that decide results, as the journal records them."""
    value = {key: getattr(options, key) for key in IDENTITY_OPTIONS}
    return {key: list(v) if isinstance(v, tuple) else dict(v) if isinstance(v, Mapping)
            else v for key, v in value.items()}


def resumed_options(contents: JournalContents, given: Mapping[str, Any],
                    concurrency: int | None, out_dir: Path,
                    executor: Mapping[str, Any] | None = None) -> RunOptions:
    """The options of a run to resume: the journal's, with the budget and concurrency
    given now (unless given, the journaled ones). An option given now that differs from
    the journal's is refused, with every difference named: a resumed run must mean what
    it meant."""
    if contents.header.get("regrade_of"):
        from evalctl._run.regrade import how_to_regrade_again

        # Found by an outside tester: resumed, a regrade's unfinished attempts were run
        # again by the agent (a live provider charged), not graded again.
        raise UsageError(f"cannot resume {contents.run_dir}: it is a regrade (`evalctl "
                         "regrade` made it), and a resume would run the agent again for "
                         "the attempts it did not grade; "
                         + how_to_regrade_again(contents.run_dir, contents.header))
    if "options" not in contents.header:
        raise UsageError(f"cannot resume {contents.run_dir}: its journal's header records no "
                         "options, so what the run meant is unknown; start a new run instead")
    recorded = dict(contents.header["options"])
    merged = {**recorded, **{k: v for k, v in given.items() if k in IDENTITY_OPTIONS}}
    changed = differences(recorded, merged, IDENTITY_OPTIONS)
    if changed:
        raise UsageError(f"cannot resume {contents.run_dir}: options differ from the journaled "
                         "run's (journal -> now):\n  " + "\n  ".join(changed)
                         + "\nresume without them to continue the run as it was, or start a "
                         "new run with them (--only ID runs just some tasks)")
    budget = {"max_cost": recorded.get("max_cost"), "max_tokens": recorded.get("max_tokens")}
    budget.update({k: v for k, v in given.items() if k in budget and v is not None})
    return RunOptions(
        provider=merged["provider"], model=merged["model"],
        provider_options=dict(merged["provider_options"] or {}),
        concurrency=concurrency or contents.concurrency, out_dir=out_dir,
        only=tuple(merged["only"] or ()),
        tags=tuple(merged["tags"] or ()), repeat=int(merged["repeat"]),
        sandbox=merged["sandbox"], sandbox_options=dict(merged["sandbox_options"] or {}),
        config_sandbox=merged["config_sandbox"],
        config_sandbox_options=dict(merged["config_sandbox_options"] or {}),
        agent=merged.get("agent"), agent_options=dict(merged.get("agent_options") or {}),
        config_agent=merged.get("config_agent"),
        config_agent_options=dict(merged.get("config_agent_options") or {}),
        config_agents=dict(merged.get("config_agents") or {}),
        max_cost=budget["max_cost"], max_tokens=budget["max_tokens"],
        resume=contents, retry_errors=bool(given.get("retry_errors")),
        **(executor or {}))


ProgressCallback = Callable[[str, Task, TaskResult | None], None]


def select_tasks(suite: Suite, only: tuple[str, ...], tags: tuple[str, ...]) -> list[Task]:
    known = {t.id for t in suite.tasks}
    unknown = [i for i in only if i not in known]
    if unknown:
        raise UsageError(f"--only names unknown task(s) {', '.join(unknown)}"
                         f"{_did_you_mean(unknown, known)}; the suite has "
                         f"{', '.join(sorted(known))}")
    # Every tag must match a task: a typo beside a tag that matches (`--tag math --tag
    # dta`) used to be dropped silently, running less than was asked for.
    known_tags = {tag for t in suite.tasks for tag in t.tags}
    unknown = [tag for tag in dict.fromkeys(tags) if tag not in known_tags]
    if unknown:
        raise UsageError(f"--tag names unknown tag(s) {', '.join(unknown)}"
                         f"{_did_you_mean(unknown, known_tags)}; the suite's tags: "
                         f"{', '.join(sorted(known_tags)) or 'none'}")
    selected = [t for t in suite.tasks
                if (not only or t.id in only) and (not tags or set(tags) & set(t.tags))]
    if not selected:
        raise UsageError("no task matches the --only/--tag selection")
    return selected


def _did_you_mean(unknown: list[str], known: set[str]) -> str:
    import difflib

    close = [f"'{match[0]}' for '{name}'" for name in unknown
             if (match := difflib.get_close_matches(name, sorted(known), n=1))]
    return f" (did you mean {', '.join(close)}?)" if close else ""


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
    # Set after the run when the journal could not be written (a full disk): the
    # reports, built from memory, are whole, but a resume would not see everything.
    journal_failure: str | None = None
    provider_options: Mapping[str, Any] = field(default_factory=dict)  # typed
    executor: ExecutorChoice | None = None


def _preflight(registry: Registry, tasks: list[Task], suite_path: str = "") -> None:
    """Each grader with a preflight sees every check of its type before any task: a
    check that cannot work here (a judge without a key) stops the run with exit 2, its
    message naming where the suite has such checks (found by a newcomer: which check's
    provider to fix was not said)."""
    checks: dict[str, list[dict[str, Any]]] = {}
    where: dict[str, list[str]] = {}
    for task in tasks:
        for index, check in enumerate(task.checks):
            checks.setdefault(check["type"], []).append(dict(check))
            places = where.setdefault(check["type"], [])
            # The check's own line where the loader kept it (found by a newcomer: the
            # task's line was named, several lines above the judge check to fix).
            line = task.check_lines[index] if index < len(task.check_lines) else task.line
            place = f"{suite_path}:{line} (task '{task.id}')" if suite_path else \
                f"task '{task.id}'"
            if place not in places:
                places.append(place)
    problems = []  # every grader's: one run of the suite names them all
    for name, of_type in checks.items():
        spec = registry.graders[name]
        if spec.preflight is None:
            continue
        try:
            with use_registry(registry):
                answer = spec.preflight(of_type)
                if inspect.isawaitable(answer):
                    _wait_for(answer)
        except BaseException as exc:  # a broken preflight must not let a doomed run start
            if stops_the_run(exc):  # SystemExit is the plugin's: it ended evalctl, exit 0
                raise
            why = preflight_refusal(registry, name, exc)
            # Where the suite has such checks, said whatever the preflight raised (found
            # by a plugin newcomer: a crash named no place to look).
            shown = ", ".join(where[name][:3]) + (
                f" and {len(where[name]) - 3} more" if len(where[name]) > 3 else "")
            problems.append(f"the {name} checks cannot run: {why} (the {name} checks of "
                            f"{shown})")
    if problems:
        raise UsageError("\n".join(problems))


def _wait_for(awaitable: Any) -> Any:
    """Run an awaitable to its end from synchronous code, on a loop of its own in a
    thread (so this works whether or not the caller is inside an event loop), with the
    caller's context (the active registry)."""
    async def main() -> Any:
        return await awaitable

    context = contextvars.copy_context()
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(context.run, asyncio.run, main()).result()


def prepare_run(suite: Suite, registry: Registry, options: RunOptions) -> PreparedRun:
    tasks = select_tasks(suite, options.only, options.tags)
    spec = registry.get("provider", options.provider)
    for task in tasks:
        for check in task.checks:
            registry.get("grader", check["type"])
    resume = options.resume
    if resume is not None:
        _check_resumable(resume, suite, registry, tasks)
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
        config_options=options.config_sandbox_options,
        suite_origin=f"{suite.path}:{suite.sandbox_line}" if suite.sandbox_line else None,
        config_origin=options.config_sandbox_origin)
    if sandbox.spec.preflight is not None:
        # Options that cannot work here stop the run now, not each attempt as it starts
        # (found by a newcomer: `ro_paths=$PWD`, which holds the run's reports).
        problem = sandbox.spec.preflight(sandbox.options, options.out_dir)
        if problem:
            raise UsageError(f"sandbox '{sandbox.spec.name}': {problem}")
    agent = choose_agent(registry, flag=options.agent, flag_options=options.agent_options,
                         config_name=options.config_agent,
                         config_options=options.config_agent_options,
                         config_presets=options.config_agents)
    if agent.spec.preflight is not None:
        # An agent that cannot start here stops the run now, not each attempt as an
        # error (found by a newcomer: `claude` not installed, or installed where the
        # sandbox does not show it).
        shows, sandbox_options = sandbox.spec.visible, sandbox.options

        def visible(path: str) -> bool:
            return True if shows is None else bool(shows(path, sandbox_options))

        problem = agent_preflight(agent.spec, agent.options, visible)
        if problem:
            raise UsageError(f"agent '{agent.name}': {problem}")
    tool_validators()  # one-time setup belongs before the first task, not inside it
    concurrency = options.concurrency or min(
        spec.default_concurrency, sandbox.spec.default_concurrency or spec.default_concurrency)
    if concurrency < 1:
        raise UsageError("--concurrency must be at least 1")
    if options.repeat < 1:
        raise UsageError("--repeat must be at least 1")
    for limit, flag in ((options.max_cost, "--max-cost"), (options.max_tokens, "--max-tokens")):
        if limit is not None and limit < 0:
            raise UsageError(f"{flag} must not be negative")
    if resume is not None:
        recorded = {k: v for k, v in resume.header.get("sandbox", {}).items() if k != "chosen_by"}
        chosen = {k: v for k, v in sandbox.to_dict().items() if k != "chosen_by"}
        if recorded != chosen:
            raise UsageError(f"cannot resume {resume.run_dir}: the sandbox differs from the "
                             f"journaled run's: {recorded} -> {chosen}")
        recorded = {k: v for k, v in resume.header.get("agent", {}).items() if k != "chosen_by"}
        chosen = {k: v for k, v in agent.to_dict().items() if k != "chosen_by"}
        if recorded != chosen:  # a new version of the agent, or its options, is another run
            raise UsageError(f"cannot resume {resume.run_dir}: the agent differs from the "
                             f"journaled run's: {recorded} -> {chosen}")
    _preflight(registry, tasks, str(suite.path) if suite.path else "")
    executor = choose_executor(registry, flag=options.executor,
                               flag_options=options.executor_options,
                               config_name=options.config_executor,
                               config_options=options.config_executor_options)
    if resume is not None:
        run_dir = resume.run_dir.resolve()
    else:
        try:
            run_dir = new_run_directory(options.out_dir)
        except OSError as exc:
            raise UsageError(f"cannot create a run directory under {options.out_dir}: "
                             f"{exc.strerror or exc}") from None
    return PreparedRun(suite, tasks, provider, concurrency, options, registry, run_dir,
                       sandbox, agent, ExitStatus.ERRORS | set(spec.error_statuses),
                       provider_options=provider_options, executor=executor)


def _check_resumable(resume: JournalContents, suite: Suite, registry: Registry,
                     tasks: list[Task]) -> None:
    """Refuse, naming what changed, to resume a run whose suite, evalctl or plugins are
    not what they were: its finished attempts would not mean the same."""
    header = resume.header
    changed = []
    recorded_sha = header.get("suite", {}).get("sha256")
    if recorded_sha != suite.sha256:
        # Both suites named: a SUITE given with --resume was shown beside the hash of the
        # one the run had, as if that file had changed (found by a newcomer).
        recorded = header.get("suite", {})
        then = recorded.get("absolute_path") or recorded.get("path") or "?"
        same = os.path.realpath(str(then)) == os.path.realpath(str(suite.path))
        changed.append(f"the suite {suite.path}: sha256 {str(recorded_sha)[:12]} -> "
                       f"{suite.sha256[:12]}" if same else
                       f"the suite: the run's was {then} (sha256 {str(recorded_sha)[:12]}), "
                       f"this one is {suite.path} (sha256 {suite.sha256[:12]}); a resume "
                       "needs no SUITE: it reads the run's from its journal")
    if header.get("evalctl_version") != __version__:
        changed.append(f"evalctl: {header.get('evalctl_version')} -> {__version__}")
    # Only the plugins this run uses decide what its attempts mean: installing, removing
    # or upgrading an unrelated one (a judge grader the suite never calls) must not
    # strand a run that took hours.
    used = plugins_used(registry, header, tasks)
    recorded = {name: plugin_parts(value) for name, value in header.get("plugins", {}).items()
                if name in used}
    current = {name: plugin_parts(value) for name, value in plugin_versions(registry).items()
               if name in used}

    def shown(parts: tuple[str | None, str | None],
              other: tuple[str | None, str | None] | None) -> str:
        # `distribution version`; against a journal older than the distributions' record
        # (none named), versions alone.
        distribution, version = parts
        return plugin_shown({"distribution": None if other and other[0] is None
                             else distribution, "version": version})

    recorded_plugins = {name: shown(parts, current.get(name)) for name, parts in recorded.items()}
    plugins = {name: shown(parts, recorded.get(name)) for name, parts in current.items()}
    plugin_lines = [f"plugin {line}" for line in differences(
        recorded_plugins, plugins, sorted({*recorded_plugins, *plugins}))]
    changed += plugin_lines
    planned = [t.get("id") for t in header.get("tasks", [])]
    if planned != [t.id for t in tasks]:
        changed.append("the tasks selected")
    if changed:
        hint = ""
        if plugin_lines:
            hint = ("\n(only the plugins the run uses are compared: its provider, agent, "
                    "sandbox, executor and graders. Reinstall the journaled version to "
                    f"continue; a plugin that now provides one of them in another's place can "
                    f"be set aside with {DISABLE_ENV}=NAME, or =DISTRIBUTION:NAME)")
        raise UsageError(f"cannot resume {resume.run_dir}: it was run with something else "
                         "(journal -> now):\n  " + "\n  ".join(changed) + hint
                         + "\nstart a new run instead")


def plugins_used(registry: Registry, header: Mapping[str, Any], tasks: list[Task]) -> set[str]:
    """The entry-point names of the plugins that provide what the journaled run uses now:
    its provider, agent, sandbox and executor, and the graders of its tasks' checks."""
    wanted = [("provider", header.get("provider")),
              ("agent", (header.get("agent") or {}).get("name")),  # a preset's plugin
              ("agent", (header.get("agent") or {}).get("base")),
              ("sandbox", (header.get("sandbox") or {}).get("name")),
              ("executor", (header.get("executor") or {}).get("name"))]
    wanted += [("grader", check.get("type")) for task in tasks for check in task.checks]
    return registry.plugins_providing(wanted)


def plugins_not_installed(recorded: Any, registry: Registry) -> list[str]:
    """The plugins a run's record names (its journal's or report's `plugins`) that no
    installed plugin is now: `wordcount (evalctl-wordcount 1.0.0)`, one each. A plugin of
    that name from another distribution is not it; one installed but disabled or broken
    is (the registry's own message says why it cannot be used)."""
    installed = {(p.name, p.distribution) for p in registry.plugins}
    names = {name for name, _ in installed}
    missing = []
    for name, value in sorted((recorded or {}).items() if isinstance(recorded, Mapping)
                              else ()):
        distribution, _ = plugin_parts(value)
        if name not in names or (distribution is not None
                                 and (name, distribution) not in installed):
            missing.append(f"{name} ({plugin_shown(value)})")
    return missing


@contextlib.contextmanager
def naming_missing_plugins(recorded: Any, registry: Registry, doing: str) -> Iterator[None]:
    """A UsageError raised inside (an unknown grader of the suite's, an unknown
    provider, agent or sandbox) gains a line naming the plugins the run was made with
    that are not installed now, with their distributions: what "unknown grader
    'word_count'" alone never said (found by an outside review)."""
    try:
        yield
    except ProviderSetupError:
        raise  # the provider is there, and said what it needs
    except UsageError as exc:
        missing = plugins_not_installed(recorded, registry)
        if not missing:
            raise
        note = (f"the run {doing} was made with {len(missing)} plugin(s) not installed now: "
                f"{', '.join(missing)}; what is unknown above may be theirs: install that "
                "distribution at that version (evalctl list-plugins shows what is "
                "installed), then try again")
        if isinstance(exc, SuiteError):
            raise SuiteError(exc.problems, "\n".join(filter(None, (exc.note, note)))
                             ) from None
        raise UsageError(f"{exc}\n{note}") from None


def plugin_versions(registry: Registry) -> dict[str, dict[str, str | None]]:
    """The distribution and version of every plugin that loaded, by entry-point name (two
    distributions may use one name: the report says which one ran)."""
    return {p.name: {"distribution": p.distribution, "version": p.version}
            for p in registry.plugins if p.status == "ok"}


def attempt_name(task: Task, attempt: int, repeat: int) -> str:
    """The workspace (and ledger) name of one attempt: the task id, or id@attempt."""
    return _attempt_name(task.id, attempt, repeat)


def _sandbox_request(task: Task, workspace: Workspace, prepared: PreparedRun, name: str,
                     purpose: str, state: tuple[Path, Path] | None = None,
                     read_only: tuple[str, ...] = ()) -> SandboxRequest:
    # Graders get a HOME and TMPDIR of their own (`state`, from grading_state): nothing
    # the agent left in its own (a planted config file, say) takes part in grading.
    # Setup prepares the agent's.
    home, tmp = state or (workspace.home, workspace.tmp)
    # Setup has its own network allowance (installing the project, say): that sandbox only.
    network = task.setup.network if purpose == "setup" and task.setup else task.network
    return SandboxRequest(workspace.root, home, tmp, sandbox_environment(home, tmp),
                          network=network, options=prepared.sandbox.options,
                          purpose=purpose, attempt=name, read_only=read_only)


async def run_task(task: Task, prepared: PreparedRun, attempt: int = 1, *,
                   throttle: CallThrottle | None = None,
                   budget: RunBudget | None = None) -> TaskResult:
    try:
        return await _run_task(task, prepared, attempt, throttle=throttle, budget=budget)
    except BaseException:
        # Interrupted (Ctrl-C, SIGTERM) or a bug: what the agent left in git directories
        # is made safe now, on the loop, since the run is stopping (found by an attacker
        # round: an interrupted attempt, and its retired copy, kept its fsmonitor).
        make_repositories_safe_now(
            prepared.run_dir, attempt_name(task, attempt, prepared.options.repeat), task.source)
        raise


async def _run_task(task: Task, prepared: PreparedRun, attempt: int, *,
                    throttle: CallThrottle | None, budget: RunBudget | None) -> TaskResult:
    name = attempt_name(task, attempt, prepared.options.repeat)
    workspace, seeded, cassette, ledger = await off_loop(_start_attempt, task, prepared, name,
                                                         attempt)
    try:
        verify = await prepare_workspace(task, workspace, seeded=seeded)
        await run_setup(task, workspace, lambda: open_sandbox(
            prepared.sandbox, _sandbox_request(task, workspace, prepared, name, "setup")))
    except SetupFailed as exc:
        _close(cassette, ledger)
        return TaskResult(task.id, ERROR, exit_status=ExitStatus.SETUP_ERROR, tags=task.tags,
                          attempt=attempt, workspace=str(workspace.root),
                          ledger=str(workspace.ledger_path), error=str(exc))
    except BaseException:  # cancelled (Ctrl-C): the files opened above are closed too
        _close(cassette, ledger)
        raise
    sandbox_request = _sandbox_request(task, workspace, prepared, name, "agent")
    try:
        sandbox = await open_sandbox(prepared.sandbox, sandbox_request)
    except BaseException as exc:  # a sandbox plugin's SystemExit too
        _close(cassette, ledger)
        if stops_the_run(exc):  # cancelled (Ctrl-C)
            raise
        return _sandbox_failure(task, workspace, attempt, exc)
    try:
        if ledger is None:  # after setup's events: opened here, so its failure is seen
            ledger = await off_loop(Ledger, workspace.ledger_path)
        agent = await run_agent(task, prepared.provider, workspace, sandbox,
                                agent=prepared.agent.spec.run, options=prepared.agent.options,
                                name=prepared.agent.name, env=sandbox_request.env,
                                throttle=throttle,
                                on_spend=budget.charge if budget is not None else None,
                                cassette=cassette, attempt=attempt, ledger=ledger)
    finally:
        await sandbox.close()  # nothing the agent started outlives its turn at the work
    if agent.turns == 0 and agent.exit_status in prepared.error_statuses:
        # The model never answered: the workspace is the seed, and grading it would only
        # add failures that are not the agent's (a missing file, say) to the error.
        unsafe = await make_repositories_safe(workspace, task.source)
        return _recorded(_result(task, ERROR, [], agent, workspace, attempt), cassette,
                         ledger, unsafe)

    async def open_grading(state: tuple[Path, Path], read_only: tuple[str, ...]) -> Sandbox:
        return await open_sandbox(prepared.sandbox, _sandbox_request(
            task, workspace, prepared, name, "grading", state, read_only))

    # Before grading as well as after: a check that runs git (`git diff --exit-code HEAD`)
    # would read the agent's index, config and replace refs (found by an attacker round:
    # an edit hidden with `update-index --assume-unchanged` passed a check that the
    # regrade, on the neutralised copy, failed).
    unsafe_before = await make_repositories_safe(workspace, task.source)
    try:
        checks = await grade_attempt(task, workspace, agent, verify, prepared.registry,
                                     open_grading)
    except GradingSandboxFailed as exc:
        await make_repositories_safe(workspace, task.source)
        return _sandbox_failure(task, workspace, attempt, exc.__cause__ or exc)
    # Once grading is over: a check may run the agent's code, which may write .git/config.
    unsafe = tuple(dict.fromkeys(
        (*unsafe_before, *await make_repositories_safe(workspace, task.source))))
    if budget is not None:
        for check in checks:
            if check.usage is not None:
                budget.charge(check.usage, check.cost)
    status = attempt_status(agent.exit_status, checks, prepared.error_statuses)
    return _recorded(_result(task, status, checks, agent, workspace, attempt), cassette,
                     ledger, unsafe)


def _recorded(result: TaskResult, cassette: CassetteRecorder, ledger: Ledger,
              unsafe: tuple[str, ...] = ()) -> TaskResult:
    """`result`, naming its ledger's or cassette's failure to be written, if any, and
    what of its workspace could not be made safe (`unsafe`)."""
    result.record_problems = tuple(f"its {what} stopped being written: {why}" for what, why in (
        ("ledger", ledger.failure), ("cassette (a replay stops there)", cassette.failure))
        if why) + unsafe
    return result


def _start_attempt(task: Task, prepared: PreparedRun, name: str, attempt: int
                   ) -> tuple[Workspace, bool | Exception, CassetteRecorder, Ledger | None]:
    """An attempt's first file-system work, in one trip off the event loop (creating
    files and directories can wait on the file system's journal for milliseconds): its
    directories, the graders' HOME and TMPDIR among them, the seed when it is only
    inline files (a source can take seconds: the default pool, later), its cassette
    (every model exchange is kept beside the ledger, for `--provider replay`) and, when
    no setup writes to it first, the agent's ledger. The seed's failure is returned,
    for prepare_workspace to record."""
    workspace = new_workspace(prepared.run_dir, name)
    # Made now, in this trip, so that starting to grade a small workspace makes nothing.
    grading_state(workspace)
    seeded: bool | Exception = False
    if task.source is None:
        try:
            seed_workspace(workspace, task.files)
            seeded = True
        except (ConfinementError, OSError) as exc:
            seeded = exc
    cassette = CassetteRecorder(
        workspace.cassette_path or cassette_path(prepared.run_dir, name), task_id=task.id,
        attempt=attempt, agent=prepared.agent.name, provider=prepared.options.provider,
        model=prepared.options.model)
    # With setup commands, the setup's events come first: the agent's ledger is opened
    # after them (and numbers on).
    ledger = Ledger(workspace.ledger_path) if task.setup is None and seeded is True else None
    return workspace, seeded, cassette, ledger


def _close(cassette: CassetteRecorder, ledger: Ledger | None) -> None:
    cassette.close()
    if ledger is not None:
        ledger.close()


def _result(task: Task, status: str, checks: list[CheckOutcome], agent: AgentResult,
            workspace: Workspace, attempt: int) -> TaskResult:
    return TaskResult(
        task_id=task.id, status=status, checks=checks, exit_status=agent.exit_status,
        error=escape_text(agent.error) if agent.error else None, turns=agent.turns,
        tool_calls=agent.tool_calls, usage=agent.usage,
        cost=agent.cost, duration=agent.duration, workspace=str(workspace.root),
        ledger=str(workspace.ledger_path), tags=task.tags, attempt=attempt,
    )


def _sandbox_failure(task: Task, workspace: Workspace, attempt: int,
                     exc: BaseException) -> TaskResult:
    """A sandbox that cannot start is the machine's problem, not the agent's: an error."""
    return TaskResult(task.id, ERROR, exit_status=ExitStatus.SANDBOX_ERROR, tags=task.tags,
                      attempt=attempt, workspace=str(workspace.root),
                      ledger=str(workspace.ledger_path),
                      error=escape_text(f"the sandbox failed to start: {describe_crash(exc)}"))


async def execute(prepared: PreparedRun, progress: ProgressCallback | None = None) -> RunResult:
    """Run the prepared tasks. Cancellation ends the run early with what finished."""
    with use_registry(prepared.registry):
        return await _execute(prepared, progress)


def _header(prepared: PreparedRun) -> dict[str, Any]:
    """The journal's first line: what ran, with what, and what was planned."""
    suite, registry, options = prepared.suite, prepared.registry, prepared.options
    return {
        "started_at": now(),
        "suite": {"path": str(suite.path), "absolute_path": str(Path(suite.path).resolve()),
                  "name": suite.name, "sha256": suite.sha256},
        "provider": options.provider, "model": options.model,
        "evalctl_version": __version__, "plugins": plugin_versions(registry),
        "run_directory": str(prepared.run_dir), "repeat": options.repeat,
        "rate_names": sorted({spec.rate for spec in registry.graders.values() if spec.rate}),
        "sandbox": prepared.sandbox.to_dict(),
        "agent": prepared.agent.to_dict(),
        "executor": _executor_record(prepared),
        "options": {**identity_of(options), "max_cost": options.max_cost,
                    "max_tokens": options.max_tokens, "concurrency": options.concurrency},
        "tasks": [{"id": task.id, "tags": list(task.tags)} for task in prepared.tasks],
    }


def open_journal(prepared: PreparedRun) -> Journal:
    """The run's journal: a new one, or the resumed run's, reopened for appending."""
    options = prepared.options
    if options.resume is None:
        return Journal.create(prepared.run_dir, _header(prepared))
    return Journal.reopen(options.resume, {
        "retry_errors": options.retry_errors, "max_cost": options.max_cost,
        "max_tokens": options.max_tokens, "evalctl_version": __version__,
        "executor": _executor_record(prepared), "concurrency": options.concurrency})


def _executor_record(prepared: PreparedRun) -> dict[str, Any]:
    return prepared.executor.to_dict() if prepared.executor is not None else {}


async def _execute(prepared: PreparedRun, progress: ProgressCallback | None) -> RunResult:
    from evalctl._run.executing import RunState, drive, new_plan

    options = prepared.options
    journal = open_journal(prepared)
    contents = journal.contents
    budget = RunBudget(options.max_cost, options.max_tokens, contents.spent_cost,
                       contents.spent_tokens, contents.unpriced)
    state = RunState(prepared, journal, CallThrottle(prepared.concurrency), budget,
                     progress or (lambda *_: None),
                     sum(1 for s in contents.sessions if s.get("kind") == "resume"))
    by_id = {task.id: task for task in prepared.tasks}
    if options.resume is None:
        attempts = [(task, attempt) for task in prepared.tasks
                    for attempt in range(1, options.repeat + 1)]
    else:
        attempts = [(by_id[task_id], attempt) for task_id, attempt in
                    attempts_to_run(contents, options.retry_errors)]
    try:
        driven = await drive(state, new_plan(state, attempts))
    except BaseException:
        journal.close()  # and with it the run's lock: a resume in this process may follow
        raise

    for closable in (prepared.provider, prepared.executor and prepared.executor.executor):
        close = getattr(closable, "aclose", None)
        if close is not None:
            with plugin_failure_ignored():
                await close()

    reason = "the run was interrupted" if driven.interrupted else \
        driven.failure or budget.reached_reason
    journal.end(interrupted=driven.interrupted, reason=reason, budget=budget.to_dict())
    journal.close()
    prepared.journal_failure = journal.failure
    return build_run(contents, interrupted=driven.interrupted, stop_reason=reason,
                     budget=budget.to_dict())


def _retire(run_dir: Path, name: str, into: Path, source: Source | None
            ) -> tuple[TokenUsage, float | None] | None:
    """Before an attempt of a resumed run starts again, move aside what an earlier try
    left (a killed attempt's partial workspace, an errored one's) to `into`, and say
    what its ledger recorded spending; None when it left nothing."""
    ledger = run_dir / ".ledgers" / f"{name}.jsonl"
    spend = ledger_spend(ledger) if ledger.exists() else (TokenUsage(), 0.0)
    make_repositories_safe_now(run_dir, name, source)  # a killed attempt's, before it is kept
    return spend if retire_attempt(run_dir, name, into) else None
