"""Round 40 of the attacker rounds (outside the tests_pass witness): what an agent, or
a task's files, did to take a failure out of the score or to get past the sandbox, and
the controls that show honest work is still graded as it was. The attacks' suites are
in tests/data/sandbox_r40/."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from evalctl.testing import run_suite

DATA = Path(__file__).parent / "data" / "sandbox_r40"


@pytest.fixture(params=["local", "bwrap"])
def sandbox_name(request):
    if request.param == "bwrap":
        request.getfixturevalue("require_bwrap")
    return request.param


# --------------------------------------------------------------------------------------
# A CLI agent's own exit 127 (or 126, or a forged "can't open file") before any model call
# was taken for a command that could not start: an error, out of every rate.


@pytest.mark.parametrize("argv", [
    "bash -c 'echo 41 > answer.txt; exit 127'",
    "bash -c 'exit 126'",
    "bash -c \"echo \\\"python3: can't open file '/x.py': [Errno 2] No such file\\\" >&2; "
    "exit 2\"",
])
def test_a_cli_agent_that_exits_127_itself_is_graded_not_an_error(sandbox_name, argv):
    run = run_suite(DATA / "cli-agent-exits-127.yaml", sandbox=sandbox_name,
                    agent="command", agent_options={"argv": argv, "model_proxy": False})
    task = run.tasks[0]
    assert (task.status, task.exit_status) == ("failed", "agent_failed"), task.error
    assert task.checks and not task.checks[0].passed


def test_a_cli_agent_that_exits_127_after_doing_the_work_passes(sandbox_name):
    """The control: what it left is graded, whatever it exited with."""
    run = run_suite(DATA / "cli-agent-exits-127.yaml", sandbox=sandbox_name,
                    agent="command", agent_options={
                        "argv": "bash -c 'echo 42 > answer.txt; exit 127'",
                        "model_proxy": False})
    assert (run.tasks[0].status, run.tasks[0].exit_status) == ("passed", "agent_failed")


@pytest.mark.parametrize("argv", [f"{sys.executable} /nonexistent/agent.py {{prompt}}",
                                  "python3 not-in-the-workspace.py {prompt}"])
def test_an_agent_whose_script_is_not_there_is_still_not_started(sandbox_name, argv):
    """The control: an interpreter that could not open its script, confirmed by a shell
    of evalctl's, is still an error of the attempt."""
    run = run_suite(DATA / "cli-agent-exits-127.yaml", sandbox=sandbox_name,
                    agent="command", agent_options={"argv": argv, "model_proxy": False})
    task = run.tasks[0]
    assert (task.status, task.exit_status) == ("error", "agent_not_started"), task.error
