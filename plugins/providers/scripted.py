"""The scripted provider: serves the turns a task declares in `script:`.

Deterministic, free and offline, so a whole suite can run in every CI build. Token
usage is declared per turn or counted from the content (4 characters a token), so
the ledger's totals are exercised. A task without a script gets a reply that claims
success and does nothing: only the graders can tell.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import evalctl

CANNED_REPLY = "Done: the task is complete."
CHARS_PER_TOKEN = 4
TOOL_NAMES = ", ".join(t.name for t in evalctl.tool_definitions())
SCRIPT_ERROR = "script_error"  # an exit status of this provider's: an error, not a failure

def tool_call_schema() -> dict[str, Any]:
    """One scripted tool call: a tool the agent has, with arguments its own input schema
    accepts. Built from the tools' definitions, so `evalctl validate` (and an editor)
    finds a misspelled tool or argument at its line, before a run turns it into an
    agent that seems to fail."""
    tools = evalctl.tool_definitions()
    return {
        "type": "object",
        "properties": {
            "tool": {"enum": [t.name for t in tools], "description": f"One of {TOOL_NAMES}."},
            "input": {"type": "object",
                      "description": "The tool's arguments (docs/tools.md lists them)."},
        },
        "required": ["tool"],
        "additionalProperties": False,
        "allOf": [
            {
                "if": {"properties": {"tool": {"const": tool.name}}, "required": ["tool"]},
                "then": {
                    "properties": {"input": dict(tool.input_schema)},
                    **({"required": ["input"]} if tool.input_schema.get("required") else {}),
                },
            }
            for tool in tools
        ],
    }


def script_schema(tool_call: dict[str, Any], description: str) -> dict[str, Any]:
    """A list of scripted turns, whose tool calls follow `tool_call`."""
    return {
        "type": "array",
        "description": description,
        "items": {
            "type": "object",
            "properties": {
                "text": {"type": "string", "description": "What the model says this turn."},
                "tool_calls": {
                    "type": "array",
                    "description": "Tool calls made this turn; several run concurrently.",
                    "items": tool_call,
                },
                "usage": {
                    "type": "object",
                    "description": "Declared token usage; counted from the content when absent.",
                    "properties": {
                        k: {"type": "integer", "minimum": 0}
                        for k in ("input_tokens", "output_tokens", "cache_read_tokens",
                                  "cache_write_tokens")
                    },
                    "additionalProperties": False,
                },
                "stop_reason": {
                    "enum": ["end_turn", "tool_use", "max_tokens", "refusal", "pause_turn",
                             "model_context_window_exceeded"],
                    "description": "Defaults to tool_use when there are tool calls, else end_turn.",
                },
                # Bounded: two turns of 1e308 summed to an infinity in the report.
                "cost": {"type": "number", "minimum": 0, "maximum": 1_000_000,
                         "description": "Declared cost of the turn in USD (default 0), to "
                                        "exercise cost limits and reports."},
            },
            "additionalProperties": False,
        },
    }


SCRIPT = script_schema(
    tool_call_schema(), "The turns the scripted provider serves for this task, in order.")
# A CLI agent (--agent command, claude-code) offers its own tools (Claude Code's Write,
# Bash, ...), which evalctl cannot know: their names and inputs are checked against the
# tools the agent sends with each request, at run time.
AGENT_SCRIPT = script_schema(
    {"type": "object",
     "properties": {
         "tool": {"type": "string", "minLength": 1,
                  "description": "One of the CLI agent's own tools (Claude Code: Write, "
                                 "Edit, Bash, Read...)."},
         "input": {"type": "object", "description": "The tool's arguments."}},
     "required": ["tool"], "additionalProperties": False},
    "The turns the scripted provider serves to a CLI agent (--agent command or a preset "
    "such as claude-code) through the model proxy, in order; tool names are the agent's "
    "own. The built-in loop reads `script:` instead, so one task can hold both.")


_JSON_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,), "integer": (int,), "number": (int, float), "boolean": (bool,),
    "array": (list, tuple), "object": (dict, Mapping), "null": (type(None),)}


def input_problem(schema: Mapping[str, Any], arguments: Mapping[str, Any]) -> str | None:
    """What is wrong with a scripted call's input for the agent's tool, or None.

    Only the mistakes a script's author makes are looked for: a required argument left
    out, an argument the tool does not have, an argument of the wrong JSON type. The
    schema is the agent's, sent in its request: its patterns, references and the like
    are not evaluated (a pattern is a regular expression the agent chose, which Python
    would run on the harness's thread)."""
    properties = schema.get("properties")
    properties = properties if isinstance(properties, Mapping) else {}
    names = ", ".join(map(str, properties)) or "none"
    required = schema.get("required")
    missing = [name for name in (required if isinstance(required, list) else [])
               if isinstance(name, str) and name not in arguments]
    if missing:
        return (f"its input lacks {', '.join(map(repr, missing))}, which the agent's tool "
                f"requires (its arguments: {names})")
    if schema.get("additionalProperties") is False and properties:
        unknown = [name for name in arguments if name not in properties]
        if unknown:
            return (f"the agent's tool has no argument {', '.join(map(repr, unknown))} (its "
                    f"arguments: {names})")
    for name, value in arguments.items():
        declared = properties.get(name)
        kind = declared.get("type") if isinstance(declared, Mapping) else None
        kinds = [kind] if isinstance(kind, str) else kind if isinstance(kind, list) else []
        accepted = tuple(t for k in kinds if isinstance(k, str) for t in _JSON_TYPES.get(k, ()))
        if not accepted:
            continue
        wrong = not isinstance(value, accepted) or (
            isinstance(value, bool) and bool not in accepted)
        if wrong:
            return (f"argument {name!r} is {type(value).__name__} {value!r:.40}, and the "
                    f"agent's tool takes {' or '.join(map(str, kinds))}")
    return None


def _located(request: evalctl.ModelRequest, path: tuple[str | int, ...]) -> str:
    """"FILE:LINE: " where `path` of the task is written, or "" when that is unknown."""
    where = request.locate(path) if request.locate is not None else ""
    return f"{where}: " if where else ""


def _near(name: str, names: Iterable[str]) -> str:
    """" (did you mean 'x'?)" for the name closest in spelling to `name`, or ""."""
    close = difflib.get_close_matches(name, list(names), n=1)
    return f" (did you mean '{close[0]}'?)" if close else ""


def count_tokens(text: str) -> int:
    return (len(text) + CHARS_PER_TOKEN - 1) // CHARS_PER_TOKEN


def _request_text(request: evalctl.ModelRequest) -> str:
    parts = [request.system, *(t.name + t.description for t in request.tools)]
    for message in request.messages:
        if isinstance(message, evalctl.UserMessage):
            parts.append(message.text)
        elif isinstance(message, evalctl.AssistantMessage):
            parts.append(message.turn.text)
            parts.extend(json.dumps(c.arguments, sort_keys=True) for c in message.turn.tool_calls)
        else:
            parts.extend(r.content for r in message.results)
    return "".join(parts)


class ScriptedProvider:
    def __init__(self, latency: float = 0.0):
        self.latency = latency

    async def complete(self, request: evalctl.ModelRequest) -> evalctl.ModelTurn:
        if self.latency:
            import asyncio

            await asyncio.sleep(self.latency)
        # A call through the model proxy (a CLI agent) is served the agent's script.
        key = "agent_script" if request.api_request is not None and \
            "agent_script" in request.task else "script"
        script = request.task.get(key)
        task_id = request.task.get("id", "?")
        if script is None:
            turn: Mapping[str, Any] = {"text": CANNED_REPLY}
        elif request.turn_index >= len(script):
            message = (f"{_located(request, (key, len(script) - 1) if script else (key,))}"
                       f"the {key} of task '{task_id}' has {len(script)} turn(s) and the "
                       f"agent asked for turn {request.turn_index + 1}")
            if request.api_request is not None:
                # How many requests a CLI agent sends is the agent's own doing: it hears
                # the refusal and its attempt is graded, or an agent could take a task it
                # fails out of the score by asking once more than its script holds.
                raise evalctl.RequestRejected(message)
            raise evalctl.ProviderError(f"{message}; {RUN_OUT_FIX}", status=SCRIPT_ERROR)
        else:
            turn = script[request.turn_index]
        known = {t.name: t for t in request.tools}
        calls = []
        for index, call in enumerate(turn.get("tool_calls", []), start=1):
            # A CLI agent's tools are known only once it asks: a mistake is said at its
            # line in the suite, as `evalctl validate` says a `script:` one (found by a
            # newcomer: 'write_txt' for the agent's 'write_text', with neither).
            at = (key, request.turn_index, "tool_calls", index - 1)
            where = f"the {key} of task '{task_id}' calls {call['tool']!r} in turn " \
                f"{request.turn_index + 1}"
            if call["tool"] not in known:
                raise evalctl.ProviderError(
                    f"{_located(request, (*at, 'tool'))}{where}: the agent has no such tool"
                    f"{_near(call['tool'], known)}; its tools: "
                    f"{', '.join(sorted(known)) or 'none'}", status=SCRIPT_ERROR)
            if request.api_request is not None:
                # `script:` inputs were checked against the built-in tools' schemas when
                # the suite was validated; a CLI agent's tools are known only now.
                problem = input_problem(known[call["tool"]].input_schema,
                                        call.get("input", {}))
                if problem:
                    raise evalctl.ProviderError(
                        f"{_located(request, (*at, 'input'))}{where}: {problem}",
                        status=SCRIPT_ERROR)
            calls.append(evalctl.ToolCall(f"call_{request.turn_index + 1}_{index}",
                                          call["tool"], dict(call.get("input", {}))))
        text = turn.get("text", "")
        declared = turn.get("usage")
        if declared is not None:
            usage = evalctl.TokenUsage.from_dict(declared)
        else:
            output = text + "".join(json.dumps(c.arguments, sort_keys=True) for c in calls)
            usage = evalctl.TokenUsage(count_tokens(_request_text(request)), count_tokens(output))
        stop = turn.get("stop_reason") or (evalctl.StopReason.TOOL_USE if calls
                                           else evalctl.StopReason.END_TURN)
        return evalctl.ModelTurn(text=text, tool_calls=calls, stop_reason=stop, usage=usage,
                                 cost=float(turn.get("cost", 0.0)), model="scripted")


# What to do about a script that runs out, said by validate and by the run alike.
RUN_OUT_FIX = "add a final text turn (`- text: ...`, without tool calls) to end it"


def task_problems(task: Mapping[str, Any]) -> Iterator[tuple[tuple[str | int, ...], str, str]]:
    """Each script of the task that runs out, at its last turn (or its key, when it has
    none), as a warning: that turn calls tools (or pauses), so the agent sends their
    results and asks for a turn the script does not have, unless the task's turn or cost
    limit ends it first. The built-in loop's attempt then ends script_error (an error,
    not graded); a CLI agent is refused that request (HTTP 400) and its attempt graded.
    Found by a newcomer: such a script passed `evalctl validate`."""
    limits = task.get("limits")
    limits = limits if isinstance(limits, Mapping) else {}
    turns, cost_limit = limits.get("turns"), limits.get("cost")
    for key, who in (("script", "the agent loop"), ("agent_script", "a CLI agent")):
        script = task.get(key)
        if not isinstance(script, list) or not all(isinstance(t, Mapping) for t in script):
            continue
        if isinstance(turns, int | float) and len(script) >= turns:
            continue  # the turn limit ends the attempt before the script runs out
        spent, stopped = 0.0, False
        for turn in script:
            cost = turn.get("cost", 0)
            spent += cost if isinstance(cost, int | float) else 0
            if isinstance(cost_limit, int | float) and spent > cost_limit:
                stopped = True  # the cost limit ends it there
        if stopped:
            continue
        name = f"the {key} of task '{task.get('id')}'"
        if not script:
            why, where = f"has no turn: {who} asks for turn 1", (key,)
        else:
            last = script[-1]
            if last.get("tool_calls"):
                does = f"calls tools: {who} sends their results and asks"
            elif last.get("stop_reason") == "pause_turn":
                does = f"pauses (stop_reason: pause_turn): {who} asks"
            else:
                continue
            why = (f"has {len(script)} turn(s) and its last {does} for turn "
                   f"{len(script) + 1}, which the {key} does not have")
            where = (key, len(script) - 1)
        outcome = "so the attempt ends script_error (an error: its checks run, but it " \
            "counts as neither a pass nor a failure)" \
            if key == "script" else \
            "so the agent is refused that request (HTTP 400) and its attempt is graded"
        yield where, f"{name} {why}, {outcome}; {RUN_OUT_FIX}", "warning"


def create(options: Mapping[str, Any]) -> ScriptedProvider:
    try:
        latency = float(options.get("latency", 0))
    except ValueError:
        raise evalctl.UsageError("scripted provider: latency must be a number of seconds") \
            from None
    return ScriptedProvider(latency=latency)


@evalctl.hookimpl
def evalctl_register_providers(register):
    register(evalctl.ProviderSpec(
        name="scripted",
        create=create,
        description="Serves each task's `script:` turns; deterministic, offline, free. "
                    "Option: latency=SECONDS per turn (for benchmarks).",
        default_concurrency=8,
        live=False,
        task_schema={"script": SCRIPT, "agent_script": AGENT_SCRIPT},
        error_statuses=(SCRIPT_ERROR,),
        task_problems=task_problems,
        options_schema={"type": "object", "properties": {
            "latency": {"type": "number", "minimum": 0,
                        "description": "Seconds to wait before each turn (for benchmarks)."},
        }},
    ))
