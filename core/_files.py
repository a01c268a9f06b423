"""Files as the harness touches them: confined to a root, hashed, written atomically.

Path confinement is what keeps the file tools and graders inside a workspace;
`snapshot` is how changes against the seed are found; `write_atomically` is how
reports are written so a reader never sees half of one."""

from __future__ import annotations

import os
from pathlib import Path

# Caches tools write as a side effect; not the agent's work.
IGNORED_DIRS = frozenset({"__pycache__", ".pytest_cache", ".mypy_cache", ".ruff_cache"})


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
    """Relative path -> content hash of every file (symlinks by their target)."""
    import hashlib  # here: plugins import this module, and list-plugins should stay quick

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
                with open(full, "rb") as handle:
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


def write_atomically(path: str | os.PathLike[str], text: str) -> Path:
    """Write `text` to `path` through a temporary file and a rename."""
    import tempfile  # here, not at import: `import evalctl` stays cheap for --help

    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, 0o666 & ~_umask())  # mkstemp's 0600 would hide reports from CI users
        with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as handle:
            handle.write(text)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return target
