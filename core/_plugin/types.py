"""The data exchanged between the agent loop, providers and graders.

Providers turn a ModelRequest into a ModelTurn; graders receive an AgentResult.
All of it is plain dataclasses so plugins need nothing but `import evalctl`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from evalctl._process import CommandResult


class ExitStatus:
    """Why the agent loop stopped. Recorded even when the checks later pass."""

    COMPLETED = "completed"
    MAX_TURNS = "max_turns"
    TIMEOUT = "timeout"
    COST_LIMIT = "cost_limit"
    PROVIDER_ERROR = "provider_error"
    ABORTED = "aborted"
    MAX_TOKENS = "max_tokens"
    REFUSED = "refused"
    CONTEXT_OVERFLOW = "context_overflow"
    # The service refused a request of the built-in loop's that held the model's own
    # turns and its tools' output (HTTP 400 or 413): the agent's doing, graded.
    REQUEST_REJECTED = "request_rejected"
    INTERNAL_ERROR = "internal_error"  # a bug in evalctl or a plugin, caught and recorded
    # The workspace could not be prepared (a source that cannot be fetched, a verify
    # patch that does not apply, a setup command that failed): the agent never started.
    SETUP_ERROR = "setup_error"
    SANDBOX_ERROR = "sandbox_error"  # the attempt's sandbox could not start
    # The executor could not run the attempt: a cluster that lost it more times than it
    # retries, a worker with other versions of evalctl or the plugins.
    EXECUTOR_ERROR = "executor_error"
    # A CLI agent's command that could not start (not found, not executable, a script
    # not there) before its first model call: the setup's fault, not the agent's work.
    AGENT_NOT_STARTED = "agent_not_started"

    # Statuses where the model could not do its work at all: the task is an error,
    # counted apart from failures. Providers add their own (ProviderSpec.error_statuses).
    ERRORS = frozenset({PROVIDER_ERROR, INTERNAL_ERROR, SETUP_ERROR, SANDBOX_ERROR,
                        EXECUTOR_ERROR, AGENT_NOT_STARTED})
    # A CLI agent's process that exited with a non-zero code (it crashed, or gave up):
    # a failure of the agent, graded like any other.
    AGENT_FAILED = "agent_failed"
    # Statuses of an agent that did its work, whatever came of it: any other status of
    # an errored attempt is the provider's.
    AGENT = frozenset({COMPLETED, MAX_TURNS, TIMEOUT, COST_LIMIT, ABORTED, MAX_TOKENS,
                       REFUSED, CONTEXT_OVERFLOW, REQUEST_REJECTED, AGENT_FAILED})


class StopReason:
    """Why one model turn ended, in the kernel's vocabulary (the Messages API's)."""

    END_TURN = "end_turn"
    TOOL_USE = "tool_use"
    MAX_TOKENS = "max_tokens"
    REFUSAL = "refusal"
    PAUSE_TURN = "pause_turn"
    CONTEXT_OVERFLOW = "model_context_window_exceeded"


@dataclass
class TokenUsage:
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0

    def __add__(self, other: TokenUsage) -> TokenUsage:
        return TokenUsage(
            self.input_tokens + other.input_tokens,
            self.output_tokens + other.output_tokens,
            self.cache_read_tokens + other.cache_read_tokens,
            self.cache_write_tokens + other.cache_write_tokens,
        )

    def to_dict(self) -> dict[str, int]:
        return {
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "cache_read_tokens": self.cache_read_tokens,
            "cache_write_tokens": self.cache_write_tokens,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> TokenUsage:
        return cls(**{k: int(data.get(k, 0)) for k in cls().to_dict()})


@dataclass(frozen=True)
class ToolDefinition:
    """A tool as the model sees it: name, description, JSON Schema of its input."""

    name: str
    description: str
    input_schema: Mapping[str, Any]


@dataclass(frozen=True)
class ToolCall:
    id: str
    name: str
    arguments: Mapping[str, Any]


@dataclass(frozen=True)
class ToolResult:
    call_id: str
    content: str
    is_error: bool = False


@dataclass
class ModelTurn:
    """One model reply.

    `raw_content` is whatever the provider needs to replay the assistant message
    verbatim on the next request (the Messages API's content blocks, say).
    `cost` is in USD, or None when the model is not priced: never a silent 0.
    """

    text: str = ""
    tool_calls: list[ToolCall] = field(default_factory=list)
    stop_reason: str = StopReason.END_TURN
    usage: TokenUsage = field(default_factory=TokenUsage)
    cost: float | None = 0.0
    model: str = ""
    raw_content: Any = None


@dataclass(frozen=True)
class UserMessage:
    text: str


@dataclass(frozen=True)
class AssistantMessage:
    turn: ModelTurn


@dataclass(frozen=True)
class ToolResultsMessage:
    results: tuple[ToolResult, ...]


Message = UserMessage | AssistantMessage | ToolResultsMessage


@dataclass
class ModelRequest:
    """What the agent loop asks a provider for: the next turn of this conversation.

    `task` carries the task's id and suite data (`script` for the scripted provider);
    `turn_index` counts the model turns already taken in this task; `attempt` is which
    attempt of the task this is (1-based: `--repeat`).
    """

    system: str
    messages: list[Message]
    tools: list[ToolDefinition]
    task: Mapping[str, Any] = field(default_factory=dict)
    turn_index: int = 0
    # The Messages API request body exactly as a CLI agent sent it through evalctl's
    # model proxy, with its `anthropic-beta` header's values as `betas` (None for the
    # built-in loop). `system`, `messages` and `tools` are
    # translated from it, so any provider can answer; one that speaks the Messages API
    # may forward it as it is, for fidelity (thinking, cache_control, the agent's own
    # system prompt).
    api_request: Mapping[str, Any] | None = None
    attempt: int = 1
    # Where a node of `task` is written in the suite, "FILE:LINE" ("" when unknown), by
    # its path in `task` (("agent_script", 0, "tool_calls", 0, "tool")): for a provider
    # that finds a mistake in the task's data only at run time, to say where it is.
    locate: Callable[[Sequence[str | int]], str] | None = None


@runtime_checkable
class Sandbox(Protocol):
    """Where the commands of one task attempt run: made by a SandboxSpec's `create`.

    `run` runs `command` (a bash script as a string, or argv) in the workspace (or in
    `cwd`, a directory inside it) with exactly `env` (the sandbox's own environment
    when None), feeding `stdin`, killed after `timeout` seconds. An argv whose program
    cannot be run is a result, as a shell reports it, never an exception: exit 127 when
    there is no such program ("NAME: command not found" on stderr), 126 when it cannot
    be executed. `close` ends the sandbox: afterwards no process it started may be
    alive.
    """

    async def run(self, command: str | Sequence[str], *, timeout: float,
                  env: Mapping[str, str] | None = None, stdin: bytes | str | None = None,
                  cwd: str | None = None, merge_stderr: bool = False,
                  output_limit: int | None = None) -> CommandResult: ...

    async def close(self) -> None: ...


@dataclass(frozen=True)
class SandboxRequest:
    """What a sandbox is made for: one attempt's workspace, and how to run in it.

    `workspace` is the only directory the sandbox may let commands write, besides its
    private `home` and `tmp`. `env` is the environment commands get, built from nothing
    by evalctl (PATH, HOME, TMPDIR, LANG: never a credential). `network` is whether the
    task allows network access. `options` are the sandbox's own, validated against its
    `options_schema`. `purpose` is "setup" (the task's setup commands, before the agent:
    `network` is the setup's own allowance), "agent" or "grading": graders get a fresh
    sandbox after the agent's has been closed. `read_only` names paths in the workspace
    (relative; "." is the workspace) that commands must not change: the task's
    protected files, while graders run the agent's code. A sandbox that confines writes
    should honour it; one that cannot (`local`) leaves it to the comparison evalctl
    makes after the checks.
    """

    workspace: Path
    home: Path
    tmp: Path
    env: Mapping[str, str]
    network: bool = False
    options: Mapping[str, Any] = field(default_factory=dict)
    purpose: str = "agent"
    attempt: str = ""
    read_only: tuple[str, ...] = ()

    def command(self, command: str | Sequence[str],
                cwd: str | None = None) -> tuple[list[str], Path]:
        """A `Sandbox.run` command as argv (a string is a bash script) and the directory
        it starts in: the workspace, or `cwd` inside it (ConfinementError if it leads
        out)."""
        from evalctl._files import resolve_inside

        argv = ["bash", "-c", command] if isinstance(command, str) else list(command)
        return argv, resolve_inside(self.workspace, cwd) if cwd else self.workspace


@dataclass
class AgentResult:
    """What the agent left behind, as graders see it.

    `sandbox` runs commands for graders in a fresh sandbox over the workspace (the
    agent's own sandbox has already been closed): `await result.sandbox.run(...)`.
    """

    final_text: str
    exit_status: str
    turns: int
    tool_calls: int
    usage: TokenUsage
    cost: float | None
    duration: float
    # workspace-relative path -> created|modified|deleted, against the seed (or the
    # workspace as the task's setup left it); a repository's .git is not counted
    files_changed: dict[str, str]
    ledger_path: Path | None
    error: str | None = None
    seed_path: Path | None = None  # a pristine copy of the seeded files
    # How many changes `files_changed` does not list: it is bounded (10,000 entries), and
    # while this is not 0 a path it does not list is not known to be unchanged.
    files_changed_omitted: int = 0
    sandbox: Sandbox | None = field(default=None, repr=False, compare=False)

    @property
    def completed(self) -> bool:
        return self.exit_status == ExitStatus.COMPLETED

    def to_dict(self) -> dict[str, Any]:
        return {
            "final_text": self.final_text,
            "exit_status": self.exit_status,
            "turns": self.turns,
            "tool_calls": self.tool_calls,
            "usage": self.usage.to_dict(),
            "cost": self.cost,
            "duration": self.duration,
            "files_changed": dict(self.files_changed),
            "ledger_path": str(self.ledger_path) if self.ledger_path else None,
            "error": self.error,
            "seed_path": str(self.seed_path) if self.seed_path else None,
            "files_changed_omitted": self.files_changed_omitted,
        }


@dataclass(frozen=True)
class AgentOutcome:
    """What an agent plugin's `run` returns: why the agent stopped (`exit_status`, an
    `ExitStatus` value), what it said last (`final_text`, what talk-only checks read),
    an `error` that says why when it did not complete, and how many tool calls it made
    (`tool_calls`; None to count the tool calls its model turns asked for).

    Turns, tokens and cost are not part of it: evalctl reads them from the ledger,
    where the built-in loop and the model proxy record every model call."""

    exit_status: str = ExitStatus.COMPLETED
    final_text: str = ""
    error: str | None = None
    tool_calls: int | None = None


@dataclass(frozen=True)
class AgentLimits:
    """A task's limits, as an agent sees them: most model turns, wall-clock seconds, and
    most USD (None: no cost limit). evalctl enforces them for every agent (the model
    proxy counts turns and cost; the seconds end the agent's command)."""

    turns: int
    seconds: float
    cost: float | None = None


@dataclass
class AgentContext:
    """Everything an agent plugin's `run(context)` gets for one attempt.

    `task_id`, `prompt`, `task` (the task as providers see it: id, prompt and plugin
    keys such as `script`), `limits` (an `AgentLimits`), `workspace` (the directory
    the agent works in), `sandbox` (the attempt's `Sandbox`: run the agent's commands
    through it, never with `subprocess`), `env` (the sandbox's environment, built from
    nothing), `options` (the agent's options, validated against its `options_schema`,
    presets' defaults merged in) and `name` (the agent as the user chose it: a preset's
    name, say).

    Three methods do the rest:
    `await run_builtin_loop()` runs evalctl's own loop (six tools, the run's provider)
    and returns its `AgentOutcome`. `await run_command(script, env=..., stdin=...)` runs
    a bash script in the sandbox with the model proxy started for it and its
    environment (ANTHROPIC_BASE_URL, ANTHROPIC_API_KEY) set, until it exits, the task's
    seconds run out, or the proxy refuses a call over the turn or cost limit; it
    records the command, its exit code and output in the ledger and returns
    `(AgentOutcome, CommandResult)`. `record(event, **fields)` appends an event of the
    agent's own to the task's ledger.
    """

    task_id: str
    prompt: str
    task: Mapping[str, Any]
    limits: AgentLimits
    workspace: Path
    sandbox: Sandbox
    env: Mapping[str, str]
    options: Mapping[str, Any]
    name: str
    _loop: Any = field(default=None, repr=False)
    _command: Any = field(default=None, repr=False)
    _record: Any = field(default=None, repr=False)

    async def run_builtin_loop(self) -> AgentOutcome:
        """evalctl's own agent loop on this attempt, with the run's provider."""
        return await self._loop()

    async def run_command(self, script: str, *, env: Mapping[str, str] | None = None,
                          stdin: str | None = None, model_proxy: bool = True,
                          ) -> tuple[AgentOutcome, CommandResult]:
        """Run a CLI agent (a bash script) in the sandbox, metered by the model proxy."""
        return await self._command(script, env=env, stdin=stdin, model_proxy=model_proxy)

    def record(self, event: str, **fields: Any) -> None:
        """Append an event to the task's ledger (JSON-serialisable fields)."""
        self._record(event, **fields)


@dataclass(frozen=True)
class ImportProblem:
    """Something wrong with an importer's input, at a 1-based `line` of it (0: the file
    as a whole). Errors stop the import; warnings are shown."""

    line: int
    message: str
    severity: str = "error"  # or "warning"


@dataclass
class ImportedSuite:
    """What an importer made of its input: the suite's `tasks` (each a mapping as a
    suite file writes it: id, prompt, source, checks...), its `name`, `description` and
    `defaults`, the `problems` it found, and per task the input `lines` it came from (so
    a task the suite schema refuses is reported at its line of the input)."""

    tasks: list[dict[str, Any]] = field(default_factory=list)
    name: str = ""
    description: str = ""
    defaults: dict[str, Any] = field(default_factory=dict)
    problems: list[ImportProblem] = field(default_factory=list)
    lines: list[int] = field(default_factory=list)


class Attempt:
    """One prepared attempt of a run, as an executor receives it (`ExecutionPlan.attempts`).

    `task_id`, `number` (1.. with `--repeat`) and `name` (its workspace's name in the run
    directory) say which. An executor calls `await start()` right before it runs the
    attempt: False means the run's budget is spent, and the attempt must not run (it is
    reported not run, for a resume). Then either `await run()`, which runs it here, in
    this process, and returns its result; or `portable()`, a picklable description to run
    anywhere evalctl and the same plugins are installed (`evalctl.run_portable(...)`
    returns an outcome, bytes), then `await accept(outcome)` back here, which lays the
    ledger and workspace into the run directory and returns the result. `failed(reason)`
    is the result for an attempt the executor could not run at all (a cluster that lost
    it for good): an error of kind `executor`. Yield the result each returns; it is journaled once.
    """

    task_id: str
    number: int
    name: str

    async def start(self) -> bool:
        raise NotImplementedError

    async def run(self) -> Any:
        raise NotImplementedError

    def portable(self) -> Any:
        raise NotImplementedError

    async def accept(self, outcome: bytes, host: str | None = None) -> Any:
        raise NotImplementedError

    def failed(self, reason: str) -> Any:
        raise NotImplementedError


class ExecutionPlan:
    """What an executor's `execute(plan)` receives: the run's `attempts` to run (a list of
    `evalctl.Attempt`, in suite order), `concurrency` (`--concurrency` or the config's,
    None when the user set none), `default_concurrency` (what the provider and sandbox
    suggest for one machine) and `model_calls` (the run's ceiling on model calls at once,
    for an executor that shares one limit across machines: `evalctl.call_throttle`)."""

    attempts: Sequence[Attempt]
    concurrency: int | None
    default_concurrency: int
    model_calls: int
