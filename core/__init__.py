"""evalctl: run AI agents on task suites in real workspaces and grade what they left.

This module is the public plugin API (semver). A plugin needs nothing else:

    import evalctl

    @evalctl.hookimpl
    def evalctl_register_graders(register):
        register(evalctl.GraderSpec(name="word_count", grade=..., params_schema={...}))
"""

from evalctl._errors import EvalctlError, ProviderError, UsageError
from evalctl._files import write_atomically
from evalctl._plugin.hookspecs import hookimpl
from evalctl._plugin.types import (
    AgentResult,
    AssistantMessage,
    ExitStatus,
    Message,
    ModelRequest,
    ModelTurn,
    StopReason,
    TokenUsage,
    ToolCall,
    ToolDefinition,
    ToolResult,
    ToolResultsMessage,
    UserMessage,
)
from evalctl._plugin.specs import CheckResult, GraderSpec, ProviderSpec, ReporterSpec

__version__ = "0.1.0"


def create_provider(name: str, options: dict | None = None):
    """A provider from the installed plugins, created as `evalctl run --provider NAME`
    would create it. For graders that ask a model (judges). Raises UsageError for an
    unknown name or a bad configuration (a missing API key, say)."""
    from evalctl._plugin.registry import get_registry

    return get_registry().get("provider", name).create(dict(options or {}))


__all__ = [
    "AgentResult",
    "AssistantMessage",
    "CheckResult",
    "EvalctlError",
    "ExitStatus",
    "GraderSpec",
    "Message",
    "ModelRequest",
    "ModelTurn",
    "ProviderError",
    "ProviderSpec",
    "ReporterSpec",
    "StopReason",
    "TokenUsage",
    "ToolCall",
    "ToolDefinition",
    "ToolResult",
    "ToolResultsMessage",
    "UsageError",
    "UserMessage",
    "create_provider",
    "hookimpl",
    "write_atomically",
    "__version__",
]
