"""Round 24's resource findings: sparse files (`truncate -s 1000M f`, which cost the agent
no disk and no time) must not make evalctl itself, outside the sandbox and after the
attempt's time limit, read, copy or hold what they only appear to hold. Each test makes
real sparse files and asserts on what evalctl read, wrote or held (bytes counted at the
system calls, blocks allocated, traced memory), never on time."""

from __future__ import annotations

import hashlib
import os
import tracemalloc
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

import evalctl
import evalctl.testing
from evalctl import _files
from evalctl._files import content_hash, fingerprint, snapshot
from evalctl._run.integrity import (
    detach_protected_links,
    protected_changes,
    protected_changes_after_the_agent,
    protected_snapshot,
)
from evalctl._suite.model import Task
from evalctl._workspace import Workspace, create_workspace, new_run_directory

MB = 1 << 20


def _sparse(path: Path, size: int, head: bytes = b"") -> Path:
    """A file of `size` bytes, all of it a hole but `head` at its start."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as handle:
        handle.write(head)
        handle.truncate(size)
    return path


def _allocated(path: Path) -> int:
    return os.lstat(path).st_blocks * 512


class _Reads:
    """Bytes evalctl read (os.read, os.pread) from regular files under `root`."""

    def __init__(self, root: Path):
        self.root = os.path.realpath(root)
        self.bytes = 0

    def count(self, fd: int, data: bytes) -> bytes:
        try:
            where = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            return data
        if where.startswith(self.root + "/"):
            self.bytes += len(data)
        return data


@pytest.fixture
def reads(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> _Reads:
    """Counts what is read from files under tmp_path while the test runs."""
    counter = _Reads(tmp_path)
    read, pread = os.read, os.pread
    monkeypatch.setattr(os, "read", lambda fd, n: counter.count(fd, read(fd, n)))
    monkeypatch.setattr(os, "pread", lambda fd, n, at: counter.count(fd, pread(fd, n, at)))
    return counter


def _entry(path: Path) -> _files.WalkEntry:
    return _files.WalkEntry(os.fspath(path.parent), path.name, path.is_symlink())


def _workspace(tmp_path: Path, files: dict[str, str]) -> Workspace:
    return create_workspace(new_run_directory(tmp_path / "runs"), "t", files)


def _task(protected: tuple[str, ...] = ("tests/*",)) -> Task:
    return Task(id="t", prompt="p", checks=[{"type": "file_exists", "path": "a"}],
                protected=protected)


# ------------------------------------------------------------------------- fingerprints


def test_a_file_mostly_holes_is_fingerprinted_by_size_and_time_without_reading(tmp_path,
                                                                              reads):
    """10,000 listed `truncate -s 64M` files were 640 GB for changed_files to read: a
    file over SPARSE_MIN_BYTES that is mostly holes is keyed like a large file."""
    sparse = _sparse(tmp_path / "sparse.bin", 60 * MB, b"some data")
    key = fingerprint(_entry(sparse))
    info = os.stat(sparse)
    assert key == f"size:{info.st_size}:{info.st_mtime_ns}"
    assert reads.bytes == 0


def test_dense_and_small_files_are_still_hashed_by_content(tmp_path, reads):
    """Honest files keep their content hash: a dense file of the same size, and a small
    file with a hole (below SPARSE_MIN_BYTES: read, at most that much)."""
    dense = tmp_path / "dense.bin"
    dense.write_bytes(b"x" * (2 * MB))
    small = _sparse(tmp_path / "small.bin", _files.SPARSE_MIN_BYTES, b"head")
    assert fingerprint(_entry(dense)) == hashlib.sha256(dense.read_bytes()).hexdigest()
    assert fingerprint(_entry(small)) == hashlib.sha256(small.read_bytes()).hexdigest()


def test_the_changes_of_a_workspace_of_sparse_files_are_listed_without_reading_them(
        tmp_path, reads):
    """Created and seeded files alike: what changed_files reads is what they hold."""
    workspace = _workspace(tmp_path, {"notes.txt": "seeded\n"})
    for number in range(50):
        _sparse(workspace.root / f"made/f{number}.bin", 64 * MB)
    _sparse(workspace.root / "notes.txt", 500 * MB, b"seeded\n")
    reads.bytes = 0
    changes = workspace.changed_files()
    assert changes["notes.txt"] == "modified"
    assert sum(change == "created" for change in changes.values()) == 50
    assert all(digest.startswith("size:") for digest in changes.digests.values())
    assert reads.bytes == 0


# ------------------------------------------------------------------------ protected files


def test_protected_files_the_seed_does_not_hold_are_not_read(tmp_path, monkeypatch, reads):
    """40 sparse 1000 MB files under a protected `tests/*` held evalctl for two minutes:
    a created protected file (or one of another size than the seed's) is a change
    already, and is not hashed, however large it appears."""
    monkeypatch.setattr(_files, "HASH_LIMIT_BYTES", 1000)  # 3,000 bytes is "large" here
    workspace = _workspace(tmp_path, {"tests/test_a.py": "x = 1\n"})
    for number in range(5):
        _sparse(workspace.root / f"tests/blob{number}", 1000 * MB)
    (workspace.root / "tests/dense.bin").write_bytes(b"d" * 3000)  # dense, over the limit
    reads.bytes = 0
    keys = protected_snapshot(_task(), workspace.root)
    assert all(keys[f"tests/blob{n}"].startswith("size:") for n in range(5))
    assert keys["tests/dense.bin"].startswith("size:")
    assert reads.bytes <= len("x = 1\n") + 1  # the seeded test alone


def test_a_seeded_large_protected_file_is_still_hashed_and_within_the_seeds_size(
        tmp_path, monkeypatch, reads):
    """A protected file the seed holds at the same size is keyed by its content (a time
    can be set back); grown by the agent to a sparse gigabyte it is a change, found
    from its size, and what is read is bounded by the seed: before and after the
    checks, against the seed's record, and in a regrade."""
    monkeypatch.setattr(_files, "HASH_LIMIT_BYTES", 1000)
    workspace = _workspace(tmp_path, {"tests/ref.bin": "r" * 3000, "tests/big.bin": "b" * 3000})
    workspace.seed = snapshot(workspace.seed_path)  # as a seed over the limit is keyed
    assert workspace.seed["tests/ref.bin"].startswith("size:")
    _sparse(workspace.root / "tests/big.bin", 1000 * MB, b"b" * 3000)
    task = _task()
    reads.bytes = 0
    keys = protected_snapshot(task, workspace.root)
    assert keys["tests/ref.bin"] == content_hash(workspace.seed_path / "tests/ref.bin")
    assert keys["tests/big.bin"].startswith("size:1048576000:")
    assert reads.bytes <= 2 * 3001

    reads.bytes = 0
    failed = protected_changes(task, workspace.changed_files(task.protected), workspace)
    assert failed is not None and not failed.passed
    assert "tests/big.bin (modified)" in failed.detail and "ref.bin" not in failed.detail
    assert reads.bytes <= 4 * 3001

    reads.bytes = 0
    # A regrade: the agent's record names big.bin, so only a change since is reported.
    assert protected_changes_after_the_agent(task, workspace, {"tests/big.bin": "modified"},
                                             ()) is None
    assert reads.bytes <= 4 * 3001


def test_a_seeded_protected_file_rewritten_with_holes_and_the_same_content_is_untouched(
        tmp_path):
    """Keyed by size and time now and by its hash in the seed, a protected file the agent
    rewrote sparse with the seed's content is compared by content, as a rewrite with the
    same bytes always was: not touched. With other content it is."""
    content = "\0" * (4 * MB)
    workspace = _workspace(tmp_path, {"tests/zeros.bin": content, "tests/other.bin": content})
    for name, head in (("zeros.bin", b""), ("other.bin", b"changed")):
        (workspace.root / "tests" / name).unlink()
        _sparse(workspace.root / "tests" / name, 4 * MB, head)
    task = _task()
    changes = workspace.changed_files(task.protected)
    assert changes["tests/other.bin"] == "modified"
    outcome = protected_changes(task, changes, workspace)
    assert outcome is not None and not outcome.passed
    assert "tests/other.bin (modified)" in outcome.detail and "zeros" not in outcome.detail


# ---------------------------------------------------------------------------- sparse copies


def test_a_hard_linked_protected_file_the_agent_made_is_not_copied(tmp_path):
    """Three hard-linked sparse 1000 MB files were 3 GB that evalctl wrote on the host,
    and (round 25) one 10 MB file under 150 names under `tests/*` was 1.5 GB: a protected
    file the seed does not hold is a change already, which fails the task, and is not
    given an inode of its own (the copy, where one is made, keeps holes: below)."""
    workspace = _workspace(tmp_path, {"tests/test_a.py": "x = 1\n"})
    blob = _sparse(workspace.root / "tests/blob", 200 * MB, b"head")
    (workspace.root / "tests/dense").write_bytes(b"d" * MB)
    for number in range(20):
        os.link(blob, workspace.root / f"tests/link{number}")
        os.link(workspace.root / "tests/dense", workspace.root / f"tests/dense{number}")
    task = _task()
    before = protected_snapshot(task, workspace.root)
    detach_protected_links(task, workspace.root, before)
    assert os.lstat(blob).st_nlink == 21 and os.lstat(workspace.root / "tests/dense").st_nlink \
        == 21
    assert protected_snapshot(task, workspace.root) == before


def test_a_seeded_protected_file_given_another_name_gets_an_inode_of_its_own(tmp_path):
    """The other name would outlast the read-only mount of the protected file: a check's
    code could write through it. A copy (its mode and times kept) is renamed over it."""
    workspace = _workspace(tmp_path, {"tests/test_a.py": "x = 1\n"})
    seeded = workspace.root / "tests/test_a.py"
    os.chmod(seeded, 0o640)
    os.utime(seeded, ns=(1_000_000_000_123_456_789, 1_000_000_000_123_456_789))
    os.link(seeded, workspace.root / "elsewhere.py")
    task = _task()
    before = protected_snapshot(task, workspace.root)
    detach_protected_links(task, workspace.root, before)
    info = os.lstat(seeded)
    assert info.st_nlink == 1 and os.lstat(workspace.root / "elsewhere.py").st_nlink == 1
    assert (info.st_mode & 0o777, info.st_mtime_ns) == (0o640, 1_000_000_000_123_456_789)
    assert seeded.read_text() == "x = 1\n"
    assert protected_snapshot(task, workspace.root) == before


def test_what_setup_made_sparse_stays_sparse_in_the_seed_copy(tmp_path):
    """The seed copy of what a task's setup made is sparse-aware too, and keeps the
    times its snapshot key holds: nothing setup made counts as the agent's change."""
    workspace = _workspace(tmp_path, {"a.txt": "a\n"})
    made = _sparse(workspace.root / "data/blank.img", 300 * MB, b"header")
    os.chmod(made, 0o600)
    workspace.adopt_setup()
    copy = workspace.seed_path / "data/blank.img"
    assert _allocated(copy) < 4 * MB, os.lstat(copy).st_blocks  # not 300 MB
    assert os.lstat(copy).st_size == 300 * MB and os.lstat(copy).st_mode & 0o777 == 0o600
    assert workspace.seed["data/blank.img"] == fingerprint(_entry(made))
    assert workspace.changed_files() == {}


def test_the_shared_copy_keeps_data_between_holes(tmp_path):
    """Data at the start, in the middle and at the end, holes between: all of it comes
    through, and only the data is written."""
    from evalctl._files import copy_file

    origin = tmp_path / "origin.bin"
    with open(origin, "wb") as handle:
        handle.truncate(100 * MB)
        for at in (0, 50 * MB, 100 * MB - 5):
            handle.seek(at)
            handle.write(b"DATA!")
    assert copy_file(origin, tmp_path / "copy.bin")
    assert _allocated(tmp_path / "copy.bin") < 4 * MB
    assert content_hash(tmp_path / "copy.bin") == content_hash(origin)
    os.mkfifo(tmp_path / "fifo")
    assert not copy_file(tmp_path / "fifo", tmp_path / "not-copied")  # never opened to read
    assert not (tmp_path / "not-copied").exists()


# -------------------------------------------------------------------------- tests_pass


def _agent(seed: Path) -> evalctl.AgentResult:
    return evalctl.AgentResult(
        final_text="done", exit_status=evalctl.ExitStatus.COMPLETED, turns=1, tool_calls=0,
        usage=evalctl.TokenUsage(), cost=0.0, duration=0.0, files_changed={},
        ledger_path=None, seed_path=seed)


def test_tests_pass_compares_config_files_without_holding_them(tmp_path):
    """A `truncate -s 1000M pyproject.toml` took evalctl to 1 GB of memory: config files
    are compared by size first, then in bounded chunks."""
    from evalctl.plugins.graders.tests_pass import CONFIG_NAMES, _touched

    seeded = "[tool.pytest.ini_options]\n" + "# padding\n" * 400_000  # 4 MB
    workspace = _workspace(tmp_path, {"pyproject.toml": seeded, "setup.cfg": seeded,
                                      "tox.ini": seeded, "pytest.ini": "[pytest]\n"})
    _sparse(workspace.root / "pyproject.toml", 256 * MB, seeded.encode())  # grown
    (workspace.root / "setup.cfg").write_text(seeded[:-2] + "x\n")  # same size, changed
    (workspace.root / "pytest.ini").unlink()
    (workspace.root / "pytest.ini").symlink_to("tox.ini")  # the seed's content, by a link
    tracemalloc.start()
    try:
        touched = _touched(workspace.root, _agent(workspace.seed_path), CONFIG_NAMES)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert touched == ["pyproject.toml", "pytest.ini", "setup.cfg"]  # tox.ini as seeded
    assert peak < 4 * MB, peak  # two chunks of 1 MB, not the files


# ----------------------------------------------------------------------------- a whole run


@contextmanager
def _counting(tmp_path: Path) -> Iterator[_Reads]:
    with pytest.MonkeyPatch.context() as patch:
        counter = _Reads(tmp_path)
        read, pread = os.read, os.pread
        patch.setattr(os, "read", lambda fd, n: counter.count(fd, read(fd, n)))
        patch.setattr(os, "pread", lambda fd, n, at: counter.count(fd, pread(fd, n, at)))
        yield counter


SPARSE_PROTECTED = """\
- id: sparse-protected
  prompt: Add a note.
  files:
    tests/test_a.py: |
      def test_a():
          pass
  protected:
    - tests/*
  checks:
    - type: file_exists
      path: notes.txt
  script:
    - tool_calls:
        - tool: bash
          input:
            command: >-
              for i in 1 2 3; do truncate -s 200M tests/blob$i; ln tests/blob$i
              tests/link$i; done; for i in $(seq 1 20); do truncate -s 60M made$i;
              done; echo hi > notes.txt
    - text: Added a note.
"""


def test_a_run_with_sparse_protected_files_reads_and_writes_what_they_hold(tmp_path):
    """The attacker's run, end to end: sparse protected files and hard links to them,
    and sparse created files. The task fails on its protected files; evalctl reads a few
    bytes of them and writes none of their holes."""
    with _counting(tmp_path) as counted:
        run = evalctl.testing.run_suite(SPARSE_PROTECTED, sandbox="local",
                                        out_dir=tmp_path / "out")
    (task,) = run.tasks
    assert task.status == "failed", task.checks
    protected = next(c for c in task.checks if c.type == "protected_files")
    assert not protected.passed and "tests/blob1 (created)" in protected.detail
    assert counted.bytes < 10 * MB, counted.bytes
    for name in ("blob1", "link1", "blob3"):
        assert _allocated(Path(task.workspace) / "tests" / name) < 4 * MB
