"""The six tools, confined to the workspace.

Every failure is a ToolOutcome with is_error=True that the model sees and can act
on; nothing a model asks for raises out of here.
"""

from __future__ import annotations

import asyncio
import functools
import io
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evalctl._files import IGNORED_DIRS, ConfinementError, open_confined
from evalctl._plugin.tooldefs import (
    BASH_DEFAULT_TIMEOUT,
    EDIT_MAX_FILE_BYTES,
    GLOB_MAX_RESULTS,
    GREP_LINE_LIMIT,
    GREP_MAX_MATCHES,
    LINE_LIMIT,
    READ_DEFAULT_LINES,
    SEARCH_MAX_FILE_BYTES,
    TOOL_DEFINITIONS,
    WRITING_TOOLS,
)
from evalctl._plugin.types import Sandbox
from evalctl._process import OUTPUT_LIMIT
from evalctl._text import BINARY_SAMPLE_BYTES, looks_binary, truncate
from evalctl._workspace import Workspace


@dataclass(frozen=True)
class ToolOutcome:
    content: str
    is_error: bool = False
    denied: bool = False


def _error(message: str) -> ToolOutcome:
    return ToolOutcome(message, is_error=True)


def _walk_files(base: Path) -> list[Path]:
    found = []
    for directory, subdirs, names in os.walk(base):
        subdirs[:] = sorted(d for d in subdirs if d not in IGNORED_DIRS)
        found.extend(Path(directory, name) for name in sorted(names))
    return found


def _bounded_lines(handle: Any) -> Any:
    """The file's lines without their endings, each cut at LINE_LIMIT characters, reading
    at most that much at a time: a file that is one enormous line cannot flood memory."""
    while True:
        piece = handle.readline(LINE_LIMIT + 1)
        if not piece:
            return
        if piece.endswith("\n") or len(piece) <= LINE_LIMIT:
            yield piece.rstrip("\n")
            continue
        while True:  # skip the rest of an over-long line
            rest = handle.readline(1 << 16)
            if not rest or rest.endswith("\n"):
                break
        yield piece[:LINE_LIMIT] + f" [... line cut at {LINE_LIMIT} characters]"


def _looks_binary(handle: Any) -> bool:
    """Whether an open binary file is binary by evalctl's rule; rewinds it."""
    sample = handle.read(BINARY_SAMPLE_BYTES)
    handle.seek(0)
    return looks_binary(sample)


@functools.cache
def tool_validators() -> dict[str, Any]:
    """A JSON Schema validator per tool, built once per process."""
    from jsonschema import Draft202012Validator

    return {t.name: Draft202012Validator(t.input_schema) for t in TOOL_DEFINITIONS}


class Toolbox:
    """The six tools bound to one workspace and one permission level."""

    def __init__(self, workspace: Workspace, sandbox: Sandbox, permissions: str = "full"):
        self.workspace = workspace
        self.sandbox = sandbox
        self.permissions = permissions
        self._validators = tool_validators()

    async def call(self, name: str, arguments: Any) -> ToolOutcome:
        validator = self._validators.get(name)
        if validator is None:
            return _error(f"unknown tool {name!r}; available: {', '.join(self._validators)}")
        if not isinstance(arguments, Mapping):
            return _error(f"{name}: arguments must be an object")
        problems = sorted(validator.iter_errors(dict(arguments)), key=lambda e: list(e.path))
        if problems:
            return _error(f"{name}: invalid arguments: " + "; ".join(e.message for e in problems))
        if self.permissions == "read-only" and name in WRITING_TOOLS:
            return ToolOutcome(
                f"permission denied: this task is read-only, so {name} is not allowed. "
                "read_file, glob and grep still work.", is_error=True, denied=True)
        try:
            if name == "bash":
                return await self.bash(**arguments)
            return await asyncio.to_thread(getattr(self, name), **arguments)
        except ConfinementError as exc:
            return _error(f"{name}: {exc}")
        except OSError as exc:
            return _error(f"{name}: {exc.strerror or exc}: {arguments.get('path', '')}")

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
            for number, line in enumerate(_bounded_lines(handle), start=1):
                if number < offset:
                    continue
                if len(lines) >= limit:
                    more = True
                    break
                lines.append(f"{number:>6}\t{line}")
        if not lines:
            return ToolOutcome(f"{path} is empty" if size == 0 else
                               f"{path} has fewer than {offset} lines")
        text = "\n".join(lines)
        if more:
            text += f"\n[more lines follow; continue with offset={offset + len(lines)}]"
        return ToolOutcome(truncate(text, OUTPUT_LIMIT))

    def write_file(self, path: str, content: str) -> ToolOutcome:
        target = self.workspace.resolve(path)
        if target.is_dir():
            return _error(f"write_file: {path} is a directory")
        with self._open(path, "w") as raw:
            raw.write(content.encode("utf-8", errors="surrogateescape"))
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
        with self._open(path, "w") as raw:
            raw.write(text.replace(old_text, new_text).encode("utf-8", errors="surrogateescape"))
        return ToolOutcome(f"replaced {count if replace_all else 1} occurrence(s) in {path}")

    def glob(self, pattern: str) -> ToolOutcome:
        if pattern.startswith("/") or ".." in Path(pattern).parts:
            return _error("glob: the pattern must be relative to the workspace, without '..'")
        root = self.workspace.root
        matches = []
        for found in root.glob(pattern):
            if not found.is_file() or any(p in IGNORED_DIRS for p in found.parts):
                continue
            try:
                self.workspace.resolve(str(found))
            except ConfinementError:
                continue
            matches.append(found.relative_to(root).as_posix())
        matches.sort()
        if not matches:
            return ToolOutcome(f"no files match {pattern}")
        shown = matches[:GLOB_MAX_RESULTS]
        text = "\n".join(shown)
        if len(matches) > len(shown):
            text += f"\n[{len(matches) - len(shown)} more not shown; narrow the pattern]"
        return ToolOutcome(text)

    def grep(self, pattern: str, path: str | None = None, glob: str | None = None) -> ToolOutcome:
        try:
            regex = re.compile(pattern)
        except re.error as exc:
            return _error(f"grep: invalid regular expression: {exc}")
        root = self.workspace.root
        if glob is not None:
            if glob.startswith("/") or ".." in Path(glob).parts:
                return _error("grep: the glob must be relative to the workspace, without '..'")
            base = self.workspace.resolve(path) if path else root
            candidates = sorted(base.glob(glob))
        elif path:
            base = self.workspace.resolve(path)
            if not base.exists():
                return _error(f"grep: {path} does not exist")
            candidates = [base] if base.is_file() else _walk_files(base)
        else:
            candidates = _walk_files(root)
        matches: list[str] = []
        total = 0
        skipped: list[str] = []
        for candidate in candidates:
            try:
                candidate = self.workspace.resolve(str(candidate))
            except ConfinementError:
                continue
            if not candidate.is_file():
                continue
            relative = candidate.relative_to(root.resolve()).as_posix()
            try:
                raw = self._open(relative)
            except ConfinementError:
                skipped.append(relative)
                continue
            with raw:
                if os.fstat(raw.fileno()).st_size > SEARCH_MAX_FILE_BYTES or _looks_binary(raw):
                    skipped.append(relative)
                    continue
                handle = io.TextIOWrapper(raw, encoding="utf-8", errors="replace")
                for number, line in enumerate(handle, start=1):
                    if regex.search(line):
                        total += 1
                        if len(matches) < GREP_MAX_MATCHES:
                            matches.append(f"{relative}:{number}:"
                                           f"{line.rstrip()[:GREP_LINE_LIMIT]}")
        note = (f"\n[not searched, binary or over {SEARCH_MAX_FILE_BYTES // 1_000_000} MB: "
                f"{', '.join(skipped[:10])}{' ...' if len(skipped) > 10 else ''}]"
                if skipped else "")
        if not matches:
            return ToolOutcome(f"no matches for {pattern}{note}")
        text = "\n".join(matches)
        if total > len(matches):
            text += f"\n[{total - len(matches)} more matches not shown; narrow the search]"
        return ToolOutcome(text + note)

    # -- bash ---------------------------------------------------------------------

    async def bash(self, command: str, timeout: float = BASH_DEFAULT_TIMEOUT) -> ToolOutcome:
        ran = await self.sandbox.run(command, timeout=timeout, merge_stderr=True,
                                     output_limit=OUTPUT_LIMIT)
        code, output, timed_out = ran.exit_code, ran.stdout, ran.timed_out
        if timed_out:
            return _error(f"timed out after {timeout:g}s; the command and its children were "
                          f"killed\n{output}".rstrip())
        header = f"exit code {code}"
        return ToolOutcome(f"{header}\n{output}".rstrip(), is_error=code != 0)
