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


# --------------------------------------------------------------------------------------
# The built-in loop sends the model's own turns back verbatim: a turn whose text is only
# whitespace made the next request one the API refuses (400: text content blocks must
# contain non-whitespace text), and a refused request ended the attempt as a
# provider_error, an error out of every rate.

FAIL_QUIETLY = """\
name: loop-request-rejected
tasks:
  - id: answer
    prompt: Write the answer, 42, to answer.txt.
    limits:
      turns: 5
    checks:
      - type: file_contains
        path: answer.txt
        text: "42"
"""


def _as_the_api_judges(reply):
    """The Messages API's rule on text blocks, then `reply`."""
    from tests.messages_server import error

    def serve(body):
        for message in body.get("messages", []):
            content = message.get("content")
            blocks = content if isinstance(content, list) else []
            if any(b.get("type") == "text" and not b.get("text", "").strip() for b in blocks):
                return error(400, "invalid_request_error",
                             "messages: text content blocks must contain non-whitespace text")
        return reply
    return serve


def _loop_run(tmp_path, monkeypatch, sandbox_name, first_text, answer):
    from tests.messages_server import MessagesServer, message, text_block, tool_use

    with MessagesServer() as server:
        monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-test-key")
        monkeypatch.setenv("ANTHROPIC_BASE_URL", server.url)
        server.replies += [
            _as_the_api_judges(message([text_block(first_text), tool_use(
                "toolu_1", "write_file", path="answer.txt", content=answer)], "tool_use")),
            _as_the_api_judges(message([text_block("Done.")], "end_turn")),
        ]
        run = run_suite(FAIL_QUIETLY, provider="anthropic", sandbox=sandbox_name,
                        out_dir=tmp_path, provider_options={"max_retries": "0"})
    return run.tasks[0], server.requests


def test_a_whitespace_turn_does_not_make_the_next_request_refused(tmp_path, monkeypatch,
                                                                  require_bwrap):
    task, requests = _loop_run(tmp_path, monkeypatch, "bwrap", " \n", "41\n")
    assert (task.status, task.exit_status) == ("failed", "completed"), task.error
    assert len(requests) == 2


def test_a_whitespace_turn_then_the_work_passes(tmp_path, monkeypatch, require_bwrap):
    """The control: an honest model's stray empty text block costs it nothing."""
    task, _ = _loop_run(tmp_path, monkeypatch, "bwrap", "\n\n", "42\n")
    assert (task.status, task.exit_status) == ("passed", "completed"), task.error


def test_a_refused_request_after_the_models_turns_is_graded(tmp_path, monkeypatch,
                                                            require_bwrap):
    """Whatever else the API refuses once the request holds the model's turns and its
    tools' output is the agent's doing, as through the model proxy: graded, never an
    error; a refusal of the first request (the suite's and the configuration's alone)
    stays an error."""
    from tests.messages_server import MessagesServer, error, message, text_block, tool_use

    refused = error(400, "invalid_request_error", "messages.1.content.0: something else")
    with MessagesServer() as server:
        monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-test-key")
        monkeypatch.setenv("ANTHROPIC_BASE_URL", server.url)
        server.replies += [message([text_block("Writing."), tool_use(
            "toolu_1", "write_file", path="answer.txt", content="41\n")], "tool_use"),
            refused, refused]
        run = run_suite(FAIL_QUIETLY, provider="anthropic", sandbox="bwrap",
                        out_dir=tmp_path / "a", provider_options={"max_retries": "0"})
        first = run_suite(FAIL_QUIETLY, provider="anthropic", sandbox="bwrap",
                          out_dir=tmp_path / "b", provider_options={"max_retries": "0"})
    task = run.tasks[0]
    assert (task.status, task.exit_status) == ("failed", "request_rejected"), task.error
    assert "something else" in task.error
    assert (first.tasks[0].status, first.tasks[0].exit_status) == ("error", "provider_error")


# --------------------------------------------------------------------------------------
# The graders' HOME and TMPDIR are emptied before each check that follows one that ran,
# by path: a tree deeper than PATH_MAX, made there by the agent's code in one check,
# could not be removed, and the next check became an error (and the attempt with it).


def test_a_deep_tree_in_the_graders_tmpdir_does_not_make_the_next_check_an_error(
        sandbox_name):
    run = run_suite(DATA / "deep-tmp-launders-a-failure.yaml", sandbox=sandbox_name)
    task = run.tasks[0]
    assert task.status == "failed", (task.error, [c.detail for c in task.checks])
    assert [(c.passed, c.error) for c in task.checks] == [(True, False), (False, False)]


def test_a_deep_tree_and_the_honest_fix_passes(sandbox_name):
    """The control: the same agent's code, with add() fixed, passes both checks."""
    suite = (DATA / "deep-tmp-launders-a-failure.yaml").read_text()
    fixed = suite.replace("                    return a - b\n      - text:",
                          "                    return a + b\n      - text:")
    assert fixed != suite
    run = run_suite(fixed, sandbox=sandbox_name)
    assert run.tasks[0].status == "passed", [c.detail for c in run.tasks[0].checks]


def test_remove_tree_removes_a_tree_deeper_than_path_max(tmp_path):
    import os

    from evalctl._files import empty_directory, remove_tree

    top = tmp_path / "top"
    top.mkdir()
    fd = os.open(top, os.O_RDONLY)
    try:
        for _ in range(40):
            os.mkdir("d" * 200, dir_fd=fd)
            below = os.open("d" * 200, os.O_RDONLY, dir_fd=fd)
            os.close(fd)
            fd = below
        os.close(os.open("f", os.O_CREAT | os.O_WRONLY, dir_fd=fd))
        os.symlink("/", "link", dir_fd=fd)
        os.mkdir("shut", dir_fd=fd)
        os.chmod("shut", 0o500, dir_fd=fd)
    finally:
        os.close(fd)
    (tmp_path / "keep").mkdir()
    (tmp_path / "keep" / "a").write_text("a")
    assert empty_directory(tmp_path, keep={"keep"}) == []
    assert sorted(p.name for p in tmp_path.iterdir()) == ["keep"]
    remove_tree(tmp_path / "keep")
    assert not (tmp_path / "keep").exists()
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "precious").write_text("x")
    (tmp_path / "linked").symlink_to(outside)
    remove_tree(tmp_path / "linked")  # a link is never followed
    assert (outside / "precious").exists()


@pytest.mark.parametrize("argv", ["bash -c 'exit 127' {prompt}",
                                  "bash -c 'exit 127' {prompt_file}"])
def test_an_own_exit_127_with_a_prompt_of_several_lines_is_graded(sandbox_name, argv):
    """The prompt given as an argument holds line breaks (quoted in the command line),
    or is saved to a file first: the command's program is still the one looked for."""
    suite = (DATA / "cli-agent-exits-127.yaml").read_text().replace(
        "prompt: Write the answer, 42, to answer.txt.",
        "prompt: |\n      Write the answer,\n      42, to answer.txt.")
    run = run_suite(suite, sandbox=sandbox_name, agent="command",
                    agent_options={"argv": argv, "model_proxy": False})
    task = run.tasks[0]
    assert (task.status, task.exit_status) == ("failed", "agent_failed"), task.error


# --------------------------------------------------------------------------------------
# The graders' HOME, made unlistable by the agent's code in one check, was taken for
# empty by an evalctl not running as root: what the agent left there (~/.npmrc) stayed
# for the next check, whose tool opens it by name.


def _listing_as_an_ordinary_user(monkeypatch, name: str) -> None:
    """os.listdir or os.scandir (`name`) as it is for a user who is not root: a directory
    whose owner may not read it cannot be listed (root lists it anyway)."""
    import os
    import stat

    original = getattr(os, name)

    def listing(path="."):
        if isinstance(path, (str, bytes, os.PathLike)) and \
                not os.stat(path).st_mode & stat.S_IRUSR:
            raise PermissionError(13, "Permission denied", os.fspath(path))
        return original(path)

    monkeypatch.setattr(os, name, listing)


def test_an_unlistable_graders_home_is_emptied_before_the_next_check(monkeypatch,
                                                                     sandbox_name):
    _listing_as_an_ordinary_user(monkeypatch, "listdir")
    _listing_as_an_ordinary_user(monkeypatch, "scandir")
    run = run_suite(DATA / "unlistable-home-keeps-npmrc.yaml", sandbox=sandbox_name)
    task = run.tasks[0]
    assert [(c.passed, c.error) for c in task.checks] == [(True, False), (True, False)], \
        [c.detail for c in task.checks]


# --------------------------------------------------------------------------------------
# A directory the agent made unreadable (chmod 0311) was passed over by every walk of an
# evalctl not running as root: what the agent created there was not among its changes.


def test_a_stub_in_an_unreadable_directory_is_still_a_placeholder(monkeypatch,
                                                                  sandbox_name):
    _listing_as_an_ordinary_user(monkeypatch, "scandir")
    run = run_suite(DATA / "unreadable-dir-hides-placeholders.yaml", sandbox=sandbox_name)
    task = run.tasks[0]
    assert task.status == "failed", [c.detail for c in task.checks]
    placeholders = task.checks[0]
    assert not placeholders.passed and "pkg/impl.py" in placeholders.detail, \
        placeholders.detail
