"""Workspace paths a check names that the task must provide (`GraderSpec.named_paths`:
the test files `tests_pass` runs), checked against what the task gives.

A named path is provided when it is one of the task's files, or a directory holding one:
its source at its commit (a git source's tree as the cache holds it, a directory's
files, an archive's members), `files`, `verify_files`, and the files `verify_patch`
touches. One that is none of these may still come from `setup:`, or from the agent
when writing it is the agent's job (`agents_job`): the prompt names it (its path, its
file name or, for a .py file, its module name), since an agent cannot write a file by
a name nobody told it. A name that is none of these is a mistake of the suite's, a
typo most often, whether or not the task hides tests (found by newcomers:
`tests/test_addd.py` passed validate and failed, as the agent's failure, an attempt
whose agent had fixed the bug; and in a task that hides no tests, so did a typo near
no test path, then taken for a file the agent was to write):

- Before any task (`evalctl validate` and `evalctl run` alike) it is an error at the
  entry's `file:line`, with the nearest test path the task does give; with `setup:` it
  is a warning (setup may make it).
- While grading, a named path that is not in the workspace, was not in the seed (what
  setup made is in it), and that the agent neither created nor deleted, is an error of
  the check (not counted as the agent's failure), unless writing it was the agent's
  job: then the agent did not, and the grader's failure says so.
"""

from __future__ import annotations

import difflib
import os
import re
from collections.abc import Iterable, Mapping
from pathlib import Path, PurePosixPath
from typing import Any

from evalctl._files import walk_files
from evalctl._sources.git import SourceError, default_cache
from evalctl._sources.model import ARCHIVE, DIR, GIT, Source
from evalctl._sources.patch import patch_paths

# pytest's default test file names: preferred when a nearest path is suggested.
_TEST_FILE = re.compile(r"^(test_.*|.*_test)\.py$")
# Files of a directory source read at most when the task's files are listed.
MAX_LISTED = 200_000


def named_path(written: str) -> str | None:
    """The workspace path a written name stands for (`tests/a.py::test_b` names
    `tests/a.py`), or None for one that names no path of the workspace (an option, an
    absolute path, one leading out of the workspace, the workspace itself)."""
    path = written.strip().split("::", 1)[0].removeprefix("./").rstrip("/")
    pure = PurePosixPath(path)
    if not path or path.startswith("-") or pure.is_absolute() or ".." in pure.parts \
            or path == ".":
        return None
    return pure.as_posix()


def is_provided(path: str, files: Iterable[str]) -> bool:
    """Whether `path` is one of `files`, or a directory holding one."""
    prefix = path + "/"
    return any(name == path or name.startswith(prefix) for name in files)


def asks_for(prompt: str, path: str) -> bool:
    """Whether the prompt names `path` for the agent to write: the path, its file name,
    or (a .py file) its module name, as a word of its own."""
    pure = PurePosixPath(path)
    names = {path, pure.name}
    if pure.suffix == ".py":  # also as a module: `test_x`, `tests/test_x`, `tests.test_x`
        module = path[:-len(".py")]
        names |= {pure.stem, module, module.replace("/", ".")}
    # A path may be written from the workspace's top (`./tests/test_x.py`): found by a
    # newcomer, such a prompt's file was refused as one nothing asked for.
    prompt = re.sub(r"(?<![\w./-])\./(?=[\w])", "", prompt)
    return any(re.search(rf"(?<![\w./-]){re.escape(name)}(?![\w-])", prompt)
               for name in names if name)


def agents_job(task: Any, path: str) -> bool:
    """Whether writing `path` is the agent's job: the prompt asks for it. (A task that
    hides no tests made it the agent's too, the tests it runs being the seed's or the
    agent's; but the agent cannot know a name the prompt does not give, and a typo
    failed its attempt.)"""
    return asks_for(task.prompt, path)


def nearest(path: str, files: Iterable[str]) -> str | None:
    """The test path among `files` (pytest's default test file names, and for a name
    without a suffix their directories) nearest to `path`, for a did-you-mean; None
    when none is near."""
    tests = sorted({name for name in files if _TEST_FILE.match(PurePosixPath(name).name)})
    if not PurePosixPath(path).suffix:  # a directory, probably
        tests += sorted({str(parent) for name in tests
                         for parent in PurePosixPath(name).parents if str(parent) != "."})
    found = difflib.get_close_matches(path, tests, n=1, cutoff=0.6)
    return found[0] if found else None


def source_files(source: Source | None) -> list[str] | None:
    """The files a source puts in the workspace, when that can be known without the
    network: None for a git source the cache does not hold yet, or a source that cannot
    be read (its own check reports why)."""
    if source is None:
        return []
    try:
        if source.kind == GIT:
            return default_cache().tree_paths(source)
        if source.kind == DIR:
            root = Path(source.location)
            if not root.is_dir():
                return None
            found = []
            for relative in walk_files(root):
                found.append(relative)
                if len(found) > MAX_LISTED:
                    return None
            return found
        if source.kind == ARCHIVE:
            from evalctl._sources.archive import member_paths

            return member_paths(Path(source.location), source.strip)
    except (SourceError, OSError, ValueError):
        return None
    return None


def task_files(task: Any, listed: dict[Source, list[str] | None]) -> set[str] | None:
    """Every file the task gives before the agent and after it (source, files,
    verify_files, verify_patch); None when its source's files cannot be known now.
    `listed` holds each source's files, listed once per load."""
    if task.source is not None and task.source not in listed:
        listed[task.source] = source_files(task.source)
    given = [] if task.source is None else listed[task.source]
    if given is None:
        return None
    return {*given, *task.files, *task.verify_files,
            *(patch_paths(task.verify_patch) if task.verify_patch else ())}


def missing_in_workspace(path: str, workspace: Path, task: Any, seed: Mapping[str, str],
                         changed: Mapping[str, str]) -> bool:
    """Whether nothing provided `path` by grading time: not in the workspace now, not
    given by the task itself (files, verify_files, verify_patch), not in the seed as
    evalctl recorded it when the attempt began (the source, and setup's work), and
    neither created nor deleted by the agent (a deletion of the agent's is its own
    doing). The records are evalctl's, in memory: found by an attacker round, code an
    earlier check ran deleted a later check's hidden test file (under `local`), which
    the seed copy on disk never held, and the check became the suite's "typo", an
    error left out of the score."""
    if os.path.lexists(workspace / path):
        return False
    given = {*task.files, *task.verify_files,
             *(patch_paths(task.verify_patch) if task.verify_patch else ())}
    return not (is_provided(path, given) or is_provided(path, seed)
                or is_provided(path, changed))
