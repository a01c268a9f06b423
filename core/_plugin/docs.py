"""Reference docs rendered from the code, so docs and code agree: the graders from
the registered specs, the agent's tools from their definitions.

    python -m evalctl._plugin.docs > docs/graders.md
    python -m evalctl._plugin.docs tools > docs/tools.md
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping
from typing import Any

from evalctl._plugin.registry import Registry, get_registry
from evalctl._plugin.tooldefs import TOOL_DEFINITIONS, TOOL_REFERENCE


def _type_of(schema: dict[str, Any]) -> str:
    if "enum" in schema:
        return " \\| ".join(repr(v) for v in schema["enum"])
    kind = schema.get("type", "any")
    return " or ".join(kind) if isinstance(kind, list) else kind


def render_grader_docs(registry: Registry, builtins_only: bool = False) -> str:
    lines = [
        "# Graders",
        "",
        "Generated from the registered grader specs by `python -m evalctl._plugin.docs`; a test",
        "fails when this file is stale. Each grader asks one question with a yes/no answer;",
        "its `detail` says why it failed. A task passes only if every mechanical check passes.",
        "",
        "*Talk-only* graders could be satisfied by an agent that only talks; every task needs",
        "at least one check that is not. That is apart from a grader's *kind*, how it grades:",
        "`mechanical` (code, no model) or `judge` (a model's verdict). `grounding` is both",
        "mechanical and talk-only; a report's check says `\"kind\": \"mechanical\"` and",
        "`\"talk_only\": true` ([reports.md](reports.md)).",
        "",
        "A grader receives the agent's result: its final text, exit status, turns, tool calls,",
        "usage, cost, the files it changed and more. The `python` check has it in scope as",
        "`result`; every field is described in [plugins.md](plugins.md#graders).",
        "",
    ]
    graders = registry.from_distribution("grader", "evalctl") if builtins_only else \
        registry.graders
    for name in sorted(graders):
        owner = registry.plugin_of("grader", name)
        spec = graders[name]
        schema = dict(spec.params_schema)
        lines += [f"## `{name}`", "", spec.description, ""]
        facts = [f"kind: {spec.kind}", "talk-only" if spec.talk_only else "not talk-only"]
        if owner is not None:
            facts.append(f"plugin: {owner.name}")
        lines += ["*" + "; ".join(facts) + "*", ""]
        if spec.trusts:
            lines += [f"**What it trusts:** {spec.trusts}", ""]
        properties = schema.get("properties", {})
        required = set(schema.get("required", []))
        if properties:
            lines += ["| parameter | type | required | description |", "|---|---|---|---|"]
            for param, param_schema in properties.items():
                lines.append(f"| `{param}` | {_type_of(param_schema)} | "
                             f"{'yes' if param in required else 'no'} | "
                             f"{param_schema.get('description', '')} |")
            lines.append("")
        else:
            lines += ["No parameters.", ""]
        for alternative in schema.get("oneOf", []):
            if set(alternative) == {"required"}:
                keys = [b["required"][0] for b in schema["oneOf"]]
                lines += [f"Give exactly one of {', '.join(f'`{k}`' for k in keys)}.", ""]
                break
        if spec.example:
            lines += ["```yaml", spec.example.strip(), "```", ""]
    return "\n".join(lines).rstrip() + "\n"


_BOUNDS = (("minimum", "≥"), ("exclusiveMinimum", ">"), ("maximum", "≤"),
           ("exclusiveMaximum", "<"))


def _constraints(schema: Mapping[str, Any]) -> str:
    parts = [f"{sign} {schema[key]:g}" for key, sign in _BOUNDS if key in schema]
    if schema.get("minLength") == 1:
        parts.append("not empty")
    return ", ".join(parts)


def _yaml_scalar(value: Any) -> str:
    """A scalar as a suite would spell it: JSON's quoting is valid YAML, and text that
    YAML would read as something else is quoted."""
    if isinstance(value, str):
        plain = value and value.strip() == value and "\n" not in value and \
            not any(c in value for c in ":#{}[]&*!|>'\"%@`,") and \
            value.lower() not in {"true", "false", "null", "yes", "no", "~"} and \
            not value[0].isdigit() and not value.startswith(("-", "?"))
        return value if plain else json.dumps(value)
    return json.dumps(value)


def render_tool_docs() -> str:
    lines = [
        "# Tools",
        "",
        "Generated from the tool definitions by `python -m evalctl._plugin.docs tools`; a test",
        "fails when this file is stale. These are the six tools the built-in agent offers the",
        "model, with the arguments a model (or a suite's `script:`) passes them. `evalctl",
        "validate` checks every scripted call's tool and arguments against these schemas.",
        "",
        "Every path is relative to the workspace. A call with arguments its schema refuses",
        "returns an error result naming them (`edit_file: invalid arguments: ...`); a tool",
        "never raises out of the agent loop: the model sees each error and can act on it.",
        "",
    ]
    for tool in TOOL_DEFINITIONS:
        reference = TOOL_REFERENCE[tool.name]
        schema = tool.input_schema
        required = set(schema.get("required", []))
        lines += [f"## `{tool.name}`", "", tool.description, "",
                  "| argument | type | required | limits | description |",
                  "|---|---|---|---|---|"]
        for name, argument in schema.get("properties", {}).items():
            lines.append(f"| `{name}` | {_type_of(argument)} | "
                         f"{'yes' if name in required else 'no'} | {_constraints(argument)} | "
                         f"{argument.get('description', '')} |")
        lines += ["", "Limits:", ""] + [f"- {limit}" for limit in reference.limits]
        lines += ["", "Errors the model gets back:", ""] + [f"- {e}" for e in reference.errors]
        lines += ["", "In a suite's `script:`:", "", "```yaml", f"- tool: {tool.name}",
                  "  input:"]
        lines += [f"    {key}: {_yaml_scalar(value)}" for key, value in reference.example.items()]
        lines += ["```", ""]
    return "\n".join(lines).rstrip() + "\n"


if __name__ == "__main__":
    if sys.argv[1:] == ["tools"]:
        print(render_tool_docs(), end="")
    else:
        print(render_grader_docs(get_registry(), builtins_only=True), end="")
