"""The agent loop against a tiny in-test fake model."""

from __future__ import annotations

import asyncio
import json

import pytest

import evalctl
from evalctl._agent.ledger import read_events
from evalctl._agent.runtime import run_agent
from evalctl._plugin.types import ExitStatus, StopReason
from evalctl._suite.model import Limits, Task
from evalctl._workspace import create_workspace, new_run_directory

from .conftest import FakeModel, call, final_turn, sandbox_for, tool_turn


def make_task(**overrides) -> Task:
    fields = {"id": "t", "prompt": "do it", "checks": ({"type": "file_exists", "path": "x"},)}
    fields.update(overrides)
    return Task(**fields)


def run(task: Task, model: FakeModel, tmp_path, files=None):
    workspace = create_workspace(new_run_directory(tmp_path), task.id, files or {})
    return asyncio.run(run_agent(task, model, workspace, sandbox_for(workspace))), workspace


def test_a_turn_with_tool_calls_then_a_final_answer(tmp_path):
    model = FakeModel([
        tool_turn(call("write_file", path="out.txt", content="hi"), text="writing"),
        final_turn("Wrote out.txt."),
    ])
    result, workspace = run(make_task(), model, tmp_path)
    assert result.exit_status == ExitStatus.COMPLETED and result.completed
    assert result.final_text == "Wrote out.txt."
    assert (result.turns, result.tool_calls) == (2, 1)
    assert result.files_changed == {"out.txt": "created"}
    assert (workspace.root / "out.txt").read_text() == "hi"
    second = model.requests[1]
    assert isinstance(second.messages[-1], evalctl.ToolResultsMessage)
    assert second.messages[-1].results[0].content == "wrote 2 characters to out.txt"
    assert second.turn_index == 1 and second.task["id"] == "t"
    assert {t.name for t in second.tools} == {"read_file", "write_file", "edit_file", "bash",
                                              "glob", "grep"}


def test_tool_calls_in_one_turn_run_concurrently(tmp_path):
    # Each command waits for the file the other creates: run one after the other,
    # the first would wait out its timeout and fail.
    a = call("bash", "a", command="touch a; for i in $(seq 200); do [ -f b ] && exit 0; "
                                  "sleep 0.05; done; exit 1", timeout=30)
    b = call("bash", "b", command="touch b; for i in $(seq 200); do [ -f a ] && exit 0; "
                                  "sleep 0.05; done; exit 1", timeout=30)
    model = FakeModel([tool_turn(a, b), final_turn()])
    run(make_task(), model, tmp_path)
    results = model.requests[1].messages[-1].results
    assert [(r.call_id, r.is_error) for r in results] == [("a", False), ("b", False)]


def test_unknown_tools_and_bad_arguments_go_back_to_the_model(tmp_path):
    model = FakeModel([tool_turn(call("teleport", "1"), call("read_file", "2")),
                       final_turn()])
    result, _ = run(make_task(), model, tmp_path)
    assert result.exit_status == ExitStatus.COMPLETED
    errors = model.requests[1].messages[-1].results
    assert all(r.is_error for r in errors)
    assert "unknown tool 'teleport'" in errors[0].content
    assert "'path' is a required property" in errors[1].content


def test_the_turn_limit_ends_the_loop_with_max_turns(tmp_path):
    model = FakeModel([tool_turn(call("glob", pattern="*")) for _ in range(5)])
    result, workspace = run(make_task(limits=Limits(turns=3)), model, tmp_path)
    assert result.exit_status == ExitStatus.MAX_TURNS and result.turns == 3
    limits = [e for e in read_events(workspace.ledger_path) if e["event"] == "limit"]
    assert limits == [{**limits[0], "limit": "turns", "value": 3}]


def test_the_time_limit_ends_the_loop_with_timeout(tmp_path):
    model = FakeModel([tool_turn(call("bash", command="sleep 20"))])
    result, _ = run(make_task(limits=Limits(seconds=0.5)), model, tmp_path)
    assert result.exit_status == ExitStatus.TIMEOUT
    assert "0.5s" in result.error


def test_the_cost_limit_ends_the_loop(tmp_path):
    model = FakeModel([tool_turn(call("glob", pattern="*"), cost=0.3) for _ in range(5)])
    result, _ = run(make_task(limits=Limits(cost=0.5)), model, tmp_path)
    assert result.exit_status == ExitStatus.COST_LIMIT
    assert result.turns == 2 and result.cost == pytest.approx(0.6)


def test_an_unpriced_model_reports_no_cost_rather_than_zero(tmp_path):
    model = FakeModel([tool_turn(call("glob", pattern="*"), cost=None), final_turn()])
    result, workspace = run(make_task(limits=Limits(cost=1.0)), model, tmp_path)
    assert result.cost is None and result.exit_status == ExitStatus.COMPLETED
    notes = [e for e in read_events(workspace.ledger_path) if e["event"] == "limit"]
    assert len(notes) == 1 and "unpriced" in notes[0]["note"]


@pytest.mark.parametrize("stop, status", [
    (StopReason.MAX_TOKENS, ExitStatus.MAX_TOKENS),
    (StopReason.REFUSAL, ExitStatus.REFUSED),
    (StopReason.CONTEXT_OVERFLOW, ExitStatus.CONTEXT_OVERFLOW),
])
def test_stop_reasons_are_recorded(tmp_path, stop, status):
    result, _ = run(make_task(), FakeModel([final_turn("cut", stop_reason=stop)]), tmp_path)
    assert result.exit_status == status


def test_pause_turn_continues_the_conversation(tmp_path):
    model = FakeModel([final_turn("thinking", stop_reason=StopReason.PAUSE_TURN),
                       final_turn("done")])
    result, _ = run(make_task(), model, tmp_path)
    assert result.exit_status == ExitStatus.COMPLETED and result.turns == 2
    assert isinstance(model.requests[1].messages[-1], evalctl.AssistantMessage)


def test_a_provider_error_is_recorded_as_an_error_status(tmp_path):
    model = FakeModel([tool_turn(call("glob", pattern="*")),
                       evalctl.ProviderError("overloaded after 4 retries")])
    result, workspace = run(make_task(), model, tmp_path)
    assert result.exit_status == ExitStatus.PROVIDER_ERROR
    assert result.error == "overloaded after 4 retries"
    assert result.turns == 1
    assert any(e["event"] == "provider_error" for e in read_events(workspace.ledger_path))


def test_read_only_denials_are_recorded_and_the_agent_adapts(tmp_path):
    model = FakeModel([tool_turn(call("write_file", path="x", content="y")),
                       tool_turn(call("read_file", path="seed.txt")),
                       final_turn("the file says hello")])
    result, workspace = run(make_task(permissions="read-only"), model, tmp_path,
                            files={"seed.txt": "hello"})
    assert result.exit_status == ExitStatus.COMPLETED and result.files_changed == {}
    denials = [e for e in read_events(workspace.ledger_path) if e["event"] == "denial"]
    assert [d["name"] for d in denials] == ["write_file"]


def test_the_ledger_records_everything_and_token_totals_come_from_it(tmp_path):
    model = FakeModel([
        tool_turn(call("bash", command="echo hi"),
                  usage=evalctl.TokenUsage(100, 20, cache_read_tokens=50, cache_write_tokens=7)),
        final_turn("ok", usage=evalctl.TokenUsage(30, 4, cache_read_tokens=60)),
    ])
    result, workspace = run(make_task(), model, tmp_path)
    events = read_events(workspace.ledger_path)
    assert [e["event"] for e in events] == ["task_start", "model_turn", "tool_call",
                                            "tool_result", "model_turn", "task_end"]
    assert [e["seq"] for e in events] == list(range(1, 7))
    assert result.usage == evalctl.TokenUsage(130, 24, 110, 7)
    assert events[-1]["status"] == "completed"
    assert not workspace.ledger_path.is_relative_to(workspace.root)


def test_the_ledger_is_append_only_over_a_long_run(tmp_path):
    snapshots: list[bytes] = []

    def turn(request):
        snapshots.append(ledger_path().read_bytes())
        return tool_turn(call("bash", command="head -c 20000 /dev/zero | tr '\\0' z"))

    workspace = create_workspace(new_run_directory(tmp_path), "long", {})

    def ledger_path():
        return workspace.ledger_path

    model = FakeModel([turn] * 40 + [final_turn()])
    asyncio.run(run_agent(make_task(id="long", limits=Limits(turns=50)), model, workspace,
                          sandbox_for(workspace)))
    final = workspace.ledger_path.read_bytes()
    for earlier in snapshots:
        assert final.startswith(earlier)  # nothing already written was ever rewritten
    results = [json.loads(line) for line in final.splitlines()
               if b'"tool_result"' in line]
    assert len(results) == 40
    assert all("characters elided" in r["content"] for r in results)
    assert all(len(r["content"]) < 8200 for r in results)


def test_cancelling_a_task_records_aborted_and_keeps_partial_work(tmp_path):
    workspace = create_workspace(new_run_directory(tmp_path), "t", {})
    model = FakeModel([tool_turn(call("write_file", path="partial.txt", content="half")),
                       30.0])

    async def main():
        job = asyncio.create_task(run_agent(make_task(), model, workspace,
                                            sandbox_for(workspace)))
        while len(model.requests) < 2:
            await asyncio.sleep(0.01)
        job.cancel()
        with pytest.raises(asyncio.CancelledError):
            await job

    asyncio.run(main())
    assert (workspace.root / "partial.txt").read_text() == "half"
    assert read_events(workspace.ledger_path)[-1] == {
        **read_events(workspace.ledger_path)[-1], "event": "task_end", "status": "aborted"}


def test_the_ledger_cuts_long_tool_arguments_too(tmp_path):
    content = "x" * 50_000
    model = FakeModel([tool_turn(call("write_file", path="big.txt", content=content)),
                       final_turn("Wrote big.txt.")])
    result, workspace = run(make_task(), model, tmp_path)
    assert (workspace.root / "big.txt").read_text() == content  # the tool got it whole
    carrying = [e for e in read_events(workspace.ledger_path)
                if e["event"] == "tool_call" or e["event"] == "model_turn" and e["tool_calls"]]
    assert len(carrying) == 2
    for event in carrying:
        text = json.dumps(event)
        assert len(text) < 9_000 and "characters elided" in text


def test_the_final_text_is_what_the_last_turn_said(tmp_path):
    model = FakeModel([tool_turn(call("glob", pattern="*"), text="Looking around."),
                       final_turn("")])
    result, _ = run(make_task(), model, tmp_path)
    assert result.exit_status == ExitStatus.COMPLETED and result.final_text == ""


def test_arguments_evalctl_cannot_use_fail_their_call_and_the_attempt_goes_on(tmp_path):
    """Found by an attacker through a live model: tool arguments nested 500 deep made
    the ledger's own recursion fail the attempt, and a 1e999 (an infinity to Python's
    JSON reader) made the next request unsendable. Such a call now fails with the
    reason, the model's turn is sent back with that note in its place, and the attempt
    goes on to the model's next turn."""
    deep: dict = {}
    inner = deep
    for _ in range(500):
        inner["a"] = {}
        inner = inner["a"]
    model = FakeModel([
        tool_turn(call("bash", "c1", command="echo hi", timeout=float("inf")),
                  call("write_file", "c2", path="x", content="y", extra=deep)),
        final_turn("done"),
    ])
    result, workspace = run(make_task(), model, tmp_path)
    assert result.exit_status == ExitStatus.COMPLETED and result.final_text == "done"
    returned = model.requests[1].messages[-1].results
    assert "not a finite number" in returned[0].content and returned[0].is_error
    assert "nest deeper than 64 levels" in returned[1].content and returned[1].is_error
    assert not (workspace.root / "x").exists()
    echoed = model.requests[1].messages[-2].turn.tool_calls
    assert all(set(c.arguments) == {"evalctl_unusable_arguments"} for c in echoed)
    json.dumps([e for e in read_events(workspace.ledger_path)], allow_nan=False)

