"""The specs plugins register: what a grader, provider, reporter, sandbox, agent, importer
and executor must provide."""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from evalctl._plugin.types import TokenUsage

NAME_PATTERN = re.compile(r"^[a-z][a-z0-9_]*$")
EXTENSION_PATTERN = re.compile(r"[A-Za-z0-9]+(?:[._-][A-Za-z0-9]+)*")
GRADER_KINDS = ("mechanical", "judge")
# Rate names whose `NAME_rate` / `NAME_checks` summary keys the core itself writes: a
# grader's rate of one of these names would overwrite the headline completion rate or
# the judges' figure (found by a newcomer: rate="completion" made the console say
# "completion 67%, completion 50%" and summary.completion_rate 0.5 with 2 of 3 passed).
RESERVED_RATES = {
    "completion": "completion_rate, the headline (attempts whose mechanical checks all "
                  "passed)",
    "judge": "judge_rate and judge_checks, the verdicts of every check of kind 'judge'",
}


def _check_name(kind: str, name: str) -> None:
    if not isinstance(name, str) or not NAME_PATTERN.match(name):
        raise ValueError(
            f"{kind} name {name!r} must be lowercase letters, digits and underscores, "
            "starting with a letter"
        )


def _check_callable(kind: str, name: str, attribute: str, function: Any,
                    *parameters: str) -> None:
    """`function` must be callable with `parameters` as evalctl calls it, positionally:
    one of the wrong arity registered, and failed at its first call, in every attempt
    (found by a plugin newcomer: `grade(check, result)` was accepted)."""
    if not callable(function):
        raise TypeError(f"{kind} {name!r}: {attribute} must be callable")
    try:
        signature = inspect.signature(function)
    except (TypeError, ValueError):  # a builtin without a signature: nothing to tell
        return
    try:
        signature.bind(*parameters)
    except TypeError:
        count = f"{len(parameters)} argument{'' if len(parameters) == 1 else 's'}" \
            if parameters else "no argument"
        shown = f" ({', '.join(parameters)})" if parameters else ""
        raise TypeError(f"{kind} {name!r}: {attribute} must take {count}{shown}, as "
                        f"evalctl calls it; it is {attribute}{signature}") from None


@dataclass(frozen=True)
class CheckResult:
    """One grader's answer to one question: passed or not, and why.

    A grader that asks a model (a judge) reports the model's `usage` and `cost` here;
    they are accounted apart from the agent's. A grader that sees evidence the agent
    gamed the check (a changed protected file, an interpreter that exited before the
    assertions finished) sets `suspected_gaming` and says so in `detail`; the report
    marks the check so a reviewer can filter on it. A passed check with nothing to
    rate (a summary that names no file, for `grounding`) sets `rated` False: it counts
    for completion, and is left out of its grader's named rate, which a vacuous pass
    would inflate (a failure is always rated).

    `passed`, `suspected_gaming` and `rated` are True or False, and `detail` a str,
    nothing else: any other value is a TypeError saying what it was (found by a
    newcomer: CheckResult("no", "the file is missing") counted as a pass, by the
    truthiness of "no"; so did a coroutine, result.sandbox.run(...) without its
    `await`; a None or bytes detail was shown as "None" or "b'\\xff...'").
    """

    passed: bool
    detail: str = ""
    usage: TokenUsage | None = None
    cost: float | None = None
    suspected_gaming: bool = False
    rated: bool = True

    def __post_init__(self) -> None:
        for name in ("passed", "suspected_gaming", "rated"):
            value = getattr(self, name)
            if not isinstance(value, bool):
                raise TypeError(_not_a_bool(f"CheckResult's {name}", value))
        if not isinstance(self.detail, str):
            # Found by a newcomer: CheckResult(False, None) was reported as "None", a
            # bytes detail as "b'\\xff...'".
            hint = (": decode it, detail.decode('utf-8', 'replace')"
                    if isinstance(self.detail, bytes | bytearray) else
                    ': "" for nothing to say' if self.detail is None else "")
            raise TypeError(f"CheckResult's detail must be a str, not "
                            f"{type(self.detail).__name__} ({self.detail!r:.60}){hint}")


def _not_a_bool(what: str, value: Any) -> str:
    """Why `value` is refused where True or False must be, saying what it is. A coroutine
    (an `await` forgotten) is closed: it will never run, and Python would warn of it."""
    if inspect.iscoroutine(value):
        value.close()
        return (f"{what} must be True or False, not a coroutine ({value.__qualname__}): an "
                "`await` is missing (a grader that runs commands is `async def` and awaits "
                "result.sandbox.run(...))")
    try:
        shown = repr(value)
    except Exception:  # an object whose repr is broken: its type says enough
        shown = "(no repr)"
    if len(shown) > 80:
        shown = shown[:77] + "..."
    return f"{what} must be True or False, not {type(value).__name__}: {shown}"


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
    `trusts` says what the answer relies on and what it does not (the generated grader
    docs show it), so suite authors know what can and cannot game it.
    `preflight(checks)`, when given, is called once before any task starts with every
    check of this type the run will grade (a list of mappings; it may be async): raise
    evalctl.UsageError when they cannot work here (a judge without an API key, an
    unknown model) and the run stops with exit 2 before any task, as it does for a
    misconfigured agent provider. A check that cannot run for a reason found only while
    grading raises evalctl.GraderUnavailable from `grade` instead.
    `validate_with_preflight` is True when `preflight` reads nothing but the checks it
    is given (no machine state, no network: a python check's code compiled, a regex
    compiled): `evalctl validate` then calls it too, and reports what it refuses at the
    check's line (found by a newcomer: a python check that does not compile passed
    validate and stopped the run with no file:line).
    `as_left_by_agent` is True when the check judges the workspace as the agent left it
    (its changes, what it said of them), not as the checks before it leave it: it is
    graded before the task's checks that are not, whatever its place among them (the
    report keeps their order), so code a check runs cannot change what it reads (found
    by an attacker round: an agent's module that rewrote its own placeholder when the
    tests imported it passed `no_placeholders` listed after `tests_pass`). It is graded
    before the task's hidden verify files are written and before the graders' sandbox
    opens, so `result.sandbox` is None for it (found by an attacker round: `grounding`
    counted a hidden test the summary named as the agent's file).
    `named_paths(check)`, when given, returns the workspace paths the check names that
    the task must provide or the prompt ask the agent to write (the test files
    `tests_pass` runs), each as (where in the check, path): `(("tests", 0),
    "tests/test_api.py")`. A path the task gives nowhere (source, files, verify_files,
    verify_patch) and that is not the agent's job (named by the prompt) stops the run
    before any task, at its `file:line` (a warning with
    `setup:`, which may make it), and one still missing while grading makes the check an
    error, not a failure (evalctl._suite.provided).
    """

    name: str
    grade: Callable[..., Any]
    params_schema: Mapping[str, Any] = field(default_factory=lambda: {"type": "object"})
    kind: str = "mechanical"
    talk_only: bool = False
    description: str = ""
    example: str = ""  # a YAML check, as it would appear under `checks:`
    rate: str | None = None
    trusts: str = ""  # what the grader relies on, and what it does not: for the docs
    preflight: Callable[[list[Mapping[str, Any]]], Any] | None = None
    as_left_by_agent: bool = False
    validate_with_preflight: bool = False
    named_paths: Callable[[Mapping[str, Any]], list[tuple[tuple[str | int, ...], str]]] | None \
        = None

    def __post_init__(self) -> None:
        _check_name("grader", self.name)
        _check_callable("grader", self.name, "grade", self.grade,
                        "check", "workspace", "result")
        if self.preflight is not None:
            _check_callable("grader", self.name, "preflight", self.preflight, "checks")
        if self.named_paths is not None:
            _check_callable("grader", self.name, "named_paths", self.named_paths, "check")
        if self.kind not in GRADER_KINDS:
            raise ValueError(f"grader {self.name!r}: kind must be one of {GRADER_KINDS}")
        schema = self.params_schema
        if not isinstance(schema, Mapping) or schema.get("type", "object") != "object":
            raise ValueError(f"grader {self.name!r}: params_schema must be an object schema")
        if "type" in schema.get("properties", {}):
            raise ValueError(f"grader {self.name!r}: params_schema must not define 'type'")
        if self.rate is not None:
            _check_name(f"grader {self.name!r}: rate", self.rate)
            if self.rate in RESERVED_RATES:
                raise ValueError(
                    f"grader {self.name!r}: rate {self.rate!r} is reserved: the report's "
                    f"summary already has {RESERVED_RATES[self.rate]}, which this rate "
                    f"would overwrite; name a rate of your own, prefixed with your "
                    f"plugin's name (mine_{self.rate}), or leave rate None")


@dataclass(frozen=True)
class ProviderSpec:
    """A model backend. `create(options)` returns an object with
    `async def complete(request: ModelRequest) -> ModelTurn`.

    `create` runs before any task starts and raises evalctl.UsageError for bad
    configuration (a missing API key, say) so the run stops with exit 2.
    `options` holds `model` (`--model`) and any `--provider-option key=value` pairs.
    `options_schema` is the JSON Schema (an object schema) of every option the provider
    reads, `model` included if it takes one: options arrive typed by it, and one it
    does not name is refused before any task, with the known ones listed.
    If the provider has `async def aclose()`, it is awaited when the run ends.
    `task_schema` maps task keys the provider reads from `ModelRequest.task` to their
    JSON Schemas (the scripted provider's `script:`); they join the published suite
    schema. `error_statuses` are the exit statuses of its own (raised through
    `ProviderError(status=...)`) that make a task an error rather than a failure.
    `live` is False for a provider whose turns come from the suite itself (scripted):
    only such a provider may run in a sandbox that does not isolate, unless the user
    chose that sandbox by name. `task_problems(task)`, when given, finds what the
    schema cannot in the task keys it reads (a script that runs out): it is called by
    `evalctl validate` and every load of a suite with each task that holds one of its
    `task_schema` keys, as written but with `limits` as a run applies them (the suite's
    defaults and evalctl's filled in: `turns`, `seconds`, `cost`), and yields
    `(path, message, severity)`: the path of the node in the task (("script", 2)), said
    at its line, and "error" or "warning".
    """

    name: str
    create: Callable[[Mapping[str, Any]], Any]
    description: str = ""
    default_concurrency: int = 8
    live: bool = True
    task_schema: Mapping[str, Any] = field(default_factory=dict)
    error_statuses: tuple[str, ...] = ()
    options_schema: Mapping[str, Any] = field(
        default_factory=lambda: {"type": "object", "properties": {}})
    task_problems: Callable[[Mapping[str, Any]],
                            Iterable[tuple[tuple[str | int, ...], str, str]]] | None = None

    def __post_init__(self) -> None:
        _check_name("provider", self.name)
        _check_callable("provider", self.name, "create", self.create, "options")
        if self.task_problems is not None:
            _check_callable("provider", self.name, "task_problems", self.task_problems,
                            "task")
        schema = self.options_schema
        if not isinstance(schema, Mapping) or schema.get("type", "object") != "object":
            raise ValueError(f"provider {self.name!r}: options_schema must be an object schema")
        reserved = {"id", "prompt", "checks", "files", "tags", "permissions", "limits",
                    "verify_files", "verify_patch", "protected", "network", "source", "setup"}
        clashing = sorted(reserved & set(self.task_schema))
        if clashing:
            raise ValueError(f"provider {self.name!r}: task_schema redefines core task keys "
                             f"{', '.join(clashing)}")


@dataclass(frozen=True)
class ReporterSpec:
    """An output format. `write(run_result, path)` writes the report to `path` and
    returns the path it wrote. `extension` names the default file: report.<extension>
    (`csv`; a leading dot, `.csv`, is dropped: it wrote `report-X..csv`; lower case).
    """

    name: str
    write: Callable[..., Any]
    extension: str
    description: str = ""

    def __post_init__(self) -> None:
        _check_name("reporter", self.name)
        _check_callable("reporter", self.name, "write", self.write, "run_result", "path")
        if not isinstance(self.extension, str):
            raise TypeError(f"reporter {self.name!r}: extension must be text, such as 'csv'")
        # In lower case: `JSON` was taken as a format of its own, beside `json`, and is
        # the same file on a case-insensitive file system.
        extension = self.extension.lstrip(".").lower()
        if not EXTENSION_PATTERN.fullmatch(extension):
            raise ValueError(f"reporter {self.name!r}: extension {self.extension!r} must be "
                             "letters and digits (with '.', '_' or '-' between them), such "
                             "as 'csv' or 'tar.gz'")
        object.__setattr__(self, "extension", extension)


def _always_available() -> str | None:
    return None


def _no_limits() -> Mapping[str, str]:
    return {}


@dataclass(frozen=True)
class SandboxSpec:
    """Where the agent's commands and graders' subprocesses run, selected with
    `evalctl run --sandbox NAME`.

    `create(request: SandboxRequest)` returns an `evalctl.Sandbox` for one attempt (it
    may be async). `options_schema` is the JSON Schema (an object schema) of its
    options (`--sandbox-option KEY=VALUE`, `sandbox:` in a suite's defaults); it joins
    the published suite schema. `available()` returns None when the sandbox can run on
    this machine, else a one-line reason with what to install. `limits()` says which
    per-task limits this machine enforces and how (`evalctl doctor`). `isolation` says
    in a sentence or two what the sandbox isolates and what not. `isolated` is False
    for a sandbox that does not contain the agent: a live provider never runs in one
    unless the user chose it by name. `auto_priority` orders the sandboxes `--sandbox
    auto` considers: the available one with the highest wins. `preflight(options,
    out_dir)`, when given, is called once before any task with the run's options and
    the directory its reports and workspaces go to, and returns None or why those
    options cannot work here (a read-only path that does not exist): the run then stops
    with exit 2, instead of every attempt ending as a sandbox error. `visible(path,
    options)`, when given, says whether a command in the sandbox sees the host's `path`
    (absolute) at that same path with these options, for an agent's preflight to find a
    program installed here that the sandbox does not show (bwrap shows /usr, the Python
    installation, evalctl's code and `ro_paths`); None: every path is (local).
    """

    name: str
    create: Callable[..., Any]
    options_schema: Mapping[str, Any] = field(
        default_factory=lambda: {"type": "object", "properties": {}})
    description: str = ""
    isolation: str = ""
    isolated: bool = True
    auto_priority: int = 0
    default_concurrency: int | None = None
    available: Callable[[], str | None] = _always_available
    limits: Callable[[], Mapping[str, str]] = _no_limits
    preflight: Callable[[Mapping[str, Any], Path], str | None] | None = None
    visible: Callable[[str, Mapping[str, Any]], bool] | None = None

    def __post_init__(self) -> None:
        _check_name("sandbox", self.name)
        if self.name == "auto":
            raise ValueError("sandbox name 'auto' is reserved for choosing one")
        for attribute, parameters in (("preflight", ("options", "out_dir")),
                                      ("visible", ("path", "options"))):
            if getattr(self, attribute) is not None:
                _check_callable("sandbox", self.name, attribute, getattr(self, attribute),
                                *parameters)
        for attribute, parameters in (("create", ("request",)), ("available", ()),
                                      ("limits", ())):
            _check_callable("sandbox", self.name, attribute, getattr(self, attribute),
                            *parameters)
        schema = self.options_schema
        if not isinstance(schema, Mapping) or schema.get("type", "object") != "object":
            raise ValueError(f"sandbox {self.name!r}: options_schema must be an object schema")


AGENT_NAME_PATTERN = re.compile(r"^[a-z][a-z0-9_-]*$")


@dataclass(frozen=True)
class AgentSpec:
    """The system under test, selected with `evalctl run --agent NAME`.

    Either an agent of its own, with `run`: `async run(context: AgentContext) ->
    AgentOutcome` does one attempt's work (`evalctl`, the built-in loop; `command`, any
    CLI in the sandbox); or a preset, with `base` (another agent's name) and
    `defaults` (options for it): `claude-code` is `command` with Claude Code's command
    line. `options_schema` is the JSON Schema (an object schema) of `run`'s options
    (`--agent-option KEY=VALUE`); a preset takes its base's. `version` names the
    agent's version for reports (`--agent-option version=` overrides it). Names may
    hold hyphens (`claude-code`). `preflight(options)`, when given, is called once
    before any task with the run's options (presets merged) and returns None or why
    the agent cannot run here (its program is not installed): the run then stops with
    exit 2, instead of every attempt ending as an error. A preflight that takes a
    second argument, `preflight(options, visible)`, is given `visible(path) -> bool`:
    whether the run's sandbox shows the host's absolute `path` to its commands (its
    program may be installed here but out of bwrap's reach). `check_option(key, value)`,
    when given, says what is wrong with one option's value on any machine (command:
    shell syntax in `argv`, which no shell reads), or None: it is called on every option
    of every preset and of `[agent_options]` in evalctl.toml when the file is read, used
    by the run or not (each mistake at its `file:line`), and on the run's options before
    any task, after the schema's checks passed.
    """

    name: str
    run: Callable[..., Any] | None = None
    base: str | None = None
    defaults: Mapping[str, Any] = field(default_factory=dict)
    options_schema: Mapping[str, Any] = field(
        default_factory=lambda: {"type": "object", "properties": {}})
    description: str = ""
    version: str | None = None
    preflight: Callable[..., str | None] | None = None
    check_option: Callable[[str, Any], str | None] | None = None

    def __post_init__(self) -> None:
        if self.preflight is not None and not callable(self.preflight):
            raise TypeError(f"agent {self.name!r}: preflight must be callable")
        if self.check_option is not None:
            _check_callable("agent", self.name, "check_option", self.check_option,
                            "key", "value")
        if not isinstance(self.name, str) or not AGENT_NAME_PATTERN.match(self.name):
            raise ValueError(f"agent name {self.name!r} must be lowercase letters, digits, "
                             "underscores and hyphens, starting with a letter")
        if (self.run is None) == (self.base is None):
            raise ValueError(f"agent {self.name!r}: give either run (an agent) or base "
                             "(a preset of another agent), not both or neither")
        if self.run is not None:
            _check_callable("agent", self.name, "run", self.run, "context")
        if self.base == self.name:
            raise ValueError(f"agent {self.name!r}: a preset cannot be based on itself")
        schema = self.options_schema
        if not isinstance(schema, Mapping) or schema.get("type", "object") != "object":
            raise ValueError(f"agent {self.name!r}: options_schema must be an object schema")
        if not isinstance(self.defaults, Mapping):
            raise TypeError(f"agent {self.name!r}: defaults must be a mapping")


@dataclass(frozen=True)
class ImporterSpec:
    """A benchmark format `evalctl import NAME FILE` turns into a suite.

    `read(path, options)` reads the file at `path` (a `pathlib.Path`) and returns an
    `evalctl.ImportedSuite`: the tasks as a suite file would hold them (mappings), and
    every problem with the input found, at its line. It never writes anything: evalctl
    validates the suite against the schema of the installed plugins and writes it.
    `options` are `--option KEY=VALUE` pairs typed by `options_schema` (an object
    schema; an option it does not name is refused). `description` says what the input
    is, for `evalctl import --help` and `list-plugins`.
    """

    name: str
    read: Callable[..., Any]
    description: str = ""
    options_schema: Mapping[str, Any] = field(
        default_factory=lambda: {"type": "object", "properties": {}})

    def __post_init__(self) -> None:
        _check_name("importer", self.name)
        _check_callable("importer", self.name, "read", self.read, "path", "options")
        schema = self.options_schema
        if not isinstance(schema, Mapping) or schema.get("type", "object") != "object":
            raise ValueError(f"importer {self.name!r}: options_schema must be an object schema")


@dataclass(frozen=True)
class ExecutorSpec:
    """How a run's attempts are scheduled, selected with `evalctl run --executor NAME`.

    `create(options)` returns an executor (it runs before any task: raise
    evalctl.UsageError for bad configuration, such as a cluster that cannot be reached,
    and the run stops with exit 2). An executor has `execute(plan: evalctl.ExecutionPlan)`,
    an async generator that runs the plan's attempts and yields each one's
    `evalctl.TaskResult` the moment it finishes; the core journals it at once, so resume,
    the budget, the progress display and the reports work alike whatever the executor.
    An executor may have `async aclose()`, awaited when the run ends. `options_schema`
    is the JSON Schema (an object schema) of its options (`--executor-option KEY=VALUE`,
    `executor_options` in evalctl.toml): they arrive typed, and one it does not name is
    refused. `default` marks the executor a run uses when none is chosen (the built-in
    `local`); `description` is for `list-plugins` and `--help`.
    """

    name: str
    create: Callable[[Mapping[str, Any]], Any]
    options_schema: Mapping[str, Any] = field(
        default_factory=lambda: {"type": "object", "properties": {}})
    description: str = ""
    default: bool = False

    def __post_init__(self) -> None:
        _check_name("executor", self.name)
        _check_callable("executor", self.name, "create", self.create, "options")
        schema = self.options_schema
        if not isinstance(schema, Mapping) or schema.get("type", "object") != "object":
            raise ValueError(f"executor {self.name!r}: options_schema must be an object schema")
