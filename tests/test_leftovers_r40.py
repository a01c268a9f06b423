"""Leftovers of earlier outside reviews (round 40): each reproduced first with a small
suite and the CLI, then fixed."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import evalctl

from .conftest import run_cli

JUNIT_XSD = Path(__file__).parent / "data" / "junit.xsd"

# A failed attempt whose second check cannot run (its interpreter was never made): the
# JSON report's check_errors[] has it; a passed attempt beside it.
CHECK_ERROR_SUITE = """\
name: leftovers
tasks:
  - id: check-err
    prompt: Write hello to a.txt.
    checks:
      - type: file_contains
        path: a.txt
        text: goodbye
      - type: tests_pass
        python: .venv/bin/python
    script:
      - text: I wrote it.
        tool_calls:
          - tool: write_file
            input:
              path: a.txt
              content: "hello\\n"
      - text: Done.
  - id: fine
    prompt: Write hello to b.txt.
    checks:
      - type: file_contains
        path: b.txt
        text: hello
    script:
      - tool_calls:
          - tool: write_file
            input:
              path: b.txt
              content: "hello\\n"
      - text: Wrote b.txt.
"""


def _report(where: Path, ext: str) -> Path:
    return next((where / "eval_reports").glob(f"report-*.{ext}"))


def _run_check_error_suite(tmp_path: Path) -> Path:
    (tmp_path / "suite.yaml").write_text(CHECK_ERROR_SUITE)
    result = run_cli(tmp_path, "suite.yaml", "--sandbox", "local", "--reporter", "junit",
                     "--reporter", "html", "--reporter", "markdown")
    assert result.exit_code == 1, result.output
    return tmp_path


def _run(tasks: list[evalctl.TaskResult]) -> evalctl.RunResult:
    return evalctl.RunResult("s.yaml", "s", "0" * 64, "scripted", None,
                             "2026-01-01T00:00:00+00:00", "2026-01-01T00:00:09+00:00", "0",
                             {}, tasks)


# ---- 1. a check that errored, in JUnit and HTML ----

def test_a_check_error_in_a_failed_attempt_is_in_junit_as_a_grader_error(tmp_path):
    import xmlschema

    where = _run_check_error_suite(tmp_path)
    report = json.loads(_report(where, "json").read_text())
    assert [(e["id"], e["type"]) for e in report["check_errors"]] == [("check-err",
                                                                      "tests_pass")]
    xml = _report(where, "xml")
    xmlschema.XMLSchema(str(JUNIT_XSD)).validate(str(xml))
    case = ET.parse(xml).getroot().find(".//testcase[@name='check-err']")
    assert case is not None
    failure = case.find("failure")
    assert failure is not None and failure.get("message") == (
        "1 check(s) failed: file_contains; 1 grader error(s), not failures: tests_pass")
    assert "tests_pass (grader error, not a failure): cannot run here" in (failure.text or "")
    err = case.find("system-err")
    assert err is not None and (err.text or "").startswith(
        "grader error in failed check-err: tests_pass: cannot run here: python: "
        ".venv/bin/python does not exist")
    out = case.find("system-out")
    assert out is not None and "[ERROR] tests_pass: cannot run here" in (out.text or "")
    assert "[FAIL] tests_pass" not in (out.text or "")
    fine = ET.parse(xml).getroot().find(".//testcase[@name='fine']")
    assert fine is not None and fine.find("system-err") is None


def test_a_judge_error_in_a_passed_attempt_is_in_junit_system_err_not_a_failure():
    from evalctl.plugins.reporters.junit import render

    judge = evalctl.CheckOutcome("judge", "judge", False, "judge unavailable: timed out",
                                 error=True)
    task = evalctl.TaskResult("a", "passed", checks=[
        evalctl.CheckOutcome("file_exists", "mechanical", True, "a.txt exists"), judge])
    root = ET.fromstring(render(_run([task])).split("\n", 1)[1])
    case = root.find(".//testcase")
    assert case is not None and case.find("failure") is None and case.find("error") is None
    err = case.find("system-err")
    assert err is not None and err.text == ("grader error in passed a: judge (judge, "
                                            "reported apart): judge unavailable: timed out")
    assert "[ERROR] judge judge: judge unavailable" in (case.findtext("system-out") or "")


def test_a_check_error_is_in_the_html_table_as_a_grader_error_not_a_failed_check(tmp_path):
    from evalctl.plugins.reporters.html.page import rows

    where = _run_check_error_suite(tmp_path)
    run = evalctl.RunResult.from_dict(json.loads(_report(where, "json").read_text()))
    row = next(r for r in rows(run) if r["key"] == "check-err")
    assert row["failed"] == ["file_contains"] and row["errored"] == ["tests_pass"]
    assert row["why"].startswith("file_contains: a.txt does not contain text 'goodbye'")
    assert "; ⚠ tests_pass (grader error): cannot run here" in row["why"]
    # A passed attempt with a judge that could not judge: said in its row too.
    judge = evalctl.CheckOutcome("judge", "judge", False, "judge unavailable", error=True)
    passed = rows(_run([evalctl.TaskResult("a", "passed", checks=[judge])]))[0]
    assert passed["why"] == "⚠ judge (grader error): judge unavailable"
    assert passed["failed"] == [] and passed["errored"] == ["judge"]
    html = _report(where, "html").read_text()
    assert '"errored": ["tests_pass"]' in html
    assert '" grader error"' in html  # the filter's and the task page's label


# ---- 2. JUnit times ----

def test_junit_suite_time_is_the_sum_of_its_testcases_times_as_written():
    from decimal import Decimal

    from evalctl.plugins.reporters.junit import render

    # Each rounds up to .002 (.0015 and .0016 are .002 at three places): the sum of the
    # rounded cases is .008, the rounded sum of the durations .006 (the testsuite said so).
    tasks = [evalctl.TaskResult(str(n), "passed", duration=d)
             for n, d in enumerate((0.0015, 0.0016, 0.0016, 0.0016))]
    tasks.append(evalctl.TaskResult("gone", "not_run", duration=float("nan")))
    root = ET.fromstring(render(_run(tasks)).split("\n", 1)[1])
    cases = [Decimal(c.get("time", "")) for c in root.iter("testcase")]
    assert cases == [Decimal("0.002")] * 4 + [Decimal("0.000")]
    suite = root.find("testsuite")
    assert suite is not None and suite.get("time") == "0.008" == root.get("time")
    assert Decimal(suite.get("time", "")) == sum(cases)


# ---- 3. the Markdown report's cut texts ----

def _markdown_of(detail: str) -> str:
    from evalctl.plugins.reporters.markdown import render

    check = evalctl.CheckOutcome("command", "mechanical", False, detail)
    return render(_run([evalctl.TaskResult("a", "failed", checks=[check])]))


def _failed_cell(markdown: str) -> str:
    row = next(line for line in markdown.splitlines() if line.startswith("| a |"))
    return row.split(" | ")[2]


def test_markdown_cuts_a_long_detail_at_a_word_boundary_with_an_ellipsis():
    detail = "expected the totals to match " + " ".join(f"word{n:02d}" for n in range(40))
    cell = _failed_cell(_markdown_of(detail))
    assert cell.endswith("…") and len(cell) <= 120
    assert detail.startswith(cell[:-1].removeprefix("command: "))
    assert cell[:-1].split(" ")[-1] in detail.split(" ")  # a whole word ends it


def test_markdown_never_cuts_inside_an_escape_of_the_agents_text():
    detail = r"\x1b" * 60  # one long word: cut between characters
    cell = _failed_cell(_markdown_of(detail))
    assert cell.endswith("…")
    kept = cell[:-1].removeprefix("command: ").replace("\\\\", "\\")
    assert kept and kept == r"\x1b" * (len(kept) // 4)


def test_markdown_never_leaves_a_code_span_open_when_it_cuts():
    detail = ("the script ran out: add a final text turn " + "x" * 50
              + " `- text: ... without tool calls, at the end of the script` to end it")
    cell = _failed_cell(_markdown_of(detail))
    assert cell.endswith("…") and cell.count("`") % 2 == 0
    assert cell == "command: the script ran out: add a final text turn " + "x" * 50 + "…"


# ---- 5. a plugin the run used, uninstalled since ----

WORDS_SUITE = """\
name: words
tasks:
  - id: one
    prompt: Write two words to a.txt.
    checks:
      - type: word_counted
    script:
      - tool_calls:
          - tool: write_file
            input:
              path: a.txt
              content: "two words\\n"
      - text: Wrote a.txt.
  - id: two
    prompt: Write two words to b.txt.
    checks:
      - type: word_counted
    script:
      - text: Done.
"""


def _word_counting_plugin() -> object:
    import types

    def grade(check, workspace, result):
        return evalctl.CheckResult(True, "counted")

    @evalctl.hookimpl
    def evalctl_register_graders(register):
        register(evalctl.GraderSpec(name="word_counted", grade=grade))

    plugin = types.ModuleType("wordcounting")
    plugin.evalctl_register_graders = evalctl_register_graders  # type: ignore[attr-defined]
    return plugin


def test_regrade_and_resume_name_a_plugin_the_run_used_that_is_gone(tmp_path):
    from click.testing import CliRunner

    from evalctl._cli import cli
    from evalctl._plugin.registry import set_registry

    from .conftest import registry_with

    set_registry(registry_with(("wordcounting", _word_counting_plugin())))
    (tmp_path / "suite.yaml").write_text(WORDS_SUITE)
    result = run_cli(tmp_path, "suite.yaml", "--sandbox", "local")
    assert result.exit_code == 0, result.output
    run_dir = next((tmp_path / "eval_reports").glob("workspaces-*"))
    report = json.loads(_report(tmp_path, "json").read_text())
    assert report["plugins"]["wordcounting"] == "1.0"
    assert report["plugin_distributions"]["wordcounting"] == "test-dist"
    journal = run_dir / "journal.jsonl"
    journal.write_text("".join(journal.read_text().splitlines(keepends=True)[:2]))

    set_registry(None)  # the plugin is uninstalled
    said = ("was made with 1 plugin(s) not installed now: wordcounting (test-dist 1.0); "
            "what is unknown above may be theirs")
    regrade = CliRunner().invoke(cli, ["regrade", str(run_dir)])
    assert regrade.exit_code == 2
    assert "unknown grader 'word_counted'" in regrade.output and said in regrade.output
    resume = run_cli(tmp_path, "--resume", str(run_dir))
    assert resume.exit_code == 2
    assert "unknown grader 'word_counted'" in resume.output and said in resume.output
    # Installed again, nothing is said of it.
    set_registry(registry_with(("wordcounting", _word_counting_plugin())))
    again = CliRunner().invoke(cli, ["regrade", str(run_dir)])
    assert again.exit_code == 1, again.output  # the attempt cut from the journal: not run
    assert "regraded 1 attempt(s)" in again.output
    assert "not installed now" not in again.output


# ---- 4. --resume of a run that had finished ----

DONE_SUITE = """\
name: done
tasks:
  - id: one
    prompt: Write hi to a.txt.
    checks:
      - type: file_contains
        path: a.txt
        text: hi
    script:
      - tool_calls:
          - tool: write_file
            input:
              path: a.txt
              content: "hi\\n"
      - text: Wrote a.txt.
"""


def test_resume_of_a_finished_run_says_it_is_complete_and_reports_its_results(tmp_path):
    (tmp_path / "suite.yaml").write_text(DONE_SUITE)
    assert run_cli(tmp_path, "suite.yaml", "--sandbox", "local").exit_code == 0
    run_dir = next((tmp_path / "eval_reports").glob("workspaces-*"))
    result = run_cli(tmp_path, "--resume", str(run_dir))
    assert result.exit_code == 0, result.output
    assert (f"resuming {run_dir.resolve()}: 0 of 1 attempt(s) to run: the run is already "
            "complete (every attempt has a result): its results follow") in result.output
    assert "1/1 tasks passed" in result.output and "0/0" not in result.output
    report = json.loads(_report(tmp_path, "json").read_text())
    assert [(t["id"], t["status"]) for t in report["tasks"]] == [("one", "passed")]


# ---- 6. script_error: the suite's mistake, an error and never a failure ----

RUNS_OUT_SUITE = """\
name: runs-out
tasks:
  - id: runs-out
    prompt: Write hello to b.txt.
    checks:
      - type: file_contains
        path: b.txt
        text: hello
    script:
      - text: I will write it.
        tool_calls:
          - tool: write_file
            input:
              path: b.txt
              content: "hello\\n"
  - id: fine
    prompt: Write hello to c.txt.
    checks:
      - type: file_contains
        path: c.txt
        text: hello
    script:
      - tool_calls:
          - tool: write_file
            input:
              path: c.txt
              content: "hello\\n"
      - text: Wrote c.txt.
"""


def test_a_script_that_runs_out_is_an_error_with_the_suites_fix_not_a_failure(tmp_path):
    (tmp_path / "suite.yaml").write_text(RUNS_OUT_SUITE)
    result = run_cli(tmp_path, "suite.yaml", "--sandbox", "local")
    assert result.exit_code == 1  # an attempt in error, as documented
    report = json.loads(_report(tmp_path, "json").read_text())
    task = next(t for t in report["tasks"] if t["id"] == "runs-out")
    # Its check passed, yet it is no pass: the script, not the agent, ended it.
    assert (task["status"], task["exit_status"], task["error_kind"]) == (
        "error", "script_error", "provider")
    assert [c["passed"] for c in task["checks"]] == [True]
    summary = report["summary"]
    assert summary["completion_rate"] == 1.0  # the other task, alone
    assert (summary["passed"], summary["failed"], summary["errors"]) == (1, 0, 1)
    (error,) = report["errors"]
    assert "add a final text turn" in error["detail"]
    assert "correct the task's script and start a new run" in error["remedy"]
    assert "--retry-errors would run the same script again" in error["remedy"]
