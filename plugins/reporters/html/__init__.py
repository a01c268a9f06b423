"""`html`: one self-contained page per run, to read what the agent did.

An overview (completion and the other rates apart, errors apart, pass@k, tokens and
cost, pictures of outcomes by tag, duration and cost), a task table to filter and sort,
and a page per attempt with its prompt, checks, transcript and the changes it left
against the seed; with a baseline, the comparison and the evidence behind its verdict.
No network and no server: the file works from `file://` and as a CI artifact. The
rendering (Jinja2) is imported only when a report is written.
"""

from __future__ import annotations

from pathlib import Path

import evalctl


def write_html(run: evalctl.RunResult, path: Path) -> Path:
    from .render import render_report

    return evalctl.write_atomically(path, render_report(run, Path(path)))


@evalctl.hookimpl
def evalctl_register_reporters(register):
    register(evalctl.ReporterSpec(
        name="html", write=write_html, extension="html",
        description="One self-contained page: overview, task table, transcripts, diffs.",
    ))
