"""What a newcomer found the reports getting wrong: verify files shown as the agent's
changes, a grounding rate inflated by summaries that claim nothing, an unmetered agent
reported as free, a command's bytes that are not UTF-8 lost, the reason given for an
attempt whose journal line cannot be read, and what PATH holds in a sandbox."""

from __future__ import annotations

import json
from pathlib import Path

import evalctl
import evalctl.testing
from evalctl.plugins.reporters.html import page
from evalctl.plugins.reporters.html.changes import workspace_changes
from evalctl.plugins.reporters.html.transcript import read_transcript

from .test_grading_integrity import HIDDEN_SUITE

# ---- 1. the HTML task page: verify files are not the agent's changes ----

VERIFIED = HIDDEN_SUITE.split("  protected:")[0].format(id="fix") + """\
  checks:
    - type: file_exists
      path: calc.py
  script:
    - tool_calls:
        - tool: write_file
          input:
            path: calc.py
            content: "def add(a, b):\\n    return a + b\\n"
    - text: Done.
"""


def test_verify_files_are_listed_apart_from_the_agents_changes(tmp_path):
    run = evalctl.testing.run_suite(VERIFIED, out_dir=tmp_path / "out", sandbox="local")
    [task] = run.tasks
    assert task.passed, [c.detail for c in task.checks]
    [details] = list(page.details(run, tmp_path))
    by_path = {f["path"]: f for f in details["changes"]}
    assert set(by_path) == {"calc.py", "tests/test_calc.py"}
    assert not by_path["calc.py"].get("after")  # the agent's work
    assert by_path["tests/test_calc.py"]["after"] is True  # evalctl's, after the agent
    assert details["changesUnattributed"] is None


def test_without_the_agents_record_the_page_says_it_cannot_tell_them_apart(tmp_path):
    run_dir = tmp_path / "run"
    for base, files in ((run_dir / ".seed" / "t", {"a.txt": "1\n"}),
                        (run_dir / "t", {"a.txt": "2\n", "hidden.txt": "x\n"})):
        base.mkdir(parents=True)
        for name, content in files.items():
            (base / name).write_text(content)
    unknown = workspace_changes(run_dir / "t")
    assert not any(f.get("after") for f in unknown.files)
    assert "does not record which files the agent changed" in unknown.unattributed
    known = workspace_changes(run_dir / "t", {"a.txt": "modified"})
    assert [(f["path"], bool(f.get("after"))) for f in known.files] == [
        ("a.txt", False), ("hidden.txt", True)]
    assert known.unattributed is None


def test_the_agents_changes_are_read_from_a_ledger_past_the_transcripts_budget(
        tmp_path, monkeypatch):
    from evalctl.plugins.reporters.html import transcript

    monkeypatch.setattr(transcript, "TASK_BUDGET", 10)
    ledger = tmp_path / "ledger.jsonl"
    events = [{"event": "task_start", "prompt": "p"}] + \
        [{"event": "model_turn", "turn": n, "text": "x" * 50} for n in range(5)] + \
        [{"event": "task_end", "status": "completed", "files_changed": {"a.py": "created"}}]
    ledger.write_text("".join(json.dumps(e) + "\n" for e in events))
    read = read_transcript(ledger)
    assert read.problem is not None and "more line(s)" in read.problem
    assert read.files_changed == {"a.py": "created"}


def test_the_page_script_lists_what_came_after_the_agent_apart():
    script = (Path(page.__file__).parent / "templates" / "report.js").read_text()
    assert "file.after" in script and "Written after the agent finished" in script


# ---- 5. an attempt whose journal line cannot be read ----

def _journal(run_dir: Path, second: str, *, end: bool = True) -> None:
    """A journal of two finished attempts whose second line is `second` (the attempt
    line of `two` as written, cut to that many characters when it is a number)."""
    from evalctl._report.results import TaskResult
    from evalctl._text import json_line

    run_dir.mkdir(parents=True, exist_ok=True)
    header = {"kind": "run", "format": "evalctl-journal/1", "run_directory": str(run_dir),
              "tasks": [{"id": "one"}, {"id": "two"}], "repeat": 1}
    lines = [json_line(header)] + [
        json_line({"kind": "attempt", "at": "2025-01-01T00:00:00+00:00",
                   "result": TaskResult(task_id, "passed").to_dict()})
        for task_id in ("one", "two")]
    lines[2] = lines[2][:int(second)] + "\x00garbage" if second.isdigit() else second
    if end:
        lines.append(json_line({"kind": "end", "at": "2025-01-01T00:01:00+00:00",
                                "interrupted": False, "reason": None, "budget": None}))
    (run_dir / "journal.jsonl").write_text("".join(line + "\n" for line in lines))


def test_an_attempt_whose_line_is_damaged_is_said_to_be_unreadable_not_killed(tmp_path):
    from evalctl._report.journal import build_run, read_journal

    _journal(tmp_path / "run", "120")  # its start, naming the attempt, is whole
    run = build_run(read_journal(tmp_path / "run"))
    two = run.tasks[1]
    assert (two.task_id, two.status, two.exit_status) == ("two", "not_run", None)
    assert "the attempt finished, but its journal line" in two.error
    assert "journal.jsonl:3) could not be read" in two.error
    assert f"evalctl run --resume {tmp_path / 'run'} runs it again" in two.error
    assert "killed" not in two.error


def test_a_line_of_no_known_attempt_is_still_named_after_a_normal_end(tmp_path):
    from evalctl._report.journal import build_run, read_journal

    _journal(tmp_path / "ended", "30")  # which attempt it was is lost
    two = build_run(read_journal(tmp_path / "ended")).tasks[1]
    assert "could not be read" in two.error and "killed" not in two.error
    # Without an end line the run may have been killed: both are said.
    _journal(tmp_path / "killed", "30", end=False)
    two = build_run(read_journal(tmp_path / "killed")).tasks[1]
    assert two.error.startswith("the run stopped before this attempt finished")
    assert "or it finished and its journal line is one that could not be read" in two.error


# ---- 4. a command's bytes that are not UTF-8 ----

def test_a_commands_bytes_that_are_not_utf8_are_kept_as_escapes():
    import asyncio
    import os

    result = asyncio.run(evalctl.run_process(
        ["bash", "-c", r"printf 'a\377\376b'; printf '\303' >&2"], cwd="/",
        env={"PATH": os.defpath}, timeout=30))
    assert result.stdout == "a\\xff\\xfeb" and result.stderr == "\\xc3"
    assert "\ufffd" not in result.output
    result.output.encode("utf-8")  # always UTF-8: no lone surrogate


NOT_UTF8 = """\
- id: bytes
  prompt: Nothing to do.
  checks:
    - type: command
      command: printf 'out \\377\\376'; exit 1
  script:
    - tool_calls:
        - tool: bash
          input:
            command: printf 'said \\377\\376'
    - text: Done.
"""


def test_a_checks_detail_and_the_ledger_keep_the_bytes_escaped(tmp_path):
    run = evalctl.testing.run_suite(NOT_UTF8, out_dir=tmp_path / "out", sandbox="local",
                                    reporters=["json"])
    [task] = run.tasks
    [check] = [c for c in task.checks if c.type == "command"]
    assert "out \\xff\\xfe" in check.detail and "\ufffd" not in check.detail
    ledger = Path(task.ledger).read_bytes().decode("utf-8")  # valid UTF-8 throughout
    assert "said \\\\xff\\\\xfe" in ledger and "\ufffd" not in ledger
    [written] = (tmp_path / "out").glob("report-*.json")
    report = written.read_bytes().decode("utf-8")
    assert "out \\\\xff\\\\xfe" in report


# ---- 3. an unmetered CLI agent ----

UNMETERED = """\
name: unmetered
tasks:
  - id: writes
    prompt: Write out.txt.
    checks:
      - type: file_exists
        path: out.txt
"""


def test_an_agent_run_without_the_model_proxy_has_an_unknown_cost_not_zero(tmp_path):
    from evalctl._text import money

    run = evalctl.testing.run_suite(UNMETERED, sandbox="local", agent="command",
                                    out_dir=tmp_path, reporters=["json"],
                                    agent_options={"argv": "bash -c 'echo hi > out.txt'",
                                                   "model_proxy": False})
    [task] = run.tasks
    assert task.status == "passed", task.checks
    assert task.cost is None and run.cost is None  # the run's total is unknown too
    assert money(run.cost) != "$0.0000"
    [written] = tmp_path.glob("report-*.json")
    report = json.loads(written.read_text())
    assert report["tasks"][0]["cost"] is None and report["summary"]["cost"] is None


# ---- 2. grounding_rate is not inflated by summaries that claim nothing ----

GROUNDED = """\
- id: {id}
  prompt: Write notes.md.
  checks:
    - type: file_exists
      path: notes.md
    - type: grounding
  script:
    - tool_calls:
        - tool: write_file
          input:
            path: notes.md
            content: hi
    - text: "{says}"
"""


def test_a_summary_that_names_no_file_passes_but_is_left_out_of_grounding_rate(tmp_path):
    suite = GROUNDED.format(id="claims", says="Wrote notes.md.") + \
        GROUNDED.format(id="silent", says="Done.")
    run = evalctl.testing.run_suite(suite, out_dir=tmp_path / "one", sandbox="local")
    by_id = {t.task_id: t for t in run.tasks}
    silent = by_id["silent"].checks[-1]
    assert by_id["silent"].passed and silent.passed  # completion is as it was
    assert silent.detail.startswith("the final summary names no files")
    assert not silent.rated and by_id["claims"].checks[-1].rated
    grounding = run.named_rates()["grounding"]
    assert (grounding.passed, grounding.total, grounding.errors) == (1, 1, 0)
    assert run.to_dict()["summary"]["grounding_checks"] == {"passed": 1, "total": 1,
                                                             "errors": 0}
    # Nothing claimed anywhere: no evidence, n/a, never 100%.
    lazy = evalctl.testing.run_suite(GROUNDED.format(id="lazy", says="Done."),
                                     out_dir=tmp_path / "two", sandbox="local")
    assert lazy.to_dict()["summary"]["grounding_rate"] is None
    [details] = list(page.details(lazy, tmp_path))
    assert details["checks"][-1]["rate"] is None  # the page does not say it feeds the rate


def test_only_a_pass_can_be_left_out_of_a_rate():
    from evalctl._report.results import CheckOutcome

    assert not CheckOutcome("grounding", "mechanical", True, "none", rated=False).rated
    failed = CheckOutcome("grounding", "mechanical", False, "a.py is missing", rated=False)
    crashed = CheckOutcome("grounding", "mechanical", False, "x", error=True, rated=False)
    assert failed.rated and crashed.rated
    # ...and it is kept in the report, read back as written
    assert not CheckOutcome.from_dict(CheckOutcome("g", "mechanical", True, "none",
                                                   rated=False).to_dict()).rated


# ---- 6. what PATH holds in a sandbox, as docs/sandboxes.md says ----

def test_path_in_the_bwrap_sandbox_is_evalctls_python_then_yours(
        tmp_path, monkeypatch, require_bwrap):
    import asyncio
    import os
    import sys

    from evalctl._workspace import create_workspace, new_run_directory

    from .conftest import ROOT, sandbox_for

    # A toolchain outside /usr, on the user's PATH and mounted with ro_paths: found inside.
    tools = tmp_path / "toolchain" / "bin"
    tools.mkdir(parents=True)
    (tools / "mytool").write_text("#!/bin/sh\necho found\n")
    (tools / "mytool").chmod(0o755)
    monkeypatch.setenv("PATH", f"{tools}{os.pathsep}/usr/bin{os.pathsep}/bin")
    workspace = create_workspace(new_run_directory(tmp_path / "out"), "t", {})
    sandbox = sandbox_for(workspace, "bwrap", ro_paths=[str(tmp_path / "toolchain")])
    result = asyncio.run(sandbox.run('echo "$PATH"; mytool', timeout=60))
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines() == [
        f"{os.path.dirname(sys.executable)}{os.pathsep}{tools}{os.pathsep}/usr/bin"
        f"{os.pathsep}/bin", "found"]
    said = (ROOT / "docs" / "sandboxes.md").read_text()
    assert "PATH is the one thing of yours passed on" in " ".join(said.split())
