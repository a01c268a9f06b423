"""Found by a newcomer (round 40), writing a bug-fix suite from the README alone: an
empty suite validated clean and `run` then blamed an --only/--tag selection nobody gave;
an empty file name was said to end with '/'; `timeout: 0` was "less than or equal to
the minimum of 0"; `evalctl run suite.yml` beside suite.yaml offered nothing, and a
directory's suite.yaml was looked for among its first three YAML files only; `compare
eval_reports now.json` did not say which report it read; `evalctl script` had no
did-you-mean; a `|` block whose lines were not indented made other files silently; a
seeded `./a.py` was refused without the name to write; `evalctl view` after `--out`
said there were no runs; a check's `~/a.py` was told it had '..' or was absolute; JUnit
said [FAIL] for a check that could not run; `--max-drop 5` was not told it is a
fraction."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from evalctl._cli import cli
from evalctl._suite.loader import validate_suite

from .conftest import run_cli

HELLO = """\
- id: hello
  prompt: Write hello.txt.
  checks:
    - type: file_exists
      path: hello.txt
  script:
    - tool_calls:
        - tool: write_file
          input:
            path: hello.txt
            content: hi
    - text: Wrote hello.txt.
"""

# --------------------------------- 1: a suite with no tasks is refused by validate too


@pytest.mark.parametrize(("text", "line"), [("[]\n", 1), ("name: x\ntasks: []\n", 2)])
def test_a_suite_with_no_tasks_is_an_error_at_its_line(write_suite, text, line):
    suite = write_suite(text)
    problems = validate_suite(suite)
    assert [(p.line, p.severity, p.message) for p in problems] == [
        (line, "error", "the suite has no tasks: add at least one (- id: ..., prompt: ..., "
                        "checks: ...)")]


def test_run_of_a_suite_with_no_tasks_does_not_blame_a_selection(tmp_path, write_suite):
    write_suite("name: x\ntasks: []\n")
    result = run_cli(tmp_path, "suite.yaml", "--sandbox", "local")
    assert result.exit_code == 2, result.output
    assert "suite.yaml:2: error: the suite has no tasks" in result.output
    assert "--only/--tag" not in result.output


# --------------------------------- 2: an empty file name is said to be empty


def test_an_empty_file_name_is_not_said_to_end_with_a_slash(write_suite):
    """`"": text` under files: was refused as "it ends with '/'", which it does not."""
    suite = write_suite('- id: t\n  prompt: p\n  files:\n    "": x\n    a/: y\n'
                        "  checks:\n    - type: file_exists\n      path: a.txt\n")
    messages = {p.line: p.message for p in validate_suite(suite)}
    assert messages[4] == "task 't', 'files': '' must name a file: it is empty (write the " \
                          "file's path, e.g. 'dir/a.txt')"
    assert messages[5].endswith("'a/' must name a file: it ends with '/' (write the file's "
                                "path, e.g. 'dir/a.txt')")


# --------------------------------- 3: a bound a value must be past says so


def test_a_value_at_an_exclusive_bound_is_told_it_must_be_past_it(write_suite):
    """`timeout: 0` was answered "0 is less than or equal to the minimum of 0", which
    reads as if 0 were the lowest value allowed."""
    suite = write_suite("- id: t\n  prompt: p\n  limits:\n    seconds: -1\n  checks:\n"
                        "    - type: command\n      command: 'true'\n      timeout: 0\n"
                        "  script:\n    - tool_calls:\n        - tool: bash\n"
                        "          input:\n            command: ls\n            timeout: 0\n"
                        "    - text: done\n")
    messages = {p.line: p.message for p in validate_suite(suite)}
    assert messages == {
        4: "task 't', 'limits', 'seconds': must be more than 0, got -1",
        8: "task 't', checks[0] (command), 'timeout': must be more than 0, got 0",
        14: "task 't', script[0], tool_calls[0] (bash), 'input', 'timeout': must be more "
            "than 0, got 0",
    }


# --------------------------------- 4: a misspelt suite file name, and suite.yaml in a directory


def test_a_suite_file_that_is_not_there_names_the_close_one_beside_it(tmp_path, write_suite):
    """`evalctl run suite.yml` beside suite.yaml said only "No such file or directory"
    (a misspelt built-in name gets a did-you-mean)."""
    write_suite("[]\n")
    result = run_cli(tmp_path, "suite.yml")
    assert result.exit_code == 2, result.output
    assert "suite.yml: error: cannot read suite: No such file or directory (did you mean " \
           "suite.yaml?)" in result.output
    far = validate_suite(tmp_path / "other.yaml")
    assert [p.message for p in far] == ["cannot read suite: No such file or directory"]


def test_a_directory_given_as_the_suite_names_its_suite_yaml_among_many(tmp_path):
    """Only the first three YAML files by name were looked at for suite.yaml: a directory
    with a.yaml, b.yaml and c.yaml beside it was answered with those three."""
    for name in ("a.yaml", "b.yaml", "c.yaml", "suite.yaml"):
        (tmp_path / name).write_text("[]\n")
    problems = validate_suite(tmp_path)
    assert [p.message for p in problems] == [
        f"cannot read suite: it is a directory; name a suite file (a .yaml file): "
        f"{tmp_path / 'suite.yaml'}?"]


# --------------------------------- 5: compare names the report a directory of reports stood for


def test_compare_names_the_newest_report_a_directory_of_reports_stands_for(
        tmp_path, write_suite):
    """`evalctl compare eval_reports now.json` compared against the newest report there
    without saying which one it was."""
    write_suite(HELLO)
    for _ in range(2):
        assert run_cli(tmp_path, "suite.yaml", "--sandbox", "local").exit_code == 0
    reports = sorted((tmp_path / "eval_reports").glob("report-*.json"),
                     key=lambda p: p.stat().st_mtime)
    runs = sorted((tmp_path / "eval_reports").glob("workspaces-*"))
    result = CliRunner().invoke(cli, ["compare", str(tmp_path / "eval_reports"), str(runs[0])])
    assert result.exit_code == 0, result.output
    assert f"note: {tmp_path / 'eval_reports'}: its newest report, {reports[-1]}" \
        in result.output
    # A run directory, or a report, is what it says: nothing to note.
    result = CliRunner().invoke(cli, ["compare", str(reports[0]), str(runs[1])])
    assert result.exit_code == 0 and "note:" not in result.output, result.output


def test_a_plugin_option_at_an_exclusive_bound_is_told_it_must_be_past_it(tmp_path,
                                                                           write_suite):
    """`--provider-option timeout=0` said "0.0 is less than or equal to the minimum of 0"."""
    write_suite(HELLO)
    result = run_cli(tmp_path, "suite.yaml", "--provider", "anthropic",
                     "--provider-option", "timeout=0")
    assert result.exit_code == 2, result.output
    assert "error: provider 'anthropic' option 'timeout': must be more than 0, got 0.0" \
        in result.output


# --------------------------------- 6: evalctl script offers the task meant


def test_script_of_a_misspelt_task_offers_the_one_meant(tmp_path, write_suite):
    write_suite(HELLO)
    assert run_cli(tmp_path, "suite.yaml", "--sandbox", "local").exit_code == 0
    run_dir = next((tmp_path / "eval_reports").glob("workspaces-*"))
    result = CliRunner().invoke(cli, ["script", str(run_dir), "helo"])
    assert result.exit_code == 2, result.output
    assert f"{run_dir}: no task 'helo' in this run (did you mean 'hello'?); its tasks: " \
           "hello" in result.output


# --------------------------------- 7: a block text whose lines are not indented


BLOCK_NOT_INDENTED = """\
- id: t
  prompt: Fix f in a.py.
  files:
    a.py: |
    def f():
        return 1
  checks:
    - type: file_exists
      path: a.py
"""


def test_a_block_text_left_empty_by_its_unindented_lines_is_a_warning_at_its_line(
        write_suite):
    """`a.py: |` over `def f():` at the key's column is valid YAML: a.py empty and a file
    named "def f()" holding "return 1". validate said nothing."""
    problems = validate_suite(write_suite(BLOCK_NOT_INDENTED))
    assert [(p.line, p.severity, p.message) for p in problems] == [
        (4, "warning", "the text of 'a.py' (line 4, a '|' or '>' block) is empty: its lines "
                       "must be indented more than its key, which is indented 4 space(s), "
                       "and the next line is indented 4; indent the text's lines, or write "
                       "'' for an empty text")]


def test_a_parse_error_after_an_empty_block_text_says_why(write_suite):
    text = BLOCK_NOT_INDENTED.replace("    def f():\n        return 1\n", "    import os\n")
    problems = validate_suite(write_suite(text))
    assert [(p.line, p.severity) for p in problems] == [(5, "error")]
    assert problems[0].message.startswith(
        "invalid YAML: a line that is neither 'key: value' nor a list item ('- '): the text "
        "of 'a.py' (line 4, a '|' or '>' block) is empty: its lines must be indented more")


def test_block_texts_with_their_lines_indented_are_not_warned_of(write_suite):
    """Text in a file's content that looks like an empty block (`run: |` in a YAML file
    seeded by the task) is the file's, not the suite's."""
    suite = write_suite("- id: t\n  prompt: |\n    Fix it.\n  files:\n    ci.yaml: |\n"
                        "      run: |\n      other: 1\n    b.txt: >-\n      folded\n"
                        "  checks:\n    - type: file_exists\n      path: b.txt\n")
    assert validate_suite(suite) == []


# --------------------------------- 8: a seeded name with a '.' part says what to write


def test_a_file_name_with_a_dot_part_says_the_name_to_write(write_suite):
    suite = write_suite("- id: t\n  prompt: p\n  files:\n    ./a.py: x\n    a//b.py: y\n"
                        "  checks:\n    - type: file_exists\n      path: a.py\n")
    assert [(p.line, p.message) for p in validate_suite(suite)] == [
        (4, "task 't': files './a.py' has an empty or '.' part: write 'a.py'"),
        (5, "task 't': files 'a//b.py' has an empty or '.' part: write 'a/b.py'")]


# --------------------------------- 9: evalctl view points at runs written with --out


def test_view_with_no_eval_reports_names_the_directories_runs_were_written_to(
        tmp_path, write_suite):
    """After `evalctl run suite.yaml --out reports`, `evalctl view` said "no runs here
    yet", with the runs one directory away."""
    write_suite(HELLO)
    assert run_cli(tmp_path, "suite.yaml", "--sandbox", "local", "--out", "reports") \
        .exit_code == 0
    previous = Path.cwd()
    os.chdir(tmp_path)
    try:
        result = CliRunner().invoke(cli, ["view", "--no-open"])
    finally:
        os.chdir(previous)
    assert result.exit_code == 2, result.output
    assert "error: no runs in eval_reports (it does not exist); runs written with --out " \
           "are here: view them with evalctl view reports" in result.output


# --------------------------------- 10: a check's path outside the workspace says why


def test_a_checks_path_outside_the_workspace_says_the_reason_that_applies(write_suite):
    """`path: ~/a.py` was told "(no '..', not absolute)", neither of which it is."""
    suite = write_suite("- id: t\n  prompt: p\n  checks:\n    - type: file_exists\n"
                        "      path: ~/a.py\n    - type: file_exists\n      path: out/\n")
    assert [(p.line, p.message) for p in validate_suite(suite)] == [
        (5, "task 't', checks[0] (file_exists), 'path': '~/a.py' must be a relative path "
            "that stays inside the workspace: it starts with '~' (a home directory)"),
        (7, "task 't', checks[1] (file_exists), 'path': 'out/' must name a file: it ends "
            "with '/' (write the file's path, e.g. 'dir/a.txt')")]


# --------------------------------- 11: JUnit marks a check that could not run as an error


def test_junit_lists_a_check_that_could_not_run_as_error_not_fail(tmp_path, write_suite):
    """The <error> of an attempt whose tests_pass could not run (pytest missing) listed
    the check as "[FAIL] tests_pass: cannot run here ..." in its system-out."""
    import evalctl
    from evalctl._plugin.registry import set_registry

    from .conftest import registry_with
    from .test_errors import _grader_plugin

    def needs_a_tool(check, workspace, result):
        raise evalctl.GraderUnavailable("the frobnicator is not installed")

    set_registry(registry_with(("extra_graders", _grader_plugin(
        frobnicated={"grade": needs_a_tool}))))
    write_suite(HELLO.replace("    - type: file_exists\n      path: hello.txt\n",
                              "    - type: file_exists\n      path: hello.txt\n"
                              "    - type: frobnicated\n"))
    result = run_cli(tmp_path, "suite.yaml", "--sandbox", "local", "--reporter", "junit")
    assert result.exit_code == 1, result.output
    junit = next((tmp_path / "eval_reports").glob("report-*.xml")).read_text()
    assert "[ERROR] frobnicated: cannot run here: the frobnicator is not installed" in junit
    assert "[FAIL] frobnicated" not in junit
    assert "[pass] file_exists" in junit


# --------------------------------- 12: --max-drop given in points says it is a fraction


def test_max_drop_given_in_points_says_it_is_a_fraction(tmp_path, write_suite):
    """`--max-drop 5` (meaning 5 points) was told only "not in the range 0<=x<=1"."""
    write_suite(HELLO)
    result = run_cli(tmp_path, "suite.yaml", "--baseline", "base.json", "--max-drop", "5")
    assert result.exit_code == 2, result.output
    assert "'--max-drop': 5 is more than 1: it is a fraction of the tasks (0.05 is 5 " \
           "points): write 0.05 for 5 points" in result.output
    assert not (tmp_path / "eval_reports").exists()


def test_empty_blocks_reads_a_large_suite_in_one_pass():
    """The check runs on every cold load: a per-line copy of the lines after each block
    (the first version) made a 10,000-task suite take minutes. Linear: 4x the tasks take
    nowhere near 16x the time."""
    import time

    from evalctl._suite.yamlerrors import empty_blocks

    task = ("- id: t{i}\n  prompt: |\n    Fix it.\n  files:\n    a.py: |\n      x = 1\n"
            "  checks:\n    - type: file_exists\n      path: a.py\n")

    def seconds(count: int) -> float:
        text = "".join(task.format(i=i) for i in range(count))
        started = time.perf_counter()
        assert empty_blocks(text) == []
        return time.perf_counter() - started

    small, large = min(seconds(1000) for _ in range(3)), min(seconds(4000) for _ in range(3))
    assert large < small * 10, (small, large)
