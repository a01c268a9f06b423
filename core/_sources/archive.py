"""Archive sources: a .tar.gz, .tgz, .tar.bz2, .tar.xz, .tar or .zip unpacked into the
workspace, refusing any member that would land outside it.

Every member is checked before anything is written: no absolute path, no `..`, no
link that leads out of the workspace or to an absolute path, no device, FIFO or hard
link to something outside the archive. A link is judged where it leads in the tree the
archive unpacks to, following the archive's other links (never the host's files): one
link's text may look harmless and still lead out through another (`l2 -> l1/../..`,
where `l1` goes back to the top). No member may be written through a link, nor be a
link and something else at once, so that tree is the one unpacked. tar members are then
written by tarfile's own `data` filter (which checks again), zip members one by one
inside the target; and once unpacked, every link is resolved again on disk, inside the
workspace, or everything unpacked is removed and the source refused.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
import tarfile
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from evalctl._files import (
    MAX_LINKS,
    MAX_NAMES,
    ConfinementError,
    remove_tree,
    resolve_inside,
)
from evalctl._sources.git import SourceError

MAX_LISTED = 5
# The longest link target kept (PATH_MAX): a zip stores a link's target as the member's
# content, which could otherwise be any size, and read whole.
MAX_LINK_TARGET = 4096
# The names all of an archive's link checks may look at together: each check is bounded
# as the kernel's is (MAX_LINKS links, MAX_NAMES names), this bounds them all, so no web
# of links costs more than a check should.
MAX_CHECKED_NAMES = 2_000_000


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


@dataclass
class _Node:
    """A name of the tree the archive unpacks to: a directory (`children`), a link
    (`link`, its target) or anything else (neither)."""

    children: dict[str, _Node] = field(default_factory=dict)
    link: str | None = None
    explicit: bool = False  # a member of its own, not only the parent of one


class _Tree:
    """The tree an archive unpacks to, built from its members' paths (after `strip`),
    where links are resolved without the host's file system."""

    def __init__(self) -> None:
        self.root = _Node()
        self.budget = MAX_CHECKED_NAMES

    def add(self, inside: str, kind: str, link: str | None) -> str | None:
        """Add a member; why it cannot be unpacked as the tree says, or None."""
        parts = inside.split("/")
        node = self.root
        for depth, part in enumerate(parts[:-1], 1):
            child = node.children.get(part)
            if child is None:
                child = node.children[part] = _Node()
            elif child.link is not None:
                # Written through a link: it would land wherever the link leads.
                return f"is inside {'/'.join(parts[:depth])!r}, a link"
            node = child
        existing = node.children.get(parts[-1])
        if existing is not None and (kind == "symlink" or existing.link is not None) and (
                existing.explicit or existing.children):
            # Which of the two is unpacked depends on the order and the unpacker: the
            # tree checked must be the tree written.
            return "is a link and also another member of the same name"
        if existing is None or kind == "symlink":
            existing = node.children[parts[-1]] = _Node(
                children=existing.children if existing is not None else {})
        existing.explicit = True
        if kind == "symlink":
            existing.link = link
        return None

    def link_on(self, inside: str) -> bool:
        """Whether the path `inside`, or a directory on its way, is one of the links."""
        node: _Node | None = self.root
        for part in inside.split("/"):
            node = node.children.get(part) if node is not None else None
            if node is not None and node.link is not None:
                return True
        return False

    def leads_out(self, directory: str, target: str) -> tuple[bool, str] | None:
        """Why `target`, followed from `directory` (a path of the tree, no link in it),
        leads outside the workspace (True, why) or cannot be resolved (False, why); None
        when it stays inside. The archive's own links met on the way are followed (at
        most MAX_LINKS, as the kernel does); a name the archive does not hold is taken
        as written."""
        if target.startswith("/"):
            return True, "an absolute path"
        # The resolved path so far, as the nodes it passes (None past a name the
        # archive does not hold): `..` is taken from it, as the kernel takes it.
        here: list[_Node | None] = [self.root]
        for part in directory.split("/") if directory else []:
            parent = here[-1]
            here.append(parent.children.get(part) if parent is not None else None)
        pending = list(reversed(target.split("/")))
        links = names = 0
        while pending:
            part = pending.pop()
            if part in ("", "."):
                continue
            names += 1
            self.budget -= 1
            if names > MAX_NAMES or self.budget < 0:
                return False, "more names than a link's check may look at"
            if part == "..":
                if len(here) == 1:
                    return True, "above the workspace"
                here.pop()
                continue
            parent = here[-1]
            node = parent.children.get(part) if parent is not None else None
            if node is None or node.link is None:
                here.append(node)
                continue
            links += 1
            if links > MAX_LINKS:
                return False, f"a loop, or more than {MAX_LINKS} links in a row"
            if node.link.startswith("/"):
                return True, f"to an absolute path through {node.link}"
            pending.extend(reversed(node.link.split("/")))
        return None


def _link_problem(tree: _Tree, inside: str, target: str) -> str | None:
    """Why the link member at `inside` cannot be unpacked, or None."""
    if not target or "\x00" in target or len(target.encode("utf-8", "surrogatepass")) > \
            MAX_LINK_TARGET:
        return "is a link with no usable target (empty, with a NUL, or too long)"
    if "\\" in target:
        return f"is a link that leads outside the workspace ({target})"
    found = tree.leads_out(inside.rpartition("/")[0], target)
    if found is None:
        return None
    out, why = found
    return f"is a link that {'leads outside the workspace' if out else 'cannot be resolved'}" \
           f" ({target}): {why}"


def _zip_link_target(archive: zipfile.ZipFile, info: zipfile.ZipInfo) -> str:
    """A zip link's target, its member's content: at most MAX_LINK_TARGET bytes and one
    more are read (a longer one is refused), undecodable bytes kept as os.fsdecode
    keeps them."""
    with archive.open(info) as source:
        return source.read(MAX_LINK_TARGET + 1).decode("utf-8", "surrogateescape")


def _members(path: Path) -> Iterator[tuple[str, str, str | None]]:
    """(name, kind, link target) of every member: kind is file, dir, symlink, hardlink or
    special."""
    if path.name.lower().endswith(".zip"):
        with zipfile.ZipFile(path) as archive:
            for info in archive.infolist():
                mode = info.external_attr >> 16
                if stat.S_ISLNK(mode):
                    yield info.filename, "symlink", _zip_link_target(archive, info)
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


def member_paths(path: Path, strip: int = 0) -> list[str] | None:
    """The paths of an archive's members other than directories, as unpacked (after
    `strip`), read without unpacking; None when it cannot be read."""
    try:
        return [inside for name, kind, _ in _members(path)
                if kind != "dir" and not _escapes(name)
                and (inside := _stripped(name, strip)) is not None]
    except (OSError, tarfile.TarError, zipfile.BadZipFile, EOFError):
        return None


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
    tree = _Tree()
    links: list[tuple[str, str, str]] = []  # (name, inside, target) of every link
    hardlinks: list[tuple[str, str]] = []  # (name, what it links to, as unpacked)
    try:
        for name, kind, link in _members(path):
            if _escapes(name):
                bad.append(f"member {name!r} would be written outside the workspace")
                continue
            inside = _stripped(name, strip)
            if inside is None:
                continue
            kept += 1
            conflict = tree.add(inside, kind, link)
            if conflict is not None:
                bad.append(f"member {name!r} {conflict}")
            elif kind == "special":
                bad.append(f"member {name!r} is a device or FIFO")
            elif kind == "symlink":
                links.append((name, inside, link or ""))
            elif kind == "hardlink" and link is not None:
                linked = None if _escapes(link) else _stripped(link, strip)
                if linked is None:
                    bad.append(f"member {name!r} is a hard link to {link}, outside what is "
                               "unpacked")
                else:
                    hardlinks.append((name, linked))
    except (OSError, tarfile.TarError, zipfile.BadZipFile, EOFError) as exc:
        return [f"cannot read {path.name}: {exc}"]
    # Judged once the whole tree is known: a link may lead through one listed after it.
    for name, inside, link in links:
        problem = _link_problem(tree, inside, link)
        if problem is not None:
            bad.append(f"member {name!r} {problem}")
    for name, linked in hardlinks:
        # A hard link to a link is another link with the same text somewhere else, where
        # it may lead out; through a link, it names a file wherever that link leads.
        if tree.link_on(linked):
            bad.append(f"member {name!r} is a hard link to {linked}, a link or inside one")
    if not bad and not kept:
        bad.append(f"nothing to unpack (strip: {strip} removes every member)" if strip
                   else "the archive is empty")
    if len(bad) > MAX_LISTED:
        bad = [*bad[:MAX_LISTED], f"and {len(bad) - MAX_LISTED} more unsafe member(s)"]
    return bad


def unpack(path: Path, target: Path, strip: int = 0) -> None:
    """Unpack the archive into `target`, an empty directory; SourceError if any member
    is unsafe (nothing is written then) or if, once written, a link leads out or a
    member cannot be written (what was written is removed then)."""
    problems = archive_problems(path, strip)
    if problems:
        raise SourceError(f"{path.name}: " + "; ".join(problems))
    try:
        links = _unpack_zip(path, target, strip) if path.name.lower().endswith(".zip") \
            else _unpack_tar(path, target, strip)
        _check_links(path, target, links)
    except BaseException:
        # Nothing of a refused archive is left to be used.
        _empty(target)
        raise


def _check_links(path: Path, target: Path, links: list[str]) -> None:
    """Resolve every link unpacked, on disk, inside `target`: the tree archive_problems
    judged should be the one written, and this makes sure of it (a file system that
    folds case or normalizes names, say, would make another)."""
    for inside in links:
        try:
            resolve_inside(target, inside)
        except ConfinementError as exc:
            raise SourceError(f"{path.name}: member {inside!r} is a link that leads outside "
                              f"the workspace once unpacked ({exc})") from None


def _empty(target: Path) -> None:
    """Remove everything in `target`, never through a link (remove_tree would list a
    linked directory's contents)."""
    with contextlib.suppress(OSError), os.scandir(target) as entries:
        for entry in list(entries):
            with contextlib.suppress(OSError):
                if entry.is_dir(follow_symlinks=False):
                    remove_tree(entry.path)
                else:
                    os.unlink(entry.path)


def _unpack_tar(path: Path, target: Path, strip: int) -> list[str]:
    """Write the tar's members into `target`; the paths of the links written."""
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
    # Hard links too: each is checked again where it was made.
    return [member.name for member in members if member.issym() or member.islnk()]


def _unpack_zip(path: Path, target: Path, strip: int) -> list[str]:
    """Write the zip's members into `target`; the paths of the links written."""
    links = []
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
            try:
                if stat.S_ISLNK(mode):  # first, as _members takes it: a link, even "l/"
                    destination.parent.mkdir(parents=True, exist_ok=True)
                    # The same text archive_problems judged.
                    destination.symlink_to(_zip_link_target(archive, info))
                    links.append(inside)
                elif info.is_dir():
                    destination.mkdir(parents=True, exist_ok=True)
                else:
                    destination.parent.mkdir(parents=True, exist_ok=True)
                    with archive.open(info) as source, open(destination, "xb") as sink:
                        shutil.copyfileobj(source, sink)
                    if mode & 0o111:
                        destination.chmod(0o755)
            except (OSError, zipfile.BadZipFile, EOFError) as exc:
                # A member given twice, a damaged one: refused, not a traceback.
                raise SourceError(f"{path.name}: member {info.filename!r}: {exc}") from None
    return links
