"""Workspaces, models and files that tried to stall or crash a run (issue 15's list).

Each test reproduces one fault beside honest tasks and checks that the run finishes
within its limits, writes all its reports, and that the honest tasks pass. Runs that
could hang are real `evalctl run` processes under a timeout, so a regression fails
the test instead of hanging the suite.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
import types
from pathlib import Path

import pytest

import evalctl
from evalctl._plugin.registry import set_registry

from .conftest import environment_without_evalctl_settings, registry_with, run_cli

HONEST = """\
- id: honest-{n}
  prompt: Write honest-{n}.txt.
  checks:
    - type: file_contains
      path: honest-{n}.txt
      text: fine
    - type: no_placeholders
    - type: grounding
  script:
    - tool_calls:
        - tool: write_file
          input:
            path: honest-{n}.txt
            content: fine
    - text: Wrote honest-{n}.txt.
"""
REPORTERS = ("json", "markdown", "junit")


def suite_with(hostile: str) -> str:
    return hostile + "".join(HONEST.format(n=n) for n in (1, 2))


# evalctl's CLI, writing the peak memory of its own process to argv[1] when it exits.
MEASURED = ("import atexit, resource, sys; out = sys.argv.pop(1); "
            "atexit.register(lambda: open(out, 'w').write("
            "str(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss))); "
            "sys.argv[0] = 'evalctl'; from evalctl._cli import main; main()")


def run_process(tmp_path: Path, hostile: str, *extra: str, timeout: float = 120
                ) -> tuple[subprocess.CompletedProcess[str], dict]:
    """`evalctl run` of the hostile task beside two honest ones, in a process of its own;
    its peak RSS (KiB) is left in tmp_path/peak-rss."""
    (tmp_path / "suite.yaml").write_text(suite_with(hostile))
    args = [*(arg for name in REPORTERS for arg in ("--reporter", name)), *extra]
    done = subprocess.run([sys.executable, "-c", MEASURED, str(tmp_path / "peak-rss"), "run",
                           "suite.yaml", *args, "--report", "r.json"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=timeout,
                          env=environment_without_evalctl_settings())
    return done, _checked_reports(tmp_path, done.stdout + done.stderr)


def run_in_process(tmp_path: Path, hostile: str, *args: str) -> tuple[object, dict]:
    (tmp_path / "suite.yaml").write_text(suite_with(hostile))
    flags = [arg for name in REPORTERS for arg in ("--reporter", name)]
    result = run_cli(tmp_path, "suite.yaml", *flags, "--report", "r.json", *args)
    return result, _checked_reports(tmp_path, result.output)


def _checked_reports(tmp_path: Path, output: str) -> dict:
    """Every reporter wrote, nothing crashed, and the honest tasks passed."""
    assert "Traceback" not in output, output
    for extension in ("json", "md", "xml"):
        assert len(list((tmp_path / "eval_reports").glob(f"report-*.{extension}"))) == 1, \
            (extension, output)
    report = json.loads((tmp_path / "r.json").read_text())
    honest = {t["id"]: t["status"] for t in report["tasks"] if t["id"].startswith("honest")}
    assert honest == {"honest-1": "passed", "honest-2": "passed"}, output
    return report


def task(report: dict, task_id: str) -> dict:
    return next(t for t in report["tasks"] if t["id"] == task_id)


def tool_results(report: dict, task_id: str) -> list[dict]:
    """The task's tool results in the order the calls were made (several calls of one
    turn run at once, so the ledger has them in the order they finished)."""
    ledger = Path(task(report, task_id)["ledger"])
    results = [json.loads(line) for line in ledger.read_text().splitlines()
               if '"tool_result"' in line]
    return sorted(results, key=lambda r: [int(part) for part in r["id"].split("_")[1:]])


def bash_turn(command: str) -> str:
    return f"""\
    - tool_calls:
        - tool: bash
          input:
            command: {json.dumps(command)}
"""


def test_a_fifo_in_the_workspace_stalls_nothing(tmp_path):
    done, report = run_process(tmp_path, f"""\
- id: fifo
  prompt: p
  limits:
    seconds: 30
  checks:
    - type: no_placeholders
    - type: grounding
    - type: file_contains
      path: pipe
      text: x
  script:
{bash_turn("mkfifo pipe && mkfifo notes.py")}\
    - tool_calls:
        - tool: read_file
          input:
            path: pipe
        - tool: grep
          input:
            pattern: x
        - tool: edit_file
          input:
            path: pipe
            old_text: a
            new_text: b
        - tool: write_file
          input:
            path: pipe
            content: x
    - text: I made pipe and notes.py.
""")
    assert done.returncode == 1
    fifo = task(report, "fifo")
    assert fifo["status"] == "failed" and fifo["exit_status"] == "completed"
    checks = {c["type"]: (c["passed"], c["error"]) for c in fifo["checks"]}
    assert checks == {"no_placeholders": (True, False), "grounding": (True, False),
                      "file_contains": (False, False)}
    results = tool_results(report, "fifo")[1:]
    assert [r["is_error"] for r in results] == [True, False, True, True]
    assert "is not a regular file" in results[0]["content"]
    assert results[1]["content"] == "no matches for x"


def test_a_2gb_sparse_file_is_neither_hashed_nor_held_whole(tmp_path):
    # Under bwrap the file-size limit stops such a file being made at all; the local
    # sandbox lets it be, and the harness must still not read it.
    done, report = run_process(tmp_path, f"""\
- id: sparse
  prompt: p
  checks:
    - type: no_placeholders
    - type: file_exists
      path: big.txt
  script:
{bash_turn("truncate -s 2G big.bin && yes done | head -c 70000000 > big.txt")}\
    - text: Made big.bin and big.txt.
""", "--sandbox", "local")
    assert done.returncode == 0, done.stdout + done.stderr
    sparse = task(report, "sparse")
    assert sparse["status"] == "passed"
    detail = next(c["detail"] for c in sparse["checks"] if c["type"] == "no_placeholders")
    # big.bin is binary (NULs) and not read; big.txt is read whole, a block at a time.
    assert detail == "no placeholders in 2 created or changed file(s)\n" \
        "(read whole: 70000000 bytes)"
    # Reading a file whole would take gigabytes (the fault: 4.2 GB).
    assert int((tmp_path / "peak-rss").read_text()) < 500_000


def test_a_catastrophic_regular_expression_cannot_hold_the_run(tmp_path):
    done, report = run_process(tmp_path, f"""\
- id: redos
  prompt: p
  limits:
    seconds: 10
  checks:
    - type: file_exists
      path: evil.txt
  script:
    - tool_calls:
        - tool: write_file
          input:
            path: evil.txt
            content: {"a" * 65}!
    - tool_calls:
        - tool: grep
          input:
            pattern: ^(a+)+$
        - tool: grep
          input:
            pattern: (?<=a)b
    - text: Wrote evil.txt.
""")
    assert done.returncode == 0, done.stdout + done.stderr
    assert task(report, "redos")["status"] == "passed"
    plain, lookbehind = tool_results(report, "redos")[1:]
    assert plain["content"] == "no matches for ^(a+)+$"
    assert lookbehind["is_error"] and "RE2 syntax" in lookbehind["content"]
    assert "re2.cc" not in done.stderr  # RE2's own logging is off


def remove_tree(root: Path) -> None:
    """Remove a tree of any depth without recursion (shutil.rmtree recurses on 3.11, and
    pytest's clean-up of old temporary directories would then fail)."""
    directories = []
    pending = [str(root)]
    while pending:
        directory = pending.pop()
        directories.append(directory)
        with os.scandir(directory) as entries:
            for entry in entries:
                if entry.is_dir(follow_symlinks=False):
                    pending.append(entry.path)
                else:
                    os.unlink(entry.path)
    for directory in reversed(directories):
        os.rmdir(directory)


@pytest.fixture
def deep_tmp_path(tmp_path):
    yield tmp_path
    remove_tree(tmp_path)


def test_1200_nested_directories_are_walked_without_recursion(deep_tmp_path):
    tmp_path = deep_tmp_path
    deep = "d/" * 1200
    result, report = run_in_process(tmp_path, f"""\
- id: deep
  prompt: p
  checks:
    - type: no_placeholders
    - type: grounding
    - type: command
      command: test -f {deep}deep.txt
  script:
{bash_turn(f"mkdir -p {deep} __pycache__/{deep} && echo deep > {deep}deep.txt")}\
    - tool_calls:
        - tool: glob
          input:
            pattern: "**/deep.txt"
        - tool: grep
          input:
            pattern: deep
    - text: Wrote deep.txt.
""")
    assert result.exit_code == 0, result.output
    deep_task = task(report, "deep")
    assert deep_task["status"] == "passed" and deep_task["exit_status"] == "completed"
    globbed, grepped = tool_results(report, "deep")[1:]
    assert globbed["content"] == f"{deep}deep.txt"
    assert grepped["content"] == f"{deep}deep.txt:1:deep"
    # The bytecode caches are removed before grading, however deep they go.
    assert not (Path(deep_task["workspace"]) / "__pycache__").exists()


class Surrogates:
    """A model whose text and tool input hold lone surrogates."""

    async def complete(self, request):
        if request.turn_index == 0:
            return evalctl.ModelTurn(
                text="writing \ud800", stop_reason=evalctl.StopReason.TOOL_USE,
                tool_calls=[evalctl.ToolCall("c1", "write_file",
                                             {"path": "s.txt", "content": "x\ud800y"}),
                            evalctl.ToolCall("c2", "write_file",
                                             {"path": "t\ud800.txt", "content": "x"}),
                            evalctl.ToolCall("c3", "write_file",
                                             {"path": "ok.txt", "content": "fine"})])
        return evalctl.ModelTurn(text="Wrote ok.txt \ud800.")


def test_lone_surrogates_from_the_model_are_recorded_not_a_crash(tmp_path):
    @evalctl.hookimpl
    def evalctl_register_providers(register):
        register(evalctl.ProviderSpec(name="surrogates", create=lambda options: Surrogates(),
                                      live=False))

    plugin = types.ModuleType("surrogates")
    plugin.evalctl_register_providers = evalctl_register_providers
    set_registry(registry_with(("surrogates", plugin)))
    hostile = """\
- id: surrogate
  prompt: p
  checks:
    - type: file_contains
      path: ok.txt
      text: fine
"""
    (tmp_path / "suite.yaml").write_text(hostile)
    result = run_cli(tmp_path, "suite.yaml", "--provider", "surrogates", "--report", "r.json",
                     *[arg for name in REPORTERS for arg in ("--reporter", name)])
    assert result.exit_code == 0, result.output
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["tasks"][0]["status"] == "passed"
    ledger = Path(report["tasks"][0]["ledger"])
    events = [json.loads(line) for line in ledger.read_text(encoding="utf-8").splitlines()]
    turns = [e for e in events if e["event"] == "model_turn"]
    assert turns[0]["text"] == "writing \ud800"  # recorded losslessly, as a JSON escape
    assert turns[1]["text"] == "Wrote ok.txt \ud800."
    results = sorted((e for e in events if e["event"] == "tool_result"), key=lambda e: e["id"])
    assert [r["is_error"] for r in results] == [True, True, False]
    assert "cannot be written as UTF-8" in results[0]["content"]


def test_file_names_that_are_not_utf8_are_reported_escaped(tmp_path):
    make = bash_turn("printf 'TODO: later\\n' > $'bad\\xff.py' && touch $'ok\\xfe.txt'")
    done, report = run_process(tmp_path, f"""\
- id: bad-names
  prompt: p
  checks:
    - type: no_placeholders
    - type: grounding
  script:
{make}\
    - tool_calls:
        - tool: glob
          input:
            pattern: "*"
        - tool: grep
          input:
            pattern: TODO
    - text: Done.
""")
    assert done.returncode == 1  # the TODO is a real failure, reported, not a crash
    bad = task(report, "bad-names")
    assert bad["status"] == "failed"
    detail = next(c["detail"] for c in bad["checks"] if c["type"] == "no_placeholders")
    assert "bad\\xff.py:1: a TODO/FIXME/XXX marker" in detail
    globbed, grepped = tool_results(report, "bad-names")[1:]
    assert globbed["content"] == "bad\\xff.py\nok\\xfe.txt"
    assert grepped["content"] == "bad\\xff.py:1:TODO: later"
    markdown = next((tmp_path / "eval_reports").glob("report-*.md")).read_text()
    assert "bad\\\\xff.py:1" in markdown  # the backslash escaped: it renders as one
    junit = next((tmp_path / "eval_reports").glob("report-*.xml")).read_text()
    assert "bad\\xff.py:1" in junit


def test_control_characters_reach_every_report_escaped(tmp_path):
    result, report = run_in_process(tmp_path, """\
- id: controls
  prompt: p
  checks:
    - type: command
      command: printf 'bell\\a and escape\\033[31m red' && exit 1
""")
    assert result.exit_code == 1
    detail = task(report, "controls")["checks"][0]["detail"]
    assert detail.endswith("bell\\x07 and escape\\x1b[31m red")
    junit = next((tmp_path / "eval_reports").glob("report-*.xml")).read_text()
    assert "bell\\x07 and escape\\x1b[31m red" in junit


def test_markup_in_a_checks_output_cannot_forge_a_row_of_the_markdown_table(tmp_path):
    """GitHub renders HTML tags in a Markdown table: a failing check whose output closes
    its cell and opens a row of its own would show "passed" for a task of its choosing.
    Tags, links, pipes and the backslashes that would undo their escapes all reach the
    table as text: one row per task, the hostile text inside its own cell."""
    forged = ("\\\\| [x](http://e.invalid) ![i](http://e.invalid/i.png) "
              "</td></tr><tr><td>honest-1</td><td>✅ passed</td></tr>")
    result, report = run_in_process(tmp_path, f"""\
- id: forger
  prompt: p
  checks:
    - type: command
      command: printf '%s' '{forged}' && exit 1
""")
    assert result.exit_code == 1
    assert task(report, "forger")["status"] == "failed"
    markdown = next((tmp_path / "eval_reports").glob("report-*.md")).read_text()
    rows = [line for line in markdown.splitlines() if line.startswith("| ")]
    assert [row.split(" | ")[0] for row in rows[1:]] == ["| forger", "| honest-1", "| honest-2"]
    (row,) = [row for row in rows if row.startswith("| forger |")]
    assert "&lt;/td&gt;&lt;/tr&gt;&lt;tr&gt;&lt;td&gt;honest-1" in row
    assert "<" not in row and ">" not in row
    assert "\\\\\\\\\\| \\[x\\](http://e.invalid) !\\[i\\]" in row
    # Every cell break in the row is the table's own: eight cells, nine unescaped pipes.
    assert len(re.findall(r"(?<!\\)(?:\\\\)*\|", row)) == 9


def test_a_directory_at_a_reports_path_does_not_cost_the_report(tmp_path):
    # The Markdown report's name is the run's start time: take every name the run can get.
    out = tmp_path / "eval_reports"
    now = time.time()
    stamps = {time.strftime("%Y%m%d-%H%M%S", time.localtime(now + s)) for s in range(-2, 30)}
    for stamp in stamps:
        (out / f"report-{stamp}.md").mkdir(parents=True)
    (tmp_path / "suite.yaml").write_text(suite_with(""))
    result = run_cli(tmp_path, "suite.yaml", "--reporter", "json", "--reporter", "markdown")
    assert result.exit_code == 0, result.output
    stem = next(out.glob("report-*.json")).stem
    assert (out / f"{stem}.md").is_dir()
    assert (out / f"{stem}-2.md").read_text().startswith("## evalctl: suite")
    assert f"wrote {out.relative_to(tmp_path) / stem}-2.md" in result.output


def test_a_directory_given_as_report_is_refused_before_the_run(tmp_path):
    (tmp_path / "r.json").mkdir()
    (tmp_path / "suite.yaml").write_text(suite_with(""))
    result = run_cli(tmp_path, "suite.yaml", "--report", "r.json")
    assert result.exit_code == 2 and "is a directory" in result.output
    assert not (tmp_path / "eval_reports").exists()


def test_a_failing_reporter_does_not_stop_the_others(tmp_path):
    @evalctl.hookimpl
    def evalctl_register_reporters(register):
        def explode(run, path):
            raise RuntimeError("the reporter is broken")

        register(evalctl.ReporterSpec(name="exploding", write=explode, extension="x"))

    plugin = types.ModuleType("exploding")
    plugin.evalctl_register_reporters = evalctl_register_reporters
    set_registry(registry_with(("exploding", plugin)))
    (tmp_path / "suite.yaml").write_text(suite_with(""))
    result = run_cli(tmp_path, "suite.yaml", "--reporter", "exploding", "--reporter", "json",
                     "--reporter", "markdown")
    assert result.exit_code == 1
    assert "reporter 'exploding' from plugin 'exploding'" in result.output
    assert "RuntimeError: the reporter is broken" in result.output
    out = tmp_path / "eval_reports"
    assert len(list(out.glob("report-*.json"))) == len(list(out.glob("report-*.md"))) == 1


def test_a_deleted_or_corrupted_ledger_costs_the_record_not_the_result(tmp_path):
    delete = bash_turn("rm ../.ledgers/ledger-gone.jsonl && echo a > a.txt")
    mangle = bash_turn("printf '{not json\\n\\xff' >> ../.ledgers/ledger-mangled.jsonl; "
                       "echo a > a.txt")
    result, report = run_in_process(tmp_path, f"""\
- id: ledger-gone
  prompt: p
  checks:
    - type: file_exists
      path: a.txt
  script:
{delete}\
      usage:
        input_tokens: 7
        output_tokens: 3
    - text: Wrote a.txt.
      usage:
        input_tokens: 11
        output_tokens: 5
- id: ledger-mangled
  prompt: p
  checks:
    - type: file_exists
      path: a.txt
  script:
{mangle}\
      usage:
        input_tokens: 7
        output_tokens: 3
    - text: Wrote a.txt.
      usage:
        input_tokens: 11
        output_tokens: 5
""", "--sandbox", "local")  # under bwrap the ledgers are not even visible to the agent
    assert result.exit_code == 0, result.output
    for task_id in ("ledger-gone", "ledger-mangled"):
        done = task(report, task_id)
        assert (done["status"], done["exit_status"], done["turns"]) == ("passed", "completed", 2)
        assert (done["usage"]["input_tokens"], done["usage"]["output_tokens"]) == (18, 8)
    assert not Path(task(report, "ledger-gone")["ledger"]).exists()


def test_a_malformed_suite_cache_entry_is_a_miss_not_a_traceback(tmp_path):
    import hashlib
    import os as os_module

    from evalctl._suite import cache

    (tmp_path / "suite.yaml").write_text(suite_with(""))
    assert run_cli(tmp_path, "suite.yaml", "--reporter", "json").exit_code == 0
    entries = list(cache.cache_dir().glob("*.json"))
    assert len(entries) == 1
    entry = entries[0]
    key = entry.stem

    def verified(value):  # an entry that passes the digest check but has the wrong shape
        text = json.dumps(value)
        digest = hashlib.sha256(text.encode()).hexdigest()
        return json.dumps({"key": key, "digest": digest}) + "\n" + text

    for bad in ("[]", "{not json", json.dumps({"key": key, "digest": "0", "value": {}}),
                verified({"data": 7, "task_lines": [], "warnings": []}),
                verified({"data": [], "task_lines": [1, 2], "warnings": [{"line": "x"}]})):
        entry.write_text(bad)
        result = run_cli(tmp_path, "suite.yaml", "--report", "r.json")
        assert result.exit_code == 0, (bad, result.output)
        assert json.loads((tmp_path / "r.json").read_text())["summary"]["passed"] == 2
        header = entry.read_text().partition("\n")[0]
        assert json.loads(header)["key"] == key  # validated again and rewritten
    assert os_module.environ.get("EVALCTL_CACHE_DIR")  # the test's own cache, not the user's
