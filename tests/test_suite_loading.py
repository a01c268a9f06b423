"""Suite loading: YAML, editor-typed values, the composed schema, the rules."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

import evalctl
import evalctl.testing
from evalctl._cli import cli
from evalctl._suite.cache import cache_dir
from evalctl._suite.loader import load_suite, validate_suite

from .conftest import SUITES, registry_with

MINIMAL = """\
- id: one
  prompt: Make a.txt
  checks:
    - type: file_exists
      path: a.txt
"""


def test_the_list_form_loads(write_suite):
    suite = load_suite(write_suite(MINIMAL))
    task = suite.tasks[0]
    assert (task.id, task.prompt, task.permissions, task.line) == ("one", "Make a.txt", "full", 1)
    assert task.checks == ({"type": "file_exists", "path": "a.txt"},)
    assert task.limits.turns == 30 and "script" not in task.extra


def test_the_mapping_form_applies_defaults(write_suite):
    suite = load_suite(write_suite("""\
name: demo
defaults:
  permissions: read-only
  limits:
    turns: 5
  tags:
    - smoke
tasks:
  - id: one
    prompt: p
    tags:
      - extra
    limits:
      seconds: 20
    checks:
      - type: file_exists
        path: a.txt
  - id: two
    prompt: p
    permissions: full
    checks:
      - type: file_exists
        path: b.txt
"""))
    one, two = suite.tasks
    assert suite.name == "demo"
    assert one.permissions == "read-only" and two.permissions == "full"
    assert (one.limits.turns, one.limits.seconds) == (5, 20.0)
    assert one.tags == ("smoke", "extra") and two.tags == ("smoke",)
    assert two.line == 18


def test_values_are_typed_as_editors_type_them(write_suite):
    suite = load_suite(write_suite("""\
- id: typed
  prompt: p
  files:
    n.txt: "42"
    block.txt: |
      true
  limits:
    turns: 3
    cost: 0.5
  checks:
    - type: command
      command: "true"
      timeout: 2.5
    - type: file_contains
      path: n.txt
      text: "42"
      negate: false
"""))
    task = suite.tasks[0]
    assert task.files == {"n.txt": "42", "block.txt": "true\n"}
    assert task.limits.turns == 3 and task.limits.cost == 0.5
    assert task.checks[0] == {"type": "command", "command": "true", "timeout": 2.5}
    assert task.checks[1]["negate"] is False


def test_an_unquoted_number_where_text_is_expected_is_an_error_as_in_an_editor(write_suite):
    path = write_suite("""\
- id: t
  prompt: p
  checks:
    - type: file_contains
      path: a.txt
      text: 42
""")
    problems = validate_suite(path)
    assert [(p.line, p.severity) for p in problems] == [(6, "error")]
    assert "expected text, got the number 42; quote it" in problems[0].message


def test_every_problem_is_reported_not_only_the_first(write_suite):
    path = write_suite("""\
- id: a
  prompt: p
  checks:
    - type: file_exists
- id: b
  prompt: p
  checks:
    - type: nope
- id: c
  prompt: p
  colour: red
  checks:
    - type: file_exists
      path: x
""")
    problems = validate_suite(path)
    assert [p.line for p in problems] == [4, 8, 11]
    assert "missing required key 'path' for check type file_exists" in problems[0].message
    assert "unknown check type 'nope'" in problems[1].message
    assert "unexpected key 'colour'" in problems[2].message


def test_a_third_party_graders_params_are_validated(write_suite):
    @evalctl.hookimpl
    def evalctl_register_graders(register):
        register(evalctl.GraderSpec(
            name="word_count", grade=lambda c, w, r: evalctl.CheckResult(True),
            params_schema={"type": "object", "properties": {"max": {"type": "integer"}},
                           "required": ["max"]}))

    import types
    plugin = types.ModuleType("wc")
    plugin.evalctl_register_graders = evalctl_register_graders
    registry = registry_with(("wc", plugin))
    path = write_suite("""\
- id: t
  prompt: p
  checks:
    - type: file_exists
      path: a
    - type: word_count
      max: lots
""")
    problems = validate_suite(path, registry)
    assert [(p.line, p.message) for p in problems] == [
        (7, "task 't', checks[1] (word_count), 'max': expected a whole number, got the text "
            "'lots'")]


def test_suite_rules_talk_only_is_an_error_and_tool_names_a_warning(write_suite):
    path = write_suite("""\
- id: talk
  prompt: Say you are done.
  checks:
    - type: succeeded
    - type: grounding
- id: method
  prompt: Use bash to create a.txt
  checks:
    - type: file_exists
      path: a.txt
""")
    problems = validate_suite(path)
    assert [(p.line, p.severity) for p in problems] == [(1, "error"), (7, "warning")]
    assert "the agent cannot satisfy by talking" in problems[0].message
    assert "names the agent's tool(s) bash" in problems[1].message


def test_duplicate_and_case_colliding_ids(write_suite):
    path = write_suite(MINIMAL + MINIMAL + MINIMAL.replace("id: one", "id: ONE"))
    messages = [(p.line, p.message) for p in validate_suite(path)]
    assert (6, "duplicate task id 'one' (first used at line 1)") in messages
    assert any(line == 11 and "only in case" in m for line, m in messages)


@pytest.mark.parametrize("task_id", ["journal.jsonl", "Journal.JSONL"])
def test_a_task_id_a_run_directory_already_holds_is_refused_at_validate_and_run(
        write_suite, tmp_path, task_id):
    """Found by an outside tester: a task `journal.jsonl` validated; its workspace was
    the run's journal (the attempt failed as the agent's failure) and a resume retired
    the journal. Refused at its line, by validate and run, whatever its case (the
    journal's name on a file system that ignores case)."""
    path = write_suite(MINIMAL.replace("id: one", f"id: {task_id}") + MINIMAL)
    messages = [(p.line, p.severity, p.message) for p in validate_suite(path)]
    assert [(line, severity) for line, severity, _ in messages] == [(1, "error")], messages
    assert f"task id '{task_id}' is the name of the file every run directory keeps its " \
           "journal in" in messages[0][2], messages
    for command in (["validate", str(path)], ["run", str(path), "--out", str(tmp_path / "o")]):
        result = CliRunner().invoke(cli, command)
        assert result.exit_code == 2, result.output
        assert f"{path}:1: error: task id '{task_id}'" in result.output, result.output
        assert "Traceback" not in result.output
    assert not (tmp_path / "o").exists()


def test_a_run_directory_holds_nothing_a_task_id_could_name_but_its_workspaces(tmp_path):
    """What the refusal above stands on: besides the workspaces, a run directory holds
    only names that start with a dot (no task id does) and the reserved ones."""
    from evalctl._report.journal import JOURNAL_NAME
    from evalctl._suite.schema import RESERVED_TASK_IDS

    assert JOURNAL_NAME in RESERVED_TASK_IDS
    suite = MINIMAL.replace("  checks:", "  script:\n    - text: Done.\n  checks:")
    run = evalctl.testing.run_suite(suite, sandbox="local", out_dir=tmp_path / "out",
                                    repeat=2)
    names = {entry.name for entry in Path(run.run_directory).iterdir()}
    assert names - {"one@1", "one@2"} - RESERVED_TASK_IDS == \
        {name for name in names if name.startswith(".")}, names


def test_the_cache_returns_the_same_suite_and_follows_the_file(write_suite):
    path = write_suite(MINIMAL)
    first = load_suite(path)
    assert len(list(cache_dir().glob("*.json"))) == 1
    second = load_suite(path)
    assert second.tasks == first.tasks and second.sha256 == first.sha256
    path.write_text(MINIMAL.replace("a.txt", "b.txt"))
    third = load_suite(path)
    assert third.tasks[0].checks[0]["path"] == "b.txt"


def test_a_cached_entry_is_keyed_by_the_installed_graders(write_suite):
    path = write_suite(MINIMAL)
    load_suite(path)
    import types

    @evalctl.hookimpl
    def evalctl_register_graders(register):
        register(evalctl.GraderSpec(name="extra", grade=lambda c, w, r: None))

    plugin = types.ModuleType("extra")
    plugin.evalctl_register_graders = evalctl_register_graders
    load_suite(path, registry_with(("extra", plugin)))
    assert len(list(cache_dir().glob("*.json"))) == 2


GATED = """\
- id: t
  prompt: Make a.txt.
  checks:
    - type: file_exists
      path: a.txt
    - type: gate
      word: open
"""


def _gate_plugin(refused: str, directory, version: str = "1.0", crashes: bool = False):
    """A grader whose preflight validate runs refuses `word: <refused>` (or, `crashes`,
    fails on it with a KeyError), from a module file in `directory` (not an installed
    copy: as an editable install's code is)."""
    import importlib.util

    refusal = "check['no such key']" if crashes else \
        "raise evalctl.UsageError('that word is refused')"
    module_path = directory / "evalctl_gate.py"
    module_path.write_text(
        "import evalctl\n"
        "def preflight(checks):\n"
        "    for check in checks:\n"
        f"        if check['word'] == {refused!r}:\n"
        f"            {refusal}\n"
        "@evalctl.hookimpl\n"
        "def evalctl_register_graders(register):\n"
        "    register(evalctl.GraderSpec(\n"
        "        name='gate', grade=lambda c, w, r: evalctl.CheckResult(True),\n"
        "        params_schema={'type': 'object', 'properties': {'word': {'type': 'string'}}},\n"
        "        preflight=preflight, validate_with_preflight=True))\n")
    spec = importlib.util.spec_from_file_location(f"evalctl_gate_{refused}", module_path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    from evalctl._plugin.registry import PluginSource, entry_point_sources, load_registry

    return load_registry([*entry_point_sources(),
                          PluginSource.from_object("gate", module, "evalctl-gate", version)])


def test_a_cached_entry_is_keyed_by_the_plugins_versions(write_suite, tmp_path):
    """Found by a newcomer: a plugin whose validate-time preflight changed, with the same
    schema, kept the cache's stale "0 errors"."""
    path = write_suite(GATED)
    installed = [tmp_path / f"v{n}" / "site-packages" for n in (1, 2)]
    for directory in installed:  # installed copies: their version is what counts
        directory.mkdir(parents=True)
    assert validate_suite(path, _gate_plugin("closed", installed[0])) == []
    refusing = _gate_plugin("open", installed[1], version="1.1")
    problems = validate_suite(path, refusing)
    assert [p.line for p in problems] == [6] and "that word is refused" in problems[0].message


def test_a_cached_entry_is_keyed_by_a_plugins_code_outside_an_installed_copy(
        write_suite, tmp_path):
    """An editable install changes under one version: its files' times and sizes count."""
    path = write_suite(GATED)
    assert validate_suite(path, _gate_plugin("closed", tmp_path)) == []
    problems = validate_suite(path, _gate_plugin("open", tmp_path))  # same version, new code
    assert [p.line for p in problems] == [6]


def test_evalctls_own_code_is_in_the_key_when_it_is_not_an_installed_copy(tmp_path):
    """Found by a newcomer: in a checkout installed editable (as the README sets it up),
    a validate rule or a built-in grader edited there left the cache answering as
    before. Its files' times and sizes are in the key; an installed copy's are not."""
    import os

    from evalctl._suite.cache import own_code_stamp, plugin_inputs

    core, plugins = tmp_path / "core", tmp_path / "plugins"
    for package in (core, plugins / "graders"):
        package.mkdir(parents=True)
        (package / "__init__.py").write_text("")
    (plugins / "__init__.py").write_text("")
    rules = core / "rules.py"
    rules.write_text("LIMIT = 1\n")
    before = own_code_stamp((core, plugins))
    assert str(rules) in before and str(plugins / "graders" / "__init__.py") in before
    rules.write_text("LIMIT = 22\n")
    os.utime(rules, ns=(1, 1))
    assert own_code_stamp((core, plugins)) != before
    installed = tmp_path / "lib" / "site-packages" / "evalctl"
    installed.mkdir(parents=True)
    assert own_code_stamp((installed,)) == ""
    # This checkout is installed editable here (and in CI): the key holds its code.
    assert any(line.startswith("evalctl's own code ") for line in plugin_inputs([]))


def test_a_preflight_that_crashes_at_validate_is_an_error_at_the_checks_line(
        write_suite, tmp_path):
    """Found by a plugin newcomer: a crash was skipped, so validate passed a suite whose
    run the same crash then stopped with exit 2; it is said at the check's line."""
    path = write_suite(GATED)
    problems = validate_suite(path, _gate_plugin("open", tmp_path, crashes=True))
    assert [p.line for p in problems] == [6]
    assert "checks[1] (gate): the grader's preflight failed (plugin 'gate' (evalctl-gate " \
           "1.0)): KeyError: 'no such key'" in problems[0].message


@pytest.mark.parametrize("name", ["harness", "general", "core", "live"])
def test_the_built_in_suites_are_clean_and_point_editors_at_the_schema(name):
    path = SUITES / f"{name}.yaml"
    assert validate_suite(path) == []
    assert path.read_text().startswith(
        "# yaml-language-server: $schema=../schemas/suite.schema.json\n")


def test_the_schema_accepts_the_built_in_suites_as_an_editor_would_see_them():
    """A generic YAML 1.2 reading (what editors do) validates against the published file."""
    from jsonschema import Draft202012Validator

    from evalctl._suite.yamlsource import parse

    schema = json.loads((SUITES.parent / "schemas" / "suite.schema.json").read_text())
    for path in SUITES.glob("*.yaml"):
        data = parse(path.read_text(), str(path)).data
        assert list(Draft202012Validator(schema).iter_errors(data)) == [], path


# -- A corpus of malformed suites: exit 2 and file:line, never a traceback ------------

MALFORMED: dict[str, tuple[bytes, int, str]] = {
    # Flow style is read (`tags: [a, b]`); a bracket left open, or text after a closed
    # one, is said in the author's words.
    "flow-unclosed": (b"- id: a\n  prompt: p\n  tags: [a, b\n  checks:\n"
                      b"    - type: succeeded\n", 3,
                      "a list written in [...] (flow style) starts on this line and is not "
                      "closed where expected"),
    "flow-then-text": (b"- id: a\n  prompt: [WIP] fix it\n  checks:\n    - type: succeeded\n",
                       2, "'[' starts a list (flow style), so quote the whole text"),
    "duplicate-key": (b"- id: a\n  prompt: p\n  prompt: q\n  checks:\n    - type: succeeded\n",
                      3, "key 'prompt' is given twice in the same mapping"),
    "anchor": (b"- id: a\n  prompt: &p hello\n  checks:\n    - type: succeeded\n", 2, "anchor"),
    "tag": (b"- id: a\n  prompt: !!str hello\n  checks:\n    - type: succeeded\n", 2, "tag"),
    "tabs": (b"- id: a\n\tprompt: p\n", 2, "a tab character: YAML indents with spaces only"),
    "bad-indent": (b"- id: a\n  prompt: p\n checks:\n", 3,
                   "this line is indented 1 space(s); the lines above are indented 0, 2"),
    # The parser's own words for the usual mistakes ("expected <block end>, but found
    # '<block mapping start>'") said nothing a newcomer could act on: each names its fix.
    "unclosed-quote": (b'- id: a\n  prompt: "Make a.txt\n  checks:\n    - type: succeeded\n',
                       2, "a quoted text that starts on this line is never closed"),
    "colon-in-text": (b"- id: a\n  prompt: Fix this: now\n", 2,
                      'quote the whole text (prompt: "Fix this: now")'),
    "key-indented-deeper": (b"- id: a\n  prompt: p\n     checks:\n", 3,
                            "this line is indented 5 space(s)"),
    # A check's second key under its dash, not its first key: the one indentation
    # mistake said without a hint (a column above did start there).
    "key-under-the-dash": (b"- id: a\n  prompt: p\n  checks:\n    - type: file_exists\n"
                           b"    path: x\n", 5,
                           "this line is indented 4 space(s), as the '- ' above it; a key "
                           "of that list item lines up with its first key, at 6 spaces"),
    "list-where-a-key-belongs": (b"- id: a\n  prompt: p\n  - type: succeeded\n", 3,
                                 "a list item ('- ') where a key was expected"),
    "text-after-closing-quote": (b'- id: a\n  prompt: "{x}" and more\n', 2,
                                 "quote the whole text"),
    "key-without-colon": (b"- id: a\n  prompt p\n  checks:\n", 2,
                          "a key needs ': ' after it"),
    "text-starting-with-at": (b"- id: a\n  prompt: @file\n", 2,
                              "a text cannot start with '@' unless it is quoted"),
    "text-starting-with-star": (b"- id: a\n  prompt: * item\n", 2,
                                "a text cannot start with '*' unless it is quoted"),
    "backslash-in-double-quotes": (b'- id: a\n  prompt: "C:\\path"\n', 2,
                                   "\\p is not an escape in a double-quoted text"),
    "two-documents": (b"- id: a\n  prompt: p\n---\n- id: b\n", 3,
                      "a suite is one YAML document"),
    "empty": (b"", 1, "empty suite"),
    "only-comments": (b"# nothing here\n\n", 1, "empty suite"),
    "non-utf8": (b"- id: a\n  prompt: caf\xe9\n", 2, "not UTF-8"),
    "scalar-document": (b"just a sentence\n", 1, "expected a list of tasks, or a mapping"),
    "wrong-type-prompt": (b"- id: a\n  prompt: 12\n  checks:\n    - type: succeeded\n", 2,
                          "expected text, got the number 12"),
    "checks-not-list": (b"- id: a\n  prompt: p\n  checks: nothing\n", 3, "expected a list"),
    "empty-checks": (b"- id: a\n  prompt: p\n  checks:\n", 3, "expected a list, got nothing"),
    "empty-prompt": (b"- id: a\n  prompt: ''\n  checks:\n    - type: file_exists\n      path: x\n",
                     2, "must not be empty"),
    "missing-prompt": (b"- id: a\n  checks:\n    - type: file_exists\n      path: x\n", 1,
                       "missing required key 'prompt'"),
    "unknown-check": (b"- id: a\n  prompt: p\n  checks:\n    - type: file_exist\n      path: x\n",
                      4, "did you mean 'file_exists'"),
    "missing-param": (b"- id: a\n  prompt: p\n  checks:\n    - type: command\n", 4,
                      "missing required key 'command'"),
    "unknown-param": (b"- id: a\n  prompt: p\n  checks:\n    - type: command\n"
                      b"      command: 'true'\n      timout: 3\n", 6, "did you mean 'timeout'"),
    "bad-param-type": (b"- id: a\n  prompt: p\n  checks:\n    - type: command\n"
                       b"      command: 'true'\n      timeout: soon\n", 6, "expected a number"),
    "traversal": (b"- id: a\n  prompt: p\n  files:\n    ../escape.txt: x\n  checks:\n"
                  b"    - type: file_exists\n      path: x\n", 4,
                  "must be a relative path that stays inside the workspace"),
    "absolute-path": (b"- id: a\n  prompt: p\n  files:\n    /etc/passwd: x\n  checks:\n"
                      b"    - type: file_exists\n      path: x\n", 4, "relative path"),
    "nested-traversal": (b"- id: a\n  prompt: p\n  files:\n    a/../../b: x\n  checks:\n"
                         b"    - type: file_exists\n      path: x\n", 4, "relative path"),
    "bad-id": (b"- id: ../up\n  prompt: p\n  checks:\n    - type: file_exists\n      path: x\n",
               1, "usable as a directory name"),
    "bad-permissions": (b"- id: a\n  prompt: p\n  permissions: admin\n  checks:\n"
                        b"    - type: file_exists\n      path: x\n", 3,
                        "expected one of full, read-only"),
    "negative-turns": (b"- id: a\n  prompt: p\n  limits:\n    turns: 0\n  checks:\n"
                       b"    - type: file_exists\n      path: x\n", 4, "minimum"),
    "mapping-without-tasks": (b"name: x\n", 1, "missing required key 'tasks'"),
    "unknown-top-level-key": (b"name: x\ntask:\n  - id: a\n", 2, "unexpected key 'task'"),
    "only-talk": (b"- id: a\n  prompt: p\n  checks:\n    - type: succeeded\n", 1,
                  "the agent cannot satisfy by talking"),
    "duplicate-id": (b"- id: a\n  prompt: p\n  checks:\n    - type: file_exists\n      path: x\n"
                     b"- id: a\n  prompt: p\n  checks:\n    - type: file_exists\n      path: x\n",
                     6, "duplicate task id 'a'"),
    "script-unknown-key": (b"- id: a\n  prompt: p\n  checks:\n    - type: file_exists\n"
                           b"      path: x\n  script:\n    - txt: hi\n", 7, "unexpected key 'txt'"),
    "file-content-number": (b"- id: a\n  prompt: p\n  files:\n    a.txt: 3\n  checks:\n"
                            b"    - type: file_exists\n      path: x\n", 4, "quote it"),
    "regex-and-text": (b"- id: a\n  prompt: p\n  checks:\n    - type: file_contains\n"
                       b"      path: x\n      text: a\n      regex: b\n", 4,
                       "exactly one of 'text', 'regex'"),
    "check-path-outside": (b"- id: a\n  prompt: p\n  checks:\n    - type: file_exists\n"
                           b"      path: ../../etc/passwd\n", 5,
                           "that stays inside the workspace: it has a '..' part"),
    # Python's `$` also matches before a final newline: the patterns end the text
    # explicitly, so these fail in Python, in jsonschema-rs and in an editor alike.
    "id-newline": (b'- id: "t\\n"\n  prompt: p\n  checks:\n    - type: file_exists\n'
                   b"      path: x\n", 1, "usable as a directory name"),
    "seed-path-dotdot-newline": (b'- id: a\n  prompt: p\n  files:\n    "x/..\\n": x\n  checks:\n'
                                 b"    - type: file_exists\n      path: x\n", 4,
                                 "stays inside the workspace"),
    "check-path-dotdot-newline": (b"- id: a\n  prompt: p\n  checks:\n    - type: file_exists\n"
                                  b'      path: "..\\n"\n', 5,
                                  "that stays inside the workspace: it has a '..' part"),
    "check-path-absolute": (b"- id: a\n  prompt: p\n  checks:\n    - type: file_contains\n"
                            b"      path: /etc/passwd\n      text: root\n", 5,
                            "that stays inside the workspace: it is absolute"),
}


def _nested(levels: int) -> bytes:
    """A task whose extra key nests `levels` mappings, one per line (line 3 is the first)."""
    return (b"- id: a\n  prompt: p\n" + b"".join(b"  " * (level + 1) + b"k:\n"
                                                    for level in range(levels)) +
            b"  checks:\n    - type: file_exists\n      path: x\n")


# Deeper than any suite needs: a problem at the line where it gets too deep, not a
# RecursionError from the validator (or, past libyaml's own limit, from strictyaml).
MALFORMED["too-deep"] = (_nested(150), 102, "nested more than 100 levels deep")
MALFORMED["far-too-deep"] = (_nested(1200), 1, "nested too deeply to read")

@pytest.mark.parametrize("name", sorted(MALFORMED))
def test_malformed_suites_exit_2_with_file_and_line(name, tmp_path):
    content, line, expected = MALFORMED[name]
    path = tmp_path / f"{name}.yaml"
    path.write_bytes(content)
    result = CliRunner().invoke(cli, ["validate", str(path)])
    assert result.exit_code == 2, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    assert "Traceback" not in result.output
    matching = [out for out in result.output.splitlines() if out.startswith(f"{path}:{line}:")]
    assert matching, result.output
    assert any(expected in out for out in matching), result.output


def test_the_run_command_refuses_a_malformed_suite_before_starting(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_bytes(MALFORMED["flow-unclosed"][0])
    result = CliRunner().invoke(cli, ["run", str(path), "--out", str(tmp_path / "out")])
    assert result.exit_code == 2
    assert f"{path}:3:" in result.output
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("command", ["validate", "run"])
def test_a_missing_file_or_a_directory_is_a_clear_error_without_an_invented_line(
        tmp_path, command):
    missing = CliRunner().invoke(cli, [command, str(tmp_path / "nope.yaml")])
    assert missing.exit_code == 2
    first = missing.output.splitlines()[0]
    assert first.startswith(f"{tmp_path / 'nope.yaml'}: error: cannot read suite: "
                            "No such file or directory"), missing.output
    assert first.count("error:") == 1 and ".yaml:1:" not in missing.output
    directory = CliRunner().invoke(cli, [command, str(tmp_path)])
    assert directory.exit_code == 2
    assert f"{tmp_path}: error: cannot read suite: it is a directory" in directory.output
    assert directory.output.count("error:") == 1, directory.output


def test_a_misspelled_text_or_regex_says_one_of_them_is_needed(write_suite):
    path = write_suite("- id: a\n  prompt: p\n  checks:\n    - type: file_contains\n"
                       "      path: x\n      txt: hi\n")
    messages = [(p.line, p.message) for p in validate_suite(path)]
    assert messages == [
        (4, "task 'a', checks[0] (file_contains): needs exactly one of 'text', 'regex'"),
        (6, "task 'a', checks[0] (file_contains): unexpected key 'txt' (did you mean 'text'?)"),
    ]


SCRIPTED = MINIMAL + """\
  script:
    - tool_calls:
        - tool: TOOL
          input:
            path: a.txt
            ARGUMENTS
    - text: Done.
"""


def scripted(tool: str, arguments: str) -> str:
    return SCRIPTED.replace("TOOL", tool).replace("ARGUMENTS", arguments)


def test_validate_checks_the_scripts_tool_names_at_their_line(write_suite):
    problems = validate_suite(write_suite(scripted("create_file", "content: hi")))
    assert [(p.line, p.severity) for p in problems] == [(8, "error")]
    message = problems[0].message
    assert message.startswith("task 'one', script[0], tool_calls[0] (create_file), 'tool': ")
    assert "expected one of read_file, write_file, edit_file, bash, glob, grep" in message
    assert "got the text 'create_file'" in message
    close = validate_suite(write_suite(scripted("writefile", "content: hi")))
    assert "(did you mean 'write_file'?)" in close[0].message


def test_validate_checks_the_scripts_arguments_against_the_tools_schema(write_suite):
    problems = validate_suite(write_suite(scripted("edit_file", "old: 8080\n            "
                                                   "new: 9090")))
    messages = [(p.line, p.message) for p in problems]
    where = "task 'one', script[0], tool_calls[0] (edit_file), 'input'"
    assert messages == [
        (9, f"{where}: missing required key 'new_text'"),
        (9, f"{where}: missing required key 'old_text'"),
        (11, f"{where}: unexpected key 'old' (did you mean 'old_text'?)"),
        (12, f"{where}: unexpected key 'new' (did you mean 'new_text'?)"),
    ]
    wrong_type = validate_suite(write_suite(scripted("read_file", "offset: first")))
    assert [(p.line, p.message) for p in wrong_type] == [
        (11, f"{where.replace('edit_file', 'read_file')}, 'offset': expected a whole number, "
             "got the text 'first'")]


def test_a_tool_with_required_arguments_needs_its_input(write_suite):
    path = write_suite(MINIMAL + "  script:\n    - tool_calls:\n        - tool: bash\n"
                       "    - text: Done.\n")
    problems = validate_suite(path)
    assert [(p.line, p.message) for p in problems] == [
        (8, "task 'one', script[0], tool_calls[0] (bash): missing required key 'input'")]


def test_every_built_in_tool_call_in_the_built_in_suites_is_valid():
    for path in SUITES.glob("*.yaml"):
        assert validate_suite(path) == [], path


def test_duplicate_ids_are_reported_with_the_other_errors(write_suite):
    path = write_suite(MINIMAL + "- id: one\n  prompt: p\n  checks:\n    - type: nope\n"
                       "- id: two\n  checks:\n    - type: file_exists\n      path: x\n"
                       "- id: two\n  prompt: p\n  checks: nothing\n")
    messages = [(p.line, p.message) for p in validate_suite(path)]
    assert (6, "duplicate task id 'one' (first used at line 1)") in messages
    assert (14, "duplicate task id 'two' (first used at line 10)") in messages
    assert any(line == 9 and "unknown check type 'nope'" in m for line, m in messages)
    assert any(line == 10 and "missing required key 'prompt'" in m for line, m in messages)


def test_a_large_suite_with_an_error_reports_the_whole_documents_line(write_suite):
    items = [MINIMAL.replace("id: one", f"id: t{i}") for i in range(250)]
    items[200] = items[200].replace("  prompt: Make a.txt\n", "  prompt: Make a.txt\n  prompt: x\n")
    path = write_suite("".join(items))
    problems = validate_suite(path)
    assert [(p.line, "key 'prompt' is given twice" in p.message) for p in problems] == \
        [(1003, True)]


def test_cached_warnings_name_the_file_they_were_loaded_from(tmp_path):
    text = MINIMAL.replace("Make a.txt", "Use bash to make a.txt")
    first, second = tmp_path / "one.yaml", tmp_path / "two.yaml"
    first.write_text(text)
    second.write_text(text)
    assert load_suite(first).warnings[0].file == str(first)
    assert load_suite(second).warnings[0].file == str(second)  # same bytes, from the cache


def test_validate_answers_an_unchanged_suite_from_the_verified_cache(write_suite, monkeypatch):
    """validate stores what it validated and answers the same file from the cache; an
    entry that was tampered with (its content no longer matches its digest) or that
    belongs to other bytes is not used: the file is validated again."""
    from evalctl._suite import loader

    path = write_suite(MINIMAL.replace("Make a.txt", "Use bash to make a.txt"))
    first = validate_suite(path)
    assert [p.severity for p in first] == ["warning"]
    (entry,) = cache_dir().glob("*.json")

    parses = []
    real = loader._parse_and_validate

    def counted(*args, **kwargs):
        parses.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(loader, "_parse_and_validate", counted)
    assert validate_suite(path) == first and parses == []  # from the cache

    header, _, value = entry.read_text().partition("\n")
    stored = json.loads(value)
    stored["warnings"] = []  # a tampered entry: the digest no longer matches
    entry.write_text(header + "\n" + json.dumps(stored))
    assert validate_suite(path) == first and parses == [1]  # validated again
    assert json.loads(entry.read_text().partition("\n")[2])["warnings"] != []  # rewritten

    path.write_text(MINIMAL.replace("type: file_exists", "type: no_such_grader"))
    problems = validate_suite(path)  # changed bytes: another key, never the old entry
    assert parses == [1, 1] and any(p.severity == "error" for p in problems)


def test_numbers_no_json_holds_are_problems_at_their_line(write_suite):
    """NaN and infinity (Python's jsonschema lets NaN through every bound, and a NaN
    timeout disorders every timer of a run) and integers too long to write out are
    refused where they are, all at once, with no traceback."""
    problems = validate_suite(write_suite(MINIMAL + """\
  limits:
    seconds: .nan
- id: two
  prompt: Two
  checks:
    - type: command
      command: "true"
      timeout: .inf
  script:
    - tool_calls:
        - tool: bash
          input:
            command: sleep 1
            timeout: -.inf
    - text: Slept.
- id: three
  prompt: Three
  limits:
    turns: 0x""" + "f" * 4000 + """
  checks:
    - type: file_exists
      path: a.txt
"""))
    assert [p.line for p in problems] == [7, 13, 19, 24], problems
    assert all("is not a finite number" in p.message for p in problems[:3])
    assert "too long to write out" in problems[3].message and "task 'three'" in \
        problems[3].message


def test_a_decimal_number_too_long_to_read_is_a_problem_at_its_line(write_suite, tmp_path,
                                                                   monkeypatch):
    """Python reads no decimal integer over 4,300 digits: in a suite (a number or, unquoted,
    a text) that was a traceback; it is an error at its line, and in evalctl.toml a usage
    error naming the file."""
    problems = validate_suite(write_suite(MINIMAL.replace("Make a.txt", "9" * 4310)))
    assert [(p.line, "4,310 digits is too long to read" in p.message) for p in problems] == \
        [(2, True)], problems
    (tmp_path / "evalctl.toml").write_text("concurrency = " + "9" * 4310 + "\n")
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(cli, ["run", "harness"])
    assert result.exit_code == 2 and "evalctl.toml:1: error: invalid TOML" in result.output, \
        result.output


def test_an_integer_written_with_a_point_is_an_integer(write_suite):
    """`turns: 2.0` is an integer to JSON Schema: the task gets 2, not a float that
    ends every attempt in evalctl's own error."""
    suite = load_suite(write_suite(MINIMAL + "  limits:\n    turns: 2.0\n"))
    assert suite.tasks[0].limits.turns == 2 and type(suite.tasks[0].limits.turns) is int


@pytest.mark.parametrize("files, message", [
    ({"d": "x", "d/e": "y"}, "files 'd/e' is inside 'd', which files makes a file"),
    ({"./.": "x"}, "files './.' has an empty or '.' part"),
    ({"n" * 256: "x"}, "has a part over 255 bytes"),
])
def test_file_names_no_workspace_can_hold_are_problems(write_suite, files, message):
    """Found by an attacker: these passed validate and failed every attempt's setup."""
    import json as json_text

    seeded = "".join(f"    {json_text.dumps(name)}: {value}\n" for name, value in files.items())
    problems = validate_suite(write_suite(MINIMAL + "  files:\n" + seeded))
    assert [p.line for p in problems] and all(p.line >= 6 for p in problems), problems
    assert any(message in p.message for p in problems), problems


def test_a_verify_file_where_a_seeded_file_has_its_directory_is_a_problem(write_suite):
    problems = validate_suite(write_suite(
        MINIMAL + "  files:\n    d/e: x\n  verify_files:\n    d: y\n"))
    assert [(p.line, p.message.endswith("files 'd/e' is inside 'd', which verify_files makes "
                                        "a file")) for p in problems] == [(7, True)], problems


@pytest.mark.parametrize("check, said", [
    ({"type": "file_exists", "path": "a.txt", "paht": "b.txt"},
     "invalid file_exists check (evalctl validate refuses it too): unexpected key 'paht' "
     "(did you mean 'path'?)"),
    ({"type": "file_contains", "path": "a.txt"}, "needs exactly one of 'text', 'regex'"),
    ({"type": "file_contains", "path": "a.txt", "regex": "(["},
     "file_contains regex '([' is not a regular expression"),
])
def test_grade_check_refuses_what_validate_refuses(check, said):
    """Found by a newcomer: grade_check graded a check the suite schema refuses, though
    it is documented to run a plugin through the same code as `evalctl run`."""
    with pytest.raises(evalctl.UsageError) as raised:
        evalctl.testing.grade_check(check, files={"a.txt": "x"}, sandbox="local")
    assert said in str(raised.value)
