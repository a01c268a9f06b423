"""Round 25's resource findings: a hard link costs the agent one system call and no disk,
so a file under many names must cost evalctl what one file costs: read once when
fingerprinted, copied once (and linked) in a regrade's copy. Asserted on what evalctl
read and wrote, never on time."""

from __future__ import annotations

import os
from pathlib import Path

from evalctl import _files
from evalctl._run.integrity import protected_snapshot
from evalctl._run.regrade import copy_tree
from evalctl._suite.model import Task
from evalctl._workspace import create_workspace, new_run_directory

from .test_resource_bounds_r24 import MB
from .test_resource_bounds_r24 import reads as reads  # the fixture


def _one_file_many_names(directory: Path, names: int, size: int = 2 * MB) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    first = directory / "big"
    first.write_bytes(os.urandom(size))
    for number in range(names):
        os.link(first, directory / f"link{number}")
    return first


def test_a_file_under_many_names_is_read_once_for_its_fingerprints(tmp_path, reads):
    """500 names of a 64 MB file were 32 GB for evalctl to hash after the attempt."""
    _one_file_many_names(tmp_path / "tree", 50)
    reads.bytes = 0
    found = _files.snapshot(tmp_path / "tree")
    assert len(found) == 51 and len(set(found.values())) == 1
    assert reads.bytes < 3 * MB, reads.bytes  # once, not 51 times


def test_the_changes_and_the_protected_snapshot_read_a_linked_file_once(tmp_path, reads):
    workspace = create_workspace(new_run_directory(tmp_path / "runs"), "t",
                                 {"tests/test_a.py": "x = 1\n"})
    _one_file_many_names(workspace.root / "tests", 50)
    reads.bytes = 0
    changes = workspace.changed_files()
    assert sum(change == "created" for change in changes.values()) == 51
    assert reads.bytes < 3 * MB, reads.bytes
    reads.bytes = 0
    task = Task(id="t", prompt="p", checks=[{"type": "file_exists", "path": "a"}],
                protected=("tests/*",))
    assert len(protected_snapshot(task, workspace.root)) == 52
    assert reads.bytes < 3 * MB, reads.bytes


def test_a_regrades_copy_keeps_a_files_names_linked_not_copied_each(tmp_path):
    """200 names of a 10 MB file were 2 GB of a regrade's copy."""
    first = _one_file_many_names(tmp_path / "left", 40)
    assert copy_tree(tmp_path / "left", tmp_path / "copy") == []
    copied = {os.lstat(path).st_ino for path in (tmp_path / "copy").iterdir()}
    assert len(copied) == 1  # one file, 41 names
    assert (tmp_path / "copy" / "link7").read_bytes() == first.read_bytes()
    assert os.lstat(tmp_path / "copy" / "big").st_ino != os.lstat(first).st_ino


def test_past_a_hundred_repositories_the_rest_are_set_aside_without_running_git(
        tmp_path, monkeypatch):
    """3,000 empty repositories an agent made in seconds had evalctl run git in each on
    the host, before and after grading: over a minute each time. Past MAX_REPOSITORIES
    each is set aside whole, an empty one of evalctl's in its place, and git is not run;
    done again, nothing is done."""
    import subprocess

    from evalctl._sources import git as git_sources

    monkeypatch.setattr(git_sources, "MAX_REPOSITORIES", 5)
    for tree, count in (("five", 5), ("w", 8)):
        for number in range(count):
            subprocess.run(["git", "init", "-q", str(tmp_path / tree / f"r{number}")],
                           check=True)
    launched: list[object] = []  # every git evalctl starts, by any of its calls
    real_run, real_popen = subprocess.run, subprocess.Popen
    monkeypatch.setattr(git_sources.subprocess, "run",
                        lambda *a, **k: launched.append(a) or real_run(*a, **k))
    monkeypatch.setattr(git_sources.subprocess, "Popen",
                        lambda *a, **k: launched.append(a) or real_popen(*a, **k))
    git_sources.neutralise_repository_config(tmp_path / "five")
    for_five, launched[:] = len(launched), []
    assert for_five > 0
    done = git_sources.neutralise_repository_config(tmp_path / "w")
    assert len(launched) == for_five  # the three past the bound ran no git
    aside = sorted(key for key, what in done.items()
                   if "the workspace holds more than 5 git repositories" in what)
    assert len(aside) == 3, done
    for key in aside:
        replaced = tmp_path / "w" / key
        assert (replaced / "HEAD").read_bytes() == b"ref: refs/heads/evalctl-head-moved-aside\n"
    again = git_sources.neutralise_repository_config(tmp_path / "w")
    assert not [key for key, what in again.items() if "more than 5" in what], again
    assert not [what for what in again.values() if what.startswith("NOT")], again
