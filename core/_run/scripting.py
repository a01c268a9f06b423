"""`evalctl script RUN_DIR TASK_ID`: a built-in-loop attempt as the scripted provider's
`script:` turns, so a trajectory seen live becomes a scripted regression test.

The turns come from the attempt's cassette when it has one (every turn whole), else from
its ledger's `model_turn` events (the texts and arguments the ledger kept, which clips
very long ones: the script then says so). Each turn keeps its text, its tool calls, its
token usage and cost, and a stop reason other than the default, so the scripted run
takes the same actions and reports the same totals.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from evalctl._agent.cassette import read_cassette
from evalctl._agent.ledger import read_events
from evalctl._errors import UsageError
from evalctl._plugin.types import ModelTurn, StopReason, TokenUsage, ToolCall
from evalctl._report.journal import attempt_name, read_journal
from evalctl._suite.yamlwrite import dump
from evalctl._text import did_you_mean
from evalctl._workspace import cassette_path, ledger_path

BUILTIN_AGENT = "evalctl"  # the agent plugin of the built-in loop, as journals name it
SCRIPTED_STOP_REASONS = ("end_turn", "tool_use", "max_tokens", "refusal", "pause_turn",
                         "model_context_window_exceeded")
CLIPPED = "characters elided ...]"  # what the ledger's truncation leaves in a clipped text


@dataclass
class Script:
    turns: list[dict[str, Any]]
    source: Path
    warnings: list[str] = field(default_factory=list)

    def yaml(self, indent: int = 0) -> str:
        header = (f"script: {len(self.turns)} turn(s) from {self.source}\n"
                  "paste it under the task in its suite (evalctl validate checks it)")
        text = dump({"script": self.turns}, header=header)
        pad = " " * indent
        return "".join(pad + line if line.strip() else line
                       for line in text.splitlines(keepends=True))


def script_of(run_dir: Path, task_id: str, attempt: int = 1) -> Script:
    """The script that reproduces an attempt of the built-in loop; a UsageError (exit 2)
    for a run, task or attempt that is not there, or an attempt of another agent."""
    contents = read_journal(run_dir)
    header = contents.header
    planned = [str(task.get("id")) for task in header.get("tasks", [])]
    if task_id not in planned:
        # With a did-you-mean, as every other unknown name gets (found by a newcomer).
        raise UsageError(f"{run_dir}: no task '{task_id}' in this run"
                         f"{did_you_mean(task_id, planned)}; its tasks: "
                         f"{', '.join(planned) or 'none'}")
    if not 1 <= attempt <= contents.repeat:
        raise UsageError(f"{run_dir}: task '{task_id}' has attempts 1 to {contents.repeat}, "
                         f"not {attempt}")
    agent = header.get("agent") or {}
    if (agent.get("base") or agent.get("name") or BUILTIN_AGENT) != BUILTIN_AGENT:
        raise UsageError(f"{run_dir}: the run's agent is '{agent.get('name')}', a CLI agent; "
                         "scripts reproduce the built-in loop's attempts (a CLI agent's "
                         "offline turns are `agent_script:`, docs/agents.md)")
    name = attempt_name(task_id, attempt, contents.repeat)
    cassette = cassette_path(contents.run_dir, name)
    if cassette.is_file():
        return _from_cassette(cassette)
    ledger = ledger_path(contents.run_dir, name)
    if ledger.is_file():
        return _from_ledger(ledger)
    raise UsageError(f"{run_dir}: attempt '{name}' left no cassette and no ledger (it never "
                     "started)")


def _from_cassette(path: Path) -> Script:
    cassette = read_cassette(path)
    script = Script([], path)
    for exchange in cassette.exchanges:
        if exchange.turn is None:
            script.warnings.append(f"model call {exchange.number} failed ({exchange.error}); "
                                   "the script ends before it")
            break
        script.turns.append(_scripted(exchange.turn, script.warnings))
    if cassette.broken:
        script.warnings.append(f"the recording stopped early ({cassette.broken}); the "
                               "script ends there")
    if not script.turns:
        raise UsageError(f"{path}: the attempt has no model turn to script")
    return script


def _from_ledger(path: Path) -> Script:
    try:
        events = read_events(path)
    except (OSError, ValueError, RecursionError) as exc:
        raise UsageError(f"{path}: cannot read the ledger: {exc}") from None
    script = Script([], path)
    for event in events:
        if event.get("event") != "model_turn" or event.get("via") == "proxy":
            continue
        turn = ModelTurn(
            text=str(event.get("text") or ""),
            tool_calls=[ToolCall(str(c.get("id", "")), str(c.get("name", "")),
                                 dict(c.get("arguments") or {}))
                        for c in event.get("tool_calls") or []],
            stop_reason=str(event.get("stop_reason") or StopReason.END_TURN),
            usage=TokenUsage.from_dict(event.get("usage") or {}), cost=event.get("cost"))
        script.turns.append(_scripted(turn, script.warnings))
    if not script.turns:
        raise UsageError(f"{path}: the attempt has no model turn to script")
    if any(CLIPPED in line for line in _strings(script.turns)):
        script.warnings.append("the ledger clipped a long text or argument (there is no "
                               "cassette): the script holds it clipped")
    return script


def _scripted(turn: ModelTurn, warnings: list[str]) -> dict[str, Any]:
    """One model turn as a scripted turn."""
    entry: dict[str, Any] = {"text": turn.text}
    if turn.tool_calls:
        entry["tool_calls"] = [{"tool": call.name, "input": dict(call.arguments)}
                               for call in turn.tool_calls]
    usage = {k: v for k, v in turn.usage.to_dict().items() if v}
    if usage:
        entry["usage"] = usage
    if turn.cost:
        entry["cost"] = turn.cost
    default = StopReason.TOOL_USE if turn.tool_calls else StopReason.END_TURN
    if turn.stop_reason != default:
        if turn.stop_reason in SCRIPTED_STOP_REASONS:
            entry["stop_reason"] = turn.stop_reason
        else:
            warnings.append(f"stop reason {turn.stop_reason!r} cannot be scripted; left out")
    return entry


def _strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for v in value.values() for s in _strings(v)]
    if isinstance(value, list):
        return [s for v in value for s in _strings(v)]
    return []
