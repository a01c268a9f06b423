"""Fresh workspaces: seeding, confinement, and what changed since the seed.

A run directory holds one workspace per task, and beside them (never inside) each
task's ledger (.ledgers/), its cassette (.cassettes/: the model exchanges, for replays),
its private state (its HOME and TMPDIR, one directory in .state/; the graders' in
.grading/) and a pristine copy of its seed (.seed/), so nothing leaks between tasks or
runs. Workspaces are kept after the run for inspection.
"""

from __future__ import annotations

import errno
import os
import time
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from evalctl._files import (
    IGNORED_DIRS,
    copy_file,
    fingerprint,
    real_directory,
    resolve_inside,
    snapshot,
    walk,
    write_all,
)
from evalctl._process import command_path
from evalctl._sources.model import Source
from evalctl._text import json_line

# The list of changed files is bounded: it is made in evalctl's own process, written
# whole into the ledger's task_end and handed to every grader, and the agent decides how
# many files it leaves (found by an attacker round: 300,000 empty files under paths of
# 3,900 bytes, 46 MB of disk, took evalctl to 5.8 GB and wrote a ledger line of 1.17 GB).
# Past either bound the rest is counted, not listed. Real work is far below: a virtual
# environment the agent makes is a few thousand files.
MAX_LISTED_CHANGES = 10_000
MAX_LISTED_BYTES = 4_000_000  # of paths and their digests, as JSON writes them


class ChangedFiles(dict[str, str]):
    """Workspace-relative path -> 'created' | 'modified' | 'deleted', sorted by path,
    and `omitted`: how many changes more were found and not listed (the list keeps at
    most MAX_LISTED_CHANGES entries and MAX_LISTED_BYTES of paths). While `omitted` is
    not 0, a path that is not listed is not known to be unchanged: whatever must know
    whether a file changed takes it as changed. Listed first: changes to paths that
    match the globs changed_files was given (a task's `protected`), then changes to
    seeded paths (modified, deleted: as many as the seed has), then created files."""

    def __init__(self, *args: object) -> None:
        super().__init__(*args)
        self.omitted = 0
        # The fingerprint of each listed created or modified path as the agent left it
        # (a regrade tells by them whether code a check ran changed the workspace since).
        self.digests: dict[str, str] = {}

    @property
    def complete(self) -> bool:
        return self.omitted == 0

    def note(self) -> str | None:
        """What a record says of a cut list, or None when nothing was left out."""
        if not self.omitted:
            return None
        return (f"the list of changed files was cut at {len(self)} entries: {self.omitted} "
                f"more changed path(s) are not listed (at most {MAX_LISTED_CHANGES} entries "
                f"and {MAX_LISTED_BYTES:,} bytes of paths are kept); a path not listed is "
                "not known to be unchanged")


def named_by(path: str, globs: Collection[str]) -> bool:
    """Whether one of `globs` names `path` (fnmatch, case-sensitive, `*` also matching
    "/"): how a task's `protected:` globs are read, wherever they are."""
    import fnmatch

    return any(fnmatch.fnmatchcase(path, glob) for glob in globs)


@dataclass
class Workspace:
    task_id: str
    root: Path
    home: Path
    tmp: Path
    ledger_path: Path
    seed_path: Path
    # The graders' HOME and TMPDIR, `.grading/<id>` (made by grading_state).
    grading_path: Path
    # What the agent starts with (the source, files:, and what setup made), relative
    # path -> sha256, taken when the seed copy is made: the one record the seed copy is
    # checked against and the agent's changes are measured from.
    seed: dict[str, str] = field(default_factory=dict)
    # The attempt's model exchanges, for replays (evalctl._agent.cassette); None: not kept.
    cassette_path: Path | None = None

    def resolve(self, user_path: str) -> Path:
        return resolve_inside(self.root, user_path)

    def changed_files(self, first: Collection[str] = ()) -> ChangedFiles:
        """What changed against the seed (see ChangedFiles), bounded whatever the agent
        left: the workspace is compared with the seed as it is walked, and what evalctl
        holds is the seed's paths and the changes it lists. `first`: globs (fnmatch, `*`
        also matching "/", as `protected` is read) whose changes are listed before any
        other, so that a check of them never depends on where the list was cut. A file
        that is not in the seed is not read (it is created, whatever it holds)."""
        before = self.seed
        seen: set[str] = set()
        ahead = _Listing()  # changes to paths `first` names
        seeded: list[tuple[str, str]] = []  # bounded by the seed
        created = _Listing()
        digests: dict[str, str] = {}
        linked: dict[tuple[int, ...], str] = {}  # a file under many names is read once
        for relative, entry in walk(self.root, mend=True):
            known = before.get(relative)
            now = None
            if known is not None:
                now = fingerprint(entry, linked)
                if now is None:  # unreadable: not there, as snapshot has it
                    continue
                seen.add(relative)
                if now == known:
                    continue
                change = "modified"
            else:
                change = "created"
            if first and named_by(relative, first):
                kept = ahead.add(relative, change)
            elif change == "modified":
                seeded.append((relative, change))
                kept = True
            else:
                kept = created.add(relative, change)
            if kept:  # read only when listed: what is cut is never read
                now = now if now is not None else fingerprint(entry, linked)
                if now is not None:
                    digests[relative] = now
        for relative in before:
            if relative not in seen:
                change = "deleted"
                if first and named_by(relative, first):
                    ahead.add(relative, change)
                else:
                    seeded.append((relative, change))
        listed = _Listing(omitted=ahead.omitted + created.omitted)
        for relative, change in [*ahead.kept, *seeded, *created.kept]:
            listed.add(relative, change)
        changes = ChangedFiles(sorted(listed.kept))
        changes.omitted = listed.omitted
        changes.digests = {path: digests[path] for path in changes if path in digests}
        return changes

    def adopt_setup(self) -> None:
        """What the task's setup made (a virtual environment, build output) is what the
        agent starts with, not its work: it goes into the seed copy (files and links; a
        repository's .git and bytecode caches never do), and the seed's hashes are
        taken again. A file is copied with its holes (a sparse file stays sparse) and
        its times, which the key of a large or sparse file holds."""
        now = snapshot(self.root)
        for relative in [p for p in self.seed if p not in now]:
            (self.seed_path / relative).unlink(missing_ok=True)
        for relative, digest in now.items():
            if self.seed.get(relative) == digest or digest.startswith("special:"):
                continue
            origin = self.root / relative
            parent = resolve_inside(self.seed_path, os.path.dirname(relative) or ".")
            parent.mkdir(parents=True, exist_ok=True)
            target = parent / os.path.basename(relative)
            if target.is_symlink() or target.is_file():
                target.unlink()
            if origin.is_symlink():
                target.symlink_to(os.readlink(origin))
            else:
                copy_file(origin, target, keep_times=True)
        self.seed = snapshot(self.seed_path)


class _Listing:
    """Changes kept up to the bounds (MAX_LISTED_CHANGES, MAX_LISTED_BYTES), the rest
    counted."""

    def __init__(self, omitted: int = 0):
        self.kept: list[tuple[str, str]] = []
        self.omitted = omitted
        self._bytes = 0

    def add(self, relative: str, change: str) -> bool:
        """Keep the change if there is room (True), else count it."""
        if len(self.kept) < MAX_LISTED_CHANGES and self._bytes <= MAX_LISTED_BYTES:
            # As the ledger's line holds it: `"path":"change",` (and its digest)
            size = len(json_line(relative).encode("utf-8")) * 2 + len(change) + 80
            if self._bytes + size <= MAX_LISTED_BYTES:
                self._bytes += size
                self.kept.append((relative, change))
                return True
            # Full: no later path is listed either (not even a shorter one), so what is
            # listed is all that was found up to the cut.
            self._bytes = MAX_LISTED_BYTES + 1
        self.omitted += 1
        return False


def new_run_directory(base: str | os.PathLike[str] = "eval_reports") -> Path:
    """eval_reports/workspaces-<timestamp>/, unique even for runs started together.

    Only its owner may enter it: while an attempt runs, its workspace holds whatever the
    agent made there (a setuid copy of a program, when evalctl runs as root, or a file
    any user could edit before the graders read it), and nobody else should reach that.
    """
    base_path = Path(base)
    base_path.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    for attempt in range(1, 10_000):
        candidate = base_path / (f"workspaces-{stamp}" + (f"-{attempt}" if attempt > 1 else ""))
        try:
            candidate.mkdir(mode=0o700)
        except FileExistsError:
            continue
        return candidate.resolve()
    raise RuntimeError(f"cannot create a run directory under {base_path}")


def ledger_path(run_dir: Path, task_id: str) -> Path:
    """Where a task's ledger lives: beside the workspaces, never inside one."""
    return Path(run_dir, ".ledgers", f"{task_id}.jsonl")


def cassette_path(run_dir: Path, name: str) -> Path:
    """Where an attempt's cassette lives: beside its ledger, never in a workspace."""
    return Path(run_dir, ".cassettes", f"{name}.jsonl")


def create_workspace(run_dir: Path, task_id: str, files: Mapping[str, str], *,
                     source: Source | None = None) -> Workspace:
    """A fresh workspace seeded with `source` (when given) and `files` on top, and its
    seed copy. Raises SourceError when the source cannot be prepared; the directories
    are left for the record."""
    workspace = new_workspace(run_dir, task_id)
    seed_workspace(workspace, files, source)
    return workspace


# Parents every attempt of a run shares (.state, .grading, .ledgers, .cassettes, .seed),
# made once per run directory and process: an attempt then makes only its own four
# directories.
_SHARED_PARENTS: set[str] = set()


def _make_shared_parents(base: str) -> None:
    for shared in (".state", ".grading", ".ledgers", ".cassettes", ".seed"):
        os.makedirs(f"{base}/{shared}", exist_ok=True)
    # Remembered, so that a seed copy's directory below it resolves in three calls
    # instead of an lstat for every component of its path.
    real_directory(f"{base}/.seed")
    _SHARED_PARENTS.add(base)


def new_workspace(run_dir: Path, task_id: str) -> Workspace:
    """The attempt's directories, empty: workspace, seed copy, and its HOME and TMPDIR,
    one directory (`.state/<id>`). The graders' (`.grading/<id>`) is grading_state's.

    Blocking (a directory costs from 40 to a few hundred microseconds of kernel time on
    some disks, beside which a task's Python is small): call it off the event loop. HOME
    and TMPDIR are one directory, as the graders' are, and none holds them: each
    directory of an attempt's is one made per task. Paths are put together as text:
    pathlib's parsing was a fifth of an attempt's start."""
    base = real_directory(os.fspath(run_dir))  # the attempt's paths are plain names
    root = f"{base}/{task_id}"
    state = f"{base}/.state/{task_id}"
    seed = f"{base}/.seed/{task_id}"
    if base not in _SHARED_PARENTS:
        _make_shared_parents(base)
    for directory in (root, state, seed):
        try:
            os.mkdir(directory)
        except FileExistsError:
            pass
        except FileNotFoundError:
            # The run directory was emptied since (removed and made again by a later run
            # of this process, say): every shared parent, the ledgers' and cassettes' too,
            # is made again, or this attempt's records would have nowhere to go.
            _make_shared_parents(base)
            os.makedirs(directory, exist_ok=True)
    run_path = Path(base)
    home = Path(state)
    return Workspace(task_id, Path(root), home, home, ledger_path(run_path, task_id),
                     Path(seed), Path(f"{base}/.grading/{task_id}"),
                     cassette_path=cassette_path(run_path, task_id))


def seed_workspace(workspace: Workspace, files: Mapping[str, str],
                   source: Source | None = None) -> None:
    """Put the seed into the (empty) workspace and its seed copy, and record its hashes.
    A git source's repository is in the workspace, not in the seed copy: the seed is
    the files."""
    write_seed(workspace.root, files, source, keep_git=True)
    write_seed(workspace.seed_path, files, source, keep_git=False)
    hashes = None if source is not None else _hashes_of(files)
    workspace.seed = hashes if hashes is not None else snapshot(workspace.seed_path)


def _hashes_of(files: Mapping[str, str]) -> dict[str, str] | None:
    """What `snapshot` of a seed made of these inline files alone gives, from the text
    instead of reading the copy back; None unless every path is plainly named (no '.',
    '..' or empty part, no directory snapshot passes over) so the two cannot differ."""
    import hashlib

    hashes = {}
    for relative, content in files.items():
        parts = relative.split("/")
        if any(part in ("", ".", "..") for part in parts) or \
                any(part in IGNORED_DIRS for part in parts[:-1]):
            return None
        hashes[relative] = hashlib.sha256(content.encode("utf-8")).hexdigest()
    return dict(sorted(hashes.items()))


def write_seed(directory: Path, files: Mapping[str, str], source: Source | None, *,
               keep_git: bool = False) -> None:
    """The one way a seed is made: the source at its commit, then `files:` on top."""
    if source is not None:
        from evalctl._sources.prepare import materialize

        materialize(source, directory, keep_git=keep_git)
    for relative, content in files.items():
        _write_seeded(os.fspath(resolve_inside(directory, relative)), content)


_SEEDED = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC


def _write_seeded(path: str, content: str) -> None:
    """Write one seeded file: parents made only when missing, and a link where it goes
    replaced, never followed (a source's link must not redirect a seeded file). Raw
    calls: three a file, where a text file object took six and more."""
    data = content.encode("utf-8")
    try:
        fd = os.open(path, _SEEDED, 0o666)
    except FileNotFoundError:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        fd = os.open(path, _SEEDED, 0o666)
    except OSError as exc:
        if exc.errno != errno.ELOOP:
            raise
        os.unlink(path)
        fd = os.open(path, _SEEDED, 0o666)
    try:
        write_all(fd, data)
    finally:
        os.close(fd)


def attempt_paths(run_dir: Path, name: str) -> dict[str, Path]:
    """Everything an attempt leaves in a run directory: its workspace, seed copy, state
    (its HOME and TMPDIR), the graders' state, ledger and cassette."""
    return {"workspace": run_dir / name, "seed": run_dir / ".seed" / name,
            "state": run_dir / ".state" / name, "grading": run_dir / ".grading" / name,
            "ledger": ledger_path(run_dir, name), "cassette": cassette_path(run_dir, name)}


def retire_attempt(run_dir: Path, name: str, into: Path) -> bool:
    """Move what an unfinished (or errored) attempt left to `into`, so it can be run
    again in a fresh workspace and nothing it did is lost. False when it left nothing."""
    moved = False
    for label, path in attempt_paths(run_dir, name).items():
        if not os.path.lexists(path):
            continue
        into.mkdir(parents=True, exist_ok=True)
        os.replace(path, into / (f"{label}.jsonl" if label in ("ledger", "cassette")
                                 else label))
        moved = True
    return moved


def sandbox_environment(home: Path, tmp: Path) -> dict[str, str]:
    """The environment of every sandboxed command, built from nothing: the harness's
    interpreter first on PATH (so `python` and `pytest` mean the ones evalctl runs on),
    the attempt's own HOME and TMPDIR, and a UTF-8 locale. No variable of the user's
    but PATH is passed on, so no credential can be."""
    return {"PATH": command_path(), "HOME": os.fspath(home),
            "TMPDIR": os.fspath(tmp), "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8"}


def grading_state(workspace: Workspace) -> tuple[Path, Path]:
    """A fresh HOME and TMPDIR for the graders of an attempt, apart from the agent's: one
    directory, `.grading/<id>`, serving as both. Nothing but the graders' own commands
    writes there, so nothing is gained by two, and a directory costs an inode (a few
    hundred microseconds of kernel time on a disk whose allocator passes over recently
    freed inodes). Blocking: call it off the event loop."""
    grading = workspace.grading_path
    grading.mkdir(exist_ok=True)
    return grading, grading
