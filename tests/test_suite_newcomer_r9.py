"""A newcomer's findings in suite loading: one error per mistake in a union (a sandbox's
mapping), a suite path that is not a regular file, flow style, numbers typed as an
editor types them, and sources checked in the same pass as the schema."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from evalctl._errors import SuiteError
from evalctl._plugin.registry import get_registry
from evalctl._suite.loader import load_suite, validate_suite
from evalctl._suite.problems import schema_problems
from evalctl._suite.yamlsource import parse

TASK = """\
tasks:
  - id: one
    prompt: Make a.txt
    checks:
      - type: file_exists
        path: a.txt
"""


def _with_sandbox(lines: str) -> str:
    return "defaults:\n  sandbox:" + lines + "\n" + TASK


# -- 1. A union's errors are the errors of the branch the value was meant for --------

def test_a_bad_option_of_a_named_sandbox_is_one_error_at_its_line(write_suite):
    problems = validate_suite(write_suite(_with_sandbox("\n    name: bwrap\n"
                                                        "    memory_mb: lots")))
    assert [(p.line, p.message) for p in problems] == [
        (4, "'defaults', 'sandbox', 'memory_mb': expected a whole number, got the text "
            "'lots'")], problems


def test_an_option_the_named_sandbox_lacks_is_one_error(write_suite):
    problems = validate_suite(write_suite(_with_sandbox("\n    name: local\n"
                                                        "    memory_mb: 3")))
    assert [(p.line, p.message) for p in problems] == [
        (4, "'defaults', 'sandbox': unexpected key 'memory_mb'; allowed: name")], problems


def test_an_unknown_sandbox_name_in_a_mapping_is_one_error_naming_the_known_ones(write_suite):
    problems = validate_suite(write_suite(_with_sandbox("\n    name: docker")))
    assert len(problems) == 1 and problems[0].line == 3, problems
    assert "unknown sandbox 'docker'" in problems[0].message
    assert "bwrap, local" in problems[0].message


@pytest.mark.parametrize(("written", "line", "message"), [
    (" bwrapp", 2, "'defaults', 'sandbox': expected one of auto, bwrap, local; got the text "
                   "'bwrapp' (did you mean 'bwrap'?)"),
    (" 3", 2, "'defaults', 'sandbox': expected one of auto, bwrap, local or a mapping; got "
              "the number 3"),
    ("\n    memory_mb: 3", 2, "'defaults', 'sandbox': missing required key 'name' (one of "
                           "bwrap, local)"),
    ("\n    name: 3", 3, "'defaults', 'sandbox', 'name': expected one of bwrap, local; got "
                      "the number 3"),
])
def test_a_sandbox_value_meant_for_no_branch_is_one_error(write_suite, written, line,
                                                          message):
    problems = validate_suite(write_suite(_with_sandbox(written)))
    assert [(p.line, p.message) for p in problems] == [(line, message)], problems


def test_any_union_discriminated_by_a_const_key_reports_the_chosen_branch_only():
    """Not only sandboxes: a oneOf of mappings each fixing `type` to its own value."""
    schema = {"type": "object", "properties": {"item": {"oneOf": [
        {"type": "object", "properties": {"type": {"const": "a"}, "x": {"type": "integer"}},
         "required": ["type"], "additionalProperties": False},
        {"type": "object", "properties": {"type": {"const": "b"}, "y": {"type": "string"}},
         "required": ["type"], "additionalProperties": False},
    ]}}}

    def problems(text: str) -> list[tuple[int, str]]:
        located = parse(text, "s.yaml")
        return [(p.line, p.message) for p in
                schema_problems(located, schema, "s.yaml", get_registry())]

    assert problems("item:\n  type: b\n  y: 3\n") == [
        (3, "'item', 'y': expected text, got the number 3; quote it to make it text")]
    assert problems("item:\n  type: c\n") == [
        (2, "'item', 'type': expected one of a, b; got the text 'c'")]


# -- 2. Only a regular file is read as a suite ----------------------------------------

def test_a_dangling_link_says_no_such_file_and_where_it_leads(tmp_path):
    link = tmp_path / "dangling.yaml"
    link.symlink_to(tmp_path / "gone" / "suite.yaml")
    [problem] = validate_suite(link)
    assert problem.message == (f"cannot read suite: no such file (a link to "
                               f"{tmp_path / 'gone' / 'suite.yaml'})"), problem


def _without_hanging(call, fifo: Path) -> list:
    """What `call` returned, run in a thread; a failure if it waits on the FIFO (a
    writer then lets it go, so no thread is left blocked)."""
    found: list = []
    reader = threading.Thread(target=lambda: found.append(call()), daemon=True)
    reader.start()
    reader.join(10)
    if reader.is_alive():
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        reader.join(10)
        pytest.fail("reading a FIFO as the suite hung")
    return found


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
@pytest.mark.parametrize("through_link", [False, True])
def test_a_fifo_as_the_suite_is_refused_without_waiting_for_a_writer(tmp_path, through_link):
    fifo = tmp_path / "f.yaml"
    os.mkfifo(fifo)
    named = fifo
    if through_link:
        named = tmp_path / "link.yaml"
        named.symlink_to(fifo)
    [problems] = _without_hanging(lambda: validate_suite(named), fifo)
    assert len(problems) == 1 and "it is a named pipe (FIFO)" in problems[0].message, problems
    assert ("(a link to" in problems[0].message) is through_link


@pytest.mark.skipif(not Path("/dev/null").is_char_device(), reason="no /dev/null here")
def test_a_device_as_the_suite_is_refused():
    [problem] = validate_suite("/dev/null")
    assert "cannot read suite: it is a device" in problem.message, problem


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
def test_a_file_that_turns_into_a_fifo_after_the_first_look_is_refused(tmp_path,
                                                                      monkeypatch):
    """What is opened is looked at again (fstat): a FIFO swapped in after the stat is
    neither waited on nor read."""
    fifo = tmp_path / "f.yaml"
    os.mkfifo(fifo)
    regular = tmp_path / "regular.yaml"
    regular.write_text(TASK)
    real_stat = os.stat
    monkeypatch.setattr(os, "stat", lambda path, *a, **k: real_stat(
        regular if Path(path) == fifo else path, *a, **k))

    def load() -> list:
        try:
            load_suite(fifo, use_cache=False)
        except SuiteError as exc:
            return exc.problems
        return []

    [problems] = _without_hanging(load, fifo)
    assert len(problems) == 1 and "it is a named pipe (FIFO)" in problems[0].message, problems


# -- 3. Flow style is read as block style is (it was refused) --------------------------

@pytest.mark.parametrize(("flow", "block"), [
    ("  tags: [x, 'y z']\n", "  tags:\n    - x\n    - y z\n"),
    ("  limits: {turns: 3, seconds: 20}\n", "  limits:\n    turns: 3\n    seconds: 20\n"),
    ("  files: {a.txt: hi}\n", "  files:\n    a.txt: hi\n"),
])
def test_flow_style_is_read_as_the_block_style_it_stands_for(write_suite, flow, block):
    head = "- id: a\n  prompt: p\n"
    checks = "  checks: [{type: file_exists, path: x}, {type: file_contains, path: x, " \
        "text: 'a, b'}]\n"
    written = write_suite(head + flow + checks, "flow.yaml")
    assert validate_suite(written) == []
    blocked = write_suite(head + block + "  checks:\n    - type: file_exists\n      path: x\n"
                          "    - type: file_contains\n      path: x\n      text: a, b\n",
                          "block.yaml")
    [read], [meant] = load_suite(written).tasks, load_suite(blocked).tasks
    assert (read.tags, read.limits, read.files, read.checks) == \
        (meant.tags, meant.limits, meant.files, meant.checks)
    assert read.check_lines == (4, 4)  # each check at the line it is written on


def test_a_flow_value_where_text_is_wanted_says_to_quote_it(write_suite):
    [problem] = validate_suite(write_suite("- id: a\n  prompt: [WIP]\n  checks:\n"
                                           "    - type: file_exists\n      path: x\n"))
    assert (problem.line, problem.message) == (2, (
        "task 'a', 'prompt': expected text, got a list (written [...], flow style); a text "
        "that starts with '[' must be quoted to be text"))


# -- 4. Numbers typed as YAML 1.2's core schema types them ---------------------------

def test_every_core_schema_number_where_text_is_wanted_is_refused_in_one_pass(write_suite):
    """`.inf` used to be said alone ("not a finite number"), hiding the others."""
    problems = validate_suite(write_suite(TASK + """\
    script:
      - text: 0x10
      - text: 0o17
      - text: +12
      - text: .inf
      - text: -.Inf
"""))
    assert [(p.line, p.message.split(": ", 1)[1]) for p in problems] == [
        (8, "expected text, got the number 16; quote it to make it text"),
        (9, "expected text, got the number 15; quote it to make it text"),
        (10, "expected text, got the number 12; quote it to make it text"),
        (11, "expected text, got the number inf; quote it to make it text"),
        (12, "expected text, got the number -inf; quote it to make it text"),
    ], problems


def test_a_number_no_json_holds_is_refused_with_the_other_errors(write_suite):
    problems = validate_suite(write_suite(TASK + """\
    limits:
      seconds: .nan
      turns: 0
  - id: two
    prompt: 2
    checks:
      - type: file_exists
        path: a.txt
"""))
    assert [(p.line, p.message) for p in problems] == [
        (8, "task 'one', 'limits', 'seconds': nan is not a finite number"),
        (9, "task 'one', 'limits', 'turns': 0 is less than the minimum of 1"),
        (11, "task 'two', 'prompt': expected text, got the number 2; quote it to make it "
             "text"),
    ], problems


# -- 5. Sources are checked in the same pass as the schema ---------------------------

def test_a_missing_source_is_reported_with_the_schema_errors(write_suite, tmp_path):
    problems = validate_suite(write_suite("""\
defaults:
  source:
    archive: missing.tar.gz
tasks:
  - id: one
    prompt: p
    source:
      dir: nowhere
    checks:
      - type: file_exists
        path: x
  - id: two
    prompt: 2
    checks:
      - type: file_exists
        path: x
  - id: three
    prompt: p
    checks:
      - type: file_exists
        path: x
  - id: four
    prompt: p
    source:
      dir: also-nowhere
      strip: 1
    checks:
      - type: file_exists
        path: x
"""))
    assert [(p.line, p.message) for p in problems] == [
        (2, f"source archive 'missing.tar.gz': {tmp_path / 'missing.tar.gz'} does not exist "
            "(paths are relative to the suite file) (used by 2 tasks)"),
        (7, f"source dir 'nowhere': {tmp_path / 'nowhere'} does not exist (paths are "
            "relative to the suite file)"),
        (13, "task 'two', 'prompt': expected text, got the number 2; quote it to make it "
             "text"),
        # A source of the wrong shape is the schema's to report, and is not looked for.
        (24, "task 'four', 'source': 'strip' needs 'archive' too"),
    ], problems


def test_sources_are_not_looked_for_when_the_yaml_cannot_be_read(write_suite):
    problems = validate_suite(write_suite("- id: a\n  source:\n    dir: nowhere\n"
                                          "  tags: [x\n"))
    assert len(problems) == 1 and problems[0].message.startswith("invalid YAML"), problems


@pytest.mark.parametrize(("written", "why"), [
    ('"a\\0b"', "embedded null byte"),
    ("~no-such-user-here/project", "Could not determine home directory"),
])
def test_a_source_path_no_file_can_have_is_a_problem_not_a_traceback(write_suite, written,
                                                                     why):
    """Found while making sources part of the same pass: a NUL byte, or `~user` of no
    user, made resolving the path raise, alone or beside schema errors, and again from
    the cache."""
    text = ("- id: one\n  prompt: p\n  source:\n    dir: " + written + "\n  checks:\n"
            "    - type: file_exists\n      path: x\n")
    for _ in range(2):  # the second load is answered from the cache
        [problem] = validate_suite(write_suite(text))
        assert problem.line == 3 and "not a usable path" in problem.message, problem
        assert why in problem.message
    broken = validate_suite(write_suite(text.replace("prompt: p", "prompt: 2")))
    assert [p.line for p in broken] == [2, 3], broken


def test_an_integer_too_long_to_show_in_a_union_is_its_own_one_problem(write_suite):
    """The union's "got ..." would have to write the number out, which Python refuses."""
    problems = validate_suite(write_suite(_with_sandbox(" 0x" + "f" * 4000)))
    assert [(p.line, "too long to write out" in p.message) for p in problems] == [(2, True)]
