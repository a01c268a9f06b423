"""Cassettes: every model exchange of an attempt, kept so the attempt can be replayed.

Every model call of an attempt — the built-in loop's, or a CLI agent's through the model
proxy — goes through the attempt's `ModelCalls`, and a `CassetteRecorder` there appends
one line per exchange to `RUN/.cassettes/<attempt>.jsonl` (beside the ledgers, never in
the workspace: the `bwrap` sandbox does not mount it). The ledger stays the audit trail
(model turns clipped for reading); the cassette holds what a replay needs, unclipped:
the request's *key* and the whole response.

The key is what decides the answer: `model`, `system`, `tools` and `messages`, in the
Messages API's shape (a proxied agent's own request body, without `cache_control`;
the built-in loop's conversation translated the same way). `sha256` of its canonical
JSON is the request hash. To keep a long conversation's cassette linear in its length,
a request is written against an earlier one (`base`) that shares a prefix of messages
(`keep`), with only the new messages and the fields that changed. The format is in
docs/cassettes.md; `read_cassettes` reads it back, checking every hash.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from evalctl._agent.ledger import Ledger
from evalctl._errors import RequestRejected, UsageError
from evalctl._plugin.types import (
    AssistantMessage,
    ExitStatus,
    ModelRequest,
    ModelTurn,
    TokenUsage,
    ToolCall,
    UserMessage,
)

CASSETTE_FORMAT = "evalctl-cassette/1"
CASSETTES_DIR = ".cassettes"
KEY_FIELDS = ("model", "system", "tools", "messages")
# How much of a differing value a mismatch message quotes.
QUOTE_LIMIT = 120
QUOTE_CONTEXT = 30  # characters before the first difference in a long text


# --------------------------------------------------------------------------- the key


def content_blocks(turn: ModelTurn) -> list[dict[str, Any]]:
    """An assistant turn as Messages API content blocks: the provider's own when it kept
    them (replayed verbatim), else built from its text and tool calls. The proxy answers a
    CLI agent with these; a cassette keys the built-in loop's requests with them."""
    if isinstance(turn.raw_content, list) and turn.raw_content:
        return [dict(block) for block in turn.raw_content]
    blocks: list[dict[str, Any]] = []
    if turn.text or not turn.tool_calls:
        blocks.append({"type": "text", "text": turn.text})
    blocks += [{"type": "tool_use", "id": call.id, "name": call.name,
                "input": dict(call.arguments)} for call in turn.tool_calls]
    return blocks


def _without_cache_control(value: Any) -> Any:
    """`value` without `cache_control` markers: they say what the API may cache, not what
    the model is asked, and agents move them from turn to turn."""
    if isinstance(value, Mapping):
        return {k: _without_cache_control(v) for k, v in value.items() if k != "cache_control"}
    if isinstance(value, list):
        return [_without_cache_control(v) for v in value]
    return value


def request_key(request: ModelRequest, model: str | None = None) -> dict[str, Any]:
    """The matching key of a request: its model, system prompt, tools and messages in the
    Messages API's shape. A proxied CLI agent's request is its own body (its `model`
    field included; `model` here is then ignored); the built-in loop's is translated from
    the kernel's conversation, with `model` the one the run asked for (None: the
    provider's default)."""
    body = request.api_request
    if body is not None:
        return _without_cache_control({
            "model": body.get("model"), "system": body.get("system"),
            "tools": body.get("tools"), "messages": body.get("messages")})
    messages: list[dict[str, Any]] = []
    for message in request.messages:
        if isinstance(message, UserMessage):
            messages.append({"role": "user", "content": message.text})
        elif isinstance(message, AssistantMessage):
            messages.append({"role": "assistant", "content": content_blocks(message.turn)})
        else:
            messages.append({"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": result.call_id,
                 "content": result.content, "is_error": result.is_error}
                for result in message.results]})
    # Tuples in it hash as lists, and are lists once read back: the key is its JSON.
    return {"model": model, "system": request.system, "tools": _tools_key(request.tools),
            "messages": messages}


_tools_seen: tuple[tuple[Any, ...], list[dict[str, Any]]] = ((), [])


def _tools_key(tools: list[Any]) -> list[dict[str, Any]]:
    """The tools as the key holds them; the built-in loop offers the same definitions
    on every call of every attempt, so the last translation is reused."""
    global _tools_seen
    seen, translated = _tools_seen
    if len(seen) == len(tools) and all(a is b for a, b in zip(seen, tools, strict=True)):
        return translated
    translated = json.loads(canonical_json([
        {"name": t.name, "description": t.description, "input_schema": t.input_schema}
        for t in tools]))
    _tools_seen = (tuple(tools), translated)
    return translated


# Made once (json.dumps with options builds one for every call); it keeps no state
# between calls, so threads may share it.
_CANONICAL = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=True,
                              default=str)


def canonical_json(value: Any) -> str:
    """The one JSON text of `value` that its hash is taken over: sorted keys, no spaces,
    ASCII (a lone surrogate is its escape, so any text hashes)."""
    return _CANONICAL.encode(value)


_tools_text: tuple[Any, str] = (None, "")


def key_hash(key: Mapping[str, Any], message_texts: list[str] | None = None) -> str:
    """The hash of canonical_json(key). A key of request_key's shape is put together from
    its parts, so the tools' text (several KB, the same list on every call: see
    _tools_key) is encoded once, not at every exchange, and the messages' from
    `message_texts` (canonical_json of each message) when the caller has them; the text
    is the same either way, its keys in sorted order."""
    parts = _key_parts(key, message_texts)
    return _text_hash(canonical_json(key) if parts is None else _object_text(parts))


def _text_hash(text: str) -> str:
    return "sha256:" + hashlib.sha256(text.encode("ascii")).hexdigest()


def _key_parts(key: Mapping[str, Any], message_texts: list[str] | None = None
               ) -> dict[str, str] | None:
    """The canonical JSON of each field of a key of request_key's shape, in sorted order;
    None for a key of another shape."""
    global _tools_text
    if key.keys() != {"messages", "model", "system", "tools"}:
        return None
    tools = key["tools"]
    seen, tools_text = _tools_text
    if seen is not tools:
        tools_text = canonical_json(tools)
        _tools_text = (tools, tools_text)
    messages = canonical_json(key["messages"]) if message_texts is None else \
        "[" + ",".join(message_texts) + "]"
    return {"messages": messages, "model": canonical_json(key["model"]),
            "system": canonical_json(key["system"]), "tools": tools_text}


def _object_text(parts: Mapping[str, str]) -> str:
    """A JSON object from its fields' JSON texts (the names are plain identifiers)."""
    return "{" + ",".join(f'"{name}":{text}' for name, text in parts.items()) + "}"


def first_difference(recorded: Any, given: Any, where: str = "") -> str | None:
    """Where `given` first differs from `recorded`, as a path into the key
    (`messages[3].content[0].content`), with both values quoted; None when equal."""
    if type(recorded) is not type(given) and not (
            isinstance(recorded, int | float) and isinstance(given, int | float)):
        return _quote(where, recorded, given)
    if isinstance(recorded, Mapping):
        for name in [*recorded, *(k for k in given if k not in recorded)]:
            inner = f"{where}.{name}" if where else str(name)
            if name not in given:
                return f"{inner}: recorded {_short(recorded[name])}, now absent"
            if name not in recorded:
                return f"{inner}: not recorded, now {_short(given[name])}"
            found = first_difference(recorded[name], given[name], inner)
            if found:
                return found
        return None
    if isinstance(recorded, list):
        for index, (before, after) in enumerate(zip(recorded, given, strict=False)):
            found = first_difference(before, after, f"{where}[{index}]")
            if found:
                return found
        if len(recorded) != len(given):
            return f"{where}: recorded {len(recorded)} item(s), now {len(given)}"
        return None
    return None if recorded == given else _quote(where, recorded, given)


def _short(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= QUOTE_LIMIT else text[:QUOTE_LIMIT] + "…"


def _quote(where: str, recorded: Any, given: Any) -> str:
    where = where or "the request"
    if isinstance(recorded, str) and isinstance(given, str) and \
            max(len(recorded), len(given)) > QUOTE_LIMIT:
        # Long texts (a system prompt) differ somewhere inside: quote around that place.
        at = next((i for i, (a, b) in enumerate(zip(recorded, given, strict=False)) if a != b),
                  min(len(recorded), len(given)))
        start = max(0, at - QUOTE_CONTEXT)
        return (f"{where} (from character {at}): recorded {_excerpt(recorded, start)}, "
                f"now {_excerpt(given, start)}")
    return f"{where}: recorded {_short(recorded)}, now {_short(given)}"


def _excerpt(text: str, start: int) -> str:
    piece = text[start:start + QUOTE_LIMIT]
    quoted = json.dumps(piece, ensure_ascii=False)
    return ("…" if start else "") + quoted + ("…" if start + QUOTE_LIMIT < len(text) else "")


# --------------------------------------------------------------------------- responses


def turn_to_dict(turn: ModelTurn) -> dict[str, Any]:
    return {"text": turn.text, "tool_calls": [
        {"id": c.id, "name": c.name, "arguments": dict(c.arguments)} for c in turn.tool_calls],
        "stop_reason": turn.stop_reason, "usage": turn.usage.to_dict(), "cost": turn.cost,
        "model": turn.model, "raw_content": turn.raw_content}


def turn_from_dict(data: Mapping[str, Any]) -> ModelTurn:
    cost = data.get("cost")
    return ModelTurn(
        text=str(data.get("text", "")),
        tool_calls=[ToolCall(str(c["id"]), str(c["name"]), dict(c.get("arguments") or {}))
                    for c in data.get("tool_calls") or []],
        stop_reason=str(data.get("stop_reason") or "end_turn"),
        usage=TokenUsage.from_dict(data.get("usage") or {}),
        cost=None if cost is None else float(cost), model=str(data.get("model", "")),
        raw_content=data.get("raw_content"))


# --------------------------------------------------------------------------- writing


@dataclass
class _Written:
    model: Any
    system: Any
    tools: Any
    message_hashes: list[str]


class CassetteRecorder:
    """Appends an attempt's exchanges to its cassette, as they happen (the ledger's
    writer: flushed per line, and a disk that fails costs the record, not the run)."""

    def __init__(self, path: Path, *, task_id: str, attempt: int, agent: str = "",
                 provider: str = "", model: str | None = None):
        self.model = model
        self.broken: str | None = None  # why recording stopped, if it did
        self._ledger = Ledger(path)
        self._written: list[_Written] = []
        self._ledger.append("cassette", format=CASSETTE_FORMAT, task_id=task_id,
                            attempt=attempt, agent=agent, provider=provider, model=model)

    @property
    def failure(self) -> str | None:
        return self.broken or self._ledger.failure

    def record(self, request: ModelRequest, turn: ModelTurn | None = None, *,
               error: str | None = None, status: str | None = None) -> None:
        """One exchange: the request and what answered it (a turn, or an error with the
        exit status it carried). A request that cannot be recorded stops the recording,
        never the attempt: the cassette is then incomplete, and says so in its last line."""
        if self.broken is not None:
            return
        try:
            self._record(request, turn, error, status)
        except Exception as exc:
            self.broken = f"{type(exc).__name__}: {exc}"
            self._ledger.append("broken", error=self.broken)

    def _record(self, request: ModelRequest, turn: ModelTurn | None, error: str | None,
                status: str | None) -> None:
        key = request_key(request, self.model)
        # Each message is encoded once: for its hash here, and in the request's hash.
        texts = [canonical_json(m) for m in key["messages"]] \
            if isinstance(key["messages"], list) else None
        hashes = [hashlib.sha256(text.encode("ascii")).hexdigest() for text in texts or []]
        stored = self._delta(key, hashes)
        self._written.append(_Written(key["model"], key["system"], key["tools"], hashes))
        answer: dict[str, Any] = {"response": turn_to_dict(turn)} if turn is not None else \
            {"error": {"message": error or "", "status": status}}
        parts = _key_parts(key, texts) if texts is not None else None
        if parts is None:
            self._ledger.append("exchange", request_hash=key_hash(key), request=stored,
                                **answer)
            return
        # The request as written is made of the texts its hash was taken over (the
        # tools' several KB were encoded once for the whole run), not encoded again.
        stored_parts = {name: str(value) if name in ("base", "keep") else parts[name]
                        for name, value in stored.items() if name != "messages"}
        stored_parts["messages"] = "[" + ",".join(texts[stored.get("keep", 0):]) + "]"
        self._ledger.append_encoded("exchange", {"request": _object_text(stored_parts)},
                                    request_hash=_text_hash(_object_text(parts)), **answer)

    def _delta(self, key: Mapping[str, Any], hashes: list[str]) -> dict[str, Any]:
        """The request as written: whole, or against the earlier exchange that shares the
        longest prefix of messages (the latest of equals). Latest first, passing over
        exchanges too short to share more: in a loop's conversation the latest exchange is
        the base, and the search costs one comparison of prefixes."""
        best, keep = -1, -1
        for index in range(len(self._written) - 1, -1, -1):
            earlier = self._written[index].message_hashes
            if len(earlier) <= keep:
                continue
            shared = 0
            for mine, theirs in zip(hashes, earlier, strict=False):
                if mine != theirs:
                    break
                shared += 1
            if shared > keep:
                best, keep = index, shared
        if best < 0 or not isinstance(key["messages"], list):
            return dict(key)
        base = self._written[best]
        stored: dict[str, Any] = {"base": best + 1, "keep": keep,
                                  "messages": key["messages"][keep:]}
        for name in ("model", "system", "tools"):
            # Told apart as the hash tells them apart, by their JSON: in Python 1 == 1.0
            # == True, and a field left out as unchanged would be read back as the base's
            # and fail its hash, which stops the replay of every attempt.
            mine, theirs = key[name], getattr(base, name)
            if mine is not theirs and canonical_json(mine) != canonical_json(theirs):
                stored[name] = mine
        return stored

    def close(self) -> None:
        self._ledger.close()


# --------------------------------------------------------------------------- reading


@dataclass(frozen=True)
class CassetteExchange:
    """One recorded exchange: the request's key and hash, and the turn that answered it
    (or the error, with its exit status)."""

    number: int  # 1-based, in the order recorded
    key: Mapping[str, Any]
    key_hash: str
    turn: ModelTurn | None
    error: str | None = None
    status: str | None = None
    line: int = 0


@dataclass
class Cassette:
    """The model exchanges of one recorded attempt, read back from its cassette file
    (`evalctl.read_cassettes`): `task_id`, `attempt`, the `agent`, `provider` and
    `model` it was recorded with, `exchanges` in the order they happened (each a
    `CassetteExchange` with `number`, `key`, `key_hash`, and `turn` — or `error` and
    `status` when the call failed), and `broken`, why the recording stopped early if it
    did.

    Three functions make the format's matching rule usable by a provider:
    `Cassette.key(request, model)` is a request's matching key (model, system, tools,
    messages, in the Messages API's shape), `Cassette.hash_of(key)` its hash as
    recorded, and `Cassette.first_difference(recorded_key, key)` the first field where
    two keys differ (`messages[3].content[0].content: recorded ..., now ...`), or None.
    docs/cassettes.md has the format.
    """

    path: Path
    task_id: str
    attempt: int
    agent: str = ""
    provider: str = ""
    model: str | None = None
    exchanges: list[CassetteExchange] = field(default_factory=list)
    broken: str | None = None  # why the recording stopped early, if it did

    key = staticmethod(request_key)
    hash_of = staticmethod(key_hash)
    first_difference = staticmethod(first_difference)


# What a recorded response may say it counted and cost. A cassette is a file anyone can
# edit without breaking a request hash (only requests are hashed), and the replay hands
# its turns to the run as they are: a negative cost would keep any cost limit from being
# reached, NaN makes the report invalid JSON, 10**30 tokens an absurd total. The token
# bound is the anthropic provider's (MAX_TOKEN_COUNT there: ten times the largest
# context window); the cost bound the scripted provider's for a declared cost (two
# turns of 1e308 summed to an infinity in the report).
MAX_TOKEN_COUNT = 10_000_000
MAX_TURN_COST = 1_000_000
# The statuses a recording can hold for a failed call: RequestRejected.RECORDED, a
# ProviderError's status (provider_error, or a provider's own, replayed as
# provider_error), or none (a provider that raised something else). evalctl's other
# exit statuses are never a provider's to carry: replayed, `executor_error` or
# `setup_error` would turn the attempt into an error left out of every rate.
NOT_RECORDED_STATUSES = frozenset(
    (ExitStatus.ERRORS | ExitStatus.AGENT) - {ExitStatus.PROVIDER_ERROR})


def _response_problem(record: Mapping[str, Any]) -> str | None:
    """Why an exchange's response (or error) is not one a recording holds, or None."""
    if "response" not in record:
        error = record["error"]
        if not isinstance(error, Mapping):
            return "the error is not an object"
        status = error.get("status")
        if status is None or status == RequestRejected.RECORDED:
            return None
        if not isinstance(status, str) or status in NOT_RECORDED_STATUSES:
            return (f"the error's status {_short(status)} is not one a provider's error "
                    "carries")
        return None
    response = record["response"]
    cost = response.get("cost")
    if cost is not None and (isinstance(cost, bool) or not isinstance(cost, int | float)
                             or not 0 <= cost <= MAX_TURN_COST):  # NaN fails both tests
        return f"the response's cost {_short(cost)} is not a cost in USD (0 to " \
               f"{MAX_TURN_COST:,})"
    usage = response.get("usage") or {}
    if not isinstance(usage, Mapping):
        return "the response's usage is not an object"
    for name in TokenUsage().to_dict():
        count = usage.get(name, 0)
        if isinstance(count, bool) or not isinstance(count, int) or \
                not 0 <= count <= MAX_TOKEN_COUNT:
            return f"the response's usage.{name} {_short(count)} is not a count of " \
                   f"tokens (0 to {MAX_TOKEN_COUNT:,})"
    return None


def _problem(path: Path, line: int, message: str) -> UsageError:
    return UsageError(f"{path}:{line}: {message} (a corrupt cassette: record the run again)")


def read_cassette(path: Path) -> Cassette:
    """One cassette file, every request rebuilt and checked against its hash; a
    UsageError at `file:line` for anything that is not what evalctl wrote."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"{path}: cannot read the cassette: "
                         f"{getattr(exc, 'strerror', None) or exc}") from None
    cassette: Cassette | None = None
    keys: list[dict[str, Any]] = []
    # JSON Lines end at "\n" alone: splitlines() would also split at U+2028, U+2029 and
    # U+0085, which the cassette holds unescaped in any model text or tool output.
    for number, line in enumerate(text.split("\n"), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
            event = record["event"]
        except (ValueError, TypeError, KeyError, RecursionError):  # nested past reading
            raise _problem(path, number, "not a JSON record of a cassette") from None
        if cassette is None:
            if event != "cassette" or record.get("format") != CASSETTE_FORMAT:
                raise _problem(path, number, f"expected a header of format {CASSETTE_FORMAT}")
            try:
                cassette = Cassette(path, str(record["task_id"]), int(record["attempt"]),
                                    str(record.get("agent", "")),
                                    str(record.get("provider", "")), record.get("model"))
            except (KeyError, TypeError, ValueError):
                raise _problem(path, number, "a header without task_id and attempt") from None
            continue
        if event == "broken":  # the recording stopped: what came before still replays
            cassette.broken = str(record.get("error", ""))
            break
        if event != "exchange":
            raise _problem(path, number, f"unknown record {event!r}")
        try:
            key = _rebuilt(record["request"], keys)
            turn = turn_from_dict(record["response"]) if "response" in record else None
            error = None if turn is not None else record["error"]
            matches = key_hash(key) == record.get("request_hash")
            problem = _response_problem(record)
        except (KeyError, TypeError, ValueError, IndexError, AttributeError,
                RecursionError) as exc:
            raise _problem(path, number, f"a malformed exchange ({type(exc).__name__}: "
                                         f"{exc})") from None
        if not matches:
            raise _problem(path, number, "the request does not match its request_hash")
        if problem is not None:
            raise _problem(path, number, problem)
        keys.append(key)
        cassette.exchanges.append(CassetteExchange(
            len(keys), key, str(record["request_hash"]), turn,
            None if error is None else str(error.get("message", "")),
            None if error is None else error.get("status"), number))
    if cassette is None:
        raise UsageError(f"{path}: an empty cassette (the attempt never started)")
    return cassette


def _rebuilt(stored: Mapping[str, Any], earlier: list[dict[str, Any]]) -> dict[str, Any]:
    """A request's full key from what was written: whole, or against an earlier one."""
    if "base" not in stored:
        return {name: stored[name] for name in KEY_FIELDS}
    base_number, keep = int(stored["base"]), int(stored["keep"])
    if not 1 <= base_number <= len(earlier) or keep < 0:
        raise ValueError(f"base {base_number} is not an earlier exchange")
    base = earlier[base_number - 1]
    if keep > len(base["messages"] or []):
        raise ValueError(f"keep {keep} is more messages than exchange {base_number} had")
    key = {name: stored.get(name, base[name]) for name in ("model", "system", "tools")}
    key["messages"] = list(base["messages"][:keep]) + list(stored["messages"])
    return key


def cassette_files(path: Path) -> list[Path]:
    """The cassette files at `path`: a run directory (its .cassettes), a directory of
    cassettes, or one file."""
    if path.is_file():
        return [path]
    directory = path / CASSETTES_DIR if (path / CASSETTES_DIR).is_dir() else path
    if not directory.is_dir():
        raise UsageError(f"{path}: no such run directory or cassette")
    return sorted(p for p in directory.iterdir() if p.suffix == ".jsonl" and p.is_file())


def read_cassettes(path: str | os.PathLike[str]) -> list[Cassette]:
    """Every cassette at `path` (a run directory of `evalctl run`, a directory of
    cassettes, or one cassette file), each checked; a UsageError (exit 2) naming the
    file and line of anything unreadable, or saying there are none."""
    where = Path(path)
    files = cassette_files(where)
    if not files:
        raise UsageError(f"{where}: no cassettes here (a run of this evalctl keeps them in "
                         f"RUN_DIR/{CASSETTES_DIR}/)")
    return [read_cassette(file) for file in files]
