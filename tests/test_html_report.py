"""The html reporter without a browser: what the file holds, the transcript read from
a ledger, the changes against the seed, the charts, reading a run back (`read_run`),
`evalctl view`, and the comparison it shows. The page in a browser is
test_html_browser.py."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import subprocess
import sys
from html import unescape
from pathlib import Path

import pytest
from click.testing import CliRunner

import evalctl
from evalctl._cli import cli
from evalctl._errors import UsageError
from evalctl._report.compare import compare_reports
from evalctl._report.rundir import read_run
from evalctl._report.viewing import browser_available
from evalctl.plugins.reporters.html import changes as changes_module
from evalctl.plugins.reporters.html.changes import workspace_changes
from evalctl.plugins.reporters.html.charts import (
    MAX_TAGS,
    cost_chart,
    duration_chart,
    outcomes_by_tag,
)
from evalctl.plugins.reporters.html.transcript import TEXT_LIMIT, read_transcript

from .conftest import ROOT, environment_without_evalctl_settings
from .test_compare import make_report
from .viewer_run import ViewerRun, run_evalctl, viewer_run


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> ViewerRun:
    return viewer_run(tmp_path_factory.mktemp("viewer"))


def embedded(html: str) -> list[dict]:
    """The JSON data blocks of a page, as the page's script reads them."""
    blocks = re.findall(r'<script type="application/json" id="[^"]+">(.*?)</script>', html,
                        flags=re.S)
    return [json.loads(block) for block in blocks]


# ---- the file ----

def test_the_reporter_is_a_plugin_and_imports_jinja_only_when_it_writes():
    probe = """
import sys
from click.testing import CliRunner
from evalctl._cli import cli
result = CliRunner().invoke(cli, ["list-plugins", "--json"])
import evalctl.plugins.reporters.html
print("jinja2" in sys.modules, [r["reporters"] for r in __import__("json").loads(result.output)
                                if r["plugin"] == "html"])
"""
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          env=environment_without_evalctl_settings(), cwd=ROOT, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False [['html']]"


def test_the_page_is_one_self_contained_file_whose_scripts_are_pinned_by_hash(run):
    html = run.html_path.read_text(encoding="utf-8")
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:|//)""", html, flags=re.I)
    assert "<link" not in html and "@import" not in html and "url(" not in html
    policy = unescape(re.search(r'http-equiv="Content-Security-Policy" content="([^"]+)"',
                                html)[1])
    assert "default-src 'none'" in policy and "unsafe-inline" not in policy
    script = re.search(r"<script>(.*?)</script>", html, flags=re.S)[1]
    style = re.search(r"<style>(.*?)</style>", html, flags=re.S)[1]
    for name, text in (("script-src", script), ("style-src", style)):
        digest = base64.b64encode(hashlib.sha256(text.encode()).digest()).decode()
        assert f"{name} 'sha256-{digest}'" in policy, name
    assert len(re.findall(r"<script>", html)) == 1  # everything else is inert JSON


def test_run_data_reaches_the_file_escaped(run):
    html = run.html_path.read_text(encoding="utf-8")
    assert "window.__pwned" in html  # it is there, as data...
    assert "<script>window.__pwned" not in html  # ...but never as markup
    assert "<img src=x" not in html and "<b>bold</b>" not in html
    assert "&lt;b&gt;bold&lt;/b&gt;" in html  # the tag, printed by the template, escaped
    details = embedded(html)[1:]
    evil = details[[t["id"] for t in run.report["tasks"]].index("evil")]
    assert evil["prompt"] == "Say <script>window.__pwned = 'prompt'</script> and stop."


def test_the_table_rows_hold_what_the_table_needs_and_details_come_per_task(run):
    html = run.html_path.read_text(encoding="utf-8")
    run_data, *details = embedded(html)
    rows = run_data["rows"]
    assert [r["key"] for r in rows] == [t["id"] for t in run.report["tasks"]]
    lazy = rows[2]
    assert lazy["status"] == "failed" and lazy["failed"] == ["file_exists"]
    assert lazy["why"] == "file_exists: result.txt does not exist"
    assert "transcript" not in lazy and len(details) == len(rows)
    tools = details[0]
    assert [c["name"] for turn in tools["transcript"] if turn["k"] == "turn"
            for c in turn["calls"]] == ["write_file", "edit_file", "bash"]
    assert tools["ledger"]["href"] == "./" + os.path.relpath(run.task("tools")["ledger"],
                                                             run.html_path.parent)


def test_a_report_renders_from_a_json_report_alone_when_the_run_directory_is_gone(tmp_path):
    report = make_report({"a": ["passed"], "b": ["failed"]})
    report.tasks[1].workspace = str(tmp_path / "gone" / "b")
    report.tasks[1].ledger = str(tmp_path / "gone" / ".ledgers" / "b.jsonl")
    target = tmp_path / "out.html"
    from evalctl.plugins.reporters.html import write_html

    write_html(report, target)
    _, first, second = embedded(target.read_text())
    assert first["transcriptProblem"] == "no ledger was recorded for this attempt"
    assert "cannot be read" in second["transcriptProblem"]
    assert "is gone" in second["changesProblem"]


# ---- the transcript ----

def write_ledger(path: Path, events: list[object]) -> Path:
    lines = [e if isinstance(e, str) else json.dumps(e) for e in events]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_a_transcript_pairs_each_call_with_its_result_and_keeps_the_notes(tmp_path):
    long_output = "x" * (TEXT_LIMIT * 2)
    ledger = write_ledger(tmp_path / "l.jsonl", [
        {"seq": 1, "event": "task_start", "prompt": "Do it."},
        {"seq": 2, "event": "model_turn", "turn": 1, "stop_reason": "tool_use", "text": "Go.",
         "tool_calls": [{"id": "a", "name": "bash", "arguments": {"command": "ls"}},
                        {"id": "b", "name": "write_file",
                         "arguments": {"path": "f", "content": "one\ntwo"}}],
         "usage": {"input_tokens": 10, "output_tokens": 3}, "cost": 0.0},
        {"seq": 3, "event": "tool_call", "id": "a", "name": "bash",
         "arguments": {"command": "ls"}},
        {"seq": 4, "event": "tool_call", "id": "b", "name": "write_file", "arguments": {}},
        {"seq": 5, "event": "denial", "id": "b", "name": "write_file", "reason": "read-only"},
        {"seq": 6, "event": "tool_result", "id": "b", "is_error": True, "content": "denied"},
        {"seq": 7, "event": "tool_result", "id": "a", "is_error": False,
         "content": long_output},
        "{not json",
        {"seq": 9, "event": "provider_error", "status": "provider_error", "error": "503"},
        {"seq": 10, "event": "limit", "limit": "turns", "value": 3},
        {"seq": 11, "event": "something_new", "detail": "kept"},
        {"seq": 12, "event": "task_end", "status": "provider_error", "error": "503"},
        {"seq": 13, "event": "grader_crashed", "grader": "mine",
         "error": "grader crashed: KeyError: 'min'",
         "traceback": "Traceback (most recent call last):\n  line 9\nKeyError: 'min'\n"},
    ])
    transcript = read_transcript(ledger)
    assert transcript.prompt == "Do it." and transcript.problem is None
    turn, *notes = transcript.items
    assert turn["n"] == 1 and turn["tokens"] == [10, 3] and turn["say"] == {"text": "Go."}
    bash, write = turn["calls"]
    assert bash["input"] == {"text": "command: ls"} and not bash["error"]
    assert bash["output"]["cut"] == 7 and len(bash["output"]["text"]) < TEXT_LIMIT + 100
    assert "characters elided" in bash["output"]["text"]
    assert write["input"] == {"text": "path: f\ncontent:\none\ntwo"}
    assert write["denied"] == "read-only" and write["error"] and write["output"]["text"] == \
        "denied"
    assert [(n["level"], n["line"]) for n in notes] == [
        ("error", 8), ("error", 9), ("error", 10), ("info", 11), ("error", 12), ("error", 13)]
    assert notes[0]["text"] == "ledger line 8 is not a JSON event"
    assert notes[3]["text"].startswith("something_new: ") and "kept" in notes[3]["text"]
    # a crashed grader's traceback, shown whole
    assert notes[5]["text"] == ("grader crashed: KeyError: 'min'\nTraceback (most recent "
                                "call last):\n  line 9\nKeyError: 'min'")


def test_a_transcript_says_what_it_could_not_show(tmp_path, monkeypatch):
    assert read_transcript(None).problem == "no ledger was recorded for this attempt"
    assert "cannot be read" in read_transcript(tmp_path / "missing.jsonl").problem
    monkeypatch.setattr("evalctl.plugins.reporters.html.transcript.TASK_BUDGET", 1_000)
    events = [{"seq": i, "event": "model_turn", "turn": i, "text": "y" * 400,
               "tool_calls": []} for i in range(1, 11)]
    transcript = read_transcript(write_ledger(tmp_path / "big.jsonl", events))
    assert len(transcript.items) == 3
    assert transcript.problem == "shown up to ledger line 3; 7 more line(s) are in the ledger"


def test_lone_surrogates_and_bad_bytes_in_a_ledger_do_not_break_the_report(tmp_path):
    ledger = tmp_path / "l.jsonl"
    ledger.write_bytes(b'{"event": "model_turn", "turn": 1, "text": "a\\ud800b \xff"}\n')
    transcript = read_transcript(ledger)
    report = make_report({"t": ["passed"]})
    report.tasks[0].ledger = str(ledger)
    report.suite_name = "bad \ud800 name"
    from evalctl.plugins.reporters.html import write_html

    write_html(report, tmp_path / "r.html")
    assert transcript.items[0]["say"]["text"] == "a\ud800b \ufffd"
    assert "bad ? name" in (tmp_path / "r.html").read_text(encoding="utf-8")


# ---- changes against the seed ----

def attempt(tmp_path: Path, seed: dict[str, bytes], now: dict[str, bytes]) -> Path:
    run_dir = tmp_path / "run"
    for base, files in ((run_dir / ".seed" / "t", seed), (run_dir / "t", now)):
        base.mkdir(parents=True)
        for name, content in files.items():
            (base / name).parent.mkdir(parents=True, exist_ok=True)
            (base / name).write_bytes(content)
    return run_dir / "t"


def test_changes_a_cut_record_does_not_list_are_not_called_made_after_the_agent(tmp_path):
    """The record of which files the agent changed is bounded (10,000 entries): a change
    it does not list, when it was cut, may be the agent's, and is not marked as made
    after it; the page says the two cannot be told apart."""
    workspace = attempt(tmp_path, {"a.txt": b"a\n"}, {"a.txt": b"A\n", "b.txt": b"b\n"})
    whole = workspace_changes(workspace, {"a.txt": "modified"})
    assert [f.get("after", False) for f in whole.files] == [False, True]
    assert whole.unattributed is None
    cut = workspace_changes(workspace, {"a.txt": "modified"}, omitted=3)
    assert [f.get("after", False) for f in cut.files] == [False, False]
    assert "cut at its bound (3 not listed)" in cut.unattributed


def test_changes_are_unified_diffs_against_the_seed(tmp_path):
    workspace = attempt(tmp_path, {"same.txt": b"x\n", "edit.txt": b"a\nb\nc\n",
                                   "gone.txt": b"bye\n", "sub/deep.txt": b"1\n"},
                        {"same.txt": b"x\n", "edit.txt": b"a\nB\nc\n", "new.txt": b"hi\n",
                         "sub/deep.txt": b"2\n", "__pycache__/m.pyc": b"\0cache"})
    found = workspace_changes(workspace)
    assert found.problem is None
    by_path = {f["path"]: f for f in found.files}
    assert [(f["path"], f["change"]) for f in found.files] == [
        ("edit.txt", "modified"), ("gone.txt", "deleted"), ("new.txt", "created"),
        ("sub/deep.txt", "modified")]
    assert by_path["edit.txt"]["diff"].splitlines()[:3] == [
        "--- seed/edit.txt", "+++ workspace/edit.txt", "@@ -1,3 +1,3 @@"]
    assert "-b\n+B" in by_path["edit.txt"]["diff"]
    assert by_path["gone.txt"]["diff"].endswith("-bye")
    assert by_path["new.txt"]["diff"].endswith("+hi")


def test_a_repositorys_git_directory_is_never_listed_as_written_after_the_agent(tmp_path):
    """A git source's workspace holds a .git its seed copy has not (the seed is made
    without one): its objects, refs and index were listed as created after the agent,
    compressed objects shown as text diffs of garbage, and the task's one verify file
    buried among them (found by a newcomer on the realrepo suite). Only the agent's
    change and the verify file are listed."""
    compressed = bytes(range(128, 256)) * 4  # no NUL byte, and not UTF-8
    workspace = attempt(tmp_path, {"calc.py": b"def sub(a, b):\n    return a + b\n"}, {
        "calc.py": b"def sub(a, b):\n    return a - b\n",
        "tests/test_sub.py": b"from calc import sub\n",
        ".git/HEAD": b"c86481b6f07f053d8903e232d23673d1a902eede\n",
        ".git/config": b"[core]\n\tbare = false\n", ".git/index": b"DIRC\0\0\0\2",
        ".git/shallow": b"c86481b6f07f053d8903e232d23673d1a902eede\n",
        ".git/refs/evalctl/seed": b"c86481b6f07f053d8903e232d23673d1a902eede\n",
        ".git/objects/c8/6481b6f07f053d8903e232d23673d1a902ee": compressed,
        "vendored/lib/.git/HEAD": b"ref: refs/heads/main\n"})
    found = workspace_changes(workspace, {"calc.py": "modified"})
    assert [(f["path"], f["change"], f.get("after", False)) for f in found.files] == [
        ("calc.py", "modified", False), ("tests/test_sub.py", "created", True)]
    assert found.problem is None and found.unattributed is None
    # What evalctl's own change tracking ignores, the page ignores too.
    from evalctl._files import IGNORED_DIRS
    assert IGNORED_DIRS <= changes_module.IGNORED_DIRS


def test_a_file_that_is_not_utf8_is_described_never_shown_as_text(tmp_path):
    """Bytes with no NUL that are not UTF-8 (compressed data) passed `looks_binary` and
    were rendered as a diff of U+FFFD."""
    workspace = attempt(tmp_path, {}, {"data.z": bytes(range(128, 256)) * 4,
                                       "latin.txt": "café\n".encode("latin-1")})
    by_path = {f["path"]: f for f in workspace_changes(workspace).files}
    for name in ("data.z", "latin.txt"):
        assert "diff" not in by_path[name]
        assert by_path[name]["note"].startswith("binary, not UTF-8, or larger than")


def test_binary_big_special_and_linked_files_are_described_not_read(tmp_path, monkeypatch):
    monkeypatch.setattr(changes_module, "MAX_DIFF_BYTES", 1_000)
    workspace = attempt(tmp_path, {"big.txt": b"a\n" * 600},
                        {"big.txt": b"b\n" * 600, "blob.bin": b"\0\x01\x02" * 50})
    os.mkfifo(workspace / "pipe")  # opening it would block forever
    (workspace / "secret").symlink_to("/etc/passwd")
    (workspace / "bad-\udcff-name.txt").write_text("x")
    found = workspace_changes(workspace)
    by_path = {f["path"]: f for f in found.files}
    assert "1,200 bytes before, 1,200 bytes now" in by_path["big.txt"]["note"]
    assert by_path["blob.bin"]["note"].startswith("binary, not UTF-8, or larger than 1,000 bytes")
    assert "special file" in by_path["pipe"]["note"]
    assert by_path["secret"]["note"] == "nothing before, a link to /etc/passwd now"
    assert by_path["bad-\ufffd-name.txt"]["change"] == "created"


def test_changes_are_capped_and_say_so(tmp_path, monkeypatch):
    monkeypatch.setattr(changes_module, "MAX_FILES_SHOWN", 3)
    workspace = attempt(tmp_path, {}, {f"f{i}.txt": b"x" for i in range(5)})
    found = workspace_changes(workspace)
    assert len(found.files) == 3 and "more changed files than shown" in found.problem
    monkeypatch.setattr(changes_module, "MAX_ENTRIES", 2)
    assert "only the first were compared" in workspace_changes(workspace).problem
    assert workspace_changes(None).problem == "no workspace was recorded for this attempt"
    (tmp_path / "lonely").mkdir()
    assert "no seed copy" in workspace_changes(tmp_path / "lonely").problem


# ---- charts ----

def test_outcomes_by_tag_stack_each_tags_attempts():
    tasks = [evalctl.TaskResult("a", "passed", tags=("x",)),
             evalctl.TaskResult("b", "failed", tags=("x", "y")),
             evalctl.TaskResult("c", "error"), evalctl.TaskResult("d", "not_run", tags=("x",))]
    chart = outcomes_by_tag(tasks)
    labels = [t["text"] for t in chart.texts[::2]]
    assert labels == ["x", "(no tag)", "y"]
    # completion per tag is over graded attempts: the error of (no tag) is left out
    assert [t["text"] for t in chart.texts[1::2]] == ["50.0% (1/2)", "n/a (0/0)",
                                                      "0.0% (0/1)"]
    x_row = [r for r in chart.rects if r["title"].startswith("x:")]
    assert [r["cls"] for r in x_row] == ["s-passed", "s-failed", "s-not_run"]
    assert sum(r["w"] for r in x_row) == pytest.approx(150)
    many = outcomes_by_tag([evalctl.TaskResult(str(i), "passed", tags=(f"t{i}",))
                            for i in range(MAX_TAGS + 5)])
    assert len(many.texts) == 2 * MAX_TAGS and many.texts[-2]["text"] == "6 other tags"


def test_distributions_count_every_attempt_that_ran():
    tasks = [evalctl.TaskResult(str(i), "passed" if i % 3 else "failed", duration=i / 10,
                                cost=i / 1000) for i in range(30)]
    tasks.append(evalctl.TaskResult("skipped", "not_run", duration=99))
    for chart in (duration_chart(tasks), cost_chart(tasks)):
        bars = [r for r in chart.rects if r["cls"] != "axis"]
        counts = [int(r["title"].split(": ")[1].split()[0]) for r in bars]
        assert sum(counts) == 30
    assert duration_chart(tasks).texts[3]["text"] == "2.9 s"
    assert cost_chart([evalctl.TaskResult("a", "passed", cost=None)]).empty.startswith(
        "unpriced")
    assert cost_chart([evalctl.TaskResult("a", "passed", cost=0.0)]).empty == \
        "every attempt cost $0.0000"


# ---- reading a run back ----

def test_read_run_takes_a_run_directory_a_report_or_a_directory_of_reports(run):
    reports = run.report_path.parent
    run_dir = Path(run.report["run_directory"])
    for target, source in ((run.report_path, run.report_path), (run_dir, run_dir / "journal.jsonl"),
                           (reports, run.report_path)):
        stored = read_run(target)
        assert stored.source == source  # a run directory is read from its journal
        assert [t.task_id for t in stored.run.tasks] == [t["id"] for t in run.report["tasks"]]
        assert stored.derived("html") == run.html_path


def test_a_run_moved_with_its_report_is_found_where_it_is_now(run, tmp_path):
    import shutil

    moved = tmp_path / "artifact"  # as a CI artifact: recorded on another machine
    shutil.copytree(run.report_path.parent, moved, symlinks=True)
    recorded = run.report["run_directory"]
    elsewhere = "/nonexistent/ci/eval_reports/" + Path(recorded).name
    report = moved / run.report_path.name
    report.write_text(report.read_text().replace(recorded, elsewhere))
    stored = read_run(report)
    ledger = Path(stored.run.tasks[0].ledger)
    assert ledger.is_file() and ledger.is_relative_to(moved)
    assert Path(stored.run.run_directory).parent == moved.resolve()


@pytest.mark.parametrize("make, message", [
    (lambda p: p / "nothing", "cannot read"),
    (lambda p: p, "no run here"),
    (lambda p: (p / "workspaces-1").mkdir() or p / "workspaces-1", "no JSON report for this run"),
    (lambda p: (p / "x.json").write_text("[]") and p / "x.json", "not an evalctl JSON report"),
])
def test_read_run_says_what_to_pass_instead(tmp_path, make, message):
    target = make(tmp_path)
    with pytest.raises(UsageError, match=message):
        read_run(target)
    result = CliRunner().invoke(cli, ["view", str(target)])
    assert result.exit_code == 2 and message in result.output


# ---- evalctl view ----

@pytest.mark.parametrize("environ, platform, expected", [
    ({"CI": "true", "DISPLAY": ":0"}, "linux", False),
    ({}, "linux", False),  # an SSH session: no display
    ({"DISPLAY": ":0"}, "linux", True),
    ({"WAYLAND_DISPLAY": "wayland-0"}, "linux", True),
    ({}, "darwin", True),
    ({"CI": "1", "BROWSER": "firefox"}, "linux", True),  # named by the user
])
def test_a_browser_is_opened_only_where_one_can_show_anything(environ, platform, expected):
    assert browser_available(environ, platform) is expected


def test_view_renders_once_then_reuses_and_prints_the_path_without_a_browser(tmp_path,
                                                                            monkeypatch):
    opened = []
    monkeypatch.setattr("webbrowser.open", lambda url: opened.append(url) or True)
    monkeypatch.setenv("CI", "1")
    monkeypatch.delenv("BROWSER", raising=False)
    done = run_evalctl(tmp_path, "run", str(ROOT / "suites" / "harness.yaml"))
    assert done.returncode == 0, done.stderr
    report = next((tmp_path / "eval_reports").glob("report-*.json"))
    html = report.with_suffix(".html")
    assert not html.exists()  # the run's reporters were json and markdown

    monkeypatch.chdir(tmp_path)
    first = CliRunner().invoke(cli, ["view"])
    assert first.exit_code == 0, first.output
    assert first.output.splitlines() == [
        f"wrote {Path('eval_reports') / html.name}",
        "no browser to open here: open the file above, or copy it where there is one"]
    written = html.stat().st_mtime_ns
    again = CliRunner().invoke(cli, ["view", str(report.parent / report.stem)])
    assert again.exit_code == 2 and "cannot read" in again.output  # no such file
    again = CliRunner().invoke(cli, ["view", str(report)])
    assert again.output.startswith(f"up to date, not rendered again: {html} (--rerender "
                                   "renders it anew)\n") and html.stat().st_mtime_ns == written
    fresh = CliRunner().invoke(cli, ["view", str(report), "--rerender", "--no-open"])
    assert fresh.output == f"wrote {html}\n"
    assert opened == []
    monkeypatch.delenv("CI")
    monkeypatch.setenv("DISPLAY", ":0")
    shown = CliRunner().invoke(cli, ["view", str(report)])
    assert shown.exit_code == 0 and "opened it in your browser" in shown.output
    assert opened == [html.resolve().as_uri()]


# ---- comparisons ----

def test_discordant_pairs_are_the_tasks_whose_outcome_changed():
    before = make_report({"a": ["passed"], "b": ["failed"], "c": ["passed"], "d": ["failed"]})
    after = make_report({"a": ["failed"], "b": ["passed"], "c": ["passed"], "d": ["failed"]})
    assert compare_reports(before, after).discordant() == [
        {"id": "a", "baseline": [1, 1], "current": [0, 1]},
        {"id": "b", "baseline": [0, 1], "current": [1, 1]}]
    repeated_before = make_report({"a": ["passed", "passed"], "b": ["passed", "failed"]})
    repeated_after = make_report({"a": ["passed", "failed"], "b": ["failed", "passed"]})
    assert compare_reports(repeated_before, repeated_after).discordant() == [
        {"id": "a", "baseline": [2, 2], "current": [1, 2]}]


def test_a_run_with_a_baseline_shows_the_comparison_in_its_html_report(run, tmp_path):
    baseline = json.loads(run.report_path.read_text())
    for task in baseline["tasks"]:
        if task["id"] == "lazy":
            task["status"], task["passed"] = "passed", True
    (tmp_path / "base.json").write_text(json.dumps(baseline))
    again = viewer_run(tmp_path, "--baseline", str(tmp_path / "base.json"), exit_code=1)
    html = again.html_path.read_text()
    # The gate's verdict, the one the exit code gave (found by a newcomer: the page said
    # "No regression", the significance test's, in green).
    assert '<p class="verdict regression" data-figure="verdict">\n    Regression against ' \
        'the baseline</p>' in html
    assert "tasks that passed in the baseline now fail: lazy" in html
    assert re.search(r'data-list="newly_failing">\s*<li><a href="#task=lazy">lazy</a>', html)
    assert 'data-figure="p_value">1.0<' in html
    assert "Against the baseline" in html and "exact McNemar" in html
    assert "Warning:" not in html  # the same suite on both sides
    plain = viewer_run(tmp_path / "plain")
    assert "Against the baseline" not in plain.html_path.read_text()


def test_compare_takes_run_directories_and_html_needs_the_html_reporter(run, tmp_path,
                                                                        monkeypatch):
    run_dir = run.report["run_directory"]
    done = run_evalctl(tmp_path, "compare", run_dir, str(run.report_path), "--html", "c.html")
    assert done.returncode == 0, done.stderr
    assert "No regression" in done.stdout and (tmp_path / "c.html").is_file()
    other = json.loads(run.report_path.read_text())
    other["suite"]["sha256"] = "f" * 64  # the suite changed between the runs
    (tmp_path / "other.json").write_text(json.dumps(other))
    warned = run_evalctl(tmp_path, "compare", "other.json", str(run.report_path), "--html",
                         "w.html")
    assert "warning: the suite changed between the runs" in warned.stderr
    assert 'data-list="warnings">Warning: the suite changed between the runs' in \
        (tmp_path / "w.html").read_text()
    monkeypatch.setenv("EVALCTL_DISABLE_PLUGINS", "html")
    result = CliRunner().invoke(cli, ["compare", run_dir, run_dir, "--html",
                                      str(tmp_path / "d.html")])
    assert result.exit_code == 2 and "html" in result.output
    assert not (tmp_path / "d.html").exists()


def figures(html: str) -> dict[str, str]:
    """The overview's figures by name, as the page prints them."""
    return {name: unescape(re.sub(r"<[^>]+>", "", value)).strip() for name, value in
            re.findall(r'data-figure="([^"]+)">(.*?)</', html, flags=re.S)}


def test_repeats_show_pass_at_k_and_the_flaky_tasks_and_a_judge_is_apart(tmp_path):
    from evalctl.plugins.reporters.html import write_html

    report = make_report({"steady": ["passed", "passed"], "flaky": ["passed", "failed"],
                          "broken": ["failed", "failed"]})
    report.tasks[0].checks.append(evalctl.CheckOutcome(
        "judge", "judge", False, "not convinced", usage=evalctl.TokenUsage(1200, 30),
        cost=0.0123))
    write_html(report, tmp_path / "r.html")
    html = (tmp_path / "r.html").read_text()
    shown = figures(html)
    assert shown["pass_at_k"] == evalctl.format_percent(report.pass_at_k()) == "66.7%"
    assert shown["pass_hat_k"] == evalctl.format_percent(report.pass_hat_k()) == "33.3%"
    assert shown["completion_rate"] == "50.0%"
    assert shown["judge_rate"] == "0.0%" and shown["grader_cost"] == "$0.0123"
    assert "Flaky</strong> (mixed outcomes over 2 attempts):\n<code>flaky</code>" in html
    rows = embedded(html)[0]["rows"]
    assert [r["key"] for r in rows] == ["steady@1", "steady@2", "flaky@1", "flaky@2",
                                        "broken@1", "broken@2"]
    assert rows[0]["judged"] == [False] and rows[0]["label"] == "steady #1"
