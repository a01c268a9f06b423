"""Choosing the run's agent (the system under test) and resolving presets.

The choice: `--agent NAME` on the command line, else `agent` in evalctl.toml, else the
built-in loop. A name is an installed agent (`AgentSpec` with `run`), a preset an
installed plugin registered (`AgentSpec` with `base` and `defaults`), or a preset in
evalctl.toml (`[agents.NAME]` with `base` and options). Options merge from the innermost
preset outwards, then the config's `agent_options`, then `--agent-option`: the last
word wins. `version` is not an option of the agent but of the report: the preset's, or
`--agent-option version=`.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from evalctl._errors import UsageError
from evalctl._plugin.options import TYPE_WORDS, option_problem
from evalctl._plugin.registry import Registry
from evalctl._plugin.specs import AgentSpec
from evalctl._schema_check import SchemaCheck
from evalctl._text import did_you_mean

DEFAULT_AGENT = "evalctl"
VERSION_OPTION = "version"


@dataclass(frozen=True)
class AgentChoice:
    """The run's agent: the name the user chose, the agent that runs (`spec`, the base
    of a preset), its options, its version and how it was chosen."""

    name: str
    spec: AgentSpec
    options: Mapping[str, Any] = field(default_factory=dict)
    version: str | None = None
    chosen_by: str = "default"  # "--agent", "config" or "default"
    presets: tuple[str, ...] = ()  # the preset chain from `name` down to `spec`

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "base": self.spec.name, "version": self.version,
                "options": dict(self.options), "chosen_by": self.chosen_by}


def _config_presets(presets: Mapping[str, Any]) -> dict[str, AgentSpec]:
    found = {}
    for name, table in presets.items():
        if not isinstance(table, Mapping):
            raise UsageError(f"evalctl.toml: [agents.{name}] must be a table")
        values = dict(table)
        base = values.pop("base", None)
        if not isinstance(base, str) or not base:
            raise UsageError(f"evalctl.toml: [agents.{name}] needs base = \"AGENT\" (the agent "
                             "it presets, e.g. \"command\")")
        version = values.pop(VERSION_OPTION, None)
        description = values.pop("description", "")
        try:
            found[name] = AgentSpec(name=name, base=base, defaults=values,
                                    version=None if version is None else str(version),
                                    description=str(description))
        except ValueError as exc:
            raise UsageError(f"evalctl.toml: [agents.{name}]: {exc}") from None
    return found


def choose_agent(registry: Registry, *, flag: str | None, flag_options: Mapping[str, Any],
                 config_name: str | None = None,
                 config_options: Mapping[str, Any] | None = None,
                 config_presets: Mapping[str, Any] | None = None) -> AgentChoice:
    """The run's agent, or a UsageError (exit 2) saying why it cannot be used."""
    configured = _config_presets(config_presets or {})
    clashing = sorted(set(configured) & set(registry.agents))
    if clashing:
        raise UsageError(f"evalctl.toml defines agent(s) {', '.join(clashing)} that an "
                         "installed plugin already provides; give the preset another name")
    name, chosen_by = (flag, "--agent") if flag else (config_name, "config") if config_name \
        else (DEFAULT_AGENT, "default")

    def lookup(agent: str) -> AgentSpec:
        return configured[agent] if agent in configured else registry.get("agent", agent)

    spec = lookup(name)
    chain = [name]
    merged: dict[str, Any] = {}
    version = spec.version
    while spec.run is None:
        merged = {**dict(spec.defaults), **merged}
        base = str(spec.base)
        if base in chain:
            raise UsageError(f"agent presets form a loop: {' -> '.join([*chain, base])}")
        chain.append(base)
        spec = lookup(base)
        version = version or spec.version
    if name == config_name:  # the config's options go with its agent, however chosen
        merged.update(config_options or {})
    merged.update(coerce_agent_options(spec, flag_options))
    given_version = merged.pop(VERSION_OPTION, None)
    if given_version is not None:
        version = str(given_version)
    validate_agent_options(spec, name, merged)
    return AgentChoice(name, spec, merged, version, chosen_by, tuple(chain))


def coerce_agent_options(spec: AgentSpec, pairs: Mapping[str, Any]) -> dict[str, Any]:
    """`--agent-option KEY=VALUE` values typed by the agent's options schema (values that
    are not text, from evalctl.testing say, are taken as they are)."""
    properties = spec.options_schema.get("properties", {})
    out: dict[str, Any] = {}
    for key, text in pairs.items():
        if not isinstance(text, str) or key == VERSION_OPTION:
            out[key] = text
            continue
        kind = properties.get(key, {}).get("type", "string")
        try:
            if kind == "integer":
                out[key] = int(text)
            elif kind == "number":
                out[key] = float(text)
            elif kind == "boolean":
                if text.lower() not in {"true", "false", "1", "0", "yes", "no"}:
                    raise ValueError(text)
                out[key] = text.lower() in {"true", "1", "yes"}
            elif kind == "array":
                out[key] = [part for part in text.split(",") if part]
            else:
                out[key] = text
        except ValueError:
            raise UsageError(f"--agent-option {key}={text}: agent '{spec.name}' wants "
                             f"{TYPE_WORDS.get(kind, kind)} for {key}") from None
    return out


def validate_agent_options(spec: AgentSpec, name: str, options: Mapping[str, Any]) -> None:
    """`options` checked against the agent's schema. An option it does not take is named
    with a did-you-mean, as provider and sandbox options are: a newcomer got jsonschema's
    "Additional properties are not allowed ('fnal_text' was unexpected)"."""
    schema = {"additionalProperties": False, **dict(spec.options_schema)}
    properties = spec.options_schema.get("properties", {})
    known = [*properties, VERSION_OPTION]
    via = f" (a preset of '{spec.name}')" if name != spec.name else ""
    if schema["additionalProperties"] is False and "patternProperties" not in schema:
        unknown = [key for key in options if key not in properties]
        if unknown:
            raise UsageError("; ".join(f"agent '{name}'{via} has no option '{key}'"
                                       f"{did_you_mean(key, known)}" for key in unknown)
                             + f"; known options: {', '.join(known)}")
    required = schema.get("required")
    missing = [key for key in (required if isinstance(required, list) else [])
               if isinstance(key, str) and key not in options]
    if missing:
        # jsonschema's "'argv' is a required property" said neither what argv is nor how
        # to give it (a newcomer's finding).
        raise UsageError("; ".join(
            f"agent '{name}'{via} needs option '{key}'" + _described(properties.get(key))
            for key in missing) + " Give it with --agent-option "
            + " ".join(f"{key}=..." for key in missing)
            + ", under [agent_options] in evalctl.toml, or in a preset of your own "
            "([agents.NAME], docs/agents.md)")
    # One line per option, in plain words with the values it takes (found by a newcomer:
    # "'stdot' does not match '^(model|stdout|json:.+)(?![\\s\\S])'").
    said = [problem for key, value in options.items() if key in properties
            for problem in [option_problem(key, value, properties[key])] if problem]
    if said:
        raise UsageError("\n".join(f"agent '{name}'{via} option {problem}" for problem in said))
    problems = SchemaCheck(schema).errors(dict(options))
    if problems:  # a rule of the whole schema, not of one option
        raise UsageError(f"agent '{name}'{via} options: "
                         + "; ".join(f"'{p.path[0]}': {p.message}" if p.path else p.message
                                     for p in problems)
                         + f" (known options: {', '.join(known)})")
    said = [f"{key}: {problem}" for key, value in options.items()
            for problem in [option_value_problem(spec, key, value)] if problem]
    if said:
        raise UsageError("\n".join(f"agent '{name}'{via} option {problem}" for problem in said))


def agent_preflight(spec: AgentSpec, options: Mapping[str, Any],
                    visible: Callable[[str], bool]) -> str | None:
    """What the agent's preflight says stops it here, or None: called as
    `preflight(options, visible)` when it takes a second argument (`visible(path)`:
    whether the run's sandbox shows that host path), else as `preflight(options)`."""
    preflight = spec.preflight
    if preflight is None:
        return None
    try:
        inspect.signature(preflight).bind(options, visible)
    except (TypeError, ValueError):  # takes the options alone, or has no signature to read
        return preflight(options)
    return preflight(options, visible)


def option_value_problem(spec: AgentSpec, key: str, value: Any) -> str | None:
    """What the agent's `check_option` says is wrong with an option's value on any
    machine, or None (also when it has none, or it fails: its preflight and run still
    see the option)."""
    if spec.check_option is None:
        return None
    try:
        said = spec.check_option(key, value)
    except Exception:  # a plugin's bug is not the user's mistake: the run goes on to say more
        return None
    return str(said) if said else None


def _described(option: Any) -> str:
    """": " and the option's description, or "." when it has none."""
    description = option.get("description") if isinstance(option, Mapping) else None
    return f": {description}" if isinstance(description, str) and description else "."
