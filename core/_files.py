"""Files as the harness touches them: confined to a root, hashed, written atomically.

Path confinement is what keeps the file tools and graders inside a workspace;
`snapshot` is how changes against the seed are found; `write_atomically` is how
reports are written so a reader never sees half of one."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable
from pathlib import Path
from typing import BinaryIO

# Caches tools write as a side effect, and a repository's own metadata (a git source's
# .git: its index and refs change with every `git status`): not the agent's work.
IGNORED_DIRS = frozenset({"__pycache__", ".pytest_cache", ".mypy_cache", ".ruff_cache", ".git"})


class ConfinementError(ValueError):
    """A path that would leave the workspace."""


def resolve_inside(root: Path, user_path: str) -> Path:
    """Resolve `user_path` against `root`, following symlinks, and refuse escapes."""
    if not isinstance(user_path, str) or not user_path.strip():
        raise ConfinementError("path must be a non-empty string")
    if "\x00" in user_path:
        raise ConfinementError("path contains a NUL byte")
    root = root.resolve()
    candidate = Path(user_path)
    resolved = (candidate if candidate.is_absolute() else root / candidate).resolve()
    if resolved != root and not resolved.is_relative_to(root):
        raise ConfinementError(
            f"{user_path!r} resolves outside the workspace; use paths inside it"
        )
    return resolved


def snapshot(root: Path) -> dict[str, str]:
    """Relative path -> content hash of every file (symlinks by their target; a FIFO,
    socket or device by its kind alone: opening one could block or read forever)."""
    import hashlib  # here: plugins import this module, and list-plugins should stay quick
    import stat

    found: dict[str, str] = {}
    for directory, subdirs, names in os.walk(root):
        subdirs[:] = sorted(d for d in subdirs if d not in IGNORED_DIRS)
        for name in names:
            full = Path(directory, name)
            relative = full.relative_to(root).as_posix()
            if full.is_symlink():
                found[relative] = "symlink:" + os.readlink(full)
                continue
            digest = hashlib.sha256()
            try:
                fd = os.open(full, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
            except OSError:
                continue
            with os.fdopen(fd, "rb") as handle:
                kind = os.fstat(fd).st_mode
                if not stat.S_ISREG(kind):
                    found[relative] = f"special:{stat.filemode(kind)[0]}"
                    continue
                try:
                    for block in iter(lambda h=handle: h.read(1 << 20), b""):
                        digest.update(block)
                except OSError:
                    continue
            found[relative] = digest.hexdigest()
    return found


def _umask() -> int:
    current = os.umask(0)
    os.umask(current)
    return current


def write_atomically(path: str | os.PathLike[str], text: str | Iterable[str]) -> Path:
    """Write `text` to `path` through a temporary file and a rename, so a reader sees
    the old file or the whole new one. `text` may be an iterable of strings, written as
    they come: a large report need not be held in memory whole."""
    import tempfile  # here, not at import: `import evalctl` stays cheap for --help

    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, 0o666 & ~_umask())  # mkstemp's 0600 would hide reports from CI users
        with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as handle:
            handle.writelines([text] if isinstance(text, str) else text)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return target


class NotARegularFile(ConfinementError):
    """A path that is a directory, a FIFO, a device or a socket, or a hard-linked file:
    nothing the file tools read or write."""


def open_confined(root: Path, user_path: str, *, write: bool = False) -> int:
    """A file descriptor for `user_path` inside `root`, opened with resolve-beneath
    semantics: the path is resolved inside the root (links that stay inside are fine),
    then opened one component at a time with O_NOFOLLOW, so a link swapped in after
    resolving cannot lead out. Only a regular file with a single link is opened (a hard
    link could be another name for a file outside; a FIFO would block). With `write`,
    missing directories and the file are created, and the file is truncated only after
    those checks. The caller owns the descriptor."""
    import errno
    import stat

    target = resolve_inside(root, user_path)
    base = root.resolve()
    parts = target.relative_to(base).parts
    if not parts:
        raise NotARegularFile(f"{user_path!r} is the workspace itself")
    directory = os.open(base, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for part in parts[:-1]:
            if write:
                with contextlib.suppress(FileExistsError):
                    os.mkdir(part, 0o755, dir_fd=directory)
            try:
                child = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC,
                                dir_fd=directory)
            except OSError as exc:
                if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                    raise ConfinementError(f"{user_path!r} changed under evalctl while it was "
                                           "opened (a link or a file where a directory was)") \
                        from None
                raise
            os.close(directory)
            directory = child
        flags = os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC | \
            ((os.O_RDWR | os.O_CREAT) if write else os.O_RDONLY)
        try:
            fd = os.open(parts[-1], flags, 0o644, dir_fd=directory)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise ConfinementError(f"{user_path!r} became a link while it was opened") \
                    from None
            if exc.errno in (errno.ENXIO, errno.EISDIR):
                raise NotARegularFile(f"{user_path!r} is not a regular file") from None
            raise
    finally:
        os.close(directory)
    info = os.fstat(fd)
    problem = None
    if not stat.S_ISREG(info.st_mode):
        problem = "is not a regular file (a directory, FIFO, device or socket)"
    elif info.st_nlink > 1:
        problem = "is a hard link (another name for a file that may be outside the workspace)"
    if problem:
        os.close(fd)
        raise NotARegularFile(f"{user_path!r} {problem}; the file tools do not open it")
    os.set_blocking(fd, True)
    if write:
        os.ftruncate(fd, 0)
    return fd


def open_in_workspace(workspace: Path, user_path: str) -> BinaryIO:
    """A file of the workspace opened for reading in binary, the way the file tools open
    them: resolved inside the workspace and opened without following a link out, and
    only a regular file with a single link (a FIFO would block, a hard link could be a
    file outside). Raises ConfinementError otherwise, FileNotFoundError when missing."""
    return os.fdopen(open_confined(Path(workspace), user_path), "rb")
