"""strictyaml parsing into plain data, keeping the line of every node.

strictyaml's own loader rejects flow style, anchors, tags and duplicate keys. Its
schema layer is skipped: it grows quadratically with the document, and the JSON
Schema does that job. Plain scalars are then typed as YAML 1.2's core schema types
them, which is what editors (yaml-language-server) see, so the loader and the editor
validate the same values.
"""

from __future__ import annotations

import math
import multiprocessing
import os
import re
from dataclasses import dataclass, field
from typing import Any

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


def resolve_plain_scalar(text: str) -> Any:
    """Type an unquoted scalar as YAML 1.2's core schema does."""
    if text in _NULLS:
        return None
    if text in _BOOLS:
        return _BOOLS[text]
    if _INT.match(text):
        return int(text)
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


@dataclass
class Located:
    """Plain data plus the 1-based line of every node and mapping key."""

    data: Any
    lines: dict[Path_, int] = field(default_factory=dict)
    key_lines: dict[Path_, int] = field(default_factory=dict)

    def line_of(self, path: Path_) -> int:
        """The line of the node at `path`, or of its nearest located ancestor."""
        path = tuple(path)
        while path:
            if path in self.lines:
                return self.lines[path]
            path = path[:-1]
        return self.lines.get((), 1)


def _loader_class(label: str) -> type:
    from strictyaml.parser import StrictYAMLLoader

    return type("EvalctlSuiteLoader", (StrictYAMLLoader,),
                {"label": label, "allow_flow_style": False})


PARALLEL_THRESHOLD = 200  # task items; below this, worker start-up costs more than it saves


def parse(text: str, label: str) -> Located:
    """Parse one suite document; raise YamlSyntaxError with the line of the problem.

    A large suite is cut at its task items and parsed in parallel where there are cores
    to spare (one contiguous run of items per worker process): the pure-Python YAML
    parser dominates loading, and top-level task items are independent. Any problem
    falls back to parsing the whole document, so errors are exactly the whole-document
    parser's.
    """
    split = split_tasks(text)
    if split is None or len(split.items) < PARALLEL_THRESHOLD:
        return parse_document(text, label)
    from concurrent.futures.process import BrokenProcessPool

    try:
        return _parse_split(split, label)
    except (YamlSyntaxError, BrokenProcessPool, OSError):
        return parse_document(text, label)


@dataclass
class SplitDocument:
    """A suite cut into its task items: each item's text (dedented to column 0) and the
    0-based line it starts at; `header` is the rest, with `tasks:` left empty."""

    items: list[tuple[int, str]]
    header: str | None  # None for the list form


_TOP_LEVEL_KEY = re.compile(r"^[^\s#-][^:]*:(\s|$)")


def split_tasks(text: str) -> SplitDocument | None:
    """Cut a suite at its task items, or None when its shape is not the plain one."""
    lines = text.splitlines(keepends=True)
    significant = [i for i, line in enumerate(lines)
                   if line.strip() and not line.lstrip().startswith("#")]
    if not significant:
        return None
    if any(lines[i].startswith(("---", "...", "%")) for i in significant):
        return None
    first = lines[significant[0]]
    if first.startswith("- ") or first.rstrip() == "-":
        body_start, body_end, header = 0, len(lines), None
        indent = 0
    else:
        key_lines = [i for i in significant
                     if not lines[i][:1].isspace() and not lines[i].startswith("-")]
        if not all(_TOP_LEVEL_KEY.match(lines[i]) for i in key_lines):
            return None
        tasks = [i for i in key_lines if lines[i].rstrip() == "tasks:"]
        if len(tasks) != 1:
            return None
        body_start = tasks[0] + 1
        later = [i for i in key_lines if i > tasks[0]]
        body_end = later[0] if later else len(lines)
        body = [i for i in significant if body_start <= i < body_end]
        if not body:
            return None
        indent = len(lines[body[0]]) - len(lines[body[0]].lstrip(" "))
        # The task lines become blank, so the rest keeps its line numbers.
        header = "".join(lines[:body_start]) + "\n" * (body_end - body_start) + \
            "".join(lines[body_end:])
    starts = []
    for i in range(body_start, body_end):
        line = lines[i]
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        if line[:indent].strip() or line[indent:indent + 1] == " ":
            continue  # deeper: inside an item
        if not (line[indent:].startswith("- ") or line[indent:].rstrip() == "-"):
            return None
        starts.append(i)
    if not starts:
        return None
    items = []
    for position, start in enumerate(starts):
        end = starts[position + 1] if position + 1 < len(starts) else body_end
        chunk = "".join(_dedent(line, indent) for line in lines[start:end])
        items.append((start, chunk))
    return SplitDocument(items, header)


def _dedent(line: str, indent: int) -> str:
    """`line` without its first `indent` spaces, keeping its line ending (a blank line
    shorter than the indent is just its ending)."""
    body = line.rstrip("\r\n")
    return body[indent:] + line[len(body):] if body[:indent].strip() == "" else line


def _parse_batch(batch: list[tuple[int, str]], label: str) -> Located:
    """Contiguous task items parsed as one list document, at their own lines: setting up
    a loader costs more than parsing an item, so it is done once per batch."""
    return parse_document("".join(chunk for _, chunk in batch), label,
                          line_offset=batch[0][0])


def _parse_split(split: SplitDocument, label: str) -> Located:
    if split.header is None:
        located = Located([])
        located.lines[()] = 1
        base: Path_ = ()
    else:
        located = parse_document(split.header, label)
        if not isinstance(located.data, dict) or located.data.get("tasks") is not None:
            raise YamlSyntaxError(1, "unexpected header shape")  # let the full parse decide
        located.data["tasks"] = []
        base = ("tasks",)
    tasks = located.data["tasks"] if base else located.data

    workers = min(os.cpu_count() or 1, 4)
    # Forking copies only the calling thread: safe while evalctl has no other thread (the
    # CLI loads a suite before its event loop starts); otherwise parse here, in one go.
    import threading

    forking = workers > 1 and "fork" in multiprocessing.get_all_start_methods() and \
        threading.active_count() == 1
    size = -(-len(split.items) // (workers if forking else 1))
    batches = [split.items[i:i + size] for i in range(0, len(split.items), size)]
    first = 0  # the index, in the whole suite, of a batch's first item

    def merge(batch: list[tuple[int, str]], parsed: Located) -> None:
        # Each batch's result is merged as it arrives and then dropped: holding them all
        # beside the merged copy doubled the peak memory of a large suite.
        nonlocal first
        if not isinstance(parsed.data, list) or len(parsed.data) != len(batch):
            raise YamlSyntaxError(1, "unexpected item shape")  # let the full parse decide
        tasks.extend(parsed.data)
        for mapping, target in ((parsed.lines, located.lines), (parsed.key_lines,
                                                                located.key_lines)):
            for path, line in mapping.items():
                if path:
                    target[(*base, first + int(path[0]), *path[1:])] = line
        first += len(batch)

    if forking:
        from concurrent.futures import ProcessPoolExecutor

        context = multiprocessing.get_context("fork")
        with ProcessPoolExecutor(len(batches), mp_context=context) as pool:
            for batch, parsed in zip(batches, pool.map(_parse_batch, batches,
                                                       [label] * len(batches)), strict=True):
                merge(batch, parsed)
    else:
        for batch in batches:
            merge(batch, _parse_batch(batch, label))
    return located


def parse_document(text: str, label: str, line_offset: int = 0) -> Located:
    """Parse one YAML document with strictyaml's loader."""
    from strictyaml import ruamel

    try:
        document = ruamel.load(text, Loader=_loader_class(label), preserve_quotes=True)
    except ruamel.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
        line = (mark.line + 1 if mark is not None else 1) + line_offset
        problem = getattr(exc, "problem", None) or str(exc)
        context = getattr(exc, "context", None)
        message = f"{problem} ({context})" if context and context != "While scanning" and \
            context != "While parsing" else str(problem)
        raise YamlSyntaxError(line, f"invalid YAML: {message}") from None
    located = Located(None)
    located.lines[()] = 1 + line_offset
    located.data = _plain(document, (), located, line_offset)
    return located


def _plain(node: Any, path: Path_, located: Located, offset: int = 0) -> Any:
    from strictyaml.ruamel.comments import CommentedMap, CommentedSeq

    if isinstance(node, CommentedMap):
        out: dict[str, Any] = {}
        for key, value in node.items():
            key_line = node.lc.data[key][0] + 1 + offset
            child = (*path, str(key))
            # A value is reported at its key's line: a block value or an empty one
            # starts on a later line, and the key is what a reader looks for.
            located.key_lines[child] = located.lines[child] = key_line
            out[str(key)] = _plain(value, child, located, offset)
        return out
    if isinstance(node, CommentedSeq):
        items = []
        for index, value in enumerate(node):
            child = (*path, index)
            located.lines[child] = node.lc.data[index][0] + 1 + offset
            items.append(_plain(value, child, located, offset))
        return items
    if type(node) is str:
        return resolve_plain_scalar(node)
    return str(node) if node is not None else None
