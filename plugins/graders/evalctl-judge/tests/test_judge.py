"""The judge grader, with the scripted provider as its model."""

from __future__ import annotations

import asyncio
import json
import os
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from click.testing import CliRunner
from evalctl_judge import JudgeError, build_prompt, grade_judge

import evalctl
from evalctl._cli import cli
from evalctl._plugin.registry import entry_point_sources, get_registry, load_registry
from evalctl._run.runner import grade
from evalctl._suite.loader import validate_suite
from evalctl._workspace import create_workspace, new_run_directory


def verdict_turn(verdict: str, reason: str) -> dict:
    return {"tool_calls": [{"tool": "record_verdict",
                            "input": {"verdict": verdict, "reason": reason}}],
            "usage": {"input_tokens": 500, "output_tokens": 40}}


@pytest.fixture
def workspace(tmp_path):
    workspace = create_workspace(new_run_directory(tmp_path), "t", {"notes.md": "old\n"})
    (workspace.root / "notes.md").write_text("new line\n")
    (workspace.root / "summary.md").write_text("Launch: 14 March.\n")
    return workspace


def agent_result(workspace) -> evalctl.AgentResult:
    return evalctl.AgentResult(
        final_text="I wrote summary.md.", exit_status="completed", turns=2, tool_calls=1,
        usage=evalctl.TokenUsage(10, 5), cost=0.0, duration=0.1,
        files_changed=workspace.changed_files(), ledger_path=workspace.ledger_path,
        seed_path=workspace.seed_path)


def judge(workspace, **check):
    check = {"type": "judge", "rubric": "Is the launch date stated?", "provider": "scripted",
             **check}
    return asyncio.run(grade(check, get_registry().graders["judge"], workspace.root,
                             agent_result(workspace)))


def test_a_pass_verdict_with_its_tokens(workspace):
    outcome = judge(workspace, script=[verdict_turn("pass", "summary.md gives 14 March.")])
    assert (outcome.passed, outcome.kind, outcome.error) == (True, "judge", False)
    assert outcome.detail == "summary.md gives 14 March."
    assert outcome.usage == evalctl.TokenUsage(500, 40) and outcome.cost == 0.0


def test_a_fail_verdict(workspace):
    outcome = judge(workspace, script=[verdict_turn("fail", "No date anywhere.")])
    assert not outcome.passed and not outcome.error and outcome.detail == "No date anywhere."


def test_a_verdict_as_json_text(workspace):
    outcome = judge(workspace, script=[{"text": 'Verdict: {"verdict": "pass", "reason": "ok"}'}])
    assert outcome.passed and outcome.detail == "ok"


@pytest.mark.parametrize("script", [
    [{"text": "Looks great to me!"}],
    [{"text": '{"verdict": "maybe", "reason": "?"}'}],
    [verdict_turn("pass", "x") | {"tool_calls": [{"tool": "record_verdict",
                                                  "input": {"verdict": "yes"}}]}],
    None,  # no script: the scripted stand-in reply has no verdict
])
def test_an_unparseable_verdict_is_an_error_never_a_pass(workspace, script):
    outcome = judge(workspace, **({"script": script} if script is not None else {}))
    assert (outcome.passed, outcome.error) == (False, True)
    assert "JudgeError" in outcome.detail


def test_the_judge_raises_on_an_unreachable_model(workspace, monkeypatch):
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-test")
    monkeypatch.setenv("ANTHROPIC_BASE_URL", "http://127.0.0.1:9")  # nothing listens
    check = {"type": "judge", "rubric": "?", "provider": "anthropic"}
    with pytest.raises(JudgeError, match="could not be reached"):
        asyncio.run(_with_no_retries(check, workspace))


async def _with_no_retries(check, workspace):
    original = evalctl.create_provider

    def create(name, options=None):
        return original(name, {**(options or {}), "max_retries": 0, "timeout": 2})

    evalctl.create_provider = create
    try:
        return await grade_judge(check, workspace.root, agent_result(workspace))
    finally:
        evalctl.create_provider = original


def test_the_prompt_shows_what_the_check_asks_for(workspace):
    prompt = build_prompt({"rubric": "Q?", "show": ["summary", "files", "diff"],
                           "files": ["summary.md", "missing.md"]}, workspace.root,
                          agent_result(workspace))
    assert prompt.startswith("Question: Q?")
    assert "I wrote summary.md." in prompt
    assert "## File summary.md\n\n```\nLaunch: 14 March.\n" in prompt
    assert "## File missing.md\n\n```\n(does not exist)" in prompt
    assert "-old\n+new line" in prompt and "+++ b/summary.md" in prompt
    only_diff = build_prompt({"rubric": "Q?", "show": ["diff"]}, workspace.root,
                             agent_result(workspace))
    assert "final summary" not in only_diff


def test_the_prompt_says_when_the_record_of_changed_files_was_cut(workspace):
    """The record of changed files is bounded (10,000 entries): past it, the judge is
    told that its diff does not show every change."""
    import dataclasses

    cut = dataclasses.replace(agent_result(workspace), files_changed_omitted=12)
    prompt = build_prompt({"rubric": "Q?", "show": ["diff"]}, workspace.root, cut)
    assert "12 more changed file(s) are not listed" in prompt
    whole = build_prompt({"rubric": "Q?", "show": ["diff"]}, workspace.root,
                         agent_result(workspace))
    assert "not listed" not in whole


SUITE = """\
- id: judged
  prompt: Write summary.md with the launch date.
  checks:
    - type: file_exists
      path: summary.md
    - type: judge
      rubric: Does summary.md give the launch date?
      provider: scripted
      show:
        - files
      files:
        - summary.md
      script:
        - tool_calls:
            - tool: record_verdict
              input:
                verdict: fail
                reason: The date is missing.
          usage:
            input_tokens: 700
            output_tokens: 30
  script:
    - tool_calls:
        - tool: write_file
          input:
            path: summary.md
            content: Launch soon.
    - text: Wrote summary.md.
"""


def test_judge_results_are_reported_apart(tmp_path):
    (tmp_path / "suite.yaml").write_text(SUITE)
    previous = Path.cwd()
    os.chdir(tmp_path)
    try:
        result = CliRunner().invoke(cli, ["run", "suite.yaml", "--reporter", "json",
                                          "--reporter", "markdown", "--reporter", "junit"])
    finally:
        os.chdir(previous)
    assert result.exit_code == 0, result.output  # the judge's fail does not fail the task
    reports = tmp_path / "eval_reports"
    report = json.loads(next(reports.glob("report-*.json")).read_text())
    summary = report["summary"]
    assert summary["completion_rate"] == 1.0
    assert summary["judge_rate"] == 0.0
    assert summary["judge_checks"] == {"passed": 0, "total": 1, "errors": 0}
    assert summary["grader_usage"]["input_tokens"] == 700
    assert summary["usage"]["input_tokens"] < 700 * 2  # the agent's own, without the judge's
    task_usage = report["tasks"][0]["usage"]["input_tokens"]
    assert summary["usage"]["input_tokens"] == task_usage
    markdown = next(reports.glob("report-*.md")).read_text()
    assert "### Judge verdicts (not part of completion)" in markdown
    assert "| judged | fail | The date is missing. |" in markdown
    junit = next(reports.glob("report-*.xml")).read_text()
    assert "judge verdicts (reported apart, not part of pass/fail):" in junit
    assert "<failure" not in junit


def test_a_judge_error_does_not_change_the_task_outcome(tmp_path):
    broken = SUITE.replace("              input:\n                verdict: fail\n"
                           "                reason: The date is missing.\n",
                           "              input:\n                verdict: unsure\n"
                           "                reason: The date is missing.\n")
    assert broken != SUITE
    (tmp_path / "suite.yaml").write_text(broken)
    previous = Path.cwd()
    os.chdir(tmp_path)
    try:
        result = CliRunner().invoke(cli, ["run", "suite.yaml", "--report", "r.json"])
    finally:
        os.chdir(previous)
    assert result.exit_code == 0, result.output
    report = json.loads((tmp_path / "r.json").read_text())
    task = report["tasks"][0]
    assert task["status"] == "passed" and report["summary"]["errors"] == 0
    judged = task["checks"][1]
    assert (judged["kind"], judged["passed"], judged["error"]) == ("judge", False, True)
    # A judge that gave no verdict is counted apart, never in its rate's denominator.
    summary = report["summary"]
    assert summary["judge_rate"] is None
    assert summary["judge_checks"] == {"passed": 0, "total": 0, "errors": 1}


def test_a_task_judged_only_by_a_judge_breaks_rule_one(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text("- id: t\n  prompt: p\n  checks:\n    - type: judge\n      rubric: ok?\n")
    problems = validate_suite(path)
    assert [(p.line, p.severity) for p in problems] == [(1, "error")]
    assert "mechanical" in problems[0].message


def test_list_plugins_shows_the_judge_with_its_own_distribution():
    result = CliRunner().invoke(cli, ["list-plugins", "--json"])
    judge_record = next(r for r in json.loads(result.output) if r["plugin"] == "judge")
    assert judge_record["distribution"] == "evalctl-judge"
    assert judge_record["version"] == "0.1.0" and judge_record["graders"] == ["judge"]


def test_without_the_judge_installed_a_suite_using_it_says_to_install_a_plugin(tmp_path):
    without = load_registry([s for s in entry_point_sources() if s.name != "judge"])
    path = tmp_path / "s.yaml"
    path.write_text("- id: t\n  prompt: p\n  checks:\n    - type: file_exists\n      path: x\n"
                    "    - type: judge\n      rubric: ok?\n")
    problems = validate_suite(path, without)
    assert len(problems) == 1 and problems[0].line == 6
    assert "unknown check type 'judge'" in problems[0].message
    # The core names no package: one made of the check's type would invite typosquats.
    assert "install the plugin package that provides it" in problems[0].message
    assert "pip install" not in problems[0].message


def test_a_file_outside_the_workspace_is_refused_by_validate(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text("- id: t\n  prompt: p\n  checks:\n    - type: file_exists\n      path: x\n"
                    "    - type: judge\n      rubric: ok?\n      show:\n        - files\n"
                    "      files:\n        - ../../etc/passwd\n")
    problems = validate_suite(path)
    assert [(p.line, p.severity) for p in problems] == [(11, "error")]
    assert "'../../etc/passwd' is not valid" in problems[0].message


def test_a_judge_without_a_key_says_it_cannot_run_and_offers_no_agent_advice(workspace):
    outcome = judge(workspace, provider="anthropic")
    assert (outcome.passed, outcome.error) == (False, True)
    assert outcome.detail.startswith("the judge check cannot run: ")
    assert "ANTHROPIC_API_KEY" in outcome.detail
    assert "crashed" not in outcome.detail and "--scripted" not in outcome.detail


LIVE_JUDGE = SUITE.replace("      provider: scripted\n", "      provider: anthropic\n")


def _run_in(where: Path, *args: str):
    previous = Path.cwd()
    os.chdir(where)
    try:
        return CliRunner().invoke(cli, ["run", "suite.yaml", *args])
    finally:
        os.chdir(previous)


def test_a_judge_without_an_api_key_stops_the_run_before_any_task(tmp_path):
    assert LIVE_JUDGE != SUITE
    (tmp_path / "suite.yaml").write_text(LIVE_JUDGE)
    result = _run_in(tmp_path)
    assert result.exit_code == 2, result.output
    assert "the judge checks cannot run: the judge's provider 'anthropic' cannot be used: the " \
           "anthropic provider needs ANTHROPIC_API_KEY" in result.output
    # Found by newcomers: which checks to fix was not said, then the task's line was
    # named, not the judge check's.
    assert "(the judge checks of suite.yaml:6 (task 'judged'))" in result.output, result.output
    assert not (tmp_path / "eval_reports").exists()  # no task started


class _NoSuchModel(BaseHTTPRequestHandler):
    """The Messages API's answer to a model it does not know."""

    def do_POST(self):  # noqa: N802 - the http.server API
        self.rfile.read(int(self.headers.get("content-length", 0)))
        body = json.dumps({"type": "error", "error": {"type": "not_found_error",
                                                      "message": "model: claude-nonesuch"}})
        self.send_response(404)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body.encode())

    def log_message(self, *args):
        pass


def test_a_judge_with_an_unknown_model_stops_the_run_before_any_task(tmp_path, monkeypatch):
    server = ThreadingHTTPServer(("127.0.0.1", 0), _NoSuchModel)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-test")
        monkeypatch.setenv("ANTHROPIC_BASE_URL", f"http://127.0.0.1:{server.server_port}")
        (tmp_path / "suite.yaml").write_text(LIVE_JUDGE.replace(
            "      provider: anthropic\n", "      provider: anthropic\n"
                                          "      model: claude-nonesuch\n"))
        result = _run_in(tmp_path)
    finally:
        server.shutdown()
        server.server_close()
    assert result.exit_code == 2, result.output
    assert "the judge's provider 'anthropic' with model 'claude-nonesuch' cannot be used: " \
           "HTTP 404" in result.output
    assert "model: claude-nonesuch" in result.output
    assert not (tmp_path / "eval_reports").exists()


class _Reachable:
    """A judge model that answers anything: what a preflight probe needs."""

    def __init__(self, asked):
        self.asked = asked

    async def complete(self, request):
        self.asked.append(request.task["id"])
        return evalctl.ModelTurn(text="ok")


def test_the_preflight_asks_each_judge_model_once(monkeypatch):
    from evalctl_judge import preflight_judge

    created, asked = [], []

    def counting(name, options=None):
        created.append((name, dict(options or {})))
        return _Reachable(asked)

    monkeypatch.setattr(evalctl, "create_provider", counting)
    checks = [{"type": "judge", "rubric": r, "provider": "elsewhere", **extra}
              for r, extra in (("a?", {}), ("b?", {}), ("c?", {"model": "m2"}),
                               ("d?", {"model": "m2"}))]
    asyncio.run(preflight_judge(checks))
    assert created == [("elsewhere", {}), ("elsewhere", {"model": "m2"})]
    assert asked == ["judge-preflight", "judge-preflight"]
