"""Every built-in grader, passing and failing, on real workspaces."""

from __future__ import annotations

import asyncio
import inspect
import os
import time

import pytest

import evalctl
from evalctl._run.runner import grade
from evalctl._workspace import create_workspace, new_run_directory
from evalctl.plugins.graders.grounding import extract_paths

from .conftest import sandbox_for


@pytest.fixture
def workspace(tmp_path):
    return create_workspace(new_run_directory(tmp_path), "task", {
        "seeded.py": "def old():\n    pass  # TODO: seeded, not the agent's\n",
        "notes.md": "# Notes\nport = 8080\n",
    })


def agent_result(workspace, final_text="Done.", status="completed", **overrides):
    fields = dict(final_text=final_text, exit_status=status, turns=2, tool_calls=1,
                  usage=evalctl.TokenUsage(10, 5), cost=0.0, duration=0.1,
                  files_changed=workspace.changed_files(), ledger_path=workspace.ledger_path,
                  seed_path=workspace.seed_path, sandbox=sandbox_for(workspace))
    fields.update(overrides)
    return evalctl.AgentResult(**fields)


def check(registry, workspace, spec: dict, result=None):
    grader = registry.graders[spec["type"]]
    outcome = asyncio.run(grade(spec, grader, workspace.root,
                                result or agent_result(workspace)))
    return outcome


def test_succeeded(registry, workspace):
    assert check(registry, workspace, {"type": "succeeded"}).passed
    stopped = check(registry, workspace, {"type": "succeeded"},
                    agent_result(workspace, status="max_turns", error="no final answer"))
    assert not stopped.passed and "max_turns: no final answer" in stopped.detail
    confessed = check(registry, workspace, {"type": "succeeded"},
                      agent_result(workspace, "I was unable to finish the migration."))
    assert not confessed.passed and "reports failure" in confessed.detail


def test_file_exists(registry, workspace):
    assert check(registry, workspace, {"type": "file_exists", "path": "notes.md"}).passed
    missing = check(registry, workspace, {"type": "file_exists", "path": "nope.md"})
    assert not missing.passed and missing.detail == "nope.md does not exist"
    escape = check(registry, workspace, {"type": "file_exists", "path": "../task/notes.md"})
    assert escape.passed  # resolves inside
    outside = check(registry, workspace, {"type": "file_exists", "path": "/etc/hostname"})
    assert not outside.passed and "outside the workspace" in outside.detail


def test_file_contains_text_regex_and_negation(registry, workspace):
    base = {"type": "file_contains", "path": "notes.md"}
    assert check(registry, workspace, {**base, "text": "port = 8080"}).passed
    absent = check(registry, workspace, {**base, "text": "port = 9090"})
    assert not absent.passed and "does not contain text 'port = 9090'" in absent.detail
    assert check(registry, workspace, {**base, "regex": r"^port = \d+$"}).passed
    assert check(registry, workspace, {**base, "text": "secret", "negate": True}).passed
    present = check(registry, workspace, {**base, "text": "8080", "negate": True})
    assert not present.passed and "which it must not" in present.detail


def test_command(registry, workspace):
    assert check(registry, workspace, {"type": "command", "command": "grep -q 8080 notes.md"}) \
        .passed
    failed = check(registry, workspace, {"type": "command", "command": "echo nope; exit 4"})
    assert not failed.passed and failed.detail == "exit 4\nnope"
    slow = check(registry, workspace, {"type": "command", "command": "sleep 10", "timeout": 0.5})
    assert not slow.passed and "timed out after 0.5s" in slow.detail


def test_command_runs_without_credentials(registry, workspace, monkeypatch):
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-leak")
    leaked = check(registry, workspace, {"type": "command",
                                         "command": "env | grep -q sk-leak"})
    assert not leaked.passed


def test_tests_pass(registry, workspace):
    (workspace.root / "test_ok.py").write_text("def test_ok():\n    assert 1 + 1 == 2\n")
    passed = check(registry, workspace, {"type": "tests_pass"})
    assert passed.passed, passed.detail
    # no duration: details stay the same run to run
    assert passed.detail == "1 passed (evalctl's witness saw 1 of 1 collected test(s) run)"
    (workspace.root / "test_bad.py").write_text("def test_bad():\n    assert 1 == 2\n")
    failed = check(registry, workspace, {"type": "tests_pass"})
    assert not failed.passed and "1 failed: test_bad.py::test_bad" in failed.detail


def test_tests_pass_with_no_tests_is_a_failure(registry, workspace):
    nothing = check(registry, workspace, {"type": "tests_pass"})
    assert not nothing.passed and nothing.detail.startswith("no tests were collected")
    custom = check(registry, workspace, {"type": "tests_pass", "command": "true"})
    assert custom.passed and "judged by its exit status" in custom.detail


def test_tests_pass_runs_the_named_tests_and_each_must_pass(registry, workspace):
    (workspace.root / "tests").mkdir()
    (workspace.root / "tests" / "test_a.py").write_text(
        "def test_one():\n    pass\n\ndef test_two():\n    assert False\n")
    (workspace.root / "test_b.py").write_text("def test_b():\n    pass\n")
    only_one = check(registry, workspace, {"type": "tests_pass",
                                           "tests": ["tests/test_a.py::test_one", "test_b.py"]})
    assert only_one.passed, only_one.detail
    assert only_one.detail.startswith("2 passed")
    named_failing = check(registry, workspace, {"type": "tests_pass",
                                                "tests": ["tests/test_a.py::test_two"]})
    assert not named_failing.passed and "tests/test_a.py::test_two" in named_failing.detail
    missing = check(registry, workspace, {"type": "tests_pass",
                                          "tests": ["tests/test_a.py::test_three"]})
    assert not missing.passed


@pytest.fixture(params=["local", "bwrap"])
def python_mode(request):
    """The sandbox the python grader's interpreter runs in."""
    if request.param == "bwrap":
        request.getfixturevalue("require_bwrap")
    return request.param


def in_sandbox(workspace, name):
    return agent_result(workspace, sandbox=sandbox_for(workspace, name))


def test_python_assertion(registry, workspace, python_mode):
    good = {"type": "python", "code": "assert (workspace / 'notes.md').exists()\n"
                                      "assert result.exit_status == 'completed'\n"
                                      "assert result.usage.input_tokens == 10"}
    assert check(registry, workspace, good, in_sandbox(workspace, python_mode)).passed
    bad = check(registry, workspace, {"type": "python",
                                      "code": "x = 2\nassert x == 3, f'x is {x}'"},
                in_sandbox(workspace, python_mode))
    assert not bad.passed and bad.detail.startswith("assertion failed: x is 2")
    crash = check(registry, workspace, {"type": "python", "code": "import os\nos._exit(9)"},
                  in_sandbox(workspace, python_mode))
    assert not crash.passed and "exited with 9" in crash.detail
    hang = check(registry, workspace, {"type": "python", "code": "while True: pass",
                                       "timeout": 0.5}, in_sandbox(workspace, python_mode))
    assert not hang.passed and "timed out" in hang.detail
    raised = check(registry, workspace, {"type": "python", "code": "{}['missing']"},
                   in_sandbox(workspace, python_mode))
    assert not raised.passed and "KeyError: 'missing'" in raised.detail
    printed = check(registry, workspace, {"type": "python", "code": "print('hello')"},
                    in_sandbox(workspace, python_mode))
    assert printed.passed and printed.detail == "the assertion held\nhello"


def test_a_python_check_gets_its_plan_as_json_would_give_it(registry, workspace, python_mode):
    """The runner reads its plan marshalled and imports neither json nor traceback for a
    check that passes (a quarter of its time); the values are the JSON report's (lists,
    not tuples), text keeps what it holds, and any line ending in the code is a newline."""
    workspace.root.joinpath("é.txt").write_text("x")
    light = {"type": "python", "code": (
        "import sys\n"
        "assert 'json' not in sys.modules and 'traceback' not in sys.modules\r\n"
        "assert isinstance(result.usage.input_tokens, int)\r"
        "assert type(result.final_text) is str and type(result.turns) is int\n"
        "assert [p.name for p in workspace.glob('*.txt')] == ['é.txt']\n"
        "assert type(result.events) is list\n"
        "assert all(type(e) is dict for e in result.events), result.events")}
    outcome = check(registry, workspace, light, in_sandbox(workspace, python_mode))
    assert outcome.passed, outcome.detail
    failing = check(registry, workspace, {"type": "python", "code": "1 / 0"},
                    in_sandbox(workspace, python_mode))
    assert not failing.passed and "ZeroDivisionError" in failing.detail \
        and 'File "<check>", line 1' in failing.detail


def test_python_checks_run_isolated(registry, workspace, python_mode, monkeypatch):
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-leak")
    (workspace.root / "helper.py").write_text("VALUE = 41\n")
    isolated = {"type": "python", "code": (
        "import os, helper\n"
        "assert os.getcwd() == str(workspace), os.getcwd()\n"
        "assert 'ANTHROPIC_API_KEY' not in os.environ\n"
        f"assert os.getsid(0) != {os.getsid(0)}\n"  # a session of its own
        "assert helper.VALUE + 1 == 42")}
    outcome = check(registry, workspace, isolated, in_sandbox(workspace, python_mode))
    assert outcome.passed, outcome.detail
    leftover = {"type": "python", "code": (
        "import subprocess\n"
        f"subprocess.Popen(['bash', '-c', 'sleep 2; touch {workspace.root}/late'])")}
    assert check(registry, workspace, leftover, in_sandbox(workspace, python_mode)).passed
    time.sleep(2.5)
    assert not (workspace.root / "late").exists(), "a child of the check outlived it"


def test_no_placeholders_blames_only_the_agents_lines(registry, workspace):
    assert check(registry, workspace, {"type": "no_placeholders"}).detail == \
        "the agent created or changed no files"
    (workspace.root / "clean.py").write_text("def add(a, b):\n    return a + b\n")
    (workspace.root / "seeded.py").write_text(
        "def old():\n    pass  # TODO: seeded, not the agent's\n\ndef new():\n    return 1\n")
    clean = check(registry, workspace, {"type": "no_placeholders"},
                  agent_result(workspace))
    assert clean.passed, clean.detail


@pytest.mark.parametrize("content, label", [
    ("def f():\n    pass  # TODO implement\n", "TODO"),
    ("def f():\n    raise NotImplementedError\n", "NotImplementedError"),
    ("def f():\n    ...\n", "'...' body"),
    ("def f(): ...\n", "'...' body"),
    ("# your code here\n", "your code here"),
    ("Lorem ipsum dolor sit amet.\n", "lorem ipsum"),
    ("Fix this FIXME later\n", "FIXME"),
    # Each pattern's clues, which let a block without any be passed over unsearched.
    ("# Implement me\n", "implement me"),
    ("Please FILL THIS IN\n", "implement me"),
    ("# \u0131mplement this\n", "implement me"),  # IGNORECASE: the dotless i is an i
    ("name = '<placeholder>'\n", "<placeholder>"),
    ("<Insert your name>\n", "<placeholder>"),
    ("Your Answer Goes Here\n", "your code here"),
    ("LOREM IPSUM\n", "lorem ipsum"),
    ("raise NotImplementedError()\n", "NotImplementedError"),
    ("XXX: later\n", "TODO/FIXME/XXX"),
    # Found by an attacker: Python reads identifiers in NFKC, so fullwidth letters raise
    # the real NotImplementedError; lines are matched in that form.
    ("raise \uff2e\uff4f\uff54\uff29\uff4d\uff50\uff4c\uff45\uff4d\uff45\uff4e\uff54"
     "\uff45\uff44\uff25\uff52\uff52\uff4f\uff52('later')\n", "NotImplementedError"),
    ("# \uff34\uff2f\uff24\uff2f: later\n", "TODO/FIXME/XXX"),
])
def test_no_placeholders_catches(registry, workspace, content, label):
    (workspace.root / "made.py").write_text(content)
    outcome = check(registry, workspace, {"type": "no_placeholders"}, agent_result(workspace))
    assert not outcome.passed
    assert "made.py:" in outcome.detail and label.lower() in outcome.detail.lower()


def test_ellipsis_in_prose_is_not_a_placeholder(registry, workspace):
    (workspace.root / "story.md").write_text("And then...\n...\nthe end.\n")
    assert check(registry, workspace, {"type": "no_placeholders"},
                 agent_result(workspace)).passed


def test_grounding(registry, workspace):
    (workspace.root / "src").mkdir()
    (workspace.root / "src" / "util.py").write_text("x = 1\n")
    ok = check(registry, workspace, {"type": "grounding"},
               agent_result(workspace, "Updated `src/util.py` and notes.md (see notes.md:2)."))
    assert ok.passed and ok.detail == "all 2 named file(s) exist: src/util.py, notes.md"
    bad = check(registry, workspace, {"type": "grounding"},
                agent_result(workspace, "Added tests in tests/test_util.py and util.py."))
    assert not bad.passed
    assert bad.detail.endswith("workspace: tests/test_util.py")  # util.py is src/util.py
    silent = check(registry, workspace, {"type": "grounding"}, agent_result(workspace, "Done."))
    # No claim: it passes, and is left out of grounding_rate (not rated).
    assert silent.passed and not silent.rated and silent.detail == (
        "the final summary names no files, so there is no claim to check "
        "(left out of grounding_rate)")


def test_grounding_accepts_deleted_files(registry, workspace):
    (workspace.root / "notes.md").unlink()
    outcome = check(registry, workspace, {"type": "grounding"},
                    agent_result(workspace, "Removed notes.md as asked."))
    assert outcome.passed


def test_grounding_does_not_follow_a_link_out_of_the_workspace(registry, workspace):
    """Found by an attacker: report.md, a link to /etc/hostname, counted as the report the
    summary named. A link that leads out names no file of the workspace, named whole or
    by its last parts; one that stays inside does."""
    (workspace.root / "docs").mkdir()
    (workspace.root / "docs" / "report.md").symlink_to("/etc/hostname")
    (workspace.root / "real.md").write_text("# real\n")
    (workspace.root / "docs" / "inside.md").symlink_to("../real.md")
    for claim in ("docs/report.md", "report.md"):
        outcome = check(registry, workspace, {"type": "grounding"},
                        agent_result(workspace, f"Wrote {claim}."))
        assert not outcome.passed and claim in outcome.detail, (claim, outcome.detail)
    outcome = check(registry, workspace, {"type": "grounding"},
                    agent_result(workspace, "Wrote docs/inside.md and inside.md."))
    assert outcome.passed, outcome.detail


GROUNDING_CASES = [
    ("Created hello.txt.", ["hello.txt"]),
    ("Wrote notes_é.md and `résumé.txt`; the café is closed.", ["notes_é.md", "résumé.txt"]),
    ("Updated docs/übersicht.md.", ["docs/übersicht.md"]),
    ("Wrote `src/app.py` and `tests/test_app.py`.", ["src/app.py", "tests/test_app.py"]),
    ('Saved the data to "out/data.json".', ["out/data.json"]),
    ("See ./scripts/run.sh for details", ["scripts/run.sh"]),
    ("The bug was in parser.py:42, now fixed.", ["parser.py"]),
    ("Changed utils.py:10:5 and main.go:3", ["utils.py", "main.go"]),
    ("Edited (config.yaml), [README.md] and {setup.cfg}.", ["config.yaml", "README.md",
                                                            "setup.cfg"]),
    ("Results are in report.csv; the chart is chart.png!", ["report.csv", "chart.png"]),
    ("Docs at https://example.com/docs/index.html were useful.", []),
    ("Visit www.example.org or example.com for more.", []),
    ("Email me at dev@example.com.", []),
    ("Upgraded to Python 3.11 and Django 4.2.1.", []),
    ("Bumped the version to v1.2.3.", []),
    ("Use sensible defaults, e.g. zero, i.e. nothing, etc.", []),
    ("Called json.dumps and os.path.join.", []),
    ("It handles input/output and read/write.", []),
    ("Cleaned the `build/` directory.", ["build/"]),
    ("Created the docs/ folder.", ["docs/"]),
    ("Updated `.gitignore` and `.env`.", [".gitignore", ".env"]),
    ("Added a Makefile target in `Makefile`.", ["Makefile"]),
    ("Nothing changed.", []),
    ("Ran pytest: 3 passed in 0.5s.", []),
    ("Wrote notes.md, then notes.md again.", ["notes.md"]),
    ("Wrote “quotes.txt” with smart quotes.", ["quotes.txt"]),
    ("See src/pkg/module.py#L10-L20.", ["src/pkg/module.py"]),
    ("Fixed a/b/c/d.rs", ["a/b/c/d.rs"]),
    ("The file is *bold.md*", ["bold.md"]),
    ("Costs $4.50 per unit, 3.5x faster.", []),
    ("Pi is 3.14159.", []),
    ("Saw ... and more...", []),
    ("Wrote ../outside.txt", []),
    ("Check http://localhost:8000/api/items.json", []),
    ("Created data.tar.gz and archive.zip", ["data.tar.gz", "archive.zip"]),
    ("Created `notes` only.", []),
    ("Edited Dockerfile and the README", []),
]


@pytest.mark.parametrize("summary, expected", GROUNDING_CASES)
def test_grounding_path_extraction(summary, expected):
    assert extract_paths(summary) == expected


def test_a_grader_that_raises_is_a_failed_check_and_the_run_goes_on(workspace):
    def explode(check, workspace, result):
        raise RuntimeError("bad grader")

    spec = evalctl.GraderSpec(name="explodes", grade=explode)
    outcome = asyncio.run(grade({"type": "explodes"}, spec, workspace.root,
                                agent_result(workspace)))
    assert (outcome.passed, outcome.error) == (False, True)
    assert outcome.detail == "grader crashed: RuntimeError: bad grader"
    wrong = evalctl.GraderSpec(name="wrong", grade=lambda c, w, r: True)
    outcome = asyncio.run(grade({"type": "wrong"}, wrong, workspace.root,
                                agent_result(workspace)))
    assert outcome.error and "expected evalctl.CheckResult" in outcome.detail


def _exits(check, workspace, result):
    raise SystemExit(0)  # a helper's sys.exit(), an argparse main() called for its work


async def _exits_on_the_loop(check, workspace, result):
    await asyncio.sleep(0)
    raise SystemExit(0)


def _interrupts(check, workspace, result):
    raise KeyboardInterrupt  # in a pool thread: the grader's own, never a Ctrl-C


async def _cancels_itself(check, workspace, result):
    raise asyncio.CancelledError  # the run cancelled nothing: the grader's own


@pytest.mark.parametrize("grader, said", [
    (_exits, "grader crashed: SystemExit(0): sys.exit() or exit() was called"),
    (_exits_on_the_loop, "grader crashed: SystemExit(0): sys.exit() or exit() was called"),
    (_interrupts, "grader crashed: KeyboardInterrupt: "),
    (_cancels_itself, "grader crashed: CancelledError: "),
])
def test_a_grader_that_exits_is_a_crashed_check_not_the_end_of_the_run(workspace, grader, said):
    """Found by a newcomer: a grader's SystemExit went through `except Exception`, out
    of the pool's thread and the event loop, and ended evalctl with exit 0, no reports."""
    spec = evalctl.GraderSpec(name="exits", grade=grader)
    outcome = asyncio.run(grade({"type": "exits"}, spec, workspace.root,
                                agent_result(workspace)))
    assert (outcome.passed, outcome.error) == (False, True)
    assert outcome.detail.startswith(said), outcome.detail


def test_the_runs_own_cancellation_still_stops_a_grader(workspace):
    started = asyncio.Event()

    async def waits(check, workspace, result):
        started.set()
        await asyncio.sleep(60)
        return evalctl.CheckResult(True, "never")

    async def main():
        spec = evalctl.GraderSpec(name="waits", grade=waits)
        grading = asyncio.ensure_future(grade({"type": "waits"}, spec, workspace.root,
                                              agent_result(workspace)))
        await started.wait()
        grading.cancel()  # Ctrl-C, as the run's task is cancelled
        with pytest.raises(asyncio.CancelledError):
            await grading

    asyncio.run(main())


def test_a_check_result_is_passed_or_failed_by_a_bool_alone():
    """Found by a newcomer: CheckResult("no", "the file is missing") passed, by the
    truthiness of "no"."""
    for value in ("no", 1, None, [], 0.0):
        with pytest.raises(TypeError, match="passed must be True or False, not "):
            evalctl.CheckResult(value, "x")
    with pytest.raises(TypeError, match="suspected_gaming must be True or False, not str"):
        evalctl.CheckResult(False, "x", suspected_gaming="yes")
    with pytest.raises(TypeError, match="rated must be True or False, not NoneType"):
        evalctl.CheckResult(True, "x", rated=None)
    assert evalctl.CheckResult(True).passed is True


def test_a_check_results_detail_is_a_str_not_shown_as_none_or_bytes():
    """Found by a newcomer: CheckResult(False, None) was reported as "None", a bytes
    detail as "b'\\xff...'"."""
    with pytest.raises(TypeError, match="detail must be a str, not NoneType .*\"\" for"):
        evalctl.CheckResult(False, None)
    with pytest.raises(TypeError, match="detail must be a str, not bytes .*decode it"):
        evalctl.CheckResult(False, b"\xff broken")
    assert evalctl.CheckResult(False).detail == ""


def test_markdown_shows_a_rate_as_its_grader_registered_it():
    """Found by a newcomer: "Tp2_quality", capitalized."""
    from evalctl.plugins.reporters.markdown import render

    checks = [evalctl.CheckOutcome("tp2_rated", "mechanical", True, "ok", rate="tp2_quality")]
    run = evalctl.RunResult("s.yaml", "s", "0" * 64, "scripted", None, "", "", "0", {},
                            [evalctl.TaskResult("a", "passed", checks=checks)])
    text = render(run)
    assert "- Rate tp2_quality: 100.0% (1/1 checks)" in text, text
    assert "Tp2_quality" not in text


def _says_no(check, workspace, result):
    return evalctl.CheckResult("no", "the file is missing")


async def _forgets_await(check, workspace, result):
    return evalctl.CheckResult(result.sandbox.run(["true"], timeout=10), "ran")


def _cannot_await(check, workspace, result):
    ran = result.sandbox.run(["false"], timeout=10)  # a coroutine, never run
    return evalctl.CheckResult(bool(ran), f"got {ran!r}")


@pytest.mark.parametrize("grader, said", [
    (_says_no, "grader crashed: TypeError: CheckResult's passed must be True or False, "
               "not str: 'no'"),
    (_forgets_await, "grader crashed: TypeError: CheckResult's passed must be True or "
                     "False, not a coroutine (LocalSandbox.run): an `await` is missing"),
    (_cannot_await, "grader crashed: TypeError: result.sandbox.run(...) was called "
                    "without `await`, so its command never ran"),
])
def test_a_grader_answer_that_is_not_true_or_false_is_its_error(workspace, grader, said):
    import gc
    import warnings

    spec = evalctl.GraderSpec(name="sloppy", grade=grader)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        outcome = asyncio.run(grade({"type": "sloppy"}, spec, workspace.root,
                                    agent_result(workspace)))
        gc.collect()
    assert (outcome.passed, outcome.error) == (False, True)
    assert outcome.detail.startswith(said), outcome.detail
    # The coroutine never awaited was closed: Python has nothing to warn of.
    assert not [w for w in caught if "never awaited" in str(w.message)]


@pytest.mark.parametrize("sandbox", ["local", "bwrap"])
def test_a_program_that_is_not_there_is_exit_127_in_every_sandbox(workspace, sandbox,
                                                                  request):
    """Found by a newcomer: `result.sandbox.run(["mytool", ...])` with no mytool was
    "exit 1: bwrap: execvp ..." under bwrap (the agent's failure) and a crashed grader
    (FileNotFoundError) under local. Both say it as a shell does: 127 for no such
    program, 126 for one that cannot be executed, the reason on stderr."""
    if sandbox == "bwrap":
        request.getfixturevalue("require_bwrap")
    (workspace.root / "data.txt").write_text("not a program\n")
    (workspace.root / "bin").mkdir()
    script = workspace.root / "bin" / "no-hash-bang"
    script.write_text("echo ran $1\n")
    script.chmod(0o755)
    box = sandbox_for(workspace, sandbox)
    env = {**box.request.env, "PATH": f"{workspace.root / 'bin'}:{box.request.env['PATH']}"}

    async def run_all():
        ran = {}
        for argv in (["mytool-not-installed", "x"], ["./missing"], ["./data.txt"], ["./bin"],
                     ["no-hash-bang", "by sh"]):
            apart = await box.run(argv, timeout=30, env=env)
            merged = await box.run(argv, timeout=30, env=env, merge_stderr=True)
            assert (merged.exit_code, merged.stdout) == (apart.exit_code, apart.stderr or
                                                         apart.stdout)
            ran[argv[0]] = (apart.exit_code, apart.stdout + apart.stderr)
        return ran

    assert asyncio.run(run_all()) == {
        "mytool-not-installed": (127, "mytool-not-installed: command not found\n"),
        "./missing": (127, "./missing: No such file or directory\n"),
        "./data.txt": (126, "./data.txt: Permission denied\n"),
        "./bin": (126, "./bin: Permission denied\n"),
        # a file with no #! is run by /bin/sh, as execvp and a shell run it
        "no-hash-bang": (0, "ran by sh\n"),
    }


def test_a_refused_answer_is_said_whole_with_no_traceback_to_look_for(workspace):
    """What the grader returned is refused by evalctl's own code: the detail says it
    all, and a traceback there would point at evalctl, not at the grader."""
    spec = evalctl.GraderSpec(name="wrong", grade=lambda c, w, r: True)
    outcome = asyncio.run(grade({"type": "wrong"}, spec, workspace.root,
                                agent_result(workspace), ledger=workspace.ledger_path))
    assert outcome.detail == ("grader crashed: TypeError: grade() returned bool, expected "
                              "evalctl.CheckResult")
    assert "grader_crashed" not in (workspace.ledger_path.read_text()
                                    if workspace.ledger_path.exists() else "")


def test_async_graders_are_awaited(workspace):
    async def later(check, workspace, result):
        await asyncio.sleep(0)
        return evalctl.CheckResult(True, "awaited")

    outcome = asyncio.run(grade({"type": "later"}, evalctl.GraderSpec(name="later", grade=later),
                                workspace.root, agent_result(workspace)))
    assert outcome.passed and outcome.detail == "awaited"


def test_every_builtin_grader_is_documented_from_its_spec(registry):
    from evalctl._plugin.docs import render_grader_docs

    from .conftest import ROOT

    documented = (ROOT / "docs" / "graders.md").read_text()
    assert documented == render_grader_docs(registry, builtins_only=True), \
        "docs/graders.md is stale: run python -m evalctl._plugin.docs > docs/graders.md"


def test_the_graders_module_docs_name_every_builtin(registry):
    for name, spec in registry.graders.items():
        assert spec.description, name
        assert inspect.signature(spec.grade).parameters.keys() >= {"check", "workspace",
                                                                  "result"}, name


def test_every_builtin_example_is_a_valid_check(registry, write_suite):
    from evalctl._suite.loader import validate_suite

    for name, spec in registry.graders.items():
        assert spec.example, f"{name} has no example"
        # The examples name test_slugify.py, which a prompt must ask for (tests_pass).
        lines = ["- id: t", "  prompt: Write tests/test_slugify.py.", "  checks:",
                 "    - type: file_exists",
                 "      path: x"]
        lines += ["    " + line for line in spec.example.strip().splitlines()]
        path = write_suite("\n".join(lines) + "\n", name=f"{name}.yaml")
        assert validate_suite(path) == [], (name, spec.example)


def _deep_tree(root, depth: int, leaf: str | None = None) -> None:
    """`depth` nested directories `d` under `root`, made through directory descriptors
    (the path of the deepest is longer than the kernel takes in one call), with `leaf`
    written at the bottom."""
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for _ in range(depth):
            os.mkdir("d", dir_fd=fd)
            below = os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = below
        if leaf is not None:
            made = os.open("leaf.py", os.O_CREAT | os.O_WRONLY, 0o644, dir_fd=fd)
            os.write(made, leaf.encode())
            os.close(made)
    finally:
        os.close(fd)


def test_a_symlink_loop_fails_the_file_checks_instead_of_crashing_them(registry, workspace):
    (workspace.root / "loop1").symlink_to("loop2")
    (workspace.root / "loop2").symlink_to("loop1")
    (workspace.root / "lazy.py").write_text("def f():\n    pass  # TODO\n")
    lazy = check(registry, workspace, {"type": "no_placeholders"}, agent_result(workspace))
    assert not lazy.error and not lazy.passed, lazy.detail
    assert "lazy.py:2" in lazy.detail
    for spec in ({"type": "file_contains", "path": "loop1", "text": "x", "negate": True},
                 {"type": "file_exists", "path": "loop1/x"}):
        outcome = check(registry, workspace, spec)
        assert not outcome.error and not outcome.passed, outcome.detail
        assert "cannot be resolved" in outcome.detail or "does not exist" in outcome.detail


def test_a_deep_tree_does_not_crash_tests_pass_before_it_sees_the_conftest(registry,
                                                                           workspace):
    from evalctl._files import remove_tree

    (workspace.root / "conftest.py").write_text("# rewrites reports\n")
    _deep_tree(workspace.root, 1100, leaf="x = 1\n")
    try:
        outcome = check(registry, workspace, {"type": "tests_pass"}, agent_result(workspace))
    finally:  # pytest's own clean-up of old temporary directories recurses
        remove_tree(workspace.root / "d")
    assert not outcome.error, outcome.detail
    assert outcome.suspected_gaming and "conftest.py" in outcome.detail


def test_a_path_too_long_to_look_up_is_not_grounded_and_no_crash(registry, workspace):
    summary = "Wrote " + "/".join(["d" * 200] * 30) + "/x.py."
    outcome = check(registry, workspace, {"type": "grounding"}, agent_result(workspace, summary))
    assert not outcome.error, outcome.detail
    assert not outcome.passed


PADDING = ("#" * 99 + "\n") * 110_000  # 11 MB of comment lines: past any one read


def test_padding_cannot_hide_text_from_a_negated_file_contains(registry, workspace):
    (workspace.root / "config.py").write_text(PADDING + 'PASSWORD = "hunter2"\n')
    base = {"type": "file_contains", "path": "config.py"}
    hidden = check(registry, workspace, {**base, "text": "hunter2", "negate": True})
    assert not hidden.passed and not hidden.error
    assert "contains text 'hunter2', which it must not (read whole: 11000021 bytes)" \
        in hidden.detail
    assert check(registry, workspace, {**base, "text": "hunter2"}).passed
    gone = check(registry, workspace, {**base, "text": "hunter3", "negate": True})
    assert gone.passed and gone.detail.endswith("(read whole: 11000021 bytes)")
    # A regex is matched within the first 5 MB: past that, neither form passes.
    for negate in (True, False):
        regex = check(registry, workspace, {**base, "regex": "hunter[0-9]", "negate": negate})
        assert not regex.passed and not regex.error, regex.detail
        assert "could not be searched whole for regex 'hunter[0-9]': only its first 5.0 MB " \
               "of 11.0 MB were read" in regex.detail


def test_text_across_a_chunk_boundary_is_found(registry, workspace):
    from evalctl.plugins.graders.files import CHUNK

    (workspace.root / "big.txt").write_text("x" * (CHUNK - 3) + "needle" + "y" * 10)
    outcome = check(registry, workspace, {"type": "file_contains", "path": "big.txt",
                                          "text": "needle", "negate": True})
    assert not outcome.passed and "which it must not" in outcome.detail


def test_padding_cannot_hide_a_placeholder(registry, workspace):
    (workspace.root / "config.py").write_text(PADDING + "# TODO: really remove it\n")
    outcome = check(registry, workspace, {"type": "no_placeholders"}, agent_result(workspace))
    assert not outcome.passed and not outcome.error
    assert "config.py:110001: a TODO/FIXME/XXX marker" in outcome.detail
    assert "(read whole: 11000025 bytes)" in outcome.detail


def test_a_line_too_long_to_scan_fails_no_placeholders(registry, workspace):
    (workspace.root / "min.js").write_text("var a = 1;\n" + "x" * 2_000_000 + " // TODO\n")
    outcome = check(registry, workspace, {"type": "no_placeholders"}, agent_result(workspace))
    assert not outcome.passed and not outcome.error
    assert "not scanned for placeholders (a line over 1 MB" in outcome.detail
    assert "min.js:2" in outcome.detail


def _finishes_within(work, seconds: float) -> bool:
    """Whether `work`, run in a thread, ends within `seconds`: the inputs below take
    Python's backtracking re minutes (and hold a pool thread, and the GIL half the time,
    all along); matched in linear time they take milliseconds."""
    import threading

    thread = threading.Thread(target=work, daemon=True)
    started = time.monotonic()
    thread.start()
    thread.join(seconds)  # late, when the work holds the GIL: hence the clock
    return not thread.is_alive() and time.monotonic() - started < seconds


def test_an_agents_text_cannot_freeze_the_loop_through_a_graders_regex(registry, workspace):
    """Python's re backtracks: `<insert ` 60,000 times with no `>`, or 60,000 digits
    against `\\d+ passed`, took it minutes, every attempt slowed. Graders match with RE2."""
    (workspace.root / "made.md").write_text("<insert " * 60_000 + "\n" + "1" * 60_000 + "\n")
    result = agent_result(workspace)
    outcomes = []

    def grade_both() -> None:
        outcomes.append(check(registry, workspace, {"type": "no_placeholders"}, result))
        outcomes.append(check(registry, workspace, {"type": "file_contains", "path": "made.md",
                                                    "regex": r"\d+ passed"}, result))

    assert _finishes_within(grade_both, 10)
    assert outcomes[0].passed  # no placeholder: `<insert ` never closes
    assert not outcomes[1].passed and "does not contain regex" in outcomes[1].detail


def test_a_regex_that_needs_backtracking_is_a_configuration_error(registry, workspace):
    outcome = check(registry, workspace, {"type": "file_contains", "path": "notes.md",
                                          "regex": r"port(?= = 8080)"})
    assert outcome.error and not outcome.passed
    assert "cannot be matched in linear time" in outcome.detail
    plain = check(registry, workspace, {"type": "file_contains", "path": "notes.md",
                                        "regex": r"^port = \d+$"})
    assert plain.passed  # multiline: ^ and $ at every line


def test_a_regex_re2_cannot_match_stops_the_run_before_any_task(tmp_path):
    """Found by an attacker: such a regex passed validate and made every attempt an
    error. The grader's preflight compiles each one first: exit 2, naming the regex."""
    from .conftest import run_cli

    (tmp_path / "suite.yaml").write_text(
        "- id: t\n  prompt: p\n  checks:\n    - type: file_contains\n      path: a.md\n"
        "      regex: 'port(?= = 8080)'\n")
    result = run_cli(tmp_path, "suite.yaml", "--sandbox", "local")
    assert result.exit_code == 2, result.output
    assert "file_contains regex 'port(?= = 8080)' cannot be matched in linear time" in \
        result.output
    assert not list(tmp_path.glob("eval_reports/workspaces-*/t"))  # no task started


def test_every_bad_regex_and_uncompilable_check_stops_the_run_saying_what_is_wrong(
        tmp_path):
    """Found by a newcomer: '(a' was said to be unmatchable "in linear time" (it is not a
    regex), in RE2's bytes, and only the first bad regex was named; a python check whose
    code does not compile was scored as every agent's failure. Both stop the run before
    any task, exit 2, naming each."""
    from .conftest import run_cli

    (tmp_path / "suite.yaml").write_text(
        "- id: t\n  prompt: p\n  checks:\n    - type: file_contains\n      path: a.md\n"
        "      regex: '(a'\n    - type: file_contains\n      path: a.md\n"
        "      regex: 'port(?= = 8080)'\n"
        "- id: u\n  prompt: p\n  checks:\n    - type: python\n"
        "      code: 'assert (workspace / \"a.md\").exists('\n")
    result = run_cli(tmp_path, "suite.yaml", "--sandbox", "local")
    assert result.exit_code == 2, result.output
    assert "file_contains regex '(a' is not a regular expression: missing )" in result.output
    assert "regex 'port(?= = 8080)' cannot be matched in linear time: invalid perl " \
        "operator: (?=" in result.output and "b'" not in result.output
    assert "the python check starting 'assert (workspace / \"a.md\").exists(' does not " \
        "compile: line 1: " in result.output
    assert "Traceback" not in result.output
    assert not list(tmp_path.glob("eval_reports/workspaces-*/t"))  # no task started


def test_a_token_of_the_final_text_cannot_make_grounding_backtrack():
    # `1.1`, 29 letters and `_`: about 20 s of backtracking before the pattern was made
    # possessive (27 letters took 5 s, each letter more doubles it).
    text = "I edited 1.1" + "a" * 29 + "_ and 1.2.3-rc.1, v2.0a1 and src/app.py"
    found: list[list[str]] = []
    assert _finishes_within(lambda: found.append(extract_paths(text)), 10)
    assert found == [["src/app.py"]]  # the versions are still not taken for paths


def test_what_the_agent_hides_from_the_file_graders_fails_them(registry, workspace):
    """Found by an attacker: a path whose links resolve to a name too long for the
    kernel crashed file_exists and file_contains (the attempt then counted as an error,
    out of the score), and a second name (a hard link) for a file with a placeholder
    made no_placeholders pass it unread. Each is now the check's failure."""
    half = "/".join(["d" * 250] * 12)  # 3,011 characters: a link may hold that much
    os.symlink(half, workspace.root / "a")
    os.symlink(f"a/{half}", workspace.root / "out")  # which resolves to 6,000
    for params in ({"type": "file_exists", "path": "out"},
                   {"type": "file_contains", "path": "out", "text": "x"},
                   {"type": "file_contains", "path": "out", "text": "x", "negate": True}):
        outcome = check(registry, workspace, params)
        assert not outcome.passed and not outcome.error and "cannot be read" in outcome.detail, \
            (params, outcome)
    (workspace.root / "solution.py").write_text("def f():\n    pass  # TODO\n")
    os.link(workspace.root / "solution.py", workspace.root / ".solution.bak")
    hidden = check(registry, workspace, {"type": "no_placeholders"}, agent_result(workspace))
    assert not hidden.passed and "solution.py (a hard link: not read)" in hidden.detail


def test_grounding_matches_a_path_named_from_a_subdirectory_by_its_last_parts(registry,
                                                                             workspace):
    """Each claim was a scan of every file (2,000 claims over 200,000 files: 45 s); the
    files' last parts are now sets, one per number of parts asked about."""
    (workspace.root / "src" / "utils").mkdir(parents=True)
    (workspace.root / "src" / "utils" / "x.py").write_text("")
    named = agent_result(workspace, final_text="Changed utils/x.py and x.py; "
                                               "not src/y.py or tils/x.py.")
    outcome = check(registry, workspace, {"type": "grounding"}, named)
    assert not outcome.passed
    assert outcome.detail.endswith("src/y.py, tils/x.py"), outcome.detail


def test_a_ledger_line_nested_past_reading_is_passed_over_by_the_python_check(registry,
                                                                                workspace):
    """Found by an attacker: a CLI agent's request naming a model nested 970 deep was
    written to the ledger, and the python check's reading of it crashed the grader.
    The proxy now records a model as short text; a line too deep to read is passed over."""
    from evalctl._agent.proxy import _shown_model

    assert _shown_model({"a": {"b": 1}}) == "'dict'" and _shown_model("m" * 500).endswith("…")
    deep = "[" * 5000 + "]" * 5000
    workspace.ledger_path.parent.mkdir(parents=True, exist_ok=True)
    workspace.ledger_path.write_text('{"event": "start"}\n{"event": "x", "v": ' + deep + "}\n")
    outcome = check(registry, workspace, {"type": "python", "code":
                                          "assert [e['event'] for e in result.events] == "
                                          "['start']"}, agent_result(workspace))
    assert outcome.passed, outcome.detail


def test_a_line_separator_in_an_agents_command_keeps_its_event_in_the_python_check(
        registry, workspace):
    """Found by an attacker: the ledger keeps U+2028 (and U+2029, U+0085) as they are
    inside its strings, and the python check read it with splitlines(), which splits
    there: the event holding one could not be read and was passed over, so a check that
    forbids `bash` passed for an agent that used it. JSON Lines end at "\\n" alone."""
    from evalctl._agent.ledger import Ledger

    ledger = Ledger(workspace.ledger_path)
    for separator in ("\u2028", "\u2029", "\u0085"):
        ledger.append("tool_call", name="bash", arguments={"command": f"cat key # {separator}"})
    ledger.close()
    outcome = check(registry, workspace, {"type": "python", "code":
                                          "names = [e['name'] for e in result.events]\n"
                                          "assert names == ['bash'] * 3, names"},
                    agent_result(workspace))
    assert outcome.passed, outcome.detail


def test_a_line_ended_with_crlf_or_cr_still_ends_at_dollar(registry, workspace):
    """Found by an attacker: `DEBUG = False\\nDEBUG = True\\r\\n` passed a negated
    `^DEBUG = True$`, though Python reads the file with DEBUG True. Lines end as Python
    reads them: at \\n, \\r\\n or \\r."""
    for ending in ("\r\n", "\r"):
        (workspace.root / "settings.py").write_bytes(
            f"DEBUG = False\nDEBUG = True{ending}x = 1".encode())
        negated = check(registry, workspace, {"type": "file_contains", "path": "settings.py",
                                              "regex": "^DEBUG = True$", "negate": True},
                        agent_result(workspace))
        assert not negated.passed, (ending, negated.detail)
        plain = check(registry, workspace, {"type": "file_contains", "path": "settings.py",
                                            "regex": "^x = 1$"}, agent_result(workspace))
        assert plain.passed, (ending, plain.detail)
