"""A newcomer's findings, round 22: shell syntax in a CLI agent's argv run as literal
words, [agent_options] mistakes in JSON Schema's words without a line, an agent_script
tool the agent lacks said without its line, a "cannot pass" warning that was false for
a CLI agent, a talk-only check the report did not call one, a resume of a moved suite
with no word of how, and a config's agent options dropped in silence."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest

from evalctl._plugin.options import allowed_values, option_problem
from evalctl._suite.loader import load_suite
from evalctl.plugins.agents.command import shell_syntax
from evalctl.testing import run_suite

from .conftest import run_cli
from .test_agents import WRITE_HELLO, sdk_options

PIPED = f"argv={sys.executable} agent.py {{prompt}} | tee out.log"
HELLO_BY_SHELL = "argv=bash -c 'echo hello > hello.txt'"  # quoted: the shell's own text

# --------------------------------------------------------------- 1: argv's shell syntax


@pytest.mark.parametrize(("argv", "said"), [
    (PIPED, "a pipe '|'"),
    (f"argv={sys.executable} $HOME/agent.py {{prompt}}", "a variable or substitution '$HOME'"),
    (f"argv={sys.executable} agent.py {{prompt}} > out.log", "a redirection '>'"),
    (f"argv=cd /tmp && {sys.executable} agent.py", "a command list '&&'"),
    (f"argv={sys.executable} agent.py `date`", "a command substitution '`...`'"),
])
def test_shell_syntax_in_argv_is_refused_before_any_task(tmp_path, write_suite, argv, said):
    suite = write_suite(WRITE_HELLO)
    result = run_cli(tmp_path, str(suite), "--agent", "command", "--agent-option", argv,
                     "--sandbox", "local")
    assert result.exit_code == 2, result.output
    assert f"error: agent 'command' option argv: {argv.removeprefix('argv=')!r} holds " \
           f"{said}: argv is not run by a shell" in result.output
    assert "Put the command line in a script and run that" in result.output
    assert not list((tmp_path / "eval_reports").glob("workspaces-*"))  # no task ran


def test_quoted_shell_characters_and_placeholders_are_the_agents_own_text():
    assert shell_syntax("bash -c 'echo cannot go on >&2; exit 3'") is None
    assert shell_syntax("agent --match 'a|b' \"x;y\" 'cost$' {prompt} {prompt_file}") is None
    assert shell_syntax("agent a\\|b") is None
    assert shell_syntax('agent "$HOME"') == "a variable or substitution '$HOME'"
    assert shell_syntax("agent ${X}") == "a variable or substitution '${...}'"


# ----------------------------------------------------- 2: [agent_options] at their lines


def test_agent_options_mistakes_are_said_at_their_lines_in_words(tmp_path, write_suite):
    suite = write_suite(WRITE_HELLO)
    (tmp_path / "evalctl.toml").write_text(
        'agent = "my-agent"\n\n[agents.my-agent]\nbase = "command"\nargv = "my-agent {prompt}"\n'
        '\n[agent_options]\nenv = "A=1"\nmodel_proxy = "no"\nfinal_text = "stdot"\n'
        'fnal_text = "stdout"\n', encoding="utf-8")
    result = run_cli(tmp_path, str(suite))
    assert result.exit_code == 2, result.output
    toml = tmp_path / "evalctl.toml"
    assert f"{toml}:8: error: [agent_options] env: must be a list, got 'A=1' (a list in " \
           "TOML: env = ['A=1'])" in result.output
    assert f"{toml}:9: error: [agent_options] model_proxy: must be true or false, got 'no'" \
        in result.output
    assert f"{toml}:10: error: [agent_options] final_text: 'stdot' is not a value it takes " \
           "(did you mean 'stdout'?); it takes model, stdout, or json:<text>" in result.output
    assert f"{toml}:11: error: [agent_options]: agent 'my-agent' (a preset of 'command') has " \
           "no option 'fnal_text' (did you mean 'final_text'?)" in result.output
    assert "does not match" not in result.output and "is not of type" not in result.output


def test_a_preset_and_the_command_line_say_a_patterns_values_too(tmp_path, write_suite):
    suite = write_suite(WRITE_HELLO)
    (tmp_path / "evalctl.toml").write_text(
        '[agents.my-agent]\nbase = "command"\nargv = "my-agent {prompt}"\n'
        'final_text = "jsn:result"\n', encoding="utf-8")
    result = run_cli(tmp_path, str(suite))
    assert result.exit_code == 2
    assert f"{tmp_path / 'evalctl.toml'}:4: error: [agents.my-agent] final_text: 'jsn:result' " \
           "is not a value it takes (did you mean 'json:result'?); it takes model, stdout, or " \
           "json:<text>" in result.output
    (tmp_path / "evalctl.toml").unlink()
    flag = run_cli(tmp_path, str(suite), "--agent", "command", "--agent-option",
                   "argv=my-agent {prompt}", "--agent-option", "final_text=stdot")
    assert flag.exit_code == 2
    assert "agent 'command' option final_text: 'stdot' is not a value it takes (did you " \
           "mean 'stdout'?); it takes model, stdout, or json:<text>" in flag.output


def test_values_in_words():
    assert allowed_values(r"^(model|stdout|json:.+)(?![\s\S])") == \
        ["model", "stdout", "json:<text>"]
    assert allowed_values("^[A-Za-z_][A-Za-z0-9_]*=") is None  # not a choice of words
    env = {"type": "array", "items": {"type": "string", "pattern": "^[A-Za-z_][A-Za-z0-9_]*=",
                                      "description": "NAME=VALUE"}}
    assert option_problem("env", ["A=1", "B"], env) == \
        "env item 2: 'B' is not of the form it takes (NAME=VALUE)"
    assert option_problem("env", ["A=1"], env) is None


# ------------------------------------------------- 3: agent_script mistakes at their line


def test_an_agent_script_tool_the_agent_lacks_is_said_at_its_line(write_suite):
    suite = write_suite(WRITE_HELLO.replace("tool: save", "tool: sav"))
    run = run_suite(suite, sandbox="local", agent="command", agent_options=sdk_options())
    task = run.tasks[0]
    assert (task.status, task.exit_status) == ("error", "script_error")  # not a failure
    assert task.error.startswith(
        f"{suite}:11: the agent_script of task 'write-hello' calls 'sav' in turn 1: the agent "
        "has no such tool (did you mean 'save'?); its tools: save, shell"), task.error


def test_where_a_task_keys_node_is_written_survives_the_suite_cache(write_suite):
    suite = write_suite(WRITE_HELLO)
    for _ in range(2):  # validated, then from the cache
        task = load_suite(suite).tasks[0]
        assert task.locate(("agent_script", 0, "tool_calls", 0, "tool")) == f"{suite}:11"
        assert task.locate(("agent_script", 0, "tool_calls", 0, "input", "text")) == \
            f"{suite}:14"
        assert task.locate(("agent_script", 7)) == f"{suite}:8"  # its nearest ancestor


# ------------------------------------------------------ 4: "cannot pass", for the loop only


def test_a_cli_agent_without_agent_script_hears_what_is_true(tmp_path, write_suite):
    suite = write_suite(WRITE_HELLO.replace("agent_script:", "unused:")
                        .split("    unused:")[0] + WRITE_HELLO.split("    checks:")[1]
                        .join(["    checks:", ""]))
    result = run_cli(tmp_path, str(suite), "--agent", "command", "--agent-option",
                     HELLO_BY_SHELL, "--sandbox", "local")
    assert result.exit_code == 0, result.output  # it passed: "cannot pass" was false
    assert "cannot pass" not in result.output
    assert "note: 1 of 1 task(s) have nothing for the scripted provider to serve (no " \
           "agent_script or script): a model call of agent 'command' gets a canned reply, so " \
           "they pass only on what the agent does without a model: write-hello" in result.output
    quiet = run_cli(tmp_path, str(suite), "--agent", "command", "--agent-option",
                    HELLO_BY_SHELL, "--agent-option", "model_proxy=false", "--sandbox", "local")
    assert quiet.exit_code == 0 and "scripted provider" not in quiet.output
    loop = run_cli(tmp_path, str(suite), "--sandbox", "local")
    assert "warning: 1 of 1 task(s) have nothing for the scripted provider to serve (no " \
           "agent_script or script), so they cannot pass: write-hello" in loop.output


# ----------------------------------------------------------- 5: talk-only in the report


GROUNDED = """\
- id: grounded
  prompt: Write hello.txt.
  script:
    - tool_calls:
        - tool: write_file
          input:
            path: hello.txt
            content: hello
    - text: Wrote hello.txt.
  checks:
    - type: file_contains
      path: hello.txt
      text: hello
    - type: grounding
"""


def test_the_report_says_which_checks_are_talk_only(tmp_path, write_suite):
    suite = write_suite(GROUNDED)
    result = run_cli(tmp_path, str(suite), "--report", "r.json", "--sandbox", "local")
    assert result.exit_code == 0, result.output
    checks = json.loads((tmp_path / "r.json").read_text())["tasks"][0]["checks"]
    shown = {c["type"]: (c["kind"], c.get("talk_only", False)) for c in checks}
    assert shown["grounding"] == ("mechanical", True)  # as docs/graders.md says
    assert shown["file_contains"] == ("mechanical", False)
    from evalctl._report.results import CheckOutcome

    grounding = next(c for c in checks if c["type"] == "grounding")
    assert CheckOutcome.from_dict(grounding).to_dict() == grounding


# ------------------------------------------------------- 6: a resume of a moved suite


def test_a_resume_whose_suite_moved_says_how_to_give_its_new_path(tmp_path, write_suite):
    suite = write_suite(WRITE_HELLO.replace("agent_script:", "script:").replace(
        "tool: save", "tool: write_file").replace("              text:", "              content:"))
    assert run_cli(tmp_path, str(suite), "--max-tokens", "0", "--sandbox", "local").exit_code == 1
    run_dir = next((tmp_path / "eval_reports").glob("workspaces-*"))
    moved = tmp_path / "moved.yaml"
    shutil.move(suite, moved)
    refused = run_cli(tmp_path, "--resume", str(run_dir))
    assert refused.exit_code == 2
    assert f"{suite}: error: cannot read suite: No such file or directory: the run's suite is " \
           f"no longer there. If it moved, give its new path: evalctl run NEW_PATH --resume " \
           f"{run_dir}" in refused.output
    resumed = run_cli(tmp_path, str(moved), "--resume", str(run_dir), "--max-tokens",
                      "100000")  # as the hint says
    assert resumed.exit_code == 0, resumed.output


# ------------------------------------------- 7: the config's agent options go with its agent


def test_the_configs_agent_options_go_with_its_agent_and_a_run_says_when_not(
        tmp_path, write_suite):
    suite = write_suite(WRITE_HELLO)
    (tmp_path / "evalctl.toml").write_text(
        f'agent = "my-agent"\n\n[agents.my-agent]\nbase = "command"\n'
        f'argv = "{sys.executable} {Path(__file__).parent / "agents" / "sdk_agent.py"} '
        '{prompt}"\n\n[agent_options]\nversion = "9.9"\n', encoding="utf-8")
    same = run_cli(tmp_path, str(suite), "--agent", "my-agent", "--sandbox", "local",
                   "--report", "same.json")
    assert same.exit_code == 0, same.output
    # --agent naming the config's own agent keeps its options (they were dropped).
    assert json.loads((tmp_path / "same.json").read_text())["agent"]["version"] == "9.9"
    other = run_cli(tmp_path, str(suite), "--agent", "evalctl", "--sandbox", "local")
    assert f"note: {tmp_path / 'evalctl.toml'}:7: [agent_options] are for the config's agent " \
           "'my-agent'; this run's --agent evalctl runs without them" in other.output
    (tmp_path / "evalctl.toml").write_text('[agent_options]\nversion = "9.9"\n')
    unnamed = run_cli(tmp_path, str(suite), "--sandbox", "local")
    assert f"warning: {tmp_path / 'evalctl.toml'}:1: [agent_options] go with the config's " \
           "`agent`, and it names none: they are not used" in unnamed.output
