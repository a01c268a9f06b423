"""What a newcomer who followed only the README and docs ran into (round 9): resuming
past unrelated plugins, the config's sandbox options, honest plugin hints, every --tag
checked, evalctl.toml's problems all at once at their lines, output paths checked up
front, --baseline of a run directory, stale reports after a resume, and messages and
docs that say what is true."""

from __future__ import annotations

import ast
import json
import os
import re
import types
from pathlib import Path

import pytest
from click.testing import CliRunner

import evalctl
from evalctl._cli import cli
from evalctl._plugin.registry import PluginSource, load_registry, set_registry

from .conftest import ROOT, registry_with, run_cli
from .test_journal import QUICK

TASK = QUICK.replace("  checks:", "  tags:\n    - {tag}\n  checks:", 1)
SUITE = "".join(TASK.format(id=name, tag=tag) for name, tag in
                (("one", "math"), ("two", "data"), ("three", "math")))
JOURNAL = "journal.jsonl"


def invoke(where: Path, *args: str):
    """Any evalctl command through CliRunner, from the directory `where`."""
    previous = Path.cwd()
    os.chdir(where)
    try:
        return CliRunner().invoke(cli, list(args))
    finally:
        os.chdir(previous)


def finished_run(tmp_path: Path, *args: str) -> Path:
    (tmp_path / "suite.yaml").write_text(SUITE)
    result = run_cli(tmp_path, "suite.yaml", *args)
    assert result.exit_code == 0, result.output
    return next((tmp_path / "eval_reports").glob("workspaces-*"))


def edit_header(run_dir: Path, change) -> None:
    journal = run_dir / JOURNAL
    lines = journal.read_text().splitlines(keepends=True)
    header = json.loads(lines[0])
    change(header)
    journal.write_text(json.dumps(header) + "\n" + "".join(lines[1:]))


def grader_plugin(*names: str) -> types.ModuleType:
    @evalctl.hookimpl
    def evalctl_register_graders(register):
        for name in names:
            register(evalctl.GraderSpec(name=name, grade=lambda c, w, r: evalctl.CheckResult(True)))

    module = types.ModuleType("plugin")
    module.evalctl_register_graders = evalctl_register_graders  # type: ignore[attr-defined]
    return module


# --- 1. resume and plugins the run does not use ---------------------------------------

def test_a_plugin_the_run_does_not_use_does_not_block_its_resume(tmp_path):
    run_dir = finished_run(tmp_path)
    # Installed since: a grader no check of the suite uses.
    set_registry(registry_with(("judge_like", grader_plugin("unused_grader"))))
    installed = run_cli(tmp_path, "--resume", str(run_dir))
    assert installed.exit_code == 0, installed.output
    assert "0 of 3 attempt(s) to run" in installed.output
    set_registry(None)
    # Removed since: a plugin the journal knew and nothing here provides.
    edit_header(run_dir, lambda header: header["plugins"].update(ghost="9.9"))
    removed = run_cli(tmp_path, "--resume", str(run_dir))
    assert removed.exit_code == 0, removed.output


def test_a_plugin_the_run_uses_still_blocks_its_resume_and_the_message_says_what_to_do(
        tmp_path):
    run_dir = finished_run(tmp_path)
    # `files` provides file_contains, which every task's check uses.
    edit_header(run_dir, lambda header: header["plugins"].update(files="0.0.1"))
    refused = run_cli(tmp_path, "--resume", str(run_dir))
    assert refused.exit_code == 2
    assert 'plugin files: "0.0.1" -> ' in refused.output
    assert "EVALCTL_DISABLE_PLUGINS" in refused.output
    assert "only the plugins the run uses are compared" in refused.output


# --- 2. the config's [sandbox_options] -------------------------------------------------

def test_the_configs_sandbox_options_apply_to_the_sandbox_chosen_without_sandbox_set(tmp_path):
    (tmp_path / "suite.yaml").write_text(SUITE)
    (tmp_path / "evalctl.toml").write_text('[sandbox_options]\nimage = "x"\n')
    # Applied, as --sandbox-option would be: local takes no option, so it is refused
    # (it used to be dropped without a word).
    refused = run_cli(tmp_path, "suite.yaml", "--sandbox", "local")
    assert refused.exit_code == 2
    assert "sandbox 'local' has no option 'image'" in refused.output
    # Options for the config's own sandbox go with it, not with another chosen by flag.
    (tmp_path / "evalctl.toml").write_text(
        'sandbox = "bwrap"\n[sandbox_options]\nmemory_mb = 512\n')
    elsewhere = run_cli(tmp_path, "suite.yaml", "--sandbox", "local", "--report", "r.json")
    assert elsewhere.exit_code == 0, elsewhere.output
    assert json.loads((tmp_path / "r.json").read_text())["sandbox"]["options"] == {}


def test_the_configs_sandbox_options_reach_autos_choice(tmp_path, require_bwrap):
    (tmp_path / "suite.yaml").write_text(SUITE)
    (tmp_path / "evalctl.toml").write_text("[sandbox_options]\nmemory_mb = 512\n")
    result = run_cli(tmp_path, "suite.yaml", "--report", "r.json")
    assert result.exit_code == 0, result.output
    sandbox = json.loads((tmp_path / "r.json").read_text())["sandbox"]
    assert sandbox["chosen_by"] == "auto" and sandbox["options"]["memory_mb"] == 512


# --- 3. unknown plugin names: no package made of typed text ----------------------------

def test_a_disabled_plugin_is_named_instead_of_an_install_hint(tmp_path, monkeypatch):
    (tmp_path / "suite.yaml").write_text(SUITE)
    monkeypatch.setenv("EVALCTL_DISABLE_PLUGINS", "files")
    result = invoke(tmp_path, "validate", "suite.yaml")
    assert result.exit_code == 2
    assert "disabled by EVALCTL_DISABLE_PLUGINS: files" in result.output
    assert "pip install" not in result.output and "evalctl-file" not in result.output


def test_an_unknown_agent_suggests_no_package_name(tmp_path):
    (tmp_path / "suite.yaml").write_text(SUITE)
    result = run_cli(tmp_path, "suite.yaml", "--agent", "nope")
    assert result.exit_code == 2
    assert "unknown agent 'nope'" in result.output
    assert "pip install" not in result.output and "evalctl-nope" not in result.output
    assert "install the plugin package that provides it" in result.output


def test_a_disabled_or_failed_plugin_is_said_and_no_install_is_suggested():
    disabled = load_registry([PluginSource.from_object("judge", grader_plugin("judge"))],
                             disabled={"judge"})
    message = disabled.explain_missing("grader", "judge")
    assert "plugin 'judge' is installed but disabled by EVALCTL_DISABLE_PLUGINS" in message
    assert "install" not in message.replace("installed", "")
    failed = load_registry([PluginSource("broken", lambda: 1 / 0)])
    message = failed.explain_missing("grader", "judge")
    assert "failed to load and may provide it" in message and "ZeroDivisionError" in message
    assert "install" not in message.replace("installed", "")


def test_installed_sandboxes_is_spelt_right(tmp_path):
    (tmp_path / "suite.yaml").write_text(SUITE)
    result = run_cli(tmp_path, "suite.yaml", "--sandbox", "dockr")
    assert result.exit_code == 2
    assert "installed sandboxes:" in result.output and "sandboxs" not in result.output


# --- 4. every --tag and --only must match ----------------------------------------------

def test_a_mistyped_tag_beside_one_that_matches_is_refused(tmp_path):
    (tmp_path / "suite.yaml").write_text(SUITE)
    result = run_cli(tmp_path, "suite.yaml", "--tag", "math", "--tag", "dta")
    assert result.exit_code == 2
    assert "unknown tag(s) dta (did you mean 'data' for 'dta'?)" in result.output
    assert "the suite's tags: data, math" in result.output
    assert not (tmp_path / "eval_reports").exists()
    only = run_cli(tmp_path, "suite.yaml", "--only", "one", "--only", "tow")
    assert only.exit_code == 2 and "did you mean 'two' for 'tow'?" in only.output
    fine = run_cli(tmp_path, "suite.yaml", "--tag", "math", "--tag", "data")
    assert fine.exit_code == 0, fine.output


# --- 5. evalctl.toml: every problem, at its line ---------------------------------------

def test_every_config_problem_is_reported_at_its_line_with_did_you_mean(tmp_path):
    (tmp_path / "suite.yaml").write_text(SUITE)
    (tmp_path / "evalctl.toml").write_text(
        '# team defaults\nreporter = ["junit"]\nconcurrency = "four"\n\n'
        "[provder_options]\nmax_tokens = 1\n")
    result = run_cli(tmp_path, "suite.yaml")
    assert result.exit_code == 2
    assert "evalctl.toml:2: error: unknown key 'reporter' (did you mean 'reporters'?)" in \
        result.output
    assert "evalctl.toml:3: error: 'concurrency' must be a whole number, got 'four'" in \
        result.output
    assert "evalctl.toml:5: error: unknown key 'provder_options' (did you mean " \
           "'provider_options'?)" in result.output
    assert "Traceback" not in result.output


def test_a_pyproject_problem_and_a_syntax_error_have_their_lines(tmp_path):
    (tmp_path / "suite.yaml").write_text(SUITE)
    (tmp_path / "pyproject.toml").write_text(
        '[project]\nname = "x"\n\n[tool.evalctl]\nconcurrency = 2\nmodle = "m"\n')
    result = run_cli(tmp_path, "suite.yaml")
    assert result.exit_code == 2
    assert "pyproject.toml:6: error: [tool.evalctl] unknown key 'modle' (did you mean " \
           "'model'?)" in result.output
    (tmp_path / "pyproject.toml").unlink()
    (tmp_path / "evalctl.toml").write_text('concurrency = 2\nout = \n')
    broken = run_cli(tmp_path, "suite.yaml")
    assert broken.exit_code == 2 and "evalctl.toml:2: error: invalid TOML" in broken.output


def test_both_config_files_warn_and_evalctl_toml_wins(tmp_path):
    (tmp_path / "suite.yaml").write_text(SUITE)
    (tmp_path / "evalctl.toml").write_text('reporters = ["junit"]\n')
    (tmp_path / "pyproject.toml").write_text('[tool.evalctl]\nreporters = ["markdown"]\n')
    result = run_cli(tmp_path, "suite.yaml")
    assert result.exit_code == 0, result.output
    assert "both evalctl.toml and pyproject.toml [tool.evalctl] set evalctl defaults" in \
        result.output
    assert sorted(p.suffix for p in (tmp_path / "eval_reports").glob("report-*")) == \
        [".json", ".xml"]


# --- 6. --report into a directory that cannot be written -------------------------------

def test_a_report_path_under_a_file_is_refused_before_the_run(tmp_path):
    (tmp_path / "suite.yaml").write_text(SUITE)
    (tmp_path / "afile").write_text("")
    result = run_cli(tmp_path, "suite.yaml", "--report", "afile/sub/r.json")
    assert result.exit_code == 2
    assert "afile is not a directory" in result.output
    assert not (tmp_path / "eval_reports").exists()  # refused before any task


def test_a_report_path_in_an_unwritable_directory_is_refused_before_the_run(tmp_path,
                                                                            monkeypatch):
    (tmp_path / "suite.yaml").write_text(SUITE)
    locked = tmp_path / "locked"
    locked.mkdir()
    real_access = os.access
    # Tests run as root here, whom a mode does not stop: the answer is the kernel's.
    monkeypatch.setattr(os, "access", lambda path, mode, **kw: False
                        if Path(path).absolute() == locked else real_access(path, mode, **kw))
    for where in ("locked/r.json", "locked/new/deeper/r.json"):
        result = run_cli(tmp_path, "suite.yaml", "--report", where)
        assert result.exit_code == 2, result.output
        assert "is not writable" in result.output
    assert not (tmp_path / "eval_reports").exists()


def test_a_reporter_write_failure_names_the_report_not_the_temporary_file(tmp_path):
    from evalctl._report.results import RunResult
    from evalctl._report.writing import write_reports

    @evalctl.hookimpl
    def evalctl_register_reporters(register):
        def denied(run, path):
            raise PermissionError(13, "Permission denied", str(path.parent / ".r.txt.ab12.tmp"))

        register(evalctl.ReporterSpec(name="denied", write=denied, extension="txt"))

    plugin = types.ModuleType("denied")
    plugin.evalctl_register_reporters = evalctl_register_reporters  # type: ignore[attr-defined]
    registry = registry_with(("denied", plugin))
    run = RunResult(suite_path="s.yaml", suite_name="s", suite_sha256="0", provider="scripted",
                    model=None, started_at="", finished_at="", evalctl_version="",
                    plugin_versions={}, tasks=[], run_directory=str(tmp_path / "workspaces-x"))
    _, failures = write_reports(run, registry, ["denied"], tmp_path)
    assert len(failures) == 1
    assert failures[0].endswith("failed writing " + str(tmp_path / "report-x.txt") +
                                ": Permission denied"), failures
    assert ".tmp" not in failures[0]


# --- 7. --baseline takes a run directory -----------------------------------------------

def test_baseline_accepts_a_run_directory_as_compare_does(tmp_path):
    run_dir = finished_run(tmp_path)
    result = run_cli(tmp_path, "suite.yaml", "--baseline", str(run_dir), "--out", "again")
    assert result.exit_code == 0, result.output
    assert "is a directory" not in result.output
    assert "regression" in result.output.lower()


# --- 8. -o into a missing directory ----------------------------------------------------

def test_schema_output_into_a_missing_directory_is_refused_and_nothing_made(tmp_path):
    result = invoke(tmp_path, "schema", "-o", str(tmp_path / "no" / "dir" / "x.json"))
    assert result.exit_code == 2
    assert "does not exist" in result.output
    assert not (tmp_path / "no").exists()


def test_compare_output_into_a_missing_directory_is_refused(tmp_path):
    run_dir = finished_run(tmp_path)
    result = invoke(tmp_path, "compare", str(run_dir), str(run_dir), "-o", "no/dir/c.md")
    assert result.exit_code == 2 and "does not exist" in result.output
    assert not (tmp_path / "no").exists()


# --- 9. a suite for a real model under the scripted provider ---------------------------

def test_running_live_without_a_provider_warns_before_the_run(tmp_path):
    result = run_cli(tmp_path, "live", "--sandbox", "local", "--only", "create-file")
    assert result.exit_code == 1
    warning = result.output.index("warning: 1 of 1 task(s) have nothing for the scripted "
                                  "provider to serve")
    assert "use --provider NAME" in result.output
    assert warning < result.output.index("tasks passed")


def test_scripted_tasks_get_no_such_warning(tmp_path):
    (tmp_path / "suite.yaml").write_text(SUITE)
    result = run_cli(tmp_path, "suite.yaml")
    assert result.exit_code == 0 and "nothing for the scripted provider" not in result.output


# --- 10. a resume renders the run's other reports again --------------------------------

def test_a_resume_renders_again_the_reports_an_earlier_report_command_wrote(tmp_path):
    run_dir = finished_run(tmp_path)
    journal = run_dir / JOURNAL
    journal.write_text(journal.read_text().splitlines(keepends=True)[0])  # killed at once
    rendered = invoke(tmp_path, "report", str(run_dir), "--reporter", "junit")
    assert rendered.exit_code == 0, rendered.output
    xml = next((tmp_path / "eval_reports").glob("report-*.xml"))
    assert xml.read_text().count("<skipped") == 3
    resumed = run_cli(tmp_path, "--resume", str(run_dir))
    assert resumed.exit_code == 0, resumed.output
    assert f"wrote {xml}" in resumed.output
    assert "<skipped" not in xml.read_text()
    report = json.loads(xml.with_suffix(".json").read_text())
    assert report["summary"]["passed"] == 3


# --- 11. messages ----------------------------------------------------------------------

def test_another_agents_tool_name_suggests_the_tool_it_means(tmp_path):
    (tmp_path / "suite.yaml").write_text(SUITE.replace("tool: write_file", "tool: create_file"))
    result = invoke(tmp_path, "validate", "suite.yaml")
    assert result.exit_code == 2
    assert "'create_file' (did you mean 'write_file'?)" in result.output


def test_regrade_and_resume_of_a_missing_directory_say_so(tmp_path):
    missing = str(tmp_path / "nonexistent")
    regrade = invoke(tmp_path, "regrade", missing)
    assert regrade.exit_code == 2 and f"RUN_DIR {missing}: no such directory" in regrade.output
    resume = run_cli(tmp_path, "--resume", missing)
    assert resume.exit_code == 2 and f"--resume {missing}: no such directory" in resume.output


def test_view_with_no_runs_says_how_to_make_one(tmp_path):
    result = invoke(tmp_path, "view", "--no-open")
    assert result.exit_code == 2
    assert "no runs here yet" in result.output and "evalctl run" in result.output
    assert "cannot read" not in result.output


def test_a_global_option_after_the_command_gets_a_hint_and_errors_say_error(tmp_path):
    result = invoke(tmp_path, "run", "--strict-plugins")
    assert result.exit_code == 2
    assert "error: No such option '--strict-plugins'" in result.output
    assert "put it before the command (evalctl --strict-plugins run ...)" in result.output
    assert "Error:" not in result.output
    top = invoke(tmp_path, "--bogus")
    assert top.exit_code == 2 and "error: No such option '--bogus'" in top.output


# --- 12. docs that say what is true ----------------------------------------------------

def test_run_help_lists_every_exit_status():
    text = CliRunner().invoke(cli, ["run", "--help"]).output
    for code, words in (("0", "every task passed"), ("1", "budget"), ("2", "bad input"),
                        ("130", "interrupted")):
        assert re.search(rf"^\s+{code}\s+.*{words}", text, flags=re.M), (code, text)


def test_the_docs_name_every_error_kind_and_error_status():
    from evalctl._plugin.types import ExitStatus
    from evalctl._report.results import ERROR_KINDS

    reports = (ROOT / "docs" / "reports.md").read_text()
    listed = re.search(r"`errors\[\]` \| .*?`kind` \(([^)]*)\)", reports)
    assert listed is not None
    assert set(re.findall(r"`(\w+)`", listed.group(1))) == set(ERROR_KINDS)
    for key in ("`format`", "`executor`"):
        assert f"| {key} |" in reports
    assert "`passed` (`true` exactly when `status` is passed)" in reports
    suites = (ROOT / "docs" / "suites.md").read_text()
    section = suites[suites.index("## Exit statuses"):]
    for status in ExitStatus.ERRORS:
        assert f"`{status}`" in section, status


def test_the_docs_agree_with_each_other_and_the_code():
    agents = (ROOT / "docs" / "agents.md").read_text()
    assert "permissions: read_only" not in agents
    readme = (ROOT / "README.md").read_text()
    sandboxes = (ROOT / "docs" / "sandboxes.md").read_text()
    bench = (ROOT / "bench" / "README.md").read_text()
    assert "| what `bwrap` adds per task | 9 ms |" in bench
    assert "bubblewrap adds about 9 ms a task" in readme
    assert "a task costs about 9 ms more" in sandboxes and "6-8" not in sandboxes
    assert "../shared/DESIGN.md" not in (ROOT / "docs" / "architecture.md").read_text()
    assert "current\ndirectory only" in readme


def test_the_plugin_testing_snippet_defines_its_suite_as_the_tested_distribution_does():
    plugins = (ROOT / "docs" / "plugins.md").read_text()
    section = plugins[plugins.index("## Testing a plugin"):]
    block = re.search(r"```python\n(.*?)```", section, flags=re.S)
    assert block is not None
    tree = ast.parse(block.group(1))
    assigned = {node.targets[0].id: ast.literal_eval(node.value) for node in tree.body
                if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name)}
    used = {node.id for node in ast.walk(tree) if isinstance(node, ast.Name)}
    assert "SUITE_YAML" in used and "SUITE_YAML" in assigned
    tested = (ROOT / "tests" / "distributions" / "wordcount" / "tests" /
              "test_wordcount.py").read_text()
    assert assigned["SUITE_YAML"] in tested  # the very suite the distribution's test runs


@pytest.fixture(autouse=True)
def _fresh_registry():
    yield
    set_registry(None)


def test_a_failed_reporter_leaves_no_partial_file_but_never_removes_an_earlier_one(tmp_path):
    """A reporter writing with open() that then raised left an empty report-*.out behind
    a run that said it failed."""
    from evalctl._report.results import RunResult
    from evalctl._report.writing import write_reports

    @evalctl.hookimpl
    def evalctl_register_reporters(register):
        def half(run, path):
            with open(path, "w") as out:
                out.write("partial")
                raise ValueError("broke halfway")

        register(evalctl.ReporterSpec(name="half", write=half, extension="out"))

    plugin = types.ModuleType("half")
    plugin.evalctl_register_reporters = evalctl_register_reporters  # type: ignore[attr-defined]
    registry = registry_with(("half", plugin))
    run = RunResult(suite_path="s.yaml", suite_name="s", suite_sha256="0", provider="scripted",
                    model=None, started_at="", finished_at="", evalctl_version="",
                    plugin_versions={}, tasks=[], run_directory=str(tmp_path / "workspaces-x"))
    _, failures = write_reports(run, registry, ["half"], tmp_path)
    assert len(failures) == 1 and "broke halfway" in failures[0]
    assert failures[0].endswith("; the partial file it left was removed")
    assert not (tmp_path / "report-x.out").exists()
    # a report that was there before the reporter ran (a resume rendering it again) stays
    (tmp_path / "report-x.out").write_text("earlier")
    _, failures = write_reports(run, registry, ["half"], tmp_path)
    assert "removed" not in failures[0] and (tmp_path / "report-x.out").exists()
