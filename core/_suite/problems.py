"""JSON Schema errors in a suite, said the way a person would say them, at file:line."""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping
from typing import Any

from evalctl._errors import Problem
from evalctl._plugin.registry import Registry
from evalctl._schema_check import surely_valid, unusable_numbers
from evalctl._suite.yamlsource import Located


def shown(text: str) -> str:
    """`text` for a one-line message: as it is when printable, else with its control
    characters escaped (a task id "t\\n" must not break the line it is named in)."""
    return text if text.isprintable() else text.encode("unicode_escape").decode("ascii")


def _describe_value(value: Any) -> str:
    if value is None:
        return "nothing (null)"
    if isinstance(value, bool):
        return f"the boolean {str(value).lower()}"
    if isinstance(value, int | float):
        return f"the number {value}"
    if isinstance(value, str):
        return f"the text {value!r}"
    if isinstance(value, list):
        return "a list"
    return "a mapping"


_TYPE_WORDS = {"string": "text", "integer": "a whole number", "number": "a number",
               "boolean": "true or false", "array": "a list", "object": "a mapping",
               "null": "nothing"}


def _suggest(word: str, options: Iterable[str]) -> str | None:
    """The option `word` was probably meant to be: a close spelling, or the one option
    it is the first or last part of (`old` for `old_text`)."""
    options = [o for o in options if isinstance(o, str)]
    close = difflib.get_close_matches(word, options, n=1)
    if close:
        return close[0]
    parts = [o for o in options if o.startswith(f"{word}_") or o.endswith(f"_{word}")]
    return parts[0] if len(parts) == 1 else None


def _where(located: Located, path: tuple[Any, ...]) -> str:
    """A readable location: task 'x', checks[1] (file_exists), 'path'."""
    parts: list[str] = []
    node = located.data
    for index, step in enumerate(path):
        node = node[step] if isinstance(node, dict | list) else None
        if isinstance(step, str) and index + 1 < len(path) and isinstance(path[index + 1], int):
            continue  # named together with the index that follows: checks[1]
        if isinstance(step, int):
            owner = path[index - 1] if index else None
            if owner in (None, "tasks") and isinstance(node, dict) and \
                    isinstance(node.get("id"), str):
                parts.append(f"task '{shown(node['id'])}'")
                continue
            label = f"{owner}[{step}]" if owner is not None else f"[{step}]"
            if owner == "checks" and isinstance(node, dict) and isinstance(node.get("type"), str):
                label += f" ({node['type']})"
            if owner == "tool_calls" and isinstance(node, dict) and \
                    isinstance(node.get("tool"), str):
                label += f" ({node['tool']})"
            parts.append(label)
        else:
            parts.append(f"'{step}'")
    return ", ".join(parts) or "the suite"


def schema_problems(located: Located, schema: Mapping[str, Any], label: str,
                     registry: Registry) -> Iterable[Problem]:
    unusable = [Problem(label, located.line_of(path), f"{_where(located, path)}: {why}")
                for path, why in unusable_numbers(located.data)] if located.odd_numbers else []
    if unusable:  # said first, and alone: the validator cannot be trusted with them
        yield from unusable
        return
    if surely_valid(located.data, schema):
        return
    from jsonschema import Draft202012Validator

    validator = Draft202012Validator(schema)
    seen: set[tuple[int, str]] = set()
    for error in validator.iter_errors(located.data):
        for line, message in _explain(error, located, registry):
            if (line, message) not in seen:
                seen.add((line, message))
                yield Problem(label, line, message)


def _explain(error: Any, located: Located, registry: Registry) -> list[tuple[int, str]]:
    path = tuple(error.absolute_path)
    line = located.line_of(path)
    where = _where(located, path)
    kind = error.validator
    instance = error.instance
    if kind == "if":
        return []  # the `then`/`else` errors that follow say what is wrong
    if kind == "oneOf" and all(set(b) == {"required"} for b in error.validator_value):
        # Before the branches' own errors: "missing 'text'" and "missing 'regex'" would
        # read as if both were required.
        keys = ", ".join(f"'{b['required'][0]}'" for b in error.validator_value)
        return [(line, f"{where}: needs exactly one of {keys}")]
    if kind in ("allOf", "anyOf", "oneOf") and error.context:
        return [item for sub in error.context for item in _explain(sub, located, registry)]
    if kind == "type" and not path:
        return [(line, "expected a list of tasks, or a mapping with 'tasks:'; got "
                       f"{_describe_value(instance)}")]
    if kind == "type":
        expected = error.validator_value
        words = " or ".join(_TYPE_WORDS.get(t, t) for t in
                            (expected if isinstance(expected, list) else [expected]))
        message = f"{where}: expected {words}, got {_describe_value(instance)}"
        if expected == "string" and not isinstance(instance, dict | list):
            message += "; quote it to make it text"
        return [(line, message)]
    if kind == "required":
        missing = [k for k in error.validator_value if k not in instance]
        what = f" for check type {instance['type']}" if "type" in instance and path and \
            isinstance(path[-1], int) and len(path) > 1 and path[-2] == "checks" else ""
        return [(line, f"{where}: missing required key '{k}'{what}") for k in missing]
    if kind == "additionalProperties":
        allowed = list(error.schema.get("properties", {}))
        out = []
        for key in instance:
            if key in allowed:
                continue
            message = f"{where}: unexpected key '{key}'"
            close = _suggest(key, allowed)
            message += f" (did you mean '{close}'?)" if close else \
                f"; allowed: {', '.join(allowed)}"
            out.append((located.key_lines.get((*path, key), line), message))
        return out
    if kind == "enum" and path and path[-1] == "type" and len(path) > 2 and path[-3] == "checks":
        return [(line, f"{where}: unknown check type {instance!r}: "
                       f"{registry.explain_missing('grader', str(instance))}")]
    if kind == "enum":
        options = ", ".join(map(str, error.validator_value))
        message = f"{where}: expected one of {options}; got {_describe_value(instance)}"
        close = _suggest(instance, error.validator_value) if isinstance(instance, str) else None
        return [(line, message + (f" (did you mean '{close}'?)" if close else ""))]
    if kind == "const":
        return [(line, f"{where}: expected {error.validator_value!r}, got "
                       f"{_describe_value(instance)}")]
    if kind == "pattern" and "propertyNames" in error.schema_path:
        # The instance is a mapping key: point at the key's own line.
        key_line = located.key_lines.get((*path, instance), line)
        reason = error.schema.get("description") or f"must match {error.validator_value}"
        return [(key_line, f"{where}: {instance!r} {reason}")]
    if kind == "pattern":
        reason = error.schema.get("description") or f"must match {error.validator_value}"
        return [(line, f"{where}: {instance!r} is not valid: {reason}")]
    if kind == "dependentRequired":
        return [(line, f"{where}: '{key}' needs '{needed}' too")
                for key, required in error.validator_value.items() if key in instance
                for needed in required if needed not in instance]
    if kind == "minItems" and instance == []:
        return [(line, f"{where}: must not be empty")]
    if kind == "minLength":
        return [(line, f"{where}: must not be empty")]
    return [(line, f"{where}: {error.message}")]
