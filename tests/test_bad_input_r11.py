"""Bad input files found by the eleventh attack round: each is refused with a message
naming the file (and its line or field) and exit 2, or skipped with a reason, never a
traceback; and text that could reorder a rendered report is escaped."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from evalctl._cli import cli
from evalctl._report.journal import JOURNAL_NAME, read_journal
from evalctl._text import escape_text

from .conftest import run_cli
from .test_cli_newcomer_r9 import invoke
from .test_journal import QUICK

DEEP = "[" * 100_000


def finished_run(where: Path, ids: tuple[str, ...] = ("one", "two")) -> Path:
    """The run directory of a finished run of quick tasks (all passed)."""
    where.mkdir(parents=True, exist_ok=True)
    (where / "suite.yaml").write_text("".join(QUICK.format(id=i) for i in ids))
    result = run_cli(where, "suite.yaml", "--sandbox", "local", "--reporter", "json")
    assert result.exit_code == 0, result.output
    return next((where / "eval_reports").glob("workspaces-*"))


@pytest.fixture(scope="module")
def original_run(tmp_path_factory) -> Path:
    return finished_run(tmp_path_factory.mktemp("original"))


@pytest.fixture
def run_copy(original_run, tmp_path) -> Path:
    """A copy of a finished run's directory, to damage."""
    copy = tmp_path / original_run.name
    shutil.copytree(original_run, copy, symlinks=True)
    return copy


def rewrite_line(run_dir: Path, index: int, change) -> None:
    journal = run_dir / JOURNAL_NAME
    lines = journal.read_text().splitlines()
    record = json.loads(lines[index])
    change(record)
    lines[index] = json.dumps(record)
    journal.write_text("\n".join(lines) + "\n")


def setter(path: tuple, value):
    def change(record):
        node = record
        for step in path[:-1]:
            node = node[step]
        node[path[-1]] = value
    return change


# ---- 1. JSON nested past Python's recursion ----

@pytest.mark.parametrize("command", [
    ("compare", "deep.json", "good.json"),
    ("view", "deep.json", "--no-open"),
    ("report", "deep.json"),
    ("run", "suite.yaml", "--sandbox", "local", "--baseline", "deep.json"),
])
def test_a_report_nested_past_reading_is_a_usage_error(original_run, tmp_path, command):
    report = next(original_run.parent.glob("report-*.json"))
    shutil.copy(report, tmp_path / "good.json")
    shutil.copy(original_run.parent.parent / "suite.yaml", tmp_path / "suite.yaml")
    (tmp_path / "deep.json").write_text(DEEP)
    result = invoke(tmp_path, *command)
    assert result.exit_code == 2, result.output
    assert "deep.json: not JSON: nested too deeply to read" in result.output
    assert not (tmp_path / "eval_reports").exists()  # refused before anything ran


def test_a_journal_nested_past_reading_is_a_usage_error(tmp_path):
    (tmp_path / JOURNAL_NAME).write_text(DEEP + "\n")
    result = invoke(tmp_path, "report", str(tmp_path))
    assert result.exit_code == 2
    assert f"{tmp_path / JOURNAL_NAME}:1: not an evalctl journal (nested too deeply" in \
        result.output


def test_swebench_instances_nested_past_reading_are_problems_at_their_lines(tmp_path):
    instance = {"instance_id": "a", "repo": "o/r", "base_commit": "a" * 40,
                "problem_statement": "p", "test_patch": "diff --git a/x b/x\n",
                "FAIL_TO_PASS": DEEP, "PASS_TO_PASS": "[]"}
    (tmp_path / "i.jsonl").write_text(json.dumps(instance) + "\n" + '{"a":' * 100_000 + "\n")
    result = invoke(tmp_path, "import", "swebench", "i.jsonl")
    assert result.exit_code == 2, result.output
    assert "i.jsonl:1: error: instance 'a': FAIL_TO_PASS is text that is not a JSON list" \
        in result.output
    assert "i.jsonl:2: error: not JSON: nested too deeply to read" in result.output
    assert "RecursionError" not in result.output


# ---- 2. a journal whose fields have the wrong types ----

@pytest.mark.parametrize(("path", "value", "named"), [
    (("suite",), 7, "suite: 7 is not of type 'object'"),
    (("suite", "absolute_path"), 7, "suite.absolute_path: 7 is not of type 'string'"),
    (("suite", "absolute_path"), "a\x00b", "suite.absolute_path: "),
    (("plugins",), None, "plugins: None is not of type 'object'"),
    (("plugins",), [1], "plugins: [1] is not of type 'object'"),
    (("repeat",), "x", "repeat: 'x' is not of type 'integer'"),
    (("repeat",), 10_001, "repeat: 10001 is greater than the maximum of 10000"),
    (("rate_names",), None, "rate_names: None is not of type 'array'"),
    (("options",), [1], "options: [1] is not of type 'object'"),
    (("options", "max_cost"), "x", "options.max_cost: 'x' is not of type"),
    (("run_directory",), 7, "run_directory: 7 is not of type 'string'"),
    (("tasks", 0), 7, "tasks[0]: 7 is not of type 'object'"),
    (("agent",), None, "agent: None is not of type 'object'"),
])
def test_a_malformed_journal_header_is_named_with_its_field(run_copy, path, value, named):
    rewrite_line(run_copy, 0, setter(path, value))
    for command in (("report", str(run_copy)), ("run", "--resume", str(run_copy))):
        result = invoke(run_copy.parent, *command)
        assert result.exit_code == 2, (command, result.output)
        assert f"{run_copy / JOURNAL_NAME}:1: a journal header with a malformed field (" \
            f"{named}" in result.output, result.output


def test_a_journal_header_without_options_cannot_be_resumed(run_copy):
    rewrite_line(run_copy, 0, lambda record: record.pop("options"))
    result = invoke(run_copy.parent, "run", "--resume", str(run_copy))
    assert result.exit_code == 2
    assert "its journal's header records no options" in result.output
    assert invoke(run_copy.parent, "report", str(run_copy)).exit_code == 0  # still readable


@pytest.mark.parametrize(("path", "value", "named"), [
    (("status",), 7, "result.status: 7 is not one of"),
    (("status",), "passd", "result.status: 'passd' is not one of"),
    (("exit_status",), 7, "result.exit_status: 7 is not of type"),
    (("cost",), "x", "result.cost: 'x' is not of type"),
    (("workspace",), 7, "result.workspace: 7 is not of type"),
    (("checks", 0, "passed"), "yes", "result.checks[0].passed: 'yes' is not of type 'boolean'"),
    (("usage",), [1], "result.usage: [1] is not of type"),
    (("tags",), "t", "result.tags: 't' is not of type 'array'"),
])
def test_a_malformed_result_is_skipped_as_an_unreadable_line(run_copy, path, value, named):
    journal = run_copy / JOURNAL_NAME
    lines = journal.read_text().splitlines()
    number = next(n for n, line in enumerate(lines) if json.loads(line)["kind"] == "attempt")
    damaged = json.loads(lines[number])["result"]["id"]
    rewrite_line(run_copy, number, setter(("result", *path), value))

    contents = read_journal(run_copy)
    assert f"{journal}:{number + 1}: unreadable line skipped (ValueError: a malformed " \
           f"field: {named}" in contents.problems[0]
    shown = invoke(run_copy.parent, "report", str(run_copy), "--reporter", "markdown",
                   "--reporter", "junit", "--reporter", "html")
    assert shown.exit_code == 0, shown.output
    assert "unreadable line skipped" in shown.output
    report = json.loads(next(run_copy.parent.glob(f"report-{run_copy.name[11:]}.json"))
                        .read_text())
    by_id = {t["id"]: t for t in report["tasks"]}
    assert by_id[damaged]["status"] == "not_run"
    assert f"its journal line ({journal}:{number + 1}) could not be read" in \
        by_id[damaged]["error"]

    resumed = invoke(run_copy.parent, "run", "--resume", str(run_copy))
    assert resumed.exit_code == 0, resumed.output
    assert "1 of 2 attempt(s) to run" in resumed.output
    assert [r["result"]["id"] for r in map(json.loads, journal.read_text().splitlines())
            if r["kind"] == "attempt"][-1] == damaged


def test_a_malformed_end_line_is_skipped_not_rendered(run_copy):
    journal = run_copy / JOURNAL_NAME
    number = len(journal.read_text().splitlines()) - 1
    rewrite_line(run_copy, number, setter(("budget",), {"max_cost": "x"}))
    contents = read_journal(run_copy)
    assert "a malformed field: budget.max_cost: 'x' is not of type" in contents.problems[0]
    assert invoke(run_copy.parent, "report", str(run_copy), "--reporter", "markdown"
                  ).exit_code == 0


@pytest.mark.parametrize(("field", "value", "named"), [
    ("status", 7, "tasks[0].status: 7 is not one of"),
    ("cost", "x", "tasks[0].cost: 'x' is not of type"),
    ("workspace", 7, "tasks[0].workspace: 7 is not of type"),
])
def test_a_json_report_with_a_malformed_field_is_a_usage_error(original_run, tmp_path,
                                                               field, value, named):
    report = json.loads(next(original_run.parent.glob("report-*.json")).read_text())
    report["tasks"][0][field] = value
    (tmp_path / "bad.json").write_text(json.dumps(report))
    for command in (("view", "bad.json", "--no-open"), ("compare", "bad.json", "bad.json")):
        result = invoke(tmp_path, *command)
        assert result.exit_code == 2, result.output
        assert f"bad.json: an evalctl report with missing or malformed fields ({named}" in \
            result.output


# ---- 3. a NUL in evalctl.toml's out ----

def test_a_nul_in_the_configured_out_is_a_config_error_at_its_line(tmp_path):
    (tmp_path / "suite.yaml").write_text(QUICK.format(id="one"))
    (tmp_path / "evalctl.toml").write_text('provider = "scripted"\nout = "\\u0000"\n')
    result = run_cli(tmp_path, "suite.yaml")
    assert result.exit_code == 2, result.output
    assert f"{tmp_path / 'evalctl.toml'}:2: error: 'out' must be a directory's path, got " \
           "'\\x00': no path holds a NUL character" in result.output


# ---- 4. lone surrogates (and NUL) in a suite's paths ----

SURROGATES = """\
- id: a
  prompt: "a prompt may hold one: \\ud800"
  files:
    "\\udc00.txt": x
  checks:
    - type: file_exists
      path: "\\udc00"
  setup:
    commands:
      - "echo \\0"
"""


def test_lone_surrogates_and_a_nul_in_a_command_are_refused_at_validation(tmp_path):
    (tmp_path / "suite.yaml").write_text(SURROGATES)
    result = invoke(tmp_path, "validate", "suite.yaml")
    assert result.exit_code == 2, result.output
    lines = result.output.splitlines()
    assert any(line.startswith("suite.yaml:4: error: task 'a', 'files': the key "
                               "'\\udc00.txt' holds a lone surrogate (\\udc00)")
               for line in lines), result.output
    assert any(line.startswith("suite.yaml:7: error: task 'a', checks[0] (file_exists), "
                               "'path': holds a lone surrogate (\\udc00), which is not a "
                               "character") for line in lines), result.output
    assert "suite.yaml:10: error: task 'a', 'setup', commands[0]: holds a NUL character" \
        in result.output
    assert not any(line.startswith("suite.yaml:2:") for line in lines)  # the prompt's is sent
    assert "3 error(s)" in result.output


def test_a_surrogate_pair_written_as_two_escapes_says_how_to_write_the_character(tmp_path):
    (tmp_path / "suite.yaml").write_text(
        '- id: a\n  prompt: p\n  checks:\n    - type: file_exists\n'
        '      path: "smile-\\ud83d\\ude00.txt"\n')
    result = invoke(tmp_path, "validate", "suite.yaml")
    assert result.exit_code == 2
    assert "write the character itself (in YAML \\U0001f600, not the pair " in result.output
    (tmp_path / "suite.yaml").write_text(
        '- id: a\n  prompt: p\n  checks:\n    - type: file_exists\n'
        '      path: "smile-\\U0001f600.txt"\n')
    assert invoke(tmp_path, "validate", "suite.yaml").exit_code == 0


# ---- 5. characters that reorder or hide text in a rendered report ----

def test_bidi_controls_and_invisible_format_characters_are_escaped():
    assert escape_text("a\u202eb\u2066c\u2069d\u200fe\u061cf\u200bg\ufeff") == \
        "a\\u202eb\\u2066c\\u2069d\\u200fe\\u061cf\\u200bg\\ufeff"
    assert escape_text("tag\U000e0041") == "tag\\U000e0041"  # can spell a hidden text
    # Joiners and the soft hyphen belong to ordinary text (emoji, Persian, Hindi).
    assert escape_text("\U0001f468\u200d\U0001f469 \u0645\u200c\u06cc soft\u00adhyphen") \
        == "\U0001f468\u200d\U0001f469 \u0645\u200c\u06cc soft\u00adhyphen"


BIDI = """\
- id: bidi
  prompt: Write answer.txt.
  files:
    answer.txt: "x\\u202ey \\u2066z\\u2069 \\u200f"
  checks:
    - type: command
      command: cat answer.txt; exit 1
  script:
    - text: Done.
"""


def test_no_report_passes_a_bidi_control_on_raw(tmp_path):
    (tmp_path / "suite.yaml").write_text(BIDI)
    result = run_cli(tmp_path, "suite.yaml", "--sandbox", "local", "--reporter", "markdown",
                     "--reporter", "junit", "--reporter", "html")
    assert result.exit_code == 1, result.output
    reports = {path.suffix: path.read_text(encoding="utf-8")
               for path in (tmp_path / "eval_reports").glob("report-*")}
    assert set(reports) == {".json", ".md", ".xml", ".html"}
    for suffix, text in reports.items():
        for raw in "\u202e\u2066\u2069\u200f":
            assert raw not in text, (suffix, raw)
    assert "x\\\\u202ey \\\\u2066z\\\\u2069 \\\\u200f" in reports[".md"]  # Markdown's \\ is \
    assert "x\\u202ey \\u2066z\\u2069 \\u200f" in reports[".xml"]


def test_a_bidi_control_in_a_downloaded_record_is_escaped_as_it_is_read(run_copy):
    journal = run_copy / JOURNAL_NAME
    lines = journal.read_text().splitlines()
    number = next(n for n, line in enumerate(lines) if json.loads(line)["kind"] == "attempt")

    def damage(record):
        record["result"]["status"] = "failed"
        record["result"]["checks"][0].update(passed=False, detail="x\u202ey")
    rewrite_line(run_copy, number, damage)
    shown = invoke(run_copy.parent, "report", str(run_copy), "--reporter", "markdown",
                   "--reporter", "junit")
    assert shown.exit_code == 0, shown.output
    for suffix in ("md", "xml"):
        text = next(run_copy.parent.glob(f"report-*.{suffix}")).read_text(encoding="utf-8")
        assert "\u202e" not in text and "u202ey" in text


def test_a_nul_in_a_command_checks_command_is_refused_at_validation(tmp_path):
    """Found by an attacker round: it passed validation and crashed the grader."""


    suite = tmp_path / "suite.yaml"
    suite.write_text('- id: t\n  prompt: x\n  checks:\n    - type: command\n'
                     '      command: "echo \\0 hi"\n')
    done = CliRunner().invoke(cli, ["validate", str(suite)])
    assert done.exit_code == 2, done.output
    assert "suite.yaml:5: error" in done.output and "no NUL byte" in done.output
