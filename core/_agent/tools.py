"""The six tools, confined to the workspace.

Every failure is a ToolOutcome with is_error=True that the model sees and can act
on; nothing a model asks for raises out of here.

The workspace is the agent's, and so are the patterns: no tool does unbounded work.
Directories are walked without recursion and with a cap on entries; FIFOs, sockets
and devices are never opened; big files are skipped or read in bounded pieces; and
grep's regular expressions run on RE2, whose matching is linear in the input, so no
pattern can backtrack for ever (Python's `re` holds the interpreter while it does, so
not even the task's time limit could fire).
"""

from __future__ import annotations

import asyncio
import fnmatch
import functools
import io
import os
import stat
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evalctl._blocking import off_loop
from evalctl._errors import describe_crash, stops_the_run
from evalctl._files import ConfinementError, open_confined, walk
from evalctl._plugin.tooldefs import (
    BASH_DEFAULT_TIMEOUT,
    EDIT_MAX_FILE_BYTES,
    GLOB_MAX_PARTS,
    GLOB_MAX_RESULTS,
    GLOB_MAX_STEPS,
    GREP_LINE_LIMIT,
    GREP_MAX_MATCHES,
    LINE_LIMIT,
    READ_DEFAULT_LINES,
    READ_MAX_BYTES,
    SEARCH_MAX_FILE_BYTES,
    SEARCH_MAX_LINES,
    SEARCH_MAX_SECONDS,
    SEARCH_MAX_TOTAL_BYTES,
    SEARCH_PROGRAM_BYTES,
    TOOL_DEFINITIONS,
    UNUSABLE_ARGUMENTS,
    WALK_MAX_ENTRIES,
    WRITING_TOOLS,
)
from evalctl._plugin.types import Sandbox
from evalctl._process import OUTPUT_LIMIT
from evalctl._schema_check import SchemaCheck
from evalctl._text import BINARY_SAMPLE_BYTES, escape_surrogates, looks_binary, truncate
from evalctl._workspace import Workspace

_WILDCARDS = frozenset("*?[")


@dataclass(frozen=True)
class ToolOutcome:
    content: str
    is_error: bool = False
    denied: bool = False


def _error(message: str) -> ToolOutcome:
    return ToolOutcome(message, is_error=True)


def _shown(relative: str) -> str:
    """A workspace path as the model and the ledger see it: a name that is not UTF-8
    with its bytes escaped (\\xNN), so the text can always be sent and recorded."""
    return escape_surrogates(relative)


@dataclass
class _Walk:
    """The paths under a directory, matching a glob, at most WALK_MAX_ENTRIES looked at."""

    base: Path
    pattern: str | None = None
    cut_short: bool = False

    def __iter__(self) -> Iterator[Path]:
        parts = glob_parts(self.pattern or "**")
        # Literal leading parts name a directory: start there instead of walking it all.
        fixed = 0
        while fixed < len(parts) - 1 and not _WILDCARDS & set(parts[fixed]) and \
                parts[fixed] != "**":
            fixed += 1
        start = self.base.joinpath(*parts[:fixed])
        try:
            if not start.resolve().is_relative_to(self.base.resolve()):
                return  # a link that leads out: nothing there is the workspace's
        except (RuntimeError, OSError):  # a loop of links (3.11 raises RuntimeError)
            return
        rest = parts[fixed:]
        depth = None if "**" in rest else len(rest)
        matches = _glob_matcher(rest)
        steps = 0
        deadline = time.monotonic() + SEARCH_MAX_SECONDS
        for seen, (relative, entry) in enumerate(walk(start, max_depth=depth), start=1):
            names = relative.split("/")
            # The matcher's work is the pattern's parts times the path's names: a deep
            # tree can make that large where the count of paths is not; and a part can
            # be costly to match (fnmatch's), which the clock bounds.
            steps += len(rest) * (len(names) + 1)
            if seen > WALK_MAX_ENTRIES or steps > GLOB_MAX_STEPS or (
                    seen % 256 == 0 and time.monotonic() > deadline):
                self.cut_short = True
                return
            if matches(names):
                yield Path(entry.path)


def glob_parts(pattern: str) -> list[str]:
    """A glob's parts, without empty and '.' parts, a run of `**` as one (`**/**` means
    what `**` means, and each more would multiply the matcher's work)."""
    parts: list[str] = []
    for part in pattern.split("/"):
        if part in ("", ".") or (part == "**" and parts and parts[-1] == "**"):
            continue
        parts.append(part)
    return parts


def _glob_refused(tool: str, pattern: str) -> ToolOutcome | None:
    if len(glob_parts(pattern)) > GLOB_MAX_PARTS:
        return _error(f"{tool}: the glob has more than {GLOB_MAX_PARTS} parts; shorten it")
    return None


def _glob_matcher(parts: list[str]) -> Callable[[list[str]], bool]:
    """Whether a path's parts match glob parts, `**` standing for any number of
    directories. Dynamic programming over the parts: linear in their product, never
    recursive."""
    def matches(names: list[str]) -> bool:
        # reachable[j]: the pattern parts consumed so far can match names[:j]
        reachable = [True] + [False] * len(names)
        for part in parts:
            following = [False] * (len(names) + 1)
            if part == "**":
                for j in range(len(names) + 1):
                    following[j] = reachable[j] or (j > 0 and following[j - 1])
            else:
                for j in range(1, len(names) + 1):
                    following[j] = reachable[j - 1] and fnmatch.fnmatchcase(names[j - 1], part)
            reachable = following
        return reachable[len(names)]
    return matches


def _regular(path: Path, follow: bool = True) -> bool:
    """Whether `path` (links followed, unless `follow` is False) is a regular file: the
    only kind a tool opens."""
    try:
        return stat.S_ISREG(path.stat(follow_symlinks=follow).st_mode)
    except OSError:
        return False


def _compile_search(pattern: str) -> Any:
    """The pattern compiled by RE2 (linear-time matching), or a message saying why not."""
    import re2  # google-re2; imported on first use, not when evalctl loads

    options = re2.Options()
    options.log_errors = False  # RE2 would print parse errors to evalctl's stderr
    # RE2 is linear in the text, times the size of the pattern's program when its DFA
    # gives up: `a(.{1000}){4}c` is about 17 µs a byte. A small budget keeps that factor
    # small; the search's clock (SEARCH_MAX_SECONDS) bounds the rest.
    options.max_mem = SEARCH_PROGRAM_BYTES
    try:
        return re2.compile(pattern, options)
    except re2.error as exc:
        reason = exc.args[0] if exc.args else exc
        if isinstance(reason, bytes):
            reason = reason.decode("utf-8", errors="replace")
        return (f"grep: invalid regular expression: {reason} (grep uses RE2 syntax, which "
                "matches in linear time: no lookaround and no backreferences)")


# What _bounded_lines yields last when it stopped at its budget, not at the end.
READ_CUT = object()


def _bounded_lines(handle: Any) -> Any:
    """The file's lines without their endings, each cut at LINE_LIMIT characters, reading
    at most that much at a time: a file that is one enormous line cannot flood memory.
    At most READ_MAX_BYTES characters are read (a sparse file of a terabyte is a terabyte
    to read): past it, READ_CUT is yielded and no more."""
    left = READ_MAX_BYTES
    while True:
        piece = handle.readline(LINE_LIMIT + 1)
        if not piece:
            return
        left -= len(piece)
        if piece.endswith("\n") or len(piece) <= LINE_LIMIT:
            yield piece.rstrip("\n")
        else:
            while left > 0:  # skip the rest of an over-long line
                rest = handle.readline(1 << 16)
                left -= len(rest)
                if not rest or rest.endswith("\n"):
                    break
            yield piece[:LINE_LIMIT] + f" [... line cut at {LINE_LIMIT} characters]"
        if left <= 0:
            yield READ_CUT
            return


def _looks_binary(handle: Any) -> bool:
    """Whether an open binary file is binary by evalctl's rule; rewinds it."""
    sample = handle.read(BINARY_SAMPLE_BYTES)
    handle.seek(0)
    return looks_binary(sample)


@functools.cache
def tool_validators() -> dict[str, SchemaCheck]:
    """A JSON Schema check per tool, compiled once per process."""
    return {t.name: SchemaCheck(t.input_schema) for t in TOOL_DEFINITIONS}


class Toolbox:
    """The six tools bound to one workspace and one permission level."""

    def __init__(self, workspace: Workspace, sandbox: Sandbox, permissions: str = "full"):
        self.workspace = workspace
        self.sandbox = sandbox
        self.permissions = permissions
        self._validators = tool_validators()
        # The file tools run in evalctl's pool of blocking work, one call at a time for
        # an attempt: a turn of many calls cannot take many threads from other attempts.
        self._in_pool = asyncio.Lock()

    async def call(self, name: str, arguments: Any) -> ToolOutcome:
        validator = self._validators.get(name)
        if validator is None:
            return _error(f"unknown tool {name!r}; available: {', '.join(self._validators)}")
        if not isinstance(arguments, Mapping):
            return _error(f"{name}: arguments must be an object")
        if UNUSABLE_ARGUMENTS in arguments:  # set by usable_turn, in place of the model's
            return _error(f"{name}: the arguments cannot be used: "
                          f"{arguments[UNUSABLE_ARGUMENTS]}")
        problems = validator.errors(dict(arguments))
        if problems:
            return _error(f"{name}: invalid arguments: " + "; ".join(e.message for e in problems))
        if self.permissions == "read-only" and name in WRITING_TOOLS:
            return ToolOutcome(
                f"permission denied: this task is read-only, so {name} is not allowed. "
                "read_file, glob and grep still work.", is_error=True, denied=True)
        try:
            if name == "bash":
                outcome = await self.bash(**arguments)
            else:
                async with self._in_pool:
                    outcome = await off_loop(getattr(self, name), **arguments)
        except ConfinementError as exc:
            outcome = _error(f"{name}: {exc}")
        except OSError as exc:
            outcome = _error(f"{name}: {exc.strerror or exc}: {arguments.get('path', '')}")
        except UnicodeError as exc:  # a lone surrogate in a path or a file's new content
            outcome = _error(f"{name}: cannot be written as UTF-8: {exc}")
        except BaseException as exc:
            # Whatever else a call raises is the call's failure, said to the model: an
            # attempt must never end in evalctl's own error (and out of the score)
            # because of arguments the model chose (a loop of links, a NUL byte, ...);
            # a sandbox plugin's SystemExit too. Only the run's own stop goes on up.
            if stops_the_run(exc):
                raise
            outcome = _error(f"{name}: failed: {describe_crash(exc)}")
        # Whatever it holds (a name that is not UTF-8, say), the outcome can be sent on.
        return ToolOutcome(escape_surrogates(outcome.content), outcome.is_error,
                           outcome.denied)

    # -- files --------------------------------------------------------------------

    def _open(self, path: str, mode: str = "r") -> Any:
        """A file of the workspace, opened with resolve-beneath semantics (see
        evalctl._files.open_confined): never through a link out, never a FIFO, device or
        hard link."""
        return os.fdopen(open_confined(self.workspace.root, path, write="w" in mode),
                         "wb" if "w" in mode else "rb")

    def read_file(self, path: str, offset: int = 1, limit: int = READ_DEFAULT_LINES) -> ToolOutcome:
        target = self.workspace.resolve(path)
        if not target.exists():
            return _error(f"read_file: {path} does not exist")
        if target.is_dir():
            return _error(f"read_file: {path} is a directory; use glob to list it")
        lines: list[str] = []
        more = False
        with self._open(path) as raw:
            size = os.fstat(raw.fileno()).st_size
            if _looks_binary(raw):
                return _error(f"read_file: {path} is a binary file ({size} bytes); not shown")
            handle = io.TextIOWrapper(raw, encoding="utf-8", errors="replace")
            cut = False
            for number, line in enumerate(_bounded_lines(handle), start=1):
                if line is READ_CUT:
                    cut = True
                    break
                if number < offset:
                    continue
                if len(lines) >= limit:
                    more = True
                    break
                lines.append(f"{number:>6}\t{line}")
        stopped = (f"\n[stopped after reading {READ_MAX_BYTES / 1_000_000:g} MB of the "
                   "file; the rest is not read]") if cut else ""
        if not lines:
            return ToolOutcome((f"{path} is empty" if size == 0 else
                                f"{path} has fewer than {offset} lines") + stopped)
        text = "\n".join(lines)
        if more:
            text += f"\n[more lines follow; continue with offset={offset + len(lines)}]"
        text += stopped
        return ToolOutcome(truncate(text, OUTPUT_LIMIT))

    def write_file(self, path: str, content: str) -> ToolOutcome:
        target = self.workspace.resolve(path)
        if target.is_dir():
            return _error(f"write_file: {path} is a directory")
        data = content.encode("utf-8", errors="surrogateescape")  # before the file is emptied
        with self._open(path, "w") as raw:
            raw.write(data)
        return ToolOutcome(f"wrote {len(content)} characters to {path}")

    def edit_file(self, path: str, old_text: str, new_text: str,
                  replace_all: bool = False) -> ToolOutcome:
        target = self.workspace.resolve(path)
        if not target.exists() or target.is_dir():
            return _error(f"edit_file: {path} does not exist")
        with self._open(path) as raw:
            if os.fstat(raw.fileno()).st_size > EDIT_MAX_FILE_BYTES:
                return _error(f"edit_file: {path} is over {EDIT_MAX_FILE_BYTES // 1_000_000} "
                              "MB; edit it with a bash command (sed, say) instead")
            if _looks_binary(raw):
                return _error(f"edit_file: {path} is a binary file")
            text = raw.read().decode("utf-8", errors="surrogateescape")
        count = text.count(old_text)
        if count == 0:
            return _error(f"edit_file: old_text not found in {path}; read the file and copy "
                          "the text exactly, including whitespace")
        if count > 1 and not replace_all:
            return _error(f"edit_file: old_text appears {count} times in {path}; include more "
                          "surrounding text to make it unique, or set replace_all")
        replaced = count if replace_all else 1
        if len(text) + replaced * (len(new_text) - len(old_text)) > EDIT_MAX_FILE_BYTES:
            return _error(f"edit_file: the edit would make {path} larger than "
                          f"{EDIT_MAX_FILE_BYTES // 1_000_000} MB")
        data = text.replace(old_text, new_text).encode("utf-8", errors="surrogateescape")
        with self._open(path, "w") as raw:  # emptied only once the new text can be written
            raw.write(data)
        return ToolOutcome(f"replaced {count if replace_all else 1} occurrence(s) in {path}")

    def glob(self, pattern: str) -> ToolOutcome:
        if pattern.startswith("/") or ".." in Path(pattern).parts:
            return _error("glob: the pattern must be relative to the workspace, without '..'")
        refused = _glob_refused("glob", pattern)
        if refused is not None:
            return refused
        root = self.workspace.root
        found = _Walk(root, pattern)
        matches = []
        for path in found:
            # Confined first, then looked at: a stat of the path as found would follow a
            # link out of the workspace, and say whether a host file is a regular one
            # (to an agent that swaps the link before the check, found by an attacker).
            try:
                resolved = self.workspace.resolve(str(path))
            except ConfinementError:
                continue
            if not _regular(resolved, follow=False):
                continue
            matches.append(_shown(path.relative_to(root).as_posix()))
        matches.sort()
        cut = ("\n[stopped after looking at part of the workspace (at most "
               f"{WALK_MAX_ENTRIES} paths, and no deeper than the pattern can be matched "
               "quickly); narrow the pattern]" if found.cut_short else "")
        if not matches:
            return ToolOutcome(f"no files match {pattern}{cut}")
        shown = matches[:GLOB_MAX_RESULTS]
        text = "\n".join(shown)
        if len(matches) > len(shown):
            text += f"\n[{len(matches) - len(shown)} more not shown; narrow the pattern]"
        return ToolOutcome(text + cut)

    def grep(self, pattern: str, path: str | None = None, glob: str | None = None) -> ToolOutcome:
        regex = _compile_search(pattern)
        if isinstance(regex, str):
            return _error(regex)
        root = self.workspace.root
        walked: _Walk | None = None
        candidates: Any
        if glob is not None:
            if glob.startswith("/") or ".." in Path(glob).parts:
                return _error("grep: the glob must be relative to the workspace, without '..'")
            refused = _glob_refused("grep", glob)
            if refused is not None:
                return refused
            walked = _Walk(self.workspace.resolve(path) if path else root, glob)
            candidates = walked
        elif path:
            base = self.workspace.resolve(path)
            if not base.exists():
                return _error(f"grep: {path} does not exist")
            walked = _Walk(base) if base.is_dir() else None
            candidates = walked if walked is not None else [base]
        else:
            walked = _Walk(root)
            candidates = walked
        matches: list[str] = []
        total = 0
        read = 0
        lines_left = SEARCH_MAX_LINES  # 200 MB of two-byte lines is 100 million Python steps
        cut_lines: str | None = None
        deadline = time.monotonic() + SEARCH_MAX_SECONDS
        out_of_time: str | None = None
        skipped: list[str] = []
        unread: list[str] = []
        real_root = root.resolve()
        for candidate in candidates:
            try:
                candidate = self.workspace.resolve(str(candidate))
            except ConfinementError:
                continue
            if not _regular(candidate):
                continue  # directories, and FIFOs or devices that must not be opened
            relative = candidate.relative_to(real_root).as_posix()
            try:
                raw = self._open(relative)
            except ConfinementError:
                skipped.append(_shown(relative))
                continue
            with raw:
                size = os.fstat(raw.fileno()).st_size
                if size > SEARCH_MAX_FILE_BYTES or _looks_binary(raw):
                    skipped.append(_shown(relative))
                    continue
                if read + size > SEARCH_MAX_TOTAL_BYTES or lines_left <= 0 or out_of_time:
                    unread.append(_shown(relative))
                    continue
                read += size
                handle = io.TextIOWrapper(raw, encoding="utf-8", errors="replace")
                for number, line in enumerate(handle, start=1):
                    lines_left -= 1
                    if lines_left < 0:
                        cut_lines = _shown(relative)
                        break
                    if number % 1024 == 0 and time.monotonic() > deadline:
                        out_of_time = f"{_shown(relative)}:{number}"
                        break
                    line = line.rstrip("\r\n")  # RE2's $ is the end of the text alone
                    if regex.search(line):
                        total += 1
                        if len(matches) < GREP_MAX_MATCHES:
                            matches.append(f"{_shown(relative)}:{number}:"
                                           f"{line.rstrip()[:GREP_LINE_LIMIT]}")
        note = (f"\n[not searched, binary or over {SEARCH_MAX_FILE_BYTES // 1_000_000} MB: "
                f"{', '.join(skipped[:10])}{' ...' if len(skipped) > 10 else ''}]"
                if skipped else "")
        if out_of_time is not None:
            note += (f"\n[stopped at {out_of_time} after {SEARCH_MAX_SECONDS} s of searching; "
                     "narrow the search or simplify the pattern]")
        if cut_lines is not None:
            note += (f"\n[stopped in {cut_lines} after {SEARCH_MAX_LINES:,} lines searched in "
                     "all; narrow the search with path or glob]")
        if unread:
            note += (f"\n[not searched, over {SEARCH_MAX_TOTAL_BYTES // 1_000_000} MB or "
                     f"{SEARCH_MAX_LINES:,} lines read in all: {len(unread)} file(s); narrow "
                     "the search with path or glob]")
        if walked is not None and walked.cut_short:
            note += ("\n[stopped after looking at part of the workspace (at most "
                     f"{WALK_MAX_ENTRIES} paths, and no deeper than the glob can be matched "
                     "quickly); narrow the search]")
        if not matches:
            return ToolOutcome(f"no matches for {pattern}{note}")
        text = "\n".join(matches)
        if total > len(matches):
            text += f"\n[{total - len(matches)} more matches not shown; narrow the search]"
        return ToolOutcome(text + note)

    # -- bash ---------------------------------------------------------------------

    async def bash(self, command: str, timeout: float = BASH_DEFAULT_TIMEOUT) -> ToolOutcome:
        if "\x00" in command:
            return _error("bash: the command contains a NUL byte, which no program can be given")
        ran = await self.sandbox.run(command, timeout=timeout, merge_stderr=True,
                                     output_limit=OUTPUT_LIMIT)
        code, output, timed_out = ran.exit_code, ran.stdout, ran.timed_out
        if timed_out:
            return _error(f"timed out after {timeout:g}s; the command and its children were "
                          f"killed\n{output}".rstrip())
        header = f"exit code {code}"
        return ToolOutcome(f"{header}\n{output}".rstrip(), is_error=code != 0)
