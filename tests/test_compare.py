"""Repeats, `evalctl compare` and `run --baseline`: crafted reports and real runs."""

from __future__ import annotations

import json
import types
from pathlib import Path

import pytest
from click.testing import CliRunner

import evalctl
from evalctl._cli import cli
from evalctl._plugin.registry import set_registry
from evalctl._report.compare import compare_reports, gate
from evalctl._report.stats import bootstrap_interval, mcnemar_exact

from .conftest import SUITES, registry_with, run_cli


def make_report(outcomes: dict[str, list[str]], grounded: tuple[str, ...] | None = None,
                usage: dict | None = None, cost: float | None = 0.0) -> evalctl.RunResult:
    """A run: task id -> statuses of its attempts. With `grounded`, every attempt has a
    grounding check that passes for those ids; `usage` and `cost` go on the first task."""
    tasks = []
    for task_id, statuses in outcomes.items():
        for n, status in enumerate(statuses, 1):
            checks = [] if grounded is None else [evalctl.CheckOutcome(
                "grounding", "mechanical", task_id in grounded, "", rate="grounding")]
            tasks.append(evalctl.TaskResult(task_id, status, checks=checks, attempt=n))
    tasks[0].usage = evalctl.TokenUsage.from_dict(usage or {"input_tokens": 100,
                                                            "output_tokens": 10})
    tasks[0].cost = cost
    repeat = max(len(statuses) for statuses in outcomes.values())
    return evalctl.RunResult("s.yaml", "s", "0" * 64, "scripted", None, "", "", "0", {}, tasks,
                             repeat=repeat, rate_names=("grounding",))


def write(tmp_path: Path, name: str, report: evalctl.RunResult) -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(report.to_dict()))
    return path


@pytest.mark.parametrize("b, c, expected", [(0, 0, 1.0), (1, 0, 1.0), (5, 0, 0.0625),
                                            (6, 0, 0.03125), (10, 2, 0.03857)])
def test_exact_mcnemar(b, c, expected):
    assert mcnemar_exact(b, c) == pytest.approx(expected, abs=1e-5)
    assert mcnemar_exact(c, b) == mcnemar_exact(b, c)


def test_bootstrap_is_deterministic_and_centred():
    assert bootstrap_interval([0.0] * 30) == (0.0, 0.0)
    drop = [-1.0] * 10 + [0.0] * 10
    low, high = bootstrap_interval(drop)
    assert high < 0 and low >= -1 and bootstrap_interval(drop) == (low, high)


def test_a_one_task_wiggle_is_not_a_regression(tmp_path):
    ids = [f"t{i}" for i in range(20)]
    base = make_report({i: ["passed"] for i in ids})
    now = make_report({i: ["failed" if i == "t3" else "passed"] for i in ids})
    comparison = compare_reports(base, now)
    assert comparison.newly_failing == ["t3"] and not comparison.regression
    assert comparison.test["p_value"] == 1.0
    result = CliRunner().invoke(cli, ["compare", str(write(tmp_path, "a.json", base)),
                                      str(write(tmp_path, "b.json", now))])
    assert result.exit_code == 0, result.output
    # Not "No regression" (found by a newcomer: `run --baseline` fails the same pair)
    assert "**No significant regression:** 1 task(s) newly failing, too few to tell from " \
        "chance" in result.output and "- `t3`" in result.output
    assert "No regression" not in result.output and "not significant" in result.output
    assert "| completion | 100.0% | 95.0% | -5.0 pts |" in result.output


def test_a_real_drop_is_a_regression(tmp_path):
    ids = [f"t{i}" for i in range(20)]
    base = make_report({i: ["passed"] for i in ids})
    now = make_report({i: ["failed" if int(i[1:]) < 8 else "passed"] for i in ids})
    result = CliRunner().invoke(cli, ["compare", str(write(tmp_path, "a.json", base)),
                                      str(write(tmp_path, "b.json", now)), "--json"])
    assert result.exit_code == 1
    data = json.loads(result.output)
    assert data["regression"] is True and len(data["newly_failing"]) == 8
    assert data["significance"]["p_value"] < 0.01
    assert data["rates"]["completion_rate"]["delta"] == pytest.approx(-0.4)


def test_improvements_flips_deltas_and_spend(tmp_path):
    base = make_report({"a": ["failed"], "b": ["passed"]}, grounded=("b",), cost=0.10,
                       usage={"input_tokens": 1000, "output_tokens": 100})
    now = make_report({"a": ["passed"], "b": ["passed"]}, grounded=("a", "b"), cost=None,
                      usage={"input_tokens": 800, "output_tokens": 150})
    data = compare_reports(base, now).to_dict()
    assert data["newly_passing"] == ["a"] and data["regression"] is False
    assert data["rates"]["grounding_rate"]["delta"] == 0.5
    assert data["spend"]["input_tokens"]["delta"] == -200
    assert data["spend"]["cost"] == {"baseline": 0.10, "current": None, "delta": None}


def test_added_and_removed_tasks_are_named_not_silently_compared():
    base = make_report({"a": ["passed"], "old": ["passed"]})
    now = make_report({"a": ["passed"], "new": ["failed"]})
    comparison = compare_reports(base, now)
    assert (comparison.added, comparison.removed, comparison.common) == (["new"], ["old"], 1)
    assert comparison.common_completion == (1.0, 1.0) and not comparison.regression
    markdown = comparison.to_markdown()
    assert "### Added tasks (not compared) (1)" in markdown and "- `old`" in markdown


def test_with_repeats_the_test_is_a_bootstrap():
    base = make_report({f"t{i}": ["passed"] * 3 for i in range(12)})
    now = make_report({f"t{i}": ["failed", "failed", "passed"] for i in range(12)})
    comparison = compare_reports(base, now)
    assert comparison.test["method"].startswith("bootstrap")
    assert comparison.regression
    assert comparison.test["interval"][1] < 0


@pytest.mark.parametrize("content, message", [
    (None, "cannot read"),
    ("not json", "not JSON"),
    ('{"format": "something-else"}', "not an evalctl JSON report"),
    ('{"format": "evalctl-run/1", "tasks": [{}]}', "missing or malformed fields"),
    ('{"format": "evalctl-run/1", "tasks": [{"id": "a", "status": "passed", "turns": "x"}]}',
     "missing or malformed fields"),
])
def test_unusable_input_exits_2(tmp_path, content, message):
    good = write(tmp_path, "good.json", make_report({"a": ["passed"]}))
    bad = tmp_path / "bad.json"
    if content is not None:
        bad.write_text(content)
    result = CliRunner().invoke(cli, ["compare", str(good), str(bad)])
    assert result.exit_code == 2 and message in result.output
    assert "Traceback" not in result.output


def test_gate_reasons():
    base = make_report({"a": ["passed"], "b": ["passed"], "c": ["passed"], "d": ["passed"]})
    now = make_report({"a": ["failed"], "b": ["passed"], "c": ["passed"], "d": ["passed"]})
    comparison = compare_reports(base, now)
    assert len(gate(comparison, max_drop=0.0, fail_on_flip=True)) == 2
    assert gate(comparison, max_drop=0.25, fail_on_flip=False) == []
    assert len(gate(comparison, max_drop=0.25, fail_on_flip=True)) == 1


def test_a_task_that_passed_and_is_not_graded_now_fails_the_gate():
    """Found by an attacker: an agent that ended its attempt in an error (a turn its
    script did not have) took the task out of the comparison, and `run --baseline`
    exited 0, "No regression", for a task whose check had failed. A task that passed in
    the baseline and has no graded attempt now fails the gate, flips allowed or not; one
    that failed in the baseline and errs now does not (nothing it had is lost)."""
    base = make_report({"a": ["passed"], "b": ["passed"], "c": ["failed"]})
    now = make_report({"a": ["passed"], "b": ["error"], "c": ["error"]})
    comparison = compare_reports(base, now)
    assert comparison.not_compared == ["b", "c"] and comparison.unverified == ["b"]
    assert not comparison.regression and comparison.completion_drop == 0
    for fail_on_flip in (True, False):
        (reason,) = gate(comparison, max_drop=1.0, fail_on_flip=fail_on_flip)
        assert reason.startswith("tasks that passed in the baseline were not graded now")
        assert reason.endswith(": b")
    assert comparison.to_dict()["unverified"] == ["b"]
    assert gate(compare_reports(make_report({"c": ["failed"], "a": ["passed"]}),
                                make_report({"c": ["error"], "a": ["passed"]})),
                max_drop=0.0, fail_on_flip=True) == []
    # With repeats: one attempt turned into an error, the other passed. Found by an
    # attacker: the task "passed every attempt" that was graded, and the gate said no
    # regression.
    repeated = compare_reports(make_report({"t": ["passed", "passed"], "u": ["passed"] * 2}),
                               make_report({"t": ["error", "passed"], "u": ["passed"] * 2}))
    assert repeated.unverified == ["t"] and repeated.newly_failing == []
    assert len(gate(repeated, max_drop=1.0, fail_on_flip=False)) == 1


# -- real scripted runs -------------------------------------------------------------

def test_repeat_runs_each_attempt_in_its_own_workspace(tmp_path):
    result = run_cli(tmp_path, str(SUITES / "harness.yaml"), "--only", "write-file",
                     "--repeat", "3", "--report", "r.json", "--reporter", "markdown")
    assert result.exit_code == 0, result.output
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["repeat"] == 3
    assert [(t["id"], t["attempt"]) for t in report["tasks"]] == [
        ("write-file", 1), ("write-file", 2), ("write-file", 3)]
    workspaces = {Path(t["workspace"]).name for t in report["tasks"]}
    assert workspaces == {"write-file@1", "write-file@2", "write-file@3"}
    summary = report["summary"]
    assert (summary["pass_at_k"], summary["pass_hat_k"], summary["flaky"]) == (1.0, 1.0, [])
    assert report["by_task"] == [{"id": "write-file", "attempts": ["passed"] * 3, "passed": 3,
                                  "ran": 3, "pass_at_k": True, "pass_hat_k": True,
                                  "flaky": False}]
    markdown = next((tmp_path / "eval_reports").glob("*.md")).read_text()
    assert "| write-file #2 |" in markdown and "pass^k 100.0%" in markdown


class Alternating:
    """Does the work in every other conversation: a flaky agent."""

    def __init__(self):
        self.conversations = 0

    async def complete(self, request):
        if request.turn_index == 0:
            self.conversations += 1
            if self.conversations % 2:
                return evalctl.ModelTurn(
                    tool_calls=[evalctl.ToolCall("c", "write_file",
                                                 {"path": "greeting.txt",
                                                  "content": "hello, evalctl\n"})],
                    stop_reason="tool_use")
        return evalctl.ModelTurn(text="Created `greeting.txt`.")


def _use_alternating_provider():
    @evalctl.hookimpl
    def evalctl_register_providers(register):
        register(evalctl.ProviderSpec(name="alternating", create=lambda options: Alternating(),
                                      live=False))

    plugin = types.ModuleType("alternating")
    plugin.evalctl_register_providers = evalctl_register_providers
    set_registry(registry_with(("alternating", plugin)))


def test_flaky_tasks_are_listed_and_pass_at_k_differs_from_pass_hat_k(tmp_path):
    _use_alternating_provider()
    result = run_cli(tmp_path, str(SUITES / "harness.yaml"), "--only", "write-file",
                     "--repeat", "4", "--concurrency", "1", "--provider", "alternating",
                     "--report", "r.json")
    assert result.exit_code == 1
    summary = json.loads((tmp_path / "r.json").read_text())["summary"]
    assert summary["completion_rate"] == 0.5
    assert (summary["pass_at_k"], summary["pass_hat_k"]) == (1.0, 0.0)
    assert summary["flaky"] == ["write-file"]


def test_run_against_its_own_baseline_passes_even_with_known_failures(tmp_path):
    assert run_cli(tmp_path, str(SUITES / "core.yaml"), "--report", "base.json").exit_code == 1
    again = run_cli(tmp_path, str(SUITES / "core.yaml"), "--baseline", "base.json")
    assert again.exit_code == 0, again.output
    assert "**No regression against the baseline.**" in again.output


def test_run_against_a_baseline_fails_on_a_flip_and_prints_it(tmp_path, write_suite):
    assert run_cli(tmp_path, str(SUITES / "harness.yaml"), "--report",
                   "base.json").exit_code == 0
    broken = (SUITES / "harness.yaml").read_text().replace(
        'content: "hello, evalctl\\n"', 'content: "goodbye\\n"')
    suite = write_suite(broken, name="harness.yaml")
    result = run_cli(tmp_path, str(suite), "--baseline", "base.json")
    assert result.exit_code == 1
    assert "### Newly failing (1)" in result.output and "- `write-file`" in result.output
    assert "tasks that passed in the baseline now fail: write-file" in result.output
    # One verdict: the headline says what the exit code says, with the gate's reasons.
    assert "No regression" not in result.output, result.output
    headline = next(line for line in result.output.splitlines()
                    if line.startswith("**Regression against the baseline:** "))
    assert headline.endswith("; tasks that passed in the baseline now fail: write-file.")
    assert "warning: the suite changed between the runs" in result.output
    # The Markdown report says it too (found by a newcomer: it said nothing of the gate).
    markdown = max((tmp_path / "eval_reports").glob("report-*.md"),
                   key=lambda path: path.stat().st_mtime_ns).read_text()
    assert "\n### evalctl compare\n\n> **Warning:** the suite changed" in markdown
    assert headline in markdown and "- `write-file`" in markdown
    tolerant = run_cli(tmp_path, str(suite), "--baseline", "base.json", "--allow-flips",
                       "--max-drop", "0.25")
    assert tolerant.exit_code == 0, tolerant.output


def test_a_baseline_sharing_no_task_with_the_run_stops_it_before_any_task(tmp_path):
    assert run_cli(tmp_path, str(SUITES / "harness.yaml"), "--report",
                   "base.json").exit_code == 0
    result = run_cli(tmp_path, str(SUITES / "general.yaml"), "--baseline", "base.json",
                     "--out", "again")
    assert result.exit_code == 2, result.output
    assert "base.json shares no task with this run: nothing to gate against" in result.output
    assert "harness.yaml" in result.output
    assert not (tmp_path / "again").exists()


def test_compare_of_runs_with_no_task_in_common_is_unusable_not_no_regression(tmp_path):
    base = make_report({"a": ["passed"], "b": ["passed"]})
    now = make_report({"c": ["failed"]})
    now.suite_path, now.suite_sha256 = "other.yaml", "1" * 64
    result = CliRunner().invoke(cli, ["compare", str(write(tmp_path, "a.json", base)),
                                      str(write(tmp_path, "b.json", now))])
    assert result.exit_code == 2, result.output
    assert "No regression" not in result.output
    assert "nothing to compare: no task is in both runs" in result.output
    assert "baseline s.yaml (2 tasks: a, b), current other.yaml (1 task: c)" in result.output


def test_compare_warns_when_the_suites_differ_and_still_compares_the_common_tasks(tmp_path):
    base = make_report({"a": ["passed"], "b": ["passed"]})
    now = make_report({"a": ["passed"], "b": ["passed"]})
    now.suite_sha256 = "1" * 64
    result = CliRunner().invoke(cli, ["compare", str(write(tmp_path, "a.json", base)),
                                      str(write(tmp_path, "b.json", now))])
    assert result.exit_code == 0, result.output
    warning = "the suite changed between the runs (s, sha256 000000000000 then " \
              "111111111111)"
    assert f"> **Warning:** {warning}" in result.output
    assert f"warning: {warning}" in result.output
    now.suite_path, now.suite_name = "elsewhere/t.yaml", "t"
    other = compare_reports(base, now)
    assert other.warnings() == ["the runs are of different suites: baseline s.yaml (sha256 "
                                "000000000000), current elsewhere/t.yaml (sha256 111111111111);"
                                " only the tasks in both are compared"]
    assert other.to_dict()["warnings"] == other.warnings()
    assert compare_reports(base, base).warnings() == []


def test_an_unusable_baseline_stops_the_run_before_any_task(tmp_path):
    (tmp_path / "base.json").write_text("{}")
    result = run_cli(tmp_path, str(SUITES / "harness.yaml"), "--baseline", "base.json")
    assert result.exit_code == 2 and "not an evalctl JSON report" in result.output
    assert not (tmp_path / "eval_reports").exists()


def test_compare_cannot_say_no_regression_over_tasks_not_graded_now(tmp_path):
    """Found by an attacker: turning failures into errors left `evalctl compare` saying
    "No regression", exit 0, with the tasks only under "not compared"."""
    base = write(tmp_path, "base.json", make_report({"a": ["passed"], "b": ["passed"]}))
    now = write(tmp_path, "now.json", make_report({"a": ["passed"], "b": ["error"]}))
    result = CliRunner().invoke(cli, ["compare", str(base), str(now)])
    assert result.exit_code == 1, result.output
    assert "**A regression cannot be ruled out:** 1 task(s)" in result.output
    assert "### Passed in the baseline, not graded now (1)" in result.output
    assert "may have regressed: b" in result.output


def _versioned_grader(version: str, verdict: bool):
    """The registry with a plugin 'tpv' (distribution tp-v VERSION) whose grader gives
    `verdict`, and one 'tpother' that no suite uses."""
    from evalctl._plugin.registry import PluginSource, entry_point_sources, load_registry

    @evalctl.hookimpl
    def evalctl_register_graders(register):
        register(evalctl.GraderSpec(name="tpv_check", grade=lambda c, w, r:
                                    evalctl.CheckResult(verdict, f"verdict {verdict}")))

    @evalctl.hookimpl
    def evalctl_register_reporters(register):
        register(evalctl.ReporterSpec(name="tpother_txt", write=lambda run, path: path,
                                      extension="txt"))

    plugin = types.ModuleType("tpv")
    plugin.evalctl_register_graders = evalctl_register_graders
    other = types.ModuleType("tpother")
    other.evalctl_register_reporters = evalctl_register_reporters
    return load_registry(entry_point_sources() + [
        PluginSource.from_object("tpv", plugin, "tp-v", version),
        PluginSource.from_object("tpother", other, "tp-other", version)], disabled=())


VERSIONED_SUITE = """\
- id: judged
  prompt: Write out.txt.
  checks:
    - type: file_exists
      path: out.txt
    - type: tpv_check
  script:
    - tool_calls:
        - tool: write_file
          input: {path: out.txt, content: "x"}
    - text: Done.
"""


def test_a_grader_plugin_of_another_version_is_warned_of_not_only_blamed_on_the_agent(
        tmp_path, write_suite):
    """Found by a newcomer: a run against --baseline whose grading plugin had changed
    version said "tasks that passed in the baseline now fail" with no warning, and
    compare --json gave warnings: []."""
    suite = write_suite(VERSIONED_SUITE, name="versioned.yaml")
    set_registry(_versioned_grader("0.1.0", True))
    assert run_cli(tmp_path, str(suite), "--report", "base.json").exit_code == 0
    set_registry(_versioned_grader("0.2.0", False))
    result = run_cli(tmp_path, str(suite), "--baseline", "base.json", "--report", "now.json")
    assert result.exit_code == 1
    warning = ("plugin 'tpv' differs between the runs (tp-v 0.1.0 in the baseline, tp-v "
               "0.2.0 now): what it provides (a grader, say) may judge differently")
    assert f"warning: {warning}" in result.output
    assert f"> **Warning:** {warning}" in result.output
    # A plugin neither run used is not said: its version changes nothing here.
    assert "tpother" not in result.output
    compared = CliRunner().invoke(cli, ["compare", "--json", str(tmp_path / "base.json"),
                                        str(tmp_path / "now.json")])
    warnings = json.loads(compared.stdout)["warnings"]
    assert len(warnings) == 1 and warnings[0].startswith(warning)


def test_compare_warns_of_every_changed_plugin_and_evalctl_when_it_cannot_tell_use():
    base, now = make_report({"a": ["passed"]}), make_report({"a": ["failed"]})
    base.plugin_versions = {"tpv": "0.1.0", "same": "1", "files": "0.1.0"}
    now.plugin_versions = {"tpv": "0.2.0", "same": "1", "files": "0.2.0"}
    base.plugin_distributions = now.plugin_distributions = {
        "tpv": "tp-v", "same": "tp-same", "files": "evalctl"}
    base.evalctl_version, now.evalctl_version = "0.1.0", "0.2.0"
    assert compare_reports(base, now).warnings() == [
        "evalctl differs between the runs (0.1.0 in the baseline, 0.2.0 now): its built-in "
        "graders may grade differently, so a change may not be the agent's",
        "plugin 'tpv' differs between the runs (tp-v 0.1.0 in the baseline, tp-v 0.2.0 "
        "now): what it provides (a grader, say) may judge differently, so a change in the "
        "checks it grades may not be the agent's"]


def test_the_table_rates_are_over_the_common_tasks_as_the_headline_is(tmp_path):
    # Found by a newcomer: a task added in the new run (reported "not compared") moved
    # the table's completion, pass@k and pass^k to 50% while the headline, over the 3
    # tasks in both runs, said completion fell to 33.3%.
    base = make_report({"a": ["passed"], "b": ["passed"], "c": ["failed"]})
    now = make_report({"a": ["passed"], "b": ["failed"], "c": ["failed"],
                       "new": ["passed"]})
    comparison = compare_reports(base, now)
    assert comparison.common_completion == (pytest.approx(2 / 3), pytest.approx(1 / 3))
    rates = comparison.rates()
    for name in ("completion_rate", "pass_at_k", "pass_hat_k"):
        assert rates[name]["baseline"] == pytest.approx(2 / 3, abs=1e-4)
        assert rates[name]["current"] == pytest.approx(1 / 3, abs=1e-4), name
    markdown = comparison.to_markdown()
    assert "| completion | 66.7% | 33.3% | -33.3 pts |" in markdown
    assert "over the 3 tasks graded in both runs" in markdown
    # `run --baseline`: the gate's drop and the table's are the same figure.
    gated = comparison.to_markdown(gate(comparison, max_drop=0.0, fail_on_flip=False))
    assert "-33.3 pts" in gated and "50.0%" not in gated


def test_the_gate_gives_the_drop_in_points_as_max_drop_is():
    # Found by a newcomer: "dropped by 33.3%, more than the 0.0% allowed" reads as a
    # relative drop; --max-drop is in percentage points.
    base = make_report({"a": ["passed"], "b": ["passed"], "c": ["failed"]})
    now = make_report({"a": ["passed"], "b": ["failed"], "c": ["failed"]})
    reasons = gate(compare_reports(base, now), max_drop=0.1, fail_on_flip=False)
    assert reasons == ["completion over the common tasks dropped by 33.3 points, more "
                       "than the 10.0 points allowed"]


def test_compare_warns_when_the_repeat_counts_differ(tmp_path):
    # Found by a newcomer: raw token totals side by side ("input tokens 1496 -> 4488")
    # beside "No regression", with 1 attempt a task in the baseline and 3 now.
    base = make_report({"a": ["passed"], "b": ["failed"]})
    now = make_report({"a": ["passed"] * 3, "b": ["failed"] * 3})
    warnings = compare_reports(base, now).warnings()
    assert any("repeat counts differ (1 attempt(s) a task in the baseline, 3 now)" in w
               for w in warnings)
    assert "repeat counts differ" in compare_reports(base, now).to_markdown()
    assert not any("repeat" in w for w in compare_reports(base, base).warnings())


def test_compare_shows_tokens_and_cost_an_attempt_beside_the_totals():
    """What the repeat warning points at: an attempt's share, comparable across runs of
    different repeat counts (2 attempts spending 110 tokens and $0.30, then 6 spending
    330 and $0.60), over the attempts each run ran (a not-run attempt spends nothing)."""
    base = make_report({"a": ["passed"], "b": ["failed"]}, cost=0.30)
    now = make_report({"a": ["passed"] * 3, "b": ["failed"] * 2 + ["not_run"]}, cost=0.50,
                      usage={"input_tokens": 300, "output_tokens": 30})
    spend = compare_reports(base, now).spend()
    assert spend["attempts"] == {"baseline": 2, "current": 5, "delta": 3}
    assert spend["tokens_per_attempt"] == {"baseline": 55.0, "current": 66.0, "delta": 11.0}
    assert spend["cost_per_attempt"] == {"baseline": 0.15, "current": 0.1, "delta": -0.05}
    markdown = compare_reports(base, now).to_markdown()
    assert "| tokens an attempt (input + output) | 55 | 66 | +11 |" in markdown
    assert "| cost an attempt | $0.1500 | $0.1000 | -0.0500 |" in markdown
    assert "| attempts | 2 | 5 | +3 |" in markdown
    unpriced = compare_reports(base, make_report({"a": ["passed"]}, cost=None)).spend()
    assert unpriced["cost_per_attempt"] == {"baseline": 0.15, "current": None, "delta": None}
