"""The YAML parser's errors in a suite author's words: what is wrong and what to write.

ruamel's messages name the parser's states ("expected <block end>, but found '<block
mapping start>'"), which a newcomer cannot act on. The common mistakes each have one
usual cause and one fix: an unclosed quote, a `: ` inside an unquoted text, uneven
indentation, a tab, a text that starts with a character YAML reserves. A message not
recognised here is left as the parser wrote it.
"""

from __future__ import annotations

import re
from typing import Any

# Characters that cannot start a plain (unquoted) text in YAML.
_RESERVED_STARTS = "@`%"


def explained(exc: Any, text: str) -> tuple[int, str]:
    """The 1-based line and the message for a ruamel YAMLError raised on `text`."""
    problem = str(getattr(exc, "problem", None) or exc)
    context = str(getattr(exc, "context", None) or "")
    problem_mark = getattr(exc, "problem_mark", None)
    context_mark = getattr(exc, "context_mark", None)
    line = (problem_mark or context_mark).line + 1 if (problem_mark or context_mark) else 1
    opened = context_mark.line + 1 if context_mark is not None else line
    said = _plain(problem, context, line, opened, text)
    if said is None:
        raw = f"{problem} ({context})" if context and context.lower() not in (
            "while scanning", "while parsing") else problem
        return line, f"invalid YAML: {raw}"
    where, message = said
    return where, f"invalid YAML: {message}"


def _plain(problem: str, context: str, line: int, opened: int,
           text: str) -> tuple[int, str] | None:
    if problem == "found unexpected end of stream" and "quoted scalar" in context:
        return opened, ("a quoted text that starts on this line is never closed: end it "
                        "with the same quote it starts with (\" or ')")
    if problem.startswith("found unknown escape character"):
        character = problem.rsplit(" ", 1)[-1]
        return line, (f"\\{character.strip(chr(39))} is not an escape in a double-quoted "
                      "text: write \\\\ for a backslash, or use single quotes, which take "
                      "backslashes as they are ('C:\\dir')")
    if problem == "found character '\\t' that cannot start any token":
        return line, "a tab character: YAML indents with spaces only"
    if problem.startswith("found character '") and problem.endswith("cannot start any token"):
        character = problem[len("found character '")]
        if character in _RESERVED_STARTS:
            return line, (f"a text cannot start with {character!r} unless it is quoted: "
                          f"write it in quotes ('{character}...')")
    if problem == "mapping values are not allowed here":
        return line, ("a ': ' where YAML does not expect a key: if it is part of a text, "
                      "quote the whole text (prompt: \"Fix this: now\"); if it is a key, "
                      "line it up with the keys above it" + _indent_note(text, line))
    if problem == "mapping keys are not allowed here":
        return line, "a text cannot start with '? ' unless it is quoted: write it in quotes"
    if "while scanning an alias" in context or problem.startswith("found undefined alias"):
        return line, ("a text cannot start with '*' unless it is quoted (YAML reads *name "
                      "as an alias, which suites do not use): write it in quotes")
    if problem.startswith("Found confusing disallowed anchor token"):
        return line, ("anchors and aliases (&name, *name) are not allowed in a suite: "
                      "write the value out, or share it through `defaults:`; a text that "
                      "starts with & or * must be quoted")
    if problem.startswith("Found disallowed tag tokens"):
        return line, ("tags (!!str, !name) are not allowed in a suite: the schema decides "
                      "each value's type; a text that starts with ! must be quoted")
    if problem.startswith("Duplicate key "):
        key = problem[len("Duplicate key "):].removesuffix(" found")
        return line, f"key {key} is given twice in the same mapping: keep one of them"
    if problem.startswith(("expected ',' or ']'", "expected ',' or '}'")):
        closing = problem[len("expected ',' or '")]
        opening = "[" if closing == "]" else "{"
        return opened, (f"a {_FLOW_KINDS[opening]} written in {opening}...{closing} (flow "
                        "style) starts on this line and is not closed where expected: "
                        f"separate its items with ', ' and end it with '{closing}' (a "
                        f"text that starts with '{opening}' must be quoted)")
    if problem.startswith("Found mapping with indentation inconsistent"):
        return line, ("this mapping's keys are indented differently from those of the "
                      "mapping before it at the same level (found mapping with indentation "
                      "inconsistent with previous mapping): indent them alike"
                      + _indent_note(text, line))
    if problem == "found unhashable key":
        return line, ("a list or mapping cannot be a key ({{x}} is a mapping used as a "
                      "key): a text that starts with '{' or '[' must be quoted")
    if problem == "could not find expected ':'":
        block = next((found for found in reversed(empty_blocks(text)) if found[0] < line),
                     None)
        if block is not None:
            return opened, (f"a line that is neither 'key: value' nor a list item ('- '): "
                            f"{block_words(*block)}")
        return opened, ("a line that is neither 'key: value' nor a list item ('- '): a "
                        "key needs ': ' after it, with a space after the colon")
    if problem == "but found another document":
        return line, ("a suite is one YAML document: remove this '---' line (put a "
                      "second suite in a file of its own)")
    if problem.startswith("expected <block end>, but found "):
        found = problem[len("expected <block end>, but found "):]
        if found == "'-'":
            return line, ("a list item ('- ') where a key was expected: a list belongs "
                          "under a key (checks:), on the lines after it, indented"
                          + _indent_note(text, line))
        if found in ("']'", "'}'"):
            closing = found[1]
            return line, (f"a '{closing}' that closes nothing: a list is written "
                          "[a, b] and a mapping {k: v}, each closed once; quote a text "
                          f"that holds '{closing}' after a value")
        if found == "'<scalar>'" and _flow_start(text, line):
            opening = _flow_start(text, line)
            return line, (f"text goes on after a value that starts with '{opening}' ends: "
                          f"'{opening}' starts a {_FLOW_KINDS[opening]} (flow style), so "
                          "quote the whole text (prompt: \"[WIP] fix it\")")
        if found == "'<scalar>'":
            return line, ("text goes on after a value ends: a value that starts with a "
                          "quote must end with it, so quote the whole text "
                          "('\"{x}\" and more' in single quotes), or check the indentation")
        return line, "this line's indentation does not fit the lines above it" + \
            _indent_note(text, line)
    return None


_FLOW_KINDS = {"[": "list", "{": "mapping"}


def _flow_start(text: str, line: int) -> str:
    """'[' or '{' when the value on `line` (after its '- ' and 'key: ') starts with it,
    else ""."""
    lines = text.splitlines()
    if not 1 <= line <= len(lines):
        return ""
    rest = lines[line - 1].lstrip(" ")
    while rest.startswith("- "):
        rest = rest[2:].lstrip(" ")
    key = re.match(r"[^'\"\[{#][^#]*?:\s+", rest)
    if key:
        rest = rest[key.end():]
    return rest[:1] if rest[:1] in _FLOW_KINDS else ""


def _indent_note(text: str, line: int) -> str:
    """The indentation of `line` against the keys above it, when they differ: the usual
    cause of a parser error at a line that looks right."""
    lines = text.splitlines()
    if not 1 <= line <= len(lines):
        return ""
    this = len(lines[line - 1]) - len(lines[line - 1].lstrip(" "))
    rows = [row for row in lines[:line - 1] if row.strip() and not row.lstrip().startswith("#")]
    above = sorted({column for row in rows for column in _key_columns(row)})
    previous = rows[-1] if rows else ""
    if previous.lstrip(" ").startswith("- ") and this == len(previous) - \
            len(previous.lstrip(" ")) and not lines[line - 1].lstrip(" ").startswith("-"):
        # Under its dash, not its first key (found by a newcomer: the one indentation
        # mistake said without a hint, since a column above did start there).
        return (f" (this line is indented {this} space(s), as the '- ' above it; a key of "
                f"that list item lines up with its first key, at "
                f"{max(_key_columns(previous))} spaces)")
    if this in above or not above:
        return ""
    columns = ", ".join(str(n) for n in above[:6])
    return (f" (this line is indented {this} space(s); the lines above are indented "
            f"{columns}: keys of one mapping start in the same column)")


def _key_columns(row: str) -> set[int]:
    """The columns where a line's keys may start: its indentation, and for a list item
    ("- id: a") also the column after the dash, where the item's keys line up."""
    indent = len(row) - len(row.lstrip(" "))
    columns = {indent}
    rest = row[indent:]
    while rest.startswith("- "):
        indent += 2 + len(rest[2:]) - len(rest[2:].lstrip(" "))
        columns.add(indent)
        rest = row[indent:]
    return columns


# A mapping value that starts a block text (`key: |`, `key: >-`, with a comment or not),
# its indentation left to the text's lines (an explicit `|2` is left alone); found in the
# whole text at once (re.M), so a 10,000-task suite's cold load pays little for it.
_BLOCK_START = re.compile(r"^(?P<indent>[ ]*)(?P<dashes>(?:-[ ]+)*)(?P<key>[^#'\"\s][^#\n]*?|"
                          r"'[^'\n]*'|\"[^\"\n]*\"):[ ]+[|>][+-]?[ ]*(?:#[^\n]*)?$", re.M)
_BLOCK_END = re.compile(r":[ ]+[|>][+-]?[ ]*(?:#[^\n]*)?$", re.M)  # where to look closer
_NEXT_LINE = re.compile(r"[^\n]*\n(?:[ ]*\n)*(?P<indent>[ ]*)(?P<rest>[^\n]?)")


def _ends_before(column: int) -> re.Pattern[str]:
    """A line that is not blank and is indented `column` spaces or fewer: where a block
    text of a key at `column` has ended."""
    return re.compile(rf"^[ ]{{0,{column}}}[^ \n]", re.M)


def empty_blocks(text: str) -> list[tuple[int, str, int, int]]:
    """Each `key: |` (or `>`) whose text is empty because the lines meant for it are not
    indented more than its key (found by a newcomer: `a.py: |` over `def f():` at the
    key's column made a file named "def f()" and left a.py empty, and validate passed):
    (its line, the key, the key's column, the next line's indentation). What is inside
    a block text is passed over, so text in a file's content is not taken for YAML."""
    found = []
    line, counted = 1, 0  # the line number at offset `counted`
    block_end = 0  # where the text of the last block with lines ends
    ends: dict[int, re.Pattern[str]] = {}
    for candidate in _BLOCK_END.finditer(text):
        begins = text.rfind("\n", 0, candidate.start()) + 1
        if begins < block_end:
            continue  # in the text of a block before it
        start = _BLOCK_START.match(text, begins)
        if start is None:
            continue
        line += text.count("\n", counted, begins)
        counted = begins
        column = len(start["indent"]) + len(start["dashes"])
        following = _NEXT_LINE.match(text, begins)
        after = len(following["indent"]) if following and following["rest"] else -1
        if after > column:  # a block with lines: skip to where they end
            if column not in ends:
                ends[column] = _ends_before(column)
            ended = ends[column].search(text, following.start("indent"))
            block_end = ended.start() if ended else len(text)
        else:
            found.append((line, start["key"].strip("'\""), column, after))
    return found


def block_words(line: int, key: str, column: int, after: int) -> str:
    """What is wrong with the empty block text of `key` on `line`, and the fix."""
    return (f"the text of '{key}' (line {line}, a '|' or '>' block) is empty: its lines "
            f"must be indented more than its key, which is indented {column} space(s), and "
            f"the next line is indented {max(after, 0)}; indent the text's lines, or write "
            "'' for an empty text")
