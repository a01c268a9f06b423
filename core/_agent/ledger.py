"""The per-task ledger: an append-only JSONL record of everything the agent did.

Each event is one line, written and flushed as it happens and never rewritten, so an
interrupted task still leaves an honest record. Token totals are read back from it.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from evalctl._plugin.types import TokenUsage

LEDGER_TEXT_LIMIT = 8_000


class Ledger:
    def __init__(self, path: Path):
        self.path = path
        # A ledger opened again (the agent's, after the setup's events) numbers on.
        self._seq = _count_lines(path)
        self._handle = open(path, "a", encoding="utf-8")  # noqa: SIM115 - closed in close()
        self._start = time.monotonic()

    def append(self, event: str, **fields: Any) -> None:
        self._seq += 1
        record = {"seq": self._seq, "t": round(time.monotonic() - self._start, 4),
                  "event": event, **fields}
        self._handle.write(json.dumps(record, ensure_ascii=False, default=str) + "\n")
        self._handle.flush()

    def close(self) -> None:
        if not self._handle.closed:
            self._handle.close()


def _count_lines(path: Path) -> int:
    try:
        with open(path, "rb") as handle:
            return sum(1 for _ in handle)
    except FileNotFoundError:
        return 0


def read_events(path: Path) -> list[dict[str, Any]]:
    with open(path, encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


def ledger_totals(path: Path) -> tuple[TokenUsage, float | None, int]:
    """Token usage, cost (None if any turn was unpriced) and turns, from the ledger."""
    usage = TokenUsage()
    cost: float | None = 0.0
    turns = 0
    with open(path, encoding="utf-8") as handle:
        for line in handle:
            if '"model_turn"' not in line:
                continue
            event = json.loads(line)
            if event.get("event") != "model_turn":
                continue
            turns += 1
            usage = usage + TokenUsage.from_dict(event.get("usage", {}))
            turn_cost = event.get("cost")
            cost = None if cost is None or turn_cost is None else cost + turn_cost
    return usage, cost, turns
