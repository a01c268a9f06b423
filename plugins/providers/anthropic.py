"""The Anthropic provider: the official SDK's async client and the Messages API.

The SDK is imported when a provider is created, never at plugin load, so
`evalctl --help` and `list-plugins` stay fast and SDK-free.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Any

import evalctl

DEFAULT_MODEL = "claude-sonnet-4-6"
DEFAULT_MAX_TOKENS = 8192
DEFAULT_MAX_RETRIES = 4
CACHE = {"type": "ephemeral"}
_OVERFLOW_HINTS = ("prompt is too long", "context window", "context_window")
OPTIONS = {"type": "object", "properties": {
    "model": {"type": "string", "minLength": 1,
              "description": f"The model id (also --model; default {DEFAULT_MODEL})."},
    "max_tokens": {"type": "integer", "minimum": 1,
                   "description": f"Most output tokens per turn (default {DEFAULT_MAX_TOKENS})."},
    "max_retries": {"type": "integer", "minimum": 0,
                    "description": f"Retries of a transient failure (default "
                                   f"{DEFAULT_MAX_RETRIES})."},
    "timeout": {"type": "number", "exclusiveMinimum": 0,
                "description": "Seconds per request (default 600)."},
    "temperature": {"type": "number", "minimum": 0, "maximum": 1},
    "base_url": {"type": "string", "minLength": 1,
                 "description": "The API's URL (default: ANTHROPIC_BASE_URL, else the SDK's)."},
}}
RATE_LIMITED = (429, 529)  # rate limited, overloaded


def _retry_after(exc: Any) -> float | None:
    """The seconds a refusal's retry-after(-ms) header asks for, if it gives a number."""
    headers = getattr(getattr(exc, "response", None), "headers", None) or {}
    for name, scale in (("retry-after-ms", 1000.0), ("retry-after", 1.0)):
        try:
            return float(headers[name]) / scale
        except (KeyError, TypeError, ValueError):
            continue
    return None


def to_api_messages(messages: list[evalctl.Message]) -> list[dict[str, Any]]:
    """The kernel's conversation as Messages API messages.

    Assistant content goes back verbatim; tool results are `tool_result` blocks, one
    per `tool_use`, first (here: only) in the next user message.
    """
    out: list[dict[str, Any]] = []
    for message in messages:
        if isinstance(message, evalctl.UserMessage):
            out.append({"role": "user", "content": message.text})
        elif isinstance(message, evalctl.AssistantMessage):
            # Verbatim but for text blocks of nothing but whitespace, which the API
            # refuses in a request: a model's own " \n" made its next request a 400.
            content = [block for block in message.turn.raw_content or ()
                       if not _blank_text(block)]
            out.append({"role": "assistant", "content": content or
                        [{"type": "text", "text": message.turn.text.strip() or "(no text)"}]})
        else:
            out.append({"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": r.call_id, "content": r.content,
                 "is_error": r.is_error} for r in message.results]})
    return out


def _blank_text(block: Any) -> bool:
    return isinstance(block, dict) and block.get("type") == "text" and \
        isinstance(block.get("text"), str) and not block["text"].strip()


def _wire_safe(value: Any) -> Any:
    """`value` with each string that UTF-8 cannot hold (a lone surrogate) escaped."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return value.encode("utf-8", "backslashreplace").decode("utf-8")
        return value
    if isinstance(value, dict):
        return {_wire_safe(key): _wire_safe(inner) for key, inner in value.items()}
    if isinstance(value, list):
        return [_wire_safe(inner) for inner in value]
    return value


def to_api_tools(tools: list[evalctl.ToolDefinition]) -> list[dict[str, Any]]:
    api_tools = [{"name": t.name, "description": t.description,
                  "input_schema": dict(t.input_schema)} for t in tools]
    if api_tools:
        api_tools[-1]["cache_control"] = CACHE  # caches every tool definition before it
    return api_tools


class AnthropicProvider:
    def __init__(self, client: Any, model: str, max_tokens: int,
                 extra: Mapping[str, Any] | None = None):
        self.client = client
        self.model = model
        self.max_tokens = max_tokens
        self.extra = dict(extra or {})

    async def aclose(self) -> None:
        await self.client.close()

    async def _forward(self, body: Mapping[str, Any]) -> Any:
        """The agent's own request, streamed (a CLI agent asks for up to 64k output
        tokens, which the SDK refuses to wait for without a stream), as one message."""
        async with self.client.beta.messages.stream(**forwarded_request(body, self.model)) \
                as stream:
            return await stream.get_final_message()

    async def _create(self, request: evalctl.ModelRequest,
                      messages: list[dict[str, Any]]) -> Any:
        return await self.client.messages.create(
            model=self.model,
            max_tokens=self.max_tokens,
            system=[{"type": "text", "text": request.system, "cache_control": CACHE}],
            tools=to_api_tools(request.tools),
            messages=messages,
            **self.extra,
        )

    async def complete(self, request: evalctl.ModelRequest) -> evalctl.ModelTurn:
        import anthropic

        from evalctl.plugins.providers.anthropic_prices import cost_of

        try:
            if request.api_request is not None:
                response = await self._forward(request.api_request)
            else:
                messages = to_api_messages(request.messages)
                try:
                    response = await self._create(request, messages)
                except UnicodeEncodeError:
                    # A lone surrogate (a model's own, echoed back) cannot be sent as
                    # UTF-8: it goes as its escape, on the wire only; the record keeps it.
                    response = await self._create(request, _wire_safe(messages))
        except anthropic.BadRequestError as exc:
            if any(hint in str(exc).lower() for hint in _OVERFLOW_HINTS):
                return evalctl.ModelTurn(stop_reason=evalctl.StopReason.CONTEXT_OVERFLOW,
                                         cost=0.0, model=self.model)
            raise evalctl.RequestRejected(f"the API rejected the request: {exc}") from None
        except anthropic.APIStatusError as exc:
            if exc.status_code == 413:  # the request's own size: as much the agent's as a 400
                raise evalctl.RequestRejected(
                    f"the API rejected the request as too large: {exc.message}") from None
            if exc.status_code in RATE_LIMITED:  # the run backs off and asks again
                raise evalctl.RateLimited(f"HTTP {exc.status_code} after retries: {exc.message}",
                                          retry_after=_retry_after(exc)) from None
            raise evalctl.ProviderError(
                f"HTTP {exc.status_code} after retries: {exc.message}") from None
        except anthropic.APIConnectionError as exc:
            raise evalctl.ProviderError(f"cannot reach the API after retries: {exc}") from None
        except (anthropic.AnthropicError, ValueError) as exc:
            raise evalctl.ProviderError(f"unusable response from the API: {exc}") from None

        unusable = _unusable(response)
        if unusable is None:
            raw_content = [block.model_dump(exclude_none=True) for block in response.content]
            unusable = _unrecordable(raw_content)
        if unusable is not None:
            raise evalctl.ProviderError(f"unusable response from the API: {unusable}")
        text_parts: list[str] = []
        calls: list[evalctl.ToolCall] = []
        for block in response.content:
            if block.type == "text":
                text_parts.append(block.text)
            elif block.type == "tool_use":
                calls.append(evalctl.ToolCall(block.id, block.name, dict(block.input or {})))
        raw = response.usage
        usage = evalctl.TokenUsage(
            input_tokens=raw.input_tokens or 0,
            output_tokens=raw.output_tokens or 0,
            cache_read_tokens=getattr(raw, "cache_read_input_tokens", None) or 0,
            cache_write_tokens=getattr(raw, "cache_creation_input_tokens", None) or 0,
        )
        stop = response.stop_reason or evalctl.StopReason.END_TURN
        if stop == "stop_sequence":
            stop = evalctl.StopReason.END_TURN
        model = response.model or self.model
        # Server tools (web search, web fetch...) are billed apart from tokens, and the
        # price table has no rows for them: a turn that used any has no known cost, never
        # the tokens' alone (an under-count a cost limit would not see).
        # Likewise a turn billed at rates the table does not hold (an hour's cache write,
        # a priority or fast tier, a long-context beta a proxied agent asked for).
        cost = cost_of(model, usage) if server_tool_calls(raw) == 0 and \
            not _priced_apart(request.api_request, raw) else None
        return evalctl.ModelTurn(
            text="\n".join(text_parts),
            tool_calls=calls,
            stop_reason=stop,
            usage=usage,
            cost=cost,
            model=model,
            raw_content=raw_content,
        )


# More tokens than any response could count (ten times the largest context window): a
# larger count is a broken response, and would make the attempt's cost whatever it says.
MAX_TOKEN_COUNT = 10_000_000
# Longer than any model name or tool id the API sends: such a text would be written to
# the ledger (and an id sent back with every later request) whole.
MAX_NAME_LENGTH = 256


# Betas and request fields that bill a call at other rates than the price table's
# (found by an attacker round: a proxied agent's hour-long cache writes and fast mode were
# priced at the standard rates, under its cost limit).
_PRICED_APART_BETAS = ("context-1m", "fast-mode")
_PRICED_APART_FIELDS = ("speed", "service_tier", "inference_geo")


def _priced_apart(body: Mapping[str, Any] | None, usage: Any) -> bool:
    """Whether a turn was billed at rates the price table does not hold: its usage says
    so (cache writes kept an hour, a tier other than standard), or a proxied request
    asked for it (a field or beta that changes the rate)."""
    creation = getattr(usage, "cache_creation", None)
    hour = getattr(creation, "ephemeral_1h_input_tokens", None) if creation is not None \
        else None
    if hour:
        return True
    tier = getattr(usage, "service_tier", None)
    if tier not in (None, "standard"):
        return True
    if body is None:
        return False
    if any(body.get(name) not in (None, "auto", "standard_only", "standard")
           for name in _PRICED_APART_FIELDS):
        return True
    betas = body.get("betas") if isinstance(body.get("betas"), list) else []
    if any(isinstance(b, str) and any(part in b for part in _PRICED_APART_BETAS)
           for b in betas):
        return True
    return '"ttl": "1h"' in json.dumps(body.get("system"), default=str) + \
        json.dumps(body.get("messages"), default=str) + json.dumps(body.get("tools"),
                                                                   default=str)


def server_tool_calls(usage: Any) -> int | None:
    """How many server-side tool calls a response's usage reports (`server_tool_use`:
    web searches, web fetches, and whatever the API counts there later), 0 when none;
    None when the counts are not counts, which is as unpriced as any."""
    used = getattr(usage, "server_tool_use", None)
    if used is None:
        return 0
    # The SDK's object, read as it holds the counts (its fields and any it does not know
    # yet): serializing it would warn about a count that is not one.
    counts = used if isinstance(used, Mapping) else \
        dict(used) if hasattr(type(used), "model_fields") else None
    if not isinstance(counts, Mapping):
        return None
    total = 0
    for count in counts.values():
        if count is None:
            continue
        if isinstance(count, bool) or not isinstance(count, int) or count < 0:
            return None
        total += count
    return total


def _unusable(response: Any) -> str | None:
    """Why a response the SDK parsed is not one the API sends, or None. The SDK builds
    its objects from the JSON without checking the types, so an endpoint's odd answer
    (a list as a tool id, a negative token count, NaN in a block) would otherwise end
    the attempt as an internal error, or set its cost."""
    content = response.content
    if not isinstance(content, list):
        return f"content is {type(content).__name__}, not a list"
    for index, block in enumerate(content):
        kind = getattr(block, "type", None)
        if not isinstance(kind, str):
            return f"content[{index}] has no type"
        if kind == "text" and not isinstance(block.text, str):
            return f"content[{index}].text is not text"
        if kind == "tool_use" and not (
                isinstance(block.id, str) and 0 < len(block.id) <= MAX_NAME_LENGTH
                and isinstance(block.name, str) and len(block.name) <= MAX_NAME_LENGTH
                and isinstance(block.input, dict | None)):
            return f"content[{index}] is a tool call without a short text id and name, " \
                   "or whose input is not an object"
    for name in ("input_tokens", "output_tokens", "cache_read_input_tokens",
                 "cache_creation_input_tokens"):
        count = getattr(response.usage, name, None)
        if count is not None and (isinstance(count, bool) or not isinstance(count, int)
                                  or not 0 <= count <= MAX_TOKEN_COUNT):
            return f"usage.{name} is {str(count)[:40]}, not a count of tokens"
    for name in ("stop_reason", "model"):
        value = getattr(response, name, None)
        if not isinstance(value, str | None) or len(value or "") > MAX_NAME_LENGTH:
            return f"{name} is not a short text"
    return None


def _unrecordable(raw_content: list[Any]) -> str | None:
    """Why the content blocks cannot be kept in the ledger as JSON (NaN, say), or None."""
    import json

    try:
        json.dumps(raw_content, allow_nan=False)
    except (TypeError, ValueError) as exc:
        return f"a content block cannot be recorded ({exc})"
    return None


FORWARDED_AS_PARAMS = ("max_tokens", "messages")


def forwarded_request(body: Mapping[str, Any], model: str) -> dict[str, Any]:
    """A CLI agent's request (through evalctl's model proxy) as SDK arguments: the run's
    model instead of the agent's (both sides of a comparison use the model the run
    names), its `anthropic-beta` values (`betas`) as the SDK's, and every other field of
    the body as it is (`extra_body`), so fields this SDK does not know still reach the
    API. What would have the API act outside the agent's sandbox (server tools, MCP
    servers, data by URL) the proxy refused before the request got here."""
    rest = {k: v for k, v in body.items() if k not in ("model", "stream", "betas",
                                                        *FORWARDED_AS_PARAMS)}
    arguments: dict[str, Any] = {"model": model, "max_tokens": body.get("max_tokens", 1024),
                                 "messages": body.get("messages", [])}
    if body.get("betas"):
        arguments["betas"] = list(body["betas"])
    if rest:
        arguments["extra_body"] = rest
    return arguments


def create(options: Mapping[str, Any]) -> AnthropicProvider:
    api_key = os.environ.get("ANTHROPIC_API_KEY")
    if not api_key:
        # No advice beyond the key: a judge asks for this provider too, where running the
        # agent offline would not help; `evalctl run` adds that advice for the agent.
        raise evalctl.UsageError(
            "the anthropic provider needs ANTHROPIC_API_KEY in the environment")
    import anthropic

    def number(name: str, default: float, kind: type = int) -> Any:
        try:
            return kind(options.get(name, default))
        except (TypeError, ValueError):
            raise evalctl.UsageError(f"anthropic provider: {name} must be a number") from None

    client = anthropic.AsyncAnthropic(
        api_key=api_key,
        base_url=options.get("base_url") or os.environ.get("ANTHROPIC_BASE_URL") or None,
        max_retries=number("max_retries", DEFAULT_MAX_RETRIES),
        timeout=number("timeout", 600.0, float),
    )
    extra = {}
    if "temperature" in options:
        extra["temperature"] = number("temperature", 1.0, float)
    return AnthropicProvider(client, options.get("model") or DEFAULT_MODEL,
                             number("max_tokens", DEFAULT_MAX_TOKENS), extra)


@evalctl.hookimpl
def evalctl_register_providers(register):
    register(evalctl.ProviderSpec(
        name="anthropic",
        create=create,
        description="Claude through the official anthropic SDK. Needs ANTHROPIC_API_KEY. "
                    "Options: model, max_tokens, max_retries, timeout, temperature, base_url.",
        default_concurrency=4,
        options_schema=OPTIONS,
    ))
