"""File graders: `file_exists`, `file_contains`, `no_placeholders`."""

from __future__ import annotations

import codecs
import functools
import os
import re
import unicodedata
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

import evalctl

# Relative, no `..` segment, no backslash or drive letter, not ending in a slash: a path
# that leaves the workspace is refused by `evalctl validate` (and in editors), not only
# when the check is graded. The same rule as the core's for a task's `files:`.
# Relative, no `..` segment, no backslash, drive letter or line break. `(?![\s\S])` is the
# end of the text in every regex dialect (Python's `$` also matches before a final
# newline, an editor's does not).
INSIDE_WORKSPACE = (r"^(?![/~])(?![A-Za-z]:)(?!(?:.*/)?\.\.(?:/|(?![\s\S])))"
                    r"[^\\\x00\n\r]*[^/\\\x00\n\r](?![\s\S])")
SCAN_LIMIT = 5_000_000  # bytes a regex is matched against: graders run in evalctl's process
CHUNK = 1 << 20  # files are read in chunks of this, never whole
LINE_LIMIT = 1_000_000  # bytes of one line no_placeholders scans at once
PATH = {"type": "string", "minLength": 1, "pattern": INSIDE_WORKSPACE,
        "description": "A path relative to the workspace that stays inside it (no '..', not "
                       "absolute)."}


def _target(workspace: Path, relative: str) -> Path | evalctl.CheckResult:
    try:
        return evalctl.resolve_in_workspace(workspace, relative)
    except evalctl.ConfinementError as exc:
        return evalctl.CheckResult(False, str(exc))


def _unreadable(relative: str, exc: OSError) -> evalctl.CheckResult:
    """The check's failure when what the agent left at the path cannot even be looked at
    (links resolving to a path too long, say): a failure of the agent's, never a crash of
    the grader, which would take the attempt out of the score."""
    return evalctl.CheckResult(False, f"{relative} cannot be read: {exc.strerror or exc}")


def grade_file_exists(check: dict[str, Any], workspace: Path,
                      result: evalctl.AgentResult) -> evalctl.CheckResult:
    # In a thread, not on the event loop: the agent chose the path, and a web of links
    # makes resolving it cost up to evalctl's cap (MAX_LINKS, MAX_NAMES) of lookups.
    target = _target(workspace, check["path"])
    if isinstance(target, evalctl.CheckResult):
        return target
    try:
        if target.is_file():
            return evalctl.CheckResult(True, f"{check['path']} exists "
                                             f"({target.stat().st_size} bytes)")
        if target.is_dir():
            return evalctl.CheckResult(False, f"{check['path']} is a directory, not a file")
    except OSError as exc:
        return _unreadable(check["path"], exc)
    return evalctl.CheckResult(False, f"{check['path']} does not exist")


def _megabytes(size: int) -> str:
    return f"{size / 1_000_000:.1f} MB"


def _contains_text(handle: BinaryIO, text: str) -> tuple[bool, int, str]:
    """Whether the whole file holds `text`, read a chunk at a time (memory stays bounded
    whatever its size), each chunk searched with the last len(text) - 1 characters of
    the one before, so text across a chunk boundary is found: (found, bytes read, the
    file's first 200 characters)."""
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    overlap = len(text) - 1
    carry, start, read = "", None, 0
    while True:
        block = handle.read(CHUNK)
        read += len(block)
        window = carry + decoder.decode(block, final=not block)
        if start is None:
            start = window[:200]
        if text in window:
            return True, read, start
        if not block:
            return False, read, start
        carry = window[-overlap:] if overlap else ""


def grade_file_contains(check: dict[str, Any], workspace: Path,
                        result: evalctl.AgentResult) -> evalctl.CheckResult:
    target = _target(workspace, check["path"])
    if isinstance(target, evalctl.CheckResult):
        return target
    try:
        if not target.is_file():
            return evalctl.CheckResult(False, f"{check['path']} does not exist")
    except OSError as exc:
        return _unreadable(check["path"], exc)
    negate = check.get("negate", False)
    partial = False  # only a regex search stops at SCAN_LIMIT
    try:
        with evalctl.open_in_workspace(workspace, check["path"]) as handle:
            size = os.fstat(handle.fileno()).st_size
            if "regex" in check:
                # A regular expression can span any distance: it is matched against one
                # text, the file's first SCAN_LIMIT bytes (graders run in evalctl's process).
                data = handle.read(SCAN_LIMIT + 1)
                partial = len(data) > SCAN_LIMIT
                content = data[:SCAN_LIMIT].decode("utf-8", errors="replace")
                # Lines end as Python reads them (universal newlines): a `$` after
                # `DEBUG = True` must match where the agent ended the line with "\r\n".
                content = content.replace("\r\n", "\n").replace("\r", "\n")
                regex = _file_contains_regex(check["regex"])
                found = regex.search(content) is not None
                read, start = min(len(data), SCAN_LIMIT), content[:200]
                what = f"regex {check['regex']!r}"
            else:
                found, read, start = _contains_text(handle, check["text"])
                what = f"text {check['text']!r}"
    except evalctl.ConfinementError as exc:
        return evalctl.CheckResult(False, str(exc))
    # What was read, when the file is big enough for it to matter.
    extent = f" (read whole: {read} bytes)" if read > SCAN_LIMIT else ""
    if partial and not found:
        # Padding past the limit must not hide what a negated check looks for, nor
        # make a plain one fail for want of reading: say so, and do not pass.
        return evalctl.CheckResult(
            False, f"{check['path']} could not be searched whole for {what}: only its first "
                   f"{_megabytes(SCAN_LIMIT)} of {_megabytes(size)} were read (a regex is "
                   f"matched within {_megabytes(SCAN_LIMIT)}); a file this big does not pass "
                   "this check")
    if partial:
        extent = f" (in its first {_megabytes(SCAN_LIMIT)} of {_megabytes(size)})"
    if found != negate:
        verb = "does not contain" if negate else "contains"
        return evalctl.CheckResult(True, f"{check['path']} {verb} {what}{extent}")
    if negate:
        return evalctl.CheckResult(False, f"{check['path']} contains {what}, which it must "
                                          f"not{extent}")
    preview = start.replace("\n", "\\n")
    return evalctl.CheckResult(False, f"{check['path']} does not contain {what}{extent}; "
                                      f"it starts with: {preview!r}")


# (pattern, label, clues): every match of the pattern holds one of its clues once
# case-folded, so a block of lines holding none of them is passed over unsearched (a
# substring test is about ten times faster than the regexes over the same text).
# Matched with RE2, like every regex a grader runs over what the agent wrote: Python's
# `re` backtracks (`<insert ` a hundred thousand times, with no `>`, is quadratic) and
# holds the GIL while it does, which froze the event loop and every attempt for minutes.
_PLACEHOLDER_PATTERNS = [
    (r"\b(?:TODO|FIXME|XXX)\b", "a TODO/FIXME/XXX marker", ("todo", "fixme", "xxx")),
    (r"\bNotImplementedError\b", "a NotImplementedError stub", ("notimplementederror",)),
    (r"(?i)your (?:code|implementation|answer|text) (?:goes )?here",
     "a 'your code here' placeholder", ("your ",)),
    (r"(?i)\b(?:implement (?:me|this)|fill (?:this|me) in)\b",
     "an 'implement me' placeholder", ("implement ", "fill ")),
    (r"(?i)\blorem ipsum\b", "lorem ipsum filler", ("lorem ipsum",)),
    (r"(?i)<(?:placeholder|insert [^>]*)>", "a <placeholder>", ("<placeholder>", "<insert ")),
]
CODE_SUFFIXES = {".py", ".js", ".ts", ".jsx", ".tsx", ".go", ".rs", ".java", ".rb",
                 ".c", ".h", ".cpp", ".sh"}
# Files whose name says they are source or text: scanned whatever bytes they hold (an
# attacker round padded a C file's and a Markdown file's TODO with NUL bytes, and the
# files were skipped as binary; gcc compiles such a file).
TEXT_SUFFIXES = CODE_SUFFIXES | {
    ".pyi", ".pyw", ".mjs", ".cjs", ".cc", ".cxx", ".hh", ".hpp", ".hxx", ".cs", ".kt",
    ".kts", ".scala", ".swift", ".m", ".mm", ".php", ".pl", ".pm", ".lua", ".r", ".jl",
    ".dart", ".ex", ".exs", ".erl", ".hs", ".ml", ".fs", ".clj", ".groovy", ".gradle",
    ".bash", ".zsh", ".fish", ".ps1", ".bat", ".cmd", ".sql", ".vue", ".svelte", ".html",
    ".htm", ".css", ".scss", ".sass", ".less", ".md", ".markdown", ".txt", ".rst", ".adoc",
    ".tex", ".json", ".yaml", ".yml", ".toml", ".ini", ".cfg", ".conf", ".xml", ".csv",
    ".tsv", ".mk", ".cmake", ".proto", ".graphql", ".tf"}
# Encodings a coding line may declare in which every ASCII byte is that character, one
# byte for one: decoded as UTF-8 (with replacement), such a file's placeholders show.
# Any other (UTF-7 spells `TODO` as `T+AE8-DO`) is not read, and fails the check.
_ASCII_TRANSPARENT = {"utf-8", "utf-8-sig", "ascii", "latin-1", "iso8859-1", "iso8859-2",
                      "iso8859-3", "iso8859-4", "iso8859-5", "iso8859-6", "iso8859-7",
                      "iso8859-8", "iso8859-9", "iso8859-10", "iso8859-13", "iso8859-14",
                      "iso8859-15", "iso8859-16", "cp1250", "cp1251", "cp1252", "cp1253",
                      "cp1254", "cp1255", "cp1256", "cp1257", "cp1258", "koi8-r", "koi8-u",
                      "mac-roman", "gbk", "gb2312", "gb18030", "big5", "euc-jp", "euc-kr",
                      "shift_jis", "cp932", "cp949", "cp950"}
# An ellipsis standing in for a body (`pass  # TODO` is caught by the TODO marker).
_CODE_PLACEHOLDER_PATTERNS = [
    # `...;` too: a statement of its own, as Python reads it (found by an attacker round).
    (r"^\s*\.\.\.\s*(?:;\s*)?(?:#.*)?$", "a '...' body", ("...",)),
    (r":\s*\.\.\.\s*(?:;\s*)?(?:#.*)?$", "a '...' body", ("...",)),
]


def _file_contains_regex(pattern: str) -> Any:
    """A file_contains regex, compiled with ^ and $ at every line (as Python's
    re.MULTILINE; lines end at "\n", "\r\n" or "\r", made "\n" before matching);
    UsageError, saying why, when RE2 cannot match it."""
    import re

    try:
        return _linear("(?m)" + pattern)
    except ValueError as exc:
        try:
            re.compile(pattern)
        except re.error as invalid:  # not a regex at all: say so, not "linear time"
            raise evalctl.UsageError(f"file_contains regex {pattern!r} is not a regular "
                                     f"expression: {invalid}") from None
        raise evalctl.UsageError(
            f"file_contains regex {pattern!r} cannot be matched in linear time: {exc} "
            "(file_contains matches with RE2: Python's syntax without lookaround or "
            "backreferences)") from None


def preflight_file_contains(checks: list[dict[str, Any]]) -> None:
    """Every regex compiled before any task starts: one RE2 cannot match is the suite's
    mistake, exit 2, not an error in every attempt. Every bad one is named, not the
    first alone."""
    problems = []
    for check in checks:
        if "regex" in check:
            try:
                _file_contains_regex(check["regex"])
            except evalctl.UsageError as exc:
                problems.append(str(exc))
    if problems:
        raise evalctl.UsageError("; ".join(dict.fromkeys(problems)))


def _linear(pattern: str) -> Any:
    """`pattern` compiled by RE2 (matching in time linear in the text, the GIL released);
    ValueError with RE2's reason when it cannot be (lookaround, backreferences)."""
    import re2  # google-re2, imported when a check first needs it

    options = re2.Options()
    options.log_errors = False  # RE2 would print its parse errors to evalctl's stderr
    try:
        return re2.compile(pattern, options)
    except re2.error as exc:
        reason = exc.args[0] if exc.args else exc
        if isinstance(reason, bytes):  # RE2 says why in bytes: shown as text
            reason = reason.decode("utf-8", "replace")
        raise ValueError(str(reason)) from None


@functools.cache
def _placeholders(code: bool) -> list[tuple[Any, str, tuple[str, ...]]]:
    return [(_linear(pattern), label, clues) for pattern, label, clues in
            _PLACEHOLDER_PATTERNS + (_CODE_PLACEHOLDER_PATTERNS if code else [])]


def _folded(text: str) -> str:
    """`text` case-folded as the clues are matched: IGNORECASE also matches the dotless
    ı to i, which casefold() keeps."""
    return _compatible(text).casefold().replace("\u0131", "i")


def _compatible(text: str) -> str:
    """`text` in Unicode's compatibility form (NFKC), as Python reads identifiers: a
    `ＮｏｔＩｍｐｌｅｍｅｎｔｅｄＥｒｒｏｒ` in fullwidth letters raises NotImplementedError,
    and is matched as it."""
    return text if text.isascii() else unicodedata.normalize("NFKC", text)


def _dotted(line: str) -> str:
    """`line` with the Turkish dotless ı and dotted İ as i and I: Python's IGNORECASE
    matched them so (an agent's `ımplement this` is still a placeholder), and RE2's case
    folding, Unicode's simple one, does not. One character for one: positions hold."""
    if "\u0131" in line or "\u0130" in line:
        return line.replace("\u0131", "i").replace("\u0130", "I")
    return line


def _line_blocks(handle: BinaryIO | _DataOnly
                 ) -> Iterator[tuple[int, str, list[str | None]]]:
    """The file's lines (split on "\\n" only), read about CHUNK bytes at a time:
    (number of the first line, the block's text, its lines). A line over LINE_LIMIT
    bytes is None in the list, and a line too long to hold is skipped unread; memory
    stays bounded whatever the file."""
    number, pending = 1, b""
    while True:
        block = handle.read(CHUNK)
        data = pending + block
        cut = data.rfind(b"\n")
        if cut < 0 and (not block or len(data) > LINE_LIMIT):
            if not data:
                return
            if len(data) > LINE_LIMIT:  # the rest of this line is passed over unread
                yield number, "", [None]
                number += 1
                pending = b""
                while block:
                    block = handle.read(CHUNK)
                    if b"\n" in block:
                        pending = block[block.index(b"\n") + 1:]
                        break
                if not block:
                    return
                continue
            whole, pending = data, b""  # the last line, without its newline
        elif cut < 0:
            pending = data
            continue
        else:
            whole, pending = data[:cut], data[cut + 1:]
        text = whole.decode("utf-8", errors="replace")
        if len(whole) > LINE_LIMIT and max(map(len, whole.split(b"\n"))) > LINE_LIMIT:
            lines: list[str | None] = [
                None if len(line) > LINE_LIMIT else line.decode("utf-8", errors="replace")
                for line in whole.split(b"\n")]
        else:
            lines = list(text.split("\n"))
        yield number, text, lines
        number += len(lines)
        if not block:
            return


def _seeded_lines(path: Path) -> set[str]:
    """The lines of the seeded copy of a file, split as the agent's are."""
    try:
        with open(path, "rb") as handle:
            return {part for _, _, lines in _line_blocks(_DataOnly(handle.fileno()))
                    for line in lines if line is not None for part in _python_lines(line)}
    except OSError:
        return set()


def _python_lines(line: str) -> list[str]:
    """A line split on "\n" as Python splits it: at a lone "\r" too (a file with "\r"
    line ends hid a `...` body from a scan that split on "\n" alone, found by an
    attacker round)."""
    line = line.rstrip("\r")
    return line.split("\r") if "\r" in line else [line]


SHOWN = 10  # placeholder lines a detail lists; the rest are counted, not kept


@dataclass
class _Findings:
    hits: list[str] = field(default_factory=list)
    hit_count: int = 0
    unscanned: list[str] = field(default_factory=list)
    unscanned_count: int = 0
    bytes_read: int = 0


def _scan(relative: str, handle: BinaryIO | _DataOnly, seeded: set[str],
          found: _Findings) -> None:
    """Every placeholder line of one file, and every line too long to scan, into
    `found`. The whole file is read, a block of lines at a time, so padding cannot push
    a placeholder out of sight, and memory stays bounded."""
    is_code = Path(relative).suffix in CODE_SUFFIXES
    patterns = _placeholders(is_code)
    clues = [clue for _, _, some in patterns for clue in some]
    for first, text, lines in _line_blocks(handle):
        if None not in lines:
            folded = _folded(text)
            if not any(clue in folded for clue in clues):
                continue  # no line of this block can match
        for number, line in enumerate(lines, start=first):
            if line is None:
                found.unscanned_count += 1
                if len(found.unscanned) < SHOWN:
                    found.unscanned.append(f"{relative}:{number}")
                continue
            for part in _python_lines(line):
                if part in seeded:
                    continue  # the agent did not write this line
                probe = _dotted(_compatible(part))
                hit = next((label for pattern, label, _ in patterns if pattern.search(probe)),
                           None)
                if hit is not None:
                    found.hit_count += 1
                    if len(found.hits) < SHOWN:
                        found.hits.append(f"{relative}:{number}: {hit}: {part.strip()[:80]}")
                    break
    found.bytes_read += handle.tell()


# A coding line as Python finds it in a file's first two lines (PEP 263).
_CODING_LINE = re.compile(rb"^[ \t\f]*#.*?coding[:=][ \t]*([-\w.]+)")


def _declared_coding(relative: str, start: bytes) -> str | None:
    """The encoding a file's coding line declares, when it is one in which ASCII text
    can hide (not _ASCII_TRANSPARENT, so a scan as UTF-8 would miss what Python reads),
    or one Python does not know in a .py file; None otherwise (found by attacker rounds:
    `# -*- coding: utf-7 -*-` hid a TODO and a NotImplementedError stub, in a .py file
    and then in a script without a suffix, which Python runs all the same)."""
    # Python ends a line at "\r" too (found by an attacker round: a lone "\r" first,
    # then the coding line, which a split at "\n" took for the first line's rest).
    for line in re.split(rb"\r\n|\r|\n", start, maxsplit=2)[:2]:
        found = _CODING_LINE.match(line)
        if found is None:
            if line.strip() and not line.lstrip().startswith(b"#"):
                return None  # Python looks no further than a first line of code
            continue
        declared = found.group(1).decode("ascii", "replace")
        try:
            name = codecs.lookup(declared).name
        except LookupError:
            python = Path(relative).suffix.lower() in (".py", ".pyw", ".pyi")
            return declared[:80] if python else None  # Python would refuse that file
        return None if name in _ASCII_TRANSPARENT else name
    return None


class _DataOnly:
    """A file's bytes read from its descriptor, its holes passed over: a file of 1 GB
    that is mostly hole (`truncate -s 1G`) costs the agent nothing to make, and must not
    cost evalctl a gigabyte of reads (found by an attacker round). A hole holds no line
    break, so lines keep their numbers; only the NUL bytes in it are not read."""

    def __init__(self, fd: int):
        info = os.fstat(fd)
        self.fd, self.size, self.position, self.read_bytes = fd, info.st_size, 0, 0
        # Fewer blocks than the size needs: there are holes (a small file never counts).
        self.holes = info.st_size > CHUNK and info.st_blocks * 512 < info.st_size
        self.hole_at = 0  # where the data being read ends, when there are holes

    def read(self, size: int) -> bytes:
        while True:  # b"" is the end: a block of NULs alone is not
            raw = self._read_raw(size)
            if not raw:
                return raw
            # NUL bytes are dropped: text in UTF-16 or UTF-32 (a USAGE.md an editor shows
            # whole) then reads as its ASCII, and a NUL inside a word cannot split it
            # (found by an attacker round). No placeholder holds one.
            data = raw.replace(b"\x00", b"") if b"\x00" in raw else raw
            if data:
                return data

    def _read_raw(self, size: int) -> bytes:
        if self.holes and self.position >= self.hole_at:
            try:
                self.position = os.lseek(self.fd, self.position, os.SEEK_DATA)
                self.hole_at = os.lseek(self.fd, self.position, os.SEEK_HOLE)
            except OSError:  # ENXIO: only a hole to the end; no SEEK_DATA: read it all
                if not hasattr(os, "SEEK_DATA"):
                    self.holes = False
                else:
                    return b""
        if self.holes:
            size = min(size, self.hole_at - self.position)
        data = os.pread(self.fd, size, self.position)
        self.position += len(data)
        self.read_bytes += len(data)
        return data

    def tell(self) -> int:
        return self.read_bytes


def _more(shown: list[str], count: int) -> list[str]:
    return shown + ([f"... and {count - len(shown)} more"] if count > len(shown) else [])


def grade_no_placeholders(check: dict[str, Any], workspace: Path,
                          result: evalctl.AgentResult) -> evalctl.CheckResult:
    if result.files_changed_omitted:
        # Past its bound the record of changed files is cut: a file it does not list was
        # not read, so the agent's files are not known to be free of placeholders.
        return evalctl.CheckResult(
            False, f"not scanned for placeholders: the agent changed more files than "
                   f"evalctl lists ({result.files_changed_omitted} not listed), so its files "
                   "are not known to be free of them")
    changed = sorted(p for p, kind in result.files_changed.items() if kind != "deleted")
    found = _Findings()
    for relative in changed:
        try:
            with evalctl.open_in_workspace(workspace, relative) as handle:
                start = handle.read(8192)
                if Path(relative).suffix.lower() not in TEXT_SUFFIXES and \
                        evalctl.looks_binary(start):
                    continue
                coding = _declared_coding(relative, start)
                if coding is not None:
                    found.unscanned_count += 1
                    if len(found.unscanned) < SHOWN:
                        found.unscanned.append(f"{relative} (its coding line declares "
                                               f"{coding}: not read)")
                    continue
                seeded: set[str] = set()
                if result.seed_path is not None and (result.seed_path / relative).is_file():
                    seeded = _seeded_lines(result.seed_path / relative)
                _scan(relative, _DataOnly(handle.fileno()), seeded, found)
        except (evalctl.ConfinementError, OSError) as exc:
            if "hard link" in str(exc):
                # The agent's own file under two names (an attacker hid a TODO so): not
                # read, so not known to be clean.
                found.unscanned_count += 1
                if len(found.unscanned) < SHOWN:
                    found.unscanned.append(f"{relative} (a hard link: not read)")
            continue  # a link out, a FIFO or gone: nothing of the agent's to read
    extent = f"\n(read whole: {found.bytes_read} bytes)" if found.bytes_read > SCAN_LIMIT else ""
    placeholders = "placeholders in the agent's files:\n" + \
        "\n".join(_more(found.hits, found.hit_count)) if found.hits else ""
    if found.unscanned:
        # A line this long is not read whole, so the file is not known to be clean.
        return evalctl.CheckResult(
            False, f"not scanned for placeholders (a line over {LINE_LIMIT // 1_000_000} MB, "
                   "a hard link, or a coding line evalctl does not read), so the files are not "
                   "known to be free of them: "
                   + ", ".join(_more(found.unscanned, found.unscanned_count))
                   + (f"\n{placeholders}" if placeholders else "") + extent)
    if found.hits:
        return evalctl.CheckResult(False, placeholders + extent)
    if not changed:
        return evalctl.CheckResult(True, "the agent created or changed no files")
    return evalctl.CheckResult(True, f"no placeholders in {len(changed)} created or changed "
                                     f"file(s){extent}")


@evalctl.hookimpl
def evalctl_register_graders(register):
    register(evalctl.GraderSpec(
        name="file_exists",
        grade=grade_file_exists,
        params_schema={"type": "object", "properties": {"path": PATH}, "required": ["path"]},
        description="Is there a file at `path` in the workspace?",
        example="- type: file_exists\n  path: test_slugify.py",
        trusts="Trusts the file system after the agent stopped; the path is confined to the "
               "workspace (links that lead out are refused).",
    ))
    register(evalctl.GraderSpec(
        name="file_contains",
        grade=grade_file_contains,
        preflight=preflight_file_contains,
        validate_with_preflight=True,
        params_schema={
            "type": "object",
            "properties": {
                "path": PATH,
                "text": {"type": "string", "minLength": 1,
                         "description": "Exact text, searched for in the whole file (read "
                                        "in chunks, any size)."},
                "regex": {"type": "string", "minLength": 1,
                          "description": "A regular expression in Python's syntax without "
                                         "lookaround or backreferences (matched by RE2, in "
                                         "linear time; multiline: ^ and $ at every line, "
                                         "a line ending at \\n, \\r\\n or \\r), "
                                         "within the file's first 5 MB: a bigger file that "
                                         "does not match there fails, negated or not."},
                "negate": {"type": "boolean", "description": "Pass when it is NOT there."},
            },
            "required": ["path"],
            "oneOf": [{"required": ["text"]}, {"required": ["regex"]}],
        },
        description="Does the file at `path` contain `text` (or match `regex`)? With "
                    "`negate: true`, does it not?",
        example="- type: file_contains\n  path: config.ini\n  regex: \"^port = 9090$\"",
        trusts="Trusts the file's content after the agent stopped; the path is confined to "
               "the workspace (a symlink loop there, or links resolving to a path too long "
               "to look up, fail the check). A negated check never passes on a file it did "
               "not read whole, so padding cannot hide the text. It says nothing about "
               "whether the content works.",
    ))
    register(evalctl.GraderSpec(
        name="no_placeholders",
        grade=grade_no_placeholders,
        params_schema={"type": "object", "properties": {}},
        as_left_by_agent=True,
        description="Are the files the agent created or changed free of placeholders (TODO, "
                    "FIXME, XXX, '...' bodies, NotImplementedError stubs, 'your code here')? "
                    "Lines that were already in the seeded files are not blamed.",
        example="- type: no_placeholders",
        trusts="Trusts evalctl's record of which files the agent created or changed (hashes "
               "taken in evalctl's process) and the seed copy, which evalctl checks against "
               "what it seeded before grading. It reads them as the agent left them: it is "
               "graded before the task's other checks, wherever it is listed, and before its "
               "hidden verify files are written. Every file is "
               "read whole, 1 MB of lines at a time (padding cannot hide a placeholder); a "
               "line over 1 MB is not scanned, and fails the check, since its file is then not"
               " known to be clean, and so does a hard-linked file (another name for it could "
               "hide one), which is not read; and so does a record of changed files that was "
               "cut at its bound (10,000 entries), since the files it does not list are not "
               "read; and so does a file whose coding line (as Python reads one, in a .py "
               "file or a script without a suffix) declares an encoding in which ASCII text "
               "can hide (UTF-7), which is not read. Lines end at \"\\n\" and, as Python "
               "ends them, at a lone \"\\r\"; NUL bytes are dropped (UTF-16 text reads as "
               "its ASCII), and a file's holes (a sparse file's) are passed over, not read. "
               "A file is skipped only when it is "
               "binary (a NUL in its first 8 KiB and either not UTF-8 or over 10% control "
               "bytes) and its name does not say it is source or text (.py, .c, .md, .txt "
               "and the like are scanned whatever bytes they hold), or when it is not the "
               "agent's to read: a link out of the workspace, a FIFO or a device.",
    ))
