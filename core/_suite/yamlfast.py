"""The common shape of a suite parsed by libyaml, or None when the text needs strictyaml.

strictyaml's parser is pure Python and costs about 1.5 ms of CPU per task; libyaml's
(through PyYAML's C extension) costs about 30 µs. This module reads libyaml's event
stream and builds exactly what `yamlsource.parse_document` builds — the same data, the
same lines — but only for documents it can vouch for: one implicit document of block
mappings, block sequences and scalars, with no tag, anchor, alias, flow collection,
document marker, directive, merge key, empty key, duplicate key, tab or byte-order
mark, no comment right after a block scalar's header, no mapping values indented
unevenly (strictyaml's rule), and only \\n or \\r\\n line breaks.
Anything else, and anything libyaml rejects, returns None: the caller then parses with
strictyaml, which gives its exact error at file:line, or accepts what libyaml does not.
"""

from __future__ import annotations

import re
from typing import Any

from evalctl._schema_check import odd_number
from evalctl._suite.yamlsource import Located, Path_, resolve_plain_scalar

# Characters libyaml (YAML 1.1) counts as line breaks and strictyaml (YAML 1.2) does not,
# so the two would number lines differently; and tabs, which strictyaml refuses in places
# libyaml takes (inside a plain scalar, after a colon).
_NOT_COMMON_CHARACTERS = ("\t", "\x85", "\u2028", "\u2029",
                          # libyaml skips a byte-order mark at the start of any line;
                          # strictyaml reads it as text (the loader strips a leading one)
                          "\ufeff")
# A block scalar's header with a comment right after it ('|#', '>-#note'): libyaml takes
# the comment, strictyaml refuses the header. Text that merely looks like one (inside a
# quoted string, say) only costs the fast path.
_HEADER_THEN_COMMENT = re.compile(r"[|>][-+0-9]*#")


def _parser_class() -> Any:
    try:
        from yaml._yaml import CParser
    except ImportError:  # PyYAML built without libyaml: strictyaml does it all
        return None
    return CParser


class _NotCommon(Exception):
    """The document uses something only strictyaml may rule on."""


def parse_common(text: str) -> Located | None:
    """`text` parsed as `yamlsource.parse_document` would, or None (see the module)."""
    parser_class = _parser_class()
    if parser_class is None or any(ch in text for ch in _NOT_COMMON_CHARACTERS) or \
            text.count("\r") != text.count("\r\n") or _HEADER_THEN_COMMENT.search(text):
        return None
    import yaml

    parser = parser_class(text)
    try:
        return _build(parser)
    except (_NotCommon, yaml.YAMLError, RecursionError, ValueError):
        return None
    finally:
        parser.dispose()


class _Mapping:
    __slots__ = ("value", "path", "key", "key_line", "value_column")

    def __init__(self, path: Path_):
        self.value: dict[str, Any] = {}
        self.path = path
        self.key: str | None = None
        self.key_line = 0
        self.value_column: int | None = None  # of the first value that is a mapping


class _Sequence:
    __slots__ = ("value", "path")

    def __init__(self, path: Path_):
        self.value: list[Any] = []
        self.path = path


def _build(parser: Any) -> Located:
    from yaml.events import (
        DocumentEndEvent,
        DocumentStartEvent,
        MappingEndEvent,
        MappingStartEvent,
        ScalarEvent,
        SequenceEndEvent,
        SequenceStartEvent,
        StreamEndEvent,
        StreamStartEvent,
    )

    located = Located(None)
    located.lines[()] = 1
    lines, key_lines = located.lines, located.key_lines
    stack: list[_Mapping | _Sequence] = []
    root: Any = _NotCommon  # a sentinel: no node yet

    while parser.check_event():
        event = parser.get_event()
        kind = type(event)
        if kind is ScalarEvent:
            if event.anchor is not None or event.tag is not None:
                raise _NotCommon
            # Plain scalars are typed as YAML 1.2's core schema does; quoted and block
            # scalars are text.
            node: Any = resolve_plain_scalar(event.value) if event.style == "" else event.value
            if (node.__class__ is float or node.__class__ is int) and odd_number(node):
                located.odd_numbers = True
            line = event.start_mark.line + 1
            top = stack[-1] if stack else None
            if type(top) is _Mapping and top.key is None:
                key = event.value
                if key == "" or key == "<<" or key in top.value:
                    raise _NotCommon  # empty, merge or duplicate: strictyaml decides
                top.key, top.key_line = key, line
                continue
            _attach(top, node, line, lines, key_lines)
            if top is None:
                root = node
            continue
        if kind is MappingStartEvent or kind is SequenceStartEvent:
            if event.anchor is not None or event.tag is not None or event.flow_style:
                raise _NotCommon
            top = stack[-1] if stack else None
            if type(top) is _Mapping and top.key is None:
                raise _NotCommon  # a collection as a key
            line = event.start_mark.line + 1
            if kind is MappingStartEvent:
                if type(top) is _Mapping:
                    # strictyaml: a mapping's values that are mappings start in one column
                    column = event.start_mark.column
                    if top.value_column is None:
                        top.value_column = column
                    elif column != top.value_column:
                        raise _NotCommon
                path = _child_path(top)
                frame: _Mapping | _Sequence = _Mapping(path)
            else:
                frame = _Sequence(_child_path(top))
            _attach(top, frame.value, line, lines, key_lines)
            if top is None:
                root = frame.value
            stack.append(frame)
            continue
        if kind is MappingEndEvent or kind is SequenceEndEvent:
            stack.pop()
            continue
        if kind is DocumentStartEvent or kind is DocumentEndEvent:
            # Only the implicit document: the two parsers count '---' and '...' markers
            # into documents differently.
            if event.explicit:
                raise _NotCommon
            continue
        if kind is StreamStartEvent or kind is StreamEndEvent:
            continue
        raise _NotCommon  # an alias, or an event this module does not know
    if not isinstance(root, dict | list):
        raise _NotCommon  # an empty or scalar document: strictyaml words the problem
    located.data = root
    return located


def _child_path(top: _Mapping | _Sequence | None) -> Path_:
    if top is None:
        return ()
    if type(top) is _Mapping:
        return (*top.path, top.key)  # type: ignore[misc]
    return (*top.path, len(top.value))


def _attach(top: _Mapping | _Sequence | None, node: Any, line: int,
            lines: dict[Path_, int], key_lines: dict[Path_, int]) -> None:
    """Put `node` in its parent, recording its line as `parse_document` does: a mapping
    value at its key's line, a sequence item at its own."""
    if top is None:
        return
    if type(top) is _Mapping:
        key = top.key
        child = (*top.path, key)
        key_lines[child] = lines[child] = top.key_line
        top.value[key] = node  # type: ignore[index]
        top.key = None
    else:
        lines[(*top.path, len(top.value))] = line
        top.value.append(node)  # type: ignore[union-attr]
