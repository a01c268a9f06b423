"""A task's transcript for the HTML report, read from its ledger (the JSONL the agent
loop appends to): the prompt, each model turn with the tool calls it made and what came
back, and the loop's own notes (limits, provider errors, how it ended).

Long texts are cut here, head and tail kept, and each cut says which ledger line holds
the text as recorded, so the page stays small and nothing is out of reach. A ledger
that is missing or has unreadable lines gives a transcript that says so, never an
exception: the report of a run must not depend on every file of it being intact.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import evalctl

TEXT_LIMIT = 3_000  # characters of one model text, tool input or tool output shown
TASK_BUDGET = 150_000  # characters of transcript per task; the rest is left in the ledger


@dataclass
class Transcript:
    """What the page shows of one ledger. `items` are plain data for the page's script:
    turns (`k: "turn"`, with their `calls`) and notes (`k: "note"`)."""

    prompt: str | None = None
    items: list[dict[str, Any]] = field(default_factory=list)
    problem: str | None = None  # why the transcript is missing or incomplete
    # What evalctl measured the agent changed (path -> created, modified, deleted), from
    # the ledger's last `task_end`; None when the ledger does not say. The workspace
    # also holds what came after the agent (verify files, what the checks wrote).
    files_changed: dict[str, str] | None = None
    files_changed_omitted: int = 0  # what the task_end's record did not list


def arguments_text(arguments: Any) -> str:
    """A tool call's arguments as a person reads them: `key: value` lines, a multi-line
    string (a file's content, a script) on the lines after its key, as it was."""
    if not isinstance(arguments, dict):
        return "" if arguments is None else json.dumps(arguments, ensure_ascii=False,
                                                       default=str)
    lines = []
    for key, value in arguments.items():
        if isinstance(value, str) and "\n" in value:
            lines.append(f"{key}:\n{value}")
        elif isinstance(value, str):
            lines.append(f"{key}: {value}")
        else:
            lines.append(f"{key}: {json.dumps(value, ensure_ascii=False, default=str)}")
    return "\n".join(lines)


class _Reader:
    def __init__(self) -> None:
        self.transcript = Transcript()
        self.turn: dict[str, Any] | None = None
        self.calls: dict[str, dict[str, Any]] = {}
        self.spent = 0

    def text(self, value: Any, line: int) -> dict[str, Any]:
        """A text as shown, with the ledger line to find it whole when it was cut."""
        text = value if isinstance(value, str) else json.dumps(value, indent=2,
                                                              ensure_ascii=False, default=str)
        self.spent += min(len(text), TEXT_LIMIT)
        if len(text) <= TEXT_LIMIT:
            return {"text": text}
        return {"text": evalctl.truncate(text, TEXT_LIMIT), "cut": line}

    def note(self, level: str, text: str, line: int) -> None:
        self.spent += len(text)
        self.transcript.items.append({"k": "note", "level": level, "text": text, "line": line})

    def call(self, call_id: Any, name: Any, arguments: Any, line: int) -> dict[str, Any]:
        entry = {"name": str(name), "input": self.text(arguments_text(arguments), line),
                 "output": None, "error": False, "denied": None, "line": line}
        if self.turn is None:  # a call with no turn before it: shown on its own
            self.turn = {"k": "turn", "n": None, "line": line, "calls": []}
            self.transcript.items.append(self.turn)
        self.turn["calls"].append(entry)
        self.calls[str(call_id)] = entry
        return entry

    def ended(self, event: dict[str, Any]) -> None:
        """Keep a `task_end`'s files changed: the last one the ledger has wins."""
        changed = event.get("files_changed")
        if isinstance(changed, dict):
            self.transcript.files_changed = {str(k): str(v) for k, v in changed.items()}
            omitted = event.get("files_changed_omitted")
            self.transcript.files_changed_omitted = omitted if isinstance(omitted, int) \
                and not isinstance(omitted, bool) and omitted > 0 else 0

    def event(self, event: dict[str, Any], line: int) -> None:
        kind = event.get("event")
        if kind == "task_start":
            self.transcript.prompt = str(event.get("prompt", ""))
        elif kind == "model_turn":
            usage = event.get("usage") or {}
            self.turn = {"k": "turn", "n": event.get("turn"), "line": line,
                         "stop": event.get("stop_reason"), "model": event.get("model"),
                         "tokens": [usage.get("input_tokens", 0), usage.get("output_tokens", 0)],
                         "cost": event.get("cost"), "say": self.text(event.get("text") or "",
                                                                     line),
                         "calls": []}
            self.calls = {}
            self.transcript.items.append(self.turn)
            for call in event.get("tool_calls") or []:
                if isinstance(call, dict):
                    self.call(call.get("id"), call.get("name"), call.get("arguments"), line)
        elif kind == "tool_call":
            if str(event.get("id")) not in self.calls:
                self.call(event.get("id"), event.get("name"), event.get("arguments"), line)
        elif kind == "denial":
            entry = self.calls.get(str(event.get("id")))
            if entry is not None:
                entry["denied"] = str(event.get("reason", ""))
        elif kind == "tool_result":
            entry = self.calls.get(str(event.get("id"))) or \
                self.call(event.get("id"), event.get("name"), None, line)
            entry["output"] = self.text(event.get("content") or "", line)
            entry["error"] = bool(event.get("is_error"))
            entry["line"] = line
        elif kind == "provider_error":
            self.note("error", f"provider error ({event.get('status')}): {event.get('error')}",
                      line)
        elif kind == "limit":
            limit, value = event.get("limit"), event.get("value")
            text = f"{limit} limit ({value}): {event['note']}" if event.get("note") else \
                f"stopped by the {limit} limit ({value})"
            self.note("warn" if event.get("note") else "error", text, line)
        elif kind == "setup_start":
            commands = event.get("commands") or []
            network = "with" if event.get("network") else "without"
            self.note("info", f"setup: {len(commands)} command(s), {network} the network",
                      line)
        elif kind == "setup_command":
            code, timed_out = event.get("exit_code"), bool(event.get("timed_out"))
            ended = "timed out" if timed_out else f"exit {code}"
            output = self.text(event.get("output") or "", line)["text"].rstrip("\n")
            self.note("info" if code == 0 and not timed_out else "error",
                      f"setup command {event.get('index')} ({ended}): {event.get('command')}"
                      + (f"\n{output}" if output else ""), line)
        elif kind == "setup_end":
            if event.get("status") != "ok":
                self.note("error", f"setup failed: {event.get('error')}", line)
        elif kind == "grader_crashed":  # after the agent: a check's plugin, with its trace
            trace = self.text(event.get("traceback") or "", line)["text"].rstrip("\n")
            self.note("error", f"{event.get('error')}" + (f"\n{trace}" if trace else ""),
                      line)
        elif kind == "pause_turn":
            self.note("info", "the model paused its turn; the loop went on", line)
        elif kind == "task_end":
            self.ended(event)
            status, error = event.get("status"), event.get("error")
            self.note("info" if status == "completed" else "error",
                      f"the agent loop ended: {status}" + (f" ({error})" if error else ""), line)
        else:
            rest = {k: v for k, v in event.items() if k not in ("seq", "t", "event")}
            self.note("info", f"{kind}: " + evalctl.truncate(
                json.dumps(rest, ensure_ascii=False, default=str), 500, keep="head"), line)


def read_transcript(ledger: str | Path | None) -> Transcript:
    """The transcript of the ledger at `ledger`; its `problem` says what is missing."""
    if not ledger:
        return Transcript(problem="no ledger was recorded for this attempt")
    reader = _Reader()
    try:
        handle = open(ledger, encoding="utf-8", errors="replace")  # noqa: SIM115
    except OSError as exc:
        return Transcript(problem=f"the ledger {ledger} cannot be read: {exc.strerror or exc}")
    with handle:
        line_number = 0
        for line_number, line in enumerate(handle, start=1):
            if reader.spent > TASK_BUDGET:
                remaining = 1 + _scan_for_end(reader, line, handle)
                reader.transcript.problem = (
                    f"shown up to ledger line {line_number - 1}; {remaining} more line(s) "
                    "are in the ledger")
                break
            if not line.strip():
                continue
            try:
                event = json.loads(line)
                if not isinstance(event, dict):
                    raise ValueError("not an object")
            except (ValueError, RecursionError):
                reader.note("error", f"ledger line {line_number} is not a JSON event",
                            line_number)
                continue
            reader.event(event, line_number)
    return reader.transcript


def _scan_for_end(reader: _Reader, line: str, rest: Iterable[str]) -> int:
    """How many lines `rest` holds: counted, not shown. A `task_end` among `line` and
    them is still read (what the agent changed, which the changes view needs however
    long the transcript)."""
    _end_of(reader, line)
    count = 0
    for text in rest:
        count += 1
        _end_of(reader, text)
    return count


def _end_of(reader: _Reader, text: str) -> None:
    if '"task_end"' not in text:  # most lines: no parse
        return
    try:
        event = json.loads(text)
    except (ValueError, RecursionError):
        return
    if isinstance(event, dict) and event.get("event") == "task_end":
        reader.ended(event)
