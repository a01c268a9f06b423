"""word_count, tested as its users will run it: through evalctl.testing."""

import evalctl_wordcount
import pytest

import evalctl
from evalctl.testing import grade_check, run_suite

CHECK = {"type": "word_count", "path": "a.txt", "min": 3, "max": 5}


def test_counts_words_in_the_agents_file():
    assert grade_check(CHECK, files={"a.txt": "one two three"},
                       plugins=[evalctl_wordcount]).passed
    short = grade_check(CHECK, files={"a.txt": "one two"}, plugins=[evalctl_wordcount])
    assert not short.passed and short.detail == "a.txt has 2 words; expected 3 to 5"


def test_a_path_outside_the_workspace_fails():
    outside = grade_check({**CHECK, "path": "../../etc/passwd"}, plugins=[evalctl_wordcount])
    assert not outside.passed and "outside the workspace" in outside.detail


def test_a_check_the_suite_schema_refuses_is_an_error_not_graded():
    with pytest.raises(evalctl.UsageError, match="unexpected key 'mni'"):
        grade_check({"type": "word_count", "path": "a.txt", "mni": 3},
                    files={"a.txt": "one"}, plugins=[evalctl_wordcount])


def test_a_scripted_suite_passes():
    run = run_suite("""\
- id: three-words
  prompt: Write three words to a.txt.
  checks:
    - type: word_count
      path: a.txt
      min: 3
  script:
    - tool_calls:
        - tool: write_file
          input:
            path: a.txt
            content: one two three
    - text: Wrote a.txt.
""", plugins=[evalctl_wordcount])
    assert run.all_passed and run.tasks[0].checks[0].detail == "a.txt has 3 words"


def _agent_leaves(command):
    """A scripted run whose agent leaves what `command` writes, graded by word_count."""
    return run_suite(f"""\
- id: essay
  prompt: Write at least three words to a.txt.
  checks:
    - type: word_count
      path: a.txt
      min: 3
  script:
    - tool_calls:
        - tool: bash
          input:
            command: {command}
    - text: Wrote a.txt.
""", plugins=[evalctl_wordcount]).tasks[0]


@pytest.mark.parametrize(("command", "detail"), [
    # bytes that are not UTF-8 once crashed the grader (UnicodeDecodeError): an error,
    # left out of completion, where the agent had failed
    (r"printf 'ab \377\376 cd' > a.txt", "a.txt is not UTF-8 text (byte 3: invalid start byte)"),
    ("head -c 10000001 /dev/zero | tr '\\\\0' a > a.txt", "a.txt is over 10000000 bytes"),
    ("mkfifo a.txt", "a.txt cannot be read: 'a.txt' is not a regular file"),
    ("mkdir a.txt", "a.txt cannot be read: 'a.txt' is not a regular file"),
])
def test_what_the_agent_left_unreadable_fails_the_check_never_crashes_it(command, detail):
    task = _agent_leaves(command)
    assert task.status == "failed", task.checks[0].detail
    assert not task.checks[0].error and task.checks[0].detail.startswith(detail)
