"""Reading a finished run back from what a user points at: a run directory, a JSON
report, or a directory of reports (the newest).

`read_run` is the one place that does it. A run directory is read from its journal
(`journal.jsonl`), so a run that was killed, or is still going, reads back as well as
a finished one; a run directory from before the journal is read through the JSON
report written beside it (`eval_reports/report-<time>.json` for
`eval_reports/workspaces-<time>/`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from evalctl._errors import UsageError
from evalctl._report.journal import build_run, journal_path, read_journal
from evalctl._report.results import RunResult, load_report

RUN_DIRECTORY_PREFIX = "workspaces-"
REPORT_PREFIX = "report-"


@dataclass(frozen=True)
class StoredRun:
    """A run read back, where it came from, and where reports derived from it go."""

    run: RunResult
    source: Path  # the file read; a derived report older than it is stale
    stem: Path  # derived reports are written to <stem>.<extension>
    problems: tuple[str, ...] = ()  # lines of a journal that could not be read

    def derived(self, extension: str) -> Path:
        return self.stem.with_name(f"{self.stem.name}.{extension}")


def read_run(path: Path) -> StoredRun:
    """The run at `path`: a JSON report, a run directory, or a directory of reports
    (its newest). A UsageError (exit 2) saying what to pass instead when there is none.

    A run directory moved together with its report (a CI artifact downloaded
    elsewhere) is found where it is now: the workspace and ledger paths the report
    recorded are rebased onto it.
    """
    path = Path(path)
    if path.is_dir() and journal_path(path).is_file():
        contents = read_journal(path)
        run = build_run(contents)
        _rebase_onto(run, path)
        stem = path.parent / f"{REPORT_PREFIX}{path.name.removeprefix(RUN_DIRECTORY_PREFIX)}"
        return StoredRun(run, contents.path, stem, tuple(contents.problems))
    if not path.is_dir():
        report = path  # a report, or a path load_report says it cannot read
    elif _is_run_directory(path):
        report = path.parent / f"{REPORT_PREFIX}{path.name.removeprefix(RUN_DIRECTORY_PREFIX)}.json"
        if not report.is_file():
            raise UsageError(f"{path}: no JSON report for this run (looked for {report}); "
                             "pass the report written with --report instead")
    else:
        reports = sorted(path.glob(f"{REPORT_PREFIX}*.json"), key=lambda p: p.stat().st_mtime)
        if not reports:
            raise UsageError(f"{path}: no run here (no {REPORT_PREFIX}*.json report, and not a "
                             "run directory); pass a run directory or a JSON report")
        report = reports[-1]
    run = load_report(report)
    _rebase(run, report.parent)
    return StoredRun(run, report, report.with_suffix(""))


def _is_run_directory(path: Path) -> bool:
    return path.name.startswith(RUN_DIRECTORY_PREFIX) or (path / ".ledgers").is_dir()


def _rebase(run: RunResult, report_dir: Path) -> None:
    """Point the recorded paths at the run directory beside the report when the
    recorded one is gone and a directory of the same name sits there instead."""
    recorded = run.run_directory
    if not recorded or Path(recorded).is_dir():
        return
    moved = report_dir / Path(recorded).name
    if moved.is_dir():
        _rebase_onto(run, moved)


def _rebase_onto(run: RunResult, moved: Path) -> None:
    """Point the recorded workspace and ledger paths at `moved`, where the run
    directory is now, when it was recorded somewhere else."""
    recorded = run.run_directory
    if not recorded or Path(recorded).resolve() == moved.resolve():
        return
    prefix = recorded.rstrip("/") + "/"
    for task in run.tasks:
        if task.workspace and task.workspace.startswith(prefix):
            task.workspace = str(moved / task.workspace[len(prefix):])
        if task.ledger and task.ledger.startswith(prefix):
            task.ledger = str(moved / task.ledger[len(prefix):])
    run.run_directory = str(moved.resolve())
