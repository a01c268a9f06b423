"""The per-task ledger: an append-only JSONL record of everything the agent did.

Each event is one line, written and flushed as it happens and never rewritten, so an
interrupted task still leaves an honest record. The ledger is the audit trail, not
the source of truth: the loop keeps its totals in memory, so a ledger the agent
deleted or corrupted costs the record, never the result. Any text is written, lone
surrogates included (as JSON escapes).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from evalctl._files import write_all
from evalctl._plugin.types import TokenUsage
from evalctl._text import json_line

LEDGER_TEXT_LIMIT = 8_000


class Ledger:
    def __init__(self, path: Path):
        self.path = path
        self.failure: str | None = None  # why the ledger stopped being written, if it did
        self._fd: int | None = None
        self._seq = 0
        try:
            # A new ledger (the usual case) is one system call; one opened again (the
            # agent's, after the setup's events) numbers on from its last line.
            try:
                self._fd = os.open(path, _NEW, 0o666)
            except FileExistsError:
                self._seq = _count_lines(path)
                self._fd = os.open(path, _AGAIN)
        except OSError as exc:
            self._fd = None
            self.failure = f"cannot open {path}: {exc.strerror or exc}"
        self._start = time.monotonic()

    def append(self, event: str, **fields: Any) -> None:
        self.append_encoded(event, {}, **fields)

    def append_encoded(self, event: str, encoded: Mapping[str, str], **fields: Any) -> None:
        """An event with some fields given as their JSON texts already (`encoded`, by
        name: valid JSON, names that need no escaping), written after the others."""
        self._seq += 1
        if self._fd is None:
            return
        record = {"seq": self._seq, "t": round(time.monotonic() - self._start, 4),
                  "event": event, **fields}
        try:
            line = json_line(record)
        except RecursionError:  # a value nested past encoding (a model's tool input, say)
            line = json_line({**{k: record[k] for k in ("seq", "t", "event")},
                              "unrecorded": "its fields are nested too deep to record"})
            encoded = {}
        if encoded:
            line = line[:-1] + "".join(f',"{name}":{text}' for name, text in encoded.items()) \
                + "}"
        try:
            # Unbuffered: each event is on its way to the disk before the next happens.
            write_all(self._fd, (line + "\n").encode("utf-8"))
        except (OSError, ValueError) as exc:  # a full disk must not cost the task its result
            self.failure = f"cannot write {self.path}: {exc}"
            self.close()

    def close(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            try:
                os.close(fd)
            except OSError as exc:
                self.failure = self.failure or f"cannot write {self.path}: {exc}"


_NEW = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC
_AGAIN = os.O_WRONLY | os.O_APPEND | os.O_CLOEXEC


def _count_lines(path: Path) -> int:
    try:
        with open(path, "rb") as handle:
            return sum(1 for _ in handle)
    except FileNotFoundError:
        return 0


def read_events(path: Path) -> list[dict[str, Any]]:
    with open(path, encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


def ledger_spend(path: Path) -> tuple[TokenUsage, float | None]:
    """What an unfinished attempt's ledger says its model turns spent, for the budget of
    a resumed run; lines that cannot be read are passed over (the attempt may have
    been killed mid-line, or the agent may have written to it). Never a result's
    source: a finished attempt's totals come from memory."""
    usage, cost = TokenUsage(), 0.0
    unpriced = False
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            for line in handle:
                if '"model_turn"' not in line:
                    continue
                try:
                    event = json.loads(line)
                    if event.get("event") != "model_turn":
                        continue
                    turn_usage = TokenUsage.from_dict(event.get("usage") or {})
                    turn_cost = event.get("cost")
                    turn_cost = None if turn_cost is None else float(turn_cost)
                except (ValueError, TypeError, AttributeError, RecursionError):
                    continue
                usage = usage + turn_usage
                if turn_cost is None:
                    unpriced = True
                else:
                    cost += turn_cost
    except OSError:
        pass
    return usage, None if unpriced else round(cost, 6)
