"""A task's `source:` as the rest of evalctl sees it, and its cheap checks.

A source is resolved when the suite is loaded: a local path (a repository, a git
bundle, a directory, an archive) relative to the suite file becomes absolute, and a
URL is kept as written. `problems()` says what can be known without the network: a
local path that is missing or of the wrong kind, an archive member that would land
outside the workspace, a commit a local repository does not have.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

GIT, DIR, ARCHIVE = "git", "dir", "archive"
KINDS = (GIT, DIR, ARCHIVE)
# A commit id: 40 hexadecimal digits (SHA-1), or 64 (SHA-256 repositories).
COMMIT = re.compile(r"^(?:[0-9a-f]{40}|[0-9a-f]{64})$")
# scheme://..., or scp-like user@host:path: fetched, not read from disk.
_URL = re.compile(r"^(?:[A-Za-z][A-Za-z0-9+.-]*://|[^/\s:@]+@[^/\s:]+:)")
ARCHIVE_SUFFIXES = (".tar.gz", ".tgz", ".tar.bz2", ".tar.xz", ".tar", ".zip")


def is_url(location: str) -> bool:
    return bool(_URL.match(location))


@dataclass(frozen=True)
class Source:
    """Where a workspace starts from. `location` is a URL, or an absolute local path;
    `rev` is the commit of a git source; `strip` leading path components are dropped
    from an archive's members (an sdist's `name-1.0/`)."""

    kind: str
    location: str
    rev: str | None = None
    strip: int = 0
    written: str = ""  # the location as the suite wrote it, for messages

    @property
    def local(self) -> bool:
        return not is_url(self.location)

    def describe(self) -> str:
        where = self.written or self.location
        return f"{self.kind} {where}" + (f" at {self.rev[:12]}" if self.rev else "")

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {self.kind: self.location}
        if self.rev:
            data["rev"] = self.rev
        if self.strip:
            data["strip"] = self.strip
        return data


def source_from_data(data: Any, base: Path) -> Source | None:
    """The Source a validated `source:` mapping describes, local paths resolved against
    `base` (the suite file's directory)."""
    if not isinstance(data, dict):
        return None
    kind = next((k for k in KINDS if k in data), None)
    if kind is None or not isinstance(data[kind], str):
        return None
    written = data[kind]
    location = written if kind == GIT and is_url(written) else \
        str((base / Path(written).expanduser()).resolve())
    return Source(kind, location, data.get("rev"), int(data.get("strip", 0) or 0), written)


def problems(source: Source) -> list[str]:
    """What is wrong with a source that can be known without the network; [] when
    nothing is. A remote repository's commit is checked when a run fetches it."""
    if not source.local:
        return []
    path = Path(source.location)
    if source.kind == GIT:  # the cache may hold the commit of a repository since moved
        from evalctl._sources.git import SourceError, default_cache

        try:
            default_cache().ensure(source)
        except SourceError as exc:
            return [f"source git {source.written!r}: {exc}"]
        return []
    if not path.exists():
        return [f"source {source.kind} {source.written!r}: {path} does not exist (paths "
                "are relative to the suite file)"]
    if source.kind == DIR and not path.is_dir():
        return [f"source dir {source.written!r}: {path} is not a directory"]
    if source.kind == ARCHIVE:
        from evalctl._sources.archive import archive_problems

        return [f"source archive {source.written!r}: {p}" for p in archive_problems(path,
                                                                                   source.strip)]
    return []
