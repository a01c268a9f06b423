"""Archive sources: a .tar.gz, .tgz, .tar.bz2, .tar.xz, .tar or .zip unpacked into the
workspace, refusing any member that would land outside it.

Every member is checked before anything is written: no absolute path, no `..`, no
link that leads out of the workspace or to an absolute path, no device, FIFO or hard
link to something outside the archive. tar members are then written by tarfile's own
`data` filter (which checks again), zip members one by one inside the target.
"""

from __future__ import annotations

import posixpath
import shutil
import stat
import tarfile
import zipfile
from collections.abc import Iterator
from pathlib import Path, PurePosixPath

from evalctl._sources.git import SourceError

MAX_LISTED = 5


def _stripped(name: str, strip: int) -> str | None:
    """The member's path inside the workspace, or None for one `strip` removes whole."""
    parts = [p for p in PurePosixPath(name).parts if p not in ("", ".")]
    if len(parts) <= strip:
        return None
    return "/".join(parts[strip:])


def _escapes(path: str) -> bool:
    pure = PurePosixPath(path)
    return pure.is_absolute() or path.startswith("\\") or ".." in pure.parts or \
        (len(path) > 1 and path[1] == ":")


def _link_escapes(member_path: str, target: str) -> bool:
    if target.startswith("/") or "\\" in target:
        return True
    joined = posixpath.normpath(posixpath.join(posixpath.dirname(member_path), target))
    return joined == ".." or joined.startswith("../")


def _members(path: Path) -> Iterator[tuple[str, str, str | None]]:
    """(name, kind, link target) of every member: kind is file, dir, symlink, hardlink or
    special."""
    if path.name.lower().endswith(".zip"):
        with zipfile.ZipFile(path) as archive:
            for info in archive.infolist():
                mode = info.external_attr >> 16
                if stat.S_ISLNK(mode):
                    yield info.filename, "symlink", archive.read(info).decode("utf-8",
                                                                             "replace")
                else:
                    yield info.filename, "dir" if info.is_dir() else "file", None
        return
    with tarfile.open(path) as archive:
        for member in archive:
            if member.isdir():
                kind = "dir"
            elif member.isfile():
                kind = "file"
            elif member.issym():
                kind = "symlink"
            elif member.islnk():
                kind = "hardlink"
            else:
                kind = "special"
            yield member.name, kind, member.linkname or None


def archive_problems(path: Path, strip: int = 0) -> list[str]:
    """Why `path` cannot be unpacked into a workspace; [] when it can."""
    if not path.is_file():
        return [f"{path} is not a file"]
    if not path.name.lower().endswith(tuple(s for s in (".tar.gz", ".tgz", ".tar.bz2",
                                                        ".tar.xz", ".tar", ".zip"))):
        return [f"{path.name}: not an archive evalctl unpacks (.tar.gz, .tgz, .tar.bz2, "
                ".tar.xz, .tar, .zip)"]
    bad: list[str] = []
    kept = 0
    try:
        for name, kind, link in _members(path):
            if _escapes(name):
                bad.append(f"member {name!r} would be written outside the workspace")
                continue
            inside = _stripped(name, strip)
            if inside is None:
                continue
            kept += 1
            if kind == "special":
                bad.append(f"member {name!r} is a device or FIFO")
            elif kind == "symlink" and link is not None and _link_escapes(inside, link):
                bad.append(f"member {name!r} is a link that leads outside the workspace "
                           f"({link})")
            elif kind == "hardlink" and link is not None and (
                    _escapes(link) or _stripped(link, strip) is None):
                bad.append(f"member {name!r} is a hard link to {link}, outside what is "
                           "unpacked")
    except (OSError, tarfile.TarError, zipfile.BadZipFile, EOFError) as exc:
        return [f"cannot read {path.name}: {exc}"]
    if not bad and not kept:
        bad.append(f"nothing to unpack (strip: {strip} removes every member)" if strip
                   else "the archive is empty")
    if len(bad) > MAX_LISTED:
        bad = [*bad[:MAX_LISTED], f"and {len(bad) - MAX_LISTED} more unsafe member(s)"]
    return bad


def unpack(path: Path, target: Path, strip: int = 0) -> None:
    """Unpack the archive into `target`, an empty directory; SourceError if any member
    is unsafe (nothing is written then)."""
    problems = archive_problems(path, strip)
    if problems:
        raise SourceError(f"{path.name}: " + "; ".join(problems))
    if path.name.lower().endswith(".zip"):
        _unpack_zip(path, target, strip)
        return
    with tarfile.open(path) as archive:
        members = []
        for member in archive.getmembers():
            inside = _stripped(member.name, strip)
            if inside is None:
                continue
            member = member.replace(name=inside, deep=False)
            if member.islnk() and member.linkname:
                member = member.replace(linkname=_stripped(member.linkname, strip) or "",
                                        deep=False)
            members.append(member)
        # tarfile's own `data` filter checks every member again (Python 3.11.4 and later;
        # before that, the checks above are the only ones).
        safety = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}
        try:
            archive.extractall(target, members=members, **safety)
        except (tarfile.TarError, OSError) as exc:
            raise SourceError(f"{path.name}: {exc}") from None


def _unpack_zip(path: Path, target: Path, strip: int) -> None:
    from evalctl._files import ConfinementError, resolve_inside

    with zipfile.ZipFile(path) as archive:
        for info in archive.infolist():
            inside = _stripped(info.filename, strip)
            if inside is None:
                continue
            try:
                destination = resolve_inside(target, inside)
            except ConfinementError as exc:
                raise SourceError(f"{path.name}: member {info.filename!r}: {exc}") from None
            mode = info.external_attr >> 16
            if info.is_dir():
                destination.mkdir(parents=True, exist_ok=True)
            elif stat.S_ISLNK(mode):
                destination.parent.mkdir(parents=True, exist_ok=True)
                destination.symlink_to(archive.read(info).decode("utf-8"))
            else:
                destination.parent.mkdir(parents=True, exist_ok=True)
                with archive.open(info) as source, open(destination, "xb") as sink:
                    shutil.copyfileobj(source, sink)
                if mode & 0o111:
                    destination.chmod(0o755)
