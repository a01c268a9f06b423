"""Errors are not failures: what went wrong outside the agent's work is an error, with
what to do about it, left out of every rate and listed apart."""

from __future__ import annotations

import json
import subprocess
import sys
import types
from pathlib import Path

import pytest

import evalctl
from evalctl._plugin.registry import set_registry
from evalctl._report.compare import compare_reports
from evalctl._report.results import CheckOutcome, RunResult, TaskResult

from .conftest import ROOT, environment_without_evalctl_settings, registry_with, run_cli

FIX = """\
- id: fix-add
  prompt: Make add() add, and keep the test passing.
  files:
    calc.py: |
      def add(a, b):
          return a - b
    test_calc.py: |
      from calc import add

      def test_add():
          assert add(2, 3) == 5
  checks:
    - type: tests_pass
  script:
    - tool_calls:
        - tool: edit_file
          input:
            path: calc.py
            old_text: a - b
            new_text: a + b
    - text: Fixed calc.py.
- id: honest
  prompt: Write a.txt.
  checks:
    - type: file_exists
      path: a.txt
  script:
    - tool_calls:
        - tool: write_file
          input:
            path: a.txt
            content: a
    - text: Wrote a.txt.
"""


def interpreter_without_pytest(where: Path) -> Path:
    """A Python with evalctl and everything it needs, but no pytest: a venv whose site
    directory holds links to this environment's packages, pytest's left out."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(where / "venv")],
                   check=True, timeout=120, capture_output=True)
    installed = Path(pytest.__file__).resolve().parents[1]
    packages = where / "packages"
    packages.mkdir()
    for entry in installed.iterdir():
        if entry.name.split("-")[0] in ("pytest", "_pytest", "py.py", "iniconfig"):
            continue
        (packages / entry.name).symlink_to(entry)
    site = next((where / "venv" / "lib").glob("python3*/site-packages"))
    (site / "evalctl-without-pytest.pth").write_text(
        f"import site; site.addsitedir({str(packages)!r})\n")
    python = where / "venv" / "bin" / "python"
    probe = subprocess.run([str(python), "-c", "import evalctl, evalctl._cli; import pytest"],
                           capture_output=True, text=True, timeout=60)
    assert "No module named 'pytest'" in probe.stderr, probe.stderr  # evalctl yes, pytest no
    return python


def test_tests_pass_without_pytest_is_an_error_saying_to_install_it(tmp_path):
    python = interpreter_without_pytest(tmp_path)
    (tmp_path / "suite.yaml").write_text(FIX)
    done = subprocess.run([str(python), "-m", "evalctl", "run", "suite.yaml", "--report",
                           "r.json", "--reporter", "markdown"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120,
                          env=environment_without_evalctl_settings())
    assert done.returncode == 1, done.stdout + done.stderr
    report = json.loads((tmp_path / "r.json").read_text())
    fix = report["tasks"][0]
    assert (fix["status"], fix["error_kind"]) == ("error", "grader")
    check = fix["checks"][0]
    assert check["error"] is True and check["passed"] is False
    assert "pytest is not installed" in check["detail"] and "install pytest" in check["detail"]
    summary = report["summary"]
    # The error is not a failure: completion is over the honest task alone.
    assert (summary["passed"], summary["failed"], summary["errors"]) == (1, 0, 1)
    assert summary["completion_rate"] == 1.0
    assert report["errors"] == [{
        "id": "fix-add", "attempt": 1, "kind": "grader", "detail": f"tests_pass: {check['detail']}",
        "remedy": report["errors"][0]["remedy"]}]
    markdown = next((tmp_path / "eval_reports").glob("report-*.md")).read_text()
    assert "### Errors (not failures: left out of completion)" in markdown
    assert "| fix-add | grader | tests_pass: cannot run here: pytest is not installed" in markdown


def test_with_pytest_the_same_fix_passes(tmp_path):
    (tmp_path / "suite.yaml").write_text(FIX)
    result = run_cli(tmp_path, "suite.yaml", "--report", "r.json")
    assert result.exit_code == 0, result.output


def test_an_agent_cannot_fake_a_missing_pytest(tmp_path):
    faked = FIX.replace("""            old_text: a - b
            new_text: a + b
""", """            old_text: a - b
            new_text: a * b
    - tool_calls:
        - tool: write_file
          input:
            path: conftest.py
            content: print("No module named pytest")
""")
    (tmp_path / "suite.yaml").write_text(faked)
    result = run_cli(tmp_path, "suite.yaml", "--report", "r.json")
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["tasks"][0]["status"] == "failed", result.output
    assert not report["tasks"][0]["checks"][0]["error"]


def _grader_plugin(**graders) -> types.ModuleType:
    @evalctl.hookimpl
    def evalctl_register_graders(register):
        for name, spec in graders.items():
            register(evalctl.GraderSpec(name=name, **spec))

    plugin = types.ModuleType("extra_graders")
    plugin.evalctl_register_graders = evalctl_register_graders
    return plugin


def test_a_grader_that_cannot_run_here_is_an_error_with_its_fix(tmp_path):
    def needs_a_tool(check, workspace, result):
        raise evalctl.GraderUnavailable("the frobnicator is not installed: apt-get install "
                                        "frobnicator")

    set_registry(registry_with(("extra_graders", _grader_plugin(
        frobnicated={"grade": needs_a_tool}))))
    (tmp_path / "suite.yaml").write_text(FIX.split("- id: honest")[0].replace(
        "    - type: tests_pass\n", "    - type: frobnicated\n    - type: grounding\n")
        + "- id: honest" + FIX.split("- id: honest")[1])
    result = run_cli(tmp_path, "suite.yaml", "--report", "r.json", "--reporter", "junit")
    assert result.exit_code == 1
    assert "error (grader) fix-add: frobnicated: cannot run here: the frobnicator is not " \
           "installed: apt-get install frobnicator" in result.output
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["summary"]["completion_rate"] == 1.0
    # The errored attempt's grounding check is in no rate either.
    assert report["summary"]["grounding_checks"] == {"passed": 0, "total": 0, "errors": 0}
    junit = next((tmp_path / "eval_reports").glob("report-*.xml")).read_text()
    assert '<error message="frobnicated: cannot run here: the frobnicator' in junit
    assert 'type="grader"' in junit


def _outcome(passed: bool, error: bool = False, kind: str = "mechanical") -> CheckOutcome:
    return CheckOutcome("some_check", kind, passed, "detail", error=error)


@pytest.mark.parametrize(("exit_status", "checks", "status"), [
    ("completed", [_outcome(True), _outcome(True)], "passed"),
    ("completed", [_outcome(True), _outcome(False)], "failed"),
    # A failure another check's crash cannot hide: the agent could crash a grader on
    # purpose (a symlink loop, a deep tree) to move a failure out of the rates.
    ("completed", [_outcome(False), _outcome(False, error=True)], "failed"),
    ("completed", [_outcome(False, error=True), _outcome(False)], "failed"),
    ("completed", [_outcome(True), _outcome(False, error=True)], "error"),
    ("provider_error", [_outcome(False)], "error"),  # the agent's error status first
    ("completed", [_outcome(True), _outcome(False, kind="judge")], "passed"),  # no judge
    ("completed", [_outcome(True), _outcome(False, error=True, kind="judge")], "passed"),
])
def test_the_attempt_status_rule(exit_status, checks, status):
    from evalctl._run.grading import attempt_status

    assert attempt_status(exit_status, checks, {"provider_error"}) == status


def test_a_crashing_grader_does_not_hide_a_real_failure(tmp_path):
    def crashes(check, workspace, result):
        raise RecursionError("maximum recursion depth exceeded")

    set_registry(registry_with(("extra_graders", _grader_plugin(
        fragile={"grade": crashes}))))
    (tmp_path / "suite.yaml").write_text(FIX.split("- id: honest")[0].replace(
        "    - type: tests_pass\n",
        "    - type: fragile\n    - type: file_exists\n      path: never.txt\n"))
    result = run_cli(tmp_path, "suite.yaml", "--report", "r.json")
    assert result.exit_code == 1, result.output
    report = json.loads((tmp_path / "r.json").read_text())
    (task,) = report["tasks"]
    assert task["status"] == "failed", task["checks"]
    assert [c["error"] for c in task["checks"]] == [True, False]
    assert report["summary"]["completion_rate"] == 0.0
    assert report["summary"]["failed"] == 1 and report["summary"]["errors"] == 0
    assert [(t["id"], t["attempts"]) for t in report["by_task"]] == [("fix-add", ["failed"])]
    assert report["errors"] == []
    # ...and the crash is not hidden by it (found by a newcomer: it was only in
    # tasks[].checks[].error): listed apart, in the console and the Markdown report.
    (crash,) = report["check_errors"]
    assert (crash["id"], crash["status"], crash["type"]) == ("fix-add", "failed", "fragile")
    assert crash["detail"].startswith("grader crashed: RecursionError")
    assert "grader error in failed fix-add: fragile: grader crashed: RecursionError" \
        in result.output
    markdown = next((tmp_path / "eval_reports").glob("report-*.md")).read_text()
    assert "### Grader errors in graded attempts" in markdown
    assert "⚠️ fragile (grader error): grader crashed: RecursionError" in markdown


def test_a_preflight_stops_the_run_before_any_task(tmp_path):
    calls = []

    def refuse(checks):
        calls.append(checks)
        raise evalctl.UsageError("the frobnicator service needs FROB_TOKEN")

    def broken(checks):
        raise KeyError("oops")

    set_registry(registry_with(("extra_graders", _grader_plugin(
        frobnicated={"grade": lambda *a: evalctl.CheckResult(True), "preflight": refuse},
        fragile={"grade": lambda *a: evalctl.CheckResult(True), "preflight": broken}))))
    for name, message in (("frobnicated", "the frobnicated checks cannot run: the frobnicator "
                                          "service needs FROB_TOKEN"),
                          ("fragile", "the fragile checks cannot run: the grader's preflight "
                                      "failed (plugin 'extra_graders' (test-dist 1.0)): "
                                      "KeyError: 'oops'")):
        (tmp_path / "suite.yaml").write_text(FIX.replace("    - type: tests_pass\n",
                                                         f"    - type: {name}\n"
                                                         "    - type: tests_pass\n"))
        result = run_cli(tmp_path, "suite.yaml")
        assert result.exit_code == 2, result.output
        assert message in result.output
        assert not (tmp_path / "eval_reports").exists()  # no task ran, no run directory
    assert calls == [[{"type": "frobnicated"}]]  # every check of its type, once


def test_a_sandbox_that_cannot_start_is_an_error_of_kind_sandbox(tmp_path):
    def refuse_to_start(request):
        raise OSError("no such container runtime")

    @evalctl.hookimpl
    def evalctl_register_sandboxes(register):
        register(evalctl.SandboxSpec(name="broken_box", create=refuse_to_start,
                                     isolated=False))

    plugin = types.ModuleType("broken_box")
    plugin.evalctl_register_sandboxes = evalctl_register_sandboxes
    set_registry(registry_with(("broken_box", plugin)))
    (tmp_path / "suite.yaml").write_text(FIX)
    result = run_cli(tmp_path, "suite.yaml", "--sandbox", "broken_box", "--report", "r.json")
    assert result.exit_code == 1
    report = json.loads((tmp_path / "r.json").read_text())
    assert {(t["status"], t["exit_status"], t["error_kind"]) for t in report["tasks"]} == {
        ("error", "sandbox_error", "sandbox")}
    assert report["summary"]["completion_rate"] is None  # nothing was graded
    assert "the sandbox failed to start: OSError: no such container runtime" in \
        report["errors"][0]["detail"]
    assert "--sandbox" in report["errors"][0]["remedy"]


EXITING = """\
- id: exits
  prompt: Create out.txt.
  checks:
    - type: file_exists
      path: out.txt
    - type: exits_grader
  script:
    - tool_calls:
        - tool: bash
          input:
            command: "true"
    - tool_calls:
        - tool: write_file
          input:
            path: out.txt
            content: "x\\n"
    - text: Created out.txt.
"""


def _exiting_plugin(where: str) -> types.ModuleType:
    """A plugin each of whose parts raises SystemExit(0) when it is `where`; the others
    work."""
    import evalctl.plugins.providers.scripted as scripted
    import evalctl.plugins.sandboxes.local as local

    def exit_if(part: str) -> None:
        if part == where:
            raise SystemExit(0)  # a helper's sys.exit(), an argparse main()

    def grade_exits(check, workspace, result):
        exit_if("grader")
        return evalctl.CheckResult(True, "fine")

    def write_exits(run, path):
        exit_if("reporter")
        return evalctl.write_atomically(path, "fine\n")

    class Provider:
        def __init__(self, options):
            self.inner = scripted.create(options)

        async def complete(self, request):
            exit_if("provider")
            return await self.inner.complete(request)

        async def aclose(self):
            exit_if("provider aclose")

    class Sandbox(local.LocalSandbox):
        async def run(self, command, **options):
            exit_if(f"{self.request.purpose} command")
            return await super().run(command, **options)

    def create_sandbox(request):
        exit_if("sandbox")
        exit_if(f"{request.purpose} sandbox")
        return Sandbox(request)

    class Executor:
        async def execute(self, plan):
            for attempt in plan.attempts:
                if await attempt.start():
                    yield await attempt.run()
                exit_if("executor")  # after the first attempt: that one is reported

    async def run_agent(context):
        exit_if("agent")
        return await context.run_builtin_loop()

    @evalctl.hookimpl
    def evalctl_register_graders(register):
        register(evalctl.GraderSpec(name="exits_grader", grade=grade_exits))

    @evalctl.hookimpl
    def evalctl_register_reporters(register):
        register(evalctl.ReporterSpec(name="exits_reporter", write=write_exits,
                                      extension="txt"))

    @evalctl.hookimpl
    def evalctl_register_providers(register):
        register(evalctl.ProviderSpec(name="exits_provider", create=Provider, live=False))

    @evalctl.hookimpl
    def evalctl_register_sandboxes(register):
        register(evalctl.SandboxSpec(name="exits_sandbox", create=create_sandbox,
                                     isolated=False))

    @evalctl.hookimpl
    def evalctl_register_agents(register):
        register(evalctl.AgentSpec("exits-agent", run=run_agent))

    @evalctl.hookimpl
    def evalctl_register_executors(register):
        register(evalctl.ExecutorSpec(name="exits_executor", create=lambda options: Executor()))

    plugin = types.ModuleType("exiting")
    for hook in (evalctl_register_graders, evalctl_register_reporters,
                 evalctl_register_providers, evalctl_register_sandboxes,
                 evalctl_register_agents, evalctl_register_executors):
        setattr(plugin, hook.__name__, hook)
    return plugin


@pytest.mark.parametrize("where, status, exit_status, said", [
    ("grader", "error", "completed",
     "grader crashed: SystemExit(0): sys.exit() or exit() was called"),
    ("provider", "error", "provider_error",
     "the provider raised SystemExit(0): sys.exit() or exit() was called"),
    ("sandbox", "error", "sandbox_error",
     "the sandbox failed to start: SystemExit(0): sys.exit() or exit() was called"),
    ("grading sandbox", "error", "sandbox_error",
     "the sandbox failed to start: SystemExit(0): sys.exit() or exit() was called"),
    ("agent", "error", "internal_error",
     "internal error: SystemExit(0): sys.exit() or exit() was called"),
    ("agent command", "passed", "completed", None),  # the bash tool's: the model is told
    ("provider aclose", "passed", "completed", None),  # ignored, as its other failures
])
def test_a_plugin_that_exits_during_a_run_is_its_error_and_the_run_goes_on(
        tmp_path, where, status, exit_status, said):
    """Found by a newcomer: a grader's sys.exit() (caught by `except Exception` nowhere)
    ended the whole run with exit 0, no reports and no message. A plugin's SystemExit is
    its failure, as any exception is; the run says so and exits 1."""
    set_registry(registry_with(("exiting", _exiting_plugin(where))))
    (tmp_path / "suite.yaml").write_text(EXITING)
    result = run_cli(tmp_path, "suite.yaml", "--provider", "exits_provider", "--sandbox",
                     "exits_sandbox", "--agent", "exits-agent", "--report", "r.json")
    assert result.exit_code == (0 if status == "passed" else 1), result.output
    task = json.loads((tmp_path / "r.json").read_text())["tasks"][0]
    assert (task["status"], task["exit_status"]) == (status, exit_status)
    if said is not None:
        shown = task["error"] if where != "grader" else \
            next(c["detail"] for c in task["checks"] if c["type"] == "exits_grader")
        assert shown.startswith(said), shown
    if where == "grader":  # the agent's own work still graded
        assert task["checks"][0]["passed"]
    if where == "agent command":
        ledger = Path(task["ledger"]).read_text()
        assert "bash: failed: SystemExit(0): sys.exit() or exit() was called" in ledger


def test_an_executor_that_exits_ends_the_run_with_what_finished(tmp_path):
    set_registry(registry_with(("exiting", _exiting_plugin("executor"))))
    (tmp_path / "suite.yaml").write_text(EXITING + EXITING.replace("id: exits", "id: later"))
    result = run_cli(tmp_path, "suite.yaml", "--executor", "exits_executor", "--report",
                     "r.json")
    assert result.exit_code == 1, result.output
    report = json.loads((tmp_path / "r.json").read_text())
    assert [t["status"] for t in report["tasks"]] == ["passed", "not_run"]
    assert report["tasks"][1]["error"].startswith(
        "the exits_executor executor failed: SystemExit(0): sys.exit() or exit() was called")


def test_a_reporter_that_exits_is_a_failed_reporter_and_the_others_write(tmp_path):
    """Found by a newcomer: a reporter's SystemExit(0) ended evalctl with exit 0 after a
    failed task, the reporters after it never written."""
    set_registry(registry_with(("exiting", _exiting_plugin("reporter"))))
    (tmp_path / "suite.yaml").write_text(EXITING.replace(  # a failed task
        "- type: file_exists\n      path: out.txt", "- type: file_exists\n      path: no.txt"))
    result = run_cli(tmp_path, "suite.yaml", "--reporter", "exits_reporter",
                     "--reporter", "markdown", "--report", "r.json")
    assert result.exit_code == 1, result.output
    assert "reporter 'exits_reporter' from plugin 'exiting' (test-dist 1.0) failed" in \
        result.output
    assert "SystemExit(0): sys.exit() or exit() was called" in result.output
    assert json.loads((tmp_path / "r.json").read_text())["tasks"][0]["status"] == "failed"
    assert list((tmp_path / "eval_reports").glob("report-*.md"))  # written after it


def test_a_grader_preflight_that_exits_stops_the_run_naming_it(tmp_path):
    def exits(checks):
        raise SystemExit(0)

    @evalctl.hookimpl
    def evalctl_register_graders(register):
        register(evalctl.GraderSpec(name="exits_grader", preflight=exits,
                                    grade=lambda c, w, r: evalctl.CheckResult(True)))

    plugin = types.ModuleType("exiting")
    plugin.evalctl_register_graders = evalctl_register_graders
    set_registry(registry_with(("exiting", plugin)))
    (tmp_path / "suite.yaml").write_text(EXITING)
    result = run_cli(tmp_path, "suite.yaml")
    assert result.exit_code == 2, result.output
    assert "the exits_grader checks cannot run: the grader's preflight failed (plugin " \
           "'exiting' (test-dist 1.0)): SystemExit(0)" in result.output
    # Where the suite has the check, as a UsageError from the preflight would say.
    assert "(the exits_grader checks of suite.yaml:6 (task 'exits'))" in result.output


def test_a_crashed_graders_traceback_is_kept_in_the_attempts_ledger(tmp_path):
    """Found by a newcomer: only "grader crashed: KeyError: 'min'" survived a crash; the
    plugin's author had no line to look at. The traceback is in the attempt's ledger,
    and the detail says where."""
    def needs_min(check, workspace, result):
        return evalctl.CheckResult(check["min"] <= 3, "counted")

    @evalctl.hookimpl
    def evalctl_register_graders(register):
        register(evalctl.GraderSpec(name="exits_grader", grade=needs_min))

    plugin = types.ModuleType("crashing")
    plugin.evalctl_register_graders = evalctl_register_graders
    set_registry(registry_with(("crashing", plugin)))
    (tmp_path / "suite.yaml").write_text(EXITING)
    result = run_cli(tmp_path, "suite.yaml", "--report", "r.json")
    assert result.exit_code == 1, result.output
    assert "Traceback" not in result.output
    task = json.loads((tmp_path / "r.json").read_text())["tasks"][0]
    detail = task["checks"][1]["detail"]
    assert detail == ("grader crashed: KeyError: 'min' (its traceback: the grader_crashed "
                      "event of the attempt's ledger, .ledgers/exits.jsonl)")
    events = [json.loads(line) for line in Path(task["ledger"]).read_text().splitlines()]
    crashed = [e for e in events if e["event"] == "grader_crashed"]
    assert [(e["grader"], e["error"]) for e in crashed] == [
        ("exits_grader", "grader crashed: KeyError: 'min'")]
    trace = crashed[0]["traceback"]
    assert trace.startswith("Traceback (most recent call last):")
    assert "in needs_min" in trace and 'check["min"] <= 3' in trace
    assert trace.endswith("KeyError: 'min'\n")
    assert events[-1]["seq"] == len(events)  # numbered on after the agent's events


def test_grade_check_writes_a_crashed_graders_traceback_to_stderr(capsys):
    from evalctl.testing import grade_check

    def needs_min(check, workspace, result):
        return evalctl.CheckResult(check["min"] <= 3, "counted")

    @evalctl.hookimpl
    def evalctl_register_graders(register):
        register(evalctl.GraderSpec(name="needs_min", grade=needs_min))

    plugin = types.ModuleType("crashing")
    plugin.evalctl_register_graders = evalctl_register_graders
    outcome = grade_check({"type": "needs_min"}, plugins=[plugin], sandbox="local")
    assert outcome.error and outcome.detail.startswith("grader crashed: KeyError: 'min'")
    shown = capsys.readouterr().err
    assert "evalctl.testing: grader crashed: KeyError: 'min'" in shown
    assert "in needs_min" in shown and 'check["min"] <= 3' in shown


def _run(*tasks: TaskResult) -> RunResult:
    return RunResult("s.yaml", "s", "0" * 64, "scripted", None, "", "", "0", {}, list(tasks),
                     repeat=max(t.attempt for t in tasks))


def test_errors_are_left_out_of_pass_at_k_and_the_paired_comparison():
    failing = CheckOutcome("command", "mechanical", False, "exit 1")
    broken = CheckOutcome("command", "mechanical", False, "cannot run here", error=True)
    current = _run(TaskResult("a", "passed", attempt=1), TaskResult("a", "error", [broken],
                                                                    attempt=2),
                   TaskResult("b", "error", [broken], attempt=1),
                   TaskResult("b", "error", [broken], attempt=2),
                   TaskResult("c", "failed", [failing], attempt=1),
                   TaskResult("c", "passed", attempt=2))
    assert current.completion_rate == 0.6667  # 2 of the 3 graded attempts
    per_task = {t.task_id: t for t in current.by_task()}
    assert set(per_task) == {"a", "c"}  # b: no graded attempt
    assert per_task["a"].pass_hat_k and per_task["a"].ran == 1
    assert current.pass_at_k() == 1.0 and current.pass_hat_k() == 0.5
    baseline = _run(TaskResult("a", "passed", attempt=1), TaskResult("b", "passed", attempt=1),
                    TaskResult("c", "passed", attempt=1), TaskResult("d", "passed", attempt=1))
    comparison = compare_reports(baseline, current)
    assert comparison.not_compared == ["b"] and comparison.removed == ["d"]
    assert comparison.added == [] and comparison.common == 2
    assert comparison.newly_failing == ["c"]
    assert "### Errors or not run in one run (not compared) (1)" in comparison.to_markdown()
    only_errors = compare_reports(_run(TaskResult("b", "passed", attempt=1)),
                                  _run(TaskResult("b", "error", [broken], attempt=1)))
    assert only_errors.nothing_in_common() == ("nothing to compare: no task was graded in "
                                               "both runs (in error or not run in one of "
                                               "them: b)")


def test_the_docs_describe_the_error_kinds():
    from evalctl._report.results import ERROR_KINDS

    reports = (ROOT / "docs" / "reports.md").read_text()
    for kind in ERROR_KINDS:
        assert f"`{kind}`" in reports, kind


VENV_SETUP = """\
  setup:
    commands:
      - |
        set -e
        python3 -m venv --without-pip .venv
        sp=$(python3 -c 'import pytest,os;print(os.path.dirname(os.path.dirname(pytest.__file__)))')
        dest=$(.venv/bin/python -c 'import sysconfig;print(sysconfig.get_paths()["purelib"])')
        {pth}
"""
VENV_TASK = """\
- id: {id}
  prompt: make add() return the sum
  files:
    calc.py: "def add(a, b):\\n    return a - b\\n"
{setup}  verify_files:
    tests/test_calc.py: |
      from calc import add
      def test_add():
          assert add(2, 2) == 4
  script:
    - tool_calls:
        - tool: bash
          input:
            command: {command}
    - text: I could not fix it.
  checks:
    - type: tests_pass
      python: .venv/bin/python
      tests:
        - tests/test_calc.py
"""


def test_pytest_removed_from_the_workspaces_environment_is_the_agents_failure(tmp_path):
    """Found by an attacker: deleting pytest from the venv setup made turned a failing
    task into an error (out of the score). A test interpreter whose environment the agent
    changed is its doing; one that setup left without pytest is still an error."""
    suite = "".join([
        VENV_TASK.format(id="deleted", command="rm .venv/lib/python3*/site-packages/base.pth",
                         setup=VENV_SETUP.format(pth='echo "$sp" > "$dest/base.pth"')),
        VENV_TASK.format(id="never-there", command="echo nothing",
                         setup=VENV_SETUP.format(pth="true")),
    ])
    (tmp_path / "suite.yaml").write_text(suite)
    result = run_cli(tmp_path, "suite.yaml", "--report", "r.json")
    assert (tmp_path / "r.json").exists(), result.output
    report = json.loads((tmp_path / "r.json").read_text())
    tasks = {t["id"]: t for t in report["tasks"]}
    deleted = tasks["deleted"]
    assert deleted["status"] == "failed", result.output
    assert deleted["checks"][0]["suspected_gaming"] and "base.pth" in \
        deleted["checks"][0]["detail"]
    assert (tasks["never-there"]["status"], tasks["never-there"]["error_kind"]) == \
        ("error", "grader")
