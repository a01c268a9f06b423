"""Suite YAML parsed into plain data, keeping the line of every node.

The rules are strictyaml's: its loader rejects anchors, tags and duplicate keys. Flow
style (`tags: [a, b]`, `limits: {turns: 5}`) is read, as newcomers wrote it (refused, a
suite stopped at its first one); strictyaml's rule that a mapping's values that are
block mappings start in one column is kept, and a list or mapping as a key refused. The
common shape of a suite is read by libyaml instead (`yamlfast`), which
builds the same result fifty times faster and hands everything else to strictyaml. Its
schema layer is skipped: it grows quadratically with the document, and the JSON
Schema does that job. Plain scalars are then typed as YAML 1.2's core schema types
them, which is what editors (yaml-language-server) see, so the loader and the editor
validate the same values.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any

from evalctl._schema_check import odd_number
from evalctl._suite.yamlerrors import explained

Path_ = tuple[str | int, ...]

_INT = re.compile(r"^[-+]?[0-9]+$")
_OCT = re.compile(r"^0o[0-7]+$")
_HEX = re.compile(r"^0x[0-9a-fA-F]+$")
_FLOAT = re.compile(r"^[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?$")
_INF = re.compile(r"^[-+]?\.(?:inf|Inf|INF)$")
_NAN = re.compile(r"^\.(?:nan|NaN|NAN)$")
_NULLS = {"", "~", "null", "Null", "NULL"}
_BOOLS = {"true": True, "True": True, "TRUE": True,
          "false": False, "False": False, "FALSE": False}


class NumberTooLong(ValueError):
    """A decimal integer longer than Python will read (4,300 digits)."""


def resolve_plain_scalar(text: str) -> Any:
    """Type an unquoted scalar as YAML 1.2's core schema does."""
    if text in _NULLS:
        return None
    if text in _BOOLS:
        return _BOOLS[text]
    if _INT.match(text):
        try:
            return int(text)
        except ValueError:
            raise NumberTooLong(f"a number of {len(text.lstrip('+-')):,} digits is too "
                                "long to read (if it is meant as text, quote it)") from None
    if _OCT.match(text):
        return int(text[2:], 8)
    if _HEX.match(text):
        return int(text[2:], 16)
    if _FLOAT.match(text):
        return float(text)
    if _INF.match(text):
        return -math.inf if text.startswith("-") else math.inf
    if _NAN.match(text):
        return math.nan
    return text


class YamlSyntaxError(Exception):
    def __init__(self, line: int, message: str):
        super().__init__(line, message)  # both in args, so it survives pickling
        self.line = line
        self.message = message

    def __str__(self) -> str:
        return self.message


# How deep a suite may nest. Real suites use a handful of levels (a tool call's input is
# the deepest); past a few hundred, Python's own recursion (the schema validator, JSON)
# would fail with a traceback instead of a problem at a line.
MAX_DEPTH = 100


@dataclass
class Located:
    """Plain data plus the 1-based line of every node and mapping key."""

    data: Any
    lines: dict[Path_, int] = field(default_factory=dict)
    key_lines: dict[Path_, int] = field(default_factory=dict)
    # Set by the parsers when a plain scalar was NaN, an infinity or a very long integer:
    # only then is the data walked to say where (a walk of every suite cost a sixth of a
    # cold 10,000-task load).
    odd_numbers: bool = False
    # The lists and mappings written in flow style (`[a, b]`, `{k: v}`): a text that
    # starts with `[` or `{` and was not quoted is one, which a message then says.
    flow: set[Path_] = field(default_factory=set)

    def too_deep(self) -> Path_ | None:
        """The path of the first node, in document order, nested deeper than MAX_DEPTH,
        or None. Every node but the root has its line recorded, parents before children,
        so the record of lines is the list of paths (a second walk of the data cost a
        tenth of a cold 10,000-task load)."""
        return next((path for path in self.lines if len(path) > MAX_DEPTH), None)

    def line_of(self, path: Path_) -> int:
        """The line of the node at `path`, or of its nearest located ancestor."""
        path = tuple(path)
        while path:
            if path in self.lines:
                return self.lines[path]
            path = path[:-1]
        return self.lines.get((), 1)


def _loader_class(label: str) -> type:
    from strictyaml.exceptions import InconsistentIndentationDisallowed
    from strictyaml.parser import StrictYAMLLoader
    from strictyaml.ruamel.nodes import MappingNode

    def construct_mapping(self: Any, node: Any, maptyp: Any, deep: bool = False) -> None:
        StrictYAMLLoader.construct_mapping(self, node, maptyp, deep=deep)
        # strictyaml drops its rule that a mapping's values that are mappings start in
        # one column when it allows flow style (`{...}` may start anywhere after its
        # key); the rule is kept for block mappings, which it is about.
        column = None
        for _, value in node.value:
            if not isinstance(value, MappingNode) or value.flow_style:
                continue
            if column is None:
                column = value.start_mark.column
            elif value.start_mark.column != column:
                # At the mapping's first line (strictyaml names the line after its end).
                raise InconsistentIndentationDisallowed(
                    "While parsing", value.start_mark,
                    "Found mapping with indentation inconsistent with previous mapping",
                    value.start_mark)

    return type("EvalctlSuiteLoader", (StrictYAMLLoader,),
                {"label": label, "allow_flow_style": True,
                 "construct_mapping": construct_mapping})


def parse(text: str, label: str) -> Located:
    """Parse one suite document; raise YamlSyntaxError with the line of the problem.

    libyaml parses the common shape of a suite (see `yamlfast`) about fifty times faster
    than strictyaml; whatever it cannot vouch for, valid or not, is parsed by strictyaml,
    so rules and error messages are strictyaml's.
    """
    from evalctl._suite.yamlfast import parse_common

    located = parse_common(text)
    return located if located is not None else parse_document(text, label)


def parse_document(text: str, label: str) -> Located:
    """Parse one YAML document with strictyaml's loader."""
    from strictyaml import ruamel

    try:
        document = ruamel.load(text, Loader=_loader_class(label), preserve_quotes=True)
    except ruamel.YAMLError as exc:
        raise YamlSyntaxError(*explained(exc, text)) from None
    except RecursionError:
        raise YamlSyntaxError(1, f"invalid YAML: nested too deeply to read (a suite needs "
                                 f"at most {MAX_DEPTH} levels)") from None
    except (NotImplementedError, AssertionError, AttributeError, IndexError,
            TypeError) as exc:
        # ruamel's round-trip parser trips over some comment placements; the file is then
        # refused with what it said instead of a traceback.
        raise YamlSyntaxError(1, "invalid YAML: the parser could not read this file "
                                  f"({exc})") from None
    located = Located(None)
    located.lines[()] = 1
    located.data = _plain(document, (), located)
    return located


def _plain(node: Any, path: Path_, located: Located) -> Any:
    from strictyaml.ruamel.comments import CommentedMap, CommentedSeq

    if isinstance(node, CommentedMap | CommentedSeq) and node.fa.flow_style():
        located.flow.add(path)
    if isinstance(node, CommentedMap):
        out: dict[str, Any] = {}
        for key, value in node.items():
            key_line = node.lc.data[key][0] + 1
            if isinstance(key, tuple):  # `{[a]: b}` or `? [a]`: a list as a key
                raise YamlSyntaxError(key_line, "invalid YAML: a list or mapping cannot "
                                                "be a key: write the key as text")
            child = (*path, str(key))
            # A value is reported at its key's line: a block value or an empty one
            # starts on a later line, and the key is what a reader looks for.
            located.key_lines[child] = located.lines[child] = key_line
            out[str(key)] = _plain(value, child, located)
        return out
    if isinstance(node, CommentedSeq):
        items = []
        for index, value in enumerate(node):
            child = (*path, index)
            located.lines[child] = node.lc.data[index][0] + 1
            items.append(_plain(value, child, located))
        return items
    if type(node) is str:
        try:
            value = resolve_plain_scalar(node)
        except NumberTooLong as exc:
            raise YamlSyntaxError(located.lines.get(path, 1), str(exc)) from None
        if odd_number(value):
            located.odd_numbers = True
        return value
    return str(node) if node is not None else None
