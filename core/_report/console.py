"""What a person sees while a run goes on: a live progress bar on a terminal, one
plain line per finished task otherwise, and a summary table at the end."""

from __future__ import annotations

import sys
from typing import Any

from evalctl._plugin.types import ExitStatus
from evalctl._report.results import RunResult, TaskResult
from evalctl._text import money, percent


class RunView:
    def __init__(self, total: int, stream: Any = None, repeat: int = 1):
        self.total = total
        self.repeat = repeat
        self.stream = stream or sys.stderr
        self.done = 0
        self.live = self.stream.isatty()
        self._progress: Any = None
        self._bar: Any = None

    def __enter__(self) -> RunView:
        if self.live:
            from rich.console import Console
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                TextColumn,
                TimeElapsedColumn,
            )

            self._progress = Progress(
                TextColumn("[bold]running"), BarColumn(), MofNCompleteColumn(),
                TextColumn("{task.fields[last]}"), TimeElapsedColumn(),
                console=Console(file=self.stream), transient=True)
            self._progress.__enter__()
            self._bar = self._progress.add_task("run", total=self.total, last="")
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._progress is not None:
            self._progress.__exit__(*exc)

    def update(self, event: str, task: Any, result: TaskResult | None) -> None:
        if event != "finish" or result is None:
            return
        self.done += 1
        name = task.id if self.repeat == 1 else f"{task.id} #{result.attempt}"
        line = f"[{self.done}/{self.total}] {result.status:<7} {name} " \
               f"({result.exit_status}, {result.duration:.1f}s)"
        if self._progress is not None:
            self._progress.update(self._bar, advance=1, last=f"{name}: {result.status}")
        else:
            print(line, file=self.stream, flush=True)

    def print_summary(self, run: RunResult) -> None:
        from rich.console import Console
        from rich.table import Table

        title = f"{run.suite_name}: completion {percent(run.completion_rate, 0)}" + "".join(
            f", {name} {percent(rate.value, 0)}" for name, rate in run.named_rates().items())
        if run.judge_rate is not None:
            title += f", judge {percent(run.judge_rate, 0)}"
        title += _stopped_early(run)
        table = Table(title=title)
        table.add_column("task", no_wrap=True)
        for column, justify in (("status", "left"), ("failed checks", "left"), ("exit", "left"),
                                ("turns", "right"), ("tokens", "right"), ("cost", "right"),
                                ("time", "right")):
            table.add_column(column, justify=justify)
        colors = {"passed": "green", "failed": "red", "error": "yellow", "not_run": "dim"}
        # A big run's table shows what needs a look (up to SUMMARY_ROWS rows) and counts
        # the rest: 10,000 rows cost seconds and nobody reads them; the reports have all.
        shown = run.tasks if len(run.tasks) <= SUMMARY_ROWS else \
            [t for t in run.tasks if not t.passed][:SUMMARY_ROWS]
        for task in shown:
            failed = ", ".join(c.type for c in task.failed_checks())
            tokens = task.usage.input_tokens + task.usage.output_tokens
            table.add_row(run.label(task), f"[{colors[task.status]}]{task.status}[/]",
                          failed or "-", task.exit_status or "-", str(task.turns), str(tokens),
                          money(task.cost), f"{task.duration:.1f}s")
        terminal = sys.stdout.isatty()
        console = Console(file=sys.stdout, width=None if terminal else 120)
        console.print(table)
        if len(shown) < len(run.tasks):
            console.print(f"({len(run.tasks) - len(shown)} more rows not shown: "
                          f"{run.count('passed')} passed attempts, and any failure past the "
                          f"first {SUMMARY_ROWS}; every row is in the reports)", highlight=False)
        console.print(summary_line(run), highlight=False)
        for task in run.errors():
            console.print(f"error ({task.error_kind}) {run.label(task)}: "
                          f"{task.error_detail()}", highlight=False, markup=False)
        for task, check in run.check_errors():
            console.print(f"grader error in {task.status} {run.label(task)}: {check.type}: "
                          f"{check.detail}", highlight=False, markup=False)
        # A CLI agent that exited non-zero failed (it is graded like any other), but why
        # it exited (a command not found, say) is the first thing to look at.
        exited = [t for t in run.tasks if t.status == "failed" and t.error
                  and t.exit_status == ExitStatus.AGENT_FAILED]
        for task in exited[:SUMMARY_AGENT_EXITS]:
            console.print(f"{task.exit_status} {run.label(task)}: {task.error}",
                          highlight=False, markup=False)
        if len(exited) > SUMMARY_AGENT_EXITS:
            console.print(f"({len(exited) - SUMMARY_AGENT_EXITS} more agents exited non-zero; "
                          "the reports say why)", highlight=False)


SUMMARY_ROWS = 50
SUMMARY_AGENT_EXITS = 10


def summary_line(run: RunResult) -> str:
    """How many passed, in words that say what was counted: with repeats, attempts and
    tasks are not the same thing; errors and attempts not run are counted apart."""
    passed = sum(1 for t in run.tasks if t.passed)
    apart = (f"; {len(run.errors())} in error, not counted" if run.errors() else "") + \
        (f"; {run.count('not_run')} not run" if run.count("not_run") else "")
    if run.repeat == 1:
        return f"{passed}/{len(run.graded())} tasks passed{apart}"
    per_task = run.by_task()
    every = sum(1 for t in per_task if t.pass_hat_k)
    some = sum(1 for t in per_task if t.pass_at_k)
    # pass^k is over the graded attempts: with some not run (a budget stop, Ctrl-C) or in
    # error, "passed every attempt" read as k of k when it was 2 of 3 (found by a newcomer).
    partly = sum(1 for t in per_task if t.ran < len(t.attempts))
    every_one = f"every graded attempt (pass^k; {partly} with attempts not graded)" \
        if partly else "every attempt (pass^k)"
    return (f"{passed}/{len(run.graded())} attempts passed; tasks: {every}/{len(per_task)} "
            f"passed {every_one}, {some}/{len(per_task)} at least one (pass@k){apart}")


def _stopped_early(run: RunResult) -> str:
    """For the title: that the rates are over part of the run, when some attempts did
    not run, and why (the title said "completion 100%" after a budget stop)."""
    not_run = run.count("not_run")
    if not not_run and not run.interrupted:
        return ""
    why = "interrupted" if run.interrupted else "budget reached" if \
        (run.budget or {}).get("reached") else "stopped early"
    return f" ({why}: {not_run} of {len(run.tasks)} attempts not run)" if not_run else \
        f" ({why})"
