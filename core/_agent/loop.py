"""The agent loop: model turn -> tool calls -> tool results -> ... until the model
ends its turn or a limit stops it. The exit status is always recorded.

Model calls go through the attempt's `ModelCalls` (the run's throttle and budget), which
keeps token, cost and turn totals in memory as turns arrive: the ledger records them but
is never read back (the agent may have deleted or mangled it).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

from evalctl._agent.ledger import LEDGER_TEXT_LIMIT, Ledger
from evalctl._agent.throttle import ModelCalls
from evalctl._agent.tools import Toolbox, ToolOutcome
from evalctl._errors import ProviderError, RequestRejected, describe_crash, stops_the_run
from evalctl._plugin.tooldefs import TOOL_CALLS_AT_ONCE, TOOL_DEFINITIONS
from evalctl._plugin.types import (
    AgentOutcome,
    AssistantMessage,
    ExitStatus,
    Message,
    ModelRequest,
    ModelTurn,
    Sandbox,
    StopReason,
    ToolCall,
    ToolResult,
    ToolResultsMessage,
    UserMessage,
)
from evalctl._suite.model import Task
from evalctl._text import truncate
from evalctl._workspace import Workspace

SYSTEM_PROMPT = """\
You are an autonomous agent working in a directory that is your workspace. Use the \
tools to inspect and change files and to run commands; paths are relative to the \
workspace. Work until the task is done, checking your work where you can. When you \
are finished, reply without calling a tool, with a short summary of what you did that \
names the files you created or changed. If you could not finish, say so plainly."""

_STOP_STATUS = {
    StopReason.END_TURN: ExitStatus.COMPLETED,
    StopReason.MAX_TOKENS: ExitStatus.MAX_TOKENS,
    StopReason.REFUSAL: ExitStatus.REFUSED,
    StopReason.CONTEXT_OVERFLOW: ExitStatus.CONTEXT_OVERFLOW,
}


@dataclass
class _Progress:
    final_text: str = ""
    tool_calls: int = 0
    unpriced_noted: bool = False


async def run_loop(task: Task, provider: Any, workspace: Workspace, sandbox: Sandbox,
                   ledger: Ledger, system_prompt: str = SYSTEM_PROMPT, *,
                   calls: ModelCalls | None = None) -> AgentOutcome:
    """The built-in agent on one attempt: turns until the model ends its turn or a limit
    (turns, seconds, cost) stops it, every event appended to `ledger`. Its model calls go
    through `calls` (the attempt's, which counts them; a fresh unthrottled one if None)."""
    calls = calls or ModelCalls(provider, ledger)
    toolbox = Toolbox(workspace, sandbox, task.permissions)
    messages: list[Message] = [UserMessage(task.prompt)]
    progress = _Progress()
    try:
        async with asyncio.timeout(task.limits.seconds):
            status, error = await _converse(task, calls, toolbox, ledger, messages,
                                            system_prompt, progress)
    except TimeoutError:
        status, error = ExitStatus.TIMEOUT, f"stopped after {task.limits.seconds:g}s"
        ledger.append("limit", limit="seconds", value=task.limits.seconds)
    return AgentOutcome(status, progress.final_text, error, progress.tool_calls)


async def _converse(task: Task, calls: ModelCalls, toolbox: Toolbox, ledger: Ledger,
                    messages: list[Message], system_prompt: str,
                    progress: _Progress) -> tuple[str, str | None]:
    for turn_index in range(task.limits.turns):
        request = ModelRequest(system_prompt, list(messages), list(TOOL_DEFINITIONS),
                               task=task.as_request_data(), turn_index=turn_index,
                               locate=task.locate)
        try:
            turn: ModelTurn = await calls.complete(request)
        except ProviderError as exc:
            # A refused request after the first is the agent's, as through the proxy: it
            # holds the model's own turns, sent back verbatim, and what its tools returned,
            # so a model could make one the service refuses and turn a task it was
            # failing into an error, out of the score (found by an attacker round). The
            # first is the suite's and the configuration's alone: refused, an error.
            status = ExitStatus.REQUEST_REJECTED if \
                isinstance(exc, RequestRejected) and turn_index else \
                getattr(exc, "status", None) or ExitStatus.PROVIDER_ERROR
            ledger.append("provider_error", error=str(exc), status=status)
            return status, str(exc)
        except BaseException as exc:  # a broken provider plugin must not take the run down
            if stops_the_run(exc):  # SystemExit is the plugin's: it ended evalctl, exit 0
                raise
            error = f"the provider raised {describe_crash(exc)}"
            ledger.append("provider_error", error=error, status=ExitStatus.PROVIDER_ERROR)
            return ExitStatus.PROVIDER_ERROR, error
        ledger.append(
            "model_turn", turn=turn_index + 1, model=turn.model, stop_reason=turn.stop_reason,
            text=truncate(turn.text, LEDGER_TEXT_LIMIT),
            tool_calls=[{"id": c.id, "name": c.name, "arguments": _clip(c.arguments)}
                        for c in turn.tool_calls],
            usage=turn.usage.to_dict(), cost=turn.cost)
        messages.append(AssistantMessage(turn))
        progress.final_text = turn.text  # the summary is what the last turn says
        cost = calls.cost  # the attempt's, counted as the turn arrived

        if turn.tool_calls:
            results = await _call_tools(toolbox, ledger, turn.tool_calls)
            progress.tool_calls += len(results)
            messages.append(ToolResultsMessage(tuple(results)))
        elif turn.stop_reason == StopReason.PAUSE_TURN:
            ledger.append("pause_turn", turn=turn_index + 1)
        else:
            status = _STOP_STATUS.get(turn.stop_reason, ExitStatus.COMPLETED)
            return status, None if status == ExitStatus.COMPLETED else \
                f"the model stopped with {turn.stop_reason}"

        if task.limits.cost is not None:
            if cost is None and not progress.unpriced_noted:
                progress.unpriced_noted = True
                ledger.append("limit", limit="cost", value=task.limits.cost,
                              note="model is unpriced; the cost limit cannot be enforced")
            elif cost is not None and cost > task.limits.cost:
                ledger.append("limit", limit="cost", value=task.limits.cost, spent=cost)
                return ExitStatus.COST_LIMIT, f"spent ${cost:.4f}, limit ${task.limits.cost:g}"
    ledger.append("limit", limit="turns", value=task.limits.turns)
    return ExitStatus.MAX_TURNS, f"no final answer after {task.limits.turns} turns"


def _clip(arguments: Any) -> Any:
    """Tool arguments for the ledger: long strings (a file's content, say) cut the way
    tool output is, so one write cannot bloat the ledger."""
    if isinstance(arguments, dict):
        return {key: _clip(value) for key, value in arguments.items()}
    if isinstance(arguments, str):
        return truncate(arguments, LEDGER_TEXT_LIMIT)
    return arguments


async def _call_tools(toolbox: Toolbox, ledger: Ledger, calls: list[ToolCall]
                      ) -> list[ToolResult]:
    """A turn's calls, concurrently, TOOL_CALLS_AT_ONCE at a time; results in order."""
    at_once = asyncio.Semaphore(TOOL_CALLS_AT_ONCE)

    async def limited(call: ToolCall) -> ToolResult:
        async with at_once:
            return await _call_tool(toolbox, ledger, call)

    return await asyncio.gather(*(limited(call) for call in calls))


async def _call_tool(toolbox: Toolbox, ledger: Ledger, call: ToolCall) -> ToolResult:
    ledger.append("tool_call", id=call.id, name=call.name, arguments=_clip(call.arguments))
    outcome: ToolOutcome = await toolbox.call(call.name, call.arguments)
    if outcome.denied:
        ledger.append("denial", id=call.id, name=call.name, reason=outcome.content)
    ledger.append("tool_result", id=call.id, name=call.name, is_error=outcome.is_error,
                  content=truncate(outcome.content, LEDGER_TEXT_LIMIT))
    return ToolResult(call.id, outcome.content, outcome.is_error)
