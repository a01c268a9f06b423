"""A newcomer's findings, round 20: a baseline overwritten by the run gated against it,
attempts counted as tasks in the Markdown report, a resume's refusal that named one
suite's path beside the other's hash, configuration mistakes counted as the agent's
failures, and what validate could have said before the run."""

from __future__ import annotations

import json
import os
import sys

import pytest

from .conftest import ROOT, SUITES, run_cli


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


ABSENT_INTERPRETER = """\
- id: abs-python-missing
  prompt: Fix add().
  files:
    calc.py: "def add(a, b):\\n    return a + b\\n"
    test_calc.py: "from calc import add\\n\\n\\ndef test_add():\\n    assert add(2, 2) == 4\\n"
  checks:
    - type: tests_pass
      python: /opt/nonexistent/bin/python
  script:
    - text: Done.
"""


def test_an_absolute_interpreter_missing_here_stops_the_run_before_any_task(tmp_path):
    """Found by a newcomer: every attempt failed ("the test run ended (exit 1) before
    evalctl's witness reported / bwrap: execvp ..."), as if the agent had done bad work."""
    (tmp_path / "s.yaml").write_text(ABSENT_INTERPRETER)
    refused = run_cli(tmp_path, "s.yaml")
    assert refused.exit_code == 2, refused.output
    assert "the tests_pass checks cannot run: python: /opt/nonexistent/bin/python does not " \
           "exist on this machine (the tests_pass checks of s.yaml:7" in refused.output
    assert not list(tmp_path.glob("eval_reports/workspaces-*/abs-python-missing"))


def test_a_workspace_interpreter_nobody_made_is_an_error_not_a_failure(tmp_path):
    """Found by a newcomer: `python: .venv/bin/python` in a task whose setup makes no
    such environment failed every attempt, though the agent neither made nor removed it."""
    (tmp_path / "s.yaml").write_text(ABSENT_INTERPRETER.replace(
        "/opt/nonexistent/bin/python", ".venv/bin/python"))
    result = run_cli(tmp_path, "s.yaml", "--report", "r.json")
    assert result.exit_code == 1, result.output
    task = json.loads((tmp_path / "r.json").read_text())["tasks"][0]
    assert task["status"] == "error", task
    assert "python: .venv/bin/python does not exist in the workspace, and the agent did not " \
           "remove it: the task's setup must make it" in json.dumps(task)


def test_ro_paths_that_cannot_work_stop_the_run_before_any_task(tmp_path, require_bwrap):
    """Found by a newcomer: a misspelt ro_paths directory, or `ro_paths=$PWD` (which holds
    the run's reports), made every attempt a sandbox error, one by one, exit 1."""
    missing = run_cli(tmp_path, "harness", "--sandbox", "bwrap", "--sandbox-option",
                      f"ro_paths={tmp_path / 'agentdri'}")
    assert missing.exit_code == 2, missing.output
    assert f"sandbox 'bwrap': ro_paths: {tmp_path / 'agentdri'} does not exist" \
        in missing.output
    holding = run_cli(tmp_path, "harness", "--sandbox", "bwrap", "--sandbox-option",
                      f"ro_paths={tmp_path}")
    assert holding.exit_code == 2, holding.output
    assert f"ro_paths: {tmp_path} holds the run's directory eval_reports" in holding.output
    assert not list(tmp_path.glob("eval_reports/workspaces-*"))
    (tmp_path / "agent").mkdir()
    fine = run_cli(tmp_path, "harness", "--sandbox", "bwrap", "--sandbox-option",
                   f"ro_paths={tmp_path / 'agent'}")
    assert fine.exit_code == 0, fine.output


@pytest.mark.parametrize(("command", "programs"), [
    ("nonexistent-linter-xyz a.txt", ["nonexistent-linter-xyz"]),
    ("FOO=1 BAR=2 mytool --check", ["mytool"]),
    ("grep -q done out.txt && test -s out.txt", ["grep"]),
    ("./build/tool --version", []),  # the agent's, by its path
    ("[ -f a.txt ]", []),
    ("(cd sub; make)", []),
    ("$TOOL run", []),
    ("echo 'unclosed", []),
    ("# a comment\nmake test", []),
    # Found by a newcomer (round 21): only the very first word was looked at.
    ("timeout 30 shellcheck a.sh", ["shellcheck"]),
    ("env -i LANG=C shellcheck a.sh", ["shellcheck"]),
    ("cd sub && shellcheck a.sh", ["shellcheck"]),
    ("cat a.sh | shellcheck - | grep -q ok", ["cat", "shellcheck", "grep"]),
    # What may be meant to be missing is not looked at.
    ("command -v shellcheck || echo none", []),
    ("true || shellcheck a.sh", []),
    ("make test; shellcheck a.sh", ["make"]),
])
def test_the_programs_a_command_check_surely_runs(command, programs):
    from evalctl.plugins.graders.commands import programs_of

    assert programs_of(command) == programs


def test_a_command_check_of_a_program_not_installed_stops_the_run(tmp_path):
    """Found by a newcomer: a check running a linter nobody installed failed every attempt
    with exit 127, counted as the agent's failure."""
    (tmp_path / "s.yaml").write_text("""\
- id: missing-cmd
  prompt: Make a.txt.
  checks:
    - type: file_exists
      path: a.txt
    - type: command
      command: nonexistent-linter-xyz a.txt
""")
    refused = run_cli(tmp_path, "s.yaml")
    assert refused.exit_code == 2, refused.output
    assert "the command checks cannot run: the command(s) 'nonexistent-linter-xyz' are not " \
           "installed here (not found on PATH)" in refused.output
    assert "(the command checks of s.yaml:6 (task 'missing-cmd'))" in refused.output
    # The check's line, not the task's (found by the same newcomer for a judge check),
    # from the suite cache too.
    again = run_cli(tmp_path, "s.yaml")
    assert "(the command checks of s.yaml:6 (task 'missing-cmd'))" in again.output
    assert not list(tmp_path.glob("eval_reports/workspaces-*/missing-cmd"))


PRESETS = """\
agent = "my-agent"

[agents.my-agent]
base = "command"
argvv = "python3 agent.py {prompt}"
env = "A=1"

[agents.my-agent-json]
base = "my-agnt"
final_text = "json:answer"

[agents.loop-a]
base = "loop-b"

[agents.loop-b]
base = "loop-a"
"""


def test_agent_presets_are_checked_at_their_lines_all_at_once(tmp_path):
    """Found by a newcomer: a preset's mistakes came one per run, without a file or line,
    and an unused preset's never."""
    (tmp_path / "evalctl.toml").write_text(PRESETS)
    refused = run_cli(tmp_path, "harness")
    assert refused.exit_code == 2, refused.output
    config = tmp_path / "evalctl.toml"
    assert f"{config}:5: error: [agents.my-agent]: agent 'command' has no option 'argvv' " \
           "(did you mean 'argv'?)" in refused.output
    assert f"{config}:6: error: [agents.my-agent] env: must be a list, got 'A=1'" \
        in refused.output
    assert f"{config}:13: error: agent presets form a loop: loop-a -> loop-b -> loop-a" \
        in refused.output
    # Not used by this run: a base not installed here is said, not refused.
    fixed = PRESETS.replace("argvv", "argv").replace('env = "A=1"', 'env = ["A=1"]') \
        .replace("[agents.loop-a]\nbase = \"loop-b\"\n\n[agents.loop-b]\nbase = \"loop-a\"\n", "")
    config.write_text(fixed)
    ran = run_cli(tmp_path, "harness", "--sandbox", "local")
    assert ran.exit_code != 2, ran.output
    assert f"warning: {config}:9: [agents.my-agent-json] base: no agent or preset 'my-agnt' " \
           "(did you mean 'my-agent'?) (not used by this run)" in ran.output
    config.write_text(fixed.replace('agent = "my-agent"', 'agent = "my-agent-json"'))
    used = run_cli(tmp_path, "harness", "--sandbox", "local")
    assert used.exit_code == 2 and f"{config}:9: error: [agents.my-agent-json] base" \
        in used.output, used.output


OLD_PYTEST = ROOT / ".cache" / "pytest-8.4"
OLD_PYTEST_COMMAND = f"python3 -m venv {OLD_PYTEST} && {OLD_PYTEST}/bin/pip install " \
    "'pytest==8.4.2'"  # as .ci/run does
HONEST_UNDER = """\
- id: honest
  prompt: Fix add().
  files:
    calc.py: "def add(a, b):\\n    return a - b\\n"
    conftest.py: "import pytest\\n\\n\\n@pytest.fixture\\ndef two():\\n    return 2\\n"
  verify_files:
    tests/test_calc.py: "from calc import add\\n\\n\\ndef test_add(two):\\n    assert \\
      add(two, two) == 4\\n"
  checks:
    - type: tests_pass
      python: {python}
      tests:
        - tests/test_calc.py
  script:
    - tool_calls:
        - tool: write_file
          input:
            path: calc.py
            content: "def add(a, b):\\n    return a + b\\n"
    - text: Fixed add().
"""


def test_an_honest_solution_passes_under_an_older_pytest(tmp_path):
    """Found by a newcomer: under pytest 8.4 or 9.0 (which evalctl's `pytest>=8` allows,
    and a task's setup may install), config.hook is pytest's PathAwareHookProxy around
    the plugin manager's relay, and every honest solution was called gaming ("code in
    the test process replaced config.hook")."""
    python = OLD_PYTEST / "bin" / "python"
    if not python.exists():
        problem = f"no pytest 8.4 environment at {OLD_PYTEST}; make it with: " \
            f"{OLD_PYTEST_COMMAND}"
        if os.environ.get("CI"):
            pytest.fail(f"it must be there in CI: {problem}")
        pytest.skip(problem)
    (tmp_path / "s.yaml").write_text(HONEST_UNDER.format(python=python))
    result = run_cli(tmp_path, "s.yaml", "--sandbox", "local", "--report", "r.json")
    task = json.loads((tmp_path / "r.json").read_text())["tasks"][0]
    assert result.exit_code == 0 and task["status"] == "passed", json.dumps(task)[:2000]
    assert "suspected" not in json.dumps(task)


def test_a_preset_of_an_installed_preset_takes_its_agents_options(tmp_path):
    """Found by a newcomer, against the preset checks above: `base = "claude-code"` (a
    preset of command's) was told it has no options."""
    (tmp_path / "evalctl.toml").write_text('[agents.cc]\nbase = "claude-code"\n'
                                           'path = ["/opt/tools/bin"]\nfinal_text = "stdout"\n')
    ran = run_cli(tmp_path, "harness")
    assert ran.exit_code == 0, ran.output
    (tmp_path / "evalctl.toml").write_text('[agents.cc]\nbase = "claude-code"\npaht = []\n')
    refused = run_cli(tmp_path, "harness")
    assert refused.exit_code == 2
    assert "[agents.cc]: agent 'command' has no option 'paht' (did you mean 'path'?)" \
        in refused.output


def test_reporters_given_as_text_is_one_problem_not_one_per_letter(tmp_path):
    (tmp_path / "evalctl.toml").write_text('reporters = "junit"\n')
    refused = run_cli(tmp_path, "harness")
    assert refused.exit_code == 2
    assert "'reporters' must be a list, got 'junit'" in refused.output
    assert "unknown reporter" not in refused.output, refused.output


def test_sandbox_options_in_the_config_are_checked_at_their_lines_all_at_once(tmp_path):
    """Found by a newcomer: a wrong type came one run at a time, with no line."""
    config = tmp_path / "evalctl.toml"
    config.write_text('sandbox = "bwrap"\n[sandbox_options]\nmemory_mb = "lots"\n'
                      'ro_paths = "/x"\n')
    refused = run_cli(tmp_path, "harness")
    assert refused.exit_code == 2
    assert f"{config}:3: error: 'sandbox_options': sandbox 'bwrap' option memory_mb: must be " \
           "a whole number, got 'lots'" in refused.output
    assert f"{config}:4: error: 'sandbox_options': sandbox 'bwrap' option ro_paths: must be " \
           "a list, got '/x'" in refused.output
    config.write_text("[sandbox_options]\nmemroy_mb = 512\n")  # no sandbox named
    unnamed = run_cli(tmp_path, "harness")
    assert unnamed.exit_code == 2
    assert f"{config}:2: error: 'sandbox_options': no sandbox has an option 'memroy_mb' " \
           "(did you mean 'memory_mb'?)" in unnamed.output


def test_tests_a_named_file_selects_are_counted_as_such(tmp_path):
    """Found by a newcomer: "3 of the 1 named test(s) did not pass" for a named file."""
    (tmp_path / "s.yaml").write_text("""\
- id: counted
  prompt: Fix calc.py.
  files:
    calc.py: "def add(a, b):\\n    return a - b\\n"
    tests/test_calc.py: "from calc import add\\n\\n\\ndef test_one():\\n    assert \\
      add(1, 1) == 2\\n\\n\\ndef test_two():\\n    assert add(2, 2) == 4\\n"
  checks:
    - type: tests_pass
      tests:
        - tests/test_calc.py
  script:
    - text: Nothing done.
""")
    result = run_cli(tmp_path, "s.yaml", "--report", "r.json")
    detail = json.loads((tmp_path / "r.json").read_text())["tasks"][0]["checks"][0]["detail"]
    assert result.exit_code == 1
    assert detail.startswith("2 of the tests the 1 name(s) in `tests:` select did not pass: "
                             "tests/test_calc.py::test_one (failed)"), detail


def test_pytest_missing_from_the_setups_environment_says_to_fix_the_setup(tmp_path):
    """Found by a newcomer: told to pip install into one attempt's environment, which the
    next run makes anew."""
    (tmp_path / "s.yaml").write_text(f"""\
- id: no-pytest
  prompt: Fix calc.py.
  files:
    calc.py: "def add(a, b):\\n    return a + b\\n"
  setup:
    commands:
      - {sys.executable} -m venv --without-pip .venv
  checks:
    - type: tests_pass
      python: .venv/bin/python
  script:
    - text: Nothing to do.
""")
    result = run_cli(tmp_path, "s.yaml", "--sandbox", "local", "--report", "r.json")
    task = json.loads((tmp_path / "r.json").read_text())["tasks"][0]
    assert (result.exit_code, task["status"]) == (1, "error"), result.output
    assert "install it in the task's setup (`.venv/bin/python -m pip install pytest`, with " \
           "`network: true` or a local wheel)" in json.dumps(task), json.dumps(task)


def test_a_budget_that_is_not_a_number_says_number(tmp_path):
    """Found by a newcomer: "'abc' is not a valid float range"."""
    result = run_cli(tmp_path, "harness", "--max-cost", "abc")
    assert result.exit_code == 2
    assert "'abc' is not a valid number" in result.output
    assert "float range" not in result.output
