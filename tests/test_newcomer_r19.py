"""A newcomer's findings, round 19: a check validate passed and run refused, README
commands not on PATH, gate options without a baseline, evalctl.toml plugin names and
concurrency without file:line, a summary that said "every attempt" and "100%" after a
stop, and wording (a path ending in '/', "1 errors", "integer range")."""

from __future__ import annotations

import re
import sys

from click.testing import CliRunner

from evalctl._cli import cli
from evalctl._report.console import RunView
from evalctl._report.results import RunResult, TaskResult
from evalctl._suite.loader import validate_suite

from .conftest import ROOT, run_cli

UNCOMPILABLE = """\
- id: c
  prompt: Create x.
  checks:
    - type: file_exists
      path: x
    - type: python
      code: |
        import json
        assert (workspace / "x").exists(
"""

PLAIN = """\
- id: c
  prompt: Create x.
  checks:
    - type: file_exists
      path: x
"""


# -- 1. validate reports what run would refuse, at file:line -------------------------

def test_validate_reports_a_python_check_that_does_not_compile_at_its_line(write_suite):
    problems = validate_suite(write_suite(UNCOMPILABLE))
    assert [(p.line, p.severity) for p in problems] == [(6, "error")], problems
    assert problems[0].message.startswith("task 'c', checks[1] (python): ")
    assert "does not compile: line 2: '(' was never closed" in problems[0].message


def test_validate_reports_a_regex_re2_cannot_match_at_its_line(write_suite):
    problems = validate_suite(write_suite(PLAIN.replace(
        "      path: x\n", "      path: x\n    - type: file_contains\n      path: x\n"
                          "      regex: 'a(?=b)'\n")))
    assert [p.line for p in problems] == [6], problems
    assert "task 'c', checks[1] (file_contains): file_contains regex 'a(?=b)' cannot be " \
           "matched in linear time" in problems[0].message


def test_run_refuses_a_python_check_that_does_not_compile_naming_file_and_line(tmp_path):
    (tmp_path / "pyc.yaml").write_text(UNCOMPILABLE)
    result = run_cli(tmp_path, "pyc.yaml", "--sandbox", "local")
    assert result.exit_code == 2, result.output
    assert "pyc.yaml:6: error: task 'c', checks[1] (python): " in result.output
    assert "Traceback" not in result.output
    assert not (tmp_path / "eval_reports").exists()


def test_a_python_check_that_compiles_is_no_problem(write_suite):
    problems = validate_suite(write_suite(PLAIN.replace(
        "      path: x\n", "      path: x\n    - type: python\n      code: assert True\n")))
    assert problems == []


# -- 6. the gate's options need --baseline --------------------------------------------

def test_max_drop_or_allow_flips_without_baseline_is_a_usage_error(tmp_path):
    (tmp_path / "s.yaml").write_text(PLAIN)
    for flags, named in ((["--max-drop", "0.1"], "--max-drop only works"),
                         (["--allow-flips"], "--allow-flips only works"),
                         (["--max-drop", "0.1", "--allow-flips"],
                          "--max-drop and --allow-flips only work")):
        result = run_cli(tmp_path, "s.yaml", *flags)
        assert result.exit_code == 2, result.output
        assert f"error: {named} with --baseline" in result.output
        assert not (tmp_path / "eval_reports").exists()


# -- 3. evalctl.toml: plugin names, options and concurrency at file:line --------------

def test_misspelt_plugin_names_in_the_config_are_all_reported_at_their_lines(tmp_path):
    (tmp_path / "s.yaml").write_text(PLAIN)
    (tmp_path / "evalctl.toml").write_text(
        'out = "r"\nsandbox = "bwarp"\nprovider = "antropic"\nreporters = ["markdwn"]\n')
    result = run_cli(tmp_path, "s.yaml")
    assert result.exit_code == 2, result.output
    assert "evalctl.toml:2: error: 'sandbox': unknown sandbox 'bwarp' (did you mean " \
           "'bwrap'?)" in result.output
    assert "evalctl.toml:3: error: 'provider': unknown provider 'antropic' (did you mean " \
           "'anthropic'?)" in result.output
    assert "evalctl.toml:4: error: 'reporters': unknown reporter 'markdwn' (did you mean " \
           "'markdown'?)" in result.output
    # The flag chooses the sandbox: the config's is not used, and not refused.
    (tmp_path / "evalctl.toml").write_text('sandbox = "bwarp"\n')
    assert "bwarp" not in run_cli(tmp_path, "s.yaml", "--sandbox", "local").output


def test_an_option_the_configs_sandbox_lacks_is_reported_at_its_line(tmp_path):
    (tmp_path / "s.yaml").write_text(PLAIN)
    (tmp_path / "evalctl.toml").write_text('sandbox = "bwrap"\n\n[sandbox_options]\n'
                                           'memry_mb = 512\n')
    result = run_cli(tmp_path, "s.yaml")
    assert result.exit_code == 2, result.output
    assert "evalctl.toml:4: error: 'sandbox_options': sandbox 'bwrap' has no option " \
           "'memry_mb' (did you mean 'memory_mb'?)" in result.output


def test_concurrency_below_one_in_the_config_is_refused_there_not_blamed_on_the_flag(
        tmp_path):
    (tmp_path / "s.yaml").write_text(PLAIN)
    for value in ("-5", "0"):
        (tmp_path / "evalctl.toml").write_text(f'out = "r"\nconcurrency = {value}\n')
        result = run_cli(tmp_path, "s.yaml")
        assert result.exit_code == 2, result.output
        assert f"evalctl.toml:2: error: 'concurrency' must be at least 1, got {value}" in \
            result.output
        assert "--concurrency" not in result.output


def test_a_list_left_open_in_the_config_is_reported_at_a_line(tmp_path):
    (tmp_path / "s.yaml").write_text(PLAIN)
    (tmp_path / "evalctl.toml").write_text('out = "r"\nreporters = ["markdown", \n')
    result = run_cli(tmp_path, "s.yaml")
    assert result.exit_code == 2, result.output
    assert "evalctl.toml:2: error: invalid TOML" in result.output


# -- 8. a summary after a stop says what did not run ----------------------------------

def test_the_summary_after_a_budget_stop_says_how_many_did_not_run(capsys):
    tasks = [TaskResult("a", "passed", attempt=1), TaskResult("a", "not_run", attempt=2),
             TaskResult("a", "not_run", attempt=3)]
    run = RunResult("s.yaml", "s", "0" * 64, "scripted", None, "", "", "0", {}, tasks,
                    repeat=3, budget={"max_tokens": 10, "reached": True})
    RunView(3).print_summary(run)
    out = " ".join(capsys.readouterr().out.split())
    assert "(budget reached: 2 of 3 attempts not run)" in out
    assert "passed every graded attempt (pass^k; 1 with attempts not graded)" in out
    assert "passed every attempt" not in out


def test_the_summary_of_an_interrupted_run_says_so(capsys):
    tasks = [TaskResult("a", "passed"), TaskResult("b", "not_run")]
    run = RunResult("s.yaml", "s", "0" * 64, "scripted", None, "", "", "0", {}, tasks,
                    interrupted=True)
    RunView(2).print_summary(run)
    assert "(interrupted: 1 of 2 attempts not run)" in " ".join(capsys.readouterr().out.split())


# -- 11, 17. wording ------------------------------------------------------------------

def test_a_files_path_ending_in_a_slash_is_one_error_with_its_reason(write_suite):
    problems = validate_suite(write_suite(PLAIN.replace(
        "  checks:", "  files:\n    dir/: hi\n    /abs.txt: hi\n  checks:")))
    assert [(p.line, p.message) for p in problems] == [
        (4, "task 'c', 'files': 'dir/' must name a file: it ends with '/' (write the file's "
            "path, e.g. 'dir/a.txt')"),
        (5, "task 'c', 'files': '/abs.txt' must be a relative path that stays inside the "
            "workspace: it is absolute")], problems


def test_markdown_says_1_error_not_1_errors():
    from evalctl.plugins.reporters.markdown import render

    tasks = [TaskResult("a", "passed"), TaskResult("b", "error", error="boom")]
    text = render(RunResult("s.yaml", "s", "0" * 64, "scripted", None, "", "", "0", {}, tasks))
    assert "; 1 error, not counted" in text and "1 errors" not in text


def test_a_repeat_that_is_not_a_number_says_whole_number(tmp_path):
    result = run_cli(tmp_path, "harness", "--repeat", "x")
    assert result.exit_code == 2
    assert "'x' is not a valid whole number" in result.output
    assert "integer range" not in result.output


# -- 2. commands that work when copied ------------------------------------------------

def test_readme_commands_name_the_venvs_evalctl():
    readme = (ROOT / "README.md").read_text()
    bare = [line for block in re.findall(r"```sh\n(.*?)```", readme, flags=re.S)
            for line in block.splitlines()
            if re.match(r"(?:[A-Z_]+=\S* )*evalctl\b", line)]
    assert bare == []


def test_init_hints_name_the_evalctl_that_ran(tmp_path, monkeypatch):
    monkeypatch.setattr(sys, "argv", [".venv/bin/evalctl", "init", "x"])
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))  # no evalctl on PATH
    result = CliRunner().invoke(cli, ["init", str(tmp_path / "my-evals")])
    assert result.exit_code == 0, result.output
    hints = [line.split("#")[0].split()[:2] for line in result.output.splitlines()
             if line.startswith("  ")]
    assert hints[:2] == [[".venv/bin/evalctl", "validate"], [".venv/bin/evalctl", "run"]]


# -- 9. the docs show the block style the parser takes --------------------------------

def test_the_docs_sandbox_mappings_are_block_style_and_validate(write_suite):
    for doc in ("suites.md", "sandboxes.md"):
        text = (ROOT / "docs" / doc).read_text()
        assert "{name:" not in text, doc
    sandboxes = (ROOT / "docs" / "sandboxes.md").read_text()
    block = next(b for b in re.findall(r"```yaml\n(.*?)```", sandboxes, flags=re.S)
                 if "max_processes" in b)
    suite = block + "tasks:\n" + "".join("  " + line + "\n" for line in PLAIN.splitlines())
    assert validate_suite(write_suite(suite)) == []
