"""What a run produced: per-task results, the run's totals and its rates.

One model serves the console view, the reporters and `compare`: a run is built by the
runner, or loaded back from its JSON report with `RunResult.from_dict`, and every
figure is derived from its tasks in one place.

`completion_rate` is the headline: tasks whose mechanical checks all passed, over
tasks graded. Named rates that graders contribute (`grounding_rate`, say) and the
judge's rate are separate figures, never averaged into it.

Errors are not failures. An attempt is an error when something outside the agent's
work went wrong — the provider (the model unreachable, a script that ran out), the
sandbox (it could not start), a grader (a check that cannot run here, or crashed), or
evalctl itself — and it is left out of completion, pass@k/pass^k, the rates and the
paired comparison alike, and listed apart with what to do about it. Likewise a check
that errored is left out of its rate.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from evalctl._errors import UsageError
from evalctl._plugin.types import ExitStatus, TokenUsage
from evalctl._schema_check import SchemaCheck
from evalctl._text import escape_text, parse_json, sum_costs, truncate

if TYPE_CHECKING:
    from evalctl._report.compare import Comparison

PASSED, FAILED, ERROR, NOT_RUN = "passed", "failed", "error", "not_run"
GRADED = frozenset({PASSED, FAILED})  # the attempts every rate is over
REPORT_FORMAT = "evalctl-run/1"

# Why an attempt is an error, and what to do about each kind.
ERROR_KINDS = {
    "provider": "the model could not be used (unreachable, rate limited, misconfigured, a "
                "script that ran out, or a replay the agent's requests no longer match: the "
                "detail names the field); fix what is outside the run (the network, the key) and "
                "resume with --retry-errors; another provider option or model is a new run. "
                "A script_error is the suite's own mistake (the detail gives its line and the "
                "fix): correct the task's script and start a new run (--only ID runs just "
                "that task): --retry-errors would run the same script again",
    "sandbox": "the attempt's sandbox could not start; check that the sandbox works on "
               "this machine and resume with --retry-errors, or start a new run with "
               "another --sandbox",
    "setup": "the workspace could not be prepared (a source that cannot be fetched, a "
             "verify patch that does not apply, a setup command that failed: the ledger has "
             "its output); fix the task and start a new run (--only ID runs just those "
             "tasks; a resume refuses a changed suite), or, for a passing cause such as "
             "the network, resume with --retry-errors",
    "grader": "a check could not run here (its detail says what to install or set), or "
              "its grader crashed; fix that and resume with --retry-errors",
    "agent": "the agent's command could not start (not found, not executable, or its "
             "script is not there) before it called the model: install it and resume with "
             "--retry-errors, or, when it is out of the sandbox's reach, start a new run "
             "that makes its directory visible (docs/agents.md)",
    "executor": "the executor could not run the attempt (a cluster that kept losing it, a "
                "worker with other versions of evalctl or the plugins); fix that and resume "
                "with --retry-errors",
    "internal": "a bug in evalctl or a plugin; please report it with the attempt's ledger",
}


# The JSON types of what a run's record holds, checked where a record is read back (a
# JSON report, the journal, both perhaps from a downloaded CI artifact): a field of
# another type is refused there, naming it, instead of failing as a traceback wherever
# it is used. Fields evalctl once did not write may be absent.
TEXT: dict[str, Any] = {"type": "string"}
MAYBE_TEXT: dict[str, Any] = {"type": ["string", "null"]}
# A path evalctl recorded: no path holds a NUL.
PATH_TEXT: dict[str, Any] = {"type": "string", "pattern": r"^[^\x00]*$"}
MAYBE_PATH_TEXT: dict[str, Any] = {**PATH_TEXT, "type": ["string", "null"]}
FLAG: dict[str, Any] = {"type": "boolean"}
COUNT: dict[str, Any] = {"type": "integer", "minimum": 0}
COST: dict[str, Any] = {"type": ["number", "null"]}
TABLE: dict[str, Any] = {"type": ["object", "null"]}  # options: any values
TEXTS: dict[str, Any] = {"type": "array", "items": TEXT}
USAGE: dict[str, Any] = {"type": ["object", "null"], "properties": {
    key: COUNT for key in ("input_tokens", "output_tokens", "cache_read_tokens",
                           "cache_write_tokens")}}
CHECK_SCHEMA: dict[str, Any] = {"type": "object", "required": ["type"], "properties": {
    "type": TEXT, "kind": TEXT, "passed": FLAG, "detail": TEXT, "error": FLAG,
    "usage": USAGE, "cost": COST, "rate": MAYBE_TEXT, "suspected_gaming": FLAG,
    "rated": FLAG, "talk_only": FLAG}}
TASK_RESULT_SCHEMA: dict[str, Any] = {"type": "object", "required": ["id", "status"],
                                      "properties": {
    "id": TEXT, "attempt": {"type": "integer", "minimum": 1},
    "status": {"enum": [PASSED, FAILED, ERROR, NOT_RUN]}, "passed": FLAG,
    "exit_status": MAYBE_TEXT, "error": MAYBE_TEXT, "error_kind": MAYBE_TEXT,
    "checks": {"type": "array", "items": CHECK_SCHEMA}, "turns": COUNT, "tool_calls": COUNT,
    "usage": USAGE, "cost": COST, "duration": {"type": "number"}, "tags": TEXTS,
    "workspace": MAYBE_PATH_TEXT, "ledger": MAYBE_PATH_TEXT, "host": MAYBE_TEXT,
    "record_problems": {"type": ["array", "null"], "items": TEXT}}}
# Each plugin by entry-point name: in a report, its version (its distribution is in
# `plugin_distributions`); in a journal's header, its distribution and version (the
# version alone in journals written before the distribution was recorded).
PLUGINS: dict[str, Any] = {"type": ["object", "null"], "additionalProperties": {"anyOf": [
    MAYBE_TEXT, {"type": "object", "properties": {"distribution": MAYBE_TEXT,
                                                  "version": MAYBE_TEXT}}]}}


def plugin_parts(value: Any) -> tuple[str | None, str | None]:
    """(distribution, version) of one recorded plugin: an entry of a report's or journal's
    `plugins`, either shape."""
    if isinstance(value, Mapping):
        return value.get("distribution"), value.get("version")
    return None, value if isinstance(value, str) else None


def plugin_shown(value: Any) -> str:
    """One recorded plugin as a person reads it: `evalctl-judge 0.3.0`."""
    distribution, version = plugin_parts(value)
    return " ".join(part for part in (distribution, version or "?") if part)


def read_plugins(raw: Any) -> tuple[dict[str, str | None], dict[str, str | None]]:
    """A recorded `plugins` mapping as (versions, distributions) by plugin name."""
    versions: dict[str, str | None] = {}
    distributions: dict[str, str | None] = {}
    for name, value in (raw or {}).items():
        distributions[name], versions[name] = plugin_parts(value)
    return versions, distributions
SANDBOX: dict[str, Any] = {"type": ["object", "null"], "properties": {
    "name": TEXT, "options": TABLE, "isolated": FLAG, "chosen_by": MAYBE_TEXT}}
AGENT: dict[str, Any] = {"type": ["object", "null"], "properties": {
    "name": MAYBE_TEXT, "base": MAYBE_TEXT, "version": MAYBE_TEXT, "options": TABLE,
    "chosen_by": MAYBE_TEXT}}
EXECUTOR: dict[str, Any] = {"type": ["object", "null"], "properties": {
    "name": TEXT, "options": TABLE, "chosen_by": MAYBE_TEXT}}
BUDGET: dict[str, Any] = {"type": ["object", "null"], "properties": {
    "max_cost": COST, "max_tokens": {"type": ["integer", "null"]}, "spent_cost": COST,
    "spent_tokens": {"type": ["integer", "null"]}, "unpriced": FLAG, "reached": FLAG}}
REGRADE_OF: dict[str, Any] = {"type": ["object", "null"], "properties": {
    "run_directory": PATH_TEXT, "started_at": MAYBE_TEXT, "suite_sha256": MAYBE_TEXT},
    "required": ["run_directory", "started_at", "suite_sha256"]}
REPORT_SCHEMA: dict[str, Any] = {"type": "object", "required": ["tasks"], "properties": {
    "suite": {"type": ["object", "null"], "properties": {
        "path": PATH_TEXT, "name": TEXT, "sha256": TEXT}},
    "provider": TEXT, "model": MAYBE_TEXT, "started_at": TEXT, "finished_at": TEXT,
    "evalctl_version": TEXT, "plugins": PLUGINS,
    "plugin_distributions": {"type": ["object", "null"], "additionalProperties": MAYBE_TEXT},
    "tasks": {"type": "array", "items": TASK_RESULT_SCHEMA}, "interrupted": FLAG,
    "run_directory": PATH_TEXT, "repeat": {"type": "integer", "minimum": 1},
    "sandbox": SANDBOX, "agent": AGENT, "executor": EXECUTOR, "budget": BUDGET,
    "regrade_of": REGRADE_OF, "summary": TABLE}}


@functools.cache
def _report_check() -> SchemaCheck:
    """REPORT_SCHEMA compiled once, when a report is first read (compare reads two)."""
    return SchemaCheck(REPORT_SCHEMA)


def malformed(check: SchemaCheck, value: Any) -> str | None:
    """The first field of `value` that `check`'s schema refuses, said as `field: why`
    (`tasks[0].status: 7 is not one of [...]`), or None when every field is as evalctl
    writes it."""
    if check.surely_valid(value):
        return None
    errors = check.errors(value)
    if not errors:
        return None
    error = errors[0]
    where = ""
    for step in error.absolute_path:
        where += f"[{step}]" if isinstance(step, int) else f".{step}" if where else str(step)
    why = escape_text(truncate(" ".join(error.message.split()), 200, keep="head"))
    return f"{where}: {why}" if where else why


@dataclass
class CheckOutcome:
    """One check's result as reported: the grader's answer and who gave it."""

    type: str
    kind: str
    passed: bool
    detail: str
    error: bool = False  # the grader itself crashed
    usage: TokenUsage | None = None  # a judge's model usage, apart from the agent's
    cost: float | None = None
    rate: str | None = None  # the named rate this check feeds, if its grader has one
    suspected_gaming: bool = False  # the grader saw evidence the agent gamed the check
    # False for a pass with nothing to rate (CheckResult.rated): left out of its named
    # rate, so a vacuous pass cannot make it 100%. A failure is always rated.
    rated: bool = True
    # Its grader could be satisfied by an agent that only talks (grounding, outcome):
    # another matter than `kind`, which says how it grades (mechanical, or a judge).
    talk_only: bool = False

    def __post_init__(self) -> None:
        if not self.passed or self.error:
            self.rated = True

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {"type": self.type, "kind": self.kind, "passed": self.passed,
                                "error": self.error, "detail": self.detail}
        if self.suspected_gaming:
            data["suspected_gaming"] = True
        if self.rate is not None:
            data["rate"] = self.rate
        if not self.rated:
            data["rated"] = False
        if self.talk_only:
            data["talk_only"] = True
        if self.usage is not None:
            data["usage"] = self.usage.to_dict()
            data["cost"] = self.cost
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> CheckOutcome:
        usage = data.get("usage")
        # Escaped again as read: a record from elsewhere (a downloaded run) is shown as
        # safely as one escaped when it was made (escape_text leaves that one as it is).
        return cls(str(data["type"]), str(data.get("kind", "mechanical")),
                   bool(data.get("passed")), escape_text(str(data.get("detail", ""))),
                   bool(data.get("error", False)),
                   TokenUsage.from_dict(usage) if usage is not None else None,
                   data.get("cost"), data.get("rate"),
                   bool(data.get("suspected_gaming", False)),
                   data.get("rated", True) is not False,
                   data.get("talk_only") is True)


@dataclass
class TaskResult:
    """One attempt at one task."""

    task_id: str
    status: str
    checks: list[CheckOutcome] = field(default_factory=list)
    exit_status: str | None = None
    error: str | None = None
    turns: int = 0
    tool_calls: int = 0
    usage: TokenUsage = field(default_factory=TokenUsage)
    cost: float | None = 0.0
    duration: float = 0.0
    workspace: str | None = None
    ledger: str | None = None
    tags: tuple[str, ...] = ()
    attempt: int = 1
    host: str | None = None  # where it ran, when an executor ran it elsewhere
    # Why its ledger or cassette stopped being written, if one did (a full disk, a request
    # nested past encoding): its record, or its replay, ends there.
    record_problems: tuple[str, ...] = ()

    @property
    def passed(self) -> bool:
        return self.status == PASSED

    def failed_checks(self) -> list[CheckOutcome]:
        """The mechanical checks that said no: what decided a failure."""
        return [c for c in self.checks if not c.passed and c.kind == "mechanical"
                and not c.error]

    @property
    def error_kind(self) -> str | None:
        """For an errored attempt, what failed that was not the agent's work: provider,
        sandbox, setup, agent (its command never started), executor, grader or internal
        (ERROR_KINDS). None for any other attempt."""
        if self.status != ERROR:
            return None
        if self.exit_status == ExitStatus.SANDBOX_ERROR:
            return "sandbox"
        if self.exit_status == ExitStatus.SETUP_ERROR:
            return "setup"
        if self.exit_status == ExitStatus.EXECUTOR_ERROR:
            return "executor"
        if self.exit_status == ExitStatus.AGENT_NOT_STARTED:
            return "agent"
        if self.exit_status == ExitStatus.INTERNAL_ERROR:
            return "internal"
        if self.exit_status is not None and self.exit_status not in ExitStatus.AGENT:
            return "provider"
        return "grader" if any(c.error for c in self.checks) else "internal"

    def error_detail(self) -> str:
        """What went wrong, for an errored attempt: its error, and each check that
        could not run with its detail (which says how to fix it)."""
        parts = [self.error] if self.error and self.error_kind != "grader" else []
        parts += [f"{c.type}: {c.detail}" for c in self.checks
                  if c.error and c.kind == "mechanical"]
        return "\n".join(parts) or self.error or ""

    def judge_checks(self) -> list[CheckOutcome]:
        return [c for c in self.checks if c.kind == "judge"]

    def to_dict(self) -> dict[str, Any]:
        data = {
            "id": self.task_id,
            "attempt": self.attempt,
            "status": self.status,
            "passed": self.passed,
            "exit_status": self.exit_status,
            "error": self.error,
            "error_kind": self.error_kind,
            "checks": [c.to_dict() for c in self.checks],
            "turns": self.turns,
            "tool_calls": self.tool_calls,
            "usage": self.usage.to_dict(),
            "cost": self.cost,
            "duration": self.duration,
            "tags": list(self.tags),
            "workspace": self.workspace,
            "ledger": self.ledger,
        }
        if self.host is not None:
            data["host"] = self.host
        if self.record_problems:
            data["record_problems"] = list(self.record_problems)
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> TaskResult:
        return cls(
            task_id=str(data["id"]), status=str(data["status"]),
            checks=[CheckOutcome.from_dict(c) for c in data.get("checks", [])],
            exit_status=data.get("exit_status"),
            error=None if data.get("error") is None else escape_text(str(data["error"])),
            turns=int(data.get("turns", 0)), tool_calls=int(data.get("tool_calls", 0)),
            usage=TokenUsage.from_dict(data.get("usage") or {}), cost=data.get("cost", 0.0),
            duration=float(data.get("duration", 0.0)), workspace=data.get("workspace"),
            ledger=data.get("ledger"), tags=tuple(data.get("tags", ())),
            attempt=int(data.get("attempt", 1)), host=data.get("host"),
            record_problems=tuple(str(p) for p in data.get("record_problems") or ()),
        )


@dataclass(frozen=True)
class TaskAggregate:
    """One task over its attempts: pass@k (one passed), pass^k (all passed), flaky."""

    task_id: str
    attempts: tuple[str, ...]  # statuses in attempt order, not-run ones included
    passed: int
    ran: int

    @property
    def pass_at_k(self) -> bool:
        return self.passed > 0

    @property
    def pass_hat_k(self) -> bool:
        return self.passed == self.ran

    @property
    def flaky(self) -> bool:
        return 0 < self.passed < self.ran

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.task_id, "attempts": list(self.attempts), "passed": self.passed,
                "ran": self.ran, "pass_at_k": self.pass_at_k, "pass_hat_k": self.pass_hat_k,
                "flaky": self.flaky}


@dataclass(frozen=True)
class Rate:
    """A share of checks (or tasks) that passed; `value` is None when there were none.
    `errors` counts those that could not be graded: never part of `total`."""

    passed: int
    total: int
    errors: int = 0

    @property
    def value(self) -> float | None:
        return round(self.passed / self.total, 4) if self.total else None


def aggregate_attempts(tasks: list[TaskResult]) -> list[TaskAggregate]:
    """Per task, over its graded attempts, in first-seen order. Attempts not run or in
    error are left out; a task none of whose attempts was graded is left out."""
    by_id: dict[str, list[TaskResult]] = {}
    for task in tasks:
        by_id.setdefault(task.task_id, []).append(task)
    out = []
    for task_id, attempts in by_id.items():
        ran = [a for a in attempts if a.status in GRADED]
        if ran:
            out.append(TaskAggregate(
                task_id, tuple(a.status for a in sorted(attempts, key=lambda a: a.attempt)),
                sum(1 for a in ran if a.passed), len(ran)))
    return out


@dataclass
class RunResult:
    """A whole run: what ran, with what, and every attempt's result."""

    suite_path: str
    suite_name: str
    suite_sha256: str
    provider: str
    model: str | None
    started_at: str
    finished_at: str
    evalctl_version: str
    plugin_versions: dict[str, str | None]
    tasks: list[TaskResult]
    interrupted: bool = False
    run_directory: str = ""
    repeat: int = 1
    # The named rates the installed graders contribute: reported even when no check of
    # the run fed them, so that reports of one setup always have the same keys.
    rate_names: tuple[str, ...] = ()
    sandbox: dict[str, Any] = field(default_factory=dict)  # name, options, isolated
    # Against a baseline (`run --baseline`, `compare --html`), for reporters that show
    # it; not part of the JSON report, which `evalctl compare` recomputes from two.
    comparison: Comparison | None = None
    # The run's budget when it had one: max_cost, max_tokens, spent_cost, spent_tokens,
    # reached (whether it stopped new attempts).
    budget: dict[str, Any] | None = None
    # The system under test: name (as chosen, a preset's say), base, version, options.
    agent: dict[str, Any] = field(default_factory=dict)
    # A regrade's source (`evalctl regrade`): the run whose workspaces were graded again
    # (run_directory, started_at, suite_sha256); None for a run of its own.
    regrade_of: dict[str, Any] | None = None
    # How the attempts were scheduled: name, options, chosen_by ({} in older reports).
    executor: dict[str, Any] = field(default_factory=dict)
    # Each plugin's distribution, by entry-point name, beside plugin_versions: two
    # distributions may use one name ({} in older reports).
    plugin_distributions: dict[str, str | None] = field(default_factory=dict)

    @property
    def agent_label(self) -> str:
        """The agent as a person names it: `claude-code 2.1.332`, or `evalctl` for reports
        written before agents were recorded (the built-in loop was the only one)."""
        name = self.agent.get("name") or "evalctl"
        version = self.agent.get("version")
        return f"{name} {version}" if version else str(name)

    def ran(self) -> list[TaskResult]:
        return [t for t in self.tasks if t.status != NOT_RUN]

    def graded(self) -> list[TaskResult]:
        """The attempts that were graded (passed or failed): what every rate is over."""
        return [t for t in self.tasks if t.status in GRADED]

    def errors(self) -> list[TaskResult]:
        """The attempts in error, listed apart from failures."""
        return [t for t in self.tasks if t.status == ERROR]

    def check_errors(self) -> list[tuple[TaskResult, CheckOutcome]]:
        """The checks that could not run or crashed in attempts that are not errors: a
        genuine failure of another check decides such an attempt (failed), so an agent
        cannot launder a failure into an uncounted error by breaking a grader, but the
        grader's error must still be seen (found by a newcomer: a crash beside a failing
        check was only in tasks[].checks[].error)."""
        return [(t, c) for t in self.tasks if t.status != ERROR for c in t.checks
                if c.error]

    def count(self, status: str) -> int:
        return sum(1 for t in self.tasks if t.status == status)

    def label(self, task: TaskResult) -> str:
        """How a person names an attempt: the task id, with its attempt when repeated."""
        return task.task_id if self.repeat == 1 else f"{task.task_id} #{task.attempt}"

    @property
    def completion_rate(self) -> float | None:
        """Attempts passed / attempts graded; errors and attempts not run are left out."""
        return Rate(self.count(PASSED), len(self.graded())).value

    def check_rate(self, predicate: Callable[[CheckOutcome], bool]) -> Rate:
        """The checks matching `predicate` in graded attempts; a check that errored is
        counted in `errors`, never in `total`."""
        checks = [c for t in self.graded() for c in t.checks if predicate(c)]
        graded = [c for c in checks if not c.error]
        errors = len(checks) - len(graded) + sum(
            1 for t in self.errors() for c in t.checks if predicate(c) and c.error)
        return Rate(sum(1 for c in graded if c.passed), len(graded), errors)

    def named_rates(self) -> dict[str, Rate]:
        """Each grader-contributed rate (grounding, say), over the checks that feed it;
        a pass that had nothing to rate (`rated` False) is in none of its figures."""
        names = sorted({*self.rate_names,
                        *(c.rate for t in self.tasks for c in t.checks if c.rate)})
        return {name: self.check_rate(lambda c, n=name: c.rate == n and c.rated)
                for name in names}

    @property
    def judge(self) -> Rate:
        """The judge's verdicts on graded attempts; judges that could not give one are
        `errors`, not in the rate."""
        checks = [c for t in self.ran() for c in t.checks if c.kind == "judge"]
        graded = [c for t in self.graded() for c in t.checks if c.kind == "judge" and
                  not c.error]
        return Rate(sum(1 for c in graded if c.passed), len(graded),
                    sum(1 for c in checks if c.error))

    @property
    def judge_rate(self) -> float | None:
        return self.judge.value

    def by_task(self) -> list[TaskAggregate]:
        return aggregate_attempts(self.tasks)

    def pass_at_k(self, per_task: list[TaskAggregate] | None = None) -> float | None:
        """Share of tasks with at least one passing attempt."""
        per_task = self.by_task() if per_task is None else per_task
        return Rate(sum(t.pass_at_k for t in per_task), len(per_task)).value

    def pass_hat_k(self, per_task: list[TaskAggregate] | None = None) -> float | None:
        """Share of tasks whose every attempt passed."""
        per_task = self.by_task() if per_task is None else per_task
        return Rate(sum(t.pass_hat_k for t in per_task), len(per_task)).value

    @property
    def usage(self) -> TokenUsage:
        return sum((task.usage for task in self.tasks), TokenUsage())

    @property
    def cost(self) -> float | None:
        return sum_costs(t.cost for t in self.ran())

    def grader_usage(self) -> tuple[TokenUsage, float | None]:
        """Tokens and cost that graders (judges) spent, kept apart from the agent's."""
        checks = [c for t in self.tasks for c in t.checks if c.usage is not None]
        return sum((c.usage for c in checks), TokenUsage()), sum_costs(c.cost for c in checks)

    @property
    def all_passed(self) -> bool:
        return bool(self.tasks) and all(t.passed for t in self.tasks) and not self.interrupted

    def to_dict(self) -> dict[str, Any]:
        grader_usage, grader_cost = self.grader_usage()
        per_task = self.by_task()
        judge = self.judge
        summary: dict[str, Any] = {
            "completion_rate": self.completion_rate,
            "pass_at_k": self.pass_at_k(per_task),
            "pass_hat_k": self.pass_hat_k(per_task),
            "flaky": [t.task_id for t in per_task if t.flaky],
            "passed": self.count(PASSED),
            "failed": self.count(FAILED),
            "errors": self.count(ERROR),
            "not_run": self.count(NOT_RUN),
            "total": len(self.tasks),
        }
        for name, rate in self.named_rates().items():
            summary[f"{name}_rate"] = rate.value
            summary[f"{name}_checks"] = {"passed": rate.passed, "total": rate.total,
                                         "errors": rate.errors}
        summary.update({
            "judge_rate": judge.value,
            "judge_checks": {"passed": judge.passed, "total": judge.total,
                             "errors": judge.errors},
            "usage": self.usage.to_dict(),
            "cost": self.cost,
            "grader_usage": grader_usage.to_dict(),
            "grader_cost": grader_cost,
        })
        return {
            "format": REPORT_FORMAT,
            "suite": {"path": self.suite_path, "name": self.suite_name,
                      "sha256": self.suite_sha256},
            "provider": self.provider,
            "model": self.model,
            "sandbox": dict(self.sandbox),
            "agent": dict(self.agent),
            "executor": dict(self.executor),
            "evalctl_version": self.evalctl_version,
            # Versions alone under `plugins`, as reports always held them (a reader of
            # `plugins[name]` as a version keeps working); distributions beside them.
            "plugins": dict(sorted(self.plugin_versions.items())),
            "plugin_distributions": {name: self.plugin_distributions.get(name)
                                     for name in sorted(self.plugin_versions)},
            "started_at": self.started_at,
            "finished_at": self.finished_at,
            "interrupted": self.interrupted,
            "run_directory": self.run_directory,
            "repeat": self.repeat,
            "budget": None if self.budget is None else dict(self.budget),
            "regrade_of": None if self.regrade_of is None else dict(self.regrade_of),
            "summary": summary,
            "errors": [{"id": t.task_id, "attempt": t.attempt, "kind": t.error_kind,
                        "detail": t.error_detail(), "remedy": ERROR_KINDS.get(
                            t.error_kind or "", "")} for t in self.errors()],
            "check_errors": [{"id": t.task_id, "attempt": t.attempt, "status": t.status,
                              "type": c.type, "detail": c.detail}
                             for t, c in self.check_errors()],
            "by_task": [t.to_dict() for t in per_task],
            "tasks": [t.to_dict() for t in self.tasks],
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RunResult:
        """A run loaded back from its JSON report (`to_dict`'s output). Raises KeyError,
        TypeError or ValueError when required fields are missing or malformed."""
        suite = data.get("suite") or {}
        summary = data.get("summary") or {}
        rate_names = tuple(sorted(key.removesuffix("_rate") for key in summary
                                  if key.endswith("_rate") and isinstance(
                                      summary.get(key.removesuffix("_rate") + "_checks"),
                                      Mapping) and key != "judge_rate"))
        return cls(
            suite_path=str(suite.get("path", "")), suite_name=str(suite.get("name", "")),
            suite_sha256=str(suite.get("sha256", "")), provider=str(data.get("provider", "")),
            model=data.get("model"), started_at=str(data.get("started_at", "")),
            finished_at=str(data.get("finished_at", "")),
            evalctl_version=str(data.get("evalctl_version", "")),
            plugin_versions=read_plugins(data.get("plugins"))[0],
            plugin_distributions=dict(data.get("plugin_distributions")
                                      or read_plugins(data.get("plugins"))[1]),
            tasks=[TaskResult.from_dict(t) for t in data["tasks"]],
            interrupted=bool(data.get("interrupted", False)),
            run_directory=str(data.get("run_directory", "")),
            repeat=int(data.get("repeat", 1)), rate_names=rate_names,
            sandbox=dict(data.get("sandbox") or {}),
            budget=dict(data["budget"]) if data.get("budget") else None,
            agent=dict(data.get("agent") or {}),
            regrade_of=dict(data["regrade_of"]) if data.get("regrade_of") else None,
            executor=dict(data.get("executor") or {}),
        )


def load_report(path: str | Path) -> RunResult:
    """A JSON report written by `evalctl run`, loaded back as a RunResult; a UsageError
    (exit 2) saying why when the file is not one."""
    path = Path(path)
    try:
        data = parse_json(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise UsageError(f"{path}: cannot read: {exc.strerror or exc}") from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise UsageError(f"{path}: not JSON: {exc}") from None
    if not isinstance(data, dict) or data.get("format") != REPORT_FORMAT:
        raise UsageError(f"{path}: not an evalctl JSON report (expected \"format\": "
                         f"\"{REPORT_FORMAT}\"; write one with evalctl run --report)")
    problem = malformed(_report_check(), data)
    if problem is not None:
        raise UsageError(f"{path}: an evalctl report with missing or malformed fields "
                         f"({problem})")
    try:
        return RunResult.from_dict(data)
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise UsageError(f"{path}: an evalctl report with missing or malformed fields "
                         f"({type(exc).__name__}: {exc})") from None
