"""`markdown`: a summary and a table that paste into a pull request."""

from __future__ import annotations

from pathlib import Path

import evalctl
from evalctl._text import money, percent

STATUS_MARK = {"passed": "✅ passed", "failed": "❌ failed", "error": "⚠️ error",
               "not_run": "⏸ not run"}


def _cell(text: str, limit: int = 120) -> str:
    text = " ".join(str(text).split())
    if len(text) > limit:
        text = text[: limit - 1] + "…"
    return text.replace("|", "\\|")


def render(run) -> str:
    data = run.to_dict()
    summary = data["summary"]
    lines = [
        f"## evalctl: {data['suite']['name']}",
        "",
        f"**Completion: {percent(summary['completion_rate'])}** "
        f"({summary['passed']}/{summary['total'] - summary['not_run']} tasks passed"
        + (f", {summary['errors']} errors" if summary["errors"] else "")
        + (f", {summary['not_run']} not run" if summary["not_run"] else "") + ")",
        "",
        f"- Grounding: {percent(summary['grounding_rate'])} "
        f"({summary['grounding_checks']['passed']}/{summary['grounding_checks']['total']} "
        "checks)",
    ]
    if summary["judge_checks"]["total"]:
        judge_usage = summary["grader_usage"]
        lines.append(f"- Judge (reported apart): {percent(summary['judge_rate'])} "
                     f"({summary['judge_checks']['passed']}/{summary['judge_checks']['total']}); "
                     f"judge tokens {judge_usage['input_tokens']} in, "
                     f"{judge_usage['output_tokens']} out, cost {money(summary['grader_cost'])}")
    if data.get("repeat", 1) > 1:
        lines.append(f"- Repeats: {data['repeat']} per task; "
                     f"pass@k {percent(summary['pass_at_k'])}, "
                     f"pass^k {percent(summary['pass_hat_k'])}; "
                     "completion is the per-attempt mean")
        if summary["flaky"]:
            lines.append(f"- Flaky (mixed outcomes): {', '.join(summary['flaky'])}")
    usage = summary["usage"]
    lines += [
        f"- Provider: {data['provider']}" + (f" ({data['model']})" if data["model"] else ""),
        f"- Tokens: {usage['input_tokens']} in, {usage['output_tokens']} out, "
        f"{usage['cache_read_tokens']} cache read, {usage['cache_write_tokens']} cache write; "
        f"cost {money(summary['cost'])}",
        f"- Suite: `{data['suite']['path']}` (sha256 {data['suite']['sha256'][:12]})",
    ]
    if data["interrupted"]:
        lines.append("- **The run was interrupted**; tasks not run are marked.")
    lines += [
        "",
        "| Task | Status | Failed checks | Exit | Turns | Tokens in/out | Cost | Time |",
        "|---|---|---|---|---:|---:|---:|---:|",
    ]
    for task in data["tasks"]:
        failed = [f"{c['type']}: {c['detail']}" for c in task["checks"]
                  if not c["passed"] and c["kind"] == "mechanical"]
        if task["error"] and task["status"] == "error":
            failed.insert(0, task["error"])
        label = task["id"] if data.get("repeat", 1) == 1 else f"{task['id']} #{task['attempt']}"
        lines.append(
            f"| {_cell(label, 60)} | {STATUS_MARK.get(task['status'], task['status'])} | "
            f"{_cell('; '.join(failed)) or '—'} | {task['exit_status'] or '—'} | "
            f"{task['turns']} | {task['usage']['input_tokens']}/{task['usage']['output_tokens']} | "
            f"{money(task['cost'])} | {task['duration']:.1f}s |")
    judged = [(t["id"], c) for t in data["tasks"] for c in t["checks"] if c["kind"] == "judge"]
    if judged:
        lines += ["", "### Judge verdicts (not part of completion)", "",
                  "| Task | Verdict | Reason |", "|---|---|---|"]
        lines += [f"| {_cell(task_id, 60)} | {'pass' if c['passed'] else 'fail'} | "
                  f"{_cell(c['detail'])} |" for task_id, c in judged]
    return "\n".join(lines) + "\n"


def write_markdown(run, path: Path) -> Path:
    return evalctl.write_atomically(path, render(run))


@evalctl.hookimpl
def evalctl_register_reporters(register):
    register(evalctl.ReporterSpec(
        name="markdown", write=write_markdown, extension="md",
        description="A summary and a per-task table to paste into a pull request.",
    ))
