"""The extras plugins, tested with evalctl.testing only (run by evalctl's own tests)."""

from __future__ import annotations

import asyncio

import evalctl_extras

import evalctl
from evalctl.testing import grade_check, run_suite

SUITE = """\
- id: echo-me
  prompt: the quick brown fox
  checks:
    - type: file_contains
      path: answer.txt
      text: brown fox
    - type: command
      command: test "$(cat answer.txt)" = "the quick brown fox"
"""


def test_the_echo_provider_passes_through_the_recording_sandbox(tmp_path):
    log = tmp_path / "commands.log"
    run = run_suite(SUITE, plugins=[evalctl_extras], provider="echo", sandbox="recording",
                    sandbox_options={"log": str(log)}, out_dir=tmp_path / "out",
                    reporters=["csv"])
    assert run.all_passed, [c.detail for t in run.tasks for c in t.checks]
    assert run.sandbox["name"] == "recording"
    lines = log.read_text().splitlines()
    assert lines[0] == "agent\techo-me\tclosed"  # the echo agent ran no command
    assert lines[1].startswith("grading\techo-me\t'test ")
    assert lines[-1] == "grading\techo-me\tclosed"
    report = next((tmp_path / "out").glob("report-*.csv")).read_text()
    assert report.splitlines() == ["task,attempt,status,failed_checks,cost",
                                   "echo-me,1,passed,,$0.0000"]


def test_a_check_graded_through_the_recording_sandbox(tmp_path):
    log = tmp_path / "commands.log"
    passed = grade_check({"type": "command", "command": "grep -q fox answer.txt"},
                         files={"answer.txt": "a fox"}, plugins=[evalctl_extras],
                         sandbox="recording", sandbox_options={"log": str(log)})
    failed = grade_check({"type": "command", "command": "grep -q fox answer.txt"},
                         files={"answer.txt": "a dog"}, plugins=[evalctl_extras],
                         sandbox="recording", sandbox_options={"log": str(log)})
    assert passed.passed and not failed.passed and failed.detail.startswith("exit 1")
    assert log.read_text().count("grep -q fox") == 2


def test_a_program_that_is_not_there_is_exit_127_as_in_every_sandbox(tmp_path):
    """The sandbox contract: an argv whose program cannot be run returns, never raises."""
    request = evalctl.SandboxRequest(workspace=tmp_path, home=tmp_path, tmp=tmp_path,
                                     env={"PATH": "/usr/bin:/bin"},
                                     options={"log": str(tmp_path / "commands.log")})
    sandbox = evalctl_extras.RecordingSandbox(request)
    missing = asyncio.run(sandbox.run(["no-such-program-here"], timeout=10))
    assert (missing.exit_code, missing.stderr) == (127, "no-such-program-here: command not found\n")
    (tmp_path / "data.txt").write_text("not a program")
    refused = asyncio.run(sandbox.run([str(tmp_path / "data.txt")], timeout=10))
    assert refused.exit_code == 126 and "Permission denied" in refused.stderr
