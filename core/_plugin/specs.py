"""The specs plugins register: what a grader, provider and reporter must provide."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from evalctl._plugin.types import TokenUsage

NAME_PATTERN = re.compile(r"^[a-z][a-z0-9_]*$")
GRADER_KINDS = ("mechanical", "judge")


def _check_name(kind: str, name: str) -> None:
    if not isinstance(name, str) or not NAME_PATTERN.match(name):
        raise ValueError(
            f"{kind} name {name!r} must be lowercase letters, digits and underscores, "
            "starting with a letter"
        )


@dataclass(frozen=True)
class CheckResult:
    """One grader's answer to one question: passed or not, and why.

    A grader that asks a model (a judge) reports the model's `usage` and `cost` here;
    they are accounted apart from the agent's.
    """

    passed: bool
    detail: str = ""
    usage: TokenUsage | None = None
    cost: float | None = None


@dataclass(frozen=True)
class GraderSpec:
    """A check type usable in suites as `- type: <name>`.

    `grade(check, workspace, result)` returns a CheckResult (or is async and does).
    `params_schema` is the JSON Schema (an object schema) of the check's own keys,
    without `type`; it is merged into the published suite schema.
    `kind` "judge" results are reported apart and never averaged into completion.
    `talk_only` is True when an agent could satisfy the check by talking alone.
    `rate` names a figure the report shows apart, over this grader's checks (the
    `grounding` grader's "grounding" gives `grounding_rate`); None for none.
    """

    name: str
    grade: Callable[..., Any]
    params_schema: Mapping[str, Any] = field(default_factory=lambda: {"type": "object"})
    kind: str = "mechanical"
    talk_only: bool = False
    description: str = ""
    example: str = ""  # a YAML check, as it would appear under `checks:`
    rate: str | None = None

    def __post_init__(self) -> None:
        _check_name("grader", self.name)
        if not callable(self.grade):
            raise TypeError(f"grader {self.name!r}: grade must be callable")
        if self.kind not in GRADER_KINDS:
            raise ValueError(f"grader {self.name!r}: kind must be one of {GRADER_KINDS}")
        schema = self.params_schema
        if not isinstance(schema, Mapping) or schema.get("type", "object") != "object":
            raise ValueError(f"grader {self.name!r}: params_schema must be an object schema")
        if "type" in schema.get("properties", {}):
            raise ValueError(f"grader {self.name!r}: params_schema must not define 'type'")
        if self.rate is not None:
            _check_name(f"grader {self.name!r}: rate", self.rate)


@dataclass(frozen=True)
class ProviderSpec:
    """A model backend. `create(options)` returns an object with
    `async def complete(request: ModelRequest) -> ModelTurn`.

    `create` runs before any task starts and raises evalctl.UsageError for bad
    configuration (a missing API key, say) so the run stops with exit 2.
    `options` holds `model` and any `--provider-option key=value` pairs.
    If the provider has `async def aclose()`, it is awaited when the run ends.
    `task_schema` maps task keys the provider reads from `ModelRequest.task` to their
    JSON Schemas (the scripted provider's `script:`); they join the published suite
    schema. `error_statuses` are the exit statuses of its own (raised through
    `ProviderError(status=...)`) that make a task an error rather than a failure.
    """

    name: str
    create: Callable[[Mapping[str, Any]], Any]
    description: str = ""
    default_concurrency: int = 8
    task_schema: Mapping[str, Any] = field(default_factory=dict)
    error_statuses: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        _check_name("provider", self.name)
        if not callable(self.create):
            raise TypeError(f"provider {self.name!r}: create must be callable")
        reserved = {"id", "prompt", "checks", "files", "tags", "permissions", "limits"}
        clashing = sorted(reserved & set(self.task_schema))
        if clashing:
            raise ValueError(f"provider {self.name!r}: task_schema redefines core task keys "
                             f"{', '.join(clashing)}")


@dataclass(frozen=True)
class ReporterSpec:
    """An output format. `write(run_result, path)` writes the report to `path` and
    returns the path it wrote. `extension` names the default file: report.<extension>.
    """

    name: str
    write: Callable[..., Any]
    extension: str
    description: str = ""

    def __post_init__(self) -> None:
        _check_name("reporter", self.name)
        if not callable(self.write):
            raise TypeError(f"reporter {self.name!r}: write must be callable")
