"""What the HTML report shows, as plain data: the overview's figures, the comparison,
one small row per attempt for the task table, and each attempt's details (checks,
transcript, changes) for its task page.

The rows are all the page holds up front; the details are produced one attempt at a
time (`details`), embedded as inert JSON that the page parses only when that task is
opened, so a 10,000-task run neither builds 10,000 transcripts in memory here nor in
the browser.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import evalctl

from .changes import workspace_changes
from .charts import cost_chart, duration_chart, outcomes_by_tag
from .transcript import read_transcript

WHY_LIMIT = 160  # characters of the "why it failed" cell
DETAIL_LIMIT = 6_000  # characters of one check's detail on the task page

money, percent = evalctl.format_money, evalctl.format_percent


def attempt_key(run: evalctl.RunResult, task: evalctl.TaskResult) -> str:
    """The attempt's name in links (`#task=KEY`): its workspace's name, `id` or `id@n`."""
    if task.workspace:
        return Path(task.workspace).name
    return task.task_id if run.repeat == 1 else f"{task.task_id}@{task.attempt}"


def file_link(target: str | None, report_dir: Path) -> dict[str, str] | None:
    """A link to a file of the run, relative to the report when it can be (the report
    and its run directory move together), as `./…` or `../…` so that no file name can
    ever be read as a URL scheme."""
    if not target:
        return None
    try:
        relative = os.path.relpath(target, report_dir)
    except ValueError:
        return {"href": Path(target).resolve().as_uri(), "path": target}
    href = quote(Path(relative).as_posix())
    return {"href": href if href.startswith("../") else "./" + href, "path": target}


def _why(task: evalctl.TaskResult) -> str:
    """The one line that says why an attempt did not pass."""
    if task.status == "error":
        crashed = [c for c in task.checks if c.error]
        reason = task.error or (f"{crashed[0].type}: {crashed[0].detail}" if crashed else "error")
    elif task.status == "not_run":
        reason = task.error or "not run"
    else:  # failed or passed: the checks that failed, then any that could not run
        # (check_errors in the JSON: never read as the agent's failure, never hidden)
        reason = "; ".join([f"{c.type}: {c.detail}" for c in task.failed_checks()]
                           + [f"⚠ {c.type} (grader error): {c.detail}"
                              for c in task.checks if c.error])
    return evalctl.truncate(" ".join(reason.split()), WHY_LIMIT, keep="head")


def rows(run: evalctl.RunResult) -> list[dict[str, Any]]:
    """One small row per attempt: what the table shows, filters and sorts on."""
    out = []
    for index, task in enumerate(run.tasks):
        out.append({
            "i": index, "key": attempt_key(run, task), "label": run.label(task),
            "status": task.status, "tags": list(task.tags),
            "checks": sorted({c.type for c in task.checks}),
            "failed": sorted({c.type for c in task.checks
                              if not c.passed and not c.error and c.kind == "mechanical"}),
            "errored": sorted({c.type for c in task.checks if c.error}),
            "judged": [c.passed for c in task.judge_checks()],
            "gaming": any(c.suspected_gaming for c in task.checks),
            "why": _why(task) if not task.passed or any(c.error for c in task.checks)
            else "",
            "exit": task.exit_status or "", "turns": task.turns, "calls": task.tool_calls,
            "tokens": [task.usage.input_tokens, task.usage.output_tokens],
            "cost": task.cost, "duration": task.duration,
        })
    return out


def details(run: evalctl.RunResult, report_dir: Path) -> Iterator[dict[str, Any]]:
    """Each attempt's task page, one at a time, in the order of `run.tasks`."""
    for task in run.tasks:
        transcript = read_transcript(task.ledger)
        changes = workspace_changes(task.workspace, transcript.files_changed,
                                    transcript.files_changed_omitted)
        yield {
            "prompt": transcript.prompt,
            "error": task.error,
            "checks": [{
                "type": c.type, "kind": c.kind, "passed": c.passed, "error": c.error,
                # a check with nothing to rate feeds no rate: the page must not say it does
                "gaming": c.suspected_gaming, "rate": c.rate if c.rated else None,
                "detail": evalctl.truncate(c.detail, DETAIL_LIMIT),
                "usage": c.usage.to_dict() if c.usage is not None else None,
                "cost": money(c.cost) if c.usage is not None else None,
            } for c in task.checks],
            "transcript": transcript.items,
            "transcriptProblem": transcript.problem,
            "changes": changes.files,
            "changesProblem": changes.problem,
            "changesUnattributed": changes.unattributed,
            "ledger": file_link(task.ledger, report_dir),
            "workspace": file_link(task.workspace, report_dir),
        }


def overview(run: evalctl.RunResult) -> dict[str, Any]:
    """The figures at the top, each formatted as every evalctl report formats it."""
    per_task = run.by_task()
    usage = run.usage
    grader_usage, grader_cost = run.grader_usage()
    judge = run.judge
    return {
        "completion": percent(run.completion_rate),
        "passed": run.count("passed"), "failed": run.count("failed"),
        "errors": run.count("error"), "not_run": run.count("not_run"),
        # completion's denominator: errors and attempts not run are left out of it
        "total": len(run.tasks), "graded": len(run.graded()),
        "rates": [{"name": name, "value": percent(rate.value), "passed": rate.passed,
                   "total": rate.total} for name, rate in run.named_rates().items()],
        "judge": {"value": percent(judge.value), "passed": judge.passed, "total": judge.total,
                  "input_tokens": grader_usage.input_tokens,
                  "output_tokens": grader_usage.output_tokens, "cost": money(grader_cost)},
        "repeat": run.repeat,
        "pass_at_k": percent(run.pass_at_k(per_task)),
        "pass_hat_k": percent(run.pass_hat_k(per_task)),
        "flaky": [t.task_id for t in per_task if t.flaky],
        "usage": usage.to_dict(), "cost": money(run.cost),
        "gaming": sum(1 for t in run.tasks if any(c.suspected_gaming for c in t.checks)),
    }


def identity(run: evalctl.RunResult) -> dict[str, Any]:
    sandbox = run.sandbox or {}
    return {
        "suite": run.suite_name, "suite_path": run.suite_path,
        "suite_sha256": run.suite_sha256, "provider": run.provider, "model": run.model,
        "agent": run.agent_label,
        # a preset (claude-code) names the agent that ran it (command)
        "agent_preset_of": (run.agent or {}).get("base")
        if (run.agent or {}).get("base") != (run.agent or {}).get("name") else None,
        "sandbox": sandbox.get("name"), "sandbox_options": sandbox.get("options") or {},
        "isolated": sandbox.get("isolated"), "evalctl_version": run.evalctl_version,
        "plugins": sorted((name, " ".join(part for part in (
            run.plugin_distributions.get(name), version) if part) or None)
            for name, version in run.plugin_versions.items()),
        "started_at": run.started_at,
        "finished_at": run.finished_at, "interrupted": run.interrupted,
        "run_directory": run.run_directory, "repeat": run.repeat,
        "regrade_of": dict(run.regrade_of) if run.regrade_of else None,
    }


def charts(run: evalctl.RunResult) -> list[Any]:
    return [outcomes_by_tag(run.tasks), duration_chart(run.tasks), cost_chart(run.tasks)]


def comparison(run: evalctl.RunResult) -> dict[str, Any] | None:
    """The comparison against a baseline, with each task linked to its attempt here."""
    compared = run.comparison
    if compared is None:
        return None
    first: dict[str, str] = {}
    first_failing: dict[str, str] = {}
    for task in run.tasks:
        first.setdefault(task.task_id, attempt_key(run, task))
        if not task.passed:
            first_failing.setdefault(task.task_id, attempt_key(run, task))
    labels = {"completion_rate": "completion", "judge_rate": "judge (apart)",
              "pass_at_k": "pass@k", "pass_hat_k": "pass^k"}

    def points(value: float | None) -> str:
        return "n/a" if value is None else f"{value * 100:+.1f} pts"

    test = compared.test
    kind, headline = compared.verdict()  # the gate's, in a run with --baseline
    return {
        "regression": compared.regression,
        "verdict": {"kind": kind, "headline": headline},
        "warnings": compared.warnings(),
        "statement": compared.verdict_text()[1],
        "method": test.get("method"),
        "p_value": test.get("p_value"),
        "interval": test.get("interval"),
        "alpha": test.get("alpha"),
        "significant": bool(test.get("significant")),
        "baseline": {"suite": compared.baseline.suite_name,
                     "provider": compared.baseline.provider, "model": compared.baseline.model,
                     "agent": compared.baseline.agent_label,
                     "started_at": compared.baseline.started_at},
        "agents": {"baseline": compared.baseline.agent_label,
                   "current": compared.current.agent_label},
        "rates": [{"name": labels.get(name, name.removesuffix("_rate")),
                   "baseline": percent(row["baseline"]), "current": percent(row["current"]),
                   "delta": points(row["delta"]),
                   "direction": "" if not row["delta"] else "up" if row["delta"] > 0 else "down"}
                  for name, row in compared.rates().items()
                  if row["baseline"] is not None or row["current"] is not None],
        "cost": {key: money(value) if key != "delta" else
                 ("n/a" if value is None else f"{value:+.4f}")
                 for key, value in compared.spend()["cost"].items()},
        "newly_failing": [{"id": i, "key": first_failing.get(i, first.get(i))}
                          for i in compared.newly_failing],
        "newly_passing": [{"id": i, "key": first.get(i)} for i in compared.newly_passing],
        "discordant": [{**pair, "key": first_failing.get(pair["id"], first.get(pair["id"]))}
                       for pair in compared.discordant()],
        "common": compared.common,
        "added": compared.added,
        "removed": compared.removed,
    }
