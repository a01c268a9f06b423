"""What a run produced: per-task results, the run's totals and its rates.

`completion_rate` is the headline: tasks whose mechanical checks all passed, over
tasks run. `grounding_rate` and the judge's rate are separate figures, never averaged
into it. Errors (the model unreachable, a grader crashing) are counted apart from
failures.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from evalctl._plugin.types import TokenUsage

PASSED, FAILED, ERROR, NOT_RUN = "passed", "failed", "error", "not_run"


@dataclass
class CheckOutcome:
    type: str
    kind: str
    passed: bool
    detail: str
    error: bool = False  # the grader itself crashed
    usage: TokenUsage | None = None  # a judge's model usage, apart from the agent's
    cost: float | None = None

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {"type": self.type, "kind": self.kind, "passed": self.passed,
                                "error": self.error, "detail": self.detail}
        if self.usage is not None:
            data["usage"] = self.usage.to_dict()
            data["cost"] = self.cost
        return data


@dataclass
class TaskResult:
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

    @property
    def passed(self) -> bool:
        return self.status == PASSED

    def failed_checks(self) -> list[CheckOutcome]:
        return [c for c in self.checks if not c.passed]

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.task_id,
            "attempt": self.attempt,
            "status": self.status,
            "passed": self.passed,
            "exit_status": self.exit_status,
            "error": self.error,
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


def aggregate_attempts(tasks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per task, over its attempts (report dicts): pass@k (at least one attempt passed),
    pass^k (every attempt passed) and whether it is flaky (mixed outcomes). Attempts not
    run are left out; a task none of whose attempts ran is left out."""
    by_id: dict[str, list[dict[str, Any]]] = {}
    for task in tasks:
        by_id.setdefault(task["id"], []).append(task)
    out = []
    for task_id, attempts in by_id.items():
        ran = [a for a in attempts if a["status"] != NOT_RUN]
        if not ran:
            continue
        outcomes = [a["status"] == PASSED for a in ran]
        out.append({
            "id": task_id,
            "attempts": [a["status"] for a in sorted(attempts, key=lambda a: a["attempt"])],
            "passed": sum(outcomes),
            "ran": len(ran),
            "pass_at_k": any(outcomes),
            "pass_hat_k": all(outcomes),
            "flaky": any(outcomes) and not all(outcomes),
        })
    return out


def _is_grounding(check: CheckOutcome) -> bool:
    return check.type == "grounding"


def _is_judge(check: CheckOutcome) -> bool:
    return check.kind == "judge"


def _rate(passed: int, total: int) -> float | None:
    return round(passed / total, 4) if total else None


def _sum_costs(costs: list[float | None]) -> float | None:
    if any(c is None for c in costs):
        return None
    return round(sum(c for c in costs if c is not None), 6)


@dataclass
class RunResult:
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

    def ran(self) -> list[TaskResult]:
        return [t for t in self.tasks if t.status != NOT_RUN]

    def count(self, status: str) -> int:
        return sum(1 for t in self.tasks if t.status == status)

    @property
    def completion_rate(self) -> float | None:
        return _rate(self.count(PASSED), len(self.ran()))

    def kind_rate(self, predicate: Any) -> tuple[float | None, int, int]:
        checks = [c for t in self.ran() for c in t.checks if predicate(c)]
        passed = sum(1 for c in checks if c.passed)
        return _rate(passed, len(checks)), passed, len(checks)

    @property
    def grounding_rate(self) -> float | None:
        return self.kind_rate(_is_grounding)[0]

    @property
    def judge_rate(self) -> float | None:
        return self.kind_rate(_is_judge)[0]

    @property
    def usage(self) -> TokenUsage:
        return sum((task.usage for task in self.tasks), TokenUsage())

    @property
    def cost(self) -> float | None:
        return _sum_costs([t.cost for t in self.ran()])

    def grader_usage(self) -> tuple[TokenUsage, float | None]:
        """Tokens and cost that graders (judges) spent, kept apart from the agent's."""
        checks = [c for t in self.tasks for c in t.checks if c.usage is not None]
        return sum((c.usage for c in checks), TokenUsage()), _sum_costs([c.cost for c in checks])

    @property
    def all_passed(self) -> bool:
        return bool(self.tasks) and all(t.passed for t in self.tasks) and not self.interrupted

    def to_dict(self) -> dict[str, Any]:
        grounding, grounding_passed, grounding_total = self.kind_rate(_is_grounding)
        judge, judge_passed, judge_total = self.kind_rate(_is_judge)
        grader_usage, grader_cost = self.grader_usage()
        task_dicts = [t.to_dict() for t in self.tasks]
        per_task = aggregate_attempts(task_dicts)
        return {
            "format": "evalctl-run/1",
            "suite": {"path": self.suite_path, "name": self.suite_name,
                      "sha256": self.suite_sha256},
            "provider": self.provider,
            "model": self.model,
            "evalctl_version": self.evalctl_version,
            "plugins": dict(sorted(self.plugin_versions.items())),
            "started_at": self.started_at,
            "finished_at": self.finished_at,
            "interrupted": self.interrupted,
            "run_directory": self.run_directory,
            "repeat": self.repeat,
            "summary": {
                "completion_rate": self.completion_rate,
                "pass_at_k": _rate(sum(t["pass_at_k"] for t in per_task), len(per_task)),
                "pass_hat_k": _rate(sum(t["pass_hat_k"] for t in per_task), len(per_task)),
                "flaky": [t["id"] for t in per_task if t["flaky"]],
                "passed": self.count(PASSED),
                "failed": self.count(FAILED),
                "errors": self.count(ERROR),
                "not_run": self.count(NOT_RUN),
                "total": len(self.tasks),
                "grounding_rate": grounding,
                "grounding_checks": {"passed": grounding_passed, "total": grounding_total},
                "judge_rate": judge,
                "judge_checks": {"passed": judge_passed, "total": judge_total},
                "usage": self.usage.to_dict(),
                "cost": self.cost,
                "grader_usage": grader_usage.to_dict(),
                "grader_cost": grader_cost,
            },
            "by_task": per_task,
            "tasks": task_dicts,
        }
