"""`markdown`: a summary and a table that paste into a pull request."""

from __future__ import annotations

import re
from pathlib import Path

import evalctl

money, percent = evalctl.format_money, evalctl.format_percent

STATUS_MARK = {"passed": "✅ passed", "failed": "❌ failed", "error": "⚠️ error",
               "not_run": "⏸ not run"}


# What a table cell must not pass on as Markdown or HTML: a cell holds text the agent
# wrote (a check's output, its final message), and GitHub renders tags such as <tr> and
# <details> in a table, so a forged row could read "passed". `|` would end the cell,
# `[` start a link or an image, and a backslash undo the escapes made here.
_CELL_ESCAPES = str.maketrans({"\\": "\\\\", "|": "\\|", "[": "\\[", "]": "\\]",
                               "&": "&amp;", "<": "&lt;", ">": "&gt;"})


# The end of a text cut inside one of the report's escapes of the agent's text (`\x1b`,
# `\u202e`, `\U0001f600`: escape_text's), which would read as another character.
_PARTIAL_ESCAPE = re.compile(r"\\(?:x[0-9a-fA-F]?|u[0-9a-fA-F]{0,3}|U[0-9a-fA-F]{0,7})?$")
_BACKTICKS = re.compile(r"`+")


def _cell(text: str, limit: int = 120) -> str:
    return _cut(" ".join(str(text).split()), limit).translate(_CELL_ESCAPES)


def _cut(text: str, limit: int) -> str:
    """`text` in at most `limit` characters: whole, or cut at a word boundary (else, for
    a long word, at a character outside any escape) and ended with "…", never inside a
    code span (its opening backticks would run on to the next one in the row)."""
    if len(text) <= limit:
        return text
    head = text[:max(limit - 1, 0)]
    space = head.rfind(" ")
    if space >= limit // 2 and not text[len(head)].isspace():
        head = head[:space]  # the word cut in two is left out whole
    else:
        head = _PARTIAL_ESCAPE.sub("", head)
    opened = _unclosed_code_span(head)
    if opened is not None:
        head = head[:opened]
    return head.rstrip() + "…"


def _unclosed_code_span(text: str) -> int | None:
    """Where a code span opens that `text` does not close, as CommonMark pairs backtick
    runs (an opening run is closed by the next run of the same length), or None."""
    runs = [(m.start(), len(m.group())) for m in _BACKTICKS.finditer(text)]
    index = 0
    while index < len(runs):
        start, length = runs[index]
        close = next((k for k in range(index + 1, len(runs)) if runs[k][1] == length), None)
        if close is None:
            return start
        index = close + 1
    return None


def _count(number: int, noun: str) -> str:
    """"1 error", "2 errors": the report said "1 errors"."""
    return f"{number} {noun}{'' if number == 1 else 's'}"


def render(run: evalctl.RunResult) -> str:
    errors, not_run = run.count("error"), run.count("not_run")
    graded = run.graded()
    lines = [
        f"## evalctl: {run.suite_name}",
        "",
        f"**Completion: {percent(run.completion_rate)}** "
        # With repeats these are attempts (found by a newcomer: "3/6 tasks passed" for
        # two tasks run three times each); the Repeats line counts the tasks.
        f"({run.count('passed')}/{len(graded)} "
        f"{'attempts' if run.repeat > 1 else 'tasks'} passed"
        + (f"; {_count(errors, 'error')}, not counted" if errors else "")
        + (f"; {not_run} not run" if not_run else "") + ")",
        "",
    ]
    for name, rate in run.named_rates().items():
        lines.append(f"- Rate {name}: {percent(rate.value)} ({rate.passed}/{rate.total} "
                     "checks" + (f"; {_count(rate.errors, 'error')}" if rate.errors else "") + ")")
    judge = run.judge
    if judge.total or judge.errors:
        judge_usage, judge_cost = run.grader_usage()
        lines.append(f"- Judge (reported apart): {percent(judge.value)} "
                     f"({judge.passed}/{judge.total}"
                     + (f"; {judge.errors} could not judge" if judge.errors else "") + "); "
                     f"judge tokens {judge_usage.input_tokens} in, "
                     f"{judge_usage.output_tokens} out, cost {money(judge_cost)}")
    if run.repeat > 1:
        per_task = run.by_task()
        lines.append(f"- Repeats: {run.repeat} per task; "
                     f"pass@k {percent(run.pass_at_k(per_task))}, "
                     f"pass^k {percent(run.pass_hat_k(per_task))}; "
                     "completion is the per-attempt mean")
        flaky = [t.task_id for t in per_task if t.flaky]
        if flaky:
            lines.append(f"- Flaky (mixed outcomes): {', '.join(flaky)}")
    if run.regrade_of:
        lines.append(f"- Regrade of `{run.regrade_of.get('run_directory')}` (run started "
                     f"{run.regrade_of.get('started_at')}): the current checks on its kept "
                     "workspaces; no model was called, judges were not asked again")
    usage = run.usage
    base = run.agent.get("base")
    lines += [
        f"- Agent: {run.agent_label}" + (f" (a preset of {base})" if base and base !=
                                          run.agent.get("name") else ""),
        f"- Provider: {run.provider}" + (f" ({run.model})" if run.model else ""),
        f"- Tokens: {usage.input_tokens} in, {usage.output_tokens} out, "
        f"{usage.cache_read_tokens} cache read, {usage.cache_write_tokens} cache write; "
        f"cost {money(run.cost)}",
        f"- Suite: `{run.suite_path}` (sha256 {run.suite_sha256[:12]})",
    ]
    executor = run.executor
    if executor and executor.get("chosen_by", "default") != "default":  # chosen: say so
        options = ", ".join(f"{k}={v}" for k, v in sorted((executor.get("options") or {}
                                                            ).items()))
        lines.append(f"- Executor: {executor.get('name')}" + (f" ({options})" if options
                                                              else ""))
    if run.budget:
        budget = run.budget
        caps = ", ".join(part for part in (
            f"{money(budget['max_cost'])}" if budget.get("max_cost") is not None else "",
            f"{budget['max_tokens']} tokens" if budget.get("max_tokens") is not None else "")
            if part)
        lines.append(f"- Budget: {caps}; spent {money(budget.get('spent_cost'))}, "
                     f"{budget.get('spent_tokens')} tokens"
                     + ("; **reached**: tasks not run are marked" if budget.get("reached")
                        else ""))
    if run.interrupted:
        lines.append("- **The run was interrupted**; tasks not run are marked.")
    lines += [
        "",
        "| Task | Status | Failed checks | Exit | Turns | Tokens in/out | Cost | Time |",
        "|---|---|---|---|---:|---:|---:|---:|",
    ]
    for task in run.tasks:
        failed = [f"{c.type}: {c.detail}" for c in task.failed_checks()]
        if task.error and task.status == "error":
            failed.insert(0, task.error)
        elif task.status != "error":  # a grader error beside the failure that decided it
            failed += [f"⚠️ {c.type} (grader error): {c.detail}" for c in task.checks
                       if c.error]
        lines.append(
            f"| {_cell(run.label(task), 60)} | {STATUS_MARK.get(task.status, task.status)} | "
            f"{_cell('; '.join(failed)) or '—'} | {task.exit_status or '—'} | "
            f"{task.turns} | {task.usage.input_tokens}/{task.usage.output_tokens} | "
            f"{money(task.cost)} | {task.duration:.1f}s |")
    if errors:
        lines += ["", "### Errors (not failures: left out of completion)", "",
                  "| Task | Kind | What went wrong |", "|---|---|---|"]
        lines += [f"| {_cell(run.label(t), 60)} | {t.error_kind} | "
                  f"{_cell(t.error_detail(), 300)} |" for t in run.errors()]
    check_errors = run.check_errors()
    if check_errors:
        lines += ["", "### Grader errors in graded attempts (another check decided them)", "",
                  "| Task | Status | Check | What went wrong |", "|---|---|---|---|"]
        lines += [f"| {_cell(run.label(t), 60)} | {t.status} | {_cell(c.type, 60)} | "
                  f"{_cell(c.detail, 300)} |" for t, c in check_errors]
    judged = [(run.label(t), c) for t in run.tasks for c in t.judge_checks()]
    if judged:
        lines += ["", "### Judge verdicts (not part of completion)", "",
                  "| Task | Verdict | Reason |", "|---|---|---|"]
        lines += [f"| {_cell(label, 60)} | {'pass' if c.passed else 'fail'} | "
                  f"{_cell(c.detail)} |" for label, c in judged]
    if run.comparison is not None:  # a run with --baseline: the gate's verdict, as printed
        lines += ["", "#" + run.comparison.to_markdown().rstrip("\n")]
    return "\n".join(lines) + "\n"


def write_markdown(run: evalctl.RunResult, path: Path) -> Path:
    return evalctl.write_atomically(path, render(run))


@evalctl.hookimpl
def evalctl_register_reporters(register):
    register(evalctl.ReporterSpec(
        name="markdown", write=write_markdown, extension="md",
        description="A summary and a per-task table to paste into a pull request.",
    ))
