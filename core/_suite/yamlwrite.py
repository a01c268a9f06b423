"""Writing suites as YAML that evalctl's own loader reads back to the same data.

Block style only (the shape libyaml's fast path reads), multi-line text as literal blocks,
and any scalar that YAML would type as something else, or that cannot be written plain,
double-quoted. `dump` checks its own output by parsing it back; text it cannot write as
a literal block is double-quoted instead.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

from evalctl._suite.yamlsource import YamlSyntaxError, parse, resolve_plain_scalar

_INDICATORS = tuple("-?:,[]{}#&*!|>'\"%@`")
INDENT = 2


def _printable(text: str, allow: str = "") -> bool:
    return all(char in allow or (char.isprintable() and char not in "\u2028\u2029\ufeff")
               for char in text)


def _quoted(text: str) -> str:
    """A double-quoted scalar: JSON's escapes, plus those YAML needs that JSON lacks."""
    body = json.dumps(text, ensure_ascii=False)[1:-1]
    return '"' + "".join(char if _printable(char) or char in "\\" else f"\\u{ord(char):04x}"
                         for char in body) + '"'


def _plain_ok(text: str) -> bool:
    return (bool(text) and text == text.strip() and resolve_plain_scalar(text) == text
            and not text.startswith(_INDICATORS) and ": " not in text and " #" not in text
            and not text.endswith(":") and "\t" not in text and "\n" not in text
            and _printable(text))


def _scalar(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return ".nan"
        if math.isinf(value):
            return ".inf" if value > 0 else "-.inf"
        return repr(value)
    text = str(value)
    return text if _plain_ok(text) else _quoted(text)


def _literal(text: str, indent: int) -> str | None:
    """`text` as a literal block at `indent`, or None when one cannot hold it."""
    if "\n" not in text.rstrip("\n") or not _printable(text, allow="\n\t") or "\r" in text:
        return None
    body = text.rstrip("\n")
    trailing = len(text) - len(body)
    chomp = "-" if trailing == 0 else "" if trailing == 1 else "+"
    lines = body.split("\n")
    # An explicit indentation when the first line with anything on it, spaces included,
    # starts with a space: YAML would otherwise take those spaces for the indentation.
    first = next((line for line in lines if line), "")
    indicator = str(INDENT) if first.startswith((" ", "\t")) else ""
    pad = " " * indent
    rendered = [f"{pad}{line}" if line else "" for line in lines]
    rendered += [""] * (trailing - 1) if chomp == "+" else []
    return f"|{indicator}{chomp}\n" + "\n".join(rendered)


class _Writer:
    def __init__(self, literal_blocks: bool):
        self.literal_blocks = literal_blocks
        self.lines: list[str] = []

    def value(self, prefix: str, value: Any, indent: int) -> None:
        """Write `prefix` (a key and colon, or a dash) followed by `value`."""
        if isinstance(value, Mapping) and value:
            self.lines.append(prefix.rstrip())
            self.mapping(value, indent)
        elif isinstance(value, list) and value:
            self.lines.append(prefix.rstrip())
            self.sequence(value, indent)
        elif isinstance(value, Mapping | list):
            raise ValueError("an empty mapping or list cannot be written in block style")
        else:
            literal = _literal(value, indent) if isinstance(value, str) and \
                self.literal_blocks else None
            if literal is not None:
                head, _, rest = literal.partition("\n")
                self.lines.append(f"{prefix}{head}")
                self.lines.extend(rest.split("\n"))
            else:
                self.lines.append(f"{prefix}{_scalar(value)}")

    def mapping(self, data: Mapping[str, Any], indent: int) -> None:
        pad = " " * indent
        for key, value in data.items():
            self.value(f"{pad}{_scalar(str(key))}: ", value, indent + INDENT)

    def sequence(self, items: list[Any], indent: int) -> None:
        pad = " " * indent
        for item in items:
            if isinstance(item, Mapping) and item:
                start = len(self.lines)
                self.mapping(item, indent + INDENT)
                first = self.lines[start]
                self.lines[start] = f"{pad}- {first[indent + INDENT:]}"
            else:
                self.value(f"{pad}- ", item, indent + INDENT)


def dump(data: Mapping[str, Any], header: str = "") -> str:
    """`data` as YAML that evalctl's loader reads back as exactly `data`, with `header`
    (comment lines) first. Raises ValueError for data YAML cannot hold here."""
    comment = "".join(f"# {line}".rstrip() + "\n" for line in header.splitlines())
    for literal_blocks in (True, False):
        writer = _Writer(literal_blocks)
        writer.mapping(data, 0)
        text = comment + "\n".join(writer.lines) + "\n"
        try:
            if parse(text, "<generated>").data == _plain(data):
                return text
        except YamlSyntaxError:
            continue  # a literal block YAML reads otherwise: quote everything instead
    raise ValueError("the suite could not be written as YAML that reads back the same")


def _plain(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


def task_lines(text: str, tasks_key: str = "tasks") -> list[int]:
    """The 1-based line where each task of a dumped mapping suite starts."""
    located = parse(text, "<generated>")
    count = len(located.data.get(tasks_key, [])) if isinstance(located.data, dict) else 0
    return [located.line_of((tasks_key, index)) for index in range(count)]
