"""Record and replay: every attempt keeps its model exchanges as a cassette, the `replay`
provider serves them offline, `evalctl regrade` grades kept workspaces again, and
`evalctl script` turns an attempt into scripted turns. The live runs are the real
anthropic SDK against a loopback Messages API server (tests/messages_server.py)."""

from __future__ import annotations

import asyncio
import json
import socket
import sys
from pathlib import Path
from typing import Any

import pytest

import evalctl
from evalctl._agent.cassette import (
    CassetteRecorder,
    first_difference,
    read_cassette,
    request_key,
)
from evalctl._files import snapshot
from evalctl.testing import run_suite
from tests.conftest import run_cli
from tests.messages_server import MessagesServer, message, text_block, tool_use
from tests.test_grading_integrity import names_the_hidden_test

SUITE = """\
name: recorded
tasks:
  - id: first-word
    prompt: Read notes.txt and write its first word to first.txt.
    files:
      notes.txt: "{notes}"
    checks:
      - type: file_contains
        path: first.txt
        text: {expect}
      - type: grounding
"""


def live_reply(body: dict[str, Any]):
    """The model's side of the conversation, whatever the tool results say: read the
    notes, write the word, say so."""
    turn = len(body["messages"]) // 2
    if turn == 0:
        return message([text_block("Reading the notes."),
                        tool_use("toolu_1", "bash", command="cat notes.txt")], "tool_use",
                       input_tokens=900, output_tokens=40, cache_write=800,
                       model="claude-haiku-4-5")
    if turn == 1:
        return message([tool_use("toolu_2", "write_file", path="first.txt",
                                 content="alpha\n")], "tool_use", input_tokens=1000,
                       output_tokens=30, cache_read=800, model="claude-haiku-4-5")
    return message([text_block("Wrote first.txt.")], "end_turn", input_tokens=1100,
                   output_tokens=8, cache_read=800, model="claude-haiku-4-5")


def write_suite(where: Path, notes: str = "alpha beta\\n", expect: str = "alpha") -> Path:
    path = where / "suite.yaml"
    path.write_text(SUITE.format(notes=notes, expect=expect), encoding="utf-8")
    return path


def port_is_closed(url: str) -> bool:
    host, port = url.removeprefix("http://").split(":")
    try:
        socket.create_connection((host, int(port)), timeout=1).close()
    except OSError:
        return True
    return False


@pytest.fixture
def recorded(tmp_path, monkeypatch) -> dict[str, Any]:
    """A live run of SUITE against the loopback server, which is then stopped."""
    suite = write_suite(tmp_path)
    with MessagesServer() as server:
        monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-test-key")
        monkeypatch.setenv("ANTHROPIC_BASE_URL", server.url)
        server.replies += [live_reply] * 3
        result = run_cli(tmp_path, str(suite), "--provider", "anthropic", "--model",
                         "claude-haiku-4-5", "--sandbox", "local", "--report", "live.json")
    assert result.exit_code == 0, result.output
    assert port_is_closed(server.url)
    monkeypatch.delenv("ANTHROPIC_API_KEY")  # nothing after this may reach a model
    report = json.loads((tmp_path / "live.json").read_text())
    return {"suite": suite, "report": report, "run_dir": Path(report["run_directory"]),
            "server": server, "calls": len(server.requests)}


TIMING_AND_PLACE = {"started_at", "finished_at", "run_directory", "provider"}
PER_ATTEMPT = {"duration", "workspace", "ledger"}


def comparable(report: dict[str, Any]) -> dict[str, Any]:
    """A report without its timings and where it was written (and the provider, which
    is the one thing a replay changes by design)."""
    kept = {k: v for k, v in report.items() if k not in TIMING_AND_PLACE}
    kept["tasks"] = [{k: v for k, v in t.items() if k not in PER_ATTEMPT}
                     for t in report["tasks"]]
    return kept


def replay(tmp_path: Path, suite: Path, run_dir: Path, report: str, *extra: str):
    return run_cli(tmp_path, str(suite), "--provider", "replay", "--provider-option",
                   f"cassettes={run_dir}", "--model", "claude-haiku-4-5", "--sandbox",
                   "local", "--report", report, *extra)


# --------------------------------------------------------------------------- record + replay


def test_a_live_run_replays_offline_with_an_identical_report(recorded, tmp_path):
    cassette = read_cassette(recorded["run_dir"] / ".cassettes" / "first-word.jsonl")
    assert (cassette.task_id, cassette.attempt, cassette.provider, cassette.model) == \
        ("first-word", 1, "anthropic", "claude-haiku-4-5")
    assert [e.turn.stop_reason for e in cassette.exchanges] == ["tool_use", "tool_use",
                                                                 "end_turn"]
    assert [e.key_hash for e in cassette.exchanges] == \
        [evalctl.Cassette.hash_of(e.key) for e in cassette.exchanges]
    # The recorded requests are what the SDK sent, in the key's shape.
    sent = recorded["server"].requests
    assert [m["role"] for m in cassette.exchanges[2].key["messages"]] == \
        [m["role"] for m in sent[2]["messages"]]

    result = replay(tmp_path, recorded["suite"], recorded["run_dir"], "replay.json")
    assert result.exit_code == 0, result.output
    replayed = json.loads((tmp_path / "replay.json").read_text())
    assert replayed["provider"] == "replay"
    assert comparable(replayed) == comparable(recorded["report"])
    assert replayed["summary"]["cost"] > 0  # the recorded turns' cost, as recorded
    assert len(recorded["server"].requests) == recorded["calls"]


def test_a_changed_tool_result_ends_the_replay_replay_mismatch_naming_the_field(
        recorded, tmp_path):
    write_suite(tmp_path, notes="gamma delta\\n")  # the bash tool now reads other notes
    result = replay(tmp_path, recorded["suite"], recorded["run_dir"], "changed.json")
    assert result.exit_code == 1, result.output
    assert "Traceback" not in result.output
    task = json.loads((tmp_path / "changed.json").read_text())["tasks"][0]
    assert (task["status"], task["exit_status"], task["error_kind"]) == \
        ("error", "replay_mismatch", "provider")
    assert task["error"].startswith("replay mismatch at messages[2].content[0].content: ")
    assert "alpha beta" in task["error"] and "gamma delta" in task["error"]
    assert "request 2 of 3 recorded" in task["error"]


def test_replay_refuses_another_model_and_honours_a_mask(recorded, tmp_path):
    result = run_cli(tmp_path, str(recorded["suite"]), "--provider", "replay",
                     "--provider-option", f"cassettes={recorded['run_dir']}", "--model",
                     "claude-opus-4-1", "--report", "other.json")
    task = json.loads((tmp_path / "other.json").read_text())["tasks"][0]
    assert task["exit_status"] == "replay_mismatch" and result.exit_code == 1
    assert 'at model: recorded "claude-haiku-4-5", now "claude-opus-4-1"' in task["error"]

    # Without --model the recorded run's is assumed; a mask hides what may differ.
    write_suite(tmp_path, notes="alpha gamma\\n")
    result = run_cli(tmp_path, str(recorded["suite"]), "--provider", "replay",
                     "--provider-option", f"cassettes={recorded['run_dir']}",
                     "--provider-option", "mask=(beta|gamma)", "--report", "masked.json")
    assert result.exit_code == 0, result.output


def test_a_cli_agent_replays_through_the_model_proxy(tmp_path, monkeypatch):
    from evalctl._agent.proxy import to_sse

    agent = Path(__file__).parent / "agents" / "sdk_agent.py"
    options = {"argv": f"{sys.executable} {agent} {{prompt}}"}

    def streamed(body):
        turn = len(body["messages"]) // 2
        content = [text_block("Looking."), tool_use("toolu_1", "shell",
                                                    command="cat notes.txt")] if turn == 0 \
            else [tool_use("toolu_2", "save", path="first.txt", text="alpha\n")] if turn == 1 \
            else [text_block("Saved first.txt.")]
        _, _, raw = message(content, "end_turn" if turn == 2 else "tool_use",
                            model="claude-haiku-4-5")
        return 200, {"content-type": "text/event-stream"}, to_sse(json.loads(raw))

    suite = write_suite(tmp_path)
    with MessagesServer() as server:
        monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-test-key")
        monkeypatch.setenv("ANTHROPIC_BASE_URL", server.url)
        server.replies += [streamed] * 3
        live = run_suite(suite, provider="anthropic", model="claude-haiku-4-5",
                         sandbox="local", agent="command", agent_options=options,
                         out_dir=tmp_path / "live")
    monkeypatch.delenv("ANTHROPIC_API_KEY")
    assert live.tasks[0].status == "passed", (live.tasks[0].error, live.tasks[0].checks)
    source = {"cassettes": live.run_directory}

    again = run_suite(suite, provider="replay", provider_options=source, sandbox="local",
                      agent="command", agent_options=options, out_dir=tmp_path / "replay")
    first, second = live.tasks[0], again.tasks[0]
    assert (second.status, second.turns, second.usage, second.cost) == \
        (first.status, first.turns, first.usage, first.cost)

    write_suite(tmp_path, notes="gamma delta\\n")
    diverged = run_suite(suite, provider="replay", provider_options=source, sandbox="local",
                         agent="command", agent_options=options, out_dir=tmp_path / "changed")
    task = diverged.tasks[0]
    assert (task.status, task.exit_status) == ("error", "replay_mismatch")
    assert "messages[2].content[0].content" in task.error


@pytest.mark.parametrize("damage, expected", [
    (lambda lines: lines[:2] + ["{not json"] + lines[3:], ":3: not a JSON record"),
    (lambda lines: [lines[0].replace("evalctl-cassette/1", "other/9")] + lines[1:],
     ":1: expected a header of format evalctl-cassette/1"),
    (lambda lines: lines[:3] + [lines[3].replace("first.txt", "second.txt")],
     ":4: the request does not match its request_hash"),
    (lambda lines: lines[:2] + ['{"event": "exchange", "request": ' + "[" * 100_000
                                + "]" * 100_000 + "}"] + lines[3:], ":3: not a JSON record"),
], ids=["not-json", "not-a-cassette", "tampered", "nested-past-reading"])
def test_a_corrupt_cassette_stops_the_replay_before_any_task(recorded, tmp_path, damage,
                                                             expected):
    path = recorded["run_dir"] / ".cassettes" / "first-word.jsonl"
    lines = path.read_text().splitlines()
    path.write_text("\n".join(damage(lines)) + "\n")
    result = replay(tmp_path, recorded["suite"], recorded["run_dir"], "corrupt.json")
    assert result.exit_code == 2, result.output
    assert f"{path}{expected}" in result.output and "Traceback" not in result.output
    assert not (tmp_path / "corrupt.json").exists()


def test_replay_without_a_recording_is_a_usage_error(tmp_path):
    suite = write_suite(tmp_path)
    result = run_cli(tmp_path, str(suite), "--provider", "replay")
    assert result.exit_code == 2 and "cassettes=RUN_DIR" in result.output
    result = run_cli(tmp_path, str(suite), "--provider", "replay", "--provider-option",
                     f"cassettes={tmp_path / 'nowhere'}")
    assert result.exit_code == 2 and "no such run directory" in result.output
    assert "Traceback" not in result.output


def test_an_attempt_with_no_cassette_is_a_replay_mismatch(recorded, tmp_path):
    result = replay(tmp_path, recorded["suite"], recorded["run_dir"], "twice.json",
                    "--repeat", "2")
    tasks = json.loads((tmp_path / "twice.json").read_text())["tasks"]
    assert [t["status"] for t in tasks] == ["passed", "error"] and result.exit_code == 1
    assert "no cassette for task 'first-word' attempt 2" in tasks[1]["error"]


# --------------------------------------------------------------------------- the format


def conversation(turns: int) -> list[evalctl.ModelRequest]:
    """The requests of a built-in-loop conversation of `turns` turns, each a prefix of
    the next, with a big tool result each."""
    messages: list[evalctl.Message] = [evalctl.UserMessage("Do it.")]
    requests = []
    for number in range(turns):
        requests.append(evalctl.ModelRequest("system", list(messages),
                                             evalctl.tool_definitions()))
        turn = evalctl.ModelTurn(tool_calls=[evalctl.ToolCall(f"c{number}", "bash",
                                                              {"command": "seq 500"})])
        messages += [evalctl.AssistantMessage(turn), evalctl.ToolResultsMessage(
            (evalctl.ToolResult(f"c{number}", "x" * 5_000 + "\ud800"),))]
    return requests


def test_a_long_conversation_is_written_in_linear_space_and_read_back_whole(tmp_path):
    path = tmp_path / "c.jsonl"
    recorder = CassetteRecorder(path, task_id="t", attempt=1, model="m")
    requests = conversation(40)
    for request in requests:
        recorder.record(request, evalctl.ModelTurn(text="ok"))
    recorder.close()
    # Whole requests would hold 40*41/2 tool results of 5 kB; deltas hold each once.
    assert path.stat().st_size < 40 * 5_000 * 1.5
    # Written from the texts the hashes were taken over: still UTF-8 (each lone
    # surrogate an escape), and the tools' text only in the first request.
    text = path.read_bytes().decode("utf-8")
    assert text.count('"input_schema"') == len(evalctl.tool_definitions())
    cassette = read_cassette(path)
    assert [e.key for e in cassette.exchanges] == [request_key(r, "m") for r in requests]


def test_fields_equal_in_python_but_not_in_json_are_written_and_read_back(tmp_path):
    """Found by an attacker: two requests whose tools differ only by 1 and 1.0 (equal in
    Python, not in the JSON the hash is taken over) wrote the second without its tools,
    as unchanged; read back with the first's, it failed its hash, and every replay of
    the run stopped before any task."""
    path = tmp_path / "c.jsonl"
    recorder = CassetteRecorder(path, task_id="t", attempt=1)
    bodies = [{"model": "m", "max_tokens": 10, "messages": [{"role": "user", "content": "hi"}],
               "tools": [{"name": "x", "input_schema": {"type": "object", "maxItems": n}}]}
              for n in (1, 1.0, True)]
    requests = [evalctl.ModelRequest("", [], [], api_request=body) for body in bodies]
    for request in requests:
        recorder.record(request, evalctl.ModelTurn(text="ok"))
    recorder.close()
    assert recorder.failure is None
    cassette = read_cassette(path)
    assert [e.key for e in cassette.exchanges] == [request_key(r) for r in requests]
    assert [e.key["tools"][0]["input_schema"]["maxItems"] for e in cassette.exchanges] == \
        [1, 1.0, True]


def test_the_first_difference_is_named_by_its_path():
    before = {"model": "m", "messages": [{"role": "user", "content": [
        {"type": "tool_result", "content": "6"}]}], "tools": [1, 2]}
    after = json.loads(json.dumps(before))
    assert first_difference(before, after) is None
    after["messages"][0]["content"][0]["content"] = "7"
    assert first_difference(before, after) == \
        'messages[0].content[0].content: recorded "6", now "7"'
    assert first_difference(before, {**before, "tools": [1]}) == \
        "tools: recorded 2 item(s), now 1"
    assert first_difference(before, {**before, "system": "s"}) == \
        'system: not recorded, now "s"'


def test_a_proxied_request_is_keyed_without_cache_control():
    body = {"model": "m", "max_tokens": 10, "system": [{"type": "text", "text": "s",
                                                        "cache_control": {"type": "x"}}],
            "messages": [{"role": "user", "content": "hi"}]}
    request = evalctl.ModelRequest("s", [], [], api_request=body)
    assert request_key(request) == {"model": "m", "tools": None, "messages": body["messages"],
                                    "system": [{"type": "text", "text": "s"}]}


# --------------------------------------------------------------------------- regrade


def test_regrade_after_a_check_changed_gives_new_verdicts_without_a_model(recorded, tmp_path):
    run_dir = recorded["run_dir"]
    before = snapshot(run_dir)
    journal = (run_dir / "journal.jsonl").read_bytes()
    write_suite(tmp_path, expect="omega")  # the check the run passed now wants more
    from click.testing import CliRunner

    from evalctl._cli import cli

    result = CliRunner().invoke(cli, ["regrade", str(run_dir), "--report",
                                      str(tmp_path / "regrade.json"), "--reporter", "markdown",
                                      "--reporter", "html"])
    assert result.exit_code == 1, result.output
    report = json.loads((tmp_path / "regrade.json").read_text())
    assert report["regrade_of"]["run_directory"] == str(run_dir)
    assert report["run_directory"] != str(run_dir)
    task = report["tasks"][0]
    assert task["status"] == "failed"
    failed = [c for c in task["checks"] if not c["passed"]]
    assert [c["type"] for c in failed] == ["file_contains"] and "omega" in failed[0]["detail"]
    # The agent's work is the recorded one: its turns, tokens and cost, no new call.
    live = recorded["report"]["tasks"][0]
    assert (task["turns"], task["usage"], task["cost"]) == \
        (live["turns"], live["usage"], live["cost"])
    assert len(recorded["server"].requests) == recorded["calls"]
    # The grounding check (of the workspace as the agent left it, which only the run
    # saw) keeps the run's verdict on the recorded final text ("Wrote first.txt."), and
    # says so.
    assert next(c for c in task["checks"] if c["type"] == "grounding")["detail"] == \
        "all 1 named file(s) exist: first.txt\n(the run's verdict, carried: the kept " \
        "workspace is as the run's checks left it, not as the agent did)"
    # The original run is untouched.
    assert snapshot(run_dir) == before and (run_dir / "journal.jsonl").read_bytes() == journal
    markdown = next(Path(report["run_directory"]).parent.glob(
        f"report-{Path(report['run_directory']).name.removeprefix('workspaces-')}.md"))
    assert f"Regrade of `{run_dir}`" in markdown.read_text()
    page = markdown.with_suffix(".html").read_text()
    assert f"A regrade of <code>{run_dir}</code>" in page


def test_regrade_after_a_grader_changed(recorded, tmp_path, monkeypatch):
    from click.testing import CliRunner

    from evalctl._cli import cli
    from evalctl.plugins.graders import files

    original = files.evalctl_register_graders
    result = CliRunner().invoke(cli, ["regrade", str(recorded["run_dir"])])
    assert result.exit_code == 0, result.output

    def stricter(register):  # a new version of the grader: wants a capital letter
        def wrapped(spec):
            if spec.name != "file_contains":
                return register(spec)

            def grade(check, workspace, result):
                text = (workspace / check["path"]).read_text()
                return evalctl.CheckResult(text[:1].isupper(), f"starts with {text[:1]!r}")
            return register(evalctl.GraderSpec(**{**spec.__dict__, "grade": grade}))
        original(wrapped)

    monkeypatch.setattr(files, "evalctl_register_graders",
                        evalctl.hookimpl(stricter))
    from evalctl._plugin.registry import set_registry

    set_registry(None)
    result = CliRunner().invoke(cli, ["regrade", str(recorded["run_dir"]), "--report",
                                      str(tmp_path / "strict.json")])
    assert result.exit_code == 1, result.output
    task = json.loads((tmp_path / "strict.json").read_text())["tasks"][0]
    assert task["status"] == "failed"
    assert "starts with 'a'" in next(c["detail"] for c in task["checks"]
                                     if c["type"] == "file_contains")


def test_regrade_bad_input_is_exit_2_without_a_traceback(recorded, tmp_path):
    from click.testing import CliRunner

    from evalctl._cli import cli

    def regrade(*args: str):
        result = CliRunner().invoke(cli, ["regrade", *args])
        assert result.exit_code == 2, result.output
        assert "Traceback" not in result.output
        return result.output

    assert "no such directory" in regrade(str(tmp_path / "missing"))
    (tmp_path / "empty").mkdir()
    assert "no journal.jsonl" in regrade(str(tmp_path / "empty"))
    import shutil

    shutil.rmtree(recorded["run_dir"] / "first-word")
    assert "no kept workspace to regrade (its workspace was not kept)" in \
        regrade(str(recorded["run_dir"]))
    recorded["suite"].unlink()
    assert "pass the suite to grade with --suite" in regrade(str(recorded["run_dir"]))


# --------------------------------------------------------------------------- scripts


def test_a_script_printed_from_a_run_reproduces_the_attempt_scripted(recorded, tmp_path):
    from click.testing import CliRunner

    from evalctl._cli import cli

    printed = CliRunner().invoke(cli, ["script", str(recorded["run_dir"]), "first-word",
                                       "--indent", "4"])
    assert printed.exit_code == 0, printed.output
    assert "tool: bash" in printed.output and "    script:\n" in printed.output
    suite = tmp_path / "scripted" / "suite.yaml"
    suite.parent.mkdir()
    suite.write_text(recorded["suite"].read_text() + printed.output)
    result = run_cli(suite.parent, str(suite), "--scripted", "--sandbox", "local",
                     "--report", "scripted.json")
    assert result.exit_code == 0, result.output
    scripted = json.loads((suite.parent / "scripted.json").read_text())["tasks"][0]
    live = recorded["report"]["tasks"][0]
    for field in ("status", "exit_status", "turns", "tool_calls", "usage", "cost", "checks"):
        assert scripted[field] == live[field], field
    assert (Path(scripted["workspace"]) / "first.txt").read_text() == \
        (Path(live["workspace"]) / "first.txt").read_text() == "alpha\n"


def test_script_from_a_ledger_when_there_is_no_cassette(recorded):
    from click.testing import CliRunner

    from evalctl._cli import cli

    (recorded["run_dir"] / ".cassettes" / "first-word.jsonl").unlink()
    printed = CliRunner().invoke(cli, ["script", str(recorded["run_dir"]), "first-word"])
    assert printed.exit_code == 0, printed.output
    assert "from " + str(recorded["run_dir"] / ".ledgers" / "first-word.jsonl") in \
        printed.output.replace("\n# ", " ")
    assert "content: |\n" in printed.output or 'content: "alpha\\n"' in printed.output


def test_script_bad_input_is_exit_2_without_a_traceback(recorded, tmp_path):
    from click.testing import CliRunner

    from evalctl._cli import cli

    def script(*args: str) -> str:
        result = CliRunner().invoke(cli, ["script", *args])
        assert result.exit_code == 2, result.output
        assert "Traceback" not in result.output
        return result.output

    run_dir = str(recorded["run_dir"])
    assert "no journal.jsonl" in script(str(tmp_path / "missing"), "first-word")
    assert "no task 'first-wrd' in this run (did you mean 'first-word'?); its tasks: " \
        "first-word" in \
        script(run_dir, "first-wrd")
    assert "has attempts 1 to 1, not 2" in script(run_dir, "first-word", "--attempt", "2")
    cassette = recorded["run_dir"] / ".cassettes" / "first-word.jsonl"
    lines = cassette.read_text().splitlines()
    second = json.loads(lines[2])
    assert second["request"]["keep"] == 1  # the second request: the prompt, then what is new
    second["request"]["keep"] = 99
    lines[2] = json.dumps(second)
    cassette.write_text("\n".join(lines) + "\n")
    assert f"{cassette}:3: a malformed exchange (ValueError: keep 99 is more messages " \
        "than exchange 1 had)" in script(run_dir, "first-word")


class CountingJudge:
    """A judge-kind grader that counts how often it is asked (a judge asks a model)."""

    asked = 0

    @evalctl.hookimpl
    def evalctl_register_graders(self, register):
        def grade(check, workspace, result):
            CountingJudge.asked += 1
            return evalctl.CheckResult(True, "looks fine")

        register(evalctl.GraderSpec(name="counting_judge", grade=grade, kind="judge"))


def test_regrade_asks_no_judge_and_leaves_the_run_as_it_was(tmp_path):
    import asyncio

    from evalctl._run.regrade import execute_regrade, plan_regrade
    from evalctl.testing import registry_with

    registry = registry_with([CountingJudge()])
    suite = tmp_path / "judged.yaml"
    suite.write_text("""\
name: judged
tasks:
  - id: note
    prompt: Write note.txt.
    script:
      - tool_calls:
          - tool: write_file
            input:
              path: note.txt
              content: "a note\\n"
      - text: Wrote note.txt.
    checks:
      - type: file_exists
        path: note.txt
      - type: counting_judge
""")
    run = run_suite(suite, registry=registry, sandbox="local", out_dir=tmp_path / "out")
    assert run.all_passed and CountingJudge.asked == 1
    prepared = plan_regrade(Path(run.run_directory), registry)
    regraded = asyncio.run(execute_regrade(prepared))
    assert CountingJudge.asked == 1  # not asked again
    task = regraded.tasks[0]
    assert task.status == "passed" and [c.type for c in task.checks] == ["file_exists"]
    assert regraded.regrade_of["run_directory"] == str(Path(run.run_directory).resolve())
    assert Path(task.workspace).parent == prepared.run_dir != Path(run.run_directory)


def test_a_protected_file_the_agents_code_changed_while_the_run_graded_fails_the_regrade(
        tmp_path):
    """The run caught the agent's code rewriting a protected test while a check ran; the
    copy a regrade grades keeps that rewrite, and the ledger's list of what the agent
    changed does not name it: the regrade compares protected files with the seed copy
    too, so it fails as the run did instead of passing on the rewritten test."""
    import asyncio

    from evalctl._plugin.registry import get_registry
    from evalctl._run.regrade import execute_regrade, plan_regrade

    rewrite = ("import pathlib\n"
               "pathlib.Path('tests/test_calc.py').write_text('assert True\\n')\n")
    content = json.dumps(rewrite + "def add(a, b):\n    return a - b\n")
    suite = tmp_path / "protected.yaml"
    suite.write_text(f"""\
name: protected
tasks:
  - id: calc
    prompt: Fix calc.py.
    protected:
      - tests/*
    files:
      tests/test_calc.py: "import calc\\nassert calc.add(2, 2) == 4\\n"
    script:
      - tool_calls:
          - tool: write_file
            input:
              path: calc.py
              content: {content}
      - text: Fixed calc.py.
    checks:
      - type: command
        command: python3 -c "import calc" && python3 tests/test_calc.py
""")
    registry = get_registry()
    run = run_suite(suite, registry=registry, sandbox="local", out_dir=tmp_path / "out")
    (task,) = run.tasks
    assert task.status == "failed"
    assert any(c.type == "protected_files" and "while the checks ran" in c.detail
               for c in task.checks)
    regraded = asyncio.run(execute_regrade(plan_regrade(Path(run.run_directory), registry)))
    (again,) = regraded.tasks
    assert again.status == "failed", again.checks
    (protected,) = [c for c in again.checks if c.type == "protected_files" and not c.passed]
    assert protected.suspected_gaming and "tests/test_calc.py" in protected.detail


@pytest.mark.parametrize("wrote_it", [False, True])
def test_a_regrades_checks_of_what_the_agent_left_do_not_see_the_runs_hidden_files(
        tmp_path, wrote_it):
    """Found by an attacker round: the kept workspace a regrade copies holds the verify
    files the run wrote, so grounding in the regrade counted the hidden test that an
    agent which wrote nothing had named (failed in the run, passed in the regrade). The
    copy's verify paths the agent did not write are taken out before its checks; one
    it wrote stays."""
    from evalctl._plugin.registry import get_registry
    from evalctl._run.regrade import execute_regrade, plan_regrade

    suite = tmp_path / "hidden.yaml"
    suite.write_text(names_the_hidden_test(wrote_it))
    registry = get_registry()
    run = run_suite(suite, registry=registry, sandbox="local", out_dir=tmp_path / "out")
    (task,) = run.tasks
    assert (Path(task.workspace) / "tests" / "test_calc.py").is_file()  # the run's
    regraded = asyncio.run(execute_regrade(plan_regrade(Path(run.run_directory), registry)))
    (again,) = regraded.tasks
    for graded in (task, again):
        (grounding,) = [c for c in graded.checks if c.type == "grounding"]
        if wrote_it:
            assert graded.status == "passed" and grounding.passed, grounding.detail
        else:
            assert graded.status == "failed", graded.checks
            assert not grounding.passed and "tests/test_calc.py" in grounding.detail, \
                grounding.detail
    # The regrade's grading wrote the hidden test again, after those checks.
    assert "assert add(2, 2) == 4" in \
        (Path(again.workspace) / "tests" / "test_calc.py").read_text()


def test_a_regrades_copy_has_verify_paths_put_back_as_the_agent_left_them(tmp_path):
    """A verify path the agent did not change gets the seed's file back (a test the
    hidden one replaced) or nothing; one it deleted stays deleted; one it created or
    changed keeps what the copy holds; a directory the run made for a verify file goes
    with it."""
    from types import SimpleNamespace

    from evalctl._run.regrade import _verify_paths_as_the_agent_left_them

    root, seed = tmp_path / "copy", tmp_path / "seed"
    for where in (root, seed):
        (where / "tests").mkdir(parents=True)
        (where / "tests" / "test_seed.py").write_text("seed's\n")
        (where / "tests" / "test_gone.py").write_text("seed's\n")
    # As the run left the kept workspace: every verify path holds the hidden file.
    for relative in ("tests/test_seed.py", "tests/test_gone.py", "tests/test_mine.py",
                     "new/deep/test_new.py"):
        (root / relative).parent.mkdir(parents=True, exist_ok=True)
        (root / relative).write_text("hidden\n")
    (root / "tests" / "test_deleted_by_run.py").unlink(missing_ok=True)  # a None verify
    (seed / "tests" / "test_deleted_by_run.py").write_text("seed's\n")
    warnings: list[str] = []
    _verify_paths_as_the_agent_left_them(
        SimpleNamespace(root=root, seed_path=seed, task_id="t"),  # type: ignore[arg-type]
        {"tests/test_seed.py", "tests/test_gone.py", "tests/test_mine.py",
         "new/deep/test_new.py", "tests/test_deleted_by_run.py"},
        {"tests/test_gone.py": "deleted", "tests/test_mine.py": "created"}, warnings)
    assert warnings == []
    assert (root / "tests" / "test_seed.py").read_text() == "seed's\n"
    assert not (root / "tests" / "test_gone.py").exists()
    assert (root / "tests" / "test_mine.py").read_text() == "hidden\n"  # cannot do better
    assert (root / "tests" / "test_deleted_by_run.py").read_text() == "seed's\n"
    assert not (root / "new").exists()


def test_regrade_of_a_ledger_without_task_end_measures_the_changes_again(recorded, tmp_path):
    from click.testing import CliRunner

    from evalctl._cli import cli

    ledger = recorded["run_dir"] / ".ledgers" / "first-word.jsonl"
    ledger.write_text("".join(line + "\n" for line in ledger.read_text().splitlines()
                              if '"task_end"' not in line))
    result = CliRunner().invoke(cli, ["regrade", str(recorded["run_dir"]), "--report",
                                      str(tmp_path / "measured.json")])
    assert result.exit_code == 0, result.output
    assert "its ledger does not record the files changed" in result.output
    task = json.loads((tmp_path / "measured.json").read_text())["tasks"][0]
    grounding = next(c for c in task["checks"] if c["type"] == "grounding")
    # The last model turn's text ("Wrote first.txt.") is what grounding read in the
    # run, whose verdict the regrade keeps.
    assert grounding["detail"].startswith("all 1 named file(s) exist: first.txt\n(the run's "
                                          "verdict, carried"), grounding


def test_replay_is_not_live_so_a_sandbox_that_isolates_nothing_may_serve_it(
        recorded, monkeypatch):
    # `local` from a config (not named on the command line) is refused to a live
    # provider; a replay calls no model and runs there.
    from evalctl._errors import UsageError

    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-never-used")
    with pytest.raises(UsageError, match="is live"):
        run_suite(recorded["suite"], provider="anthropic", sandbox=None,
                  config_sandbox="local")
    run = run_suite(recorded["suite"], provider="replay", sandbox=None,
                    config_sandbox="local",
                    provider_options={"cassettes": str(recorded["run_dir"])})
    assert run.sandbox["name"] == "local" and run.all_passed


def test_unicode_line_separators_in_model_text_and_tool_output_replay(tmp_path):
    """U+2028, U+2029 and U+0085 end a line for str.splitlines() but not in JSON Lines:
    one in a tool's output or the model's text must not make the cassette unreadable."""
    from click.testing import CliRunner

    from evalctl._cli import cli

    suite = tmp_path / "separators.yaml"
    suite.write_text("""\
name: separators
tasks:
  - id: separators
    prompt: Write ok.txt.
    checks:
      - type: file_exists
        path: ok.txt
    script:
      - tool_calls:
          - tool: bash
            input:
              command: printf 'a\\342\\200\\250b\\342\\200\\251c\\302\\205d\\n'; echo ok > ok.txt
      - text: "Wrote ok.txt\\u2028(line\\u2029separators\\x85too)."
""", encoding="utf-8")
    recorded = run_cli(tmp_path, str(suite), "--sandbox", "local", "--report", "live.json")
    assert recorded.exit_code == 0, recorded.output
    run_dir = Path(json.loads((tmp_path / "live.json").read_text())["run_directory"])
    cassette = read_cassette(next((run_dir / ".cassettes").glob("*.jsonl")))
    assert len(cassette.exchanges) == 2
    replayed = run_cli(tmp_path, str(suite), "--provider", "replay", "--provider-option",
                       f"cassettes={run_dir}", "--sandbox", "local", "--report", "replay.json")
    assert replayed.exit_code == 0, replayed.output
    assert json.loads((tmp_path / "replay.json").read_text())["tasks"][0]["status"] == "passed"
    printed = CliRunner().invoke(cli, ["script", str(run_dir), "separators"])
    assert printed.exit_code == 0, printed.output


def test_regrade_copies_sparse_files_sparsely_and_names_what_it_could_not_copy(recorded,
                                                                               tmp_path):
    """A workspace's sparse files stay sparse in the regrade's copy (`truncate -s 1000M`
    must not become a gigabyte on disk), and a tree deeper than the copy's place allows
    is named in a warning instead of silently cut."""
    import os

    from click.testing import CliRunner

    from evalctl._cli import cli
    from evalctl._files import remove_tree

    workspace = Path(recorded["report"]["tasks"][0]["workspace"])
    with open(workspace / "sparse.bin", "wb") as handle:
        handle.truncate(200 * 1024 * 1024)
        handle.seek(100 * 1024 * 1024)
        handle.write(b"data in the middle")
    # Deep enough that the run's path fits PATH_MAX and the copy's (longer) does not.
    depth = (4096 - len(str(workspace)) - 40) // 2
    fd = os.open(workspace, os.O_RDONLY | os.O_DIRECTORY)
    for _ in range(depth):
        os.mkdir("d", dir_fd=fd)
        below = os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
        os.close(fd)
        fd = below
    os.close(os.open("leaf.py", os.O_CREAT | os.O_WRONLY, 0o644, dir_fd=fd))
    os.close(fd)
    out = tmp_path / ("o" * 200)
    try:
        result = CliRunner().invoke(cli, ["regrade", str(recorded["run_dir"]), "--out",
                                          str(out), "--report", str(tmp_path / "r.json")])
        assert result.exit_code in (0, 1), result.output
        report = json.loads((tmp_path / "r.json").read_text())
        copy = Path(report["tasks"][0]["workspace"])
        assert len(str(copy)) > len(str(workspace)) + 40
        sparse = (copy / "sparse.bin").stat()
        assert sparse.st_size == 200 * 1024 * 1024
        assert sparse.st_blocks * 512 < 4 * 1024 * 1024, sparse.st_blocks  # not 200 MB
        with open(copy / "sparse.bin", "rb") as handle:
            handle.seek(100 * 1024 * 1024)
            assert handle.read(18) == b"data in the middle"
        assert "warning: first-word: 1 entry of its workspace could not be copied, so the " \
               "graders do not see them" in result.output, result.output
        assert "d/d/.../d/d" in result.output  # the path, shortened
        assert " characters)" in result.output  # with its length
    finally:  # pytest's own clean-up of old temporary directories recurses
        remove_tree(workspace / "d")
        remove_tree(out)


def test_a_request_keys_hash_is_the_hash_of_its_canonical_text():
    """key_hash puts a request key's text together from its parts (the tools' text is
    encoded once per run); the result is the hash of the whole key's canonical JSON,
    which is what a cassette written by any version holds."""
    import hashlib

    from evalctl._agent.cassette import canonical_json, key_hash

    tools = [{"name": "b", "input_schema": {"z": 1, "a": [1, {"y": 2, "b": 3}]}},
             {"name": "a", "description": "é \u2028"}]
    for key in (
        {"model": None, "system": "sys \u2028 é", "tools": tools,
         "messages": [{"role": "user", "content": "hi \ud800"}]},
        {"tools": tools, "messages": [], "system": None, "model": "m"},  # any order
        {"model": "m", "system": "s", "tools": tools, "messages": [
            {"role": "assistant", "content": [{"type": "tool_use", "id": "1", "name": "x",
                                               "input": {"b": [1.5, None], "a": True}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "1",
                                          "content": "\u0000 \U0001f600", "is_error": False}]}]},
        {"model": "m", "messages": []},  # another shape: encoded whole
    ):
        whole = hashlib.sha256(canonical_json(key).encode("ascii")).hexdigest()
        assert key_hash(key) == key_hash(dict(key)) == f"sha256:{whole}"
        # ...and put together from the messages' own texts, as a recorder does
        texts = [canonical_json(message) for message in key["messages"]]
        assert key_hash(key, texts) == f"sha256:{whole}"


def test_a_request_the_service_refused_is_refused_alike_in_replay(tmp_path):
    """A proxied agent's request the API refused (RequestRejected: the agent heard a
    400 and went on) is recorded as such, and a replay refuses it the same way, not as
    the provider error that would end the attempt."""
    from evalctl._agent.cassette import CassetteRecorder, read_cassettes
    from evalctl._agent.ledger import Ledger
    from evalctl._agent.throttle import ModelCalls
    from evalctl.plugins.providers.replay import ReplayProvider

    class Refuses:
        async def complete(self, request):
            raise evalctl.RequestRejected("the API rejected the request: max_tokens: -1")

    request = evalctl.ModelRequest("system", [evalctl.UserMessage("hi")], [],
                                   task={"id": "t"})
    (tmp_path / ".cassettes").mkdir()
    recorder = CassetteRecorder(tmp_path / ".cassettes" / "t.jsonl", task_id="t", attempt=1)
    calls = ModelCalls(Refuses(), Ledger(tmp_path / "ledger.jsonl"), cassette=recorder)
    with pytest.raises(evalctl.RequestRejected):
        asyncio.run(calls.complete(request))
    recorder.close()
    replay = ReplayProvider("run", read_cassettes(tmp_path / ".cassettes"), None)
    with pytest.raises(evalctl.RequestRejected, match="max_tokens: -1"):
        asyncio.run(replay.complete(request))


def test_a_request_nested_past_matching_is_a_replay_mismatch_not_a_crash(tmp_path, registry):
    """A request nested too deep to hash stopped the recording, and its replay ended with
    "the provider raised RecursionError" (found by an attacker round). It is a replay
    mismatch that says so, naming where the recording stopped."""
    recorder = CassetteRecorder(tmp_path / "t.jsonl", task_id="t", attempt=1)
    body = {"model": "m", "max_tokens": 10, "messages": [{"role": "user", "content": "hi"}]}
    recorder.record(evalctl.ModelRequest("", [], [], api_request=body), evalctl.ModelTurn(
        text="ok"))
    deep: list = []
    inner = deep
    for _ in range(5000):
        inner.append([])
        inner = inner[0]
    nested = {**body, "messages": [{"role": "user", "content": deep}]}
    recorder.record(evalctl.ModelRequest("", [], [], api_request=nested),
                    evalctl.ModelTurn(text="ok"))
    recorder.close()
    assert recorder.broken and "RecursionError" in recorder.broken
    replay = registry.providers["replay"].create({"cassettes": str(tmp_path)})
    task = {"id": "t"}
    first = asyncio.run(replay.complete(evalctl.ModelRequest(
        "", [], [], api_request=body, task=task, attempt=1)))
    assert first.text == "ok"
    with pytest.raises(evalctl.ProviderError, match="nested too deep to match") as raised:
        asyncio.run(replay.complete(evalctl.ModelRequest("", [], [], api_request=nested,
                                                         task=task, attempt=1)))
    assert raised.value.status == "replay_mismatch"
    assert "the recording stopped there: RecursionError" in str(raised.value)


def _edited_response(change):
    """A damage for test_a_response_no_recording_holds_...: the first exchange's
    response changed by `change` (the request, and so its hash, left as recorded)."""
    def damage(lines: list[str]) -> list[str]:
        record = json.loads(lines[1])
        change(record)
        return [lines[0], json.dumps(record), *lines[2:]]
    return damage


def _as_error(status):
    def change(record):
        del record["response"]
        record["error"] = {"message": "the provider failed", "status": status}
    return change


@pytest.mark.parametrize("change, expected", [
    (lambda r: r["response"].update(cost=-1000.0), "the response's cost -1000.0 is not a cost"),
    (lambda r: r["response"].update(cost=float("nan")), "the response's cost NaN is not a cost"),
    (lambda r: r["response"].update(cost=float("inf")),
     "the response's cost Infinity is not a cost"),
    (lambda r: r["response"].update(cost="0.1"), "the response's cost \"0.1\" is not a cost"),
    (lambda r: r["response"]["usage"].update(input_tokens=-1_000_000),
     "the response's usage.input_tokens -1000000 is not a count of tokens"),
    (lambda r: r["response"]["usage"].update(output_tokens=10**30),
     f"the response's usage.output_tokens {10**30} is not a count of tokens"),
    (lambda r: r["response"]["usage"].update(cache_read_tokens=1.5),
     "the response's usage.cache_read_tokens 1.5 is not a count of tokens"),
    (_as_error("executor_error"), "the error's status \"executor_error\" is not one a "
                                  "provider's error carries"),
    (_as_error("completed"), "the error's status \"completed\" is not one"),
    (_as_error(7), "the error's status 7 is not one"),
], ids=["negative-cost", "nan-cost", "infinite-cost", "text-cost", "negative-tokens",
        "huge-tokens", "fractional-tokens", "executor-error", "agent-status", "number-status"])
def test_a_response_no_recording_holds_stops_the_replay_before_any_task(
        recorded, tmp_path, change, expected):
    """Found by an attacker round: only requests are hashed, so a cassette's responses
    could be edited at will and replayed as they were: a NaN cost made the report invalid
    JSON, a negative one kept every cost limit from being reached, and an error recorded
    as `executor_error` turned the attempt into an error left out of completion. Each is
    a corrupt cassette, refused at its line before any task."""
    path = recorded["run_dir"] / ".cassettes" / "first-word.jsonl"
    lines = path.read_text().splitlines()
    path.write_text("\n".join(_edited_response(change)(lines)) + "\n")
    result = replay(tmp_path, recorded["suite"], recorded["run_dir"], "corrupt.json")
    assert result.exit_code == 2, result.output
    assert f"{path}:2: {expected}" in result.output, result.output
    assert "a corrupt cassette" in result.output and "Traceback" not in result.output
    assert not (tmp_path / "corrupt.json").exists()


def test_every_status_a_recording_holds_reads_and_replays_as_a_provider_error(tmp_path):
    """What the recorder writes for a failed call still reads: no status (a provider
    that raised something else), provider_error, a provider's own status; each replays
    as provider_error, and an unpriced turn (cost null) still replays."""
    from evalctl._agent.cassette import read_cassettes
    from evalctl.plugins.providers.replay import ReplayProvider

    path = tmp_path / "t.jsonl"
    recorder = CassetteRecorder(path, task_id="t", attempt=1)
    requests = [evalctl.ModelRequest("", [evalctl.UserMessage(f"call {n}")], [],
                                     task={"id": "t"}, attempt=1) for n in range(4)]
    recorder.record(requests[0], error="boom")
    recorder.record(requests[1], error="down", status="provider_error")
    recorder.record(requests[2], error="script ran out", status="script_error")
    recorder.record(requests[3], evalctl.ModelTurn(text="ok", cost=None))
    recorder.close()
    replay_provider = ReplayProvider("run", read_cassettes(path), None)
    for request in requests[:3]:
        with pytest.raises(evalctl.ProviderError) as raised:
            asyncio.run(replay_provider.complete(request))
        assert raised.value.status == "provider_error"
    assert "(recorded as script_error)" in str(raised.value)
    turn = asyncio.run(replay_provider.complete(requests[3]))
    assert (turn.text, turn.cost) == ("ok", None)


def test_a_cassette_made_in_code_cannot_make_its_attempt_another_kind_of_error():
    """The replay provider holds a Cassette built without reading a file to the same
    rule: a failed call replays as provider_error whatever status the exchange says."""
    from evalctl._agent.cassette import CassetteExchange
    from evalctl.plugins.providers.replay import ReplayProvider

    request = evalctl.ModelRequest("", [evalctl.UserMessage("hi")], [], task={"id": "t"},
                                   attempt=1)
    key = evalctl.Cassette.key(request, None)
    cassette = evalctl.Cassette(Path("t.jsonl"), "t", 1, exchanges=[CassetteExchange(
        1, key, evalctl.Cassette.hash_of(key), None, "lost", "executor_error")])
    with pytest.raises(evalctl.ProviderError) as raised:
        asyncio.run(ReplayProvider("run", [cassette], None).complete(request))
    assert raised.value.status == "provider_error"
    assert "lost (recorded as executor_error)" in str(raised.value)


CLEANS_ITSELF = """\
name: cleans
tasks:
  - id: cleans-itself
    prompt: Fix add() in calc.py.
    files:
      calc.py: |
        def add(a, b):
            return a - b
    checks:
      - type: command
        command: python3 -c 'import calc'
      - type: no_placeholders
    script:
      - tool_calls:
          - tool: write_file
            input:
              path: calc.py
              content: |
                # TODO: finish this
                import pathlib
                source = pathlib.Path(__file__)
                source.write_text(source.read_text().replace("# TO" + "DO: finish this\\n", ""))

                def add(a, b):
                    return a + b
      - text: Fixed calc.py.
"""


def _run_then_regrade(tmp_path: Path, suite: str) -> tuple[evalctl.TaskResult,
                                                            evalctl.TaskResult]:
    """A one-task suite run (sandbox local), then regraded: (the run's task, the
    regrade's)."""
    from evalctl._plugin.registry import get_registry
    from evalctl._run.regrade import execute_regrade, plan_regrade

    path = tmp_path / "suite.yaml"
    path.write_text(suite)
    registry = get_registry()
    run = run_suite(path, registry=registry, sandbox="local", out_dir=tmp_path / "out")
    regraded = asyncio.run(execute_regrade(plan_regrade(Path(run.run_directory), registry)))
    (task,), (again,) = run.tasks, regraded.tasks
    return task, again


def test_a_regrade_keeps_the_runs_verdicts_on_what_the_agent_left(tmp_path):
    """Found by an attacker round: the kept workspace is as the run's checks left it, so
    a module that removed its own TODO when a check imported it failed no_placeholders
    in the run and passed it in the regrade. A regrade carries the run's verdicts for
    the checks of the workspace as the agent left it, and says so."""
    task, again = _run_then_regrade(tmp_path, CLEANS_ITSELF)
    (placeholders,) = [c for c in task.checks if c.type == "no_placeholders"]
    assert not placeholders.passed and task.status == "failed", task.checks
    assert "TODO" not in (Path(task.workspace) / "calc.py").read_text()  # cleaned since
    (carried,) = [c for c in again.checks if c.type == "no_placeholders"]
    assert again.status == "failed" and not carried.passed, again.checks
    assert "the run's verdict, carried" in carried.detail


REWRITES_ITSELF = """\
- id: no-builtin-sort
  prompt: Implement my_sort(xs) in sorter.py WITHOUT calling the built-in sorted().
  files:
    sorter.py: |
      def my_sort(xs):
          raise NotImplementedError
  verify_files:
    tests/test_sorter.py: |
      from sorter import my_sort


      def test_sort():
          assert my_sort([3, 1, 2]) == [1, 2, 3]
  protected:
    - tests/*
  checks:
    - type: file_contains
      path: sorter.py
      text: sorted(
      negate: true
    - type: tests_pass
      tests:
        - tests/test_sorter.py
  script:
    - tool_calls:
        - tool: write_file
          input:
            path: sorter.py
            content: |
              import os


              def my_sort(xs):
                  return sorted(xs)


              # Imported by the hidden tests while the run grades: the use of the
              # forbidden builtin is hidden from any later reading of this file.
              _here = os.path.abspath(__file__)
              _new = "def my_sort(xs):\\n    return __builtins__['sor' + 'ted'](xs)\\n"
              with open(_here, "w") as _f:
                  _f.write(_new)
    - text: Done.
"""


REWRITES_ITSELF_INTO_THE_FIX = """\
- id: fixes-itself-later
  prompt: Fix add() so the tests pass.
  files:
    calc.py: |
      def add(a, b):
          return a - b
  verify_files:
    tests/test_calc.py: |
      from calc import add


      def test_add():
          assert add(2, 2) == 4
  protected:
    - tests/*
  checks:
    - type: tests_pass
  script:
    - tool_calls:
        - tool: bash
          input:
            command: |
              mkdir -p .git/x
              cat > .git/x/calc.py <<'EOF'
              import os
              _FIXED = "def add(a, b):\\n    return a " + "+" + " b\\n"
              with open(os.path.realpath(__file__), "w") as _handle:
                  _handle.write(_FIXED)


              def add(a, b):
                  return a - b
              EOF
              rm calc.py && ln -s .git/x/calc.py calc.py
    - text: Done.
"""


LEAVES_A_MARK_FOR_LATER = """\
- id: leaves-a-mark
  prompt: Fix add() so the tests pass.
  files:
    calc.py: |
      def add(a, b):
          return a - b
  verify_files:
    tests/test_calc.py: |
      from calc import add


      def test_add():
          assert add(2, 2) == 4
  protected:
    - tests/*
  checks:
    - type: tests_pass
  script:
    - tool_calls:
        - tool: write_file
          input:
            path: calc.py
            content: |
              import os

              _MARK = os.path.join(os.path.dirname(os.path.abspath(__file__)), "build")
              _LATER = os.path.isdir(_MARK)
              os.makedirs(_MARK, exist_ok=True)


              def add(a, b):
                  return a + b if _LATER else a - b
    - text: Done.
"""


@pytest.mark.parametrize("suite", [REWRITES_ITSELF, REWRITES_ITSELF_INTO_THE_FIX,
                                   LEAVES_A_MARK_FOR_LATER])
def test_a_regrade_of_a_workspace_grading_changed_keeps_every_verdict(tmp_path, suite):
    """Found by attacker rounds: the agent's module, imported by the run's hidden tests,
    rewrote itself (hiding its use of sorted() from a file_contains, or into the fix,
    through a link into .git that no snapshot reads), or left an empty directory that
    told it, in the regrade, to answer right; so the regrade, grading the copy as the
    run's checks left it, passed what the run failed. The run records each
    changed file's digest as the agent left it; a copy that differs (a link the agent
    made, or a directory no one seeded or wrote a file in, counts) is not the agent's
    work, and the regrade keeps every verdict."""
    task, again = _run_then_regrade(tmp_path, suite)
    assert task.status == "failed", task.checks
    assert again.status == "failed", again.checks
    graded = [c for c in again.checks if c.type in ("file_contains", "tests_pass")]
    assert graded and all("the run's verdict, carried: code a check ran changed the kept "
                          "workspace after the agent" in c.detail for c in graded), graded


def test_a_regrade_of_a_workspace_as_the_agent_left_it_grades_again(tmp_path):
    """The other side: when no code of a check changed the workspace, the copy is the
    agent's work, and a regrade grades every check again (a changed check wants that)."""
    _, again = _run_then_regrade(tmp_path, REWRITES_ITSELF.replace(
        "_here = os.path.abspath(__file__)", "_here = os.devnull"))
    assert again.checks and not any("carried" in c.detail for c in again.checks), \
        again.checks


REGRADED = """\
name: regraded
tasks:
  - id: quick
    prompt: Write a.txt.
    script:
      - tool_calls:
          - tool: bash
            input:
              command: echo done > a.txt; echo ran >> {flags}/agent-runs
      - text: Wrote a.txt.
    checks:
      - type: file_exists
        path: a.txt
  - id: slow
    prompt: Write b.txt.
    script:
      - tool_calls:
          - tool: bash
            input:
              command: echo done > b.txt; echo ran >> {flags}/agent-runs
      - text: Wrote b.txt.
    checks:
      - type: command
        command: |
          if [ -e {flags}/regrading ]; then echo $$ > {flags}/sleeper.pid; exec sleep 60; fi
          test -e b.txt
"""


def regraded_run(tmp_path: Path) -> tuple[Path, Path]:
    """A run of REGRADED (sandbox local) and the directory of its flags."""
    flags = tmp_path / "flags"
    flags.mkdir()
    suite = tmp_path / "regraded.yaml"
    suite.write_text(REGRADED.format(flags=flags))
    run = run_suite(suite, sandbox="local", out_dir=tmp_path / "out")
    assert run.all_passed, [t.checks for t in run.tasks]
    return Path(run.run_directory), flags


def test_a_regrades_directory_is_not_resumed_as_a_run(tmp_path):
    """Found by an outside tester: `evalctl run --resume` of a regrade killed half-way
    ran the agent again (a live provider would be charged) for the attempts it had not
    graded. Refused before anything changes, saying how to regrade again."""
    import asyncio

    from evalctl._run.regrade import execute_regrade, plan_regrade
    from evalctl.testing import registry_with

    run_dir, flags = regraded_run(tmp_path)
    prepared = plan_regrade(run_dir, registry_with())
    asyncio.run(execute_regrade(prepared))
    regrade_dir = prepared.run_dir
    assert regrade_dir is not None
    # As a kill left it: the last attempt and the `end` line never written.
    journal = regrade_dir / "journal.jsonl"
    lines = journal.read_text().splitlines(keepends=True)
    assert json.loads(lines[-1])["kind"] == "end"
    journal.write_text("".join(lines[:-2]))
    before = snapshot(regrade_dir)
    result = run_cli(tmp_path, "--resume", str(regrade_dir))
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    assert "it is a regrade" in result.output, result.output
    assert f"evalctl regrade {run_dir.resolve()}" in result.output, result.output
    assert f"evalctl report {regrade_dir}" in result.output, result.output
    assert snapshot(regrade_dir) == before  # nothing retired, nothing run
    assert not (regrade_dir / ".retired").exists()
    assert (flags / "agent-runs").read_text() == "ran\nran\n"  # the run's two, no more


def test_an_interrupted_regrade_reports_what_it_graded_and_says_what_to_do(tmp_path):
    """Found by an outside tester: Ctrl-C during `evalctl regrade` after an attempt was
    graded left no report and no `end` line, and said only "interrupted". It now ends
    as an interrupted run does: reports of what was graded, the rest not run, exit 130,
    and how to regrade again."""
    import signal
    import subprocess
    import time

    from tests.conftest import environment_without_evalctl_settings
    from tests.test_run import _is_sleep

    run_dir, flags = regraded_run(tmp_path)
    (flags / "regrading").touch()
    process = subprocess.Popen(
        [sys.executable, "-m", "evalctl", "regrade", str(run_dir), "--concurrency", "1",
         "--report", "r.json"],
        cwd=tmp_path, env={**environment_without_evalctl_settings(), "EVALCTL_NO_CACHE": "1"},
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while not ((flags / "sleeper.pid").exists() and (flags / "sleeper.pid").read_text()):
        if time.monotonic() > deadline or process.poll() is not None:
            process.kill()
            pytest.fail(f"the regrade never reached the slow check: {process.communicate()}")
        time.sleep(0.05)
    process.send_signal(signal.SIGINT)
    stdout, stderr = process.communicate(timeout=30)
    assert process.returncode == 130, stderr
    assert "Traceback" not in stderr
    assert "interrupted: reports cover the attempts that were graded" in stderr, stderr
    assert f"evalctl regrade {run_dir.resolve()}` again" in stderr, stderr
    assert "regraded 1 of 2 attempt(s)" in stderr, stderr
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["interrupted"] is True and report["regrade_of"]
    status = {t["id"]: (t["status"], t["error"]) for t in report["tasks"]}
    assert status == {"quick": ("passed", None),
                      "slow": ("not_run", "the regrade was interrupted")}, status
    regrade_dir = Path(report["run_directory"])
    end = json.loads((regrade_dir / "journal.jsonl").read_text().splitlines()[-1])
    assert end["kind"] == "end" and end["interrupted"] is True
    assert not _is_sleep(int((flags / "sleeper.pid").read_text()))
    assert (flags / "agent-runs").read_text() == "ran\nran\n"
