"""The model proxy, through the real anthropic SDK: over its Unix socket, and over
127.0.0.1 through the forwarder that runs inside a sandbox. No other network."""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anthropic
import pytest

try:  # the HTTP client the installed anthropic SDK is built on
    import httpx2 as httpx
except ImportError:  # older SDKs
    import httpx  # type: ignore[no-redef]

import evalctl
from evalctl._agent.ledger import Ledger, ledger_spend, read_events
from evalctl._agent.proxy import (
    SOCKET_NAME,
    TOKEN_PREFIX,
    ModelProxy,
    forwarder_source,
    to_model_request,
)
from evalctl._agent.throttle import CallThrottle, ModelCalls
from evalctl._plugin.types import (
    AgentLimits,
    AssistantMessage,
    ModelTurn,
    TokenUsage,
    ToolResultsMessage,
    UserMessage,
)
from evalctl.plugins.providers.scripted import ScriptedProvider

WRITE_TURN = {"text": "Writing it.", "tool_calls": [
    {"tool": "Write", "input": {"file_path": "hello.txt", "content": "hello\n"}}],
    "usage": {"input_tokens": 120, "output_tokens": 30, "cache_read_tokens": 40,
              "cache_write_tokens": 7}, "cost": 0.25}
DONE_TURN = {"text": "Wrote hello.txt.", "usage": {"input_tokens": 150, "output_tokens": 5},
             "cost": 0.25}
TOOLS = [{"name": "Write", "description": "Write a file.", "input_schema": {
    "type": "object", "properties": {"file_path": {"type": "string"},
                                     "content": {"type": "string"}}}}]
FIRST = [{"role": "user", "content": "Write hello.txt"}]


def second(first_reply: Any) -> list[dict[str, Any]]:
    """The conversation after the first reply and its tool's result."""
    call = next(b for b in first_reply.content if b.type == "tool_use")
    return [*FIRST,
            {"role": "assistant", "content": [b.model_dump(exclude_none=True)
                                              for b in first_reply.content]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call.id,
                                          "content": "written"}]}]


class Harness:
    """A ModelProxy for one attempt (the scripted provider unless one is given), and SDK
    clients that talk to it over its socket."""

    def __init__(self, tmp_path: Path, script: list[dict[str, Any]], turns: int = 10,
                 cost: float | None = None, *, provider: Any = None,
                 prompt: str = "Write hello.txt"):
        self.ledger_path = tmp_path / "ledger.jsonl"
        self.ledger = Ledger(self.ledger_path)
        self.socket = tmp_path / SOCKET_NAME
        self.proxy = ModelProxy(provider or ScriptedProvider(), self.ledger,
                                AgentLimits(turns, 60, cost),
                                {"id": "t", "prompt": prompt, "agent_script": script},
                                self.socket)

    def client(self, token: str | None = None, via: Path | None = None
               ) -> anthropic.AsyncAnthropic:
        transport = httpx.AsyncHTTPTransport(uds=str(via or self.socket))
        return anthropic.AsyncAnthropic(
            api_key=token or self.proxy.token, base_url="http://evalctl-proxy",
            max_retries=0, http_client=httpx.AsyncClient(transport=transport))

    def run(self, body) -> Any:
        async def main():
            await self.proxy.start()
            try:
                return await body(self)
            finally:
                await self.proxy.close()
                self.ledger.close()
        return asyncio.run(main())

    def events(self, kind: str) -> list[dict[str, Any]]:
        return [e for e in read_events(self.ledger_path) if e["event"] == kind]


def create(client: anthropic.AsyncAnthropic, messages: list[dict[str, Any]], **extra: Any):
    return client.messages.create(model="claude-test", max_tokens=100, tools=TOOLS,
                                  messages=messages, **extra)


def test_a_tool_turn_then_a_final_turn_through_the_sdk(tmp_path):
    harness = Harness(tmp_path, [WRITE_TURN, DONE_TURN])

    async def body(h):
        client = h.client()
        first = await create(client, FIRST)
        final = await create(client, second(first))
        return first, final

    first, final = harness.run(body)
    assert first.stop_reason == "tool_use"
    assert [b.type for b in first.content] == ["text", "tool_use"]
    assert first.content[1].name == "Write"
    assert first.content[1].input == {"file_path": "hello.txt", "content": "hello\n"}
    assert (first.usage.input_tokens, first.usage.output_tokens,
            first.usage.cache_read_input_tokens, first.usage.cache_creation_input_tokens) == \
        (120, 30, 40, 7)
    assert final.stop_reason == "end_turn" and final.content[0].text == "Wrote hello.txt."
    turns = harness.events("model_turn")
    assert [t["turn"] for t in turns] == [1, 2]
    assert turns[0]["tool_calls"][0]["name"] == "Write"
    assert turns[0]["via"] == "proxy" and turns[0]["requested_model"] == "claude-test"
    counted = harness.proxy.model_calls  # the totals, kept in memory as turns came back
    assert counted.turns == 2 and counted.cost == pytest.approx(0.5)
    assert counted.usage == TokenUsage(270, 35, 40, 7)
    usage, cost = ledger_spend(harness.ledger_path)  # and the ledger records the same
    assert cost == pytest.approx(0.5) and usage == TokenUsage(270, 35, 40, 7)
    assert harness.proxy.tool_calls == 1 and harness.proxy.final_text == "Wrote hello.txt."


def test_a_stream_carries_the_same_message_as_server_sent_events(tmp_path):
    harness = Harness(tmp_path, [WRITE_TURN, DONE_TURN])

    async def body(h):
        client = h.client()
        plain = await create(client, FIRST)
        kinds = []
        async with client.messages.stream(model="claude-test", max_tokens=100, tools=TOOLS,
                                          messages=FIRST) as stream:
            async for event in stream:
                kinds.append(event.type)
            streamed = await stream.get_final_message()
        return plain, streamed, kinds

    plain, streamed, kinds = harness.run(body)
    assert [b.model_dump() for b in streamed.content] == [b.model_dump() for b in plain.content]
    assert streamed.usage.model_dump() == plain.usage.model_dump()
    assert streamed.stop_reason == "tool_use"
    raw = [k for k in kinds if k not in ("text", "input_json")]  # the SDK's own helpers
    assert raw == ["message_start", "content_block_start", "content_block_delta",
                   "content_block_stop", "content_block_start", "content_block_delta",
                   "content_block_stop", "message_delta", "message_stop"]
    assert [e["stream"] for e in harness.events("model_turn")] == [False, True]


def test_a_wrong_token_is_refused_and_nothing_is_served(tmp_path):
    harness = Harness(tmp_path, [DONE_TURN])

    async def body(h):
        with pytest.raises(anthropic.AuthenticationError):
            await create(h.client(token=TOKEN_PREFIX + "0" * 32), FIRST)

    harness.run(body)
    assert harness.events("model_turn") == []
    assert harness.proxy.token.startswith(TOKEN_PREFIX)


def test_the_turn_limit_refuses_the_next_call_and_stops_the_attempt(tmp_path):
    harness = Harness(tmp_path, [WRITE_TURN, DONE_TURN], turns=1)

    async def body(h):
        client = h.client()
        first = await create(client, FIRST)
        with pytest.raises(anthropic.PermissionDeniedError, match="turn limit"):
            await create(client, second(first))

    harness.run(body)
    assert harness.proxy.stop_status == "max_turns"
    assert harness.proxy.stopped.is_set()
    assert len(harness.events("model_turn")) == 1
    assert harness.events("limit") == [{**harness.events("limit")[0], "limit": "turns",
                                        "value": 1}]


def test_the_cost_limit_refuses_the_call_after_the_one_that_went_over(tmp_path):
    over = {**WRITE_TURN, "cost": 0.6}
    harness = Harness(tmp_path, [over, DONE_TURN], cost=0.5)

    async def body(h):
        client = h.client()
        first = await create(client, FIRST)  # served: its cost is known only afterwards
        with pytest.raises(anthropic.PermissionDeniedError, match="cost limit"):
            await create(client, second(first))

    harness.run(body)
    assert harness.proxy.stop_status == "cost_limit"
    assert "spent $0.6000" in harness.proxy.stop_error
    assert len(harness.events("model_turn")) == 1


def test_a_request_past_the_agents_script_is_refused_and_the_attempt_goes_on(tmp_path):
    """Found by an attacker: a CLI agent that asked for one turn more than its
    agent_script held ended its attempt as script_error, an error left out of the score,
    for a task whose check failed. How many requests it sends is the agent's doing: it
    hears the refusal, as from the API, and the attempt is graded."""
    harness = Harness(tmp_path, [])  # the script has no turn to serve

    async def body(h):
        with pytest.raises(anthropic.BadRequestError, match="has 0 turn"):
            await create(h.client(), FIRST)

    harness.run(body)
    assert harness.proxy.stop_status is None and not harness.proxy.stopped.is_set()
    assert "agent_script of task 't' has 0 turn(s)" in \
        harness.events("request_rejected")[0]["error"]
    assert harness.events("provider_error") == []


def test_a_provider_error_ends_the_attempt_with_its_status(tmp_path):
    class Down:
        async def complete(self, request):
            raise evalctl.ProviderError("the service is down", status="provider_error")

    harness = Harness(tmp_path, [])
    harness.proxy.model_calls = ModelCalls(Down(), harness.ledger)

    async def body(h):
        with pytest.raises(anthropic.InternalServerError):
            await create(h.client(), FIRST)

    harness.run(body)
    assert harness.proxy.stop_status == "provider_error"
    assert "the service is down" in harness.events("provider_error")[0]["error"]


class RefusesOnce:
    """A service that refuses the first request as invalid (HTTP 400), then serves."""

    def __init__(self):
        self.calls = 0

    async def complete(self, request):
        self.calls += 1
        if self.calls == 1:
            raise evalctl.RequestRejected("the API rejected the request: max_tokens: -1")
        return ModelTurn(text="Done.", usage=TokenUsage(10, 5), cost=0.25)


def test_a_request_the_service_refuses_is_the_agents_and_the_attempt_goes_on(tmp_path):
    """Found by an attacker: a model driving a CLI agent sent a malformed request through
    the proxy (max_tokens -1), the API's 400 ended the attempt as a provider error, and
    the attempt was out of the score. The agent now gets the 400, as from the API."""
    harness = Harness(tmp_path, [])
    harness.proxy.model_calls = ModelCalls(RefusesOnce(), harness.ledger)

    async def body(h):
        with pytest.raises(anthropic.BadRequestError, match="max_tokens: -1"):
            await create(h.client(), FIRST)
        return await create(h.client(), FIRST)

    reply = harness.run(body)
    assert reply.content[0].text == "Done."
    assert harness.proxy.stop_status is None and not harness.proxy.stopped.is_set()
    assert "max_tokens: -1" in harness.events("request_rejected")[0]["error"]
    assert harness.events("provider_error") == []


def test_a_flood_of_idle_connections_is_refused_past_a_bound(tmp_path, monkeypatch):
    """Found by an attacker: a CLI agent held 20,000 idle connections to its proxy, each
    a descriptor of evalctl's, and other attempts' graders failed ("Too many open
    files"). Past MAX_CONNECTIONS a connection is closed at once; one that sends no
    whole request in REQUEST_SECONDS is answered 408 and closed."""
    import socket as sockets

    import evalctl._agent.proxy as proxy

    monkeypatch.setattr(proxy, "REQUEST_SECONDS", 0.5)
    harness = Harness(tmp_path, [{"text": "Done."}])

    async def body(h):
        loop = asyncio.get_running_loop()
        idle = []
        for _ in range(proxy.MAX_CONNECTIONS + 8):
            client = sockets.socket(sockets.AF_UNIX, sockets.SOCK_STREAM)
            client.setblocking(False)
            await loop.sock_connect(client, str(h.socket))
            idle.append(client)
        await asyncio.sleep(0.2)
        served = [len(h.proxy._connections)]
        refused = 0
        for client in idle[proxy.MAX_CONNECTIONS:]:
            refused += await asyncio.wait_for(loop.sock_recv(client, 100), 5) == b""
        answers = [await asyncio.wait_for(loop.sock_recv(client, 100), 5)
                   for client in idle[:proxy.MAX_CONNECTIONS]]
        for client in idle:
            client.close()
        return served, refused, answers, await create(h.client(), FIRST)

    served, refused, answers, reply = harness.run(body)
    assert served == [proxy.MAX_CONNECTIONS] and refused == 8
    assert all(answer.startswith(b"HTTP/1.1 408") for answer in answers), answers[:2]
    assert reply.content[0].text == "Done."


def test_a_body_that_could_not_be_sent_upstream_is_refused_as_the_api_would(tmp_path):
    """Found by an attacker: a request holding NaN or 1e999, a lone surrogate escape, a
    `betas` field or a beta header with a newline failed inside the SDK and ended the
    attempt as a provider error. Each is now the agent's 400, and the attempt goes on."""
    harness = Harness(tmp_path, [{"text": "Done."}])
    good = b'{"model": "m", "max_tokens": 10, "messages": [{"role": "user", "content": "hi"}]'
    bodies = [(good + b', "temperature": NaN}', {}), (good + b', "temperature": 1e999}', {}),
              (good + b', "metadata": {"user_id": "\\ud800"}}', {}),
              (good + b', "betas": 5}', {}),
              (good + b"}", {"anthropic-beta": "a\tb"})]

    async def body(h):
        transport = httpx.AsyncHTTPTransport(uds=str(h.socket))
        async with httpx.AsyncClient(transport=transport) as client:
            statuses = []
            for content, headers in bodies:
                answer = await client.post("http://proxy/v1/messages", content=content,
                                           headers={"x-api-key": h.proxy.token, **headers})
                statuses.append((answer.status_code,
                                 answer.json().get("error", {}).get("type", answer.text)))
        return statuses, await create(h.client(), FIRST)

    statuses, reply = harness.run(body)
    assert statuses == [(400, "invalid_request_error")] * len(bodies), statuses
    assert reply.content[0].text == "Done."
    assert harness.proxy.stop_status is None and harness.events("provider_error") == []


class BusyOnce:
    """A service that is rate limited on its first call, then serves."""

    def __init__(self):
        self.calls = 0

    async def complete(self, request):
        self.calls += 1
        if self.calls == 1:
            raise evalctl.RateLimited("HTTP 429: slow down", retry_after=0.01)
        return ModelTurn(text="Done.", usage=TokenUsage(10, 5), cost=0.25)


def test_a_cli_agents_calls_go_through_the_run_throttle_and_budget(tmp_path):
    # The proxy's calls are the attempt's ModelCalls: a rate limit is waited out and
    # asked again (the run's concurrency lowered), each turn is charged as it arrives.
    harness = Harness(tmp_path, [])
    spent: list[tuple[TokenUsage, float | None]] = []
    throttle = CallThrottle(4)
    harness.proxy.model_calls = ModelCalls(BusyOnce(), harness.ledger, throttle,
                                           lambda usage, cost: spent.append((usage, cost)))

    async def body(h):
        return await create(h.client(), FIRST)

    reply = harness.run(body)
    assert reply.content[0].text == "Done." and reply.usage.input_tokens == 10
    assert [w["concurrency"] for w in harness.events("rate_limited")] == [2]
    assert throttle.lowest == 2
    assert spent == [(TokenUsage(10, 5), 0.25)]
    assert (harness.proxy.model_calls.turns, harness.proxy.cost) == (1, 0.25)


def test_other_paths_are_not_served_and_count_tokens_is_an_estimate(tmp_path):
    harness = Harness(tmp_path, [DONE_TURN])

    async def body(h):
        client = h.client()
        with pytest.raises(anthropic.NotFoundError):
            await client.models.list()
        counted = await client.messages.count_tokens(model="claude-test", messages=FIRST)
        return counted

    counted = harness.run(body)
    assert counted.input_tokens > 0
    assert harness.events("model_turn") == []  # counting is not a turn


def test_through_the_forwarder_on_127_0_0_1(tmp_path):
    """The forwarder as a sandbox runs it (here: a plain child process), the SDK pointed
    at http://127.0.0.1:PORT as a CLI agent is."""
    harness = Harness(tmp_path, [DONE_TURN])

    async def body(h):
        async with through_the_forwarder(h, tmp_path) as client, \
                client.messages.stream(model="m", max_tokens=10, messages=FIRST) as stream:
            return await stream.get_final_message()

    reply = harness.run(body)
    assert reply.content[0].text == "Wrote hello.txt."


@contextlib.asynccontextmanager
async def through_the_forwarder(h: Any, directory: Path) -> AsyncIterator[Any]:
    """An SDK client of the proxy through the forwarder a CLI agent's sandbox runs,
    on 127.0.0.1 (the forwarder stopped after)."""
    script = directory / "forwarder.py"
    script.write_text(forwarder_source())
    child = await asyncio.create_subprocess_exec(
        sys.executable, str(script), str(h.socket), stdout=subprocess.PIPE)
    try:
        port = int(await asyncio.wait_for(child.stdout.readline(), 20))
        yield anthropic.AsyncAnthropic(api_key=h.proxy.token, max_retries=0,
                                       base_url=f"http://127.0.0.1:{port}")
    finally:
        child.kill()
        await asyncio.wait_for(child.wait(), 10)


def test_a_long_socket_path_is_bound_through_its_directory(tmp_path):
    deep = tmp_path / ("d" * 60) / ("e" * 60)
    deep.mkdir(parents=True)
    harness = Harness(deep, [DONE_TURN])
    assert len(str(harness.socket)) > 108
    (tmp_path / "short").symlink_to(deep)  # a client needs a short path too

    async def body(h):
        return await create(h.client(via=tmp_path / "short" / SOCKET_NAME), FIRST)

    assert harness.run(body).content[0].text == "Wrote hello.txt."


def test_the_request_becomes_the_kernels_conversation():
    body = {"model": "m", "max_tokens": 5,
            "system": [{"type": "text", "text": "You are Claude Code."},
                       {"type": "text", "text": "Be brief."}],
            "tools": TOOLS,
            "messages": [
                {"role": "user", "content": [{"type": "text", "text": "Fix it"}]},
                {"role": "assistant", "content": [
                    {"type": "thinking", "thinking": "hmm", "signature": "s"},
                    {"type": "tool_use", "id": "toolu_1", "name": "Write", "input": {"a": 1}}]},
                {"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": "toolu_1", "is_error": True,
                     "content": [{"type": "text", "text": "denied"}]},
                    {"type": "text", "text": "<system-reminder>go on</system-reminder>"}]}]}
    request = to_model_request(body, {"id": "t"})
    assert request.system == "You are Claude Code.\nBe brief."
    assert [t.name for t in request.tools] == ["Write"]
    assert request.turn_index == 1
    user, assistant, results, reminder = request.messages
    assert user == UserMessage("Fix it")
    assert isinstance(assistant, AssistantMessage)
    assert assistant.turn.tool_calls[0].arguments == {"a": 1}
    assert assistant.turn.raw_content[0]["type"] == "thinking"  # replayed verbatim
    assert isinstance(results, ToolResultsMessage)
    assert results.results[0].is_error and results.results[0].content == "denied"
    assert reminder == UserMessage("<system-reminder>go on</system-reminder>")
    assert request.api_request == body
    assert isinstance(assistant.turn, ModelTurn)
