"""An attempt's file-system work (its directories, seed, ledger, the graders' HOME and
TMPDIR, the integrity checks' hashing) runs on the event loop when it is small and off
it when it is not, and what it makes is exactly what the synchronous path makes."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import pytest

from evalctl._files import SMALL_TREE_BYTES, SMALL_TREE_ENTRIES
from evalctl._plugin.registry import get_registry
from evalctl._run import grading, runner
from evalctl._run.runner import RunOptions, execute, prepare_run
from evalctl._suite.loader import load_suite
from evalctl._workspace import Workspace, create_workspace, new_run_directory

SUITE = """\
- id: seeded
  prompt: Write out.txt.
  files:
    seed.txt: |
      one
      two
    deep/er/notes.md: "# notes"
  protected:
    - seed.txt
  checks:
    - type: file_exists
      path: out.txt
    - type: command
      command: grep -q done out.txt
  script:
    - tool_calls:
        - tool: bash
          input:
            command: echo done > out.txt
    - text: Wrote out.txt.
"""


def tree(root: Path) -> dict[str, str | None]:
    """Every path under `root`: a file's text, None for a directory."""
    return {str(p.relative_to(root)): None if p.is_dir() else p.read_text()
            for p in sorted(root.rglob("*"))}


def _where_file_work_ran(tmp_path, write_suite, monkeypatch, suite_text: str):
    """On which threads each blocking step of an attempt ran: True for the event loop's."""
    where: dict[str, list[bool]] = {}

    def recorded(name, function):
        def wrapper(*args, **kwargs):
            where.setdefault(name, []).append(threading.current_thread()
                                              is threading.main_thread())
            return function(*args, **kwargs)
        return wrapper

    monkeypatch.setattr(runner, "new_workspace", recorded("workspace", runner.new_workspace))
    monkeypatch.setattr(grading, "_before_grading", recorded("before grading",
                                                             grading._before_grading))
    monkeypatch.setattr(grading, "grading_state", recorded("grading state",
                                                           grading.grading_state))
    monkeypatch.setattr(runner, "seed_workspace", recorded("seed", runner.seed_workspace))
    monkeypatch.setattr(runner, "Ledger", recorded("ledger", runner.Ledger))
    monkeypatch.setattr(Workspace, "changed_files",
                        recorded("changed files", Workspace.changed_files))
    registry = get_registry()
    suite = load_suite(write_suite(suite_text), registry)
    prepared = prepare_run(suite, registry, RunOptions(out_dir=tmp_path / "out",
                                                       sandbox="local", repeat=3))
    result = asyncio.run(execute(prepared))
    assert [t.status for t in result.tasks] == ["passed"] * 3
    return where


STEPS = ("workspace", "seed", "ledger", "changed files", "before grading", "grading state")


STARTING = ("workspace", "seed", "ledger")  # made: creating can wait on the journal
READING = ("changed files", "before grading", "grading state")


def test_a_small_attempts_reads_are_done_by_the_event_loop_itself(
        tmp_path, write_suite, monkeypatch):
    """Walking and hashing a few small files costs less than a trip to a thread: for a
    small seed and workspace, the loop reads them itself. What an attempt creates (its
    directories, seed, ledger) is always made off the loop: a file system can make a
    create wait for its journal."""
    where = _where_file_work_ran(tmp_path, write_suite, monkeypatch, SUITE)
    assert where == {**{name: [False] * 3 for name in STARTING},
                     **{name: [True] * 3 for name in READING}}


def test_verify_files_are_written_off_the_event_loop(tmp_path, write_suite, monkeypatch):
    """Grading a task with verify files writes them: off the loop, however small."""
    where = _where_file_work_ran(
        tmp_path, write_suite, monkeypatch,
        SUITE.replace("  protected:\n", "  verify_files:\n    hidden.txt: x\n  protected:\n"))
    assert where == {**{name: [False] * 3 for name in STARTING},
                     "changed files": [True] * 3,
                     "before grading": [False] * 3, "grading state": [False] * 3}


def test_a_large_seed_is_made_and_walked_off_the_event_loop(tmp_path, write_suite,
                                                             monkeypatch):
    """A seed past the bounds of small_tree: the walks of its workspace run off the
    loop."""
    many = "".join(f"    f{n}.txt: x\n" for n in range(SMALL_TREE_ENTRIES))
    where = _where_file_work_ran(tmp_path, write_suite, monkeypatch,
                                 SUITE.replace("  files:\n", "  files:\n" + many))
    assert where == {name: [False] * 3 for name in STEPS}


def test_a_workspace_the_agent_made_large_is_walked_off_the_event_loop(
        tmp_path, write_suite, monkeypatch):
    """Once the agent has left more than small_tree allows, the walks and hashes
    between the agent and the graders run off the loop, though the seed was small."""
    big = SUITE.replace("command: echo done > out.txt",
                        f"command: echo done > out.txt; head -c {SMALL_TREE_BYTES + 1} "
                        "/dev/zero > big.bin")
    where = _where_file_work_ran(tmp_path, write_suite, monkeypatch, big)
    assert where == {name: [False] * 3 for name in STEPS}


def test_small_tree_stops_at_either_bound(tmp_path):
    from evalctl._files import small_tree

    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "one").write_bytes(b"x" * 10)
    assert small_tree(tmp_path, entries=2, size=10)
    assert not small_tree(tmp_path, entries=1, size=10)  # two entries: a and a/one
    assert not small_tree(tmp_path, entries=2, size=9)
    (tmp_path / "a" / "link").symlink_to("/dev/zero")  # not a regular file: no bytes
    assert small_tree(tmp_path, entries=3, size=10)


def test_an_attempt_made_by_the_run_is_the_one_made_synchronously(tmp_path, write_suite):
    """The workspace and its seed copy a run makes (off the loop) hold what
    create_workspace makes for the same task, the state and ledger sit where they
    always have, and the graders got a HOME and TMPDIR of their own."""
    registry = get_registry()
    suite = load_suite(write_suite(SUITE), registry)
    prepared = prepare_run(suite, registry, RunOptions(out_dir=tmp_path / "out",
                                                       sandbox="local"))
    (attempt,) = asyncio.run(execute(prepared)).tasks
    assert attempt.status == "passed", attempt
    run_dir = Path(attempt.workspace).parent
    reference = create_workspace(new_run_directory(tmp_path / "reference"), "seeded",
                                 suite.tasks[0].files)

    made = tree(run_dir / "seeded")
    assert made.pop("out.txt") == "done\n"  # the agent's work; the rest is the seed
    assert made == tree(reference.root)
    assert tree(run_dir / ".seed" / "seeded") == tree(reference.seed_path)
    assert Path(attempt.ledger) == run_dir / ".ledgers" / "seeded.jsonl"
    assert Path(attempt.ledger).read_text().count('"event"') >= 3
    # Four directories an attempt, each made per task (a directory costs 40 to a few
    # hundred microseconds of kernel time on some disks): its workspace, its seed copy,
    # its HOME and TMPDIR in one, and the graders' HOME and TMPDIR in one.
    made = sorted(str(p.relative_to(run_dir)) for p in run_dir.rglob("*")
                  if p.is_dir() and p.name == "seeded")
    assert made == [".grading/seeded", ".seed/seeded", ".state/seeded", "seeded"]
    assert not [p for p in (run_dir / ".state" / "seeded").rglob("*") if p.is_dir()]


def test_a_seed_of_inline_files_is_hashed_from_its_text_as_a_walk_would_hash_it(tmp_path):
    """Inline files' hashes are taken from the text instead of reading the copy back;
    they are the ones a walk of the seed copy gives. Names a walk would see otherwise
    ('./a', a file under __pycache__) are hashed by the walk."""
    from evalctl._files import snapshot
    from evalctl._workspace import _hashes_of

    files = {"seed.txt": "one\ntwo\n", "deep/er/notes.md": "# notes", "é.txt": "\u00e9\r\n",
             "empty": ""}
    workspace = create_workspace(new_run_directory(tmp_path), "plain", files)
    assert _hashes_of(files) is not None
    assert workspace.seed == snapshot(workspace.seed_path) == snapshot(workspace.root)
    for odd in ({"./a.txt": "x"}, {"__pycache__/x.pyc": "x", "b": "y"}, {"a//b": "x"}):
        assert _hashes_of(odd) is None
        workspace = create_workspace(new_run_directory(tmp_path), "odd", odd)
        assert workspace.seed == snapshot(workspace.seed_path)
        assert "__pycache__/x.pyc" not in workspace.seed



def test_a_run_into_a_directory_removed_since_the_last_run_keeps_its_ledgers(tmp_path,
                                                                             write_suite):
    """The shared parents (.state, .grading, .ledgers, .cassettes, .seed) are made once a run
    directory and process; when a later run of the same process finds the directory
    removed and made again, they are made again, the ledgers' and cassettes' too."""
    import shutil

    registry = get_registry()
    suite = load_suite(write_suite(SUITE), registry)
    for _ in range(2):
        shutil.rmtree(tmp_path / "out", ignore_errors=True)
        prepared = prepare_run(suite, registry, RunOptions(out_dir=tmp_path / "out",
                                                           sandbox="local"))
        (attempt,) = asyncio.run(execute(prepared)).tasks
        assert attempt.status == "passed", attempt
        assert Path(attempt.ledger).read_text().count('"event"') >= 3
        run_dir = Path(attempt.workspace).parent
        assert (run_dir / ".cassettes" / "seeded.jsonl").is_file()


def test_a_directory_emptied_of_many_names_is_not_small(emptied_directory):
    """Found by an attacker: an ext4 directory keeps its size when emptied, and each
    listing reads all of it; small_tree counted only entries."""
    from evalctl._files import SMALL_DIRECTORY_BYTES, small_tree

    assert emptied_directory.stat().st_size > SMALL_DIRECTORY_BYTES
    assert not small_tree(emptied_directory.parent)
    assert not small_tree(emptied_directory)


def test_bytecode_caches_to_remove_send_the_sweep_off_the_event_loop(tmp_path, write_suite,
                                                                      monkeypatch):
    """Removing, like creating, can wait on the file system's journal: a small workspace
    with a __pycache__ to sweep is swept off the loop."""
    with_cache = SUITE.replace("command: echo done > out.txt",
                               "command: echo done > out.txt; mkdir __pycache__; "
                               "touch __pycache__/m.cpython-311.pyc")
    where = _where_file_work_ran(tmp_path, write_suite, monkeypatch, with_cache)
    assert where == {**{name: [False] * 3 for name in STARTING},
                     "changed files": [True] * 3,
                     "before grading": [False] * 3, "grading state": [False] * 3}


def test_small_tree_refuses_a_named_directory(tmp_path):
    from evalctl._files import small_tree

    (tmp_path / "src" / "__pycache__").mkdir(parents=True)
    assert small_tree(tmp_path)
    assert not small_tree(tmp_path, without=frozenset({"__pycache__"}))


def test_a_seed_is_written_whole_over_what_is_there_with_its_parents_made(tmp_path):
    from evalctl._workspace import write_seed

    root = tmp_path / "ws"
    root.mkdir()
    (root / "old.txt").write_text("a much longer text than the seed's\n")
    write_seed(root, {"old.txt": "short\n", "a/b/c.txt": "deep\n", "é.txt": "ü\n"}, None)
    assert (root / "old.txt").read_text() == "short\n"  # truncated, not overlaid
    assert (root / "a" / "b" / "c.txt").read_text() == "deep\n"
    assert (root / "é.txt").read_text(encoding="utf-8") == "ü\n"


def test_a_seeded_file_replaces_a_link_it_would_be_written_through(tmp_path, monkeypatch):
    import evalctl._workspace as workspace_module

    root = tmp_path / "ws"
    root.mkdir()
    outside = tmp_path / "outside.txt"
    outside.write_text("untouched\n")
    (root / "link.txt").symlink_to(outside)
    # Resolution already follows links that stay inside; this is the write itself meeting
    # a link (one planted after the path was resolved): it is replaced, never followed.
    workspace_module._write_seeded(str(root / "link.txt"), "seeded\n")
    assert not (root / "link.txt").is_symlink()
    assert (root / "link.txt").read_text() == "seeded\n"
    assert outside.read_text() == "untouched\n"


def test_a_ledger_numbers_on_when_opened_again_and_says_why_it_cannot_open(tmp_path):
    from evalctl._agent.ledger import Ledger, read_events

    path = tmp_path / "l.jsonl"
    first = Ledger(path)
    first.append("one", text="x")
    first.append("two")
    first.close()
    again = Ledger(path)
    again.append("three", text="lone \udc80 surrogate")
    again.close()
    events = read_events(path)
    assert [(e["seq"], e["event"]) for e in events] == [(1, "one"), (2, "two"), (3, "three")]
    missing = Ledger(tmp_path / "no-such-dir" / "l.jsonl")
    missing.append("lost")
    assert missing.failure and "cannot open" in missing.failure


def test_a_value_nested_past_encoding_or_reading_costs_one_event_not_the_record(tmp_path):
    """A value nested deeper than JSON's encoder goes (a model's tool input, say) used to
    escape Ledger.append as RecursionError and end the attempt as an internal error; a
    ledger line nested past reading ended `evalctl script` with a crash. The event is
    kept without its fields, and such a line is a problem the reader names."""
    from evalctl._agent.ledger import Ledger, ledger_spend, read_events
    from evalctl._errors import UsageError
    from evalctl._run.scripting import _from_ledger

    deep: list = []
    inner = deep
    for _ in range(5000):
        inner.append([])
        inner = inner[0]
    path = tmp_path / "l.jsonl"
    ledger = Ledger(path)
    ledger.append("tool_call", name="bash", arguments={"x": deep})
    ledger.append("after")
    ledger.close()
    events = read_events(path)
    assert [e["event"] for e in events] == ["tool_call", "after"] and ledger.failure is None
    assert events[0]["unrecorded"].startswith("its fields are nested too deep")
    with path.open("a") as handle:  # a line nested past reading, as a local agent could add
        handle.write('{"event": "model_turn", "v": ' + "[" * 100_000 + "]" * 100_000 + "}\n")
    assert ledger_spend(path)[1] == 0.0
    with pytest.raises(UsageError, match="cannot read the ledger"):
        _from_ledger(path)


def test_fields_given_as_json_text_are_written_as_values_after_the_others(tmp_path):
    """append_encoded puts JSON texts made elsewhere (a cassette's request, from the texts
    its hash was taken over) into the line as values; a line whose other fields cannot be
    encoded keeps none of its fields, those included."""
    from evalctl._agent.ledger import Ledger, read_events

    path = tmp_path / "l.jsonl"
    ledger = Ledger(path)
    ledger.append_encoded("exchange", {"request": '{"a":[1,"\\ud800"],"b":null}',
                                       "n": "1.0"}, note="é")
    deep: list = []
    inner = deep
    for _ in range(5000):
        inner.append([])
        inner = inner[0]
    ledger.append_encoded("exchange", {"request": "{}"}, deep=deep)
    ledger.close()
    first, second = read_events(path)
    assert list(first) == ["seq", "t", "event", "note", "request", "n"]
    assert first["request"] == {"a": [1, "\ud800"], "b": None} and first["n"] == 1.0
    assert "request" not in second and second["unrecorded"].startswith("its fields are")


def test_a_cassette_that_stops_being_written_is_named_in_the_result(tmp_path, write_suite,
                                                                    monkeypatch):
    """A request the recorder cannot keep (nested past encoding, say) stops the cassette
    and a replay of the attempt ends there; the run did not say so anywhere. The result,
    its journal line and the JSON report name it, and `evalctl run` warns."""
    import json

    from click.testing import CliRunner

    from evalctl._agent import cassette as cassettes
    from evalctl._cli import cli

    def refuse(self, request, turn, error, status):
        raise RecursionError("maximum recursion depth exceeded while encoding")

    monkeypatch.setattr(cassettes.CassetteRecorder, "_record", refuse)
    suite = write_suite(SUITE)
    result = CliRunner().invoke(cli, ["run", str(suite), "--sandbox", "local", "--out",
                                      str(tmp_path / "out"), "--report", str(tmp_path / "r.json")])
    assert result.exit_code == 0, result.output
    (task,) = json.loads((tmp_path / "r.json").read_text())["tasks"]
    (problem,) = task["record_problems"]
    assert problem.startswith("its cassette (a replay stops there) stopped being written: "
                              "RecursionError")
    assert f"warning: seeded: {problem}" in result.output
    journal = next((tmp_path / "out").glob("workspaces-*/journal.jsonl")).read_text()
    assert '"record_problems"' in journal
