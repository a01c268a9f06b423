"""Newcomers' leftovers: a CLI agent's argv with shell syntax in evalctl.toml said without
its line, and not at all in a preset the run does not use; a CLI agent's program
installed here but out of the sandbox's reach, said by every attempt in turn; a script
whose last turn calls tools, which runs out, passed validate; flow style (`tags: [a, b]`)
stopped the parse."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from evalctl._suite.loader import validate_suite
from evalctl._suite.yamlsource import YamlSyntaxError, parse
from evalctl.plugins.agents import command
from evalctl.plugins.sandboxes import bwrap
from evalctl.testing import run_suite

from .conftest import run_cli
from .test_newcomer_r22 import WRITE_HELLO

# --------------------------------- 1: argv's shell syntax in evalctl.toml, at its line

SHELL_IN_PRESETS = """\
agent = "my-agent"

[agents.my-agent]
base = "command"
argv = "my-agent {prompt} | tee log"

[agents.unused]
base = "claude-code"
argv = "cd /opt && claude -p {prompt}"

[agents.unsplittable]
base = "command"
argv = "my-agent 'unterminated"

[agent_options]
argv = "my-agent $(cat prompt)"
"""


def test_shell_syntax_in_every_preset_is_said_at_its_line_when_the_config_is_read(
        tmp_path, write_suite):
    """Said without evalctl.toml's line, by the run using the preset only: a preset no
    run used kept its pipe until one did."""
    suite = write_suite(WRITE_HELLO)
    toml = tmp_path / "evalctl.toml"
    toml.write_text(SHELL_IN_PRESETS, encoding="utf-8")
    for agent in ([], ["--agent", "evalctl"]):  # the config's agent, or another
        result = run_cli(tmp_path, str(suite), *agent, "--sandbox", "local")
        assert result.exit_code == 2, result.output
        assert f"{toml}:5: error: [agents.my-agent] argv: 'my-agent {{prompt}} | tee log' " \
               "holds a pipe '|': argv is not run by a shell" in result.output
        assert f"{toml}:9: error: [agents.unused] argv: 'cd /opt && claude -p {{prompt}}' " \
               "holds a command list '&&'" in result.output
        assert f"{toml}:13: error: [agents.unsplittable] argv: \"my-agent 'unterminated\" " \
               "cannot be split into words (no closing quotation)" in result.output
        assert f"{toml}:16: error: [agent_options] argv: 'my-agent $(cat prompt)' holds a " \
               "variable or substitution '$(...)'" in result.output
        assert "Put the command line in a script and run that" in result.output
        assert not list((tmp_path / "eval_reports").glob("workspaces-*"))  # no task ran


# ------------------------ 5: a CLI agent's program out of the sandbox's reach, before any task

def _program(directory: Path, name: str, text: str = "#!/bin/sh\necho hello > hello.txt\n"
             ) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    program = directory / name
    program.write_text(text)
    program.chmod(0o755)
    return program


def test_what_bwrap_shows_of_the_host(tmp_path):
    tools = _program(tmp_path / "tools", "my-agent")
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "linked").symlink_to(tmp_path / "tools")
    (tmp_path / "tools" / "out").symlink_to(_program(tmp_path / "elsewhere", "real"))
    assert bwrap.visible("/usr/bin/env", {}) and bwrap.visible("/bin/sh", {})
    assert bwrap.visible(sys.executable, {})  # the Python installation
    assert not bwrap.visible(str(tools), {})
    assert bwrap.visible(str(tools), {"ro_paths": [str(tmp_path / "tools")]})
    # A mount is at the path its own links resolve to; a link out of it leads nowhere.
    assert not bwrap.visible(str(tmp_path / "linked" / "my-agent"),
                             {"ro_paths": [str(tmp_path / "linked")]})
    assert not bwrap.visible(str(tmp_path / "tools" / "out"),
                             {"ro_paths": [str(tmp_path / "tools")]})


def test_a_program_its_interpreter_or_its_script_out_of_reach_is_said_by_the_preflight(
        tmp_path):
    tools, hidden = tmp_path / "tools", tmp_path / "hidden"

    def visible(path: str) -> bool:  # a sandbox that shows all but `hidden`
        return not path.startswith(f"{hidden}/")

    _program(hidden, "my-agent")
    said = command.preflight({"argv": "my-agent {prompt}", "path": [str(hidden)]}, visible)
    assert said == (f"its program 'my-agent' is at {hidden}/my-agent here, which the "
                    "sandbox does not show: mount its directory read-only with "
                    f"--sandbox-option ro_paths={hidden} (or ro_paths under "
                    "[sandbox_options] in evalctl.toml)")
    _program(tools, "my-agent")  # a later one on PATH that the sandbox shows will do
    assert command.preflight({"argv": "my-agent", "path": [str(hidden), str(tools)]},
                             visible) is None
    _program(hidden, "node-ish")
    _program(tools, "by-env", "#!/usr/bin/env node-ish\n")
    said = command.preflight({"argv": "by-env", "path": [str(tools), str(hidden)]}, visible)
    assert said and said.startswith(f"the interpreter 'node-ish' its program's #! line "
                                    f"names is at {hidden}/node-ish here")
    _program(tools, "by-path", f"#!{hidden}/node-ish -x\n")
    said = command.preflight({"argv": "by-path", "path": [str(tools)]}, visible)
    assert said and said.startswith(f"the interpreter its program's #! line names is at "
                                    f"{hidden}/node-ish here")
    (hidden / "agent.py").write_text("print('hi')\n")
    said = command.preflight({"argv": f"{sys.executable} {hidden}/agent.py {{prompt}}"},
                             visible)
    assert said and said.startswith(f"the script it is given is at {hidden}/agent.py here")
    # Under a sandbox that shows everything (local), none of it is a problem.
    assert command.preflight({"argv": "by-path", "path": [str(tools)]}) is None


def test_a_program_bwrap_does_not_show_stops_the_run_before_any_task(
        tmp_path, write_suite, require_bwrap):
    """Found by a newcomer: each attempt ended agent_not_started, one by one."""
    tools = tmp_path / "tools"
    _program(tools, "my-agent")
    suite = write_suite("- id: hello\n  prompt: Write hello.txt.\n  checks:\n"
                        "    - type: file_exists\n      path: hello.txt\n")
    options = ["--agent", "command", "--agent-option", "argv=my-agent",
               "--agent-option", "model_proxy=false", "--agent-option", f"path={tools}",
               "--sandbox", "bwrap", "--out", str(tmp_path / "out")]
    refused = run_cli(tmp_path, str(suite), *options)
    assert refused.exit_code == 2, refused.output
    assert f"error: agent 'command': its program 'my-agent' is at {tools}/my-agent here, " \
           "which the sandbox does not show: mount its directory read-only with " \
           f"--sandbox-option ro_paths={tools}" in refused.output
    assert not (tmp_path / "out").exists()  # no task ran
    mounted = run_cli(tmp_path, str(suite), *options, "--sandbox-option", f"ro_paths={tools}")
    assert mounted.exit_code == 0, mounted.output


# ---------------------------------- 2: a script whose last turn calls tools runs out

RUNS_OUT = """\
- id: runs-out
  prompt: Write a.txt.
{limits}  script:
    - text: Writing it.
      tool_calls:
        - tool: write_file
          input:
            path: a.txt
            content: "a\\n"
  agent_script:
    - text: Pausing.
      stop_reason: pause_turn
  checks:
    - type: file_exists
      path: a.txt
"""


def test_a_script_that_runs_out_is_said_by_validate_at_its_last_turn_as_the_run_says_it(
        tmp_path, write_suite):
    """validate passed it; the run then ended the attempt script_error."""
    suite = write_suite(RUNS_OUT.format(limits=""))
    problems = validate_suite(suite)
    assert [(p.line, p.severity) for p in problems] == [(4, "warning"), (11, "warning")]
    assert problems[0].message == (
        "the script of task 'runs-out' has 1 turn(s) and its last calls tools: the agent "
        "loop sends their results and asks for turn 2, which the script does not have, so "
        "the attempt ends script_error (an error: its checks run, but it counts as neither a "
        "pass nor a failure); add a final text turn "
        "(`- text: ...`, without tool calls) to end it")
    assert problems[1].message.startswith(
        "the agent_script of task 'runs-out' has 1 turn(s) and its last pauses "
        "(stop_reason: pause_turn): a CLI agent asks for turn 2, which the agent_script "
        "does not have, so the agent is refused that request (HTTP 400) and its attempt "
        "is graded; add a final text turn")
    run = run_suite(suite, sandbox="local", out_dir=tmp_path / "out")
    assert run.tasks[0].exit_status == "script_error"
    assert run.tasks[0].error == (
        f"{suite}:4: the script of task 'runs-out' has 1 turn(s) and the agent asked for "
        "turn 2; add a final text turn (`- text: ...`, without tool calls) to end it")
    # A limit that ends the attempt first: the script does not run out.
    for limits in ("  limits:\n    turns: 1\n", "  limits:\n    cost: 0.5\n"):
        text = RUNS_OUT.format(limits=limits).replace(
            "    - text: Writing it.\n", "    - text: Writing it.\n      cost: 0.75\n")
        assert validate_suite(write_suite(text.replace("      stop_reason: pause_turn\n",
                                                       ""))) == []


# ------------------------------------------- 3: flow style is read, its mistakes worded

@pytest.mark.parametrize(("text", "data"), [
    ("a: [b, 'c d', 1]\n", {"a": ["b", "c d", 1]}),
    ("a: {b: [1, 2], c: {d: e}}\n", {"a": {"b": [1, 2], "c": {"d": "e"}}}),
    ("a: [\n  b,\n  c,\n]\nb: []\nc: {}\n", {"a": ["b", "c"], "b": [], "c": {}}),
    # a flow mapping may start in any column after its key; block ones keep one column
    ("short: {x: 1}\nvery_long_key: {x: 1}\n", {"short": {"x": 1}, "very_long_key": {"x": 1}}),
])
def test_flow_collections_are_read(text, data):
    assert parse(text, "s.yaml").data == data


@pytest.mark.parametrize(("text", "line", "said"), [
    ("a: [b, c\nd: e\n", 1, "a list written in [...] (flow style) starts on this line and "
                            "is not closed where expected: separate its items with ', ' and "
                            "end it with ']'"),
    ("a: {b: 1\nc: 2\n", 1, "a mapping written in {...} (flow style) starts on this line"),
    ("a: [b, c]]\n", 1, "a ']' that closes nothing"),
    ("prompt: [WIP] fix it\n", 1, "'[' starts a list (flow style), so quote the whole text"),
    ("a: {[1]: 2}\n", 1, "a list or mapping cannot be a key"),
    ("a: {{x}}\n", 1, "a list or mapping cannot be a key"),
    ("a:\n  x: 1\nb:\n    y: 2\n", 4, "inconsistent with previous mapping"),
])
def test_flow_style_mistakes_are_said_in_the_authors_words(text, line, said):
    with pytest.raises(YamlSyntaxError) as raised:
        parse(text, "s.yaml")
    assert raised.value.line == line and said in raised.value.message, raised.value.message


def test_a_suite_in_flow_style_runs(tmp_path, write_suite):
    """`tags: [a, b]` stopped the parse (strictyaml refuses flow style)."""
    suite = write_suite("- id: a\n  prompt: Write a.txt.\n  tags: [x, y]\n"
                        "  limits: {turns: 3}\n  checks: [{type: file_exists, path: a.txt}]\n"
                        "  script:\n    - tool_calls: [{tool: write_file, input: {path: a.txt, "
                        "content: hi}}]\n    - text: Wrote a.txt.\n")
    assert validate_suite(suite) == []
    run = run_suite(suite, sandbox="local", out_dir=tmp_path / "out", tags=("y",))
    assert run.tasks[0].status == "passed"


def test_a_directory_given_as_the_suite_names_the_suite_in_it(tmp_path):
    """Found by a newcomer: `evalctl run my-evals`, the directory `evalctl init` had just
    made, was answered "it is a directory; name a suite file" without naming the one in
    it."""
    (tmp_path / "my-evals").mkdir()
    (tmp_path / "my-evals" / "suite.yaml").write_text("tasks: []\n")
    (tmp_path / "my-evals" / "other.yaml").write_text("tasks: []\n")
    result = run_cli(tmp_path, "my-evals")
    assert result.exit_code == 2, result.output
    assert "it is a directory; name a suite file (a .yaml file): my-evals/suite.yaml?" \
        in result.output
