"""What a person sees: a live progress bar on a terminal, plain lines otherwise."""

from __future__ import annotations

import io

from evalctl._report.console import RunView
from evalctl._report.results import TaskResult
from evalctl._suite.model import Task


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def _finish(view: RunView, task_id: str, status: str, attempt: int = 1) -> None:
    task = Task(id=task_id, prompt="p", checks=({"type": "file_exists", "path": "x"},))
    view.update("start", task, None)
    view.update("finish", task, TaskResult(task_id, status, exit_status="completed",
                                           duration=0.25, attempt=attempt))


def test_plain_lines_when_not_a_terminal():
    stream = io.StringIO()
    with RunView(2, stream) as view:
        _finish(view, "a", "passed")
        _finish(view, "b", "failed")
    assert stream.getvalue() == ("[1/2] passed  a (completed, 0.2s)\n"
                                 "[2/2] failed  b (completed, 0.2s)\n")


def test_a_progress_bar_on_a_terminal():
    stream = Terminal()
    with RunView(2, stream) as view:
        assert view.live
        _finish(view, "a", "passed")
        _finish(view, "b", "failed")
    output = stream.getvalue()
    assert "[1/2]" not in output  # no plain lines on a terminal
    assert "2/2" in output and "running" in output


def test_with_repeats_each_line_names_its_attempt():
    stream = io.StringIO()
    with RunView(2, stream, repeat=2) as view:
        _finish(view, "a", "passed", attempt=1)
        _finish(view, "a", "failed", attempt=2)
    assert stream.getvalue() == ("[1/2] passed  a #1 (completed, 0.2s)\n"
                                 "[2/2] failed  a #2 (completed, 0.2s)\n")


def _run(outcomes: dict[str, list[str]]):
    from evalctl._report.results import RunResult

    tasks = [TaskResult(task_id, status, attempt=n) for task_id, statuses in outcomes.items()
             for n, status in enumerate(statuses, 1)]
    repeat = max(len(s) for s in outcomes.values())
    return RunResult("s.yaml", "s", "0" * 64, "scripted", None, "", "", "0", {}, tasks,
                     repeat=repeat)


def test_the_summary_line_counts_attempts_and_tasks_apart_with_repeats(capsys):
    RunView(12).print_summary(_run({"a": ["passed"] * 3, "b": ["passed"] * 3,
                                   "c": ["passed", "failed", "passed"],
                                   "d": ["failed", "failed", "passed"]}))
    out = capsys.readouterr().out
    assert "9/12 attempts passed; tasks: 2/4 passed every attempt (pass^k), 4/4 at least " \
           "one (pass@k)" in out
    assert "tasks passed" not in out.replace("tasks: ", "")
    RunView(2).print_summary(_run({"a": ["passed"], "b": ["failed"]}))
    assert "1/2 tasks passed" in capsys.readouterr().out


def test_a_big_runs_summary_table_shows_what_needs_a_look_and_counts_the_rest(capsys):
    outcomes = {f"t{i:04d}": ["failed" if i % 100 == 7 else "passed"] for i in range(1000)}
    RunView(1000).print_summary(_run(outcomes))
    out = capsys.readouterr().out
    assert "t0007" in out and "t0907" in out  # every failure is a row
    assert "t0000" not in out  # passed attempts are counted, not listed
    assert "(990 more rows not shown: 990 passed attempts" in out
    assert "990/1000 tasks passed" in out
    RunView(3).print_summary(_run({"a": ["passed"], "b": ["passed"], "c": ["failed"]}))
    small = capsys.readouterr().out
    assert "a " in small and "more rows not shown" not in small
