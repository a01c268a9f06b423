"""A plugin's options (a provider's, an importer's), typed and checked against the schema
it declares, before any work starts: an option it does not know is refused, never
silently ignored."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from evalctl._errors import UsageError
from evalctl._plugin.specs import ProviderSpec
from evalctl._schema_check import SchemaCheck
from evalctl._text import did_you_mean

# A JSON Schema type in words, for a message about a value of the wrong one.
TYPE_WORDS = {"integer": "a whole number", "number": "a number", "boolean": "true or false",
               "string": "text", "array": "a list", "object": "a mapping"}
_FLAGS = {"model": " (--model)"}  # an option with a flag of its own, named in the message


def provider_options(spec: ProviderSpec, options: Mapping[str, Any]) -> dict[str, Any]:
    """`options` (text from `--provider-option KEY=VALUE`, or values from the config or a
    plugin) typed by the provider's `options_schema` and checked against it. Raises a
    UsageError naming the provider, the option and the options it has."""
    return typed_options("provider", spec.name, spec.options_schema, options)


def typed_options(kind: str, name: str, options_schema: Mapping[str, Any],
                  options: Mapping[str, Any]) -> dict[str, Any]:
    """Options of a plugin (a provider, an importer) typed by its schema and checked."""
    properties: Mapping[str, Any] = options_schema.get("properties", {})
    known = list(properties)
    typed: dict[str, Any] = {}
    for key, value in options.items():
        if key not in properties:
            hint = did_you_mean(key, known) or \
                (_FLAGS.get(key, "") if kind == "provider" else "")
            raise UsageError(f"{kind} '{name}' has no option '{key}'{hint}; its "
                             f"options: {', '.join(known) or 'none'}")
        typed[key] = _typed(f"{kind} '{name}'", key, value, properties[key])
    schema = {"additionalProperties": False, **dict(options_schema)}
    for error in SchemaCheck(schema).errors(typed):
        where = f" '{error.path[0]}'" if error.path else "s"
        raise UsageError(f"{kind} '{name}' option{where}: {error.message}")
    return typed


def _typed(owner: str, key: str, value: Any, schema: Mapping[str, Any]) -> Any:
    """Text typed as the schema says; anything else (from the config, say) as it is."""
    kind = schema.get("type", "string")
    if kind == "integer" and isinstance(value, float) and value.is_integer():
        return int(value)  # 2.0 is an integer to JSON Schema, not to the plugin using it
    if not isinstance(value, str) or kind == "string":
        return value
    try:
        if kind == "integer":
            try:
                return int(value)
            except ValueError:  # "64.0", as a suite may write it
                number = float(value)
                if not number.is_integer():
                    raise
                return int(number)
        if kind == "number":
            return float(value)
        if kind == "boolean" and value.lower() in {"true", "false", "1", "0", "yes", "no"}:
            return value.lower() in {"true", "1", "yes"}
        if kind == "array":
            return [part for part in value.split(",") if part]
    except ValueError:
        pass
    raise UsageError(f"{owner} option '{key}': expected "
                     f"{TYPE_WORDS.get(kind, kind)}, got {value!r}")
