"""Real repositories as tasks: `source:` (git at a commit, a directory, an archive),
`setup:`, and `verify_patch:`. Every repository, directory and archive is made here;
nothing touches the network."""

from __future__ import annotations

import io
import json
import os
import subprocess
import tarfile
import zipfile
from pathlib import Path

import pytest
from click.testing import CliRunner

import evalctl.testing
from evalctl._cli import cli
from evalctl._sources.git import SourceCache, sources_dir

from .conftest import run_cli

GIT_ENV = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.invalid",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.invalid",
           "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull, "PATH": os.defpath}
BUGGY = "def add(a, b):\n    return a - b\n"
FIXED = "def add(a, b):\n    return a + b\n"
TEST_ZERO = "from calc import add\n\n\ndef test_zero():\n    assert add(0, 0) == 0\n"
TEST_ADD = TEST_ZERO + "\n\ndef test_add():\n    assert add(2, 2) == 4\n"


def git(repo: Path, *args: str) -> str:
    done = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True,
                          env=GIT_ENV, timeout=60, check=True)
    return done.stdout.strip()


def commit(repo: Path, files: dict[str, str], message: str) -> str:
    for relative, content in files.items():
        path = repo / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content)
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", message)
    return git(repo, "rev-parse", "HEAD")


@pytest.fixture
def project(tmp_path) -> tuple[Path, str, str]:
    """A repository with the buggy commit, then the fix on top: (path, base, fix)."""
    repo = tmp_path / "calc"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    base = commit(repo, {"calc.py": BUGGY, "tests/test_calc.py": TEST_ZERO}, "base")
    fix = commit(repo, {"calc.py": FIXED, "FIX-NOTE.txt": "the fix\n"}, "fix")
    return repo, base, fix


def test_patch() -> str:
    return ("diff --git a/tests/test_calc.py b/tests/test_calc.py\n"
            "--- a/tests/test_calc.py\n+++ b/tests/test_calc.py\n"
            "@@ -3,3 +3,7 @@ from calc import add\n"
            " \n def test_zero():\n     assert add(0, 0) == 0\n"
            "+\n+\n+def test_add():\n+    assert add(2, 2) == 4\n")


test_patch.__test__ = False  # a helper, not a test


def indented(text: str, spaces: int) -> str:
    return "".join(" " * spaces + line if line.strip() else "\n"
                   for line in text.splitlines(keepends=True))


FIX_SCRIPT = """\
  script:
    - tool_calls:
        - tool: edit_file
          input:
            path: calc.py
            old_text: a - b
            new_text: a + b
    - text: Fixed calc.py.
"""


def git_suite(source: str, rev: str, *, extra: str = "", script: bool = True,
              task_id: str = "fix-add") -> str:
    return (f"- id: {task_id}\n  prompt: add() in calc.py subtracts. Make it add.\n"
            f"  source:\n    git: {source}\n    rev: {rev}\n"
            f"  verify_patch: |\n{indented(test_patch(), 4)}"
            f"{extra}"
            "  checks:\n    - type: tests_pass\n      tests:\n"
            "        - tests/test_calc.py::test_add\n        - tests/test_calc.py::test_zero\n"
            + (FIX_SCRIPT if script else ""))


def ledger_events(task) -> list[dict]:
    return [json.loads(line) for line in Path(task.ledger).read_text().splitlines()]


# --- git ------------------------------------------------------------------------------

def test_a_git_source_at_a_commit_is_the_workspace_with_nothing_after_it(tmp_path, project):
    repo, base, fix = project
    suite = tmp_path / "suite.yaml"
    suite.write_text(git_suite("calc", base, extra="  files:\n    NOTES.md: mine\n"))
    run = evalctl.testing.run_suite(suite, out_dir=tmp_path / "out")
    task = run.tasks[0]
    assert task.passed, [c.detail for c in task.checks]
    assert "all 2 named test(s) passed" in task.checks[-1].detail
    workspace = Path(task.workspace)
    assert (workspace / "NOTES.md").read_text() == "mine"  # files: on top of the source
    assert git(workspace, "rev-parse", "HEAD") == base
    # The fix is in the repository the suite names, not in the agent's copy of it.
    assert git(workspace, "log", "--all", "--format=%H").split() == [base]
    assert not (workspace / "FIX-NOTE.txt").exists()
    assert git(workspace, "remote") == ""
    assert str(sources_dir()) not in "".join(
        p.read_text(errors="replace") for p in (workspace / ".git").rglob("*") if p.is_file())
    # The seed copy is the source at its commit plus files:, without the repository.
    seed = Path(task.workspace).parent / ".seed" / task.task_id
    assert sorted(p.relative_to(seed).as_posix() for p in seed.rglob("*") if p.is_file()) == \
        ["NOTES.md", "calc.py", "tests/test_calc.py"]
    assert (seed / "calc.py").read_text() == BUGGY


def test_the_clone_is_cached_across_runs_and_a_workspace_cannot_write_into_it(tmp_path,
                                                                                project):
    repo, base, _ = project
    suite = tmp_path / "suite.yaml"
    suite.write_text(git_suite(str(repo), base))
    first = evalctl.testing.run_suite(suite, out_dir=tmp_path / "one")
    assert first.all_passed
    cache = SourceCache(sources_dir()).repository(str(repo.resolve()))
    assert (cache / "HEAD").is_file()
    # The next run needs no repository at all: the cache has the commit.
    repo.rename(tmp_path / "gone")
    second = evalctl.testing.run_suite(suite, out_dir=tmp_path / "two", repeat=2)
    assert second.all_passed and len(second.tasks) == 2
    # Each attempt's objects are its own files: no hard link leads into the cache.
    cached = {(s.st_dev, s.st_ino) for s in (os.stat(p) for p in cache.rglob("*")
                                              if p.is_file())}
    for task in second.tasks:
        objects = [p for p in (Path(task.workspace) / ".git").rglob("*") if p.is_file()]
        assert objects and all(os.stat(p).st_nlink == 1 for p in objects)
        assert not {(s.st_dev, s.st_ino) for s in map(os.stat, objects)} & cached


def test_a_branch_instead_of_a_commit_is_refused_at_validation(tmp_path, project):
    suite = tmp_path / "suite.yaml"
    suite.write_text(git_suite("calc", "main"))
    result = CliRunner().invoke(cli, ["validate", str(suite)])
    assert result.exit_code == 2
    assert (f"{suite}:5: error: task 'fix-add', 'source', 'rev': 'main' is not valid: must be a "
            "full commit id (40 hexadecimal digits): a branch or tag moves") in result.output


def test_a_commit_the_local_repository_lacks_is_refused_before_the_run(tmp_path, project):
    missing = "0123456789abcdef0123456789abcdef01234567"
    suite = tmp_path / "suite.yaml"
    suite.write_text(git_suite("calc", missing))
    result = run_cli(tmp_path, str(suite))
    assert result.exit_code == 2
    assert f"suite.yaml:3: error: source git 'calc': commit {missing} is not in calc" in \
        result.output
    assert not (tmp_path / "eval_reports").exists()


def test_a_missing_commit_of_a_url_is_an_error_of_the_attempt(tmp_path, project):
    repo, _, _ = project
    missing = "0123456789abcdef0123456789abcdef01234567"
    suite = tmp_path / "suite.yaml"  # a URL: not fetched at validation, only by the run
    suite.write_text(git_suite(repo.as_uri(), missing))
    result = run_cli(tmp_path, str(suite), "--report", "r.json")
    assert result.exit_code == 1, result.output
    task = json.loads((tmp_path / "r.json").read_text())["tasks"][0]
    assert (task["status"], task["exit_status"], task["turns"]) == ("error", "setup_error", 0)
    assert f"commit {missing} is not in {repo.as_uri()}" in task["error"]
    events = [json.loads(line) for line in Path(task["ledger"]).read_text().splitlines()]
    assert [e["event"] for e in events] == ["setup_end"]  # the agent never started
    assert events[0]["status"] == "failed" and missing in events[0]["error"]


def test_a_repository_that_does_not_exist_is_reported_at_its_line(tmp_path):
    suite = tmp_path / "suite.yaml"
    suite.write_text(git_suite("nowhere", "a" * 40))
    result = CliRunner().invoke(cli, ["validate", str(suite)])
    assert result.exit_code == 2
    assert "suite.yaml:3: error: source git 'nowhere': " in result.output
    assert "does not exist (paths are relative to the suite file)" in result.output


def test_a_source_in_defaults_serves_every_task(tmp_path, project):
    repo, base, _ = project
    tasks = "".join(git_suite("x", base, task_id=f"t{i}").replace(
        f"  source:\n    git: x\n    rev: {base}\n", "") for i in (1, 2))
    suite = tmp_path / "suite.yaml"
    suite.write_text(f"defaults:\n  source:\n    git: calc\n    rev: {base}\ntasks:\n"
                     + indented(tasks, 2))
    run = evalctl.testing.run_suite(suite, out_dir=tmp_path / "out")
    assert [t.passed for t in run.tasks] == [True, True]


# --- dir and archive -----------------------------------------------------------------

def dir_task(kind: str, location: str, more: str = "") -> str:
    return (f"- id: from-{kind}\n  prompt: Make add() add.\n"
            f"  source:\n    {kind}: {location}\n{more}"
            "  checks:\n    - type: tests_pass\n" + FIX_SCRIPT)


def test_a_directory_source_is_copied_without_its_repository(tmp_path, project):
    repo, _, _ = project
    git(repo, "checkout", "-q", "HEAD~1")
    suite = tmp_path / "suite.yaml"
    suite.write_text(dir_task("dir", "calc"))
    run = evalctl.testing.run_suite(suite, out_dir=tmp_path / "out")
    assert run.all_passed, [c.detail for c in run.tasks[0].checks]
    workspace = Path(run.tasks[0].workspace)
    assert (workspace / "tests" / "test_calc.py").is_file()
    assert not (workspace / ".git").exists()
    assert (repo / "calc.py").read_text() == BUGGY  # the original is untouched


def test_a_directory_with_a_link_that_leads_out_is_an_attempt_error(tmp_path):
    project = tmp_path / "proj"
    project.mkdir()
    (project / "calc.py").write_text(BUGGY)
    (project / "secret").symlink_to("/etc/hostname")
    suite = tmp_path / "suite.yaml"
    suite.write_text(dir_task("dir", "proj"))
    run = evalctl.testing.run_suite(suite, out_dir=tmp_path / "out")
    task = run.tasks[0]
    assert (task.status, task.exit_status) == ("error", "setup_error")
    assert "is a link that leads outside" in task.error


def make_tar(path: Path, members: dict[str, str], links: dict[str, str] | None = None) -> Path:
    with tarfile.open(path, "w:gz") as archive:
        for name, content in members.items():
            data = content.encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
        for name, target in (links or {}).items():
            info = tarfile.TarInfo(name)
            info.type = tarfile.SYMTYPE
            info.linkname = target
            archive.addfile(info)
    return path


def test_an_archive_is_unpacked_with_its_top_directory_stripped(tmp_path):
    make_tar(tmp_path / "calc-1.0.tar.gz", {"calc-1.0/calc.py": BUGGY,
                                            "calc-1.0/tests/test_calc.py": TEST_ADD})
    with zipfile.ZipFile(tmp_path / "calc.zip", "w") as archive:
        archive.writestr("calc.py", BUGGY)
        archive.writestr("tests/test_calc.py", TEST_ADD)
    suite = tmp_path / "suite.yaml"
    suite.write_text(dir_task("archive", "calc-1.0.tar.gz", "    strip: 1\n")
                     + dir_task("archive", "calc.zip").replace("from-archive", "from-zip"))
    run = evalctl.testing.run_suite(suite, out_dir=tmp_path / "out")
    assert run.all_passed, [[c.detail for c in t.checks] for t in run.tasks]
    assert (Path(run.tasks[0].workspace) / "tests" / "test_calc.py").is_file()


@pytest.mark.parametrize("kind", ["tar", "zip"])
def test_an_archive_with_dotdot_members_is_refused_at_validation(tmp_path, kind):
    outside = tmp_path / "escaped.txt"
    if kind == "tar":
        make_tar(tmp_path / "evil.tar.gz", {"calc.py": BUGGY, "../escaped.txt": "gotcha"})
        name = "evil.tar.gz"
    else:
        name = "evil.zip"
        with zipfile.ZipFile(tmp_path / name, "w") as archive:
            archive.writestr("calc.py", BUGGY)
            archive.writestr("../escaped.txt", "gotcha")
    suite = tmp_path / "suite.yaml"
    suite.write_text(dir_task("archive", name))
    result = run_cli(tmp_path, str(suite))
    assert result.exit_code == 2
    assert (f"suite.yaml:3: error: source archive '{name}': member '../escaped.txt' would be "
            "written outside the workspace") in result.output
    assert not outside.exists() and not (tmp_path / "eval_reports").exists()


def test_an_archive_link_that_leads_out_is_refused(tmp_path):
    make_tar(tmp_path / "links.tar.gz", {"calc.py": BUGGY}, {"etc": "/etc", "up": "../../x"})
    suite = tmp_path / "suite.yaml"
    suite.write_text(dir_task("archive", "links.tar.gz"))
    result = CliRunner().invoke(cli, ["validate", str(suite)])
    assert result.exit_code == 2
    assert "member 'etc' is a link that leads outside the workspace (/etc)" in result.output
    assert "member 'up' is a link that leads outside the workspace (../../x)" in result.output


def make_zip(path: Path, members: dict[str, str], links: dict[str, str]) -> Path:
    """A zip of files and links (a link is a member whose mode says so, its target the
    content), in the order given: files first."""
    with zipfile.ZipFile(path, "w") as archive:
        for name, content in members.items():
            archive.writestr(name, content)
        for name, target in links.items():
            info = zipfile.ZipInfo(name)
            info.external_attr = (0o120777 << 16)
            archive.writestr(info, target)
    return path


def chain_out_of(secret: Path, depth: int = 40) -> dict[str, str]:
    """Found by an attacker round: links each harmless by its text, out of the workspace
    together. l1 goes back to the top (inside); l2 goes into l1 and up depth+1 times,
    which by its text alone ends inside again, but from the top goes past the root of
    the file system, then down to `secret`; esc leads to l2."""
    deep = "/".join(f"d{n}" for n in range(depth))
    return {f"{deep}/l1": "../" * depth,
            f"{deep}/l2": "l1/" + "../" * (depth + 1) + str(secret).lstrip("/"),
            "esc": f"{deep}/l2"}


@pytest.mark.parametrize("kind", ["zip", "tar"])
def test_a_chain_of_links_that_leads_out_is_refused_whole(tmp_path, kind):
    from evalctl._sources.archive import unpack
    from evalctl._sources.git import SourceError

    secret = tmp_path / "secretdir"
    secret.mkdir()
    (secret / "secret.txt").write_text("host file\n")
    name = f"chain.{'zip' if kind == 'zip' else 'tar.gz'}"
    links = chain_out_of(secret)
    if kind == "zip":
        make_zip(tmp_path / name, {"calc.py": BUGGY}, links)
    else:
        make_tar(tmp_path / name, {"calc.py": BUGGY}, links)
    suite = tmp_path / "suite.yaml"
    suite.write_text(dir_task("archive", name))
    result = CliRunner().invoke(cli, ["validate", str(suite)])
    assert result.exit_code == 2, result.output
    assert "member 'esc' is a link that leads outside the workspace" in result.output
    assert "above the workspace" in result.output
    target = tmp_path / "ws"
    target.mkdir()
    with pytest.raises(SourceError, match="member 'esc' is a link that leads outside"):
        unpack(tmp_path / name, target)
    assert list(target.iterdir()) == []  # nothing unpacked


def test_links_that_stay_inside_through_other_links_are_unpacked(tmp_path):
    from evalctl._sources.archive import unpack

    deep = "/".join(f"d{n}" for n in range(5))
    links = {f"{deep}/top": "../" * 5, f"{deep}/calc": "top/calc.py",
             "up": f"{deep}/top/{deep}/../d4", "missing": "nowhere/../calc.py"}
    make_zip(tmp_path / "ok.zip", {"calc.py": BUGGY, f"{deep}/keep.txt": "x"}, links)
    target = tmp_path / "ws"
    target.mkdir()
    unpack(tmp_path / "ok.zip", target)
    assert (target / deep / "calc").read_text() == BUGGY
    assert (target / "up" / "keep.txt").read_text() == "x"


@pytest.mark.parametrize("members, links, expected", [
    ({}, {"a": "b", "b": "a"}, "member 'a' is a link that cannot be resolved (b): a loop"),
    ({}, {"self": "self/x"}, "member 'self' is a link that cannot be resolved"),
    ({"lib/x.py": "x"}, {"lib": "."}, "member 'lib' is a link and also another member"),
    ({}, {"in": "sub", "in/x": "../../.."}, "member 'in/x' is inside 'in', a link"),
    ({}, {"top": "..", "deep/up": "../top/x"},
     "member 'top' is a link that leads outside the workspace (..): above the workspace"),
    ({}, {"abs": "/etc", "via": "abs/passwd"},
     "member 'via' is a link that leads outside the workspace (abs/passwd): to an "
     "absolute path through /etc"),
    ({}, {"long": "a/" * 2100}, "member 'long' is a link with no usable target"),
], ids=["loop", "self-loop", "link-and-directory", "member-inside-a-link", "through-up",
        "through-absolute", "long-target"])
def test_links_the_archive_tree_cannot_hold_are_refused(tmp_path, members, links,
                                                        expected):
    make_zip(tmp_path / "bad.zip", {"calc.py": BUGGY, **members}, links)
    suite = tmp_path / "suite.yaml"
    suite.write_text(dir_task("archive", "bad.zip"))
    result = CliRunner().invoke(cli, ["validate", str(suite)])
    assert result.exit_code == 2, result.output
    assert expected in result.output, result.output


def test_a_tar_hard_link_to_a_link_is_refused(tmp_path):
    """A hard link to a link is the link's text at another place: `d/l -> ../x` is
    inside from d, and outside from the top, where the hard link `h` puts it."""
    with tarfile.open(tmp_path / "hard.tar.gz", "w:gz") as archive:
        code = tarfile.TarInfo("calc.py")
        code.size = len(BUGGY)
        archive.addfile(code, io.BytesIO(BUGGY.encode()))
        link = tarfile.TarInfo("d/l")
        link.type = tarfile.SYMTYPE
        link.linkname = "../x"
        archive.addfile(link)
        hard = tarfile.TarInfo("h")
        hard.type = tarfile.LNKTYPE
        hard.linkname = "d/l"
        archive.addfile(hard)
    suite = tmp_path / "suite.yaml"
    suite.write_text(dir_task("archive", "hard.tar.gz"))
    result = CliRunner().invoke(cli, ["validate", str(suite)])
    assert result.exit_code == 2, result.output
    assert "member 'h' is a hard link to d/l, a link or inside one" in result.output


def test_an_unpacked_link_that_leads_out_on_disk_is_refused_and_removed(tmp_path,
                                                                        monkeypatch):
    """The second check: whatever the tree said, every link unpacked is resolved again
    on disk inside the workspace, and a source with one that leads out is removed
    whole."""
    from evalctl._sources import archive as archive_module
    from evalctl._sources.git import SourceError

    make_zip(tmp_path / "out.zip", {"calc.py": BUGGY, "dir/x.txt": "x"}, {"out": "../.."})
    monkeypatch.setattr(archive_module, "archive_problems", lambda path, strip=0: [])
    target = tmp_path / "ws"
    target.mkdir()
    with pytest.raises(SourceError, match="member 'out' is a link that leads outside the "
                                          "workspace once unpacked"):
        archive_module.unpack(tmp_path / "out.zip", target)
    assert list(target.iterdir()) == []
    assert (tmp_path / "out.zip").is_file()  # what the link led to is untouched


# --- setup ---------------------------------------------------------------------------

SETUP_TASK = """\
- id: with-setup
  prompt: Make add() add.
  files:
    calc.py: |
      def add(a, b):
          return a - b
    tests/test_calc.py: |
      from calc import add

      def test_add():
          assert add(2, 2) == 4
  setup:
    commands:
{commands}
    timeout: {timeout}
  checks:
    - type: tests_pass
""" + FIX_SCRIPT


def setup_suite(tmp_path: Path, *commands: str, timeout: float = 30) -> Path:
    suite = tmp_path / "suite.yaml"
    listed = "".join(f"      - {json.dumps(c)}\n" for c in commands)
    suite.write_text(SETUP_TASK.format(commands=listed, timeout=timeout))
    return suite


@pytest.fixture(params=["local", "bwrap"])
def sandbox_name(request):
    if request.param == "bwrap":
        request.getfixturevalue("require_bwrap")
    return request.param


def test_setup_runs_before_the_agent_and_what_it_makes_is_not_the_agents(tmp_path,
                                                                         sandbox_name):
    # A virtual environment's worth of files, one of them a conftest.py: tests_pass
    # refuses a conftest.py the agent made, but this one is setup's.
    suite = setup_suite(tmp_path, "echo preparing; mkdir -p .venv/lib/site && "
                                  "echo '# from setup' > .venv/lib/site/conftest.py",
                        "python -c 'import calc; print(calc.add(2, 2))'")
    run = evalctl.testing.run_suite(suite, out_dir=tmp_path / "out", sandbox=sandbox_name)
    task = run.tasks[0]
    assert task.passed, [c.detail for c in task.checks]
    events = ledger_events(task)
    kinds = [e["event"] for e in events]
    assert kinds[:4] == ["setup_start", "setup_command", "setup_command", "setup_end"]
    assert kinds[4] == "task_start"
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
    assert events[1]["output"] == "preparing\n" and events[2]["output"] == "0\n"
    assert (Path(task.workspace) / ".venv" / "lib" / "site" / "conftest.py").is_file()
    # It is part of the seed the graders compare against, beside the task's files.
    seed = Path(task.workspace).parent / ".seed" / task.task_id
    assert (seed / ".venv" / "lib" / "site" / "conftest.py").read_text() == "# from setup\n"
    assert (seed / "calc.py").read_text() == "def add(a, b):\n    return a - b\n"


def test_a_failed_setup_is_an_error_of_the_attempt_with_its_output_in_the_ledger(
        tmp_path, sandbox_name):
    suite = setup_suite(tmp_path, "echo first", "echo 'no such project' >&2; exit 3",
                        "touch never-run")
    result = run_cli(tmp_path, str(suite), "--sandbox", sandbox_name, "--report", "r.json")
    assert result.exit_code == 1
    task = json.loads((tmp_path / "r.json").read_text())["tasks"][0]
    assert (task["status"], task["exit_status"], task["turns"], task["checks"]) == \
        ("error", "setup_error", 0, [])
    assert task["error"].startswith("setup command 2 of 3 (\"echo 'no such project' >&2; exit 3\""
                                    ") exited with status 3")
    assert "no such project" in task["error"]
    events = [json.loads(line) for line in Path(task["ledger"]).read_text().splitlines()]
    assert [e["event"] for e in events] == ["setup_start", "setup_command", "setup_command",
                                            "setup_end"]
    assert events[2]["exit_code"] == 3 and "no such project" in events[2]["output"]
    assert not (Path(task["workspace"]) / "never-run").exists()


def test_a_setup_that_hangs_is_stopped_by_its_own_timeout(tmp_path):
    suite = setup_suite(tmp_path, "sleep 30", timeout=0.5)
    run = evalctl.testing.run_suite(suite, out_dir=tmp_path / "out", sandbox="local")
    task = run.tasks[0]
    assert task.exit_status == "setup_error" and "timed out after 0.5s" in task.error


def test_setup_may_have_the_network_while_the_agent_does_not(tmp_path, require_bwrap):
    import socket
    import threading

    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]
    server.settimeout(20)
    accepted = []

    def accept() -> None:
        try:
            while True:
                connection, _ = server.accept()
                accepted.append(1)
                connection.close()
        except OSError:
            return

    threading.Thread(target=accept, daemon=True).start()
    # The marker is built when it runs, so a traceback quoting the line does not show it.
    probe = (f"python -c \"import socket; socket.create_connection(('127.0.0.1', {port}), "
             "timeout=5); print('reach' + 'ed')\"")
    suite = tmp_path / "suite.yaml"
    suite.write_text(f"""\
- id: net
  prompt: Look around.
  files:
    a.txt: a
  setup:
    commands:
      - {json.dumps(probe)}
    network: true
  checks:
    - type: file_exists
      path: a.txt
  script:
    - tool_calls:
        - tool: bash
          input:
            command: {json.dumps(probe)}
    - text: Done.
""")
    try:
        run = evalctl.testing.run_suite(suite, out_dir=tmp_path / "out", sandbox="bwrap")
    finally:
        server.close()
    task = run.tasks[0]
    events = ledger_events(task)
    setup = next(e for e in events if e["event"] == "setup_command")
    agent = next(e for e in events if e["event"] == "tool_result")
    assert setup["exit_code"] == 0 and "reached" in setup["output"]
    assert "reached" not in agent["content"]
    assert agent["content"].startswith("exit code 1") and "Error" in agent["content"]
    assert len(accepted) == 1


# --- verify_patch --------------------------------------------------------------------

def test_the_test_patch_arrives_after_the_agent_and_replaces_its_edits(tmp_path, project,
                                                                       sandbox_name):
    repo, base, _ = project
    look = ("    - tool_calls:\n        - tool: bash\n          input:\n"
            "            command: grep -c test_add tests/test_calc.py || true\n")
    # The agent "fixes" the test instead of the code: the patch replaces its edit.
    cheat = ("  script:\n" + look +
             "    - tool_calls:\n        - tool: write_file\n          input:\n"
             "            path: tests/test_calc.py\n"
             "            content: \"def test_add():\\n    pass\\n\\ndef test_zero():\\n"
             "    pass\\n\"\n    - text: Done.\n")
    suite = tmp_path / "suite.yaml"
    suite.write_text(git_suite("calc", base, script=False) + cheat
                     + git_suite("calc", base, task_id="honest"))
    run = evalctl.testing.run_suite(suite, out_dir=tmp_path / "out", sandbox=sandbox_name)
    by_id = {t.task_id: t for t in run.tasks}
    assert by_id["honest"].passed, [c.detail for c in by_id["honest"].checks]
    cheated = by_id["fix-add"]
    assert not cheated.passed
    assert ("1 of the 2 named test(s) did not pass: tests/test_calc.py::test_add (failed)"
            in cheated.checks[-1].detail)
    # During its turn the agent's copy of the tests had no test_add: the patch was not there.
    seen = next(e for e in ledger_events(cheated) if e["event"] == "tool_result")
    assert seen["content"].splitlines()[-1] == "0", seen["content"]


def test_a_patch_that_does_not_apply_is_an_attempt_error_before_the_agent(tmp_path, project):
    repo, base, _ = project
    suite = tmp_path / "suite.yaml"
    suite.write_text(git_suite("calc", base).replace(" def test_zero():\n",
                                                     " def test_elsewhere():\n", 1))
    run = evalctl.testing.run_suite(suite, out_dir=tmp_path / "out")
    task = run.tasks[0]
    assert (task.status, task.exit_status, task.turns) == ("error", "setup_error", 0)
    assert "verify_patch does not apply to the source" in task.error


def test_a_patch_cannot_copy_a_host_file_through_a_link_in_the_repository(tmp_path,
                                                                         monkeypatch):
    """Found by an attacker: a repository holding `procself -> /proc/self` and a link to a
    host directory, with a test patch of `copy from procself/environ`, put evalctl's own
    environment (the API key) and the host file into the workspace, where the hidden
    test printed them into the report. Links among a patched path's directories must
    stay inside the source."""
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-FAKE-MARKER-1234")
    secret_dir = tmp_path / "secretdir"
    secret_dir.mkdir()
    (secret_dir / "secret.txt").write_text("TOP-SECRET-HOST-FILE\n")
    repo = tmp_path / "proj"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    (repo / "procself").symlink_to("/proc/self")
    (repo / "sdir").symlink_to(secret_dir)
    (repo / "inner").symlink_to("tests")  # a link that stays inside is followed
    base = commit(repo, {"tests/__init__.py": "", "tests/known.txt": "kept\n"}, "base")
    for source, target in (("procself/environ", "tests/env.txt"),
                           ("sdir/secret.txt", "tests/secret.txt"),
                           ("inner/known.txt", "tests/copied.txt")):
        patch = (f"diff --git a/{source} b/{target}\nsimilarity index 100%\n"
                 f"copy from {source}\ncopy to {target}\n")
        suite = tmp_path / "suite.yaml"
        suite.write_text(f"- id: leak\n  prompt: Nothing.\n  source:\n    git: proj\n"
                         f"    rev: {base}\n  verify_patch: |\n{indented(patch, 4)}"
                         "  checks:\n    - type: file_exists\n      path: tests/__init__.py\n"
                         "  script:\n    - text: Done.\n")
        run = evalctl.testing.run_suite(suite, out_dir=tmp_path / f"out-{target[6:-4]}")
        task = run.tasks[0]
        copied = Path(task.workspace, target)
        if source.startswith("inner"):
            assert task.status == "passed" and copied.read_text() == "kept\n", task.error
            continue
        assert (task.status, task.exit_status) == ("error", "setup_error")
        assert f"verify_patch: '{source}' is reached through a link that leads out" in \
            task.error
        assert not copied.exists()
        files = [p for p in Path(run.run_directory).rglob("*")
                 if p.is_file() and not p.is_symlink()]
        assert [p for p in files if b"FAKE-MARKER" in p.read_bytes()
                or b"TOP-SECRET" in p.read_bytes()] == []


@pytest.mark.parametrize("target", ["/proc/self/environ", "/dev/zero", "calc.py"])
def test_a_patch_that_makes_a_link_is_refused_not_read_through(tmp_path, project,
                                                               monkeypatch, target):
    """Found by an attacker round: a verify_patch creating `leak.txt -> /proc/self/environ`
    (new file mode 120000) had its result read through the link: evalctl's environment
    (the API key) went into the workspace and a check's detail in the report; a link to
    /dev/zero read without end. A patch's results are read as regular files only."""
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-FAKE-MARKER-5678")
    repo, base, _ = project
    patch = (f"diff --git a/leak.txt b/leak.txt\nnew file mode 120000\n--- /dev/null\n"
             f"+++ b/leak.txt\n@@ -0,0 +1 @@\n+{target}\n\\ No newline at end of file\n")
    suite = tmp_path / "suite.yaml"
    suite.write_text(f"- id: leak\n  prompt: Nothing.\n  source:\n    git: calc\n"
                     f"    rev: {base}\n  verify_patch: |\n{indented(patch, 4)}"
                     "  checks:\n    - type: command\n      command: cat leak.txt\n"
                     "  script:\n    - text: Done.\n")
    run = evalctl.testing.run_suite(suite, out_dir=tmp_path / "out", sandbox="local")
    task = run.tasks[0]
    assert (task.status, task.exit_status) == ("error", "setup_error"), task.checks
    assert "verify_patch: leak.txt is not a UTF-8 text file after the patch (a link" in \
        task.error
    files = [p for p in Path(run.run_directory).rglob("*") if p.is_file() and not p.is_symlink()]
    assert [p for p in files if b"FAKE-MARKER" in p.read_bytes()] == []


def test_a_section_git_applies_but_evalctl_cannot_name_is_refused(tmp_path, project):
    """Found by an attacker round: a `diff --git` section with a hunk and no ---/+++
    lines was applied by git and never written after the agent, so the agent's own copy
    of that test was graded. The paths git reads must all be named."""
    repo, base, _ = project
    bare = ("diff --git a/tests/test_hidden.py b/tests/test_hidden.py\nnew file mode 100644\n"
            "@@ -0,0 +1 @@\n+def test_nothing(): pass\n")
    suite = tmp_path / "suite.yaml"
    suite.write_text(git_suite("calc", base).replace(indented(test_patch(), 4),
                                                     indented(test_patch() + bare, 4)))
    run = evalctl.testing.run_suite(suite, out_dir=tmp_path / "out")
    task = run.tasks[0]
    assert (task.status, task.exit_status) == ("error", "setup_error"), task.checks
    assert "verify_patch: git reads it as touching 'tests/test_hidden.py' too" in task.error


def test_a_patch_that_leaves_the_workspace_is_refused_at_its_line(tmp_path, project):
    repo, base, _ = project
    suite = tmp_path / "suite.yaml"
    suite.write_text(git_suite("calc", base).replace("+++ b/tests/test_calc.py",
                                                     "+++ b/../outside.py"))
    result = CliRunner().invoke(cli, ["validate", str(suite)])
    assert result.exit_code == 2
    assert ("suite.yaml:6: error: task 'fix-add': verify_patch: '../outside.py' leaves the "
            "workspace") in result.output


def test_a_patch_can_delete_a_file_and_may_not_share_a_path_with_verify_files(tmp_path,
                                                                              project):
    repo, base, _ = project
    deletion = ("diff --git a/calc.py b/calc.py\ndeleted file mode 100644\n--- a/calc.py\n"
                "+++ /dev/null\n@@ -1,2 +0,0 @@\n-def add(a, b):\n-    return a - b\n")
    from evalctl._sources.patch import patched_files

    seed = tmp_path / "seed"
    seed.mkdir()
    (seed / "calc.py").write_text(BUGGY)
    assert patched_files(seed, deletion) == {"calc.py": None}
    suite = tmp_path / "suite.yaml"
    suite.write_text(git_suite("calc", base, extra=(
        "  verify_files:\n    tests/test_calc.py: x\n")))
    result = CliRunner().invoke(cli, ["validate", str(suite)])
    assert result.exit_code == 2
    assert "'tests/test_calc.py' is in both verify_patch and verify_files" in result.output


def test_a_changed_seed_copy_is_made_again_from_the_source(tmp_path, project):
    repo, base, _ = project
    tamper = ("  script:\n    - tool_calls:\n        - tool: bash\n          input:\n"
              "            command: echo x > ../.seed/fix-add/calc.py\n"
              "    - text: Done.\n")
    suite = tmp_path / "suite.yaml"
    suite.write_text(git_suite("calc", base, script=False) + tamper)
    run = evalctl.testing.run_suite(suite, out_dir=tmp_path / "out", sandbox="local")
    task = run.tasks[0]
    integrity = next(c for c in task.checks if c.type == "seed_integrity")
    assert not integrity.passed and integrity.suspected_gaming
    seed = Path(task.workspace).parent / ".seed" / "fix-add"
    assert (seed / "calc.py").read_text() == BUGGY


VENV_TASK = """\
- id: {task_id}
  prompt: Keep the marker test passing.
  files:
    tests/test_venv.py: |
      import venv_marker


      def test_marker():
          assert venv_marker.MARK == 1
  setup:
    commands:
      - python -m venv --without-pip .venv
      - >-
        site=$(.venv/bin/python -c "import sysconfig; print(sysconfig.get_path('purelib'))")
        && python -c "import os, pytest; print(os.path.dirname(os.path.dirname(pytest.__file__)))"
        > "$site/evalctl-host.pth" && echo "MARK = 1" > "$site/venv_marker.py"
  checks:
    - type: tests_pass
{python}
  script:
    - tool_calls:
        - tool: bash
          input:
            command: {command}
    - text: Done.
"""


def venv_task(task_id: str, python: str | None, command: str = "true") -> str:
    line = f"      python: {python}\n" if python else ""
    return VENV_TASK.format(task_id=task_id, python=line.rstrip("\n"),
                            command=json.dumps(command))


def test_tests_pass_runs_under_the_interpreter_setup_made(tmp_path, sandbox_name):
    replace = "rm .venv/bin/python && printf '#!/bin/sh\\nexit 0\\n' > .venv/bin/python && " \
              "chmod +x .venv/bin/python"
    suite = tmp_path / "suite.yaml"
    suite.write_text(venv_task("venv", ".venv/bin/python")
                     + venv_task("host", None)
                     + venv_task("swapped", ".venv/bin/python", replace))
    run = evalctl.testing.run_suite(suite, out_dir=tmp_path / "out", sandbox=sandbox_name)
    by_id = {t.task_id: t for t in run.tasks}
    assert by_id["venv"].passed, [c.detail for c in by_id["venv"].checks]
    # evalctl's own interpreter has no venv_marker: the check really ran in the venv.
    host = by_id["host"].checks[-1]
    assert not host.passed and "venv_marker" in host.detail
    swapped = by_id["swapped"].checks[-1]
    assert not swapped.passed and swapped.suspected_gaming
    assert "the agent modified the test interpreter .venv/bin/python" in swapped.detail


def test_the_html_transcript_shows_setup_and_why_it_failed(tmp_path):
    from evalctl.plugins.reporters.html.transcript import read_transcript

    suite = setup_suite(tmp_path, "echo first", "echo 'no such project' >&2; exit 3")
    run = evalctl.testing.run_suite(suite, out_dir=tmp_path / "out", sandbox="local")
    notes = [item["text"] for item in read_transcript(run.tasks[0].ledger).items]
    assert notes[0] == "setup: 2 command(s), without the network"
    assert notes[1] == "setup command 1 (exit 0): echo first\nfirst"
    assert notes[2].startswith("setup command 2 (exit 3): echo 'no such project'")
    assert notes[2].endswith("no such project")
    assert notes[3].startswith("setup failed: setup command 2 of 2")


def test_a_setup_missing_a_python_module_says_where_to_install_it(tmp_path):
    """Found by a newcomer: realrepo's setup ran `python -m pytest` where pytest was not
    installed, and the error did not say that the sandbox's Python is evalctl's own."""
    suite = setup_suite(tmp_path, "python3 -c 'import evalctl_no_such_module'")
    run = evalctl.testing.run_suite(suite, out_dir=tmp_path / "out", sandbox="local")
    task = run.tasks[0]
    assert task.exit_status == "setup_error"
    assert "install evalctl_no_such_module there:" in task.error
    assert "-m pip install evalctl_no_such_module" in task.error
