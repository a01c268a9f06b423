"""Grader reference docs rendered from the registered specs, so docs and code agree.

    python -m evalctl._plugin.docs > docs/graders.md
"""

from __future__ import annotations

from typing import Any

from evalctl._plugin.registry import Registry, get_registry


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
        "at least one check that is not.",
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


if __name__ == "__main__":
    print(render_grader_docs(get_registry(), builtins_only=True), end="")
