"""The run journal: nothing a finished attempt did is lost, whatever ends the run;
`evalctl run --resume` continues it and `evalctl report` re-renders it."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from evalctl._report.journal import JOURNAL_NAME, read_journal

from .conftest import environment_without_evalctl_settings, run_cli

QUICK = """\
- id: {id}
  prompt: Write {id}.txt.
  checks:
    - type: file_contains
      path: {id}.txt
      text: done
  script:
    - tool_calls:
        - tool: write_file
          input:
            path: {id}.txt
            content: done
    - text: Wrote {id}.txt.
"""

# Sleeps while the flag file exists (the first session), so it is still running when
# the run is killed; writes its shell's pid first so the test can end what it started.
SLOW = """\
- id: {id}
  prompt: Write {id}.txt after a while.
  checks:
    - type: file_contains
      path: {id}.txt
      text: done
  script:
    - tool_calls:
        - tool: bash
          input:
            command: echo $$ >> {pids}; if [ -e {flag} ]; then sleep 60; fi; echo done > {id}.txt
    - text: Wrote {id}.txt.
"""


def journal_lines(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / JOURNAL_NAME).read_text().splitlines()]


def attempt_ids(run_dir: Path) -> list[str]:
    return [r["result"]["id"] for r in journal_lines(run_dir) if r["kind"] == "attempt"]


def evalctl(*args: str, cwd: Path, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "evalctl", *args], cwd=cwd, text=True,
                          capture_output=True, timeout=timeout,
                          env=environment_without_evalctl_settings())


def test_a_run_killed_with_sigkill_resumes_without_rerunning_what_finished(tmp_path):
    flag, pids = tmp_path / "slow-flag", tmp_path / "slow.pids"
    flag.write_text("")
    suite = tmp_path / "suite.yaml"
    suite.write_text("".join(QUICK.format(id=f"quick-{i}") for i in range(1, 4))
                     + "".join(SLOW.format(id=f"slow-{i}", flag=flag, pids=pids)
                               for i in range(1, 3)))
    process = subprocess.Popen(
        # local: the slow commands reach the flag and pid files outside their workspaces
        [sys.executable, "-m", "evalctl", "run", str(suite), "--concurrency", "5",
         "--reporter", "json", "--sandbox", "local"], cwd=tmp_path, text=True,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=environment_without_evalctl_settings())
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            runs = list((tmp_path / "eval_reports").glob("workspaces-*"))
            if runs and (runs[0] / JOURNAL_NAME).exists() and len(attempt_ids(runs[0])) == 3 \
                    and pids.exists() and len(pids.read_text().split()) == 2:
                break
            time.sleep(0.05)
        else:
            pytest.fail("the run never reached the point to kill it")
        process.send_signal(signal.SIGKILL)
        process.communicate(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate(timeout=30)
        for pid in pids.read_text().split() if pids.exists() else ():
            # The killed run's sleeping commands (their own sessions) are ours to end.
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(int(pid), signal.SIGKILL)
    assert process.returncode == -signal.SIGKILL
    run_dir = runs[0]
    assert not list((tmp_path / "eval_reports").glob("report-*"))  # it never got that far
    assert sorted(attempt_ids(run_dir)) == ["quick-1", "quick-2", "quick-3"]

    # What was journaled can be reported right away, the rest as not run.
    shown = evalctl("report", str(run_dir), "--reporter", "json", cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    killed = json.loads(next((tmp_path / "eval_reports").glob("report-*.json")).read_text())
    assert [(t["id"], t["status"]) for t in killed["tasks"]] == [
        ("quick-1", "passed"), ("quick-2", "passed"), ("quick-3", "passed"),
        ("slow-1", "not_run"), ("slow-2", "not_run")]
    assert killed["interrupted"] is True
    assert "evalctl run --resume" in killed["tasks"][3]["error"]
    assert killed["tasks"][3]["exit_status"] == "aborted"  # it had started

    flag.unlink()
    resumed = evalctl("run", "--resume", str(run_dir), "--reporter", "json", cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert "2 of 5 attempt(s) to run" in resumed.stderr
    report = json.loads(next((tmp_path / "eval_reports").glob("report-*.json")).read_text())
    assert [(t["id"], t["status"]) for t in report["tasks"]] == [
        ("quick-1", "passed"), ("quick-2", "passed"), ("quick-3", "passed"),
        ("slow-1", "passed"), ("slow-2", "passed")]
    assert report["summary"]["total"] == 5 and report["summary"]["completion_rate"] == 1.0
    assert report["interrupted"] is False
    # Each attempt journaled exactly once: the finished ones were not run again.
    assert sorted(attempt_ids(run_dir)) == ["quick-1", "quick-2", "quick-3", "slow-1", "slow-2"]
    for quick in ("quick-1", "quick-2", "quick-3"):
        ledger = (run_dir / ".ledgers" / f"{quick}.jsonl").read_text()
        assert ledger.count('"task_start"') == 1
    # The killed attempts' first tries are kept, moved aside, not overwritten.
    retired = run_dir / ".retired" / "session-1" / "slow-1"
    assert (retired / "ledger.jsonl").read_text().count('"task_start"') == 1
    assert (run_dir / "slow-1" / "slow-1.txt").read_text() == "done\n"


SUITE = "".join(QUICK.format(id=name) for name in ("one", "two"))


def test_reports_are_rendered_from_the_journal_and_can_be_rendered_again(tmp_path):
    (tmp_path / "suite.yaml").write_text(SUITE)
    result = run_cli(tmp_path, "suite.yaml", "--report", "first.json")
    assert result.exit_code == 0, result.output
    run_dir = next((tmp_path / "eval_reports").glob("workspaces-*"))
    records = journal_lines(run_dir)
    assert [r["kind"] for r in records] == ["run", "attempt", "attempt", "end"]
    assert records[0]["format"] == "evalctl-journal/1"

    from click.testing import CliRunner

    from evalctl._cli import cli

    again = CliRunner().invoke(cli, ["report", str(run_dir), "--reporter", "junit",
                                     "--report", str(tmp_path / "again.json")])
    assert again.exit_code == 0, again.output
    assert (tmp_path / "first.json").read_text() == (tmp_path / "again.json").read_text()
    assert list((tmp_path / "eval_reports").glob("report-*.xml"))


def test_report_of_a_directory_without_a_journal_is_a_usage_error(tmp_path):
    from click.testing import CliRunner

    from evalctl._cli import cli

    result = CliRunner().invoke(cli, ["report", str(tmp_path)])
    assert result.exit_code == 2
    assert "no run here" in result.output


def _finished_run(tmp_path: Path, text: str = SUITE, *args: str) -> Path:
    (tmp_path / "suite.yaml").write_text(text)
    result = run_cli(tmp_path, "suite.yaml", "--reporter", "json", *args)
    assert result.exit_code in (0, 1), result.output
    return next((tmp_path / "eval_reports").glob("workspaces-*"))


def test_a_torn_last_line_is_ignored_and_a_corrupt_one_is_rerun(tmp_path):
    run_dir = _finished_run(tmp_path)
    journal = run_dir / JOURNAL_NAME
    lines = journal.read_text().splitlines(keepends=True)
    kept = json.loads(lines[1])["result"]["id"]  # attempts finish in either order
    # The second attempt's line mangled, the end line cut short mid-write.
    lines[2] = lines[2][:40] + "\n"
    journal.write_text("".join(lines[:3]) + lines[3][:25])
    contents = read_journal(run_dir)
    assert len(contents.problems) == 2
    assert "a line cut short" in contents.problems[0]
    assert f"{journal}:3: unreadable line skipped" in contents.problems[1]
    assert list(contents.results) == [(kept, 1)]

    result = run_cli(tmp_path, "--resume", str(run_dir), "--report", "r.json")
    assert result.exit_code == 0, result.output
    assert "unreadable line skipped" in result.output
    report = json.loads((tmp_path / "r.json").read_text())
    assert [(t["id"], t["status"]) for t in report["tasks"]] == [("one", "passed"),
                                                                 ("two", "passed")]
    # The torn tail was cut before appending: every line of the journal is whole JSON
    # except the mangled one, which stays as it was.
    kinds = []
    for number, line in enumerate(journal.read_text().splitlines(), start=1):
        if number == 3:
            continue
        kinds.append(json.loads(line)["kind"])
    assert kinds == ["run", "attempt", "resume", "retired", "attempt", "end"]


ERRORING = SUITE + """\
- id: flaky-infra
  prompt: p
  checks:
    - type: file_exists
      path: x
  script:
    - tool_calls:
        - tool: glob
          input:
            pattern: "*"
"""


def test_retry_errors_reruns_only_the_errors_and_counts_each_attempt_once(tmp_path):
    run_dir = _finished_run(tmp_path, ERRORING)
    first = read_journal(run_dir)
    assert first.results[("flaky-infra", 1)].status == "error"

    plain = run_cli(tmp_path, "--resume", str(run_dir), "--report", "plain.json")
    assert "0 of 3 attempt(s) to run" in plain.output
    assert attempt_ids(run_dir).count("flaky-infra") == 1

    result = run_cli(tmp_path, "--resume", str(run_dir), "--retry-errors", "--report", "r.json")
    assert "1 of 3 attempt(s) to run" in result.output
    assert attempt_ids(run_dir).count("flaky-infra") == 2  # the retry, journaled
    assert attempt_ids(run_dir).count("one") == 1
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["summary"]["total"] == 3 and report["summary"]["errors"] == 1
    assert [t["id"] for t in report["tasks"]] == ["one", "two", "flaky-infra"]
    assert (run_dir / ".retired" / "session-2" / "flaky-infra" / "workspace").is_dir()


def test_resume_refuses_what_changed(tmp_path):
    run_dir = _finished_run(tmp_path)
    refused = run_cli(tmp_path, "--resume", str(run_dir), "--repeat", "2", "--model", "m")
    assert refused.exit_code == 2
    assert "options differ from the journaled run's" in refused.output
    assert "repeat: 1 -> 2" in refused.output and 'model: null -> "m"' in refused.output

    (tmp_path / "suite.yaml").write_text(SUITE.replace("Write one.txt", "Write one.txt now"))
    changed = run_cli(tmp_path, "--resume", str(run_dir))
    assert changed.exit_code == 2
    assert "it was run with something else" in changed.output
    assert "the suite" in changed.output and "sha256" in changed.output

    journal = run_dir / JOURNAL_NAME
    lines = journal.read_text().splitlines(keepends=True)
    header = json.loads(lines[0])
    header["plugins"]["files"] = "0.0.1"
    header["evalctl_version"] = "0.0.0"
    journal.write_text(json.dumps(header) + "\n" + "".join(lines[1:]))
    (tmp_path / "suite.yaml").write_text(SUITE)
    versions = run_cli(tmp_path, "--resume", str(run_dir))
    assert versions.exit_code == 2
    assert "evalctl: 0.0.0 -> " in versions.output
    assert 'plugin files: "0.0.1" -> "0.1.0"' in versions.output


def test_resume_needs_a_run_directory(tmp_path):
    result = run_cli(tmp_path, "--resume", str(tmp_path))
    assert result.exit_code == 2 and "no journal.jsonl" in result.output
    neither = run_cli(tmp_path)
    assert neither.exit_code == 2 and "give a SUITE to run, or --resume" in neither.output
    retry = run_cli(tmp_path, "suite.yaml", "--retry-errors")
    assert retry.exit_code == 2 and "--retry-errors works with --resume" in retry.output


def test_a_journal_that_cannot_be_written_costs_durability_not_the_run(tmp_path, monkeypatch):
    from evalctl._report import journal as journal_module

    def disk_full(descriptor):
        raise OSError(28, "No space left on device")

    (tmp_path / "suite.yaml").write_text(SUITE)
    monkeypatch.setattr(journal_module.os, "fsync", disk_full)
    result = run_cli(tmp_path, "suite.yaml", "--report", "r.json")
    assert result.exit_code == 0, result.output
    assert "warning: the journal stopped being written (cannot write" in result.output
    assert "No space left on device" in result.output
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["summary"]["passed"] == 2


def test_a_moved_run_directory_is_read_from_its_journal_where_it_is_now(tmp_path):
    import shutil

    from evalctl._report.rundir import read_run

    run_dir = _finished_run(tmp_path)
    moved = tmp_path / "artifact" / run_dir.name  # downloaded elsewhere, no report beside it
    shutil.copytree(run_dir, moved, symlinks=True)
    shutil.rmtree(run_dir)
    stored = read_run(moved)
    assert stored.source == moved / JOURNAL_NAME
    assert [(t.task_id, t.status) for t in stored.run.tasks] == [("one", "passed"),
                                                                  ("two", "passed")]
    for task in stored.run.tasks:
        assert Path(task.ledger).is_file() and Path(task.ledger).is_relative_to(moved)
    assert Path(stored.run.run_directory) == moved.resolve()


def test_the_journal_keeps_the_agent_and_resume_refuses_another(tmp_path):
    run_dir = _finished_run(tmp_path, SUITE, "--agent-option", "version=7")
    assert journal_lines(run_dir)[0]["agent"] == {
        "name": "evalctl", "base": "evalctl", "version": "7", "options": {},
        "chosen_by": "default"}

    from click.testing import CliRunner

    from evalctl._cli import cli

    again = CliRunner().invoke(cli, ["report", str(run_dir), "--reporter", "markdown",
                                     "--report", str(tmp_path / "again.json")])
    assert again.exit_code == 0, again.output
    report = json.loads((tmp_path / "again.json").read_text())
    assert report["agent"]["name"] == "evalctl" and report["agent"]["version"] == "7"
    markdown = next((tmp_path / "eval_reports").glob("report-*.md")).read_text()
    assert "- Agent: evalctl 7" in markdown

    other = run_cli(tmp_path, "--resume", str(run_dir), "--agent", "command",
                    "--agent-option", "argv=my-cli {prompt}")
    assert other.exit_code == 2
    assert 'agent: null -> "command"' in other.output
    assert "agent_options" in other.output and "my-cli {prompt}" in other.output

    # The same flags, but the agent resolves to something else now (a new version).
    journal = run_dir / JOURNAL_NAME
    lines = journal.read_text().splitlines(keepends=True)
    header = json.loads(lines[0])
    header["agent"]["version"] = "6"
    journal.write_text(json.dumps(header) + "\n" + "".join(lines[1:]))
    newer = run_cli(tmp_path, "--resume", str(run_dir))
    assert newer.exit_code == 2
    assert "the agent differs from the journaled run's" in newer.output
    assert "'version': '6'" in newer.output and "'version': '7'" in newer.output


def test_a_run_directory_is_run_by_one_evalctl_at_a_time(tmp_path):
    """Found by a newcomer: `run --resume` of a run still going moved its live attempts'
    workspaces aside, graded a correct agent's work as failed and ran every attempt
    twice. The session running a run holds its journal locked; a resume is refused
    (exit 2) before it touches anything, and one racing past that check stops at the
    lock, as does one whose journal grew between its reading and the lock."""
    import fcntl

    from evalctl._errors import UsageError
    from evalctl._report.journal import Journal

    run_dir = _finished_run(tmp_path, "".join(QUICK.format(id=name) for name in ("one",)))
    journal = run_dir / JOURNAL_NAME
    lines = journal.read_text().splitlines(keepends=True)
    journal.write_text("".join(lines[:1]))  # as if killed before its attempt finished
    before = journal.read_bytes()
    with open(journal, "rb") as held:  # another evalctl running it
        fcntl.flock(held.fileno(), fcntl.LOCK_EX)
        refused = run_cli(tmp_path, "--resume", str(run_dir))
        assert refused.exit_code == 2, refused.output
        assert "is being run by another evalctl now" in refused.output
        assert journal.read_bytes() == before
        assert not (run_dir / ".retired").exists()  # nothing moved aside
        with pytest.raises(UsageError, match="is being run by another evalctl now"):
            Journal.reopen(read_journal(run_dir), {})
        assert journal.read_bytes() == before

    contents = read_journal(run_dir)
    with open(journal, "ab") as other:  # another session appended after the reading
        other.write(b'{"kind": "end", "at": "x", "interrupted": true}\n')
    grown = journal.read_bytes()
    with pytest.raises(UsageError, match="changed while this resume was starting"):
        Journal.reopen(contents, {})
    assert journal.read_bytes() == grown  # not cut back to what was read

    resumed = run_cli(tmp_path, "--resume", str(run_dir))  # unlocked: it goes on
    assert resumed.exit_code == 0, resumed.output
    assert attempt_ids(run_dir) == ["one"]


def test_a_resume_keeps_the_runs_concurrency_unless_given_another(tmp_path):
    """Found by a newcomer: a run at --concurrency 1 resumed at the default, running
    every attempt at once (against a live provider's rate limit)."""
    run_dir = _finished_run(tmp_path, SUITE, "--concurrency", "1")
    assert journal_lines(run_dir)[0]["options"]["concurrency"] == 1
    journal = run_dir / JOURNAL_NAME
    journal.write_text(journal.read_text().splitlines(keepends=True)[0])
    assert read_journal(run_dir).concurrency == 1
    resumed = run_cli(tmp_path, "--resume", str(run_dir))
    assert resumed.exit_code == 0, resumed.output
    resumes = [line for line in journal_lines(run_dir) if line["kind"] == "resume"]
    assert [line["concurrency"] for line in resumes] == [1]
    journal.write_text("".join(line for line in journal.read_text().splitlines(keepends=True)
                               if '"kind": "attempt"' not in line))  # killed again
    again = run_cli(tmp_path, "--resume", str(run_dir), "--concurrency", "3")
    assert again.exit_code == 0, again.output
    resumes = [line for line in journal_lines(run_dir) if line["kind"] == "resume"]
    assert [line["concurrency"] for line in resumes] == [1, 3]
    assert read_journal(run_dir).concurrency == 3


def test_a_resume_retires_beside_what_an_earlier_session_of_the_same_number_left(tmp_path):
    """A resume line torn by a crash numbers the next session the same as that one: its
    retiring met `.retired/session-1/<attempt>` taken and stopped the whole run
    ("Directory not empty")."""
    run_dir = _finished_run(tmp_path, "".join(QUICK.format(id=name) for name in ("one",)))
    journal = run_dir / JOURNAL_NAME
    journal.write_text(journal.read_text().splitlines(keepends=True)[0])  # killed
    taken = run_dir / ".retired" / "session-1" / "one"
    (taken / "workspace").mkdir(parents=True)
    (taken / "workspace" / "kept.txt").write_text("an earlier session's")
    resumed = run_cli(tmp_path, "--resume", str(run_dir))
    assert resumed.exit_code == 0, resumed.output
    assert (taken / "workspace" / "kept.txt").read_text() == "an earlier session's"
    assert (taken.with_name("one.2") / "workspace" / "one.txt").read_text() == "done"
    assert attempt_ids(run_dir) == ["one"]


@contextlib.contextmanager
def _read_only(directory: Path):
    """`directory`, read-only while the block runs: a read-only bind mount of it as root
    (whom file modes do not stop; CI runs as root), its modes otherwise."""
    if os.geteuid() == 0:
        subprocess.run(["mount", "--bind", str(directory), str(directory)], check=True)
        try:
            subprocess.run(["mount", "-o", "remount,ro,bind", str(directory)], check=True)
            yield
        finally:
            subprocess.run(["umount", str(directory)], check=True)
        return
    changed = [path for path in (directory, *directory.rglob("*"))
               if not path.is_symlink() and path.is_dir() or path.name == JOURNAL_NAME]
    modes = {path: path.stat().st_mode for path in changed}
    for path in changed:
        path.chmod(modes[path] & ~0o222)
    try:
        yield
    finally:
        for path in changed:
            path.chmod(modes[path])


def test_a_run_that_cannot_be_written_is_refused_before_a_resume_and_viewed_elsewhere(
        tmp_path, monkeypatch):
    """Found by a tester: `run --resume` of a run on a read-only file system said
    "resuming ... 1 of 2", then ended in a traceback (OSError: Read-only file system)
    with exit 1, and `evalctl view` of it in another. The resume is now refused, exit 2,
    before anything runs; view renders the page into a private temporary directory."""
    import tempfile

    from click.testing import CliRunner

    from evalctl._cli import cli

    run_dir = _finished_run(tmp_path)
    journal = run_dir / JOURNAL_NAME
    lines = journal.read_text().splitlines(keepends=True)
    journal.write_text("".join(lines[:2]))  # the header and one attempt: one left to run
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    before = journal.read_bytes()
    with _read_only(tmp_path / "eval_reports"):
        resumed = run_cli(tmp_path, "--resume", str(run_dir))
        viewed = CliRunner().invoke(cli, ["view", str(run_dir), "--no-open"])
    assert resumed.exit_code == 2, resumed.output
    assert "cannot continue this run: its journal cannot be written" in resumed.output
    assert f"evalctl report {run_dir} --out DIR" in resumed.output
    assert "resuming" not in resumed.output
    assert isinstance(resumed.exception, SystemExit), resumed.exception  # not an OSError
    assert journal.read_bytes() == before
    assert viewed.exit_code == 0, viewed.output
    assert "cannot be written" in viewed.output
    page = tmp_path / "tmp" / f"evalctl-view-{os.getuid()}" / \
        f"report-{run_dir.name.removeprefix('workspaces-')}.html"
    assert f"wrote {page}" in viewed.output and page.is_file()


def test_a_journal_that_is_a_fifo_is_refused_not_waited_on(tmp_path):
    """Found by a tester: a `journal.jsonl` that is a FIFO left `run --resume` waiting
    for ever (on the opening of the FIFO). It is refused as not a journal, exit 2."""
    from evalctl._errors import UsageError
    from evalctl._report.journal import check_resumable, journal_in_use

    run_dir = tmp_path / "fifo"
    run_dir.mkdir()
    os.mkfifo(run_dir / JOURNAL_NAME)
    with pytest.raises(UsageError, match="not a regular file"):
        read_journal(run_dir)
    assert journal_in_use(run_dir) is False
    with pytest.raises(UsageError, match="cannot continue this run"):
        check_resumable(run_dir)
    resumed = evalctl("run", "--resume", str(run_dir), cwd=tmp_path, timeout=60)
    assert resumed.returncode == 2, resumed.stderr
    assert "not a regular file" in resumed.stderr and "Traceback" not in resumed.stderr
