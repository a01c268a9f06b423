"""The model proxy: the Anthropic Messages API, served to a CLI agent for one attempt.

It listens on a Unix socket in the attempt's TMPDIR (the sandbox mounts that directory,
and a forwarder inside turns it into http://127.0.0.1:PORT), accepts only the attempt's
own token (the real API key never enters the sandbox), and answers each call through the
run's provider: the request is translated into a `ModelRequest` (its raw body rides
along, for providers that can forward it as it is), the `ModelTurn` back into a Messages
API response, streamed as server-sent events when the agent asked for a stream. Every
call goes through the attempt's `ModelCalls`, as the built-in loop's do: the run's
throttle (rate limits), its budget (each turn's spend), and turns, tokens, cache reads and
writes and cost counted in memory the same way; it is written to the task's ledger exactly
as the built-in loop writes its turns (the audit trail, never read back). The task's turn
and cost limits refuse further calls and end the attempt (under a cost limit its calls are
made one at a time, so that each is refused once the spend is over). A request that asks
the API for more than the model (server tools, MCP servers, data fetched by URL) is refused:
the socket is the sandbox's only way out, and it leads to the model only.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import json
import os
import re
import secrets
import socket
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from evalctl._agent.cassette import content_blocks
from evalctl._agent.ledger import LEDGER_TEXT_LIMIT, Ledger
from evalctl._agent.throttle import ModelCalls
from evalctl._errors import ProviderError, RequestRejected, describe_crash, stops_the_run
from evalctl._plugin.types import (
    AgentLimits,
    AssistantMessage,
    ExitStatus,
    Message,
    ModelRequest,
    ModelTurn,
    TokenUsage,
    ToolCall,
    ToolDefinition,
    ToolResult,
    ToolResultsMessage,
    UserMessage,
)
from evalctl._text import truncate

SOCKET_NAME = "evalctl-model.sock"
TOKEN_PREFIX = "evalctl-task-"
MAX_HEADER_LINES = 200
MAX_HEAD_BYTES = 64 * 1024  # a request line and headers, together
# What a request may be, and what one attempt's proxy may hold. Every byte of a request
# is held in evalctl's own process, outside the sandbox's memory limit, and its JSON is
# parsed on the event loop every attempt shares (found by an attacker round: 32
# connections of 64 MB held 2 GB for one attempt, and a 64 MB body of `[],[],...` parsed
# to 1.6 GB and held the loop 6-8 s, so that other attempts overran their time).
#
# A body: 8 MB. A Messages request is the conversation so far, tool results included:
# a whole context of 200,000 tokens is under 1 MB of text, one of 1,000,000 about 4 MB,
# and the tools' schemas add tens of kilobytes. (The API's own limit, 32 MB, is for
# images and documents sent inline.) A larger one is answered 413 request_too_large.
MAX_BODY_BYTES = 8 * 1024 * 1024
# JSON values in a body (strings, keys included, numbers, arrays, objects), counted
# before it is parsed: each costs up to VALUE_BYTES once parsed, where its text may be
# two bytes (`[],`), and parsing 500,000 takes tens of milliseconds. A conversation
# holds about one value for every 15 bytes at its densest (many short tool calls), so a
# whole context of 1,000,000 tokens holds under 300,000. Past it: 413.
MAX_JSON_VALUES = 500_000
VALUE_BYTES = 100
# What one attempt's requests may hold at once, received and parsed (each counted as
# twice its body, the bytes and the text parsed from them, plus VALUE_BYTES a value):
# a request waits, before its body is read, until the attempt's earlier ones leave it
# room (its bytes meanwhile stay in the sandbox). The largest request fits alone.
MAX_ATTEMPT_BYTES = 64 * 1024 * 1024
# A request refused before its body is read (too large, a wrong key, a path not served)
# has its body read and dropped, up to this much, so the agent hears the answer (a
# client still sending would see its connection reset instead).
MAX_DRAINED_BYTES = 32 * 1024 * 1024
CHARS_PER_TOKEN = 4  # for count_tokens: an estimate, never billed


class _BadRequest(Exception):
    def __init__(self, status: int, kind: str, message: str):
        super().__init__(message)
        self.status, self.kind, self.message = status, kind, message


# --------------------------------------------------------------------------- translation


def _block_text(content: Any) -> str:
    """The text of a tool result's or message's content: a string or a list of blocks."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for block in content:
            if isinstance(block, Mapping):
                if block.get("type") == "text":
                    parts.append(str(block.get("text", "")))
                else:
                    parts.append(f"[{block.get('type', 'block')}]")
        return "\n".join(parts)
    return "" if content is None else str(content)


def to_model_request(body: Mapping[str, Any], task: Mapping[str, Any]) -> ModelRequest:
    """A Messages API request body as the kernel's ModelRequest. `turn_index` is the
    number of assistant turns in the conversation, so a provider that serves turns by
    position (the scripted one) answers the conversation where it stands, whatever other
    calls the agent makes on the side."""
    system = body.get("system")
    system_text = _block_text(system) if system is not None else ""
    tools = [ToolDefinition(str(tool.get("name", "")), str(tool.get("description", "")),
                            dict(tool.get("input_schema") or {"type": "object"}))
             for tool in body.get("tools") or [] if isinstance(tool, Mapping)]
    messages: list[Message] = []
    raw_messages = body.get("messages")
    if not isinstance(raw_messages, list) or not raw_messages:
        raise _BadRequest(400, "invalid_request_error", "messages: a non-empty list is required")
    for message in raw_messages:
        if not isinstance(message, Mapping):
            raise _BadRequest(400, "invalid_request_error", "messages: each must be an object")
        content = message.get("content")
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else \
            [b for b in content or [] if isinstance(b, Mapping)]
        if message.get("role") == "assistant":
            calls = [ToolCall(str(b.get("id", "")), str(b.get("name", "")),
                              dict(b.get("input") or {}))
                     for b in blocks if b.get("type") == "tool_use"]
            text = "\n".join(str(b.get("text", "")) for b in blocks if b.get("type") == "text")
            messages.append(AssistantMessage(ModelTurn(text=text, tool_calls=calls,
                                                       raw_content=[dict(b) for b in blocks])))
            continue
        results = tuple(ToolResult(str(b.get("tool_use_id", "")), _block_text(b.get("content")),
                                   bool(b.get("is_error", False)))
                        for b in blocks if b.get("type") == "tool_result")
        if results:
            messages.append(ToolResultsMessage(results))
        texts = [str(b.get("text", "")) for b in blocks if b.get("type") == "text"]
        if texts or not results:
            messages.append(UserMessage("\n".join(texts)))
    turn_index = sum(1 for m in messages if isinstance(m, AssistantMessage))
    return ModelRequest(system_text, messages, tools, task=dict(task), turn_index=turn_index,
                        api_request=dict(body))


def usage_block(turn: ModelTurn) -> dict[str, int]:
    return {"input_tokens": turn.usage.input_tokens,
            "output_tokens": turn.usage.output_tokens,
            "cache_creation_input_tokens": turn.usage.cache_write_tokens,
            "cache_read_input_tokens": turn.usage.cache_read_tokens}


def to_api_message(turn: ModelTurn, message_id: str, requested_model: str) -> dict[str, Any]:
    stop = turn.stop_reason
    if turn.tool_calls and stop == "end_turn":
        stop = "tool_use"  # what the API says whenever the reply asks for tools
    return {"id": message_id, "type": "message", "role": "assistant",
            "model": turn.model or requested_model, "content": content_blocks(turn),
            "stop_reason": stop, "stop_sequence": None, "usage": usage_block(turn)}


def _sse(event: str, data: Mapping[str, Any]) -> bytes:
    return f"event: {event}\ndata: {json.dumps(data, ensure_ascii=False)}\n\n".encode()


def to_sse(message: Mapping[str, Any]) -> bytes:
    """A complete message as the Messages API streams it: message_start, per block
    content_block_start / content_block_delta / content_block_stop, message_delta (the
    stop reason and the usage) and message_stop."""
    usage = dict(message["usage"])
    start = {**message, "content": [], "stop_reason": None, "stop_sequence": None,
             "usage": {**usage, "output_tokens": 0}}
    events = [_sse("message_start", {"type": "message_start", "message": start})]
    for index, block in enumerate(message["content"]):
        kind = block.get("type")
        if kind == "text":
            opening: dict[str, Any] = {"type": "text", "text": ""}
            deltas = [{"type": "text_delta", "text": block.get("text", "")}]
        elif kind == "tool_use":
            opening = {"type": "tool_use", "id": block.get("id"), "name": block.get("name"),
                       "input": {}}
            deltas = [{"type": "input_json_delta",
                       "partial_json": json.dumps(block.get("input") or {})}]
        elif kind == "thinking":
            opening = {"type": "thinking", "thinking": "", "signature": ""}
            deltas = [{"type": "thinking_delta", "thinking": block.get("thinking", "")},
                      {"type": "signature_delta", "signature": block.get("signature", "")}]
        else:  # redacted thinking, server tools' blocks: whole in their start event
            opening, deltas = dict(block), []
        events.append(_sse("content_block_start", {"type": "content_block_start",
                                                   "index": index, "content_block": opening}))
        events += [_sse("content_block_delta", {"type": "content_block_delta", "index": index,
                                                "delta": delta}) for delta in deltas]
        events.append(_sse("content_block_stop", {"type": "content_block_stop", "index": index}))
    events.append(_sse("message_delta", {
        "type": "message_delta",
        "delta": {"stop_reason": message["stop_reason"], "stop_sequence": None},
        "usage": usage}))
    events.append(_sse("message_stop", {"type": "message_stop"}))
    return b"".join(events)


# --------------------------------------------------------------------------- HTTP


async def _read_head(reader: asyncio.StreamReader
                     ) -> tuple[str, str, dict[str, str]] | None:
    """The request line and headers; None when the client sent nothing."""
    line = await reader.readline()
    if not line:
        return None
    parts = line.decode("latin-1").split()
    if len(parts) != 3:
        raise _BadRequest(400, "invalid_request_error", "malformed request line")
    method, target, _ = parts
    headers: dict[str, str] = {}
    held = len(line)
    for _ in range(MAX_HEADER_LINES):
        raw = await reader.readline()
        if raw in (b"\r\n", b"\n", b""):
            break
        # The head is held before the attempt's budget for bodies is asked: it is
        # bounded on its own (found by an attacker round: 197 headers of 64 KB on each
        # of 32 connections held 400 MB).
        held += len(raw)
        if held > MAX_HEAD_BYTES:
            raise _BadRequest(431, "invalid_request_error", "request headers too large")
        name, _, value = raw.decode("latin-1").partition(":")
        headers[name.strip().lower()] = value.strip()
    else:
        raise _BadRequest(431, "invalid_request_error", "too many headers")
    return method, target, headers


def _body_length(headers: Mapping[str, str]) -> int | None:
    """The body's length as the headers give it; None for a chunked body."""
    if headers.get("transfer-encoding", "").lower() == "chunked":
        return None
    length = int(headers.get("content-length", "0") or 0)
    if length < 0:
        raise ValueError("a negative Content-Length")
    return length


async def _chunk_size(reader: asyncio.StreamReader) -> int:
    size = int((await reader.readline()).split(b";")[0].strip() or b"0", 16)
    if size < 0:
        raise ValueError("a negative chunk size")
    if size == 0:  # the last chunk, then trailers to the empty line
        while (await reader.readline()) not in (b"\r\n", b"\n", b""):
            pass
    return size


async def _skip(reader: asyncio.StreamReader, count: int) -> None:
    """Read `count` bytes (or to the end) and keep none of them."""
    while count > 0:
        data = await reader.read(min(count, 1 << 16))
        if not data:
            return
        count -= len(data)


async def _drain(reader: asyncio.StreamReader, length: int | None, read: int = 0) -> None:
    """The rest of a body that will not be used, read and dropped, up to
    MAX_DRAINED_BYTES in all (`read`: what was read of it already); past that it is left
    unread."""
    if length is not None:
        if length <= MAX_DRAINED_BYTES:
            await _skip(reader, length)
        return
    while read <= MAX_DRAINED_BYTES:
        size = await _chunk_size(reader)
        if size == 0:
            return
        read += size
        if read <= MAX_DRAINED_BYTES:
            await _skip(reader, size)
            await reader.readline()


async def _read_body(reader: asyncio.StreamReader, length: int | None) -> bytes:
    """The body (`length` bytes; None: chunked), at most MAX_BODY_BYTES: a chunked one
    that goes past it is drained and refused with a 413."""
    if length is not None:
        return await reader.readexactly(length) if length else b""
    body = bytearray()
    while True:
        size = await _chunk_size(reader)
        if size == 0:
            return bytes(body)
        if len(body) + size > MAX_BODY_BYTES:
            if len(body) + size <= MAX_DRAINED_BYTES:
                await _skip(reader, size)
                await reader.readline()
                await _drain(reader, None, len(body) + size)
            raise _too_large()
        body += await reader.readexactly(size)
        await reader.readline()


def _too_large() -> _BadRequest:
    return _BadRequest(413, "request_too_large",
                       f"evalctl model proxy: the request body is over "
                       f"{MAX_BODY_BYTES // (1024 * 1024)} MB, the most it serves")


def _json_values(body: bytes) -> int:
    """No fewer than the values (strings, numbers, arrays, objects...) json.loads makes
    of `body`, found without parsing it, in passes over the bytes at C speed: its
    strings, and the commas and opening brackets outside them, plus one. In UTF-8 no
    byte of a multi-byte character is a quote or a bracket; a body that is not UTF-8 is
    refused before it is parsed."""
    # With the escaped backslashes, then the escaped quotes, taken out, every quote
    # left opens or closes a string.
    plain = body.replace(b"\\\\", b"").replace(b'\\"', b"")
    strings = (plain.count(b'"') + 1) // 2
    marks = plain.count(b",") + plain.count(b"[") + plain.count(b"{")
    if strings + marks > MAX_JSON_VALUES >= strings:
        # Counted again outside the strings: text (code, a JSON file a tool read) holds
        # commas and brackets of its own.
        outside = b"".join(plain.split(b'"')[::2])
        marks = outside.count(b",") + outside.count(b"[") + outside.count(b"{")
    return strings + marks + 1


def _held_for(length: int, values: int) -> int:
    """What a request is counted as holding (MAX_ATTEMPT_BYTES): its body, the text
    parsed from it, and VALUE_BYTES a value."""
    return 2 * length + VALUE_BYTES * values


class _Budget:
    """The bytes one attempt's requests may hold at once. A request takes its share
    before its body is read, waiting (first come, first served) while the requests
    before it hold the rest, and gives it back when it is answered."""

    def __init__(self, total: int):
        self.total = total
        self.held = 0
        self._waiting: collections.deque[tuple[int, asyncio.Future[None]]] = \
            collections.deque()

    async def take(self, amount: int) -> None:
        amount = min(amount, self.total)
        if not self._waiting and self.held + amount <= self.total:
            self.held += amount
            return
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiting.append((amount, waiter))
        try:
            await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():  # granted as it was cancelled
                self.give(amount)
            else:
                with contextlib.suppress(ValueError):
                    self._waiting.remove((amount, waiter))
                self._grant()  # it may have been first in line
            raise

    def give(self, amount: int) -> None:
        self.held -= amount
        self._grant()

    def _grant(self) -> None:
        while self._waiting:
            amount, waiter = self._waiting[0]
            if waiter.done():
                self._waiting.popleft()
                continue
            if self.held + amount > self.total:
                return
            self._waiting.popleft()
            self.held += amount
            waiter.set_result(None)


class _Held:
    """What one connection holds of its attempt's _Budget."""

    def __init__(self, budget: _Budget):
        self.budget = budget
        self.amount = 0

    async def take(self, amount: int) -> None:
        await self.budget.take(amount)
        self.amount += min(amount, self.budget.total)

    def keep(self, amount: int) -> None:
        """Hold no more than `amount` from now on."""
        if amount < self.amount:
            self.budget.give(self.amount - amount)
            self.amount = amount

    def release(self) -> None:
        self.keep(0)


def _response(status: int, body: bytes, content_type: str = "application/json",
              extra: Mapping[str, str] | None = None) -> bytes:
    reasons = {200: "OK", 400: "Bad Request", 401: "Unauthorized", 403: "Forbidden",
               404: "Not Found", 405: "Method Not Allowed", 408: "Request Timeout",
               413: "Payload Too Large",
               431: "Request Header Fields Too Large", 500: "Internal Server Error"}
    head = [f"HTTP/1.1 {status} {reasons.get(status, 'Error')}",
            f"Content-Type: {content_type}", f"Content-Length: {len(body)}",
            "Connection: close", *(f"{k}: {v}" for k, v in (extra or {}).items())]
    return ("\r\n".join(head) + "\r\n\r\n").encode() + body


def _error(status: int, kind: str, message: str) -> bytes:
    return _response(status, json.dumps({"type": "error", "error": {
        "type": kind, "message": message}}).encode())


def bind_unix_socket(path: Path) -> socket.socket:
    """A listening Unix socket at `path`, however long the path (run directories can be
    deeper than the ~100 bytes a socket address holds: then it is bound through
    /proc/self/fd/N, a short name for its directory)."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        if len(os.fsencode(str(path))) < 100:
            sock.bind(str(path))
        else:
            directory = os.open(path.parent, os.O_PATH | os.O_DIRECTORY)
            try:
                sock.bind(f"/proc/self/fd/{directory}/{path.name}")
            finally:
                os.close(directory)
        os.chmod(path, 0o666)  # the sandbox's user (uid 1000) connects to it
        sock.listen(64)
    except BaseException:
        sock.close()
        raise
    return sock


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _finite(text: str) -> float:
    number = float(text)
    if number in (float("inf"), float("-inf")):
        raise ValueError(f"{text[:40]} is too large for a number")
    return number


# A beta's name, as the API's are (prompt-caching-2024-07-31): a header value with a
# newline in it could not even be sent.
_BETA_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


def _unsendable(payload: Mapping[str, Any], headers: Mapping[str, str]) -> str | None:
    """Why a request body could not be sent upstream as it is, or None: found by an
    attacker, these ended the attempt as a provider error where the API would have said
    400 (NaN and infinity are refused as the body is read)."""
    if "betas" in payload:
        return "betas is not a field of the request body; send the anthropic-beta header"
    for beta in headers.get("anthropic-beta", "").split(","):
        if beta.strip() and not _BETA_NAME.fullmatch(beta.strip()):
            return f"anthropic-beta: {beta.strip()[:80]!r} is not a beta's name"
    try:
        json.dumps(payload, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        return "the body holds a lone surrogate escape (\\ud800-\\udfff), which is not text"
    except (ValueError, RecursionError) as exc:
        return f"the body cannot be sent: {exc}"
    return None


# What the model proxy serves is the model, nothing more: a request that would have the
# API act for the agent beyond answering it is refused. Found by an attacker: server
# tools (web_fetch, web_search, code execution), `mcp_servers` and a URL an image or
# document is fetched from made the API reach any address for an agent in a sandbox
# without network (a way out of it, under the user's key), and server tools are billed
# apart from tokens, past the cost limit. Tools are allowed by kind, not refused by name,
# so a server tool added to the API later is refused too.
#
# The tools an agent runs itself: its own (a name and an input_schema; no type, or
# "custom", as Claude Code and the SDKs send them) and the Anthropic-defined client tools,
# whose schema the API supplies but whose every call the agent carries out, in the sandbox.
_CLIENT_TOOL_TYPE = re.compile(r"custom|(?:bash|text_editor|computer|memory)_[0-9]{8}")
# Request fields that have the API connect out or run code for the agent.
_SERVER_FIELDS = ("mcp_servers", "container")
# Betas that turn on what acts outside the sandbox (a server tool, MCP servers, the Files
# API's files of the user's account, containers, skills). A second line only: what they
# enable is refused by the checks of the request's fields, tools and sources, so this is
# by name, and a beta of Claude Code's own (context management, thinking, effort, and
# the ones its next version adds) goes through as it is.
_SERVER_BETA_PARTS = ("mcp", "web-fetch", "web-search", "code-execution", "files-api",
                      "skills", "container")
# The sources an image or document block may hold: its data, in the request. A "url"
# source is fetched by the API; a "file" source is a file of the user's account.
_INLINE_SOURCES = ("base64", "text", "content")
_BLOCKS_WITH_SOURCES = ("image", "document")


def _beyond_the_model(payload: Mapping[str, Any], betas: list[str]) -> str | None:
    """Why a Messages request asks the API for more than a model's answer (to reach the
    network, run code, read the account's files), or None."""
    for name in _SERVER_FIELDS:
        if name in payload:
            return f"{name} is not served: the API would act outside the sandbox"
    tools = payload.get("tools")
    if tools is not None and not isinstance(tools, list):  # not read as the API reads it
        return "tools not given as a list are not served"
    for index, tool in enumerate(tools or []):
        kind = tool.get("type") if isinstance(tool, Mapping) else None
        if kind is not None and not (isinstance(kind, str) and _CLIENT_TOOL_TYPE.fullmatch(kind)):
            return f"tools[{index}]: type {str(kind)[:80]!r} is a server tool, not served " \
                   "(only tools the agent runs itself: a name and an input_schema)"
    messages, system = payload.get("messages"), payload.get("system")
    # The system prompt's blocks are looked at as a message's content is.
    fetched = _fetched_source((messages if isinstance(messages, list) else []) +
                              ([{"content": system}] if isinstance(system, list) else []))
    if fetched is not None:
        return fetched
    for beta in betas:
        if any(part in beta.lower() for part in _SERVER_BETA_PARTS):
            return f"anthropic-beta {beta[:80]!r} is not served: it enables server-side " \
                   "tools or resources"
    return None


def _fetched_source(messages: Any) -> str | None:
    """Why a message's content names data the API would fetch (an image or document by
    URL or by file id, a container upload), or None. Walks content blocks, the blocks of
    tool results and of documents, without recursion (a body may nest deep)."""
    pending = [message.get("content") for message in messages
               if isinstance(message, Mapping)] if isinstance(messages, list) else []
    while pending:
        blocks = pending.pop()
        for block in blocks if isinstance(blocks, list) else []:
            if not isinstance(block, Mapping):
                continue
            kind = block.get("type")
            if kind == "container_upload":
                return "a container_upload block is not served: it names a file of the " \
                       "account's"
            if kind == "tool_result":
                pending.append(block.get("content"))
            elif kind in _BLOCKS_WITH_SOURCES and isinstance(block.get("source"), Mapping):
                source = block["source"]
                if source.get("type") not in _INLINE_SOURCES:
                    return f"a {kind} block's source of type " \
                           f"{str(source.get('type'))[:40]!r} is not served: send its " \
                           "data in the request (base64 or text)"
                pending.append(source.get("content"))
    return None


def _shown_model(model: Any) -> str | None:
    """The model a request names, as the ledger records it: text, cut short (an
    attacker's model nested 970 levels deep broke the python grader's reading of the
    ledger)."""
    if model is None:
        return None
    return truncate(model, 200, keep="head") if isinstance(model, str) \
        else repr(type(model).__name__)


# --------------------------------------------------------------------------- the proxy


# Connections one attempt's proxy serves at once (an agent makes a few: its main loop
# and side calls), and how long one may take to send its request.
MAX_CONNECTIONS = 32
REQUEST_SECONDS = 60


class ModelProxy:
    """One attempt's proxy. `await start()`, hand `token` and the socket to the agent,
    wait for the agent or for `stopped`, then `await close()`."""

    def __init__(self, provider: Any, ledger: Ledger, limits: AgentLimits,
                 task: Mapping[str, Any], socket_path: Path, *,
                 calls: ModelCalls | None = None,
                 locate: Callable[[Sequence[str | int]], str] | None = None):
        self.provider = provider
        self.locate = locate  # where a node of `task` is written in the suite
        # The attempt's model calls (throttle, budget, in-memory totals); its own if None.
        self.model_calls = calls or ModelCalls(provider, ledger)
        self.ledger = ledger
        self.limits = limits
        self.task = task
        self.socket_path = socket_path
        self.token = TOKEN_PREFIX + secrets.token_hex(16)
        self.calls = 0
        self.tool_calls = 0
        self.cost: float | None = 0.0
        self.final_text = ""
        self.stop_status: str | None = None
        self.stop_error: str | None = None
        self.stopped = asyncio.Event()
        self._over_cost = False
        self._one_at_a_time = asyncio.Lock()  # the model calls, under a cost limit
        self._unpriced_noted = False
        self._server: asyncio.AbstractServer | None = None
        self._connections: set[asyncio.Task[None]] = set()
        self._budget = _Budget(MAX_ATTEMPT_BYTES)  # what its requests hold at once
        self._decoding = asyncio.Lock()  # its bodies are parsed one at a time

    async def start(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            self.socket_path.unlink()
        sock = bind_unix_socket(self.socket_path)
        self._server = await asyncio.start_unix_server(self._handle, sock=sock)

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            for connection in list(self._connections):
                connection.cancel()
            await asyncio.gather(*self._connections, return_exceptions=True)
            self._server = None
        with contextlib.suppress(OSError):
            self.socket_path.unlink()

    def _stop(self, status: str, error: str) -> None:
        if self.stop_status is None:
            self.stop_status, self.stop_error = status, error
        self.stopped.set()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if len(self._connections) >= MAX_CONNECTIONS:
            # A flood, not an agent: each connection held is a descriptor of evalctl's,
            # and an attacker's 20,000 idle ones made other attempts' graders fail.
            writer.close()
            return
        current = asyncio.current_task()
        if current is not None:
            self._connections.add(current)
        held = _Held(self._budget)
        try:
            try:
                answer = await self._serve(reader, held)
            except _BadRequest as exc:
                answer = _error(exc.status, exc.kind, exc.message)
            except (ValueError, asyncio.IncompleteReadError):
                answer = _error(400, "invalid_request_error", "malformed HTTP request")
            except TimeoutError:
                answer = _error(408, "invalid_request_error",
                                f"no whole request within {REQUEST_SECONDS} s")
            except Exception as exc:  # a bug here must reach the agent as an answer, not a hang
                answer = _error(500, "api_error",
                                f"evalctl model proxy failed: {type(exc).__name__}: {exc}")
            held.release()
            if answer is None:
                return
            writer.write(answer)
            await writer.drain()
        except (ConnectionError, OSError):
            pass  # the agent went away; nothing to tell it
        except asyncio.CancelledError:
            # The attempt is over (close()): nothing to tell the agent, and a connection
            # ended by a cancellation would have asyncio print a traceback on the user's
            # terminal (found by an attacker round: 'Exception in callback
            # StreamReaderProtocol...', from the drain above).
            pass
        finally:
            held.release()
            writer.close()
            if current is not None:
                self._connections.discard(current)

    async def _serve(self, reader: asyncio.StreamReader, held: _Held) -> bytes | None:
        """One request read and answered; None when the client sent nothing. Bytes are
        held only for a request that will be served: it is refused (before its body is
        read) when it is not the attempt's or too large, and its body is counted
        against the attempt's budget before it is read and its JSON values before it
        is parsed."""
        head = await asyncio.wait_for(_read_head(reader), REQUEST_SECONDS)
        if head is None:
            return None
        method, target, headers = head
        path, refusal = self._refusal_of(method, target, headers)
        length = _body_length(headers)
        if refusal is None and length is not None and length > MAX_BODY_BYTES:
            refusal = _error(413, "request_too_large", _too_large().message)
        if refusal is not None:
            await asyncio.wait_for(_drain(reader, length), REQUEST_SECONDS)
            return refusal
        most = MAX_BODY_BYTES if length is None else length
        await held.take(_held_for(most, min(MAX_JSON_VALUES, most + 1)))
        body = await asyncio.wait_for(_read_body(reader, length), REQUEST_SECONDS)
        estimate = (len(body) + CHARS_PER_TOKEN - 1) // CHARS_PER_TOKEN
        async with self._decoding:
            started = time.monotonic()
            values = _json_values(body)
            if values > MAX_JSON_VALUES:
                payload: dict[str, Any] | bytes = _error(
                    413, "request_too_large", f"evalctl model proxy: the request body holds "
                    f"more than {MAX_JSON_VALUES:,} JSON values, the most it serves")
            else:
                held.keep(_held_for(len(body), values))
                payload = self._decoded(body, headers)
            del body  # the parsed request is what is held from here
            # As long again for the attempt's other work and everyone else's: one
            # attempt's requests, however many, take at most about half the event loop.
            await asyncio.sleep(min(time.monotonic() - started, 1.0))
        if isinstance(payload, bytes):
            return payload
        if path.endswith("count_tokens"):
            return _response(200, json.dumps({"input_tokens": estimate}).encode())
        betas = [b.strip() for b in headers.get("anthropic-beta", "").split(",") if b.strip()]
        beyond = _beyond_the_model(payload, betas)
        if beyond is not None:
            # The agent's request, refused as one the service refuses (a 400, and the
            # attempt goes on), and recorded: it is what an agent trying the way out did.
            self.ledger.append("request_rejected", error=beyond, via="proxy")
            return _error(400, "invalid_request_error", f"evalctl model proxy: {beyond}")
        if betas:  # what the agent asked of the API goes with its request
            payload["betas"] = betas
        return await self._messages(payload)

    def _refusal_of(self, method: str, target: str, headers: Mapping[str, str]
                    ) -> tuple[str, bytes | None]:
        """The path asked for, and the answer that refuses the request before its body
        is read (another key, a path not served, a method other than POST), or None."""
        given = headers.get("x-api-key") or \
            headers.get("authorization", "").removeprefix("Bearer ").strip()
        path = target.split("?", 1)[0].rstrip("/")
        if not secrets.compare_digest(given.encode(), self.token.encode()):
            return path, _error(401, "authentication_error",
                                "evalctl model proxy: invalid x-api-key (use this attempt's "
                                "ANTHROPIC_API_KEY)")
        if path not in ("/v1/messages", "/v1/messages/count_tokens"):
            return path, _error(404, "not_found_error",
                                f"evalctl model proxy: {path} is not served (only "
                                "/v1/messages)")
        if method != "POST":
            return path, _error(405, "invalid_request_error", f"{method} {path}: use POST")
        return path, None

    @staticmethod
    def _decoded(body: bytes, headers: Mapping[str, str]) -> dict[str, Any] | bytes:
        """The request's JSON object, or the answer that refuses it."""
        try:
            payload = json.loads(body.decode("utf-8") if body else "{}",
                                 parse_constant=_no_constant, parse_float=_finite)
        except UnicodeDecodeError:
            return _error(400, "invalid_request_error", "the body is not UTF-8")
        except (json.JSONDecodeError, ValueError, RecursionError) as exc:
            return _error(400, "invalid_request_error", f"the body is not JSON: {exc}")
        if not isinstance(payload, dict):
            return _error(400, "invalid_request_error", "the body must be a JSON object")
        unsendable = _unsendable(payload, headers)
        if unsendable is not None:
            # What the upstream API could not even be sent: the agent's request, refused
            # as the API would refuse it, not an error that ends the attempt.
            return _error(400, "invalid_request_error", f"evalctl model proxy: {unsendable}")
        return payload

    async def _messages(self, body: Mapping[str, Any]) -> bytes:
        if self.limits.cost is None:
            return await self._served(body)
        # A cost limit is checked against what the turns cost, known only once each has
        # come back: calls in flight together would all be served whatever they add up to
        # (found by an attacker: 30 calls at once, $1.20 spent under a $0.05 limit). So
        # under a cost limit one call is made at a time; the next waits for the one before
        # to be counted, then is refused if the spend is over. (A waiting call is a task
        # of the proxy's: the agent's end or the attempt's cancels it with the rest.)
        async with self._one_at_a_time:
            return await self._served(body)

    async def _served(self, body: Mapping[str, Any]) -> bytes:
        refusal = self._refusal()
        if refusal is not None:
            return _error(403, "permission_error", f"evalctl model proxy: {refusal}")
        request = to_model_request(body, self.task)
        request.locate = self.locate
        self.calls += 1
        number = self.calls
        try:
            turn: ModelTurn = await self.model_calls.complete(request)
        except asyncio.CancelledError:
            # The agent ended (or the attempt did) while this call was out: the service
            # may have answered it and billed it, and nothing came back to count. The
            # attempt's cost is unknown from here, never a silent $0 (found by an attacker
            # round: 30 calls in flight at the agent's exit were counted as none).
            self.ledger.append("model_call_abandoned", turn=number, via="proxy")
            self.model_calls.cost = None
            self.cost = None
            if self.model_calls.on_spend is not None:
                self.model_calls.on_spend(TokenUsage(), None)
            raise
        except RequestRejected as exc:
            # The agent's own request: it hears the refusal, as from the API, and goes on.
            self.ledger.append("request_rejected", error=str(exc), via="proxy")
            return _error(400, "invalid_request_error", f"evalctl model proxy: {exc}")
        except ProviderError as exc:
            status = getattr(exc, "status", None) or ExitStatus.PROVIDER_ERROR
            self.ledger.append("provider_error", error=str(exc), status=status, via="proxy")
            self._stop(status, str(exc))
            return _error(500, "api_error", f"evalctl model proxy: {exc}")
        except BaseException as exc:  # a broken provider plugin must not take the run down
            if stops_the_run(exc):  # SystemExit is the plugin's: it ended evalctl, exit 0
                raise
            error = f"the provider raised {describe_crash(exc)}"
            self.ledger.append("provider_error", error=error, status=ExitStatus.PROVIDER_ERROR,
                               via="proxy")
            self._stop(ExitStatus.PROVIDER_ERROR, error)
            return _error(500, "api_error", f"evalctl model proxy: {error}")
        self.ledger.append(
            "model_turn", turn=number, model=turn.model, stop_reason=turn.stop_reason,
            text=truncate(turn.text, LEDGER_TEXT_LIMIT),
            tool_calls=[{"id": c.id, "name": c.name, "arguments": _clip(c.arguments)}
                        for c in turn.tool_calls],
            usage=turn.usage.to_dict(), cost=turn.cost, via="proxy",
            requested_model=_shown_model(body.get("model")), stream=bool(body.get("stream")))
        self.tool_calls += len(turn.tool_calls)
        if turn.text:
            self.final_text = turn.text
        self.cost = self.model_calls.cost  # the attempt's, counted as the turn arrived
        self._watch_cost()
        message = to_api_message(turn, "msg_" + secrets.token_hex(12),
                                 str(body.get("model", "")))
        if body.get("stream"):
            return _response(200, to_sse(message), "text/event-stream",
                             {"Cache-Control": "no-cache"})
        return _response(200, json.dumps(message, ensure_ascii=False).encode())

    def _refusal(self) -> str | None:
        """Why the next call is refused (a limit reached, the attempt stopping), or None."""
        if self.stop_status is not None:
            return f"the attempt is over ({self.stop_status})"
        if self._over_cost:
            spent = self.cost or 0.0
            self.ledger.append("limit", limit="cost", value=self.limits.cost, spent=spent)
            self._stop(ExitStatus.COST_LIMIT,
                       f"spent ${spent:.4f}, limit ${self.limits.cost:g}")
            return f"the task's cost limit (${self.limits.cost:g}) is spent"
        if self.calls >= self.limits.turns:
            self.ledger.append("limit", limit="turns", value=self.limits.turns)
            self._stop(ExitStatus.MAX_TURNS,
                       f"no final answer after {self.limits.turns} turns")
            return f"the task's turn limit ({self.limits.turns}) is reached"
        return None

    def end_over_cost(self) -> bool:
        """At the agent's end: whether its last call went over the cost limit (it ended
        before another was refused), recorded and made the attempt's status, as the
        built-in loop's is when its last turn goes over."""
        if not self._over_cost or self.stop_status is not None:
            return False
        self._refusal()  # records the limit and stops, as the next call would have
        return self.stop_status == ExitStatus.COST_LIMIT

    def _watch_cost(self) -> None:
        limit = self.limits.cost
        if limit is None:
            return
        if self.cost is None and not self._unpriced_noted:
            self._unpriced_noted = True
            self.ledger.append("limit", limit="cost", value=limit,
                               note="model is unpriced; the cost limit cannot be enforced")
        elif self.cost is not None and self.cost > limit:
            self._over_cost = True


def _clip(arguments: Any) -> Any:
    if isinstance(arguments, dict):
        return {key: _clip(value) for key, value in arguments.items()}
    if isinstance(arguments, str):
        return truncate(arguments, LEDGER_TEXT_LIMIT)
    return arguments


def forwarder_source() -> str:
    return (Path(__file__).with_name("forwarder.py")).read_text(encoding="utf-8")
