"""Putting a source into a directory: the one function every seed goes through."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from evalctl._files import IGNORED_DIRS
from evalctl._sources.archive import unpack
from evalctl._sources.git import SourceCache, SourceError, default_cache
from evalctl._sources.model import ARCHIVE, DIR, GIT, Source

# Never copied from a directory source: a repository's metadata (remotes, hooks,
# credentials in URLs) is not part of a task; use `git:` for a repository.
SKIPPED = IGNORED_DIRS | {".git"}


def materialize(source: Source, target: Path, *, keep_git: bool = True,
                cache: SourceCache | None = None) -> None:
    """Fill `target`, an empty directory, with the source's files (and, for a git
    source with `keep_git`, a repository holding its one commit)."""
    if source.kind == GIT:
        (cache or default_cache()).check_out(source, target, keep_git=keep_git)
    elif source.kind == DIR:
        copy_directory(Path(source.location), target)
    elif source.kind == ARCHIVE:
        unpack(Path(source.location), target, source.strip)
    else:  # the schema allows no other kind
        raise SourceError(f"unknown source kind {source.kind!r}")


def copy_directory(origin: Path, target: Path) -> None:
    """Copy a directory's regular files, directories and links that stay inside it;
    SourceError for a link that leads out (the copy would lead out of the workspace)."""
    if not origin.is_dir():
        raise SourceError(f"{origin} is not a directory")
    origin = origin.resolve()
    for directory, subdirs, names in os.walk(origin):
        subdirs[:] = sorted(d for d in subdirs if d not in SKIPPED)
        here = Path(directory)
        relative_dir = here.relative_to(origin)
        (target / relative_dir).mkdir(parents=True, exist_ok=True)
        for name in [*names, *(d for d in subdirs if (here / d).is_symlink())]:
            path = here / name
            destination = target / relative_dir / name
            if path.is_symlink():
                link = os.readlink(path)
                resolved = (here / link).resolve()
                if os.path.isabs(link) or not resolved.is_relative_to(origin):
                    raise SourceError(f"{path} is a link that leads outside {origin}")
                destination.symlink_to(link)
            elif path.is_file():
                shutil.copy2(path, destination)
        subdirs[:] = [d for d in subdirs if not (here / d).is_symlink()]
