"""Atomic writes, and paths confined to a workspace."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

import evalctl


def test_write_atomically_replaces_whole_files_with_ordinary_permissions(tmp_path):
    target = tmp_path / "deep" / "report.json"
    evalctl.write_atomically(target, "first")
    evalctl.write_atomically(target, "second")
    assert target.read_text() == "second"
    assert list(target.parent.iterdir()) == [target]  # no temporary file left
    mask = os.umask(0)
    os.umask(mask)
    assert stat.S_IMODE(target.stat().st_mode) == 0o666 & ~mask


def test_write_atomically_streams_pieces_and_keeps_the_old_file_if_they_fail(tmp_path):
    target = tmp_path / "report.html"
    evalctl.write_atomically(target, (f"<p>{n}</p>" for n in range(3)))
    assert target.read_text() == "<p>0</p><p>1</p><p>2</p>"

    def broken():
        yield "half a page"
        raise RuntimeError("the renderer failed")

    with pytest.raises(RuntimeError):
        evalctl.write_atomically(target, broken())
    assert target.read_text() == "<p>0</p><p>1</p><p>2</p>"
    assert list(tmp_path.iterdir()) == [target]


@pytest.mark.parametrize("user_path", [
    "a", "a/b", "a/b/c/d", "la/b", "f", "f/x", "lf", "out", "out/passwd", "a/../f", "./a",
    "a//b", "missing/x", "a/b/", "/etc", "ROOT/a", "ROOT/out/passwd",
])
def test_confinement_resolves_as_path_resolve_does(tmp_path, user_path):
    """Plain names are resolved a component at a time under the workspace, the rest by
    Path.resolve: either way the answer (or the refusal) is Path.resolve's."""
    root = tmp_path / "ws"
    (root / "a" / "b").mkdir(parents=True)
    (root / "f").write_text("x")
    os.symlink("a", root / "la")
    os.symlink("/etc", root / "out")
    os.symlink("f", root / "lf")
    user_path = user_path.replace("ROOT", str(root))
    real = root.resolve()
    expected = (real / user_path).resolve()
    if expected != real and not expected.is_relative_to(real):
        with pytest.raises(evalctl.ConfinementError, match="outside the workspace"):
            evalctl.resolve_in_workspace(root, user_path)
    else:
        assert evalctl.resolve_in_workspace(root, user_path) == expected


def test_a_root_swapped_for_a_link_after_use_is_resolved_again(tmp_path):
    """The root's real path is remembered only while the root still leads to the same
    directory: swapped for a link elsewhere, it is resolved anew."""
    root, elsewhere = tmp_path / "ws", tmp_path / "elsewhere"
    root.mkdir()
    (elsewhere / "sub").mkdir(parents=True)
    assert evalctl.resolve_in_workspace(root, "sub") == root.resolve() / "sub"
    root.rename(tmp_path / "old")
    os.symlink(elsewhere, root)
    assert evalctl.resolve_in_workspace(root, "sub") == elsewhere.resolve() / "sub"


def test_a_link_under_a_remembered_parent_is_still_followed(tmp_path):
    """A new root under a parent whose real path is remembered takes that path plus its
    name, unless the root is itself a link: then it is resolved in full."""
    parent, target = tmp_path / "run", tmp_path / "target"
    (parent / "plain").mkdir(parents=True)
    (target / "sub").mkdir(parents=True)
    os.symlink(target, parent / "linked")
    evalctl.resolve_in_workspace(parent, "plain")  # the parent is remembered now
    assert evalctl.resolve_in_workspace(parent / "plain", "x") == parent.resolve() / "plain/x"
    assert evalctl.resolve_in_workspace(parent / "linked", "sub") == target.resolve() / "sub"


def test_a_remembered_root_moved_and_its_old_name_repointed_is_resolved_again(tmp_path):
    """The root's remembered real path is used only while it, too, still leads to the
    workspace: a directory above it renamed (the root's link following it) and its old
    name pointed elsewhere must not send a name to the other place."""
    (tmp_path / "r1" / "ws").mkdir(parents=True)
    (tmp_path / "outside" / "ws").mkdir(parents=True)
    (tmp_path / "outside" / "ws" / "secret").write_text("outside")
    os.symlink("r1", tmp_path / "link")
    root = tmp_path / "link" / "ws"
    evalctl.resolve_in_workspace(root, "notes.txt")  # remembered: .../r1/ws
    os.rename(tmp_path / "r1", tmp_path / "r2")
    os.unlink(tmp_path / "link")
    os.symlink("r2", tmp_path / "link")
    os.symlink("outside", tmp_path / "r1")
    assert evalctl.resolve_in_workspace(root, "secret") == \
        (root.resolve() / "secret") == tmp_path.resolve() / "r2" / "ws" / "secret"
    with pytest.raises(FileNotFoundError):
        evalctl.open_in_workspace(root, "secret")


def test_a_relative_root_follows_the_working_directory(tmp_path, monkeypatch):
    (tmp_path / "c1" / "ws").mkdir(parents=True)
    (tmp_path / "evil" / "ws").mkdir(parents=True)
    monkeypatch.chdir(tmp_path / "c1")
    evalctl.resolve_in_workspace(Path("ws"), "a")
    os.rename(tmp_path / "c1", tmp_path / "c2")  # the working directory moves with it
    os.symlink("evil", tmp_path / "c1")
    assert evalctl.resolve_in_workspace(Path("ws"), "secret") == \
        tmp_path.resolve() / "c2" / "ws" / "secret"


def test_resolution_follows_links_as_realpath_does(tmp_path):
    """_real_path gives os.path.realpath's answer (missing parts kept as written, '..'
    taken from what is resolved so far), on 5,000 random paths over links, missing
    names, files and '..'."""
    import random

    from evalctl._files import _real_path

    (tmp_path / "d" / "e").mkdir(parents=True)
    (tmp_path / "f").write_text("x")
    for name, target in (("l1", "d"), ("d/l2", "../d/e"), ("abs", "/nonexistent/x"),
                         ("chain", "l1/l2"), ("via", "missing/../d"), ("lf", "f"),
                         ("up", "..")):
        os.symlink(target, tmp_path / name)
    names = ["l1", "l2", "chain", "..", ".", "d", "e", "missing", "abs", "via", "f", "lf",
             "up", ""]
    chooser = random.Random(7)
    real = os.path.realpath(tmp_path)  # the start: a real path with no link in it
    for _ in range(5000):
        relative = "/".join(chooser.choice(names) for _ in range(chooser.randint(1, 6)))
        path = f"{tmp_path}/{relative}"
        assert _real_path(path) == os.path.realpath(path), path
        assert _real_path(relative, real) == os.path.realpath(path), relative


def test_a_web_of_links_is_refused_after_the_kernels_limit(tmp_path):
    """Found by an attacker: Python's realpath follows any number of links, so 16,000
    links with 4 KB targets held a check for about 50 s. Resolution stops after 40
    links (the kernel's limit) or 8,192 names, as a refusal."""
    import time

    from evalctl._files import MAX_LINKS

    workspace = tmp_path / "ws"
    (workspace / "x").mkdir(parents=True)
    detour = "/".join(["x/.."] * 800)  # 4 KB of names per link
    for n in range(200):
        os.symlink(f"{detour}/l{n + 1}", workspace / f"l{n}")
    os.symlink(".", workspace / "l200")
    started = time.monotonic()
    with pytest.raises(evalctl.ConfinementError, match="cannot be resolved"):
        evalctl.resolve_in_workspace(workspace, "l0/result.txt")
    assert time.monotonic() - started < 2
    chain = tmp_path / "chain"
    chain.mkdir()
    for n in range(MAX_LINKS):
        os.symlink(f"c{n + 1}", chain / f"c{n}")
    (chain / f"c{MAX_LINKS}").write_text("end")
    assert evalctl.resolve_in_workspace(chain, "c0") == chain / f"c{MAX_LINKS}"
    os.symlink("c0", chain / "c-1")  # one link more than the kernel follows
    with pytest.raises(evalctl.ConfinementError, match="symbolic links"):
        evalctl.resolve_in_workspace(chain, "c-1")


def test_empty_directory_keeps_named_entries_follows_no_link_and_opens_locked_ones(tmp_path):
    """What the graders' HOME is emptied with between checks: an entry it is told to
    keep stays, a link is removed and what it leads to is not touched, and a directory
    made unwritable (0o500, 0o000) is emptied and removed all the same."""
    from evalctl._files import empty_directory

    home, elsewhere = tmp_path / "home", tmp_path / "elsewhere"
    (home / "kept" / "inside").mkdir(parents=True)
    elsewhere.mkdir()
    (elsewhere / "precious").write_text("mine")
    (home / ".npmrc").write_text("script-shell=~/yes.sh\n")
    (home / "link").symlink_to(elsewhere)
    locked = home / ".config" / "git"
    locked.mkdir(parents=True)
    (locked / "config").write_text("[x]\n")
    locked.chmod(0o500)
    (home / ".config").chmod(0o500)
    (home / "sealed").mkdir()
    (home / "sealed" / "f").write_text("x")
    (home / "sealed").chmod(0)
    assert empty_directory(home, keep={"kept"}) == []
    assert sorted(os.listdir(home)) == ["kept"] and (home / "kept" / "inside").is_dir()
    assert (elsewhere / "precious").read_text() == "mine"
    assert empty_directory(home, keep={"kept"}) == []  # nothing to do: one scandir
