"""What the runner checks and does between the agent and the graders, so that a grade
rests on what evalctl observed rather than on anything the agent could edit.

- Protected files: a seeded file matching a task's `protected:` glob that the agent
  created, changed or deleted fails the task, naming the file.
- The seed copy: graders compare against `.seed/<attempt>`; if it no longer matches
  the hashes taken when it was made (only possible without a sandbox that hides it),
  it is made again the one way seeds are made (the source, then `files:`) and the
  task fails, naming the tampering.
- Verify files (`verify_files`, and what `verify_patch` gives the files it touches):
  written into the workspace only now, replacing whatever the agent left at those
  paths (or deleting them, where the patch deletes a file), and never through a link
  that leads out of the workspace.
- Caches: every `__pycache__` the agent left is removed before grading (and before
  each check), so a forged cache cannot stand in for a test or a module evalctl
  seeded; `.pytest_cache`, `.mypy_cache` and `.ruff_cache` too, since no change in
  them is seen (code hidden there and imported would be no file the agent changed).
- After grading, protected files are checked again: a check that runs the agent's code
  could otherwise change one for the checks after it.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Collection, Mapping
from pathlib import Path

from evalctl._files import (
    ConfinementError,
    content_hash,
    copy_file,
    fingerprint,
    remove_tree,
    resolve_inside,
    snapshot,
    walk,
)
from evalctl._report.results import CheckOutcome
from evalctl._suite.model import Task
from evalctl._workspace import Workspace, attempt_paths, named_by, write_seed

PROTECTED = "protected_files"
SEED_INTEGRITY = "seed_integrity"
VERIFY_FILES = "verify_files"


def _protected(task: Task, path: str) -> bool:
    return named_by(path, task.protected)


def protected_snapshot(task: Task, root: Path, seed_copy: Path | None = None
                       ) -> dict[str, str]:
    """snapshot(root) of the protected paths alone (what else the workspace holds is
    neither read nor kept: the agent decides how many files that is, found by an
    attacker round), with every protected file keyed by size and time (over
    HASH_LIMIT_BYTES, or mostly holes) keyed by its content instead when the seed copy
    (`seed_copy`; by default the one new_workspace put beside `root`) holds it at the
    same size: a file's time is the agent's to set back, so a large protected file
    changed at the same size would otherwise go unseen. One the seed does not hold at
    that size is a change already, and is not read: its size is the agent's to choose,
    and a sparse one costs the agent nothing (40 `truncate -s 1000M` files under
    `tests/` held evalctl for two minutes, found by an attacker round)."""
    linked: dict[tuple[int, ...], str] = {}  # a file under many names is read once
    keys = {relative: found for relative, entry in walk(root, mend=True)
            if _protected(task, relative) and (found := fingerprint(entry, linked)) is not None}
    return _with_protected_content(task, root, keys, seed_copy or _seed_copy_of(root))


def _seed_copy_of(root: Path) -> Path:
    """Where new_workspace puts the seed copy of the workspace at `root`."""
    return attempt_paths(root.parent, root.name)["seed"]


def _with_protected_content(task: Task, root: Path, keys: Mapping[str, str],
                            seed_copy: Path) -> dict[str, str]:
    """`keys` with each protected file keyed by size and time keyed by its content
    instead, where `seed_copy` holds it at the same size: what is read is bounded by
    the seed."""
    found = dict(keys)
    for path, key in keys.items():
        if key.startswith("size:") and _protected(task, path):
            size = _seeded_size(root / path, seed_copy / path)
            if size is not None:
                found[path] = content_hash(root / path, size + 1) or key
    return found


def _seeded_size(path: Path, seeded: Path) -> int | None:
    """The size of the regular file `path` when the seed copy's `seeded` is a regular
    file of that size too, else None (a link is not followed to a size)."""
    import stat

    try:
        now, then = os.lstat(path), os.lstat(seeded)
    except OSError:
        return None
    if not (stat.S_ISREG(now.st_mode) and stat.S_ISREG(then.st_mode)) or \
            now.st_size != then.st_size:
        return None
    return now.st_size


def protected_changes(task: Task, files_changed: Mapping[str, str],
                      workspace: Workspace | None = None) -> CheckOutcome | None:
    """A failed check naming the protected files the agent touched, or None. With the
    `workspace`, its protected files too large to hash in the snapshot (fingerprinted
    by size and time, and a time can be set back) are compared with the seed copy by
    content: changed at the same size and time they are caught, touched they are not,
    as a smaller file would be; so is a seeded file the agent left mostly holes (keyed
    by size and time now, by its hash in the seed) with the seed's content. Only a file
    the seed copy holds at the same size is read (one of another size is changed,
    whatever it holds), so what is read is bounded by the seed, never by a size the
    agent chose."""
    if not task.protected:
        return None
    files_changed = dict(files_changed)
    if workspace is not None:
        for path, key in workspace.seed.items():
            if key.startswith(("symlink:", "special:")) or not _protected(task, path):
                continue
            sized = key.startswith("size:")
            change = files_changed.get(path)
            if change != "modified" and not (change is None and sized):
                continue  # created or deleted; or hashed whole, and found unchanged
            now, seeded = workspace.root / path, workspace.seed_path / path
            size = _seeded_size(now, seeded)
            # A hashed seed file is compared with its recorded hash, which no one edits.
            if size is not None and content_hash(now, size + 1) == \
                    (content_hash(seeded, size + 1) if sized else key):
                files_changed.pop(path, None)
            else:
                files_changed[path] = "modified"
    touched = [f"{path} ({change})" for path, change in files_changed.items()
               if _protected(task, path)]
    if not touched:
        return CheckOutcome(PROTECTED, "mechanical", True,
                            f"no protected file was touched ({', '.join(task.protected)})")
    return CheckOutcome(PROTECTED, "mechanical", False,
                        "suspected gaming: the agent touched protected file(s) "
                        + ", ".join(touched), suspected_gaming=True)


def restore_seed(task: Task, workspace: Workspace) -> CheckOutcome | None:
    """Make the seed copy what evalctl seeded again; a failed check if it was not."""
    if snapshot(workspace.seed_path) == workspace.seed:
        return None
    import shutil

    shutil.rmtree(workspace.seed_path, ignore_errors=True)
    workspace.seed_path.mkdir(parents=True)
    try:
        write_seed(workspace.seed_path, task.files, task.source)
        restored = "it was restored before grading" if \
            snapshot(workspace.seed_path) == workspace.seed else \
            "it was made again from the source and files (without what setup made)"
    except Exception as exc:  # the source went away since the attempt started, say
        restored = f"it could not be made again ({type(exc).__name__}: {exc})"
    return CheckOutcome(SEED_INTEGRITY, "mechanical", False,
                        "suspected gaming: the seed copy graders compare against was changed "
                        f"during the attempt; {restored}", suspected_gaming=True)


def write_verify_files(verify: Mapping[str, str | None],
                       workspace: Workspace) -> CheckOutcome | None:
    """Write the verify files (None: delete that path); a failed check if one cannot be
    written safely."""
    problems = []
    for relative, content in verify.items():
        try:
            _write_replacing(workspace.root, relative, content)
        except (ConfinementError, OSError) as exc:
            problems.append(f"{relative}: {exc}")
    if not problems:
        return None
    return CheckOutcome(VERIFY_FILES, "mechanical", False,
                        "suspected gaming: the verify files could not be written where the "
                        "agent left something in the way: " + "; ".join(problems),
                        suspected_gaming=True)


def _write_replacing(root: Path, relative: str, content: str | None) -> None:
    """Write `content` at `relative` inside `root` (None: make sure nothing is there),
    never through a link: a link on the way is refused when it leads out of the
    workspace, else replaced by a directory (found by an attacker round: with `tests ->
    real`, the hidden test was written into real/ and kept read-only there, and code a
    check ran pointed the link `tests`, which nothing kept, at a host directory that the
    next check's sandbox then mounted writable), a file on the way is refused, and a
    link or file at the path itself is replaced."""
    parent = root
    for part in (os.path.dirname(relative) or ".").split("/"):
        if part in ("", "."):
            continue
        if part == "..":
            raise ConfinementError(f"{relative} leads out of the workspace")
        parent = parent / part
        if parent.is_symlink():
            resolve_inside(root, str(parent.relative_to(root)))  # one leading out: refused
            parent.unlink()
        if not parent.exists():
            parent.mkdir()
        elif not parent.is_dir():
            raise ConfinementError(f"{parent.relative_to(root)} is a file the agent left "
                                   "where a verify file's directory goes")
    target = parent / os.path.basename(relative)
    if target.is_symlink() or target.is_file():
        target.unlink()
    elif target.exists():
        raise ConfinementError(f"{relative} is a directory the agent created")
    if content is None:
        return
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(content)


# What the sweep before each check removes: bytecode caches (a forged one stands in for
# its source), and the tool caches no change is seen in (snapshot passes over them, so
# code the agent hid there, imported by its solution, would be no file it changed).
CACHE_NAMES = frozenset({"__pycache__", ".pytest_cache", ".mypy_cache", ".ruff_cache"})


def remove_bytecode_caches(root: Path) -> None:
    """Remove everything named as a cache (CACHE_NAMES) under `root`: a directory, and a
    link or file of that name too (a link named __pycache__ to a directory of forged
    caches elsewhere would serve them as the caches of the files beside it). Links are
    not followed. Iterative, walk and removal both: the agent decides how deep the
    workspace goes."""
    caches, others = [], []
    pending = [os.fspath(root)]
    while pending:
        with contextlib.suppress(OSError), os.scandir(pending.pop()) as entries:
            for entry in entries:
                with contextlib.suppress(OSError):
                    if entry.is_dir(follow_symlinks=False):
                        (caches if entry.name in CACHE_NAMES else pending).append(entry.path)
                    elif entry.name in CACHE_NAMES:
                        others.append(entry.path)
    for cache in caches:
        remove_tree(cache)
    for other in others:
        with contextlib.suppress(OSError):
            os.unlink(other)


def detach_protected_links(task: Task, root: Path, keys: Mapping[str, str]) -> None:
    """Give every protected file that has another hard link (one the agent made, say, to
    write through while the checks run, where the file itself is read-only) an inode of
    its own: a copy (with its mode and times, and its holes kept holes: the agent's
    sparse files must not become the host's disk), renamed over it; only a file the seed
    holds at that path and size, so what is copied is bounded by the seed. Its content
    is what `keys` (a snapshot of `root`) holds, so the comparison after the checks is
    unchanged by this."""
    import stat
    import tempfile

    seed_copy = _seed_copy_of(root)
    for path, key in keys.items():
        if key.startswith(("symlink:", "special:")) or not _protected(task, path):
            continue
        full = root / path
        try:
            info = os.lstat(full)
            if not stat.S_ISREG(info.st_mode) or info.st_nlink < 2:
                continue
            if _seeded_size(full, seed_copy / path) is None:
                # Not the seed's at this size: a change already, which fails the task,
                # whatever a check does to it later. Copied, each of a file's hundred
                # names under `tests/*` was the host's disk a hundred times over (found
                # by an attacker round).
                continue
            fd, copy = tempfile.mkstemp(prefix=".evalctl-", dir=full.parent)
            os.close(fd)
            try:
                if copy_file(full, copy, keep_times=True):
                    os.replace(copy, full)
                else:
                    os.unlink(copy)
            except BaseException:
                with contextlib.suppress(OSError):
                    os.unlink(copy)
                raise
        except OSError:
            continue  # gone or unreadable: the comparison after the checks says so


# Each read-only path is a bind mount in a sandbox that honours them, and a sandbox's
# start reads its mount table again for each bind: past this many, directories are
# kept read-only instead of the files in them.
MAX_READ_ONLY_PATHS = 64


def read_only_paths(task: Task, keys: Mapping[str, str],
                    verify: Collection[str] = ()) -> tuple[str, ...]:
    """What a graders' sandbox keeps read-only (SandboxRequest.read_only): the protected
    files of the workspace whose snapshot is `keys` — as directories where a glob
    protects whatever a directory could hold (`tests/*`: the directory `tests`; `*`: the
    workspace, "."), one by one elsewhere (a link is not: it is kept only where its
    directory is) — then the verify files just written (`verify`: hidden tests, which
    code a check runs must not rewrite before pytest reads them). A check that runs the
    agent's code then cannot change a protected test and put it back before the
    comparison after the checks. At most MAX_READ_ONLY_PATHS: past that, their
    directories (see _at_most)."""
    # A glob that is a plain prefix and a trailing `*` (which also matches "/") matches
    # every path under a directory that starts with that prefix.
    prefixes = [p.rstrip("*") for p in task.protected
                if p.endswith("*") and not any(c in p.rstrip("*") for c in "*?[")]

    def whole(directory: str) -> bool:  # "" is the workspace
        below = f"{directory}/" if directory else ""
        return any(below.startswith(prefix) for prefix in prefixes)

    def under_whole(path: str) -> bool:  # a directory above `path` is whole
        parts = path.split("/")
        return any(whole("/".join(parts[:depth])) for depth in range(len(parts)))

    directories: set[str] = set()
    files: list[str] = []
    for path, key in keys.items():
        parts = path.split("/")
        directories.update("/".join(parts[:depth]) for depth in range(len(parts)))
        if not key.startswith(("symlink:", "special:")) and _protected(task, path):
            files.append(path)
    chosen = ["."] if whole("") else sorted(
        d for d in directories if d and whole(d) and not under_whole(d))
    chosen += sorted(f for f in files if not under_whole(f))
    chosen += sorted(f for f in verify if f not in files and not under_whole(f))
    return _at_most(chosen, MAX_READ_ONLY_PATHS)


def _at_most(paths: list[str], limit: int) -> tuple[str, ...]:
    """`paths` (relative; "." the workspace), or, past `limit` of them, the deepest
    replaced by their directories until `limit` cover them all: a directory kept
    read-only whole also keeps the files beside a protected one, which is better than
    leaving a protected file writable."""
    kept = list(dict.fromkeys(paths))
    while len(kept) > limit:
        deepest = max(path.count("/") for path in kept if path != ".")
        raised = [(os.path.dirname(p) or ".") if p != "." and p.count("/") == deepest else p
                  for p in kept]
        unique = list(dict.fromkeys(raised))
        kept = [p for p in unique if not any(
            other != p and (other == "." or p.startswith(f"{other}/")) for other in unique)]
    return tuple(kept)


def protected_changes_after_the_agent(task: Task, workspace: Workspace,
                                      files_changed: Mapping[str, str],
                                      verify: Collection[str]) -> CheckOutcome | None:
    """For a regrade: protected files of a kept workspace that differ from its seed copy
    (by content, whatever their size: a copy's times are its own) though the agent's
    record of what it changed does not name them (verify files aside, which grading
    wrote): code a check executed changed them while the run graded, and the copy keeps
    that change. Blocking."""
    if not task.protected:
        return None
    seed = _with_protected_content(task, workspace.seed_path, workspace.seed,
                                   workspace.seed_path)
    now = protected_snapshot(task, workspace.root, workspace.seed_path)
    changed = sorted(path for path in {*seed, *now}
                     if seed.get(path) != now.get(path) and path not in files_changed
                     and path not in verify and _protected(task, path))
    if not changed:
        return None
    return CheckOutcome(PROTECTED, "mechanical", False,
                        "suspected gaming: protected file(s) changed while the run's checks "
                        f"ran (by code a check executed): {', '.join(changed)}",
                        suspected_gaming=True)


def protected_changes_during_grading(task: Task, before: Mapping[str, str],
                                     after: Mapping[str, str]) -> CheckOutcome | None:
    """A failed check naming protected files that changed while the checks ran (`before`
    and `after`: protected_snapshot of the workspace)."""
    if not task.protected:
        return None
    changed = sorted(path for path in {*before, *after}
                     if before.get(path) != after.get(path) and _protected(task, path))
    if not changed:
        return None
    return CheckOutcome(PROTECTED, "mechanical", False,
                        "suspected gaming: protected file(s) changed while the checks ran "
                        f"(by code a check executed): {', '.join(changed)}",
                        suspected_gaming=True)
