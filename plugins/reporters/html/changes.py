"""What the agent left in its workspace, against the seed copy evalctl kept beside it
(`<run>/.seed/<attempt>/`), as unified diffs for the HTML report.

The workspace is the agent's and untrusted: links are never followed, special files
(FIFOs, sockets, devices) are listed but never opened, big files are compared but not
shown, and the walk and the diffs are capped, so a hostile or enormous workspace cannot
stall or bloat the report.

The workspace as left holds more than the agent's work: evalctl wrote the task's verify
files (`verify_files`, `verify_patch`) there after the agent stopped, and the checks ran
there. Given what evalctl measured the agent changed (its ledger's `task_end`), a change
that is not among those is marked `after` and shown apart, never as the agent's.
"""

from __future__ import annotations

import difflib
import filecmp
import itertools
import os
import stat
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import evalctl

# What evalctl's own change tracking ignores (evalctl._files.IGNORED_DIRS): the caches
# tools write as a side effect, and a repository's metadata. A git source's workspace
# holds a .git the seed copy has not (it is seeded without one), so every object, ref
# and index file in it read as created after the agent, compressed objects shown as
# text diffs of garbage (found by a newcomer on the built-in realrepo suite).
IGNORED_DIRS = frozenset({"__pycache__", ".pytest_cache", ".mypy_cache", ".ruff_cache", ".git"})
MAX_ENTRIES = 20_000  # entries walked per tree
MAX_FILES_SHOWN = 200  # changed files listed per attempt
MAX_DIFF_BYTES = 256_000  # files larger than this are compared, not shown
MAX_DIFF_LINES = 400  # lines of one file's diff
TASK_BUDGET = 150_000  # characters of diff per attempt


@dataclass
class Changes:
    """The changed files (each `path`, `change`, a `diff` or a `note`, and `after` when
    made after the agent stopped), a `problem` when the comparison is missing or
    incomplete, and an `unattributed` note when the agent's changes could not be told
    from what came after it."""

    files: list[dict[str, Any]] = field(default_factory=list)
    problem: str | None = None
    unattributed: str | None = None


@dataclass(frozen=True)
class _Entry:
    kind: str  # file, link, special
    size: int = 0
    target: str = ""


def seed_of(workspace: str | Path) -> Path:
    """Where evalctl keeps the pristine copy of an attempt's seeded files."""
    workspace = Path(workspace)
    return workspace.parent / ".seed" / workspace.name


def _display(relative: str) -> str:
    """A file name as text: bytes that are not UTF-8 shown as U+FFFD, never a crash."""
    return os.fsencode(relative).decode("utf-8", "replace")


def _walk(root: Path) -> tuple[dict[str, _Entry], bool]:
    """Relative path -> entry for everything under root, without following links;
    True as the second value when the walk stopped at MAX_ENTRIES."""
    found: dict[str, _Entry] = {}
    pending = [""]
    cut = False
    while pending:
        relative_dir = pending.pop()
        directory = root / relative_dir if relative_dir else root
        try:
            # Names, not DirEntries (each holds its whole path), and no more than the
            # walk can still take: the agent decides how many a directory holds (found by
            # an attacker round: 300,000 names under 3,900-byte paths).
            room = MAX_ENTRIES - len(found)
            with os.scandir(directory) as entries:
                names = sorted(itertools.islice((e.name for e in entries), room + 1))
        except OSError:
            continue
        if len(names) > room:  # more than the walk can take: it stops in this one
            cut = True
            names = names[:room]
        for name in names:
            relative = f"{relative_dir}/{name}" if relative_dir else name
            path = os.path.join(directory, name)
            try:
                info = os.lstat(path)
                if stat.S_ISLNK(info.st_mode):
                    found[relative] = _Entry("link", target=os.readlink(path))
                elif stat.S_ISDIR(info.st_mode):
                    if name not in IGNORED_DIRS:
                        pending.append(relative)
                    continue
                elif stat.S_ISREG(info.st_mode):
                    found[relative] = _Entry("file", info.st_size)
                else:
                    found[relative] = _Entry("special")
            except OSError:
                continue
            if len(found) >= MAX_ENTRIES:
                return found, True
        if cut:
            return found, True
    return found, False


def _read_text(path: Path, size: int) -> str | None:
    """A file's text for a diff, or None when it is binary, not UTF-8 or too large to
    show: bytes that are not UTF-8 are never shown as text (compressed data holds no
    NUL byte often enough to pass `looks_binary`, and read as a diff of U+FFFD)."""
    if size > MAX_DIFF_BYTES:
        return None
    try:  # at most the limit, whatever the file holds by now: never the whole of it
        with open(path, "rb") as handle:
            data = handle.read(MAX_DIFF_BYTES + 1)
    except OSError:
        return None
    if len(data) > MAX_DIFF_BYTES:
        return None
    if evalctl.looks_binary(data):
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def _diff(name: str, before: str, after: str) -> str:
    lines = list(difflib.unified_diff(before.splitlines(), after.splitlines(),
                                      f"seed/{name}", f"workspace/{name}", lineterm=""))
    if len(lines) > MAX_DIFF_LINES:
        lines = lines[:MAX_DIFF_LINES] + [f"[... {len(lines) - MAX_DIFF_LINES} more diff lines "
                                          "not shown; the file is in the workspace ...]"]
    return "\n".join(lines)


def _describe(entry: _Entry | None) -> str:
    if entry is None:
        return "nothing"
    if entry.kind == "link":
        return f"a link to {_display(entry.target)}"
    if entry.kind == "special":
        return "a special file (FIFO, socket or device; not opened)"
    return f"{entry.size:,} bytes"


def _changed(seed: Path, workspace: Path, relative: str, before: _Entry | None,
             after: _Entry | None) -> dict[str, Any] | None:
    """One file's change, or None when it did not change."""
    name = _display(relative)
    change = "created" if before is None else "deleted" if after is None else "modified"
    if before is not None and after is not None and before == after and before.kind == "file":
        try:
            if filecmp.cmp(seed / relative, workspace / relative, shallow=False):
                return None
        except OSError:
            return {"path": name, "change": change, "note": "could not be read"}
    elif before is not None and before == after:
        return None  # the same link target
    if (before is None or before.kind == "file") and (after is None or after.kind == "file"):
        old = "" if before is None else _read_text(seed / relative, before.size)
        new = "" if after is None else _read_text(workspace / relative, after.size)
        if old is not None and new is not None:
            return {"path": name, "change": change, "diff": _diff(name, old, new)}
        return {"path": name, "change": change,
                "note": f"binary, not UTF-8, or larger than {MAX_DIFF_BYTES:,} bytes: "
                        f"{_describe(before)} before, {_describe(after)} now"}
    return {"path": name, "change": change,
            "note": f"{_describe(before)} before, {_describe(after)} now"}


def workspace_changes(workspace: str | Path | None,
                      agent_changed: Mapping[str, str] | None = None,
                      omitted: int = 0) -> Changes:
    """The attempt's changes against its seed copy, capped as the module says. With
    `agent_changed` (what evalctl measured the agent changed, by relative path), every
    other change is marked `"after": True`: made after the agent stopped (verify files,
    the checks), not by it. Without it, or when that record was cut at its bound
    (`omitted` changes not listed), `unattributed` says the two cannot be told apart."""
    if omitted:
        agent_changed = None
    if not workspace:
        return Changes(problem="no workspace was recorded for this attempt")
    root, seed = Path(workspace), seed_of(workspace)
    if not root.is_dir():
        return Changes(problem=f"the workspace {workspace} is gone")
    if not seed.is_dir():
        return Changes(problem=f"no seed copy at {seed} to compare against")
    before, seed_capped = _walk(seed)
    after, workspace_capped = _walk(root)
    changes = Changes()
    if seed_capped or workspace_capped:
        changes.problem = f"more than {MAX_ENTRIES:,} files: only the first were compared"
    spent = 0
    for relative in sorted(before.keys() | after.keys()):
        changed = _changed(seed, root, relative, before.get(relative), after.get(relative))
        if changed is None:
            continue
        if len(changes.files) >= MAX_FILES_SHOWN or spent > TASK_BUDGET:
            changes.problem = (f"more changed files than shown (cut after "
                               f"{len(changes.files)}); the workspace has them all")
            break
        if agent_changed is not None and relative not in agent_changed:
            changed["after"] = True
        spent += len(changed.get("diff", ""))
        changes.files.append(changed)
    filecmp.clear_cache()  # its cache would otherwise grow with every attempt of the run
    if agent_changed is None and changes.files:
        changes.unattributed = (
            f"the record of which files the agent changed was cut at its bound ({omitted} "
            "not listed)" if omitted else
            "the ledger does not record which files the agent changed") + \
            ": files evalctl wrote after it (verify files) or the checks wrote are " \
            "listed with its changes"
    return changes
