"""Files as the harness touches them: confined to a root, hashed, written atomically.

Path confinement is what keeps the file tools and graders inside a workspace;
`snapshot` is how changes against the seed are found; `write_atomically` is how
reports are written so a reader never sees half of one.

A workspace is the agent's, so nothing here trusts what is in it: directories are
walked without recursion (no depth overflows the stack), special files (FIFOs, sockets,
devices) are never read, and big files are never read whole. The walks go by path, so
what lies beyond PATH_MAX (4,096 bytes of path) is not reached: a known limit, named in
the security model (docs/architecture.md)."""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import BinaryIO

# Caches tools write as a side effect, and a repository's own metadata (a git source's
# .git: its index and refs change with every `git status`): not the agent's work.
IGNORED_DIRS = frozenset({"__pycache__", ".pytest_cache", ".mypy_cache", ".ruff_cache", ".git"})


class ConfinementError(ValueError):
    """A path that would leave the workspace."""


def resolve_inside(root: Path, user_path: str) -> Path:
    """Resolve `user_path` against `root`, following symlinks, and refuse escapes."""
    return _resolve_inside(root, user_path)[1]


def _resolve_inside(root: Path, user_path: str) -> tuple[Path, Path]:
    """(the root's real path, `user_path` resolved inside it): one lookup of the root
    for both, so they cannot disagree."""
    if not isinstance(user_path, str) or not user_path.strip():
        raise ConfinementError("path must be a non-empty string")
    if "\x00" in user_path:
        raise ConfinementError("path contains a NUL byte")
    candidate = Path(user_path)
    try:
        real_root = real_directory(os.fspath(root))
        # A relative name starts from the root's real path: only its own parts are
        # looked at, not every component of the root again.
        resolved = Path(_real_path(user_path, "" if candidate.is_absolute() else real_root))
    except (RuntimeError, OSError) as exc:
        # A symlink loop, too many links or a path too long to resolve: the agent built
        # it, so it is a refusal, not a crash.
        raise ConfinementError(f"{user_path!r} cannot be resolved: "
                               f"{getattr(exc, 'strerror', None) or exc}") from None
    root_path = Path(real_root)
    if resolved != root_path and not resolved.is_relative_to(root_path):
        raise ConfinementError(
            f"{user_path!r} resolves outside the workspace; use paths inside it"
        )
    return root_path, resolved


# What the kernel follows before it says ELOOP; and the names one resolution may look
# at (each is an lstat), so that no web of links costs more than the kernel would spend.
MAX_LINKS = 40
MAX_NAMES = 8192


def _real_path(path: str, start: str = "") -> str:
    """os.path.realpath(start + "/" + path), where `start` is a real path with no link
    in it ("" is the root, and an absolute `path` starts there): a missing part and what
    follows it are kept as written, '..' is taken from what is resolved so far, at most
    MAX_LINKS links are followed and at most MAX_NAMES names looked at. Python's realpath
    follows any number: 16,000 links of 4 KB targets each took it about 50 s, the kernel
    11 ms."""
    import errno

    pending = list(reversed(path.split("/")))
    resolved = "" if start == "/" else start  # "" is the root
    links = names = 0
    while pending:
        name = pending.pop()
        if name in ("", "."):
            continue
        names += 1
        if names > MAX_NAMES:
            raise OSError(errno.ENAMETOOLONG, "too many names to resolve", path)
        if name == "..":
            resolved = resolved.rsplit("/", 1)[0]
            continue
        candidate = f"{resolved}/{name}"
        try:
            mode = os.lstat(candidate).st_mode
        except OSError:  # missing, or not a directory: kept as written
            resolved = candidate
            continue
        if not stat.S_ISLNK(mode):
            resolved = candidate
            continue
        links += 1
        if links > MAX_LINKS:
            raise OSError(errno.ELOOP, "too many levels of symbolic links", path)
        target = os.readlink(candidate)
        if target.startswith("/"):
            resolved = ""
        pending.extend(reversed(target.split("/")))
    return resolved or "/"


# root as given -> (its real path, device, inode). Resolving a root costs an lstat per
# component of it, for every file a grader or tool names; a cached answer is used only
# while both the root and the remembered path still lead to that same directory (two
# stats): a directory above either, renamed or swapped for a link, makes it resolve anew.
_REAL_ROOTS: dict[str, tuple[str, int, int]] = {}


def _still(path: str, known: tuple[str, int, int]) -> bool:
    """Whether `path` and the remembered real path both lead to the remembered directory."""
    try:
        given, real = os.stat(path), os.stat(known[0])
    except OSError:
        return False
    return (given.st_dev, given.st_ino) == known[1:] == (real.st_dev, real.st_ino)


def real_directory(root: str) -> str:
    """`root`'s real path (os.path.realpath), remembered while it leads to the same
    directory."""
    known = _REAL_ROOTS.get(root)
    if known is not None and _still(root, known):
        return known[0]
    real = _below_known(root)
    if real is None:
        real = os.path.realpath(root)
    with contextlib.suppress(OSError):
        info = os.stat(real)
        if len(_REAL_ROOTS) >= 4096:
            _REAL_ROOTS.clear()
        _REAL_ROOTS[root] = (real, info.st_dev, info.st_ino)
    return real


def _below_known(path: str) -> str | None:
    """The real path of `path` from its parent's remembered one when `path` itself is a
    plain name and no link (a new attempt's workspace under its run directory), else
    None."""
    head, tail = os.path.split(path)
    known = _REAL_ROOTS.get(head)
    if known is None or tail in ("", ".", "..") or not _still(head, known):
        return None
    try:
        if stat.S_ISLNK(os.lstat(path).st_mode):
            return None
    except OSError:
        return None
    return os.path.join(known[0], tail)


# Files bigger than this are fingerprinted by size and time instead of hashed: a seed
# comes from a suite's YAML and is never this big, so a change is still seen.
HASH_LIMIT_BYTES = 64 * 1024 * 1024
# A file over this size that is mostly holes is fingerprinted by size and time too, never
# read: `truncate -s 64M` costs the agent no disk, and 10,000 such files listed as created
# were 640 GB for evalctl to read (found by an attacker round). So what is read of a file
# is at most this much, or twice what the file really holds. Far above what a file system
# keeps inline in the inode (a few KB, reported as no blocks at all).
SPARSE_MIN_BYTES = 64 * 1024


def directory_inside(root: Path, parts: Sequence[str]) -> Path | None:
    """`root` joined with `parts`, when each step is a directory and none a link: for a
    path written in a tree the agent could have changed, where a link on the way would
    lead elsewhere."""
    here = root
    for part in parts:
        here = here / part
        if here.is_symlink() or not here.is_dir():
            return None
    return here


class WalkEntry:
    """What walk() yields for an entry: the part of os.DirEntry the walks use (`name`,
    `path`, `is_symlink()`, `stat()`), made from the name and type a listing gave. A
    DirEntry keeps its full path from the start, so holding a directory's entries to
    sort them held every path whole: 300,000 names under a path of 3,900 bytes were
    1.2 GB of evalctl's memory (found by an attacker round). Here the path is put
    together only when asked for."""

    __slots__ = ("_directory", "name", "_link")

    def __init__(self, directory: str, name: str, link: bool):
        self._directory, self.name, self._link = directory, name, link

    @property
    def path(self) -> str:
        return _joined(self._directory, self.name)

    def is_symlink(self) -> bool:
        return self._link

    def stat(self, *, follow_symlinks: bool = True) -> os.stat_result:
        return os.stat(self.path, follow_symlinks=follow_symlinks)


def _joined(directory: str, name: str) -> str:
    return f"{directory}{name}" if directory.endswith("/") else f"{directory}/{name}"


def _listing(directory: str, mend: bool = False
             ) -> tuple[list[tuple[str, bool]], list[str]] | None:
    """(non-directories as (name, is a link), sorted; subdirectories' names, sorted) of
    `directory`, or None when it cannot be read. Only names are kept, never a DirEntry
    (see WalkEntry). With `mend`, a directory whose mode keeps its owner from listing it
    is given its owner's permissions back first, as remove_tree does: code of the agent's
    can chmod one it made 0o311, its files still opened by name (imported), and an
    evalctl that does not run as root passed over them, created files with placeholders
    and all (found by an attacker round)."""
    others: list[tuple[str, bool]] = []
    below: list[str] = []
    try:
        try:
            listing = os.scandir(directory)
        except PermissionError:
            if not mend or not _make_ours(directory):
                raise
            listing = os.scandir(directory)
        with listing:
            for entry in listing:
                try:
                    if entry.is_dir(follow_symlinks=False):
                        if entry.name not in IGNORED_DIRS:
                            below.append(entry.name)
                        continue
                except OSError:
                    continue
                try:
                    link = entry.is_symlink()
                except OSError:  # gone since it was listed: what reads it will see
                    link = False
                others.append((entry.name, link))
    except OSError:
        return None
    others.sort()
    below.sort()
    return others, below


def walk(root: str | os.PathLike[str], *, max_depth: int | None = None, mend: bool = False
         ) -> Iterator[tuple[str, WalkEntry]]:
    """(relative POSIX path, entry) of everything under `root` that is not a directory,
    in sorted order, depth first (a directory's own entries before its subdirectories').
    Iterative, so no nesting is too deep (os.walk and Path.glob recurse on Python 3.11
    and fail past about a thousand levels); directory links are not followed and tool
    caches (IGNORED_DIRS) are skipped. `max_depth` 1 lists `root` alone. Directories that
    cannot be read are passed over, but with `mend` (a workspace's, whose directories
    are the agent's: see _listing). What it holds is the names of the directory being
    listed and of the subdirectories still to visit on the way down, never a path per
    name."""
    base = os.fspath(root)
    # One frame per directory on the way down: its path, its relative prefix, its depth
    # and the names of its subdirectories still to visit (last first).
    frames: list[tuple[str, str, int, list[str]]] = []
    directory, prefix, depth = base, "", 1
    while True:
        listed = _listing(directory, mend)
        if listed is not None:
            others, below = listed
            for name, link in others:
                yield prefix + name, WalkEntry(directory, name, link)
            if below and (max_depth is None or depth < max_depth):
                below.reverse()
                frames.append((directory, prefix, depth, below))
        while frames and not frames[-1][3]:
            frames.pop()
        if not frames:
            return
        parent, parent_prefix, parent_depth, names = frames[-1]
        name = names.pop()
        directory, prefix, depth = _joined(parent, name), f"{parent_prefix}{name}/", \
            parent_depth + 1


# A tree this small is walked and hashed on the event loop itself: handing the work to
# a thread costs more than the work (on two cores, a trip was several times the CPU of
# the few system calls it carried, most of it threads handing the GIL to each other).
SMALL_TREE_ENTRIES = 256
SMALL_TREE_BYTES = 1 << 20
# A directory that once held many names keeps its size on ext4 after they are removed,
# and every listing of it reads all of it (an emptied one of 300,000 names: 109 MB).
SMALL_DIRECTORY_BYTES = 64 * 1024


def small_tree(root: str | os.PathLike[str], *, entries: int = SMALL_TREE_ENTRIES,
               size: int = SMALL_TREE_BYTES, without: frozenset[str] = frozenset()) -> bool:
    """Whether the tree under `root` has at most `entries` entries (directories and
    what walk() skips included), `size` bytes of regular files, no directory over
    SMALL_DIRECTORY_BYTES and no entry named in `without` (what a step would have to
    remove: removing, like creating, is not the loop's to do). Stops at the first entry
    past a bound, and stats a directory before listing it, so its own cost is bounded
    too."""
    pending = [os.fspath(root)]
    seen = total = 0
    while pending:
        directory = pending.pop()
        try:
            if os.stat(directory).st_size > SMALL_DIRECTORY_BYTES:
                return False
            listing = os.scandir(directory)
        except OSError:
            # What cannot be looked in is not known to be small (a directory the agent
            # made unreadable could hold anything: a .git, found by an attacker round).
            return False
        with listing:
            for entry in listing:
                seen += 1
                if seen > entries:
                    return False
                if entry.name in without:  # a directory, or a link or file of that name
                    return False
                try:
                    if entry.is_dir(follow_symlinks=False):
                        pending.append(entry.path)
                        continue
                    info = entry.stat(follow_symlinks=False)
                except OSError:
                    continue
                if stat.S_ISREG(info.st_mode):
                    total += info.st_size
                    if total > size:
                        return False
    return True


def walk_files(root: str | os.PathLike[str]) -> Iterator[str]:
    """Every path under `root` that is not a directory (files, links, and special files
    such as FIFOs, which are listed but must not be opened), relative and POSIX-style,
    in sorted order. Iterative, so no depth overflows the stack (entries past PATH_MAX
    are not reached); linked directories are not entered
    and tool caches (`__pycache__`, `.pytest_cache`...) are skipped. Names that are not
    UTF-8 come as Python keeps them (surrogate escapes)."""
    for relative, _ in walk(root):
        yield relative


def remove_tree(top: str | os.PathLike[str]) -> None:
    """Delete `top` and everything under it, deepest first, without recursion (on Python
    3.11 shutil.rmtree recurses, and a tree a thousand deep raises RecursionError), and by
    directory descriptor, never by path: a tree deeper than PATH_MAX (4,096 bytes) is
    removed too (found by an attacker round: the agent's code, run by a check, made one in
    the graders' TMPDIR, which could then not be emptied, and the next check, the one that
    would fail, became an error; the attempt with it). Links are removed, never followed.
    A directory of the tree that cannot be listed or emptied for its mode (code of the
    agent's can chmod one it made 0o500) is given its owner's permissions back first;
    what still cannot be removed is left. Run it only once nothing can change the tree:
    it climbs back by "..", as strip_setid_bits does."""
    top = os.fspath(top)
    current = _open_directory(top)
    if current is None:
        return
    names: list[str] = []  # from `top` down to `current`
    pending: list[list[str]] = []  # per level: its subdirectories still to visit
    try:
        while True:
            # Each directory is listed once: its other entries removed, its
            # subdirectories kept to visit (a directory of 100,000 of them is not listed
            # again after each).
            subdirectories = []
            for name, is_dir in _entries_of(current):
                if is_dir:
                    subdirectories.append(name)
                else:
                    with contextlib.suppress(OSError):
                        _retried_at(os.unlink, name, current)
            pending.append(subdirectories)
            while True:
                if pending[-1]:
                    child = pending[-1].pop()
                    below = _open_directory(child, current)
                    if below is None:  # not to be opened: removed if it is empty
                        with contextlib.suppress(OSError):
                            _retried_at(os.rmdir, child, current)
                        continue
                    os.close(current)
                    current = below
                    names.append(child)
                    break
                pending.pop()
                if not names:
                    return
                parent = os.open("..", _DIRECTORY_FLAGS, dir_fd=current)
                os.close(current)
                current = parent
                with contextlib.suppress(OSError):
                    _retried_at(os.rmdir, names.pop(), current)
    except OSError:
        pass  # as far as it could go
    finally:
        os.close(current)
        if not names:
            with contextlib.suppress(OSError):
                _retried(os.rmdir, top, None)


_DIRECTORY_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def _open_directory(name: str, dir_fd: int | None = None) -> int | None:
    """A descriptor of the directory `name` (at `dir_fd`), never through a link, after
    giving it its owner's permissions back if its mode kept it from being opened; None
    when it cannot be."""
    for attempt in (1, 2):
        try:
            return os.open(name, _DIRECTORY_FLAGS, dir_fd=dir_fd)
        except PermissionError:
            if attempt == 2 or not _make_ours(name, dir_fd):
                return None
        except OSError:
            return None
    return None


def _entries_of(directory: int) -> list[tuple[str, bool]]:
    """(name, whether a directory, not through a link) of what the directory open at
    descriptor `directory` holds ([] when it cannot be listed)."""
    found = []
    with contextlib.suppress(OSError), os.scandir(directory) as entries:
        for entry in entries:
            try:
                found.append((entry.name, entry.is_dir(follow_symlinks=False)))
            except OSError:
                found.append((entry.name, False))
    return found


def _retried_at(remove: Callable[..., None], name: str, directory: int) -> None:
    """remove(name, dir_fd=directory); once more after giving the directory its owner's
    permissions back when its mode forbade it."""
    try:
        remove(name, dir_fd=directory)
    except PermissionError:
        mode = os.fstat(directory).st_mode
        os.fchmod(directory, stat.S_IMODE(mode) | stat.S_IRWXU)
        remove(name, dir_fd=directory)


def empty_directory(top: str | os.PathLike[str], keep: Iterable[str] = ()) -> list[str]:
    """Remove every entry of `top` whose name is not in `keep` (directories with what
    they hold, remove_tree's way: never through a link), leaving `top` itself; the names
    of the entries that were there and could not all be removed. One scandir when there
    is nothing to remove."""
    top, keep = os.fspath(top), frozenset(keep)
    present = [entry for entry in _entries(top) if entry.name not in keep]
    for entry in present:
        with contextlib.suppress(OSError):
            if entry.is_dir(follow_symlinks=False):
                remove_tree(entry.path)
            else:
                _retried(os.unlink, entry.path, top)
    return [entry.name for entry in present if os.path.lexists(entry.path)]


def _entries(directory: str) -> list[os.DirEntry[str]]:
    """The entries of `directory` ([] when it cannot be listed), after giving it its
    owner's permissions back if its mode kept them from being listed."""
    for attempt in (1, 2):
        try:
            with os.scandir(directory) as entries:
                return list(entries)
        except PermissionError:
            if attempt == 2 or not _make_ours(directory):
                return []
        except OSError:
            return []
    return []


def _retried(remove: Callable[[str], None], path: str, parent: str | None) -> None:
    """remove(path); once more after giving `parent` its owner's permissions back when
    its mode forbade it (None: not ours to change)."""
    try:
        remove(path)
    except PermissionError:
        if parent is None or not _make_ours(parent):
            raise
        remove(path)


def _make_ours(directory: str, dir_fd: int | None = None) -> bool:
    """Give a directory (never a link's target; at `dir_fd` when given) its owner's read,
    write and search permissions; whether it was done."""
    try:
        fd = os.open(directory, os.O_PATH | os.O_NOFOLLOW | os.O_DIRECTORY | os.O_CLOEXEC,
                     dir_fd=dir_fd)
    except (OSError, AttributeError):
        return False
    try:
        mode = os.fstat(fd).st_mode
        # A file descriptor opened with O_PATH cannot be fchmod-ed: through /proc, the
        # directory it holds, whatever its path now leads to.
        os.chmod(f"/proc/self/fd/{fd}", stat.S_IMODE(mode) | stat.S_IRWXU)
        return True
    except OSError:
        return False
    finally:
        os.close(fd)


def content_hash(path: str | os.PathLike[str], limit: int | None = None) -> str | None:
    """The sha256 of a regular file's content, whatever its size, or of its first `limit`
    bytes (never through a link; None when it is not a regular file or cannot be read).
    A file of the agent's is hashed with a `limit` the caller knows to be bounded (its
    seed's size, and a byte more so growth still changes the hash). Blocking."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        return _digest(fd, limit)
    except OSError:
        return None
    finally:
        os.close(fd)


def _digest(fd: int, limit: int | None = None) -> str:
    """The sha256 of what `fd` reads, in raw reads of 1 MB, to its end or `limit` bytes."""
    import hashlib  # here: plugins import this module, and list-plugins should stay quick

    digest = hashlib.sha256()
    left = limit
    while left is None or left > 0:
        block = os.read(fd, 1 << 20 if left is None else min(left, 1 << 20))
        if not block:
            break
        digest.update(block)
        if left is not None:
            left -= len(block)
    return digest.hexdigest()


def snapshot(root: Path) -> dict[str, str]:
    """Relative path -> fingerprint of everything in `root` that is not a directory:
    the content hash of a file, `symlink:TARGET` for a link, `special:KIND` for a FIFO,
    socket or device (never read: opening one could block or read for ever), and
    `size:N:MTIME` for a file over HASH_LIMIT_BYTES or one mostly holes (`mostly_holes`:
    its size costs its maker nothing, and reading it would cost evalctl all of it).
    Blocking work: callers on an event loop run it in a thread. It holds every path: for
    a tree the agent made, where their number has no bound, compare as you go
    (`fingerprints`, `fingerprint`)."""
    return dict(fingerprints(root))


def fingerprints(root: str | os.PathLike[str]) -> Iterator[tuple[str, str]]:
    """(relative path, fingerprint) of what `snapshot` holds, one at a time, in walk
    order: what cannot be read is left out, as snapshot leaves it out."""
    linked: dict[tuple[int, ...], str] = {}
    for relative, entry in walk(root, mend=True):
        found = fingerprint(entry, linked)
        if found is not None:
            yield relative, found


def fingerprint(entry: WalkEntry, linked: dict[tuple[int, ...], str] | None = None
                ) -> str | None:
    """The fingerprint `snapshot` records for one entry of walk(), or None when it
    cannot be read. `linked`, kept by the caller for one walk: the fingerprints of
    files with more than one name, by inode, so each such file is read once (a file of
    64 MB under 500 names, which cost the agent one file and 500 links, was 32 GB for
    evalctl to read, found by an attacker round)."""
    try:
        if entry.is_symlink():
            return "symlink:" + os.readlink(entry.path)
        info = entry.stat(follow_symlinks=False)
        if not stat.S_ISREG(info.st_mode):
            return f"special:{stat.filemode(info.st_mode)[0]}"
        if info.st_size > HASH_LIMIT_BYTES:
            return f"size:{info.st_size}:{info.st_mtime_ns}"
        inode = (info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns)
        if linked is not None and info.st_nlink > 1 and inode in linked:
            return linked[inode]
        fd = os.open(entry.path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    found = _opened_fingerprint(fd, info)
    if linked is not None and info.st_nlink > 1 and found is not None:
        linked[inode] = found
    return found


def _opened_fingerprint(fd: int, info: os.stat_result) -> str | None:
    """fingerprint's reading part, for a regular file open as `fd` (`info`: its lstat);
    closes `fd`."""
    try:  # raw reads: a buffered file object costs three more system calls a file
        opened = os.fstat(fd)
        if not stat.S_ISREG(opened.st_mode):  # swapped for a FIFO since the stat: not read
            return f"special:{stat.filemode(opened.st_mode)[0]}"
        if mostly_holes(fd, opened):
            return f"size:{opened.st_size}:{opened.st_mtime_ns}"
        # What the stat measured (and a byte more, so growth still changes the
        # hash): a file another process keeps growing cannot hold the walk.
        return _digest(fd, info.st_size + 1)
    except OSError:
        return None
    finally:
        os.close(fd)


def mostly_holes(fd: int, info: os.stat_result) -> bool:
    """Whether the regular file open as `fd` (`info`: its fstat) is over SPARSE_MIN_BYTES
    and mostly holes: less than half its size allocated, and a hole before its end. The
    hole is asked for (SEEK_HOLE) because blocks alone can mislead: a compressing file
    system allocates less than a dense file's size, and ZFS counts a new file's blocks
    only once they are written out. Where SEEK_HOLE is not known, the blocks decide."""
    if info.st_size <= SPARSE_MIN_BYTES or info.st_blocks * 512 >= info.st_size // 2:
        return False
    try:
        return os.lseek(fd, 0, os.SEEK_HOLE) < info.st_size
    except OSError:
        return True


def copy_file(origin: str | os.PathLike[str], destination: str | os.PathLike[str], *,
              keep_times: bool = False) -> bool:
    """Copy the regular file `origin` to `destination` (made, or emptied first) with its
    mode, and with `keep_times` its access and modification times to the nanosecond, as
    shutil.copy2 keeps them (what a snapshot keys a large or sparse file by). Its holes
    stay holes (`copy_data`): a copy shutil makes is dense, and a hard link to a
    `truncate -s 1000M` file, which cost the agent 4 KB, cost evalctl 1 GB of the host's
    disk (found by an attacker round). Neither path is followed through a link, and
    `origin` is not read unless it is a regular file (False then: nothing copied)."""
    fd = os.open(origin, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            return False
        copy = os.open(destination, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW
                       | os.O_CLOEXEC, 0o600)
        try:
            copy_data(fd, copy, info.st_size)
            os.fchmod(copy, stat.S_IMODE(info.st_mode))
            if keep_times:  # last: each write sets the time
                os.utime(copy, ns=(info.st_atime_ns, info.st_mtime_ns))
        finally:
            os.close(copy)
    finally:
        os.close(fd)
    return True


def copy_data(source: int, copy: int, size: int) -> None:
    """Copy the first `size` bytes of `source` to `copy`, reading and writing its data
    alone and leaving its holes holes (SEEK_DATA/SEEK_HOLE), so the work and the disk
    are what the file really holds: four `truncate -s 1000M` files take 4 KB in a run
    and must not take 4 GB in its copies. A file system without SEEK_DATA gets the
    whole file."""
    for start, end in _data_extents(source, size):
        position = start
        while position < end:
            block = os.pread(source, min(end - position, 1 << 20), position)
            if not block:
                break  # the file shrank while it was copied
            position += os.pwrite(copy, block, position)
    os.ftruncate(copy, size)  # the trailing hole, if any


def _data_extents(fd: int, size: int) -> Iterator[tuple[int, int]]:
    """The (start, end) byte ranges of `fd`'s first `size` bytes that hold data, in
    order, found as they are asked for (a file of many extents is never listed whole)."""
    import errno

    offset = 0
    while offset < size:
        try:
            start = os.lseek(fd, offset, os.SEEK_DATA)
        except OSError as exc:
            if exc.errno == errno.ENXIO:
                return  # nothing but a hole from here to the end
            if offset == 0 and exc.errno in (errno.EINVAL, errno.EOPNOTSUPP):
                yield 0, size  # no SEEK_DATA here: all of it is data
                return
            raise
        end = min(os.lseek(fd, start, os.SEEK_HOLE), size)
        if end <= start:
            return  # past `size`, or a hole punched while it was copied
        yield start, end
        offset = end


def write_all(fd: int, data: bytes) -> None:
    """Write all of `data` to `fd` with raw calls (os.write may write less than asked)."""
    while data:
        data = data[os.write(fd, data):]


def write_new_file(directory: Path, name: str, data: bytes, mode: int = 0o644) -> None:
    """`name` in `directory` made anew holding `data`, never written through a link: a
    link (or file) a sandbox left at that name is removed first, and the new file is
    created exclusively. For evalctl's own files in a directory a sandbox shared (an
    attempt's TMPDIR after its setup ran), which a plain open would follow anywhere."""
    parent = os.open(directory, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(name, dir_fd=parent)
        fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                     mode, dir_fd=parent)
    finally:
        os.close(parent)
    try:
        write_all(fd, data)
    finally:
        os.close(fd)


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
        # backslashreplace: a lone surrogate a reporter let through is written escaped,
        # not allowed to cost the report
        with os.fdopen(fd, "w", encoding="utf-8", errors="backslashreplace",
                       newline="\n") as handle:
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

    base, target = _resolve_inside(root, user_path)
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
