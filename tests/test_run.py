"""`evalctl run`: the built-in suites, reports, exit codes, Ctrl-C."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
import types
from pathlib import Path
from typing import Any

import pytest

import evalctl
from evalctl._plugin.registry import set_registry

from .conftest import ROOT, SUITES, environment_without_evalctl_settings, registry_with, run_cli


def report_of(tmp_path: Path, suffix: str = "json") -> Path:
    reports = sorted((tmp_path / "eval_reports").glob(f"report-*.{suffix}"))
    assert len(reports) == 1, reports
    return reports[0]


@pytest.mark.parametrize("suite, count", [("harness", 5), ("general", 6)])
def test_scripted_suites_are_fully_green(tmp_path, suite, count):
    result = run_cli(tmp_path, str(SUITES / f"{suite}.yaml"))
    assert result.exit_code == 0, result.output
    report = json.loads(report_of(tmp_path).read_text())
    summary = report["summary"]
    assert (summary["passed"], summary["total"], summary["completion_rate"]) == (count, count, 1.0)
    assert summary["grounding_rate"] == 1.0
    assert summary["usage"]["input_tokens"] > 0
    assert all(t["exit_status"] == "completed" for t in report["tasks"])
    assert report_of(tmp_path, "md").read_text().startswith(f"## evalctl: {suite}")


def test_core_under_the_scripted_provider_passes_exactly_one_of_four(tmp_path):
    result = run_cli(tmp_path, str(SUITES / "core.yaml"), "--scripted")
    assert result.exit_code == 1, result.output
    report = json.loads(report_of(tmp_path).read_text())
    assert report["summary"]["completion_rate"] == 0.25
    failed = {t["id"]: sorted(c["type"] for c in t["checks"] if not c["passed"])
              for t in report["tasks"]}
    assert failed == {
        "fizzbuzz": [],
        "add-a-test": ["file_exists", "python", "tests_pass"],
        "fix-pagination": ["tests_pass"],
        "parse-duration": ["python"],
    }
    # The stand-in reply claims success: only checks of the work catch it.
    add_a_test = next(t for t in report["tasks"] if t["id"] == "add-a-test")
    assert next(c for c in add_a_test["checks"] if c["type"] == "succeeded")["passed"]


def _stable(report: dict) -> dict:
    """The report without what may differ between runs: times, durations, paths."""
    text = json.dumps(report).replace(json.dumps(report["run_directory"])[1:-1], "<run>")
    report = json.loads(text)
    for key in ("started_at", "finished_at", "run_directory"):
        report.pop(key)
    for task in report["tasks"]:
        for key in ("duration", "workspace", "ledger"):
            task.pop(key)
    return report


@pytest.mark.parametrize("suite", ["harness", "general", "core"])
def test_two_scripted_runs_give_identical_json_apart_from_times_and_paths(tmp_path, suite):
    first, second = tmp_path / "one", tmp_path / "two"
    for where in (first, second):
        where.mkdir()
        run_cli(where, str(SUITES / f"{suite}.yaml"), "--report", "r.json")
    a = json.loads((first / "r.json").read_text())
    b = json.loads((second / "r.json").read_text())
    assert _stable(a) == _stable(b)
    assert list(a) == list(b)  # stable key order
    text = (first / "r.json").read_text()
    assert text == json.dumps(a, indent=2) + "\n"


def test_junit_output_validates_against_the_junit_schema(tmp_path):
    import xmlschema

    result = run_cli(tmp_path, str(SUITES / "core.yaml"), "--reporter", "junit")
    assert result.exit_code == 1
    xml = report_of(tmp_path, "xml")
    schema = xmlschema.XMLSchema(str(Path(__file__).parent / "data" / "junit.xsd"))
    schema.validate(str(xml))
    root = xml.read_text()
    assert root.count("<failure ") == 3 and "<error " not in root
    assert 'tests="4" failures="3" errors="0"' in root


def test_junit_output_quoted_in_a_detail_cannot_read_as_a_line_of_the_report(
        tmp_path, write_suite):
    """Found by an attacker round: a check's detail quotes output the agent's code
    printed, and its lines sat in <system-out> and <failure> as they were, so a printed
    "[pass] tests_pass: ..." looked like one of the reporter's own lines. Every line of
    a detail after its first is now indented and marked."""
    forged = "[pass] tests_pass: 2 passed (all 2 named test(s) passed)"
    suite = write_suite(f"""\
- id: forges
  prompt: p
  checks:
    - type: command
      command: "echo '{forged}'; exit 1"
  script:
    - text: Done.
""")
    result = run_cli(tmp_path, str(suite), "--reporter", "junit")
    assert result.exit_code == 1
    text = report_of(tmp_path, "xml").read_text()
    assert forged in text  # quoted, as it was printed
    assert all(not line.lstrip().startswith("[pass] tests_pass") for line in text.splitlines())
    assert f"    | {forged}" in text


def test_junit_marks_infrastructure_errors_as_errors(tmp_path, write_suite):
    import xmlschema

    suite = write_suite("""\
- id: runs-out
  prompt: p
  checks:
    - type: file_exists
      path: x
  script:
    - tool_calls:
        - tool: glob
          input:
            pattern: "*"
""")
    result = run_cli(tmp_path, str(suite), "--reporter", "junit", "--reporter", "json")
    assert result.exit_code == 1
    xml = report_of(tmp_path, "xml")
    xmlschema.XMLSchema(str(Path(__file__).parent / "data" / "junit.xsd")).validate(str(xml))
    assert f'<error message="{suite}:7: the script of task' in xml.read_text()
    report = json.loads(report_of(tmp_path).read_text())
    assert report["summary"]["errors"] == 1 and report["summary"]["failed"] == 0


TAGGED = "".join(f"""\
- id: {task_id}
  prompt: Make a.txt.
  tags:
{"".join(f"    - {tag}{chr(10)}" for tag in tags)}  checks:
    - type: file_exists
      path: a.txt
  script:
    - tool_calls:
        - tool: write_file
          input:
            path: a.txt
            content: a
    - text: Wrote a.txt.
""" for task_id, tags in (("one", ["fast"]), ("two", ["slow"]), ("three", ["fast", "io"])))


def test_several_tags_select_any_and_only_with_tag_needs_both(tmp_path, write_suite):
    suite = str(write_suite(TAGGED))

    def ran(*args: str) -> list[str]:
        result = run_cli(tmp_path, suite, "--report", "r.json", *args)
        assert result.exit_code == 0, result.output
        return [t["id"] for t in json.loads((tmp_path / "r.json").read_text())["tasks"]]

    assert ran("--tag", "slow", "--tag", "io") == ["two", "three"]
    assert ran("--only", "one", "--only", "two", "--tag", "fast") == ["one"]
    help_text = run_cli(tmp_path, "--help").output
    assert "repeatable: tasks with any of the tags" in " ".join(help_text.split())


def test_an_unknown_reporter_hint_names_no_package_and_never_a_checkout_path(tmp_path):
    """A package name made of typed text (`pip install evalctl-pdf`) invites typosquats."""
    result = run_cli(tmp_path, str(SUITES / "harness.yaml"), "--reporter", "pdf")
    assert result.exit_code == 2
    assert "pip install" not in result.output and "evalctl-pdf" not in result.output
    assert "install the plugin package that provides it" in result.output
    assert "plugins/" not in result.output


def test_a_provider_failing_before_its_first_turn_is_an_error_with_no_grading_noise(tmp_path):
    class Unreachable:
        async def complete(self, request):
            raise evalctl.ProviderError("cannot reach the model")

    @evalctl.hookimpl
    def evalctl_register_providers(register):
        register(evalctl.ProviderSpec(name="unreachable", live=False,
                                      create=lambda options: Unreachable()))

    plugin = types.ModuleType("unreachable")
    plugin.evalctl_register_providers = evalctl_register_providers
    set_registry(registry_with(("unreachable", plugin)))
    result = run_cli(tmp_path, str(SUITES / "core.yaml"), "--provider", "unreachable",
                     "--only", "fizzbuzz", "--report", "r.json")
    assert result.exit_code == 1, result.output
    task = json.loads((tmp_path / "r.json").read_text())["tasks"][0]
    assert (task["status"], task["exit_status"], task["turns"]) == ("error", "provider_error", 0)
    assert task["error"] == "cannot reach the model"
    assert task["checks"] == []  # nothing the agent did to grade: no FileNotFoundError noise
    assert "FileNotFoundError" not in result.output


def test_only_and_tag_select_tasks(tmp_path, write_suite):
    result = run_cli(tmp_path, str(SUITES / "harness.yaml"), "--only", "edit-file")
    assert result.exit_code == 0
    report = json.loads(report_of(tmp_path).read_text())
    assert [t["id"] for t in report["tasks"]] == ["edit-file"]
    missing = run_cli(tmp_path, str(SUITES / "harness.yaml"), "--only", "nope")
    assert missing.exit_code == 2 and "unknown task(s) nope" in missing.output
    none = run_cli(tmp_path, str(SUITES / "harness.yaml"), "--tag", "nothing-has-this")
    assert none.exit_code == 2


@pytest.mark.parametrize("args, message", [
    (["--provider", "openai"], "unknown provider 'openai'"),
    (["--reporter", "pdf"], "unknown reporter 'pdf'"),
    (["--scripted", "--provider", "anthropic"], "alternatives"),
    (["--provider-option", "novalue"], "KEY=VALUE"),
])
def test_usage_errors_exit_2_before_any_task(tmp_path, args, message):
    result = run_cli(tmp_path, str(SUITES / "harness.yaml"), *args)
    assert result.exit_code == 2, result.output
    assert message in result.output
    assert not (tmp_path / "eval_reports").exists()


@pytest.mark.parametrize("args, message", [
    (["--provider-option", "foo=bar"],
     "provider 'scripted' has no option 'foo'; its options: latency"),
    (["--model", "gpt-4"], "provider 'scripted' has no option 'model' (--model); its options: "
                           "latency"),
    (["--provider-option", "latency=soon"],
     "provider 'scripted' option 'latency': expected a number, got 'soon'"),
    (["--provider", "anthropic", "--provider-option", "max_token=100"],
     "provider 'anthropic' has no option 'max_token' (did you mean 'max_tokens'?); its "
     "options: model, max_tokens, max_retries, timeout, temperature, base_url"),
    (["--provider", "anthropic", "--provider-option", "max_tokens=lots"],
     "provider 'anthropic' option 'max_tokens': expected a whole number, got 'lots'"),
    (["--sandbox", "local", "--sandbox-option", "memory=1"],
     "sandbox 'local' has no option 'memory'; its options: none"),
    (["--sandbox", "bwrap", "--sandbox-option", "memory=1"],
     "sandbox 'bwrap' has no option 'memory' (did you mean 'memory_mb'?); its options: "
     "max_processes, memory_mb, file_size_mb, ro_paths"),
])
def test_unknown_or_mistyped_options_are_refused_with_the_known_ones(tmp_path, args, message):
    result = run_cli(tmp_path, str(SUITES / "harness.yaml"), *args)
    assert result.exit_code == 2, result.output
    assert message in result.output
    assert not (tmp_path / "eval_reports").exists()


def test_the_configs_model_is_for_the_configs_provider_not_for_scripted(tmp_path):
    (tmp_path / "evalctl.toml").write_text('provider = "anthropic"\nmodel = "claude-haiku-4-5"\n'
                                           '[provider_options]\nmax_tokens = 1024\n')
    result = run_cli(tmp_path, str(SUITES / "harness.yaml"), "--scripted", "--only",
                     "write-file")
    assert result.exit_code == 0, result.output


def test_team_defaults_from_config_and_flags_override(tmp_path):
    (tmp_path / "evalctl.toml").write_text('reporters = ["junit"]\nout = "reports"\n')
    result = run_cli(tmp_path, str(SUITES / "harness.yaml"), "--only", "write-file")
    assert result.exit_code == 0, result.output
    assert sorted(p.suffix for p in (tmp_path / "reports").glob("report-*")) == [".json", ".xml"]
    result = run_cli(tmp_path, str(SUITES / "harness.yaml"), "--only", "write-file",
                     "--reporter", "markdown", "--out", "elsewhere")
    assert sorted(p.suffix for p in (tmp_path / "elsewhere").glob("report-*")) == \
        [".json", ".md"]


def test_a_junit_run_still_writes_the_json_a_later_baseline_needs(tmp_path):
    """The README's CI example: --reporter junit, then --baseline on its JSON."""
    first = run_cli(tmp_path, str(SUITES / "harness.yaml"), "--only", "edit-file",
                    "--reporter", "junit")
    assert first.exit_code == 0, first.output
    assert sorted(p.suffix for p in (tmp_path / "eval_reports").glob("report-*")) == \
        [".json", ".xml"]
    base = next((tmp_path / "eval_reports").glob("report-*.json"))
    again = run_cli(tmp_path, str(SUITES / "harness.yaml"), "--only", "edit-file",
                    "--baseline", str(base), "--out", "again")
    assert again.exit_code == 0, again.output


def test_pyproject_tool_section_is_read(tmp_path):
    (tmp_path / "pyproject.toml").write_text('[tool.evalctl]\nreporters = ["junit"]\n')
    assert run_cli(tmp_path, str(SUITES / "harness.yaml"), "--only", "write-file").exit_code == 0
    assert sorted(p.suffix for p in (tmp_path / "eval_reports").glob("report-*")) == \
        [".json", ".xml"]
    (tmp_path / "pyproject.toml").write_text('[tool.evalctl]\nreporter = ["markdown"]\n')
    bad = run_cli(tmp_path, str(SUITES / "harness.yaml"))
    assert bad.exit_code == 2 and "unknown key 'reporter'" in bad.output


def test_the_pyproject_form_pasted_into_evalctl_toml_says_where_it_belongs(tmp_path):
    (tmp_path / "evalctl.toml").write_text('[tool.evalctl]\nconcurrency = 8\n')
    result = run_cli(tmp_path, str(SUITES / "harness.yaml"))
    assert result.exit_code == 2
    assert "evalctl.toml:1: error: unknown key 'tool'" in result.output
    assert "[tool.evalctl] belongs in pyproject.toml" in result.output


@pytest.mark.parametrize("line, wanted", [('concurrency = "8"', "a whole number"),
                                          ("reporters = \"junit\"", "a list"),
                                          ("provider = 3", "text"),
                                          ("provider_options = 1", "a table")])
def test_a_config_value_of_the_wrong_type_says_what_it_should_be(tmp_path, line, wanted):
    (tmp_path / "evalctl.toml").write_text(line + "\n")
    result = run_cli(tmp_path, str(SUITES / "harness.yaml"))
    assert result.exit_code == 2
    key = line.split(" ")[0]
    assert f"'{key}' must be {wanted}" in result.output, result.output


def test_a_broken_reporter_does_not_cost_the_other_reports(tmp_path):
    @evalctl.hookimpl
    def evalctl_register_reporters(register):
        def explode(run, path):
            raise OSError("disk full")

        register(evalctl.ReporterSpec(name="broken", write=explode, extension="txt"))

    plugin = types.ModuleType("broken")
    plugin.evalctl_register_reporters = evalctl_register_reporters
    set_registry(registry_with(("broken", plugin)))
    result = run_cli(tmp_path, str(SUITES / "harness.yaml"), "--only", "write-file",
                     "--reporter", "broken", "--reporter", "json")
    assert result.exit_code == 1
    assert "reporter 'broken'" in result.output and "disk full" in result.output
    assert report_of(tmp_path).exists()


def test_the_summary_table_and_progress_lines(tmp_path):
    result = run_cli(tmp_path, str(SUITES / "harness.yaml"))
    assert "[5/5]" in result.output
    assert "harness: completion 100%, grounding 100%" in result.output
    assert "5/5 tasks passed" in result.output
    for task in ("write-file", "edit-file", "bash-pipeline", "parallel-writes",
                 "permission-denial-adapts"):
        assert task in result.output


INTERRUPTIBLE = """\
- id: quick-1
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
- id: slow-1
  prompt: Wait, then write b.txt.
  checks:
    - type: file_exists
      path: b.txt
  script:
    - tool_calls:
        - tool: write_file
          input:
            path: partial.txt
            content: started
        - tool: bash
          input:
            command: echo $$ > sleeper.pid && exec sleep 60
    - text: Done.
- id: slow-2
  prompt: Wait, then write c.txt.
  checks:
    - type: file_exists
      path: c.txt
  script:
    - tool_calls:
        - tool: bash
          input:
            command: echo $$ > sleeper.pid && exec sleep 60
    - text: Done.
- id: queued
  prompt: Never starts at concurrency 2.
  checks:
    - type: file_exists
      path: d.txt
"""


@pytest.mark.parametrize("interruption, sigint_ignored, times", [
    (signal.SIGINT, False, 1), (signal.SIGTERM, False, 1),
    (signal.SIGTERM, True, 1),  # a job started in the background ignores SIGINT
    (signal.SIGTERM, False, 3),  # more while the run winds down change nothing
    # Found by a newcomer: a second Ctrl-C 50 ms after the first quit with no reports
    # and no word of how to continue. It now says the run is stopping.
    (signal.SIGINT, False, 2)])
def test_ctrl_c_writes_reports_for_finished_tasks_and_marks_the_rest(
        tmp_path, interruption, sigint_ignored, times):
    """Ctrl-C, and SIGTERM (what `timeout` and CI runners send) the same way: found by an
    attacker, SIGTERM did nothing where SIGINT was ignored, and a second signal lost the
    reports with exit 1."""
    suite = tmp_path / "slow.yaml"
    suite.write_text(INTERRUPTIBLE)
    # Another job's `sleep 60` on the same machine (a parallel CI job, say) must not
    # matter: this one is the test's own, and must outlive the run it is not part of.
    bystander = subprocess.Popen(["sleep", "60"])
    try:
        _interrupt_and_check(tmp_path, suite, interruption, sigint_ignored, times)
        assert bystander.poll() is None, "the bystander was not the run's to end"
    finally:
        bystander.kill()
        bystander.wait(timeout=10)


def _interrupt_and_check(tmp_path: Path, suite: Path,
                         interruption: signal.Signals = signal.SIGINT,
                         sigint_ignored: bool = False, times: int = 1) -> None:
    # --sandbox local: the sleepers' pids are then this machine's pids, to check by pid.
    process = subprocess.Popen(
        [sys.executable, "-m", "evalctl", "run", str(suite), "--concurrency", "2",
         "--sandbox", "local",
         "--report", "r.json", "--reporter", "json", "--reporter", "junit"],
        cwd=tmp_path, env={**environment_without_evalctl_settings(), "EVALCTL_NO_CACHE": "1"},
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        preexec_fn=(lambda: signal.signal(signal.SIGINT, signal.SIG_IGN)) if sigint_ignored
        else None)
    deadline = time.monotonic() + 60
    ledgers = tmp_path / "eval_reports"
    while time.monotonic() < deadline:
        ready = [p for p in ledgers.glob("workspaces-*/.ledgers/*.jsonl")]
        done = [p for p in ready if p.name == "quick-1.jsonl" and "task_end" in p.read_text()]
        # Each sleeper writes its own pid, then becomes `sleep` (exec keeps the pid): the
        # test watches exactly the processes this run started, never the whole machine.
        sleepers = [p for p in ledgers.glob("workspaces-*/slow-*/sleeper.pid")
                    if p.read_text().strip()]
        if done and len(sleepers) == 2:
            break
        time.sleep(0.05)
    else:
        process.kill()
        pytest.fail("the run never reached the point to interrupt")
    time.sleep(0.3)  # let the first grader finish
    started = time.monotonic()
    for _ in range(times):
        process.send_signal(interruption)
        time.sleep(0.01)
    stdout, stderr = process.communicate(timeout=30)
    assert time.monotonic() - started < 15
    assert process.returncode == 130, stderr
    assert "Traceback" not in stderr
    assert ("press Ctrl-C again to quit at once" in stderr) == \
        (interruption == signal.SIGINT and times == 2), stderr
    assert "continue with evalctl run --resume" in stderr
    report = json.loads((tmp_path / "r.json").read_text())
    status = {t["id"]: (t["status"], t["exit_status"]) for t in report["tasks"]}
    assert status == {"quick-1": ("passed", "completed"), "slow-1": ("not_run", "aborted"),
                      "slow-2": ("not_run", "aborted"), "queued": ("not_run", None)}
    assert report["interrupted"] is True
    assert report["summary"]["completion_rate"] == 1.0 and report["summary"]["not_run"] == 3
    slow = next(t for t in report["tasks"] if t["id"] == "slow-1")
    assert (Path(slow["workspace"]) / "partial.txt").read_text() == "started"
    assert '"status": "aborted"' in Path(slow["ledger"]).read_text()
    assert list((tmp_path / "eval_reports").glob("report-*.xml"))
    survivors = [pid for pid in (int(p.read_text()) for p in sleepers) if _is_sleep(pid)]
    assert survivors == [], "a sleeping child outlived the interrupted run"


def test_a_third_ctrl_c_quits_at_once_and_says_how_to_get_the_reports(tmp_path):
    """The third press quits without waiting for the wind-down: exit 130, and the
    message names `evalctl report` and `--resume` for the run, which then work."""
    suite = tmp_path / "slow.yaml"
    suite.write_text(INTERRUPTIBLE)
    process = subprocess.Popen(
        [sys.executable, "-m", "evalctl", "run", str(suite), "--concurrency", "2",
         "--sandbox", "local", "--reporter", "json"],
        cwd=tmp_path, env={**environment_without_evalctl_settings(), "EVALCTL_NO_CACHE": "1"},
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if len(list(tmp_path.glob("eval_reports/workspaces-*/slow-*/sleeper.pid"))) == 2:
            break
        time.sleep(0.05)
    else:
        process.kill()
        pytest.fail("the run never reached the point to interrupt")
    for _ in range(3):
        process.send_signal(signal.SIGINT)
        time.sleep(0.01)
    _, stderr = process.communicate(timeout=30)
    assert process.returncode == 130, stderr
    assert "Traceback" not in stderr
    run_dir = next(tmp_path.glob("eval_reports/workspaces-*"))
    assert f"evalctl report {run_dir}" in stderr and f"--resume {run_dir}" in stderr, stderr
    shown = subprocess.run([sys.executable, "-m", "evalctl", "report", str(run_dir),
                            "--reporter", "json"], cwd=tmp_path, text=True,
                           capture_output=True, env=environment_without_evalctl_settings())
    assert shown.returncode == 0, shown.stderr
    report = json.loads(next(tmp_path.glob("eval_reports/report-*.json")).read_text())
    assert {t["id"]: t["status"] for t in report["tasks"]}["quick-1"] == "passed"


# A reporter that holds the report phase open until the test lets it go (the file `go`
# in $SLOW_REPORTER_GATE), so a signal lands there for sure, with no timing. With
# SLOW_REPORTER_LINGER it instead leaves a thread that outlives the command: evalctl's
# interpreter waits for it as it shuts down, until `go`.
SLOW_REPORTER = """\
import os, threading, time
from pathlib import Path
import evalctl

GATE = Path(os.environ["SLOW_REPORTER_GATE"])


def _wait_for_go():
    while not (GATE / "go").exists():
        time.sleep(0.02)


def _linger():
    while threading.main_thread().is_alive():
        time.sleep(0.02)
    (GATE / "exiting").touch()
    _wait_for_go()


def _write(run, path):
    if os.environ.get("SLOW_REPORTER_LINGER"):
        threading.Thread(target=_linger).start()
    else:
        (GATE / "writing").touch()
        _wait_for_go()
    path.write_text("slow\\n")
    return path


@evalctl.hookimpl
def evalctl_register_reporters(register):
    register(evalctl.ReporterSpec(name="slow", write=_write, extension="txt"))
"""

QUICK = """\
- id: quick-1
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


class _Watched:
    """evalctl run in a subprocess with the slow reporter installed, its stderr read
    as it comes."""

    def __init__(self, tmp_path: Path, linger: bool = False) -> None:
        import threading

        site = tmp_path / "site"
        (site / "slowrep-1.0.dist-info").mkdir(parents=True)
        (site / "slowrep.py").write_text(SLOW_REPORTER)
        (site / "slowrep-1.0.dist-info" / "METADATA").write_text(
            "Metadata-Version: 2.1\nName: slowrep\nVersion: 1.0\n")
        (site / "slowrep-1.0.dist-info" / "entry_points.txt").write_text(
            "[evalctl]\nslow = slowrep\n")
        (tmp_path / "suite.yaml").write_text(QUICK)
        self.gate = tmp_path / "gate"
        self.gate.mkdir()
        env = {**environment_without_evalctl_settings(), "EVALCTL_NO_CACHE": "1",
               "PYTHONPATH": str(site), "SLOW_REPORTER_GATE": str(self.gate)}
        if linger:
            env["SLOW_REPORTER_LINGER"] = "1"
        self.process = subprocess.Popen(
            [sys.executable, "-m", "evalctl", "run", "suite.yaml", "--sandbox", "local",
             "--reporter", "slow", "--reporter", "junit"],
            cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.lines: list[str] = []
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()
        self.reports = tmp_path / "eval_reports"

    def _read(self) -> None:
        assert self.process.stderr is not None
        for line in self.process.stderr:
            self.lines.append(line)

    @property
    def stderr(self) -> str:
        return "".join(self.lines)

    def wait_for(self, ready: Any, what: str) -> None:
        deadline = time.monotonic() + 60
        while not ready():
            if time.monotonic() > deadline or self.process.poll() is not None:
                self.process.kill()
                pytest.fail(f"never {what}: {self.stderr}")
            time.sleep(0.02)

    def finish(self) -> tuple[str, str]:
        (self.gate / "go").touch()
        assert self.process.stdout is not None
        stdout = self.process.stdout.read()  # not communicate(): it would read stderr too
        self.process.wait(timeout=60)
        self.reader.join(timeout=10)
        return stdout, self.stderr


@pytest.mark.parametrize("interruption, times", [
    (signal.SIGINT, 1), (signal.SIGTERM, 1), (signal.SIGTERM, 3)])
def test_a_signal_while_a_finished_run_writes_its_reports_lets_them_finish(
        tmp_path, interruption, times):
    """Found by a tester: one Ctrl-C just after "1/1 tasks passed", while the reports were
    written, lost them all (exit 130), and one SIGTERM killed evalctl outright, with no
    reports and no word. The first signal there now lets them finish, says so, and the
    exit is 130 (interrupted); more SIGTERMs change nothing."""
    watched = _Watched(tmp_path)
    watched.wait_for(lambda: (watched.gate / "writing").exists(), "wrote the reports")
    for sent in range(times):
        watched.process.send_signal(interruption)
        if not sent:
            watched.wait_for(lambda: "its reports are being written" in watched.stderr,
                             "said the reports are being written")
    stdout, stderr = watched.finish()
    assert watched.process.returncode == 130, stderr
    assert "Traceback" not in stderr and "Exception ignored" not in stderr, stderr
    assert "press Ctrl-C again to quit at once, without them" in stderr, stderr
    assert "interrupted: the run had finished, and its reports are complete" in stderr
    assert sorted(p.suffix for p in watched.reports.glob("report-*")) == \
        [".json", ".txt", ".xml"], stdout
    report = json.loads(next(watched.reports.glob("report-*.json")).read_text())
    assert [t["status"] for t in report["tasks"]] == ["passed"]


def test_a_second_ctrl_c_while_the_reports_are_written_quits_at_once(tmp_path):
    """The reports take long (a slow reporter): the second Ctrl-C quits without them,
    exit 130, naming `evalctl report` and `--resume` for the run."""
    watched = _Watched(tmp_path)
    watched.wait_for(lambda: (watched.gate / "writing").exists(), "wrote the reports")
    watched.process.send_signal(signal.SIGINT)
    watched.wait_for(lambda: "press Ctrl-C again" in watched.stderr, "said it")
    watched.process.send_signal(signal.SIGINT)
    # Quits while the reporter still waits: never let go before the process has ended.
    watched.process.wait(timeout=60)
    _, stderr = watched.finish()
    assert watched.process.returncode == 130, stderr
    assert "Traceback" not in stderr, stderr
    run_dir = next(watched.reports.glob("workspaces-*"))
    assert f"evalctl report {run_dir}" in stderr and f"--resume {run_dir}" in stderr, stderr
    assert not list(watched.reports.glob("report-*.xml"))  # the one after the slow one


def test_a_signal_as_evalctl_exits_changes_nothing(tmp_path):
    """Found by a tester: a Ctrl-C just after the reports were written printed
    "Exception ignored in threading._shutdown ... KeyboardInterrupt" (or killed evalctl
    by SIGINT). Once the outcome is decided, signals are ignored: the exit is the run's."""
    watched = _Watched(tmp_path, linger=True)
    watched.wait_for(lambda: (watched.gate / "exiting").exists(), "began to exit")
    watched.process.send_signal(signal.SIGINT)
    watched.process.send_signal(signal.SIGTERM)
    _, stderr = watched.finish()
    assert watched.process.returncode == 0, stderr
    assert "Traceback" not in stderr and "Exception ignored" not in stderr, stderr
    assert len(list(watched.reports.glob("report-*"))) == 3


def _is_sleep(pid: int) -> bool:
    """Whether `pid` is still a `sleep` process (a recycled pid running anything else
    is not the child we started)."""
    try:
        command = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return Path(command[0].decode()).name == "sleep" if command and command[0] else False


def test_help_and_list_plugins_import_no_sdk():
    probe = """
import sys
from click.testing import CliRunner
from evalctl._cli import cli
for args in (["--help"], ["list-plugins"], ["list-plugins", "--json"], ["schema"]):
    assert CliRunner().invoke(cli, args).exit_code == 0, args
heavy = sorted(m for m in ("anthropic", "httpx", "httpx2", "jsonschema", "strictyaml")
               if m in sys.modules)
print(",".join(heavy))
"""
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          env=environment_without_evalctl_settings(), cwd=ROOT)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == ""


def test_a_valid_run_never_imports_the_python_schema_validator(tmp_path):
    """Suites, tool calls and plugin options are all answered "valid" by the compiled
    validator; Python's jsonschema (about 40 ms to import) is only for explaining."""
    suite = tmp_path / "s.yaml"
    suite.write_text("""\
- id: write
  prompt: Write a.txt.
  checks:
    - type: file_contains
      path: a.txt
      text: done
  script:
    - tool_calls:
        - tool: write_file
          input:
            path: a.txt
            content: done
        - tool: read_file
          input:
            path: a.txt
            offset: 1
            limit: 5
    - text: Done.
""")
    probe = f"""
import sys
from click.testing import CliRunner
from evalctl._cli import cli
done = CliRunner().invoke(cli, ["run", {str(suite)!r}, "--sandbox", "local",
                                "--out", {str(tmp_path / "out")!r}])
assert done.exit_code == 0, done.output
print("jsonschema" in sys.modules, "jsonschema_rs" in sys.modules)
"""
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          env={**environment_without_evalctl_settings(),
                               "EVALCTL_CACHE_DIR": str(tmp_path / "cache")}, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["False", "True"]


def test_a_broken_provider_plugin_is_an_error_and_the_reports_are_written(tmp_path):
    class Broken:
        async def complete(self, request):
            raise RuntimeError("bug in the plugin")

    class NotATurn:
        async def complete(self, request):
            return "not a ModelTurn"

    @evalctl.hookimpl
    def evalctl_register_providers(register):
        register(evalctl.ProviderSpec(name="broken", create=lambda options: Broken(), live=False))
        register(evalctl.ProviderSpec(name="wrong", create=lambda options: NotATurn(), live=False))

    plugin = types.ModuleType("broken")
    plugin.evalctl_register_providers = evalctl_register_providers
    set_registry(registry_with(("broken", plugin)))
    for name in ("broken", "wrong"):
        where = tmp_path / name
        where.mkdir()
        result = run_cli(where, str(SUITES / "harness.yaml"), "--provider", name,
                         "--only", "write-file", "--report", "r.json")
        assert result.exit_code == 1, result.output
        task = json.loads((where / "r.json").read_text())["tasks"][0]
        assert task["status"] == "error"
        if name == "broken":
            assert task["exit_status"] == "provider_error"
            assert task["error"] == "the provider raised RuntimeError: bug in the plugin"
        else:
            assert task["exit_status"] == "internal_error"
            assert task["error"].startswith("internal error: AttributeError")


def test_an_output_directory_that_cannot_be_created_is_a_usage_error(tmp_path):
    (tmp_path / "afile").write_text("")
    result = run_cli(tmp_path, str(SUITES / "harness.yaml"), "--out", "afile/sub")
    assert result.exit_code == 2
    assert "cannot create a run directory under afile/sub" in result.output


def test_only_the_owner_may_enter_a_run_directory(tmp_path: Path) -> None:
    """Found by an attacker: while an attempt ran, any local user could reach its workspace
    and execute a setuid-root copy of a program the agent made there (evalctl as root)."""
    from evalctl._workspace import new_run_directory

    run_dir = new_run_directory(tmp_path / "reports")
    assert run_dir.stat().st_mode & 0o077 == 0, oct(run_dir.stat().st_mode)
    assert run_dir.stat().st_mode & 0o700 == 0o700


def test_the_tasks_seconds_are_the_agents_and_grading_keeps_its_own_time(tmp_path):
    """What docs/suites.md says ("How long an attempt takes", found by a newcomer who
    saw a task of `seconds: 3` grade for 15): `limits.seconds` stops the agent, not its
    checks, each bounded by its own grader's timeout."""
    async def grade_slowly(check, workspace, result):
        ran = await result.sandbox.run("sleep 1", timeout=30)
        return evalctl.CheckResult(ran.exit_code == 0, "slept")

    @evalctl.hookimpl
    def evalctl_register_graders(register):
        register(evalctl.GraderSpec(name="slow_check", grade=grade_slowly))

    plugin = types.ModuleType("slow")
    plugin.evalctl_register_graders = evalctl_register_graders
    set_registry(registry_with(("slow", plugin)))
    (tmp_path / "suite.yaml").write_text("""\
- id: quick-agent
  prompt: Create out.txt.
  limits:
    seconds: 0.5
  checks:
    - type: file_exists
      path: out.txt
    - type: slow_check
  script:
    - tool_calls:
        - tool: write_file
          input:
            path: out.txt
            content: "x\\n"
    - text: Created out.txt.
""")
    result = run_cli(tmp_path, "suite.yaml", "--report", "r.json")
    assert result.exit_code == 0, result.output
    task = json.loads((tmp_path / "r.json").read_text())["tasks"][0]
    assert (task["status"], task["exit_status"]) == ("passed", "completed")
    assert task["duration"] > 1  # the whole attempt, its grading included
    from evalctl._suite.schema import LIMITS

    assert LIMITS["properties"]["seconds"]["description"].startswith(
        "The agent's wall-clock seconds; not setup's nor the checks'")
