"""A newcomer's findings, round 20: a baseline overwritten by the run gated against it,
attempts counted as tasks in the Markdown report, a resume's refusal that named one
suite's path beside the other's hash, configuration mistakes counted as the agent's
failures, and what validate could have said before the run."""

from __future__ import annotations

import json

from .conftest import SUITES, run_cli


def test_a_report_written_over_its_own_baseline_is_refused_before_any_task(tmp_path):
    assert run_cli(tmp_path, "harness", "--report", "last.json").exit_code == 0
    before = (tmp_path / "last.json").read_bytes()
    refused = run_cli(tmp_path, "harness", "--baseline", "last.json", "--report", "last.json")
    assert refused.exit_code == 2, refused.output
    assert "--report last.json is the --baseline: the run would overwrite the report it is " \
           "gated against" in refused.output
    assert (tmp_path / "last.json").read_bytes() == before
    assert len(list((tmp_path / "eval_reports").glob("workspaces-*"))) == 1  # no new run
    # Through another name for the same file too.
    (tmp_path / "alias.json").symlink_to(tmp_path / "last.json")
    assert run_cli(tmp_path, "harness", "--baseline", "alias.json", "--report",
                   "last.json").exit_code == 2


def test_the_markdown_report_counts_attempts_as_attempts(tmp_path):
    result = run_cli(tmp_path, "harness", "--repeat", "2", "--reporter", "markdown")
    assert result.exit_code == 0, result.output
    markdown = next((tmp_path / "eval_reports").glob("report-*.md")).read_text()
    assert "**Completion: 100.0%** (10/10 attempts passed)" in markdown
    assert "- Repeats: 2 per task" in markdown
    single = run_cli(tmp_path, "harness", "--reporter", "markdown", "--report", "one.json")
    assert single.exit_code == 0
    one = max((tmp_path / "eval_reports").glob("report-*.md"), key=lambda p: p.stat().st_mtime)
    assert "(5/5 tasks passed)" in one.read_text()


def test_a_resume_given_another_suite_names_both(tmp_path):
    assert run_cli(tmp_path, "harness", "--report", "r.json").exit_code == 0
    run_dir = next((tmp_path / "eval_reports").glob("workspaces-*"))
    refused = run_cli(tmp_path, "core", "--resume", str(run_dir))
    assert refused.exit_code == 2
    header = json.loads((run_dir / "journal.jsonl").read_text().splitlines()[0])
    sha = header["suite"]["sha256"][:12]
    assert f"the suite: the run's was {SUITES / 'harness.yaml'} (sha256 {sha}), this one " \
           f"is {SUITES / 'core.yaml'}" in refused.output, refused.output
    assert "a resume needs no SUITE" in refused.output
