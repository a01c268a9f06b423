"""JSON Schema validation: quick when the value is valid, explained when it is not.

jsonschema-rs (compiled, about a hundred times faster than the Python validator and a
third of its import time) answers "valid". Only that answer is trusted: anything else
(an error, a value it cannot convert, a schema it refuses) has the value validated
again by Python's jsonschema, whose errors are the ones shown. Patterns are given to
jsonschema-rs as Python's re reads them, so it is never the more lenient of the two.

Suites, tool calls and plugin options are all checked this way, so a run whose values
are all valid never imports Python's jsonschema (about 40 ms).
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from typing import Any


class SchemaCheck:
    """One schema, compiled once, checking many values."""

    def __init__(self, schema: Mapping[str, Any]):
        self.schema = schema
        try:
            import jsonschema_rs

            self._compiled: Any = jsonschema_rs.Draft202012Validator(_python_patterns(schema))
        except Exception:  # a schema jsonschema-rs refuses: every value the slow way
            self._compiled = None

    def surely_valid(self, value: Any) -> bool:
        if self._compiled is None:
            return False
        try:
            return bool(self._compiled.is_valid(value))
        except Exception:  # a value it cannot convert: any doubt means the slow way
            return False

    def errors(self, value: Any) -> list[Any]:
        """Python jsonschema's errors for `value` (ordered by where they are), none when
        it is valid. A number no JSON document holds is an error wherever it is (see
        unusable_numbers)."""
        for path, why in unusable_numbers(value):
            from jsonschema.exceptions import ValidationError

            return [ValidationError(why, path=path)]
        if self.surely_valid(value):
            return []
        from jsonschema import Draft202012Validator

        return sorted(Draft202012Validator(self.schema).iter_errors(value),
                      key=lambda error: [str(step) for step in error.path])


# An int this long (bits) may be over Python's limit for writing it out in decimal.
_LONG_INT_BITS = 14_000


def odd_number(value: Any) -> bool:
    """Whether `value` is NaN, an infinity, or an integer long enough that it may be past
    what Python writes out: what unusable_numbers looks at closer, cheap to ask of every
    number a parser makes."""
    if isinstance(value, float):
        return not math.isfinite(value)
    return isinstance(value, int) and value.bit_length() > _LONG_INT_BITS


def _why_unusable(number: float | int) -> str | None:
    """Why a number cannot be in a JSON document, or None."""
    if not odd_number(number):
        return None
    if isinstance(number, float):
        return f"{number!r} is not a finite number"
    try:
        str(number)
    except ValueError:
        return (f"a number of {number.bit_length():,} bits, too long to write out (if it "
                "is meant as text, quote it)")
    return None


def unusable_numbers(value: Any) -> Iterator[tuple[tuple[Any, ...], str]]:
    """Where `value` holds a number no JSON document can (a path of keys and indexes),
    and why, in order: NaN or an infinity (Python's jsonschema lets NaN through every
    bound, since each comparison is false, and a NaN timeout disorders every timer of the
    event loop), or an integer too long to write in decimal (Python refuses to, in the
    middle of explaining it). Iterative: a value may be as deep as it likes."""
    pending: list[tuple[tuple[Any, ...], Any]] = [((), value)]
    while pending:
        where, item = pending.pop()
        if isinstance(item, float | int):
            why = _why_unusable(item)
            if why is not None:
                yield where, why
        elif isinstance(item, Mapping):
            pending.extend(((*where, key), inner) for key, inner in reversed(item.items()))
        elif isinstance(item, list | tuple):
            pending.extend(((*where, index), inner)
                           for index, inner in reversed(list(enumerate(item))))


def surely_valid(value: Any, schema: Mapping[str, Any]) -> bool:
    """Whether jsonschema-rs finds `value` valid against a schema used once."""
    return SchemaCheck(schema).surely_valid(value)


def _python_patterns(node: Any) -> Any:
    """A copy of a schema with every `pattern` (and `patternProperties` key) as Python's
    re would match it."""
    if isinstance(node, Mapping):
        out = {}
        for key, value in node.items():
            if key == "pattern" and isinstance(value, str):
                out[key] = _as_python_reads(value)
            elif key == "patternProperties" and isinstance(value, Mapping):
                out[key] = {_as_python_reads(k): _python_patterns(v) for k, v in value.items()}
            else:
                out[key] = _python_patterns(value)
        return out
    if isinstance(node, list):
        return [_python_patterns(item) for item in node]
    return node


def _as_python_reads(pattern: str) -> str:
    """`pattern` for a Rust regex, matching what Python's re.search matches: an unescaped
    `$` outside a character class also matches before a final newline there (a
    third-party grader's `^[a-z]+$` takes "abc\n" in Python, which decides)."""
    out: list[str] = []
    index, in_class = 0, False
    while index < len(pattern):
        char = pattern[index]
        if char == "\\":
            out.append(pattern[index:index + 2])
            index += 2
            continue
        if in_class:
            in_class = char != "]"
        elif char == "[":
            in_class = True
            out.append(char)
            index += 1
            for literal in ("^", "]"):  # '[^]...]' and '[]...]': that ']' is literal
                if pattern.startswith(literal, index):
                    out.append(literal)
                    index += 1
            continue
        elif char == "$":
            out.append(r"(?=\n?\z)")
            index += 1
            continue
        out.append(char)
        index += 1
    return "".join(out)


# The keywords of JSON Schema draft 2020-12 (and `definitions`, `dependencies` of the
# drafts before it, which validators still read).
KEYWORDS = frozenset({
    "$schema", "$id", "$ref", "$anchor", "$dynamicRef", "$dynamicAnchor", "$vocabulary",
    "$comment", "$defs", "definitions", "allOf", "anyOf", "oneOf", "not", "if", "then",
    "else", "dependentSchemas", "prefixItems", "items", "contains", "properties",
    "patternProperties", "additionalProperties", "propertyNames", "unevaluatedItems",
    "unevaluatedProperties", "type", "enum", "const", "multipleOf", "maximum",
    "exclusiveMaximum", "minimum", "exclusiveMinimum", "maxLength", "minLength", "pattern",
    "maxItems", "minItems", "uniqueItems", "maxContains", "minContains", "maxProperties",
    "minProperties", "required", "dependentRequired", "dependencies", "title",
    "description", "default", "deprecated", "readOnly", "writeOnly", "examples", "format",
    "contentEncoding", "contentMediaType", "contentSchema"})
# Keywords whose mapping's keys are names (of properties, definitions), not keywords.
_NAMING = frozenset({"properties", "patternProperties", "$defs", "definitions",
                     "dependentSchemas"})
_TYPES = ("string", "integer", "number", "boolean", "array", "object", "null")


def error_words(error: Any) -> str:
    """A jsonschema error's message, but for a bound the value must be past: "0 is less
    than or equal to the minimum of 0" (exclusiveMinimum) read as if 0 were allowed
    (found by a newcomer's `timeout: 0`), so it says "must be more than 0, got 0"."""
    value = error.instance
    if error.validator in ("exclusiveMinimum", "exclusiveMaximum") and \
            isinstance(value, int | float) and not isinstance(value, bool):
        side = "more" if error.validator == "exclusiveMinimum" else "less"
        return f"must be {side} than {error.validator_value}, got {value}"
    return str(error.message)


def schema_problem(schema: Any) -> str | None:
    """Why `schema` is not a JSON Schema (draft 2020-12) a plugin may declare, or None.

    Checked against the metaschema: a schema of the usual shape (known keywords, each
    with a value of its kind) is seen to be valid here, with no validator imported
    (`list-plugins` imports none); anything else is checked by Python's jsonschema,
    whose verdict stands and whose error is the one shown. Then what the metaschema lets
    through but no validator here can use: a pattern Python's re cannot compile, a
    `$ref` to another document."""
    if not _surely_a_schema(schema):
        from jsonschema import Draft202012Validator
        from jsonschema.exceptions import best_match

        error = best_match(Draft202012Validator(Draft202012Validator.META_SCHEMA)
                           .iter_errors(schema))
        if error is not None:
            where = ".".join(str(step) for step in error.absolute_path)
            message = error.message
            if error.absolute_path and error.absolute_path[-1] == "type":
                message = (f"{error.instance!r} is not a JSON Schema type (one of "
                           f"{', '.join(_TYPES)})")
            return f"{message}" + (f", at {where}" if where else "")
    return _unusable_part(schema, ())


# What the metaschema asks of each keyword's value, for the quick look (the _NAMING
# keywords hold a schema under each name).
_SCHEMAS = frozenset({"additionalProperties", "items", "contains", "propertyNames", "not",
                      "if", "then", "else", "unevaluatedItems", "unevaluatedProperties",
                      "contentSchema"})
_SCHEMA_LISTS = frozenset({"allOf", "anyOf", "oneOf", "prefixItems"})
_STRINGS = frozenset({"title", "description", "$comment", "pattern", "format", "$ref",
                      "$id", "$schema", "$anchor", "$dynamicRef", "$dynamicAnchor",
                      "contentEncoding", "contentMediaType"})
_NUMBERS = frozenset({"maximum", "exclusiveMaximum", "minimum", "exclusiveMinimum"})
_COUNTS = frozenset({"maxLength", "minLength", "maxItems", "minItems", "maxContains",
                     "minContains", "maxProperties", "minProperties"})
_FLAGS = frozenset({"uniqueItems", "deprecated", "readOnly", "writeOnly"})
_VALUES = frozenset({"const", "default"})


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _names(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(item, str) for item in value) and \
        len(set(value)) == len(value)


def _surely_a_schema(node: Any) -> bool:
    """True only when `node` is certainly valid against the 2020-12 metaschema: every
    keyword one of those above with a value of its kind. False means "not sure", never
    "invalid": the metaschema then decides."""
    if isinstance(node, bool):
        return True
    if not isinstance(node, dict):
        return False
    for key, value in node.items():
        if key in _NAMING:
            ok = isinstance(value, dict) and all(
                isinstance(name, str) and _surely_a_schema(sub) for name, sub in value.items())
        elif key in _SCHEMAS:
            ok = _surely_a_schema(value)
        elif key in _SCHEMA_LISTS:
            ok = isinstance(value, list) and bool(value) and all(map(_surely_a_schema, value))
        elif key in _STRINGS:
            ok = isinstance(value, str)
        elif key in _NUMBERS:
            ok = _number(value)
        elif key in _COUNTS:
            ok = isinstance(value, int) and not isinstance(value, bool) and value >= 0
        elif key in _FLAGS:
            ok = isinstance(value, bool)
        elif key == "multipleOf":
            ok = _number(value) and value > 0
        elif key == "type":
            ok = value in _TYPES or (_names(value) and bool(value)
                                     and all(item in _TYPES for item in value))
        elif key == "required":
            ok = _names(value)
        elif key == "dependentRequired":
            ok = isinstance(value, dict) and all(map(_names, value.values()))
        elif key in ("enum", "examples"):
            ok = isinstance(value, list)
        else:
            ok = key in _VALUES
        if not ok:
            return False
    return True


def _unusable_part(node: Any, path: tuple[Any, ...]) -> str | None:
    import re

    where = ".".join(str(step) for step in path)
    if isinstance(node, list):
        for index, item in enumerate(node):
            found = _unusable_part(item, (*path, index))
            if found:
                return found
    if not isinstance(node, Mapping):
        return None
    patterns = [(node["pattern"], (*path, "pattern"))] if isinstance(node.get("pattern"),
                                                                       str) else []
    if isinstance(node.get("patternProperties"), Mapping):
        patterns += [(key, (*path, "patternProperties", key))
                     for key in node["patternProperties"]]
    for pattern, at in patterns:
        try:
            re.compile(pattern)
        except re.error as exc:
            return (f"pattern {pattern!r} is not a regular expression Python reads ({exc}), "
                    f"at {'.'.join(str(step) for step in at)}")
    ref = node.get("$ref")
    if isinstance(ref, str) and not ref.startswith("#"):
        return (f"$ref {ref!r} names another document, which evalctl never fetches: keep the "
                f"schema self-contained (a $ref to #/$defs/...), at {where or '$ref'}")
    named = bool(path) and path[-1] in _NAMING
    for key, value in node.items():
        if not named and key in ("enum", "const", "default", "examples"):
            continue  # values, not schemas
        found = _unusable_part(value, (*path, key))
        if found:
            return found
    return None


def object_schema_problem(schema: Mapping[str, Any]) -> str | None:
    """What is wrong with a plugin's object schema (a grader's params, a plugin's
    options), which evalctl closes with `additionalProperties: false` unless it says
    otherwise, or None: schema_problem's, then a top level with words that are no
    keyword (the properties written without the object around them, or a misspelt
    `required`), or a required key no property declares."""
    problem = schema_problem(schema)
    if problem:
        return f"is not a valid JSON Schema: {problem}"
    unknown = [key for key in schema if isinstance(key, str) and key not in KEYWORDS
               and not key.startswith("x-")]
    if unknown:
        shown = ", ".join(repr(key) for key in unknown)
        if any(isinstance(schema[key], Mapping) for key in unknown):
            return (f"has {shown} at its top level, where JSON Schema keywords go: the keys "
                    "go under properties, in an object schema: {\"type\": \"object\", "
                    "\"properties\": {" + ", ".join(f'"{key}": {{...}}' for key in unknown)
                    + "}}")
        import difflib  # only when a word was wrong (_text is no layer below this one)

        close = difflib.get_close_matches(unknown[0], sorted(KEYWORDS), n=1)
        return (f"has {shown}, which {'is no' if len(unknown) == 1 else 'are no'} JSON "
                f"Schema keyword{'' if len(unknown) == 1 else 's'}"
                + (f" (did you mean '{close[0]}'?)" if close else ""))
    properties = schema.get("properties") or {}
    closed = schema.get("additionalProperties", False) is False and \
        not schema.get("patternProperties")
    missing = [key for key in schema.get("required") or () if key not in properties]
    if closed and missing:
        return (f"requires {', '.join(repr(key) for key in missing)}, which its properties "
                "do not declare: with additionalProperties false (evalctl's default) no "
                "value could have it")
    return None
