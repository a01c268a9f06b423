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
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import subprocess
import tempfile
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path

from evalctl._errors import EvalctlError
from evalctl._sources.model import Source

GIT_TIMEOUT = 1800  # a first clone of a large repository takes minutes
LOCAL_TIMEOUT = 300


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


class SourceCache:
    """Cached repositories under `root`, shared by the attempts of a run and by runs."""

    def __init__(self, root: Path):
        self.root = root
        self._verified: set[tuple[str, str]] = set()  # (location, rev) known present
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
        Raises SourceError when the repository cannot be read or lacks the commit."""
        assert source.rev is not None
        key = (source.location, source.rev)
        repository = self.repository(source.location)
        with self._guard:
            if key in self._verified:
                return repository
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
        return repository

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
        steps = [["init", "--quiet", "--template=", str(target)],
                 ["-C", str(target), "fetch", "--quiet", "--depth", "1", "--no-tags",
                  repository.as_uri(), source.rev or ""],
                 ["-C", str(target), "checkout", "--quiet", "--detach", "FETCH_HEAD"]]
        for step in steps:
            done = git(step, env=env)
            if done.returncode != 0:
                raise SourceError(f"cannot check out {source.describe()}: {_failed(done)}")
        # FETCH_HEAD names the cache; nothing in the workspace should lead back to it.
        (target / ".git" / "FETCH_HEAD").unlink(missing_ok=True)
        if not keep_git:
            shutil.rmtree(target / ".git")


_default: SourceCache | None = None
_default_guard = threading.Lock()


def default_cache() -> SourceCache:
    """The cache of this process, under the user's cache directory."""
    global _default
    with _default_guard:
        if _default is None or _default.root != sources_dir():
            _default = SourceCache(sources_dir())
        return _default
