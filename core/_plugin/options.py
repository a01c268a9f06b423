"""A plugin's options (a provider's, an importer's), typed and checked against the schema
it declares, before any work starts: an option it does not know is refused, never
silently ignored."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from evalctl._errors import UsageError
from evalctl._plugin.specs import ProviderSpec
from evalctl._schema_check import SchemaCheck, error_words
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
        raise UsageError(f"{kind} '{name}' option{where}: {error_words(error)}")
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


# A pattern's end anchor, as options schemas write it ($ would let "x\n" through).
_END_ANCHORS = (r"(?![\s\S])", r"\Z", "$")
# One alternative of a simple pattern: literal text, perhaps ending in "anything".
_ALTERNATIVE = re.compile(r"([A-Za-z0-9_:/=@,+-]*)(\.\+|\.\*)?")


def allowed_values(pattern: str) -> list[str] | None:
    """The values a simple pattern such as `^(model|stdout|json:.+)(?![\\s\\S])` allows,
    in words (`model`, `stdout`, `json:<text>`), or None for a pattern that is not a
    plain choice of literal words (each perhaps ending in anything)."""
    body = pattern.removeprefix("^")
    for anchor in _END_ANCHORS:
        if body.endswith(anchor):
            body = body[: -len(anchor)]
            break
    else:
        return None
    if body.startswith("(") and body.endswith(")"):
        body = body[1:-1].removeprefix("?:")
    words = []
    for alternative in body.split("|"):
        match = _ALTERNATIVE.fullmatch(alternative)
        if match is None or not (match.group(1) or match.group(2)):
            return None
        words.append(match.group(1) + ("<text>" if match.group(2) else ""))
    return words


def _in_words(words: list[str]) -> str:
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + f", or {words[-1]}"


def _described(schema: Mapping[str, Any]) -> str:
    description = schema.get("description")
    return f" ({description})" if isinstance(description, str) and description else ""


def option_problem(key: str, value: Any, schema: Mapping[str, Any], toml: bool = False
                   ) -> str | None:
    """What is wrong with an option's `value` for its `schema`, in plain words and
    beginning with `key`, or None when nothing is: "a list", "true or false", the values
    a pattern allows with a did-you-mean. `toml`: the value was written in TOML (a list
    is then shown as TOML writes it). Found by newcomers: jsonschema's "'A=1' is not of
    type 'array'" and "'stdot' does not match '^(model|stdout|json:.+)(?![\\s\\S])'"."""
    errors = SchemaCheck({"type": "object", "properties": {key: schema}}).errors({key: value})
    if not errors:
        return None
    error = errors[0]
    # The value, or the item of a list, that is wrong, and its own schema.
    where, wrong, own = key, value, schema
    if len(error.path) > 1 and isinstance(error.path[1], int) and isinstance(value, list):
        index = error.path[1]
        items = schema.get("items")
        where, wrong = f"{key} item {index + 1}", value[index]
        own = items if isinstance(items, Mapping) else {}
    wanted = own.get("type")
    if error.validator == "type" and isinstance(wanted, str) and wanted in TYPE_WORDS:
        words = "a table" if toml and wanted == "object" else TYPE_WORDS[wanted]
        hint = ""
        if wanted == "array" and isinstance(wrong, str):
            hint = f" (a list in TOML: {key} = [{wrong!r}])" if toml else \
                " (a list: comma-separated values)"
        return f"{where}: must be {words}, got {wrong!r}{hint}"
    if error.validator == "enum" and isinstance(own.get("enum"), list):
        choices = [str(choice) for choice in own["enum"]]
        near = did_you_mean(str(wrong), choices) if isinstance(wrong, str) else ""
        return f"{where}: {wrong!r} is not one of {_in_words(choices)}{near}"
    if error.validator == "pattern" and isinstance(wrong, str):
        words = allowed_values(str(own.get("pattern", "")))
        if words is not None:
            near = did_you_mean(wrong, [word for word in words if not word.endswith("<text>")])
            for word in words:  # `jsn:result` for `json:<text>`: the part before the text
                head = word.removesuffix("<text>")
                if not near and head != word and head and not head[-1].isalnum() \
                        and head[-1] in wrong:
                    written, rest = wrong.split(head[-1], 1)
                    if did_you_mean(written + head[-1], [head]):
                        near = f" (did you mean '{head}{rest}'?)"
            return f"{where}: {wrong!r} is not a value it takes{near}; it takes " \
                f"{_in_words(words)}"
        return f"{where}: {wrong!r} is not of the form it takes{_described(own)}"
    if error.validator == "minLength" and wrong == "":
        return f"{where}: must not be empty"
    return f"{where}: {error_words(error)}"
