"""The agent loop: model turn -> tool calls -> tool results -> ... until the model
ends its turn or a limit stops it. The exit status is always recorded.

Token, cost and turn totals are kept here, in memory, as turns arrive: the ledger
records them but is never read back (the agent may have deleted or mangled it).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from evalctl._agent.ledger import LEDGER_TEXT_LIMIT, Ledger
from evalctl._agent.throttle import RATE_LIMIT_RETRIES, CallThrottle, backoff_seconds
from evalctl._agent.tools import Toolbox, ToolOutcome
from evalctl._errors import ProviderError, RateLimited
from evalctl._plugin.tooldefs import TOOL_DEFINITIONS
from evalctl._plugin.types import (
    AgentResult,
    AssistantMessage,
    ExitStatus,
    Message,
    ModelRequest,
    ModelTurn,
    Sandbox,
    StopReason,
    TokenUsage,
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


SpendCallback = Callable[[TokenUsage, "float | None"], None]


@dataclass
class _Progress:
    final_text: str = ""
    tool_calls: int = 0
    unpriced_noted: bool = False
    turns: int = 0
    usage: TokenUsage = field(default_factory=TokenUsage)
    cost: float | None = 0.0  # None once any turn was unpriced: never a silent $0


async def run_agent(task: Task, provider: Any, workspace: Workspace, sandbox: Sandbox,
                    system_prompt: str = SYSTEM_PROMPT, *,
                    throttle: CallThrottle | None = None,
                    on_spend: SpendCallback | None = None) -> AgentResult:
    """Run one task to its end. Cancellation records 'aborted' and re-raises; an
    unexpected exception is recorded as 'internal_error' and re-raised.

    `throttle` is the run's shared limit on model calls at once (it adapts to rate
    limits); `on_spend(usage, cost)` is told of every model turn as it arrives, so a
    run-wide budget sees spending before the attempt ends."""
    started = time.monotonic()
    ledger = Ledger(workspace.ledger_path)
    ledger.append("task_start", task_id=task.id, prompt=task.prompt,
                  permissions=task.permissions, limits=task.limits.to_dict())
    toolbox = Toolbox(workspace, sandbox, task.permissions)
    messages: list[Message] = [UserMessage(task.prompt)]
    progress = _Progress()
    status, error = ExitStatus.MAX_TURNS, None
    calls = _ModelCalls(provider, ledger, throttle or CallThrottle(1 << 30), on_spend)
    try:
        async with asyncio.timeout(task.limits.seconds):
            status, error = await _converse(task, calls, toolbox, ledger, messages,
                                            system_prompt, progress)
    except TimeoutError:
        status, error = ExitStatus.TIMEOUT, f"stopped after {task.limits.seconds:g}s"
        ledger.append("limit", limit="seconds", value=task.limits.seconds)
    except asyncio.CancelledError:
        ledger.append("task_end", status=ExitStatus.ABORTED, error="cancelled")
        ledger.close()
        raise
    except Exception as exc:  # a bug: the ledger still ends honestly; the runner records it
        ledger.append("task_end", status=ExitStatus.INTERNAL_ERROR,
                      error=f"{type(exc).__name__}: {exc}")
        ledger.close()
        raise
    ledger.append("task_end", status=status, error=error)
    ledger.close()
    # Hashing the workspace reads every file the agent left: never on the event loop.
    files_changed = await asyncio.to_thread(workspace.changed_files)
    return AgentResult(
        final_text=progress.final_text,
        exit_status=status,
        turns=progress.turns,
        tool_calls=progress.tool_calls,
        usage=progress.usage,
        cost=progress.cost,
        duration=round(time.monotonic() - started, 4),
        files_changed=files_changed,
        ledger_path=workspace.ledger_path,
        error=error,
        seed_path=workspace.seed_path,
    )


@dataclass
class _ModelCalls:
    """Model calls through the run's throttle: a rate-limited call waits and is asked
    again (the run lowering its concurrency meanwhile) up to RATE_LIMIT_RETRIES times."""

    provider: Any
    ledger: Ledger
    throttle: CallThrottle
    on_spend: SpendCallback | None

    async def complete(self, request: ModelRequest) -> ModelTurn:
        refusals = 0
        while True:
            async with self.throttle.slot() as generation:
                try:
                    turn: ModelTurn = await self.provider.complete(request)
                except RateLimited as exc:
                    self.throttle.rate_limited(generation)
                    refusals += 1
                    if refusals > RATE_LIMIT_RETRIES:
                        raise ProviderError(f"still rate limited after {refusals} tries: "
                                            f"{exc}") from None
                    wait = backoff_seconds(refusals, exc.retry_after)
                    self.ledger.append("rate_limited", error=str(exc), wait=round(wait, 3),
                                       concurrency=self.throttle.limit)
                else:
                    self.throttle.succeeded()
                    return turn
            await asyncio.sleep(wait)  # outside the slot: a waiting call holds none


async def _converse(task: Task, calls: _ModelCalls, toolbox: Toolbox, ledger: Ledger,
                    messages: list[Message], system_prompt: str,
                    progress: _Progress) -> tuple[str, str | None]:
    for turn_index in range(task.limits.turns):
        request = ModelRequest(system_prompt, list(messages), list(TOOL_DEFINITIONS),
                               task=task.as_request_data(), turn_index=turn_index)
        try:
            turn: ModelTurn = await calls.complete(request)
        except ProviderError as exc:
            status = getattr(exc, "status", None) or ExitStatus.PROVIDER_ERROR
            ledger.append("provider_error", error=str(exc), status=status)
            return status, str(exc)
        except Exception as exc:  # a broken provider plugin must not take the run down
            error = f"the provider raised {type(exc).__name__}: {exc}"
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
        progress.turns += 1
        progress.usage = progress.usage + turn.usage
        progress.cost = None if progress.cost is None or turn.cost is None else \
            progress.cost + turn.cost
        if calls.on_spend is not None:
            calls.on_spend(turn.usage, turn.cost)
        cost = progress.cost

        if turn.tool_calls:
            results = await asyncio.gather(*(_call_tool(toolbox, ledger, call)
                                             for call in turn.tool_calls))
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


async def _call_tool(toolbox: Toolbox, ledger: Ledger, call: ToolCall) -> ToolResult:
    ledger.append("tool_call", id=call.id, name=call.name, arguments=_clip(call.arguments))
    outcome: ToolOutcome = await toolbox.call(call.name, call.arguments)
    if outcome.denied:
        ledger.append("denial", id=call.id, name=call.name, reason=outcome.content)
    ledger.append("tool_result", id=call.id, name=call.name, is_error=outcome.is_error,
                  content=truncate(outcome.content, LEDGER_TEXT_LIMIT))
    return ToolResult(call.id, outcome.content, outcome.is_error)
