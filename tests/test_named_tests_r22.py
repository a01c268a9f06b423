"""A newcomer's round (r22): a typo in a `tests_pass` check's `tests:` (a file that exists
nowhere in the task) passed validate and failed, as the agent's failure, the attempt of
an agent that had fixed the bug. It is refused before any task at the entry's line, with
the nearest test path; what only setup or the agent could make is judged while grading."""

from __future__ import annotations

import subprocess

import pytest

import evalctl.testing
from evalctl._errors import SuiteError
from evalctl._suite import provided
from evalctl._suite.loader import load_suite, validate_suite

FIXED_BY_THE_AGENT = """\
- id: typo
  prompt: add() in calc.py returns the wrong answer. Fix it.
{source}  verify_files:
    tests/test_add.py: "from calc import add\\n\\n\\ndef test_add():\\n    assert add(2, 2) == 4\\n"
{setup}  checks:
    - type: tests_pass
      tests:
        - tests/test_add.py
        - {named}
  script:
    - tool_calls:
        - tool: write_file
          input:
            path: calc.py
            content: "def add(a, b):\\n    return a + b\\n"
    - text: Fixed add().
"""
INLINE = """\
  files:
    calc.py: "def add(a, b):\\n    return a - b\\n"
"""


def suite_text(named: str, source: str = INLINE, setup: str = "") -> str:
    return FIXED_BY_THE_AGENT.format(named=named, source=source, setup=setup)


def test_a_typo_in_tests_is_an_error_at_its_line_with_the_nearest_test(tmp_path):
    suite = tmp_path / "s.yaml"
    suite.write_text(suite_text("tests/test_addd.py::test_add"))
    problems = validate_suite(suite)
    assert [(p.line, p.severity) for p in problems] == [(11, "error")], problems
    message = problems[0].message
    assert "task 'typo', checks[0] (tests_pass): `tests:` names 'tests/test_addd.py'" in message
    assert "did you mean 'tests/test_add.py'?" in message
    with pytest.raises(SuiteError):  # the run refuses it before any task: exit 2
        evalctl.testing.run_suite(suite, sandbox="local", out_dir=tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_a_typo_against_a_git_sources_tree_is_refused(tmp_path):
    """The source's files at its commit count (the file exists in the repository), and
    a name in none of them is refused, the nearest of the tree's suggested."""
    project = tmp_path / "proj"
    (project / "tests").mkdir(parents=True)
    (project / "calc.py").write_text("def add(a, b):\n    return a - b\n")
    (project / "tests" / "test_calc.py").write_text("def test_nothing():\n    pass\n")
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@example.com", "-C", str(project)]
    for step in (["init", "-q"], ["add", "-A"], ["commit", "-q", "-m", "init"]):
        subprocess.run([*git, *step], check=True, capture_output=True)
    rev = subprocess.run([*git, "rev-parse", "HEAD"], check=True, capture_output=True,
                         text=True).stdout.strip()
    source = f"  source:\n    git: proj\n    rev: {rev}\n"
    good, bad = tmp_path / "good.yaml", tmp_path / "bad.yaml"
    good.write_text(suite_text("tests/test_calc.py", source))
    bad.write_text(suite_text("tests/test_clac.py", source))
    assert validate_suite(good) == []
    problems = validate_suite(bad)
    assert len(problems) == 1 and problems[0].severity == "error"
    assert f"not in the source git proj at {rev[:12]}" in problems[0].message
    assert "did you mean 'tests/test_calc.py'?" in problems[0].message


def test_a_file_the_prompt_asks_the_agent_to_write_is_not_refused_and_fails_if_missing(
        tmp_path):
    """A task that asks the agent to write the test file names it: not refused, and an
    agent that did not write it fails (its job), never an error."""
    suite = tmp_path / "s.yaml"
    suite.write_text(suite_text("tests/test_mine.py").replace(
        "Fix it.", "Fix it, and add a test in tests/test_mine.py."))
    assert validate_suite(suite) == []
    run = evalctl.testing.run_suite(suite, sandbox="local", out_dir=tmp_path / "out")
    task = run.tasks[0]
    assert task.status == "failed", task.checks
    assert not any(c.error for c in task.checks)


def test_a_file_setup_was_to_make_is_a_warning_and_an_error_when_it_did_not(tmp_path):
    """With `setup:`, which may make the file, validate warns; when setup did not make
    it and the agent did not write it, the check is an error, not the agent's failure."""
    suite = tmp_path / "s.yaml"
    suite.write_text(suite_text("tests/test_made.py",
                                setup="  setup:\n    commands:\n      - 'true'\n"))
    problems = validate_suite(suite)
    assert [p.severity for p in problems] == ["warning"], problems
    assert "`setup:` must make it" in problems[0].message
    run = evalctl.testing.run_suite(suite, sandbox="local", out_dir=tmp_path / "out")
    task = run.tasks[0]
    check = next(c for c in task.checks if c.type == "tests_pass")
    assert (task.status, check.error) == ("error", True), check.detail
    assert "`tests:` names 'tests/test_made.py'" in check.detail
    assert "not the agent's failure" in check.detail
    # Made by setup, the same suite runs and passes.
    suite.write_text(suite_text("tests/test_made.py", setup=(
        "  setup:\n    commands:\n      - 'mkdir -p tests && cp tests/test_add.py "
        "tests/test_made.py 2>/dev/null || printf \"def test_ok():\\\\n    pass\\\\n\" "
        "> tests/test_made.py'\n")))
    run = evalctl.testing.run_suite(suite, sandbox="local", out_dir=tmp_path / "out2")
    assert run.tasks[0].status == "passed", run.tasks[0].checks


def test_a_test_file_the_agent_deleted_is_its_failure_not_an_error(tmp_path):
    """A named file the seed had and the agent removed is the agent's doing."""
    suite = tmp_path / "s.yaml"
    text = suite_text("tests/test_seeded.py").replace(
        INLINE, INLINE + "    tests/test_seeded.py: \"def test_ok():\\n    pass\\n\"\n")
    text = text.replace("    - text: Fixed add().", (
        "        - tool: bash\n          input:\n            command: rm tests/test_seeded.py\n"
        "    - text: Fixed add()."))
    suite.write_text(text)
    assert validate_suite(suite) == []
    run = evalctl.testing.run_suite(suite, sandbox="local", out_dir=tmp_path / "out")
    task = run.tasks[0]
    assert task.status == "failed" and not any(c.error for c in task.checks), task.checks


@pytest.mark.parametrize(("written", "path"), [
    ("tests/test_a.py::test_b[1]", "tests/test_a.py"), ("./tests/", "tests"),
    ("-k", None), ("/abs/test.py", None), ("../out.py", None), (".", None)])
def test_the_path_a_name_in_tests_stands_for(written, path):
    from evalctl.plugins.graders import tests_pass

    named = tests_pass.named_paths({"tests": [written]})
    assert named == ([(("tests", 0), path)] if path else [])
    assert tests_pass.named_paths({"tests": [written], "command": "pytest"}) == []


def test_what_a_prompt_asks_for_and_the_nearest_path():
    assert provided.asks_for("Write tests/test_x.py.", "tests/test_x.py")
    assert provided.asks_for("Add test_x.py under tests.", "tests/test_x.py")
    assert provided.asks_for("Add a module test_x with a test.", "tests/test_x.py")
    assert not provided.asks_for("Make test_xy pass.", "tests/test_x.py")
    assert provided.nearest("tests/test_addd.py", ["calc.py", "tests/test_add.py"]) == \
        "tests/test_add.py"
    assert provided.nearest("zzz.py", ["tests/test_add.py"]) is None
    assert provided.is_provided("tests", ["tests/test_add.py"])
    assert not provided.is_provided("test", ["tests/test_add.py"])


def test_the_loaded_suite_keeps_each_named_path_and_its_line(tmp_path):
    suite = tmp_path / "s.yaml"
    suite.write_text(suite_text("tests/test_add.py::test_add"))
    loaded = load_suite(suite, use_cache=False)
    assert loaded.tasks[0].named_paths == ((0, "tests/test_add.py", 10, "tests"),
                                           (0, "tests/test_add.py", 11, "tests"))


AGENTS_OWN_TESTS = """\
- id: own
  prompt: Fix add().
  files:
    calc.py: "def add(a, b):\\n    return a - b\\n"
{given}  checks:
    - type: tests_pass
      tests:
        - {named}
  script:
    - tool_calls:
        - tool: write_file
          input:
            path: calc.py
            content: "def add(a, b):\\n    return a + b\\n"
{writes}    - text: Fixed add().
"""
WRITES = """\
        - tool: write_file
          input:
            path: tests/test_own.py
            content: "from calc import add\\n\\n\\ndef test_add():\\n    assert add(1, 1) == 2\\n"
"""


def test_in_a_task_that_hides_no_tests_a_named_file_the_prompt_does_not_ask_for_is_refused(
        tmp_path):
    """A task that hides no tests took a name it does not give for a file the agent was
    to write (a typo near no test path passed validate, and failed the attempt as the
    agent's); but the agent cannot write a file by a name nobody told it. As in a task
    that hides tests, the prompt must ask for it: else validate refuses it at its line,
    and a name only setup could make that it did not is an error while grading, not the
    agent's failure. Asked for, an agent that wrote it passes, one that did not fails."""
    suite = tmp_path / "s.yaml"
    suite.write_text(AGENTS_OWN_TESTS.format(given="", named="tests/test_own.py", writes=WRITES))
    problems = validate_suite(suite)
    assert [(p.line, p.severity) for p in problems] == [(8, "error")], problems
    assert problems[0].message == (
        "task 'own', checks[0] (tests_pass): `tests:` names 'tests/test_own.py', which the "
        "task does not give (it is not in files, verify_files or verify_patch); no `setup:` "
        "makes it, and the prompt does not ask the agent to write it (a file the agent is "
        "to write must be named in the prompt)")
    with pytest.raises(SuiteError):  # the run refuses it before any task: exit 2
        evalctl.testing.run_suite(suite, sandbox="local", out_dir=tmp_path / "out")
    # Near a test file the task gives: a typo, refused with the did-you-mean.
    suite.write_text(AGENTS_OWN_TESTS.format(
        given="    tests/test_calc.py: \"def test_ok():\\n    pass\\n\"\n",
        named="tests/test_clac.py", writes=""))
    problems = validate_suite(suite)
    assert [p.severity for p in problems] == ["error"], problems
    assert "did you mean 'tests/test_calc.py'?" in problems[0].message
    # With setup, which may make it: a warning, and an error of the check when it did not.
    suite.write_text(AGENTS_OWN_TESTS.format(
        given="  setup:\n    commands:\n      - 'true'\n", named="tests/test_own.py",
        writes=""))
    assert [p.severity for p in validate_suite(suite)] == ["warning"]
    run = evalctl.testing.run_suite(suite, sandbox="local", out_dir=tmp_path / "out")
    task = run.tasks[0]
    check = next(c for c in task.checks if c.type == "tests_pass")
    assert (task.status, check.error) == ("error", True), check.detail
    assert "not the agent's failure" in check.detail
    # Asked for by the prompt: the agent's to write.
    asked = AGENTS_OWN_TESTS.replace("Fix add().", "Fix add(), tested in tests/test_own.py.")
    suite.write_text(asked.format(given="", named="tests/test_own.py", writes=WRITES))
    assert validate_suite(suite) == []
    run = evalctl.testing.run_suite(suite, sandbox="local", out_dir=tmp_path / "out2")
    assert run.tasks[0].status == "passed", run.tasks[0].checks
    suite.write_text(asked.format(given="", named="tests/test_own.py", writes=""))
    run = evalctl.testing.run_suite(suite, sandbox="local", out_dir=tmp_path / "out3")
    assert run.tasks[0].status == "failed" and not any(c.error for c in run.tasks[0].checks)
