"""What a person sees: a live progress bar on a terminal, plain lines otherwise."""

from __future__ import annotations

import io

from evalctl._report.console import RunView
from evalctl._report.results import TaskResult
from evalctl._suite.model import Task


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def _finish(view: RunView, task_id: str, status: str) -> None:
    task = Task(id=task_id, prompt="p", checks=({"type": "file_exists", "path": "x"},))
    view.update("start", task, None)
    view.update("finish", task, TaskResult(task_id, status, exit_status="completed",
                                           duration=0.25))


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
