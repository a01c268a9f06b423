"""Git sources: one cached repository per URL, and a cheap working copy per attempt.

The cache (`~/.cache/evalctl/sources/git/`, or under XDG_CACHE_HOME or
EVALCTL_CACHE_DIR) holds a bare clone per URL or local path, fetched once and kept
across runs; a commit already there is never fetched again. Each attempt's workspace
is a new repository holding that one commit and nothing else, fetched from the cache
(`git fetch --depth 1`): cheap, no network, no hard link into the cache (a write in the
workspace cannot alter it), no remote that leads back to it, and no later commit (the
fix) in its history for the agent to find.

Fetching into the cache runs git with the user's own configuration (credentials,
proxies); everything else runs git with none (no system or global configuration, so
no filter, hook or helper of the user's takes part).

A commit's tree is measured before anything of it is checked out (once per commit and
process): a source whose files would not fit the bounds below is refused, since a
checkout is written on the host, outside any sandbox's limits. And a workspace's
repository is the agent's once it has worked there: `neutralise_repository_config`
takes out of it, after the attempt, what git would run on the host, checks that its
objects of the seed commit are what their ids name (else puts a new repository of the
seed commit in its place), and writes `refs/evalctl/seed`, the one ref the agent
cannot have forged.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import shutil
import stat
import subprocess
import tempfile
import threading
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import IO, NamedTuple

from evalctl._errors import EvalctlError
from evalctl._files import directory_inside, write_new_file
from evalctl._sources.model import GIT, Source

GIT_TIMEOUT = 1800  # a first clone of a large repository takes minutes
LOCAL_TIMEOUT = 300

# What one commit of a git source may hold: entries (files, links and directories),
# bytes of all files together, and bytes of its largest file. Checked from the commit's
# tree before it is checked out: the checkout is written on the host (the workspace and
# the seed copy), outside the sandbox's file_size_mb, memory and process limits, and a
# repository of a few hundred kilobytes can hold millions of files (one subtree named
# many times over) or a zero-filled blob of gigabytes. Real repositories are far below:
# django holds about 7,000 files and 100 MB, the Linux kernel about 90,000 and 1.5 GB.
MAX_SOURCE_ENTRIES = 200_000
MAX_SOURCE_BYTES = 5 * 1024 ** 3
MAX_SOURCE_FILE_BYTES = 1024 ** 3
# A tree entry's line in `git ls-tree` output longer than this is refused (no file
# system takes such a path; reading it whole would cost memory).
_MAX_RECORD_BYTES = 64 * 1024


class SourceError(EvalctlError):
    """A source that cannot be prepared: a missing commit, an unreachable repository,
    an unsafe archive. Before a run: exit 2; during one: an error of the attempt."""


def sources_dir() -> Path:
    explicit = os.environ.get("EVALCTL_CACHE_DIR")
    if explicit:
        return Path(explicit) / "sources"
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "evalctl" / "sources"


def _user_environment() -> dict[str, str]:
    """The user's environment for fetching (credentials, proxies), without variables
    that would point git at another repository, and never prompting."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("GIT_") or k in ("GIT_SSH", "GIT_SSH_COMMAND", "GIT_ASKPASS")}
    env["GIT_TERMINAL_PROMPT"] = "0"
    return env


def _neutral_environment(home: Path) -> dict[str, str]:
    """No configuration but git's defaults: nothing of the user's or the system's."""
    return {"PATH": os.environ.get("PATH") or os.defpath, "HOME": str(home),
            "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull,
            "GIT_TERMINAL_PROMPT": "0", "LANG": "C", "LC_ALL": "C"}


def git(args: Sequence[str], *, cwd: Path | None = None, env: dict[str, str] | None = None,
        timeout: float = LOCAL_TIMEOUT) -> subprocess.CompletedProcess[str]:
    """Run git; a SourceError with its own words when it fails."""
    if shutil.which("git") is None:
        raise SourceError("git is not installed (apt-get install git)")
    try:
        # No housekeeping left running in the background: it would write into a copy
        # an agent works in, and outlive the command that started it.
        done = subprocess.run(["git", "-c", "gc.autoDetach=false",
                               "-c", "maintenance.autoDetach=false", *args],
                              cwd=cwd, env=env, capture_output=True,
                              text=True, timeout=timeout, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        raise SourceError(f"git {args[0]} took longer than {timeout:g}s") from None
    return done


def _failed(done: subprocess.CompletedProcess[str]) -> str:
    text = (done.stderr or done.stdout).strip().splitlines()
    return "; ".join(line for line in text[-3:] if line) or f"exit {done.returncode}"


_UNMEASURED = object()


@contextlib.contextmanager
def _killed_after(process: subprocess.Popen[bytes], seconds: float
                  ) -> Iterator[threading.Event]:
    """`process` killed if it is still running `seconds` from now, within the block; the
    event yielded says whether it was."""
    expired = threading.Event()

    def expire() -> None:
        expired.set()
        process.kill()

    timer = threading.Timer(seconds, expire)
    timer.daemon = True
    timer.start()
    try:
        yield expired
    finally:
        timer.cancel()


def tree_problem(repository: Path, rev: str, max_entries: int, max_bytes: int,
                 max_file_bytes: int, *, timeout: float = LOCAL_TIMEOUT,
                 max_path_bytes: int | None = None,
                 env: dict[str, str] | None = None) -> str | None:
    """What makes commit `rev` of `repository` too big to check out (more entries,
    bytes in all, or bytes in one file than the bounds; with `max_path_bytes`, more
    bytes of paths in all), or None. Its tree is listed (`git ls-tree -r -t -l -z`,
    with no configuration, or in `env`) and read as it comes, and the listing is
    stopped at the first bound passed or after `timeout` seconds: a tree of a hundred
    million entries costs no more to refuse than one just past the bound."""
    if shutil.which("git") is None:
        raise SourceError("git is not installed (apt-get install git)")
    with tempfile.TemporaryFile() as errors:
        process = subprocess.Popen(
            ["git", *_RUN_NOTHING, "ls-tree", "-r", "-t", "-l", "-z", "--full-tree",
             "--end-of-options", rev],
            cwd=repository, env=env or _neutral_environment(repository),
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=errors)
        assert process.stdout is not None
        with _killed_after(process, timeout) as expired:
            try:
                problem = _measure(process.stdout, max_entries, max_bytes, max_file_bytes,
                                   max_path_bytes)
            finally:
                if process.poll() is None:
                    process.kill()
                process.stdout.close()
                process.wait()
        if problem is not None:
            return problem
        if expired.is_set():
            return f"its tree could not be listed within {timeout:g}s"
        if process.returncode != 0:
            errors.seek(0)
            said = errors.read(4096).decode("utf-8", "replace")
            raise SourceError(f"cannot list the tree of {rev}: " + _failed(
                subprocess.CompletedProcess(process.args, process.returncode, "", said)))
    return None


def _measure(stream: IO[bytes], max_entries: int, max_bytes: int,
             max_file_bytes: int, max_path_bytes: int | None = None) -> str | None:
    """Read `git ls-tree -r -t -l -z` records ("MODE TYPE OBJECT SIZE\tPATH\0") from
    `stream` until one passes a bound (what is wrong, with the figures) or the end."""
    entries = total = path_bytes = 0
    pending = b""
    while True:
        block = stream.read1(1 << 16)  # type: ignore[attr-defined]
        if not block:
            return None
        records = (pending + block).split(b"\0")
        pending = records.pop()
        if len(pending) > _MAX_RECORD_BYTES:
            return f"a tree entry's path is over {_MAX_RECORD_BYTES:,} bytes"
        for record in records:
            header, _, path = record.partition(b"\t")
            fields = header.split()
            entries += 1
            if entries > max_entries:
                return (f"its tree holds more than {max_entries:,} entries (files, links "
                        f"and directories; the bound is MAX_SOURCE_ENTRIES)")
            path_bytes += len(path)
            if max_path_bytes is not None and path_bytes > max_path_bytes:
                return (f"the paths of its first {entries:,} entries hold more than "
                        f"{max_path_bytes:,} bytes")
            if len(fields) < 4 or fields[1] != b"blob" or not fields[3].isdigit():
                continue  # a directory, or a submodule (not checked out)
            size = int(fields[3])
            if size > max_file_bytes:
                name = path.decode("utf-8", "backslashreplace")
                return (f"its file {name!r} is {size:,} bytes, over the bound of "
                        f"{max_file_bytes:,} for one file (MAX_SOURCE_FILE_BYTES)")
            total += size
            if total > max_bytes:
                return (f"its files hold more than {max_bytes:,} bytes (at least {total:,} "
                        f"in the first {entries:,} entries; the bound is MAX_SOURCE_BYTES)")


class SourceCache:
    """Cached repositories under `root`, shared by the attempts of a run and by runs."""

    def __init__(self, root: Path):
        self.root = root
        self._verified: set[tuple[str, str]] = set()  # (location, rev) known present
        # (location, rev, bounds) -> None (the commit's tree is within the bounds), or
        # why it is refused: measured once, however many attempts check it out.
        self._measured: dict[tuple[str, str, tuple[int, int, int]], str | None] = {}
        self._guard = threading.Lock()

    def repository(self, location: str) -> Path:
        digest = hashlib.sha256(location.encode()).hexdigest()[:24]
        name = "".join(c if c.isalnum() or c in "-_." else "-"
                       for c in Path(location.rstrip("/")).name)[:40] or "repo"
        return self.root / "git" / f"{name}-{digest}"

    @contextlib.contextmanager
    def _locked(self, repository: Path) -> Iterator[None]:
        """One writer per repository, across threads and processes."""
        import fcntl

        repository.parent.mkdir(parents=True, exist_ok=True)
        with open(repository.parent / f"{repository.name}.lock", "w") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)

    def ensure(self, source: Source) -> Path:
        """The cached repository holding `source.rev`, fetched if it is not there yet.
        Raises SourceError when the repository cannot be read, lacks the commit, or the
        commit holds more than the MAX_SOURCE_* bounds let be checked out (measured once
        per commit, and the verdict kept)."""
        assert source.rev is not None
        key = (source.location, source.rev)
        bounds = (MAX_SOURCE_ENTRIES, MAX_SOURCE_BYTES, MAX_SOURCE_FILE_BYTES)
        repository = self.repository(source.location)
        with self._guard:
            verdict = self._measured.get((*key, bounds), _UNMEASURED)
            if key in self._verified and verdict is None:
                return repository
        if isinstance(verdict, str):
            raise SourceError(verdict)
        with self._locked(repository):
            if not self._has(repository, source.rev):
                self._fetch(source, repository)
                if not self._has(repository, source.rev):
                    where = source.written or source.location
                    raise SourceError(f"commit {source.rev} is not in {where} (its branches "
                                      "and tags were fetched, and the commit itself asked "
                                      "for)")
        with self._guard:
            self._verified.add(key)
        if verdict is _UNMEASURED:
            problem = tree_problem(repository, source.rev, *bounds)
            where = source.written or source.location
            verdict = None if problem is None else \
                f"commit {source.rev[:12]} of {where} is too big to check out: {problem}"
            with self._guard:
                self._measured[(*key, bounds)] = verdict
        if verdict is not None:
            raise SourceError(verdict)
        return repository

    def tree_paths(self, source: Source) -> list[str] | None:
        """The paths of the files (and links) of commit `source.rev` as the cache holds
        it, without fetching anything: None when the cache does not hold that commit (a
        remote repository no run has fetched yet) or its tree cannot be listed."""
        repository = self.repository(source.location)
        if source.rev is None or not self._has(repository, source.rev):
            return None
        done = git(["ls-tree", "-r", "-z", "--name-only", f"{source.rev}^{{tree}}"],
                   cwd=repository, env=_neutral_environment(repository))
        if done.returncode != 0:
            return None
        return [name for name in done.stdout.split("\0") if name]

    def _has(self, repository: Path, rev: str) -> bool:
        if not (repository / "HEAD").is_file():
            return False
        done = git(["cat-file", "-e", f"{rev}^{{commit}}"], cwd=repository,
                   env=_neutral_environment(repository))
        return done.returncode == 0

    def _fetch(self, source: Source, repository: Path) -> None:
        where = source.written or source.location
        if source.local and not Path(source.location).exists():
            raise SourceError(f"{source.location} does not exist (paths are relative to the "
                              "suite file)")
        env = _user_environment()
        if not (repository / "HEAD").is_file():
            # Cloned beside the cache entry and renamed into place: a clone cut short
            # never looks like a cache entry.
            scratch = Path(tempfile.mkdtemp(prefix=".clone-", dir=repository.parent))
            try:
                done = git(["clone", "--bare", "--quiet", "--no-hardlinks", source.location,
                            str(scratch / "repo")], env=env, timeout=GIT_TIMEOUT)
                if done.returncode != 0:
                    raise SourceError(f"cannot clone {where}: {_failed(done)}")
                git(["config", "uploadpack.allowAnySHA1InWant", "true"],
                    cwd=scratch / "repo", env=_neutral_environment(scratch))
                shutil.rmtree(repository, ignore_errors=True)
                os.replace(scratch / "repo", repository)
            finally:
                shutil.rmtree(scratch, ignore_errors=True)
            if self._has(repository, source.rev or ""):
                return
        done = git(["fetch", "--quiet", "--tags", source.location,
                    "+refs/heads/*:refs/heads/*"], cwd=repository, env=env, timeout=GIT_TIMEOUT)
        if done.returncode != 0:
            raise SourceError(f"cannot fetch {where}: {_failed(done)}")
        if not self._has(repository, source.rev or "") and not source.local:
            # Servers that allow it hand over a commit no branch or tag points at.
            git(["fetch", "--quiet", source.location, source.rev or ""], cwd=repository,
                env=env, timeout=GIT_TIMEOUT)

    def check_out(self, source: Source, target: Path, *, keep_git: bool = True) -> None:
        """Make `target` (an empty directory) a repository holding only `source.rev`,
        checked out. Without `keep_git`, only the files are left."""
        repository = self.ensure(source)
        env = _neutral_environment(target)
        for step in _one_commit_steps(repository, target, source.rev or ""):
            done = git(step, env=env)
            if done.returncode != 0:
                raise SourceError(f"cannot check out {source.describe()}: {_failed(done)}")
        _no_growing_attributes(target / ".git")
        done = git(["-C", str(target), "checkout", "--quiet", "--detach", "FETCH_HEAD"],
                   env=env)
        if done.returncode != 0:
            raise SourceError(f"cannot check out {source.describe()}: {_failed(done)}")
        (target / ".git" / "info" / "attributes").unlink(missing_ok=True)
        # FETCH_HEAD names the cache; nothing in the workspace should lead back to it.
        (target / ".git" / "FETCH_HEAD").unlink(missing_ok=True)
        if not keep_git:
            shutil.rmtree(target / ".git")


def _one_commit_steps(repository: Path, target: Path, rev: str) -> list[list[str]]:
    """git's arguments that make `target` a repository holding commit `rev` of the cached
    `repository` and nothing else, before any checkout: the attempt's copy and one put
    in place of a copy whose objects cannot be trusted are made alike. A 64-digit
    commit is of a SHA-256 repository, which a SHA-1 one cannot fetch."""
    formats = ["--object-format=sha256"] if len(rev) == 64 else []
    return [["init", "--quiet", "--template=", *formats, str(target)],
            ["-C", str(target), "fetch", "--quiet", "--depth", "1", "--no-tags",
             repository.as_uri(), rev]]


class SeedOrigin(NamedTuple):
    """Where a workspace's repository came from: the git source (its `rev` the seed
    commit) and the cache it was fetched from."""

    source: Source
    cache: SourceCache


def seed_origin(source: Source | None) -> SeedOrigin | None:
    """Where a workspace seeded from `source` got its repository (the process's cache),
    for the check after the attempt; None for a source of another kind."""
    if source is None or source.kind != GIT or not source.rev:
        return None
    return SeedOrigin(source, default_cache())


# Attributes git applies at checkout with no configuration, from the tree's own
# .gitattributes, that make a file on disk far larger than in the tree (found by an
# attacker round: `ident` and `working-tree-encoding` wrote 47 times what the size check
# counted). The repository's info/attributes overrides the tree's for the checkout.
_NO_GROWTH = "* -ident -working-tree-encoding -filter\n"


def _no_growing_attributes(git_directory: Path) -> None:
    (git_directory / "info").mkdir(exist_ok=True)
    (git_directory / "info" / "attributes").write_text(_NO_GROWTH)


# evalctl's own $GIT_DIR/info/attributes, left by the clean-up after an attempt: the
# highest-precedence attributes file, it overrides every `.gitattributes` of the working
# tree (and the agent's macros), so that the user's `git status`, `git diff` (against
# refs/evalctl/seed too) and `git restore` read and write each file's bytes as they are
# (found by an attacker round: `guard.py working-tree-encoding=UTF-7` had git decode
# a file whose removed check Python no longer ran back to the seed's bytes; `ident`
# hid an edit inside `$Id: ... $`, and `text`, `eol` or the older `crlf` one of line
# ends). `-` unsets an attribute (no conversion, no filter), `!` makes it unspecified
# (git's default). So: no `ident`, `working-tree-encoding` or `filter`; `-text`, not
# `!text`, since with `text` unspecified git takes the agent's `crlf` attribute, or the
# user's core.autocrlf, and converts line ends again (`eol` counts only when `text` is
# not unset); `diff` and `merge` unspecified: git's own choice of a text or binary diff
# (`-diff` showed every change as "Binary files differ"; `diff=NAME` picks a driver the
# user's config may define) and its built-in merge, rather than the agent's.
_RAW_VIEW = b"* -ident -working-tree-encoding -filter -text !eol !diff !merge\n"


def _raw_view(directory: str, relative: str, done: dict[str, str]) -> None:
    """Leave _RAW_VIEW as `directory`'s info/attributes (the agent's was moved aside
    before; one already holding _RAW_VIEW, evalctl's of an earlier clean-up, is left).
    Said only when the agent's was replaced, or when it could not be written."""
    info = os.path.join(directory, "info")
    key = relative + "info/attributes"
    if _content(os.path.join(info, "attributes")) == _RAW_VIEW:
        return
    try:
        _make_ours(directory)
        if os.path.lexists(info) and not os.path.isdir(info):
            _set_aside(info, relative + "info", done,
                       why=" (not a directory: evalctl's info/attributes goes there)")
        if not os.path.isdir(info):
            os.mkdir(info)
        _make_ours(info)
        write_new_file(Path(info), "attributes", _RAW_VIEW)
    except OSError as exc:
        done[key] = f"NOT written: {exc.strerror or exc}: the working tree's " \
                    ".gitattributes can make git show other bytes than there are"
        return
    if key in done:
        done[key] += f"; evalctl's own is in its place (`{_RAW_VIEW.decode().strip()}`: " \
                     "git shows every file's bytes as they are)"


# What of a repository's configuration is kept after an attempt: settings that run
# nothing and point nowhere (key -> the values kept, None: any). Everything else — and
# git has dozens of keys that run a command (core.fsmonitor, core.hooksPath, core.pager,
# core.editor, core.sshCommand, diff.external, filter.*, alias.*, include.path...) —
# is dropped: listing what is safe cannot miss a key a newer git adds.
SAFE_CONFIG = {
    "core.repositoryformatversion": None, "core.filemode": None,
    "core.bare": frozenset({"false"}), "core.logallrefupdates": None,
    "core.symlinks": None, "core.ignorecase": None, "core.precomposeunicode": None,
    "extensions.objectformat": None, "extensions.refstorage": None,
    "user.name": None, "user.email": None,
}
# Read from a git directory besides its config and run or followed by git: hooks (run
# by commit, checkout, and by `git status` when it rewrites the index); commondir (the
# configuration and hooks of another directory, which could be the agent's TMPDIR);
# config.worktree (more configuration); a paused rebase, cherry-pick or revert's state,
# whose todo lists can hold `exec` lines that `git rebase --continue` runs.
_MOVED_ASIDE = ("hooks", "commondir", "config.worktree", "rebase-merge", "rebase-apply",
                "sequencer", "rr-cache",
                # Remotes defined in files, which `git remote -v` does not show and the
                # user's `git pull` fetches from.
                "remotes", "branches",
                # Object stores read besides the repository's own: a FIFO in TMPDIR
                # hangs every git command, a host repository's objects can be read.
                "objects/info/alternates", "objects/info/http-alternates",
                # What makes git show other than what is there: replacement objects
                # (`git replace HEAD <the agent's commit>` left the user's `git status`
                # and `git diff` empty over the agent's changes), grafted history, and
                # attributes (`* -diff` shows every change as "Binary files differ").
                "refs/replace", "info/grafts", "info/attributes",
                # A commit-graph is a cache git reads a commit's tree and parents from
                # instead of the commit itself, its entries never checked against it
                # (found by a check of this round: one naming another tree for the seed
                # commit left `git diff <seed commit>` empty over the agent's changes).
                # git works the same without one.
                "objects/info/commit-graph", "objects/info/commit-graphs")
# An operation in progress, left for the user's next command to finish, is named in
# capitals at a git directory's top (MERGE_MSG and MERGE_HEAD: `git commit` takes them as
# its message and second parent; MERGE_AUTOSTASH: a stash it applies; BISECT_*,
# NOTES_MERGE_*...): all of them but these, and the messages git wrote for an editor
# and reads no more, are moved aside.
_OPERATION_STATE = re.compile(r"(?![A-Z_]*_EDITMSG$)[A-Z][A-Z_]*")  # not a message
_NOT_OPERATION_STATE = frozenset({"HEAD", "ORIG_HEAD", "FETCH_HEAD", "EDIT_DESCRIPTION"})
_MAX_CONFIG_BYTES = 1 << 20
# A HEAD that is a link git reads as an old-style symbolic ref, when it names one.
_REF_NAME = re.compile(r"refs/[A-Za-z0-9._/-]{1,200}")
_OBJECT_ID = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")  # SHA-1 or SHA-256


def _names_a_ref(text: str) -> bool:
    return bool(_REF_NAME.fullmatch(text)) and ".." not in text


def neutralise_repository_config(workspace: Path, seed: Path | None = None, *,
                                 origin: SeedOrigin | None = None) -> dict[str, str]:
    """Take out of the repositories in `workspace` what git would run when a user runs
    it there on the host (`git status` in a kept workspace), once the agent (and all it
    started) is done: workspace-relative path -> what was done, {} when nothing was.

    Every git directory in the workspace is seen to: each `.git` (a `.git` that is a
    file or a link, which would send git to a directory of the agent's choosing, is
    renamed `.git.agent`), what lies in one (a submodule's under `.git/modules/`), and
    any directory git would take for a bare repository (HEAD, objects/ and refs/). In
    each, a `config` holding anything but SAFE_CONFIG's settings is renamed
    `config.agent` and replaced by its safe settings alone (unless it is a bare
    repository of the seed's, `seed` the seed copy, with the seed's config: a source's
    test fixture); `hooks` (unless it holds only git's `.sample` files), _MOVED_ASIDE's
    others and the state of an operation in progress (a merge's MERGE_MSG, a rebase's
    todo list) are renamed with an `.agent` suffix: renamed, not deleted, what the agent
    left stays there to read. Anything at any depth of it that is neither a file nor a
    directory is removed, a link's target said: git writes through a link
    (COMMIT_EDITMSG, logs/HEAD, a linked refs/heads/) to wherever it leads. The index is
    replaced by one made from HEAD (_replace_index), unless HEAD's tree is past the
    source bounds: the git directory is then set aside whole. A `.git`, and what lies
    in one, is left with evalctl's own info/attributes (_RAW_VIEW), which has git show
    every file's bytes as they are whatever the working tree's .gitattributes say; it
    is not said, and one found from an earlier clean-up is kept (done again, nothing is
    done). Links are never followed. What could not be done is said with a value
    starting "NOT".

    `origin`: the workspace's own repository (its `.git`) is a copy of that git source,
    and is then checked against the seed commit (_check_against_the_seed): its objects
    are what their ids name, or it is set aside for a new one; `refs/evalctl/seed` names
    the seed commit; a HEAD that does not is said."""
    done: dict[str, str] = {}
    # Absolute: git runs here with GIT_DIR set and another working directory.
    workspace = Path(os.path.abspath(workspace))
    # (path, workspace-relative path with a trailing "/", whether inside a .git)
    pending: list[tuple[str, str, bool]] = [(os.fspath(workspace), "", False)]
    repositories = 0
    while pending:
        directory, relative, in_git = pending.pop()
        listing = _listing(directory)
        if listing is None:
            if os.path.lexists(directory):  # too deep to name, say: said, to warn
                done[relative.rstrip("/") or "."] = "NOT looked in: it cannot be listed"
            continue
        repository = _looks_like_git_directory(directory, set(listing))
        if repository and not (origin is not None and relative == ".git/") and \
                not _our_empty_repository(directory, set(listing)):
            repositories += 1
            if repositories > MAX_REPOSITORIES and directory.endswith(".agent"):
                continue  # set aside already (by a clean-up before this one), as it stays
            if repositories > MAX_REPOSITORIES:
                # Past the bound, each is set aside whole, with no git run in it: git
                # runs several times for each, and 3,000 empty repositories an agent made
                # in seconds held evalctl for over a minute, twice (found by an attacker
                # round).
                _remove_all_links(directory, relative, done)
                _too_big_to_index(directory, relative, f"the workspace holds more than "
                                  f"{MAX_REPOSITORIES} git repositories", done, seeded=False)
                continue
        if repository:
            fixture = not in_git and relative != "" and \
                _as_in_seed(seed, relative, directory, set(listing))
            # Links first, at any depth: git would read the index, say, through one,
            # and what is renamed below must not be renamed through one.
            _remove_all_links(directory, relative, done)
            _neutralise_git_directory(directory, relative, set(_listing(directory) or {}),
                                      done, keep_config=fixture, in_git=in_git,
                                      seeded=origin is not None and relative == ".git/")
            listing = _listing(directory) or {}  # what was renamed is not walked
            # Inside a git directory only the repositories of submodules and worktrees
            # are looked for: its objects and refs run nothing, and may be millions.
            listing = {k: v for k, v in listing.items() if k in ("modules", "worktrees")}
        for name, kind in sorted(listing.items()):
            path, below = os.path.join(directory, name), relative + name
            if name == ".git" and kind != "directory":
                _set_aside(path, below, done,
                           why=" (a .git that is not a directory sends git to another one)")
            elif kind == "directory":
                pending.append((path, below + "/", in_git or name == ".git"))
    if origin is not None:
        _check_against_the_seed(os.fspath(workspace), origin, done)
    return dict(sorted(done.items()))


def _remove_all_links(top: str, relative: str, done: dict[str, str]) -> None:
    """_remove_links in `top` and every directory below it (links are not followed)."""
    pending = [(top, relative)]
    while pending:
        directory, below = pending.pop()
        listing = _listing(directory)
        if listing is None:
            done[below.rstrip("/")] = "NOT looked in for links: it cannot be listed"
            continue
        _remove_links(directory, below, listing, done)
        pending += [(os.path.join(directory, name), below + name + "/")
                    for name, kind in listing.items() if kind == "directory"]


def _remove_links(directory: str, relative: str, listing: dict[str, str],
                  done: dict[str, str]) -> None:
    """Remove what `listing` holds that is neither a file nor a directory, saying where
    a link led: git writes through a link (found by an attacker round: a
    `.git/logs -> /home/u/.ssh` had the user's `git commit` write there; a submodule's
    repository linked into TMPDIR had `git submodule update` run its hook), and would
    block on a FIFO. Removed, not renamed: a renamed link still leads where it did, and
    git would find it under a name the agent chose to match (a submodule called
    `sub.agent`). A HEAD that is a link naming a ref, as git once made them, is written
    as the file git makes now."""
    for name, kind in sorted(listing.items()):
        if kind != "other":
            continue
        path = os.path.join(directory, name)
        try:
            target = os.readlink(path) if os.path.islink(path) else None
            _make_ours(directory)
            os.unlink(path)
        except OSError as exc:
            done[relative + name] = f"NOT removed: {exc.strerror or exc}"
            continue
        done[relative + name] = "removed (neither a file nor a directory)" if target is None \
            else f"removed (a link to {target[:300]!r}, which git writes through)"
        if name == "HEAD" and target is not None and _names_a_ref(target):
            with contextlib.suppress(OSError):
                write_new_file(Path(directory), "HEAD", f"ref: {target}\n".encode())
                done[relative + name] += f"; HEAD now names {target}"


def _listing(directory: str) -> dict[str, str] | None:
    """Name -> "directory", "file" or "other" (a link, a FIFO, a socket, a device), of
    what `directory` holds; None when it cannot be read."""
    for attempt in range(2):
        found = {}
        try:
            with os.scandir(directory) as entries:
                for entry in entries:
                    try:
                        found[entry.name] = \
                            "directory" if entry.is_dir(follow_symlinks=False) else \
                            "file" if entry.is_file(follow_symlinks=False) else "other"
                    except OSError:
                        found[entry.name] = "other"
            return found
        except PermissionError:
            if attempt:
                return None
            # A directory the agent made unreadable is still looked in; one it can read
            # keeps the permissions it was given (they are part of what it left).
            try:
                _make_ours(directory)
            except OSError:
                return None
        except OSError:
            return None
    return None


def _looks_like_git_directory(directory: str, names: set[str]) -> bool:
    """Whether git would take `directory` for a repository's own directory: it is a
    .git, or holds HEAD, and objects/ and refs/ or a commondir (what git looks for)."""
    return "HEAD" in names and ({"objects", "refs"} <= names or "commondir" in names) or \
        os.path.basename(directory) == ".git"


def _as_in_seed(seed: Path | None, relative: str, directory: str, names: set[str]) -> bool:
    """Whether a repository-like directory outside any .git is one of the seed's own (a
    source's test fixture), with the seed's config byte for byte and no hooks: its
    config (a bare fixture's `core.bare = true`, say) is then the task author's, and
    kept. Anything else of it is seen to as in any repository."""
    if seed is None:
        return False
    theirs_directory = os.path.join(seed, relative)
    theirs = _listing(theirs_directory)
    if theirs is None or not _looks_like_git_directory(theirs_directory, set(theirs)):
        return False
    ours = _content(os.path.join(directory, "config"))
    if ours is None or ours != _content(os.path.join(theirs_directory, "config")):
        return False
    return "hooks" not in names or _only_samples(os.path.join(directory, "hooks"))


def _content(path: str, limit: int = _MAX_CONFIG_BYTES) -> bytes | None:
    """A regular file's bytes (never through a link), None when it is not one or holds
    more than `limit`."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_size > limit:
            return None
        data = os.read(fd, limit + 1)
        return None if len(data) > limit else data
    except OSError:
        return None
    finally:
        os.close(fd)


def _move_aside(path: str) -> str:
    """Rename `path` to `path.agent` (or `.agent.N`, or a random suffix, when that is
    taken: found by an attacker round, an agent that had made `hooks.agent` to
    `hooks.agent.999` kept its hooks); the new name's last component."""
    names = [f"{path}.agent", *(f"{path}.agent.{n}" for n in range(1, 10)),
             *(f"{path}.agent.{uuid.uuid4().hex[:12]}" for _ in range(5))]
    for target in names:
        if not os.path.lexists(target):
            os.rename(path, target)
            return os.path.basename(target)
    raise OSError(f"no free name to move {path} aside")


def _set_aside(path: str, key: str, done: dict[str, str], *, why: str = "",
               ours: bool = False) -> None:
    """_move_aside(path), said in `done[key]`: what it was moved to (and `why`), or that
    it could not be, for the caller to warn. `ours`: its directory is made the owner's
    to write first (an agent may have taken that away)."""
    try:
        if ours:
            _make_ours(os.path.dirname(path))
        done[key] = f"moved to {_move_aside(path)}{why}"
    except OSError as exc:
        done[key] = f"NOT moved aside: {exc.strerror or exc}"


def _neutralise_git_directory(directory: str, relative: str, names: set[str],
                              done: dict[str, str], *, keep_config: bool = False,
                              in_git: bool = True, seeded: bool = False) -> None:
    """Make the git directory `directory` safe (see neutralise_repository_config).
    `in_git`: it is a `.git` or lies in one (not a bare-looking directory among the
    workspace's files); `seeded`: it is the workspace's `.git` of a git source, which
    the check against the seed puts back if it is set aside here."""
    state = sorted(name for name in names if _OPERATION_STATE.fullmatch(name)
                   and name not in _NOT_OPERATION_STATE)
    for name in [*_MOVED_ASIDE, *state]:
        path = os.path.join(directory, name)
        if not os.path.lexists(path) or _empty_directory(path) or \
                (name == "hooks" and (keep_config or _only_samples(path))) or \
                (name == "info/attributes" and _content(path) == _RAW_VIEW):
            # Nothing in it (`git init` makes an empty branches/), or evalctl's own
            # attributes, left by an earlier clean-up (a regrade's copy, a resume).
            continue
        _set_aside(path, relative + name, done, ours=True)
    _without_replacements(directory, relative, done)
    exclude = os.path.join(directory, "info", "exclude")
    excluded = _content(exclude)
    if excluded is not None and any(line.strip() and not line.lstrip().startswith(b"#")
                                    for line in excluded.splitlines()):
        # It hides new files from `git status`; git's own holds only comments.
        _set_aside(exclude, relative + "info/exclude", done)
    if "config" in names and not keep_config:
        try:
            _make_ours(directory)
            _neutralise_config(os.path.join(directory, "config"), relative + "config", done)
        except OSError as exc:
            done[relative + "config"] = f"NOT rewritten: {exc.strerror or exc}"
    if any(path.startswith(relative) and what.startswith("NOT")
           for path, what in done.items()):
        # Part of it could not be made safe: git is not run there, even by evalctl (it
        # would run the hooks and fsmonitor left in place: found by an attacker round).
        done[relative + "index"] = "NOT checked: this git directory could not be made safe"
        return
    if not _replace_index(directory, relative, names, done, seeded=seeded):
        return  # set aside whole (and, for a .git, an empty one put in its place)
    _true_shallow(directory, relative, done)
    if os.path.basename(directory) == ".git":
        _keep_a_repository(directory, relative, done)
    # evalctl's attributes go in every git directory that is a `.git` or lies in one (a
    # submodule's, a nested repository's, one in the agent's HOME): a user may run git
    # in any of their working trees, and the same attributes hide changes there from
    # `git status` and `git diff` against the agent's HEAD, with or without a seed to
    # diff against. Not in a bare-looking directory among the workspace's files (it has
    # no working tree to convert; a file written there would be a change to the files
    # the agent left, which evalctl reports and a regrade's checks read), nor in a
    # fixture of the seed's (keep_config), which stays as the task's author made it.
    if in_git and not keep_config:
        _raw_view(directory, relative, done)


def _without_replacements(directory: str, relative: str, done: dict[str, str]) -> None:
    """packed-refs without its refs/replace/ entries (the agent's kept aside)."""
    path = os.path.join(directory, "packed-refs")
    try:  # read whole, whatever its size (found by an attacker round: 64 MB hid them)
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return
    with os.fdopen(fd, "rb") as handle:
        if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
            return
        kept, replaced = [], False
        for line in handle:
            if b" refs/replace/" in line:
                replaced = True
            else:
                kept.append(line)
    if not replaced:
        return
    try:
        moved = _move_aside(path)
        write_new_file(Path(directory), "packed-refs", b"".join(kept))
        done[relative + "packed-refs"] = f"rewritten without its refs/replace/ entries; " \
                                         f"the agent's is {moved}"
    except OSError as exc:
        done[relative + "packed-refs"] = f"NOT rewritten: {exc.strerror or exc}"


_MAX_SHALLOW = 1000
# The bytes of a shallow file's commits read to check it: real commits are a few
# hundred bytes, and a shallow clone's file names one, or a few.
_MAX_SHALLOW_BYTES = 16 * 1024 * 1024


class _TooBigToRead(Exception):
    """Objects git would hand evalctl's process that hold more than it reads."""


def _true_shallow(directory: str, relative: str, done: dict[str, str]) -> None:
    """A `shallow` naming only commits whose parents are missing, as a shallow fetch's
    does (found by an attacker round: one naming a commit whose parent is there hid the
    history before it from `git log`, as grafts did). Otherwise the agent's is moved
    aside and one of its true entries put in its place."""
    path = os.path.join(directory, "shallow")
    if not os.path.lexists(path):
        return
    data = _content(path, 64 * _MAX_SHALLOW)
    entries = [] if data is None else data.decode("ascii", "replace").split()
    why = "not as git writes it"
    if data is None or len(entries) > _MAX_SHALLOW or \
            not all(_OBJECT_ID.fullmatch(e) for e in entries):
        kept = None  # not what git writes: moved aside whole
    else:
        try:
            kept = _cut_where_history_is_missing(directory, entries)
        except _TooBigToRead as exc:
            kept, why = None, str(exc)
        else:
            if kept is None:
                done[relative + "shallow"] = "NOT checked: git could not read its commits"
                return
    if kept == entries:
        return
    try:
        moved = _move_aside(path)
        if kept:
            write_new_file(Path(directory), "shallow", "".join(f"{e}\n" for e in kept).encode())
        done[relative + "shallow"] = f"moved to {moved} ({why})" \
            if kept is None else f"moved to {moved} (it hid history that is there)" + \
            ("; one naming only commits whose parents are missing was made" if kept else "")
    except OSError as exc:
        done[relative + "shallow"] = f"NOT moved aside: {exc.strerror or exc}"


def _cut_where_history_is_missing(directory: str, entries: list[str]) -> list[str] | None:
    """The `entries` whose commits' parents are not all in the repository (None: git
    could not be asked). One `git cat-file --batch` for the commits, one
    `--batch-check` for their parents."""
    env = _environment_in(directory)

    def batch(option: str, lines: list[str]) -> bytes | None:
        done = _git_bytes(["cat-file", option], env,
                          data="".join(f"{line}\n" for line in lines).encode())
        return done.stdout if done is not None and done.returncode == 0 else None

    # The commits are read whole (their parents are in them), and an agent's commit
    # can be of any size (a message of a gigabyte is a megabyte compressed): their
    # sizes are asked first, and past _MAX_SHALLOW_BYTES in all none is read.
    sizes = batch("--batch-check", entries)
    if sizes is None:
        return None
    total = sum(int(fields[2]) for fields in map(bytes.split, sizes.splitlines())
                if len(fields) == 3 and fields[2].isdigit())
    if total > _MAX_SHALLOW_BYTES:
        raise _TooBigToRead(f"its commits hold {total:,} bytes, more than the "
                            f"{_MAX_SHALLOW_BYTES:,} evalctl reads to check it")
    raw = batch("--batch", entries)
    if raw is None:
        return None
    parents: dict[str, list[str]] = {}
    for entry in entries:
        header, _, raw = raw.partition(b"\n")
        fields = header.split()
        parents[entry] = []  # no such commit here: nothing it could hide
        if len(fields) != 3 or not fields[2].isdigit():
            continue  # "<oid> missing"
        size = int(fields[2])
        body, raw = raw[:size], raw[size + 1:]
        if fields[1] == b"commit":
            headers = body.split(b"\n\n", 1)[0].split(b"\n")
            parents[entry] = [line.split()[1].decode("ascii", "replace") for line in headers
                              if line.startswith(b"parent ") and len(line.split()) == 2]
    wanted = sorted({p for ps in parents.values() for p in ps})
    present: set[str] = set()
    if wanted:
        checked = batch("--batch-check", wanted)
        if checked is None:
            return None
        present = {line.split()[0].decode() for line in checked.splitlines()
                   if len(line.split()) == 3}
    return [e for e in entries if not parents[e] or not all(p in present
                                                             for p in parents[e])]


def _keep_a_repository(directory: str, relative: str, done: dict[str, str]) -> None:
    """Leave a .git that git takes for a repository: with a HEAD it cannot read, or no
    objects/ or refs/, git would go on up to the repository around the run directory
    (the user's project) and `git stash` there would take the user's own work (found
    by an attacker round). A HEAD git cannot read is moved aside for one naming a branch
    that says so."""
    head = os.path.join(directory, "HEAD")
    content = _content(head, 4096)
    text = content.decode("ascii", "replace").strip() if content is not None else ""
    valid = _OBJECT_ID.fullmatch(text) or (text.startswith("ref: ") and
                                           _names_a_ref(text[5:]))
    try:
        if not valid:
            if os.path.lexists(head):
                done[relative + "HEAD"] = f"moved to {_move_aside(head)} (git cannot " \
                                          "read it); HEAD now names refs/heads/" \
                                          "evalctl-head-moved-aside"
            else:  # none, or a link removed above
                done[relative + "HEAD"] = (done[relative + "HEAD"] + "; HEAD now" if
                                           relative + "HEAD" in done else "made (there "
                                           "was none): it") + " names refs/heads/" \
                                          "evalctl-head-moved-aside"
            write_new_file(Path(directory), "HEAD",
                           _MOVED_ASIDE_HEAD)
        for name in ("objects", "refs"):
            if not os.path.isdir(os.path.join(directory, name)):
                os.mkdir(os.path.join(directory, name))
                done[relative + name] = "made (there was none): git needs it to see a " \
                                        "repository here"
    except OSError as exc:
        done[relative + "HEAD"] = f"NOT made readable to git: {exc.strerror or exc}"


# --- a workspace's repository against its seed commit ---------------------------------

# The ref evalctl writes, once the attempt is over, naming the seed commit: what the
# agent did to HEAD, its branches and its commits, `git diff refs/evalctl/seed` shows.
SEED_REF = "refs/evalctl/seed"
# An object read whole to be parsed (a commit, or a tree: one of MAX_SOURCE_ENTRIES
# entries is a few megabytes) bigger than this is not the seed's.
_MAX_PARSED_BYTES = 256 * 1024 * 1024


def _check_against_the_seed(workspace: str, origin: SeedOrigin, done: dict[str, str]) -> None:
    """See that the git directory of `workspace`, a copy of `origin`'s seed commit the
    agent could write, shows the user that commit as it is: every object of the commit
    (_untrusted_objects) is what its id names, or the directory is set aside (as
    `.git.agent`: git looks for `.git` alone, walking up) and a new one holding the seed
    commit, fetched from evalctl's cache as the attempt's copy was, put in its place
    with an index made from it, so that `git status` and `git diff` show every change
    of the agent's. A workspace left with no `.git` (the agent removed it, or it was not
    a directory) is given one the same way: git would otherwise go on up to the
    repository around the run directory. Then `refs/evalctl/seed` is written
    (_write_seed_ref). Nothing is run in a git directory part of which could not be
    made safe."""
    rev = origin.source.rev or ""
    if not _OBJECT_ID.fullmatch(rev) or any(
            (path == ".git" or path.startswith(".git/")) and what.startswith("NOT")
            for path, what in done.items()):
        return
    directory = os.path.join(workspace, ".git")
    present = os.path.isdir(directory) and not os.path.islink(directory)
    problem = _untrusted_objects(directory, rev) if present else None
    if present and problem is None:
        _write_seed_ref(directory, rev, done)
        return
    if present:
        _set_aside(directory, ".git", done, ours=True,
                   why=f" (its objects cannot be trusted: {problem})")
        if done[".git"].startswith("NOT"):
            return
    before = done.get(".git")  # None: there was no .git
    failed = _fresh_repository(workspace, origin)
    if failed is not None:
        done[".git"] = f"NOT made again from the seed commit {rev}: {failed}" + \
            (f" (it was {before})" if before else "")
        return
    done[".git"] = (f"{before}; in its place, " if before else "made (there was none): ") + \
        f"a new .git holding the seed commit {rev} alone, fetched from evalctl's source " \
        "cache, with an index made from that commit: `git status` and `git diff` show " \
        "every change the agent made" + \
        ("; the agent's, its commits included, is kept to read" if before else "")
    _write_seed_ref(directory, rev, done)
    _raw_view(directory, ".git/", done)  # the working tree's .gitattributes are the agent's


def _fresh_repository(workspace: str, origin: SeedOrigin) -> str | None:
    """Make `workspace/.git` (absent) a repository holding the seed commit alone, fetched
    from evalctl's cache as the attempt's copy was (_one_commit_steps), HEAD on that
    commit (detached, as in the copy), and an index made from it: the working tree,
    the agent's, is left as it is. None, or what failed (an empty repository is left
    then, which keeps git in the workspace)."""
    target, rev = Path(workspace), origin.source.rev or ""
    try:
        repository: Path | None = origin.cache.ensure(origin.source)
        failed = None
    except SourceError as exc:
        repository, failed = None, str(exc)
    init, fetch = _one_commit_steps(repository or target, target, rev)
    directory = os.path.join(workspace, ".git")
    # Never the agent's HOME (the workspace, as the checkout's would be): git reads
    # attributes and ignore files under it.
    env = _environment_in(directory)
    steps = [(init, _neutral_environment(Path(directory)))]
    if repository is not None:
        steps += [([*_RUN_NOTHING, *fetch], env),
                  ([*_RUN_NOTHING, "update-ref", "--no-deref", "HEAD", rev], env),
                  ([*_RUN_NOTHING, "read-tree", rev], env)]
    for step, step_env in steps:
        try:
            made = git(step, env=step_env)
        except SourceError as exc:
            return str(exc)
        if made.returncode != 0:
            return _failed(made)
    # FETCH_HEAD names the cache; nothing in the workspace should lead back to it.
    with contextlib.suppress(OSError):
        os.unlink(os.path.join(directory, "FETCH_HEAD"))
    return failed


def _untrusted_objects(directory: str, rev: str) -> str | None:
    """Why the objects git reads in the git directory `directory` for commit `rev` (the
    commit, every tree and every file's blob of it) cannot be trusted: one is missing,
    unreadable, or is not what its id names. None when every one hashes to its id.

    git does not check an object's hash when it reads it (found by an attacker round:
    an agent wrote other content under the seed's blob id, as a loose object or in a
    newer pack, and the user's `git diff` showed nothing and `git restore` wrote the
    agent's code back). Every object is read by ONE `git cat-file --batch` and hashed
    as it comes ("<type> <size>\\0" and the content, SHA-1 or SHA-256 as the seed commit
    is named), a blob never held whole: a process per object would cost a fork and an
    exec for each of a source's thousands of files, and a trip through a pipe per
    object as long again; ids are fed to it a tree level at a time by a thread, while
    this one reads. The ids are taken from objects already checked, the first (the
    seed commit's) from evalctl: not from git's listing, which takes a commit's tree
    from a commit-graph the agent could have written."""
    algorithm = "sha1" if len(rev) == 40 else "sha256"
    try:
        process = subprocess.Popen(["git", *_RUN_NOTHING, "cat-file", "--batch"],
                                   env=_environment_in(directory), stdin=subprocess.PIPE,
                                   stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    except OSError as exc:
        return f"git could not be run: {exc.strerror or exc}"
    writers: list[threading.Thread] = []
    problem: str | None = "its objects could not be read"
    with _killed_after(process, LOCAL_TIMEOUT) as expired:
        try:
            problem = _read_and_hash(process, rev, algorithm, writers)
        except (OSError, ValueError) as exc:
            problem = f"its objects could not be read: {exc}"
        finally:
            if problem is not None:  # stopped in mid-answer, maybe: no more is wanted
                process.kill()
            assert process.stdin is not None and process.stdout is not None
            with contextlib.suppress(OSError):
                process.stdin.close()  # the end of the requests: cat-file is done
            process.wait()
            process.stdout.close()
            for writer in writers:
                writer.join()
    if expired.is_set():
        return f"its objects could not be read within {LOCAL_TIMEOUT:g}s"
    return problem


def _read_and_hash(process: subprocess.Popen[bytes], rev: str, algorithm: str,
                   writers: list[threading.Thread]) -> str | None:
    """_untrusted_objects's reading: level by level down the seed commit's trees."""
    assert process.stdin is not None and process.stdout is not None
    width = hashlib.new(algorithm).digest_size
    level: list[tuple[str, str, str]] = [(rev, "commit", "the seed commit")]
    seen = {rev}
    while level:
        writer = threading.Thread(target=_request, args=(process.stdin, level), daemon=True)
        writers.append(writer)
        writer.start()
        below: list[tuple[str, str, str]] = []
        for oid, kind, name in level:
            content, problem = _read_object(process.stdout, oid, kind, algorithm)
            if problem is not None:
                return f"{name} ({kind} {oid[:12]}) {problem}"
            if kind == "commit":
                first = content.split(b"\n", 1)[0].split(b" ")
                tree = first[1].decode("ascii", "replace") if len(first) == 2 and \
                    first[0] == b"tree" else ""
                if not _OBJECT_ID.fullmatch(tree) or len(tree) != 2 * width:
                    return f"{name} ({oid[:12]}) names no tree"
                below.append((tree, "tree", "its tree"))
                continue
            entries = _tree_entries(content, width)
            if entries is None:
                return f"{name} (tree {oid[:12]}) cannot be read as a tree"
            for mode, entry, child in entries:
                if mode == b"160000" or child in seen:
                    continue  # a submodule's commit is not in this repository
                seen.add(child)
                path = entry.decode("utf-8", "backslashreplace")
                below.append((child, "tree" if mode in (b"40000", b"040000") else "blob",
                              path if name == "its tree" else f"{name}/{path}"))
        level = below
    return None


def _request(stream: IO[bytes], level: list[tuple[str, str, str]]) -> None:
    try:
        stream.write("".join(f"{oid}\n" for oid, _, _ in level).encode())
        stream.flush()
    except (OSError, ValueError):  # cat-file is gone: the reader says why
        pass


def _read_object(stream: IO[bytes], oid: str, kind: str,
                 algorithm: str) -> tuple[bytes, str | None]:
    """One answer of `git cat-file --batch` to `oid`, which should be a `kind`: its
    content (a blob's is hashed, not kept), and what is wrong with it or None."""
    header = stream.readline(512)
    fields = header.split()
    if len(fields) == 2 and fields[1] == b"missing":
        return b"", "is missing"
    if len(fields) != 3 or not header.endswith(b"\n") or not fields[2].isdigit() or \
            fields[0] != oid.encode():
        return b"", "could not be read"
    if fields[1] != kind.encode():
        return b"", f"is a {fields[1].decode('ascii', 'replace')} under that id"
    size = int(fields[2])
    if size > (MAX_SOURCE_FILE_BYTES if kind == "blob" else _MAX_PARSED_BYTES):
        return b"", f"holds {size:,} bytes, more than the seed's can"
    digest = hashlib.new(algorithm, f"{kind} {size}\0".encode())
    kept: list[bytes] = []
    remaining = size
    while remaining:
        block = stream.read(min(remaining, 1 << 20))
        if not block:
            return b"", "could not be read whole"
        digest.update(block)
        if kind != "blob":
            kept.append(block)
        remaining -= len(block)
    if stream.read(1) != b"\n":
        return b"", "could not be read whole"
    if digest.hexdigest() != oid:
        return b"", "does not hash to its id: git reads other content under it"
    return b"".join(kept), None


def _tree_entries(content: bytes, width: int) -> list[tuple[bytes, bytes, str]] | None:
    """A tree object's entries (mode, name, object id), or None when it is not one."""
    entries = []
    position = 0
    while position < len(content):
        space = content.find(b" ", position)
        end = content.find(b"\0", space + 1) if space >= 0 else -1
        if end < 0 or end + 1 + width > len(content):
            return None
        entries.append((content[position:space], content[space + 1:end],
                        content[end + 1:end + 1 + width].hex()))
        position = end + 1 + width
    return entries


def _write_seed_ref(directory: str, rev: str, done: dict[str, str]) -> None:
    """Write `refs/evalctl/seed` (SEED_REF) naming the seed commit `rev`, in the git
    directory `directory` whose objects of that commit were checked: after the
    attempt, so the agent cannot have forged it, and `git diff refs/evalctl/seed` is
    the diff against the seed whatever it did to HEAD (found by an attacker round: a
    commit amended with the seed's author, dates and message left `git status` clean
    and `git log` alike but for the hash). HEAD and the branches are left where the
    agent put them (a task may ask it to commit); a HEAD on another commit is said.
    The agent's refs under refs/evalctl/, when they stand in the way, are deleted."""
    key = ".git/" + SEED_REF
    env = _environment_in(directory)
    cleared: list[str] = []

    def write() -> subprocess.CompletedProcess[str]:
        return git([*_RUN_NOTHING, "update-ref", "--no-deref", SEED_REF, rev], env=env)

    try:
        written = write()
        if written.returncode != 0:
            cleared = _clear_evalctl_refs(directory, env)
            written = write()
        if written.returncode != 0:
            done[key] = f"NOT written: {_failed(written)}"
            return
        head = git([*_RUN_NOTHING, "rev-parse", "--verify", "--quiet", "HEAD"], env=env)
    except SourceError as exc:
        done[key] = f"NOT written: {exc}"
        return
    named = head.stdout.strip() if head.returncode == 0 else ""
    notes = []
    if named != rev:
        notes.append(f"HEAD is {named}, not the seed commit" if named else
                     "HEAD names no commit")
        intended = _seed_files_back_in_the_index(directory, rev, env)
        if intended:
            notes.append(f"{intended} seeded file(s) HEAD does not hold, still in the working "
                         "tree, were marked intent-to-add, so that the diff shows them")
    if cleared:
        notes.append("the agent's refs in its way were deleted: " + ", ".join(cleared[:5]) +
                     (", ..." if len(cleared) > 5 else ""))
    if notes:
        done[key] = f"written, naming the seed commit {rev}; " + "; ".join(notes) + \
                    ": `git diff refs/evalctl/seed` shows every change since the seed"


def _seed_files_back_in_the_index(directory: str, rev: str, env: dict[str, str]) -> int:
    """Mark intent-to-add (`git add -N`) the seed's files that the index (made from
    HEAD) does not name and the working tree still holds as files: `git diff <tree>`
    compares only the paths the index names, so a seeded file the agent took out of
    it (`git rm --cached`, its name in `.gitignore`, committed) showed as deleted in
    `git diff refs/evalctl/seed`, whatever it holds now (found by an attacker round).
    How many were marked. The seed's tree is a source's, measured at its checkout;
    the index was measured before it was made."""
    worktree = os.path.dirname(directory)
    env = {**env, "GIT_WORK_TREE": worktree}
    seeded = _git_bytes(["ls-tree", "-r", "-z", "--name-only", "--full-tree", rev], env)
    listed = _git_bytes(["ls-files", "-z", "--full-name"], env, cwd=worktree)
    if seeded is None or listed is None or seeded.returncode != 0 or listed.returncode != 0:
        return 0
    missing = sorted(set(seeded.stdout.split(b"\0")) - set(listed.stdout.split(b"\0"))
                     - {b""})
    present = [path for path in missing if _regular_file_inside(Path(worktree), path)]
    if not present:
        return 0
    added = _git_bytes(["--literal-pathspecs", "add", "--intent-to-add", "--force",
                        "--pathspec-from-file=-", "--pathspec-file-nul"], env,
                       cwd=worktree, data=b"\0".join(present))
    return len(present) if added is not None and added.returncode == 0 else 0


def _regular_file_inside(root: Path, path: bytes) -> bool:
    """Whether `path` (a tree's, "/"-separated) names a regular file under `root`,
    reached through directories, none of them a link."""
    *parents, name = os.fsdecode(path).split("/")
    parent = directory_inside(root, parents)
    return parent is not None and (parent / name).is_file() and \
        not (parent / name).is_symlink()


def _clear_evalctl_refs(directory: str, env: dict[str, str]) -> list[str]:
    """Take the agent's refs under refs/evalctl out of the way of SEED_REF (a
    `refs/evalctl/seed/x` makes a ref `refs/evalctl/seed` impossible): the directory
    of loose ones moved aside, packed ones deleted. What they were, to be said."""
    cleared = []
    loose = os.path.join(directory, "refs", "evalctl")
    if os.path.lexists(loose):
        with contextlib.suppress(OSError):
            _make_ours(os.path.dirname(loose))
            cleared.append(f"refs/evalctl moved to refs/{_move_aside(loose)}")
    listed = git([*_RUN_NOTHING, "for-each-ref", "--format=%(objectname) %(refname)",
                  "refs/evalctl"], env=env)
    refs = [line.split(" ", 1) for line in listed.stdout.splitlines() if " " in line] \
        if listed.returncode == 0 else []
    if refs:
        _git_bytes(["update-ref", "--no-deref", "--stdin"], env,
                   data="".join(f"delete {name}\n" for _, name in refs).encode())
        cleared += [f"{name} ({oid[:12]})" for oid, name in refs]
    return cleared


def _git_bytes(args: Sequence[str], env: dict[str, str], *, data: bytes = b"",
               cwd: str | None = None) -> subprocess.CompletedProcess[bytes] | None:
    """evalctl's own git in an agent's repository (`env`; running nothing of it), bytes
    in (`data` on its standard input) and out; None when it could not be run or ran
    past LOCAL_TIMEOUT."""
    try:
        return subprocess.run(["git", *_RUN_NOTHING, *args], input=data, env=env, cwd=cwd,
                              capture_output=True, timeout=LOCAL_TIMEOUT)
    except (OSError, subprocess.TimeoutExpired):
        return None


# evalctl's own git in an agent's repository runs nothing of it, were anything left.
_RUN_NOTHING = ("-c", "core.hooksPath=/dev/null", "-c", "core.fsmonitor=false",
                "-c", "core.untrackedCache=false")


def _environment_in(directory: str) -> dict[str, str]:
    """The environment of evalctl's own git in the agent's git directory `directory`:
    no configuration but git's and the repository's, no replacement objects."""
    return {**_neutral_environment(Path(directory)), "GIT_DIR": directory,
            "GIT_NO_REPLACE_OBJECTS": "1"}


def _replace_index(directory: str, relative: str, names: set[str],
                   done: dict[str, str], *, seeded: bool = False) -> bool:
    """Put an index made from HEAD's tree in place of the agent's. git does not check
    the names of an index it reads from disk (found by attacker rounds: an entry
    `../../home/u/.gitconfig`, or `.git/hooks/post-checkout` hidden from a reader by a
    split index, an extended flag or a length field, was written by the user's `git
    restore .`), while it checks every name it takes from a tree; and no reading of the
    file but git's own can be trusted to be git's. When git reads the same entries from
    both, the agent's is simply replaced: what it held besides (assume-unchanged and
    skip-worktree flags that hide changes from `git status`, a cached tree a later
    `git commit` would record) is dropped with it. Else the agent's (and a split
    index's shared parts) is moved aside: what it staged and did not commit then shows
    as an unstaged change.

    HEAD's tree is measured first, as a source's commit is before its checkout
    (tree_problem, the MAX_SOURCE_* bounds and _MAX_INDEX_PATH_BYTES): a `.git` of a
    few kilobytes can name one subtree at every level, millions of entries, which
    read-tree would make an index of hundreds of megabytes of on the host, outside the
    sandbox's limits (found by an attacker round: 4 million entries, 856 MB in
    evalctl). Past them the whole git directory is set aside (_too_big_to_index):
    False is returned, nothing more is to be done in it. The listings compared are
    hashed as git writes them, never held.

    A git source's own repository (`seeded`) with no index is given one made from HEAD:
    with none, `git diff refs/evalctl/seed` shows every file as deleted and none of the
    agent's changes (found by an attacker round: the agent removed it)."""
    missing = "index" not in names
    if missing and not seeded:
        return True
    env = _environment_in(directory)
    index = os.path.join(directory, "index")
    try:
        problem = tree_problem(Path(directory), "HEAD", MAX_SOURCE_ENTRIES, MAX_SOURCE_BYTES,
                               MAX_SOURCE_FILE_BYTES, max_path_bytes=_MAX_INDEX_PATH_BYTES,
                               env=env)
        readable = True
    except SourceError:  # no commit there (`git init` and `git add`), or a broken one
        problem, readable = None, False
    if problem is not None:
        _too_big_to_index(directory, relative, "HEAD's tree is too big to make an index "
                          f"of: {problem}", done, seeded=seeded)
        return False
    with tempfile.TemporaryDirectory(prefix="evalctl-index-") as scratch:
        fresh = os.path.join(scratch, "index")
        try:
            built = git([*_RUN_NOTHING, "read-tree", "HEAD"],
                        env={**env, "GIT_INDEX_FILE": fresh}, timeout=LOCAL_TIMEOUT) \
                if readable else None
        except SourceError:
            built = None
        made = built is not None and built.returncode == 0 and os.path.isfile(fresh)
        if missing:
            if made:
                try:
                    _make_ours(directory)
                    _copy_new_file(fresh, directory, "index")
                    done[relative + "index"] = "made from HEAD (the agent had removed it)"
                except OSError as exc:
                    done[relative + "index"] = f"NOT made from HEAD: {exc.strerror or exc}"
            return True
        ours = _listing_digest(env, fresh, None) if made else None
        # The agent's is read no further than the length of ours: a longer one is not
        # the same (an index of a few megabytes, prefix-compressed, can list gigabytes).
        same = ours is not None and _listing_digest(env, index, ours[1]) == ours
        if same and made:
            try:
                _make_ours(directory)
                _copy_new_file(fresh, directory, "index")
            except OSError as exc:
                done[relative + "index"] = f"NOT replaced: {exc.strerror or exc}"
            return True
        for name in sorted(names):
            if name != "index" and not name.startswith("sharedindex."):
                continue
            _set_aside(os.path.join(directory, name), relative + name, done, ours=True)
        if not done.get(relative + "index", "").startswith("moved"):
            return True
        if made:
            with contextlib.suppress(OSError):
                _copy_new_file(fresh, directory, "index")
                done[relative + "index"] += " (it staged what HEAD does not hold); a new " \
                                            "one was made from HEAD"
                return True
    done[relative + "index"] += " (HEAD's tree could not be read: no index now)"
    return True


# The bytes of all the paths of HEAD's tree (directories included) past which no index
# is made of it: with MAX_SOURCE_ENTRIES alone, 200,000 entries of 64 KB paths (a name
# can be that long in a tree) would still be a 13 GB index. Real repositories are far
# below: the Linux kernel's paths hold about 4 MB.
_MAX_INDEX_PATH_BYTES = 64 * 1024 * 1024


# The HEAD evalctl gives a git directory whose own git cannot read (or an empty one in
# the place of one set aside): a branch whose name says so.
_MOVED_ASIDE_HEAD = b"ref: refs/heads/evalctl-head-moved-aside\n"
# Git directories made safe one by one (git runs in each) before the rest are set aside
# whole: an honest workspace holds a few (its own, submodules, a test fixture).
MAX_REPOSITORIES = 100


def _our_empty_repository(directory: str, names: set[str]) -> bool:
    """Whether `directory` is the empty repository _too_big_to_index put in a `.git`'s
    place (done again, nothing is done)."""
    if names - {"HEAD", "objects", "refs", "info"}:
        return False
    try:
        with open(os.path.join(directory, "HEAD"), "rb") as handle:
            return handle.read(100) == _MOVED_ASIDE_HEAD
    except OSError:
        return False


def _too_big_to_index(directory: str, relative: str, problem: str, done: dict[str, str],
                      *, seeded: bool) -> None:
    """Set aside the git directory `directory`, whose HEAD's tree is too big to make an
    index of (`problem`). The whole directory, not only its index: with no index, the
    user's first `git status` there would read the whole tree, and `git checkout`, `git
    stash` or `git reset --hard` write its millions of files, on the host; set aside,
    git does not find it unless asked to. A `.git` gets an empty repository in its
    place, HEAD naming a branch that says so (git would otherwise go on up to the
    repository around the run directory: _keep_a_repository), unless it is a git
    source's workspace's (`seeded`), which the check against the seed gives a new one
    of the seed commit."""
    key = relative.rstrip("/")
    # Its index first, inside it: a later clean-up (a regrade's copy, a resume) finds
    # the directory set aside with no index to make again, and leaves it as it is.
    index = ""
    if os.path.lexists(os.path.join(directory, "index")):
        _set_aside(os.path.join(directory, "index"), relative + "index", done, ours=True)
        if done[relative + "index"].startswith("NOT"):
            return
        index = "; its index is " + \
            done.pop(relative + "index").removeprefix("moved to ") + " in it"
    _set_aside(directory, key, done, ours=True, why=f" ({problem}{index})")
    if done[key].startswith("NOT") or seeded or os.path.basename(directory) != ".git":
        return
    try:
        os.mkdir(directory)
        for name in ("objects", "refs"):
            os.mkdir(os.path.join(directory, name))
        write_new_file(Path(directory), "HEAD", _MOVED_ASIDE_HEAD)
    except OSError as exc:  # git would go on up: said as what could not be made safe
        done[key] = f"NOT replaced by an empty repository: {exc.strerror or exc} (it " \
                    f"was {done[key]})"
        return
    done[key] += "; an empty repository is in its place, HEAD naming the branch " \
                 "evalctl-head-moved-aside"
    _raw_view(directory, relative, done)


def _listing_digest(env: dict[str, str], index: str, limit: int | None
                    ) -> tuple[str, int] | None:
    """What git reads from `index` (mode, object and name of every entry: `git ls-files
    --stage -z`), hashed as it comes, and its length; None when git cannot read it, it
    is longer than `limit` bytes, or it takes longer than LOCAL_TIMEOUT."""
    try:
        process = subprocess.Popen(["git", *_RUN_NOTHING, "ls-files", "--stage", "-z"],
                                   env={**env, "GIT_INDEX_FILE": index},
                                   stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                   stderr=subprocess.DEVNULL)
    except OSError:
        return None
    assert process.stdout is not None
    digest, length = hashlib.sha256(), 0
    with _killed_after(process, LOCAL_TIMEOUT) as expired:
        try:
            while block := process.stdout.read1(1 << 16):  # type: ignore[attr-defined]
                length += len(block)
                if limit is not None and length > limit:
                    return None
                digest.update(block)
        finally:
            if process.poll() is None:
                process.kill()
            process.stdout.close()
            process.wait()
    if expired.is_set() or process.returncode != 0:
        return None
    return digest.hexdigest(), length


def _copy_new_file(origin: str, directory: str, name: str) -> None:
    """`name` in `directory` made anew (never through a link) holding `origin`'s bytes,
    copied a block at a time."""
    parent = os.open(directory, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(name, dir_fd=parent)
        fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                     0o644, dir_fd=parent)
    finally:
        os.close(parent)
    with os.fdopen(fd, "wb") as target, open(origin, "rb") as source:
        shutil.copyfileobj(source, target, 1 << 20)


def _make_ours(directory: str) -> None:
    """Let the owner list, enter and write `directory` (the agent may have taken the
    permissions away: `chmod 555 .git` would keep its config where it is)."""
    mode = os.lstat(directory).st_mode
    if stat.S_ISDIR(mode) and mode & 0o700 != 0o700:
        os.chmod(directory, stat.S_IMODE(mode) | 0o700)


def _empty_directory(path: str) -> bool:
    try:
        return not os.path.islink(path) and os.path.isdir(path) and not os.listdir(path)
    except OSError:
        return False


def _only_samples(hooks: str) -> bool:
    """Whether a hooks directory (not a link) holds only git's own `*.sample` files,
    which git never runs."""
    if os.path.islink(hooks) or not os.path.isdir(hooks):
        return False
    try:
        return all(name.endswith(".sample") for name in os.listdir(hooks))
    except OSError:
        return False


def _neutralise_config(path: str, relative: str, done: dict[str, str]) -> None:
    """Replace a config holding more than SAFE_CONFIG by its safe settings alone, the
    agent's moved aside; leave one with nothing else untouched."""
    data = _content(path)
    settings = None if data is None else _config_settings(data)
    if settings is not None:
        dropped = sorted({key for key, value in settings
                          if key not in SAFE_CONFIG or (SAFE_CONFIG[key] is not None and
                                                        value.lower() not in SAFE_CONFIG[key])})
        if not dropped:
            return
        kept = [(k, v) for k, v in settings if k in SAFE_CONFIG and k not in dropped]
        why = "without " + ", ".join(dropped[:8]) + (", ..." if len(dropped) > 8 else "")
    else:
        kept, why = [], "unreadable, not a file, or too big to read"
    moved = _move_aside(path)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                 0o644)
    with os.fdopen(fd, "w", encoding="utf-8", errors="surrogateescape") as handle:
        handle.write(_config_text(kept))
    done[relative] = f"rewritten {why}; the agent's is {moved}"


def _config_settings(data: bytes) -> list[tuple[str, str]] | None:
    """A config file's (key, value) pairs as git reads them, includes not followed;
    None when git cannot read it. git reads a copy, from a directory of its own."""
    with tempfile.TemporaryDirectory(prefix="evalctl-config-") as scratch:
        copy = Path(scratch) / "config"
        copy.write_bytes(data)
        env = {**_neutral_environment(Path(scratch)), "GIT_CEILING_DIRECTORIES": scratch}
        done = git(["config", "--file", str(copy), "--no-includes", "--list", "-z"],
                   cwd=Path(scratch), env=env)
    if done.returncode != 0:
        return None
    settings = []
    for record in done.stdout.split("\0"):
        if record:
            key, _, value = record.partition("\n")
            settings.append((key, value))
    return settings


def _config_text(settings: list[tuple[str, str]]) -> str:
    """A config file holding `settings` (keys of a section and a name, no subsection)."""
    sections: dict[str, list[str]] = {}
    for key, value in settings:
        section, _, name = key.partition(".")
        quoted = value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") \
            .replace("\t", "\\t").replace("\b", "\\b")
        sections.setdefault(section, []).append(f'\t{name} = "{quoted}"\n')
    return "".join(f"[{section}]\n" + "".join(lines) for section, lines in sections.items())


_default: SourceCache | None = None
_default_guard = threading.Lock()


def default_cache() -> SourceCache:
    """The cache of this process, under the user's cache directory."""
    global _default
    with _default_guard:
        if _default is None or _default.root != sources_dir():
            _default = SourceCache(sources_dir())
        return _default
