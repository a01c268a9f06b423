"""The scripted provider, and the Anthropic provider through the real SDK against a
loopback server that speaks the Messages API (no network, no mocked HTTP client)."""

from __future__ import annotations

import asyncio
import json

import pytest
from click.testing import CliRunner

import evalctl
from evalctl._agent.ledger import read_events
from evalctl._agent.runtime import run_agent
from evalctl._cli import cli
from evalctl._errors import UsageError
from evalctl._plugin.types import ExitStatus
from evalctl._suite.model import Task
from evalctl._workspace import create_workspace, new_run_directory
from evalctl.plugins.providers import anthropic_prices
from evalctl.plugins.providers.scripted import CANNED_REPLY

from .conftest import sandbox_for
from .messages_server import MessagesServer, error, message, text_block, tool_use

TASK = Task(id="t", prompt="Create a.txt containing hi.",
            checks=({"type": "file_exists", "path": "a.txt"},))


def run_task(provider, tmp_path, task: Task = TASK):
    workspace = create_workspace(new_run_directory(tmp_path), task.id, dict(task.files))
    return asyncio.run(run_agent(task, provider, workspace, sandbox_for(workspace))), workspace


# -- scripted ---------------------------------------------------------------------

def scripted(registry, **options):
    return registry.providers["scripted"].create(options)


def test_scripted_serves_the_script_with_deterministic_usage(registry, tmp_path):
    task = Task(id="s", prompt="p", checks=TASK.checks, extra={"script": [
        {"text": "writing", "tool_calls": [{"tool": "write_file",
                                             "input": {"path": "a.txt", "content": "hi"}}]},
        {"text": "Created a.txt.", "usage": {"input_tokens": 7, "output_tokens": 3}},
    ]})
    first, _ = run_task(scripted(registry), tmp_path / "1", task)
    second, _ = run_task(scripted(registry), tmp_path / "2", task)
    assert first.exit_status == ExitStatus.COMPLETED and first.final_text == "Created a.txt."
    assert first.usage == second.usage
    assert first.usage.input_tokens > 7 and first.usage.output_tokens > 3  # counted + declared
    assert first.cost == 0.0


def test_scripted_without_a_script_claims_success_and_does_nothing(registry, tmp_path):
    result, _ = run_task(scripted(registry), tmp_path)
    assert result.final_text == CANNED_REPLY and result.files_changed == {}
    assert result.exit_status == ExitStatus.COMPLETED


def test_a_script_that_runs_out_is_an_error_for_that_task(registry, tmp_path):
    task = Task(id="short", prompt="p", checks=TASK.checks, extra={"script": [
        {"tool_calls": [{"tool": "glob", "input": {"pattern": "*"}}]}]})
    result, _ = run_task(scripted(registry), tmp_path, task)
    assert result.exit_status == "script_error"
    assert "has 1 turn(s) and the agent asked for turn 2" in result.error


def test_a_script_naming_an_unknown_tool_is_an_error(registry, tmp_path):
    task = Task(id="bad", prompt="p", checks=TASK.checks, extra={"script": [
        {"tool_calls": [{"tool": "teleport"}]}]})
    result, _ = run_task(scripted(registry), tmp_path, task)
    assert result.exit_status == "script_error"
    assert "calls 'teleport' in turn 1: the agent has no such tool" in result.error


WRITE = {"type": "object", "additionalProperties": False, "required": ["file_path", "content"],
         "properties": {"file_path": {"type": "string"}, "content": {"type": "string"},
                        "replace_all": {"type": "boolean"}, "limit": {"type": ["integer", "null"]},
                        "pattern": {"type": "string", "pattern": "^(a+)+$"}}}


@pytest.mark.parametrize(("arguments", "problem"), [
    ({"file_path": "a", "content": "x"}, None),
    ({"file_path": "a", "content": "x", "limit": None, "replace_all": True}, None),
    # The agent's pattern is not run: a regular expression it chose would run here.
    ({"file_path": "a", "content": "x", "pattern": "a" * 40 + "!"}, None),
    ({"path": "a", "content": "x"}, "lacks 'file_path'"),
    ({"file_path": "a", "content": "x", "mode": "w"}, "has no argument 'mode'"),
    ({"file_path": "a", "content": 3}, "argument 'content' is int 3"),
    ({"file_path": "a", "content": "x", "replace_all": 1}, "argument 'replace_all' is int"),
    ({"file_path": "a", "content": "x", "limit": True}, "takes integer or null"),
])
def test_an_agent_script_input_is_checked_against_the_agents_tool(arguments, problem):
    from evalctl.plugins.providers.scripted import input_problem

    found = input_problem(WRITE, arguments)
    assert (found is None) if problem is None else (problem in found), found


@pytest.mark.parametrize("schema", [{}, {"type": "object"}, {"properties": []},
                                    {"required": "path"}, {"properties": {"a": {"type": 7}}},
                                    {"properties": {"a": "string"}, "required": [["a"]]}])
def test_an_agents_odd_tool_schema_is_no_reason_to_refuse_a_script(schema):
    from evalctl.plugins.providers.scripted import input_problem

    assert input_problem(schema, {"a": 1}) is None


def test_scripted_latency_option(registry):
    assert scripted(registry, latency="0.25").latency == 0.25
    with pytest.raises(UsageError):
        scripted(registry, latency="soon")


# -- anthropic --------------------------------------------------------------------

@pytest.fixture
def server(monkeypatch):
    with MessagesServer() as running:
        monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-test-key")
        monkeypatch.setenv("ANTHROPIC_BASE_URL", running.url)
        yield running


def anthropic(registry, **options):
    return registry.providers["anthropic"].create({"max_retries": "2", **options})


def test_a_tool_loop_through_the_sdk(registry, server, tmp_path):
    server.replies += [
        message([text_block("Writing the file."),
                 tool_use("toolu_1", "write_file", path="a.txt", content="hi"),
                 tool_use("toolu_2", "read_file", path="missing.txt")], "tool_use",
                input_tokens=1000, output_tokens=50, cache_write=900),
        message([text_block("Created a.txt.")], "end_turn", input_tokens=40,
                output_tokens=10, cache_read=900),
    ]
    result, workspace = run_task(anthropic(registry, model="claude-sonnet-4-6"), tmp_path)
    assert result.exit_status == ExitStatus.COMPLETED
    assert (workspace.root / "a.txt").read_text() == "hi"
    assert result.usage == evalctl.TokenUsage(1040, 60, 900, 900)
    expected = (1040 * 3 + 60 * 15 + 900 * 3.75 + 900 * 0.30) / 1e6
    assert result.cost == pytest.approx(expected)

    first, second = server.requests
    assert first["path"] == "/v1/messages" and first["model"] == "claude-sonnet-4-6"
    # SDK majors differ in how they send the key; either way it is the one configured.
    sent = server.headers[0]
    assert sent.get("x-api-key") == "sk-test-key" or \
        sent.get("authorization") == "Bearer sk-test-key"
    assert first["system"][0]["cache_control"] == {"type": "ephemeral"}
    assert [t["name"] for t in first["tools"]] == ["read_file", "write_file", "edit_file",
                                                   "bash", "glob", "grep"]
    assert first["tools"][-1]["cache_control"] == {"type": "ephemeral"}
    assert "cache_control" not in first["tools"][0]
    assert first["messages"] == [{"role": "user", "content": TASK.prompt}]
    # The assistant turn goes back verbatim; tool results follow, one per tool_use.
    assert second["messages"][1]["role"] == "assistant"
    assert second["messages"][1]["content"][1] == {
        "type": "tool_use", "id": "toolu_1", "name": "write_file",
        "input": {"path": "a.txt", "content": "hi"}}
    results = second["messages"][2]["content"]
    assert second["messages"][2]["role"] == "user"
    assert [(r["type"], r["tool_use_id"], r["is_error"]) for r in results] == [
        ("tool_result", "toolu_1", False), ("tool_result", "toolu_2", True)]
    assert "does not exist" in results[1]["content"]


def test_a_lone_surrogate_from_the_model_does_not_make_the_next_request_unsendable(
        registry, server, tmp_path):
    """Found by an attacker: a lone surrogate in a turn (the model's text or tool input,
    which goes back verbatim) made the next request fail to encode as UTF-8, a provider
    error out of the score. It goes on the wire as its escape; the call it was in fails
    as the tool says, and the attempt goes on."""
    server.replies += [
        message([text_block("Writing \ud800."),
                 tool_use("toolu_1", "write_file", path="a.txt", content="x\ud800")],
                "tool_use"),
        message([text_block("Done.")], "end_turn"),
    ]
    result, workspace = run_task(anthropic(registry, model="claude-sonnet-4-6"), tmp_path)
    assert result.exit_status == ExitStatus.COMPLETED and result.final_text == "Done."
    sent = server.requests[1]["messages"][1]["content"]
    assert sent[0]["text"] == "Writing \\ud800." and sent[1]["input"]["content"] == "x\\ud800"


def test_a_429_with_retry_after_is_retried(registry, server, tmp_path):
    server.replies += [error(429, "rate_limit_error", "slow down", **{"retry-after": "0.05"}),
                       message([text_block("Done.")], "end_turn")]
    result, _ = run_task(anthropic(registry), tmp_path)
    assert result.exit_status == ExitStatus.COMPLETED and len(server.requests) == 2


def test_a_529_that_never_recovers_is_a_provider_error(registry, server, tmp_path):
    from evalctl._agent.throttle import RATE_LIMIT_RETRIES

    tries = 3 * (RATE_LIMIT_RETRIES + 1)  # the SDK's 1 + 2 each time the run asks
    server.replies += [error(529, "overloaded_error", "Overloaded",
                             **{"retry-after-ms": "10"})] * tries
    result, workspace = run_task(anthropic(registry), tmp_path)
    assert result.exit_status == ExitStatus.PROVIDER_ERROR
    assert "still rate limited" in result.error and "HTTP 529" in result.error
    assert len(server.requests) == tries
    waits = [e for e in read_events(workspace.ledger_path) if e["event"] == "rate_limited"]
    assert len(waits) == RATE_LIMIT_RETRIES and all(e["wait"] == 0.01 for e in waits)


def test_a_429_after_the_sdks_retries_is_waited_out_by_the_run(registry, server, tmp_path):
    server.replies += [error(429, "rate_limit_error", "slow down", **{"retry-after": "0.05"})] \
        * 3 + [message([text_block("Done.")], "end_turn")]
    result, workspace = run_task(anthropic(registry), tmp_path)
    assert result.exit_status == ExitStatus.COMPLETED and len(server.requests) == 4
    waits = [e for e in read_events(workspace.ledger_path) if e["event"] == "rate_limited"]
    assert [(e["wait"], "HTTP 429" in e["error"]) for e in waits] == [(0.05, True)]


def test_a_timeout_is_retried_then_a_provider_error(registry, server, tmp_path):
    import time

    def slow(body):
        time.sleep(1.5)
        return message([text_block("too late")], "end_turn")

    server.replies += [slow, slow]
    result, _ = run_task(anthropic(registry, timeout="0.3", max_retries="1"), tmp_path)
    assert result.exit_status == ExitStatus.PROVIDER_ERROR
    assert "cannot reach the API" in result.error
    assert len(server.requests) == 2  # the first try and one retry


def test_a_400_is_not_retried(registry, server, tmp_path):
    server.replies += [error(400, "invalid_request_error", "tools.0: bad schema")]
    result, _ = run_task(anthropic(registry), tmp_path)
    assert result.exit_status == ExitStatus.PROVIDER_ERROR
    assert "bad schema" in result.error and len(server.requests) == 1


def test_a_413_is_the_requests_own_refusal_not_the_services(registry, server):
    """Found by an attacker: a CLI agent sent a request past the API's size limit, the
    API's 413 became a provider error, and the attempt left the score as an error. A 413
    is the request's own fault, as a 400 is: through the proxy the agent hears it."""
    server.replies += [error(413, "request_too_large", "Request exceeds the maximum size")]
    body = {"model": "m", "max_tokens": 10, "messages": [{"role": "user", "content": "hi"}]}
    request = evalctl.ModelRequest("", [], [], api_request=body)
    with pytest.raises(evalctl.RequestRejected, match="too large"):
        asyncio.run(anthropic(registry).complete(request))
    assert len(server.requests) == 1  # not retried


def test_malformed_json_is_a_provider_error(registry, server, tmp_path):
    server.replies += [(200, {"content-type": "application/json"}, b"{not json")]
    result, _ = run_task(anthropic(registry), tmp_path)
    assert result.exit_status == ExitStatus.PROVIDER_ERROR


_MESSAGE = {"id": "msg_01", "type": "message", "role": "assistant",
            "model": "claude-sonnet-4-6", "stop_reason": "end_turn", "stop_sequence": None,
            "usage": {"input_tokens": 10, "output_tokens": 5}}
_TEXT = [{"type": "text", "text": "hi"}]
_ODD_SHAPES = {  # what no API response holds, each with why it is refused
    "a list as a tool id": ({"stop_reason": "tool_use", "content": [
        {"type": "tool_use", "id": ["x"], "name": "read_file", "input": {}}]}, "tool call"),
    "a list as a tool's input": ({"stop_reason": "tool_use", "content": [
        {"type": "tool_use", "id": "t1", "name": "read_file", "input": [1]}]}, "tool call"),
    "a negative token count": ({"content": _TEXT, "usage": {
        "input_tokens": -1_000_000, "output_tokens": 5}}, "usage.input_tokens is -1000000"),
    "a token count no response has": ({"content": _TEXT, "usage": {
        "input_tokens": 10**30, "output_tokens": 5}}, "not a count of tokens"),
    "a fraction of a token": ({"content": _TEXT, "usage": {
        "input_tokens": 1.5, "output_tokens": 5}}, "usage.input_tokens is 1.5"),
    "a number as text": ({"content": [{"type": "text", "text": 7}]}, "text is not text"),
    "NaN in a block": ({"content": [{"type": "text", "text": "hi", "extra": float("nan")}]},
                       "cannot be recorded"),
    "a list as the stop reason": ({"stop_reason": ["end_turn"], "content": _TEXT},
                                  "stop_reason is not a short text"),
    "more tokens than a context window holds": ({"content": _TEXT, "usage": {
        "input_tokens": 10**9, "output_tokens": 10**9}}, "not a count of tokens"),
    "a model name of a megabyte": ({"model": "claude-" + "x" * 2**20, "content": _TEXT},
                                   "model is not a short text"),
    "a tool id of a megabyte": ({"stop_reason": "tool_use", "content": [
        {"type": "tool_use", "id": "t" * 2**20, "name": "read_file", "input": {}}]},
        "tool call"),
    "text as the content": ({"content": "hi"}, "content is str"),
}


@pytest.mark.parametrize("shape", list(_ODD_SHAPES))
def test_a_response_in_a_shape_the_api_never_sends_is_a_provider_error(
        registry, server, tmp_path, shape):
    """The SDK builds its objects without checking types: a tool id that is a list
    crashed the loop, a negative count made the attempt's cost negative, one of 10**30
    tokens made it 3e24 dollars (10**9 of them, at a costlier model's price the response
    named, 90,000), a megabyte of model name or tool id went into the ledger whole.
    Each is the provider's error now, saying why."""
    changes, why = _ODD_SHAPES[shape]
    server.replies += [(200, {"content-type": "application/json"},
                        json.dumps({**_MESSAGE, **changes}).encode())]
    result, _ = run_task(anthropic(registry), tmp_path)
    assert result.exit_status == ExitStatus.PROVIDER_ERROR
    assert "unusable response from the API" in result.error and why in result.error
    assert result.cost == 0 and len(server.requests) == 1


def test_context_overflow_is_recorded(registry, server, tmp_path):
    server.replies += [error(400, "invalid_request_error",
                             "prompt is too long: 250000 tokens > 200000 maximum")]
    result, _ = run_task(anthropic(registry), tmp_path)
    assert result.exit_status == ExitStatus.CONTEXT_OVERFLOW


@pytest.mark.parametrize("stop, status", [("max_tokens", ExitStatus.MAX_TOKENS),
                                          ("refusal", ExitStatus.REFUSED),
                                          ("model_context_window_exceeded",
                                           ExitStatus.CONTEXT_OVERFLOW)])
def test_stop_reasons_from_the_api(registry, server, tmp_path, stop, status):
    server.replies += [message([text_block("partial")], stop)]
    result, _ = run_task(anthropic(registry), tmp_path)
    assert result.exit_status == status


def test_pause_turn_sends_the_content_back_to_continue(registry, server, tmp_path):
    server.replies += [message([text_block("searching")], "pause_turn"),
                       message([text_block("Done.")], "end_turn")]
    result, _ = run_task(anthropic(registry), tmp_path)
    assert result.exit_status == ExitStatus.COMPLETED
    assert server.requests[1]["messages"][-1] == {"role": "assistant",
                                                  "content": [{"type": "text",
                                                               "text": "searching"}]}


def test_an_unknown_model_is_unpriced_not_free(registry, server, tmp_path):
    server.replies += [message([text_block("Done.")], "end_turn", model="claude-future-9")]
    result, _ = run_task(anthropic(registry, model="claude-future-9"), tmp_path)
    assert result.cost is None


def test_a_missing_api_key_is_a_clear_usage_error(registry, monkeypatch):
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    with pytest.raises(UsageError, match="ANTHROPIC_API_KEY"):
        registry.providers["anthropic"].create({})


def test_the_run_command_with_a_missing_key_exits_2_before_any_task(tmp_path, monkeypatch):
    from .conftest import SUITES

    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(cli, ["run", str(SUITES / "live.yaml"), "--provider",
                                      "anthropic"])
    assert result.exit_code == 2
    assert "ANTHROPIC_API_KEY" in result.output and "Traceback" not in result.output
    # The way out offline is the run's to offer; the provider does not know who asked.
    assert "to run offline without a model, use --scripted" in result.output
    assert not (tmp_path / "eval_reports").exists()


def test_a_live_run_end_to_end_against_the_loopback_server(server, tmp_path, monkeypatch):
    from .conftest import SUITES

    def reply(body):
        prompt = body["messages"][0]["content"]
        if len(body["messages"]) == 1 and "motto.txt" in prompt:
            return message([tool_use("toolu_9", "write_file", path="motto.txt",
                                     content="measure, then claim\n")], "tool_use")
        return message([text_block("Wrote motto.txt.")], "end_turn")

    server.replies += [reply, reply]
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(cli, ["run", str(SUITES / "live.yaml"), "--provider",
                                      "anthropic", "--model", "claude-haiku-4-5",
                                      "--only", "create-file", "--report", "out.json"])
    assert result.exit_code == 0, result.output
    report = json.loads((tmp_path / "out.json").read_text())
    assert report["provider"] == "anthropic" and report["model"] == "claude-haiku-4-5"
    assert report["summary"]["completion_rate"] == 1.0
    assert report["summary"]["cost"] > 0
    assert all(r["model"] == "claude-haiku-4-5" for r in server.requests)


def test_the_price_table_is_dated_and_well_formed():
    from datetime import date

    assert date.fromisoformat(anthropic_prices.PRICES_AS_OF)
    for prefix, price in anthropic_prices.PRICES.items():
        assert prefix.startswith("claude-")
        assert price.cache_read < price.input < price.cache_write < price.output
    assert anthropic_prices.price_for("claude-opus-4-1-20250805").input == 15.00
    assert anthropic_prices.price_for("claude-opus-4-5-20251101").input == 5.00
    assert anthropic_prices.price_for("gpt-5") is None


def test_create_provider_checks_and_types_the_options_as_a_run_does():
    import evalctl

    with pytest.raises(UsageError, match="provider 'scripted' has no option 'model'"):
        evalctl.create_provider("scripted", {"model": "gpt-4"})
    provider = evalctl.create_provider("scripted", {"latency": "0.5"})
    assert provider.latency == 0.5
    with pytest.raises(ValueError, match="options_schema must be an object schema"):
        evalctl.ProviderSpec(name="odd", create=lambda options: None,
                             options_schema={"type": "array"})
