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
