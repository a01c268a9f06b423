"""evalctl: run AI agents on task suites in real workspaces and grade what they left.

This module is the public plugin API (semver). A plugin needs nothing else:

    import evalctl

    @evalctl.hookimpl
    def evalctl_register_graders(register):
        register(evalctl.GraderSpec(name="word_count", grade=..., params_schema={...}))
"""

from evalctl.errors import EvalctlError, ProviderError, UsageError
from evalctl.fileio import write_atomically
from evalctl.hookspecs import hookimpl
from evalctl.model import (
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
from evalctl.specs import CheckResult, GraderSpec, ProviderSpec, ReporterSpec

__version__ = "0.1.0"

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
    "hookimpl",
    "write_atomically",
    "__version__",
]
