"""The six tools on their edge cases, in real workspaces."""

from __future__ import annotations

import asyncio
import os
import time

import pytest

import evalctl._files
from evalctl._agent.tools import OUTPUT_LIMIT, Toolbox
from evalctl._workspace import create_workspace, new_run_directory

from .conftest import sandbox_for


@pytest.fixture
def workspace(tmp_path):
    run_dir = new_run_directory(tmp_path / "reports")
    return create_workspace(run_dir, "task", {"notes.txt": "alpha\nbeta\nalpha again\n",
                                              "src/app.py": "print('hi')\n"})


def toolbox(workspace, permissions: str = "full") -> Toolbox:
    return Toolbox(workspace, sandbox_for(workspace), permissions)


def use(tools: Toolbox, name: str, **arguments):
    return asyncio.run(tools.call(name, arguments))


def test_the_workspace_is_seeded_and_state_lives_outside_it(workspace):
    assert (workspace.root / "notes.txt").read_text().startswith("alpha")
    assert workspace.root.name == "task" and workspace.root.parent.name.startswith("workspaces-")
    for outside in (workspace.home, workspace.tmp, workspace.ledger_path, workspace.seed_path):
        assert not outside.is_relative_to(workspace.root)
    assert (workspace.seed_path / "src" / "app.py").read_text() == "print('hi')\n"


def test_read_file_numbers_lines_and_pages(workspace):
    box = toolbox(workspace)
    out = use(box, "read_file", path="notes.txt", offset=2, limit=1)
    assert not out.is_error
    assert out.content == "     2\tbeta\n[more lines follow; continue with offset=3]"


def test_read_file_missing_directory_and_binary(workspace):
    box = toolbox(workspace)
    assert "does not exist" in use(box, "read_file", path="nope.txt").content
    assert "is a directory" in use(box, "read_file", path="src").content
    (workspace.root / "blob.bin").write_bytes(b"\x00\x01\x02" * 100)
    out = use(box, "read_file", path="blob.bin")
    assert out.is_error and "binary file (300 bytes)" in out.content


def test_read_file_of_a_huge_file_is_bounded(workspace):
    (workspace.root / "huge.txt").write_text("x" * 50 + "\n" + ("y" * 10_000 + "\n") * 3000)
    out = use(toolbox(workspace), "read_file", path="huge.txt")
    assert len(out.content) <= OUTPUT_LIMIT + 200
    assert "characters elided" in out.content


def test_read_file_of_one_enormous_line_is_bounded(workspace):
    (workspace.root / "oneline.txt").write_text("z" * 3_000_000 + "\nsecond\n")
    out = use(toolbox(workspace), "read_file", path="oneline.txt")
    first, second = out.content.splitlines()
    assert first.endswith("[... line cut at 2000 characters]") and len(first) < 2100
    assert second == "     2\tsecond"


def test_edit_file_refuses_huge_files_with_a_way_out(workspace):
    (workspace.root / "big.txt").write_text("a" * 11_000_000)
    out = use(toolbox(workspace), "edit_file", path="big.txt", old_text="a", new_text="b")
    assert out.is_error and "over 10 MB" in out.content and "sed" in out.content


def test_write_file_creates_directories(workspace):
    out = use(toolbox(workspace), "write_file", path="deep/er/new.txt", content="hello")
    assert not out.is_error
    assert (workspace.root / "deep/er/new.txt").read_text() == "hello"


def test_edit_file_needs_an_exact_unique_match(workspace):
    box = toolbox(workspace)
    missing = use(box, "edit_file", path="notes.txt", old_text="gamma", new_text="x")
    assert missing.is_error and "not found" in missing.content
    ambiguous = use(box, "edit_file", path="notes.txt", old_text="alpha", new_text="x")
    assert ambiguous.is_error and "appears 2 times" in ambiguous.content
    assert use(box, "edit_file", path="notes.txt", old_text="beta", new_text="BETA").content \
        == "replaced 1 occurrence(s) in notes.txt"
    use(box, "edit_file", path="notes.txt", old_text="alpha", new_text="A", replace_all=True)
    assert (workspace.root / "notes.txt").read_text() == "A\nBETA\nA again\n"


@pytest.mark.parametrize("path", ["../escape.txt", "/etc/passwd", "src/../../escape.txt"])
def test_paths_outside_the_workspace_are_refused(workspace, path):
    box = toolbox(workspace)
    for name, arguments in (("read_file", {"path": path}),
                            ("write_file", {"path": path, "content": "x"}),
                            ("edit_file", {"path": path, "old_text": "a", "new_text": "b"})):
        out = use(box, name, **arguments)
        assert out.is_error and "outside the workspace" in out.content, (name, out)
    assert not (workspace.root.parent / "escape.txt").exists()


def test_symlinks_pointing_out_are_refused(workspace, tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("secret")
    (workspace.root / "link.txt").symlink_to(secret)
    (workspace.root / "linkdir").symlink_to(tmp_path)
    box = toolbox(workspace)
    assert "outside the workspace" in use(box, "read_file", path="link.txt").content
    assert "outside the workspace" in use(box, "write_file", path="linkdir/x.txt",
                                          content="x").content
    assert use(box, "grep", pattern="secret").content == "no matches for secret"
    assert "link.txt" not in use(box, "glob", pattern="**/*.txt").content


def test_a_symlink_inside_the_workspace_is_fine(workspace):
    (workspace.root / "alias.txt").symlink_to(workspace.root / "notes.txt")
    assert "beta" in use(toolbox(workspace), "read_file", path="alias.txt").content


def test_glob_and_grep(workspace):
    box = toolbox(workspace)
    assert use(box, "glob", pattern="**/*.py").content == "src/app.py"
    assert use(box, "glob", pattern="*.md").content == "no files match *.md"
    assert use(box, "glob", pattern="../*").is_error
    assert use(box, "grep", pattern="^alpha").content == \
        "notes.txt:1:alpha\nnotes.txt:3:alpha again"
    assert use(box, "grep", pattern="print", path="src").content == "src/app.py:1:print('hi')"
    assert use(box, "grep", pattern="alpha", glob="*.py").content == "no matches for alpha"
    assert "invalid regular expression" in use(box, "grep", pattern="(").content


def test_grep_says_which_files_it_did_not_search(workspace):
    (workspace.root / "blob.bin").write_bytes(b"alpha\x00" * 10)
    out = use(toolbox(workspace), "grep", pattern="alpha")
    assert out.content.startswith("notes.txt:1:alpha")
    assert out.content.endswith("[not searched, binary or over 5 MB: blob.bin]")


def test_grep_caps_its_results(workspace):
    (workspace.root / "many.txt").write_text("hit\n" * 500)
    out = use(toolbox(workspace), "grep", pattern="hit", path="many.txt")
    assert out.content.count("many.txt:") == 200
    assert "300 more matches not shown" in out.content


def test_bash_runs_in_the_workspace_and_reports_the_exit_code(workspace):
    box = toolbox(workspace)
    ok = use(box, "bash", command="pwd; ls")
    assert ok.content.startswith("exit code 0\n" + str(workspace.root))
    failed = use(box, "bash", command="echo oops >&2; exit 3")
    assert failed.is_error and failed.content == "exit code 3\noops"


def test_bash_output_keeps_head_and_tail(workspace):
    out = use(toolbox(workspace), "bash",
              command="echo START; head -c 200000 /dev/zero | tr '\\0' x; echo; echo END")
    assert out.content.startswith("exit code 0\nSTART")
    assert out.content.rstrip().endswith("END")
    assert "bytes elided" in out.content
    assert len(out.content) < OUTPUT_LIMIT + 200


def test_bash_timeout_kills_the_whole_process_group(workspace):
    marker = workspace.root / "survivor"
    started = time.monotonic()
    out = use(toolbox(workspace), "bash", timeout=1,
              command=f"(sleep 3; touch {marker}) & sleep 30")
    assert out.is_error and "timed out after 1s" in out.content
    assert time.monotonic() - started < 10
    time.sleep(3.5)
    assert not marker.exists(), "a child outlived the timeout"


def test_bash_leaves_nothing_behind_after_a_normal_exit(workspace):
    marker = workspace.root / "late"
    out = use(toolbox(workspace), "bash", command=f"(sleep 2; touch {marker}) & echo started")
    assert out.content == "exit code 0\nstarted"
    time.sleep(2.5)
    assert not marker.exists()


def test_bash_environment_has_no_credentials_and_its_own_home(workspace, monkeypatch):
    for name in ("ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL", "GITHUB_TOKEN", "MY_SECRET",
                 "DB_PASSWORD", "aws_access_key_id"):
        monkeypatch.setenv(name, "leak")
    monkeypatch.setenv("HARMLESS", "not passed on either")
    out = use(toolbox(workspace), "bash", command="env")
    assert "leak" not in out.content and "HARMLESS" not in out.content
    assert f"HOME={workspace.home}" in out.content and f"TMPDIR={workspace.tmp}" in out.content


def test_read_only_denies_writes_with_a_reason(workspace):
    box = toolbox(workspace, permissions="read-only")
    for name, arguments in (("write_file", {"path": "x", "content": "y"}),
                            ("edit_file", {"path": "notes.txt", "old_text": "beta",
                                           "new_text": "x"}),
                            ("bash", {"command": "touch x"})):
        out = use(box, name, **arguments)
        assert out.denied and out.is_error and "read-only" in out.content
    assert not (workspace.root / "x").exists()
    assert not use(box, "read_file", path="notes.txt").is_error


def test_unknown_tools_and_bad_arguments_are_tool_errors(workspace):
    box = toolbox(workspace)
    assert "unknown tool 'rm'" in use(box, "rm", path="x").content
    bad = use(box, "write_file", path="x")
    assert bad.is_error and "'content' is a required property" in bad.content
    wrong = asyncio.run(box.call("read_file", ["not", "a", "mapping"]))
    assert wrong.is_error


def test_valid_arguments_never_reach_the_python_validator(workspace, monkeypatch):
    """The compiled validator answers "valid"; Python's jsonschema only explains."""
    import jsonschema

    box = toolbox(workspace)
    calls = []
    real = jsonschema.Draft202012Validator

    def counting(schema):
        calls.append(schema)
        return real(schema)

    monkeypatch.setattr(jsonschema, "Draft202012Validator", counting)
    assert not use(box, "write_file", path="x.txt", content="y").is_error
    assert not use(box, "read_file", path="x.txt", offset=1, limit=2).is_error
    assert not use(box, "read_file", path="x.txt", offset=1.0).is_error  # as Python's says
    assert calls == []
    assert "0 is less than the minimum of 1" in use(box, "read_file", path="x.txt",
                                                     offset=0).content
    assert len(calls) == 1


def test_changed_files_compares_against_the_seed(workspace):
    (workspace.root / "notes.txt").write_text("changed")
    (workspace.root / "new.txt").write_text("new")
    (workspace.root / "src" / "app.py").unlink()
    (workspace.root / "__pycache__").mkdir()
    (workspace.root / "__pycache__" / "x.pyc").write_bytes(b"\0")
    assert workspace.changed_files() == {"new.txt": "created", "notes.txt": "modified",
                                         "src/app.py": "deleted"}


def test_run_directories_are_unique(tmp_path):
    first = new_run_directory(tmp_path)
    second = new_run_directory(tmp_path)
    assert first != second and first.is_dir() and second.is_dir()
    assert os.path.basename(second).startswith("workspaces-")


def test_the_file_tools_refuse_fifos_hard_links_and_links_that_lead_out(workspace, tmp_path):
    import time as clock

    outside = tmp_path / "outside-secret.txt"
    outside.write_text("secret\n")
    os.mkfifo(workspace.root / "pipe")
    os.link(outside, workspace.root / "hard.txt")
    (workspace.root / "sub").mkdir()
    (workspace.root / "sub" / "out").symlink_to(tmp_path)
    box = toolbox(workspace)
    started = clock.monotonic()
    fifo = use(box, "read_file", path="pipe")
    assert fifo.is_error and "not a regular file" in fifo.content
    assert clock.monotonic() - started < 5  # it did not block on the FIFO
    hard = use(box, "read_file", path="hard.txt")
    assert hard.is_error and "hard link" in hard.content and "secret" not in hard.content
    overwrite = use(box, "write_file", path="hard.txt", content="pwned")
    assert overwrite.is_error and outside.read_text() == "secret\n"
    escape = use(box, "write_file", path="sub/out/outside-secret.txt", content="pwned")
    assert escape.is_error and outside.read_text() == "secret\n"
    searched = use(box, "grep", pattern="secret")
    assert "outside-secret" not in searched.content and "hard.txt:" not in searched.content
    assert "pipe" in workspace.changed_files()  # hashing skipped the FIFO instead of blocking


def test_open_confined_never_follows_a_link_swapped_in_after_resolving(workspace, tmp_path):
    from evalctl._files import ConfinementError, open_confined

    (workspace.root / "dir").mkdir()
    (workspace.root / "dir" / "f.txt").write_text("inside")
    real_resolve = evalctl._files._resolve_inside

    def swap_then_resolve(root, user_path):
        resolved = real_resolve(root, user_path)
        # The race an agent would try: the directory becomes a link to outside.
        (workspace.root / "dir" / "f.txt").unlink()
        (workspace.root / "dir").rmdir()
        (workspace.root / "dir").symlink_to(tmp_path)
        return resolved

    evalctl._files._resolve_inside = swap_then_resolve
    try:
        with pytest.raises(ConfinementError, match="changed under evalctl"):
            open_confined(workspace.root, "dir/f.txt")
    finally:
        evalctl._files._resolve_inside = real_resolve


# -- docs/tools.md: generated from the definitions, and its examples are valid --------

def test_docs_tools_is_generated_from_the_tool_definitions():
    from evalctl._plugin.docs import render_tool_docs

    from .conftest import ROOT

    documented = (ROOT / "docs" / "tools.md").read_text()
    assert documented == render_tool_docs(), \
        "docs/tools.md is stale: run python -m evalctl._plugin.docs tools > docs/tools.md"
    for tool in ("read_file", "write_file", "edit_file", "bash", "glob", "grep"):
        assert f"## `{tool}`" in documented


def test_every_documented_example_is_a_scripted_call_validate_accepts(write_suite):
    import re

    from evalctl._suite.loader import validate_suite

    from .conftest import ROOT

    examples = re.findall(r"```yaml\n(- tool: .*?)```", (ROOT / "docs" / "tools.md").read_text(),
                          flags=re.S)
    assert len(examples) == 6
    for number, example in enumerate(examples):
        call = "".join(f"        {line}\n" for line in example.splitlines())
        suite = ("- id: t\n  prompt: p\n  checks:\n    - type: file_exists\n      path: x\n"
                 "  script:\n    - tool_calls:\n" + call + "    - text: Done.\n")
        path = write_suite(suite, name=f"example{number}.yaml")
        assert validate_suite(path) == [], example


def test_each_documented_example_runs_as_the_docs_say(workspace):
    """The examples are real calls: in a workspace that has what they name, each works."""
    from evalctl._plugin.tooldefs import TOOL_REFERENCE

    (workspace.root / "config.ini").write_text("port = 8080\n")
    (workspace.root / "words.txt").write_text("a b c\n")
    (workspace.root / "src" / "slug.py").write_text("def slugify(text):\n    return text\n")
    tools = toolbox(workspace)
    for name in ("read_file", "write_file", "edit_file", "bash", "glob", "grep"):
        outcome = use(tools, name, **TOOL_REFERENCE[name].example)
        assert not outcome.is_error, (name, outcome.content)
    assert (workspace.root / "config.ini").read_text() == "port = 9090\n"


# -- bounded work: a tool call runs in evalctl's shared pool, so none may run for ever ---


def test_runs_of_double_stars_are_one_and_a_glob_of_too_many_parts_is_refused(workspace):
    from evalctl._agent.tools import glob_parts
    from evalctl._plugin.tooldefs import GLOB_MAX_PARTS

    assert glob_parts("**/" * 4000 + "zz") == ["**", "zz"]
    assert glob_parts("./a//**/**/b/**") == ["a", "**", "b", "**"]
    deep = workspace.root / "/".join(["d"] * 40)
    deep.mkdir(parents=True)
    (deep / "zz").write_text("found\n")
    box = toolbox(workspace)
    # 12 KB of `**/`: one part for the matcher, not four thousand.
    assert use(box, "glob", pattern="**/" * 4000 + "zz").content == "/".join(["d"] * 40) + "/zz"
    many = "/".join(f"p{n}" for n in range(GLOB_MAX_PARTS + 1))
    for out in (use(box, "glob", pattern=many), use(box, "grep", pattern="x", glob=many)):
        assert out.is_error and f"more than {GLOB_MAX_PARTS} parts" in out.content


def test_a_glob_stops_at_its_budget_of_matching_work(workspace, monkeypatch):
    import evalctl._agent.tools as tools

    deep = workspace.root / "/".join(["d"] * 60)
    deep.mkdir(parents=True)
    for n in range(20):
        (deep / f"f{n}.txt").write_text("x\n")
    monkeypatch.setattr(tools, "GLOB_MAX_STEPS", 2_000)  # parts x names, summed over paths
    box = toolbox(workspace)
    for out in (use(box, "glob", pattern="**/*/f*.txt"),
                use(box, "grep", pattern="x", glob="**/*/f*.txt")):
        assert "[stopped after looking at part of the workspace" in out.content, out.content
    monkeypatch.setattr(tools, "GLOB_MAX_STEPS", 10_000_000)
    assert "stopped" not in use(box, "glob", pattern="**/*/f*.txt").content


def test_read_file_stops_at_its_byte_budget_in_a_terabyte_sparse_file(workspace, monkeypatch):
    import evalctl._agent.tools as tools

    path = workspace.root / "sparse.txt"
    with open(path, "wb") as handle:
        handle.write(b"text\n" + b"a" * 20_000)  # text up front, then one endless line
        handle.truncate(1 << 40)  # a terabyte, most of it a hole
    monkeypatch.setattr(tools, "READ_MAX_BYTES", 1_000_000)
    out = use(toolbox(workspace), "read_file", path="sparse.txt")
    assert out.content.startswith("     1\ttext\n     2\taaaa")
    assert out.content.endswith("[stopped after reading 1 MB of the file; the rest is not read]")
    past = use(toolbox(workspace), "read_file", path="sparse.txt", offset=5)
    assert "fewer than 5 lines" in past.content and "stopped after reading" in past.content


def test_an_attempts_file_tool_calls_take_one_pool_thread_at_a_time(workspace, monkeypatch):
    import threading

    box = toolbox(workspace)
    running, most = 0, 0
    lock = threading.Lock()
    read_file = Toolbox.read_file

    def slow_read(self, **arguments):
        nonlocal running, most
        with lock:
            running += 1
            most = max(most, running)
        time.sleep(0.05)
        with lock:
            running -= 1
        return read_file(self, **arguments)

    monkeypatch.setattr(Toolbox, "read_file", slow_read)

    async def turn():  # a turn of six calls, gathered as the loop gathers them
        return await asyncio.gather(*(box.call("read_file", {"path": "notes.txt"})
                                      for _ in range(6)))

    outcomes = asyncio.run(turn())
    assert all(o.content.startswith("     1\talpha") for o in outcomes)
    assert most == 1


def test_grep_stops_at_its_budget_of_lines(workspace, monkeypatch):
    import evalctl._agent.tools as tools

    (workspace.root / "many.txt").write_text("a\n" * 249 + "needle\n" + "a\n" * 50)
    (workspace.root / "later.txt").write_text("needle\n")
    monkeypatch.setattr(tools, "SEARCH_MAX_LINES", 100)
    out = use(toolbox(workspace), "grep", pattern="needle", path="many.txt")
    assert out.content.startswith("no matches for needle")
    assert "[stopped in many.txt after 100 lines searched in all" in out.content
    monkeypatch.setattr(tools, "SEARCH_MAX_LINES", 1_000)
    found = use(toolbox(workspace), "grep", pattern="needle", path="many.txt")
    assert found.content == "many.txt:250:needle"


def test_a_glob_or_grep_stops_at_its_clock_and_a_huge_pattern_is_refused(workspace, monkeypatch):
    import evalctl._agent.tools as tools

    (workspace.root / "many").mkdir()
    for n in range(300):
        (workspace.root / "many" / f"f{n}.txt").write_text("x\n")
    (workspace.root / "long.txt").write_text("a\n" * 3000)
    box = toolbox(workspace)
    monkeypatch.setattr(tools, "SEARCH_MAX_SECONDS", 0)  # out of time at the first look
    assert "[stopped after looking at part of the workspace" in \
        use(box, "glob", pattern="many/*.txt").content
    out = use(box, "grep", pattern="zzz", path="long.txt")
    assert "[stopped at long.txt:1024 after 0 s of searching" in out.content
    monkeypatch.setattr(tools, "SEARCH_MAX_SECONDS", 20)
    assert "stopped" not in use(box, "grep", pattern="zzz", path="long.txt").content
    # 40 x .{1000}: a program of some 40,000 instructions, about 17 µs a byte of text once
    # RE2's DFA gives up on it (a 5 MB line: minutes). Over the program budget: refused.
    huge = use(box, "grep", pattern="a" + ".{1000}" * 40 + "c", path="long.txt")
    assert huge.is_error and "invalid regular expression" in huge.content


def test_arguments_that_break_a_call_are_the_calls_failure_not_the_attempts(workspace,
                                                                             monkeypatch):
    """Found by an attacker: a loop of links under glob or grep, a NUL byte in a bash
    command and a NaN timeout each raised out of the call, ending the attempt in
    evalctl's own error (and so out of the score). Each is now an error the model reads;
    so is anything a tool raises that nobody foresaw."""
    box = toolbox(workspace)
    os.symlink("loop", workspace.root / "loop")
    os.symlink("b", workspace.root / "a")
    os.symlink("a", workspace.root / "b")
    for name, arguments in (("glob", {"pattern": "loop/*"}), ("glob", {"pattern": "a/b/*"}),
                            ("grep", {"pattern": "x", "glob": "loop/*"})):
        outcome = use(box, name, **arguments)
        assert "no files match" in outcome.content or "no match" in outcome.content \
            or outcome.is_error, (name, outcome)
    nul = use(box, "bash", command="true\x00")
    assert nul.is_error and "NUL byte" in nul.content
    for number in (float("nan"), float("inf")):
        refused = use(box, "bash", command="touch ran", timeout=number)
        assert refused.is_error and "not a finite number" in refused.content
    assert not (workspace.root / "ran").exists()

    def broken(self, **arguments):
        raise RuntimeError("something nobody foresaw")

    monkeypatch.setattr(Toolbox, "read_file", broken)
    unforeseen = use(box, "read_file", path="notes.txt")
    assert unforeseen.is_error and "RuntimeError: something nobody foresaw" in unforeseen.content


def test_a_write_that_cannot_be_encoded_leaves_the_file_as_it_was(workspace):
    """write_file and edit_file encode the new text before they open (and so empty) the
    file: a lone surrogate is refused, and the file keeps what it held."""
    box = toolbox(workspace)
    before = (workspace.root / "notes.txt").read_text()
    for name, arguments in (("write_file", {"path": "notes.txt", "content": "x\ud800"}),
                            ("edit_file", {"path": "notes.txt", "old_text": before,
                                           "new_text": "\ud800"})):
        outcome = use(box, name, **arguments)
        assert outcome.is_error and "UTF-8" in outcome.content, (name, outcome)
        assert (workspace.root / "notes.txt").read_text() == before, name


def test_glob_looks_at_nothing_outside_the_workspace(workspace, monkeypatch, tmp_path):
    """Found by an attacker round: glob stat'ed each match through its links before
    confining it, so an agent that swapped a link between the two learnt whether a host
    path is a regular file. What glob looks at is now the confined path, not followed."""
    outside = tmp_path / "host-secret.txt"
    outside.write_text("x")
    (workspace.root / "link.txt").symlink_to(outside)
    from evalctl._agent import tools as tools_module

    looked_at: list = []
    real = tools_module._regular

    def recorded(path, follow=True):
        looked_at.append(path)
        return real(path, follow) if "follow" in real.__code__.co_varnames else real(path)

    monkeypatch.setattr(tools_module, "_regular", recorded)
    listing = use(toolbox(workspace), "glob", pattern="*").content
    assert "link.txt" not in listing and "notes.txt" in listing
    root = os.path.realpath(workspace.root)
    assert looked_at and all(os.path.realpath(p).startswith(root + os.sep) for p in looked_at), \
        looked_at
