"""evalctl: run AI agents on task suites in real workspaces and grade what they left.

This module is the public plugin API (semver): every name in `__all__`, and nothing
else. The `evalctl._*` modules are private and change without notice; the built-in
plugins use only what is here, exactly as a third party does. `evalctl.testing` helps
plugin authors test what they write.

    import evalctl

    @evalctl.hookimpl
    def evalctl_register_graders(register):
        register(evalctl.GraderSpec(name="word_count", grade=..., params_schema={...}))
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from evalctl._agent.cassette import Cassette, read_cassettes
from evalctl._errors import (
    EvalctlError,
    GraderUnavailable,
    ProviderError,
    RateLimited,
    RequestRejected,
    UsageError,
)
from evalctl._files import ConfinementError, open_in_workspace, walk_files, write_atomically
from evalctl._files import resolve_inside as resolve_in_workspace
from evalctl._plugin.hookspecs import hookimpl
from evalctl._plugin.specs import (
    AgentSpec,
    CheckResult,
    ExecutorSpec,
    GraderSpec,
    ImporterSpec,
    ProviderSpec,
    ReporterSpec,
    SandboxSpec,
)
from evalctl._plugin.tooldefs import tool_definitions
from evalctl._plugin.types import (
    AgentContext,
    AgentLimits,
    AgentOutcome,
    AgentResult,
    AssistantMessage,
    Attempt,
    ExecutionPlan,
    ExitStatus,
    ImportedSuite,
    ImportProblem,
    Message,
    ModelRequest,
    ModelTurn,
    Sandbox,
    SandboxRequest,
    StopReason,
    TokenUsage,
    ToolCall,
    ToolDefinition,
    ToolResult,
    ToolResultsMessage,
    UserMessage,
)
from evalctl._process import CommandResult, command_path, run_process
from evalctl._report.compare import Comparison
from evalctl._report.results import (
    CheckOutcome,
    Rate,
    RunResult,
    TaskAggregate,
    TaskResult,
    load_report,
)
from evalctl._text import looks_binary, truncate
from evalctl._text import money as format_money
from evalctl._text import percent as format_percent
from evalctl._version import __version__ as __version__


def create_provider(name: str, options: Mapping[str, Any] | None = None) -> Any:
    """A provider from the installed plugins, created as `evalctl run --provider NAME`
    would create it, from the registry of the run in progress (or the installed
    plugins outside a run). For graders that ask a model (judges). Raises UsageError
    for an unknown name or a bad configuration (an option the provider does not take,
    a missing API key)."""
    from evalctl._plugin.options import provider_options
    from evalctl._plugin.registry import active_registry

    spec = active_registry().get("provider", name)
    return spec.create(provider_options(spec, options or {}))


async def run_portable(payload: Any, *, throttle: Any = None, workspace: bool = True,
                       host: str | None = None) -> bytes:
    """Run an attempt that `Attempt.portable()` described, here: for executors that run
    attempts elsewhere (a cluster's worker), with evalctl and the run's plugins installed
    in the same versions (an attempt refuses to run otherwise, as an error). The
    workspace, sandbox, agent and graders are all made here, in a scratch directory that
    is removed afterwards. Returns the outcome, bytes to hand back to the run's
    `attempt.accept(outcome)`: the result, the ledger, the cassette and, unless
    `workspace` is False, the workspace and its seed copy. `throttle` shares the run's
    limit on model calls: an object with `async acquire() -> int` and `async
    release(generation, outcome)` (`evalctl.call_throttle`'s `acquire` and `settle`,
    reached remotely); None for no limit. `host` names where it ran, for the report
    (default: this machine's name)."""
    from evalctl._run.portable import run_portable as run

    return await run(payload, throttle, workspace, host)


def call_throttle(ceiling: int) -> Any:
    """The run's limit on model calls at once, as the `local` executor uses it, for an
    executor that shares one limit across machines (hosted in one place, such as a Ray
    actor): at most `ceiling` calls at once, halved when the provider is rate limited and
    grown back by one per run of successes. `await acquire()` takes a slot and returns its
    generation; `await settle(generation, outcome)` gives it back with the call's outcome
    ("ok", "rate_limited", or None) and returns the limit now; `limit` is the limit now."""
    from evalctl._agent.throttle import CallThrottle

    return CallThrottle(ceiling)


__all__ = [
    "AgentContext",
    "AgentLimits",
    "AgentOutcome",
    "AgentSpec",
    "Attempt",
    "ExecutionPlan",
    "ExecutorSpec",
    "CommandResult",
    "Sandbox",
    "SandboxRequest",
    "SandboxSpec",
    "run_process",
    "AgentResult",
    "AssistantMessage",
    "Cassette",
    "CheckOutcome",
    "CheckResult",
    "Comparison",
    "ConfinementError",
    "EvalctlError",
    "ExitStatus",
    "GraderSpec",
    "ImportedSuite",
    "ImporterSpec",
    "ImportProblem",
    "GraderUnavailable",
    "Message",
    "ModelRequest",
    "ModelTurn",
    "ProviderError",
    "ProviderSpec",
    "Rate",
    "RateLimited",
    "ReporterSpec",
    "RequestRejected",
    "RunResult",
    "StopReason",
    "TaskAggregate",
    "TaskResult",
    "TokenUsage",
    "ToolCall",
    "ToolDefinition",
    "ToolResult",
    "ToolResultsMessage",
    "UsageError",
    "UserMessage",
    "call_throttle",
    "command_path",
    "create_provider",
    "format_money",
    "format_percent",
    "hookimpl",
    "load_report",
    "looks_binary",
    "open_in_workspace",
    "read_cassettes",
    "resolve_in_workspace",
    "run_portable",
    "tool_definitions",
    "truncate",
    "walk_files",
    "write_atomically",
]
