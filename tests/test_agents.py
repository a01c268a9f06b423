"""The agent plugin kind: choosing agents and presets, the `command` agent (a CLI in the
sandbox behind the model proxy) with a second agent written with the anthropic SDK, its
limits, the sandbox's guarantees for a CLI agent, and reports that name the agent."""

from __future__ import annotations

import json
import shlex
import sys
import time
from pathlib import Path

import pytest

import evalctl
from evalctl._agent.ledger import read_events
from evalctl._report.compare import compare_reports
from evalctl._run.agents import choose_agent
from evalctl.testing import run_suite
from tests.conftest import Listener, registry_with, run_cli

ROOT = Path(__file__).resolve().parent.parent
SDK_AGENT = ROOT / "tests" / "agents" / "sdk_agent.py"
SDK_ARGV = f"{sys.executable} {SDK_AGENT} {{prompt}}"

WRITE_HELLO = """\
name: agents
tasks:
  - id: write-hello
    prompt: Write hello.txt containing the word hello.
    limits:
      turns: 5
      seconds: 60
    agent_script:
      - text: I will save the file.
        tool_calls:
          - tool: save
            input:
              path: hello.txt
              text: "hello\\n"
        usage:
          input_tokens: 100
          output_tokens: 20
          cache_read_tokens: 50
          cache_write_tokens: 10
      - text: Saved hello.txt.
        usage:
          input_tokens: 130
          output_tokens: 5
    checks:
      - type: file_contains
        path: hello.txt
        text: hello
"""


def sdk_options(**extra) -> dict:
    return {"argv": SDK_ARGV, **extra}


# --------------------------------------------------------------------------- the kind


def test_an_agent_spec_is_either_an_agent_or_a_preset():
    async def run(context):
        return evalctl.AgentOutcome()

    assert evalctl.AgentSpec("claude-code", base="command").base == "command"
    with pytest.raises(ValueError, match="either run"):
        evalctl.AgentSpec("both", run=run, base="command")
    with pytest.raises(ValueError, match="either run"):
        evalctl.AgentSpec("neither")
    with pytest.raises(ValueError, match="lowercase"):
        evalctl.AgentSpec("Claude Code", base="command")
    with pytest.raises(ValueError, match="itself"):
        evalctl.AgentSpec("loop", base="loop")


def test_the_default_agent_is_the_built_in_loop(registry):
    choice = choose_agent(registry, flag=None, flag_options={})
    assert (choice.name, choice.spec.name, choice.chosen_by) == ("evalctl", "evalctl", "default")
    assert choice.version == evalctl.__version__


def test_a_preset_merges_options_from_the_inside_out_and_the_user_wins(registry):
    choice = choose_agent(registry, flag="claude-code",
                          flag_options={"final_text": "stdout", "version": "2.1.332"})
    assert choice.spec.name == "command" and choice.presets == ("claude-code", "command")
    assert choice.options["argv"].startswith("claude -p {prompt}")
    assert choice.options["final_text"] == "stdout"
    assert "version" not in choice.options and choice.version == "2.1.332"
    assert choice.to_dict()["base"] == "command"


def test_a_third_party_package_registers_a_preset_with_its_version():
    class Plugin:
        @staticmethod
        @evalctl.hookimpl
        def evalctl_register_agents(register):
            register(evalctl.AgentSpec("my-cli", base="command", version="1.4.2",
                                       defaults={"argv": "my-cli {prompt}"}))

    registry = registry_with(("my_cli", Plugin))
    choice = choose_agent(registry, flag="my-cli", flag_options={})
    assert (choice.version, choice.options) == ("1.4.2", {"argv": "my-cli {prompt}"})
    assert registry.plugin_of("agent", "my-cli").distribution == "test-dist"


def test_config_presets_and_their_mistakes(registry):
    presets = {"mine": {"base": "command", "argv": "mine {prompt}", "version": "3"},
               "mine-json": {"base": "mine", "final_text": "json:result"}}
    choice = choose_agent(registry, flag=None, flag_options={}, config_name="mine-json",
                          config_options={"model_proxy": False}, config_presets=presets)
    assert choice.options == {"argv": "mine {prompt}", "final_text": "json:result",
                              "model_proxy": False}
    assert (choice.version, choice.chosen_by) == ("3", "config")
    with pytest.raises(evalctl.UsageError, match="needs base"):
        choose_agent(registry, flag="x", flag_options={}, config_presets={"x": {"argv": "x"}})
    with pytest.raises(evalctl.UsageError, match="loop"):
        choose_agent(registry, flag="a", flag_options={},
                     config_presets={"a": {"base": "b"}, "b": {"base": "a"}})
    with pytest.raises(evalctl.UsageError, match="already provides"):
        choose_agent(registry, flag=None, flag_options={},
                     config_presets={"claude-code": {"base": "command"}})


def test_bad_agent_options_are_refused_before_any_task(registry):
    # A newcomer got jsonschema's "'argv' is a required property": what argv is, and how
    # to give it, are said now.
    with pytest.raises(evalctl.UsageError, match=r"agent 'command' needs option 'argv': The "
                       r"command line, split like a shell does .* Give it with --agent-option "
                       r"argv=\.\.\., under \[agent_options\] in evalctl.toml, or in a preset"):
        choose_agent(registry, flag="command", flag_options={})
    with pytest.raises(evalctl.UsageError, match=r"known options: argv, env, path"):
        choose_agent(registry, flag="command", flag_options={"argv": "x", "arg": "y"})
    with pytest.raises(evalctl.UsageError, match="wants true or false for model_proxy"):
        choose_agent(registry, flag="command", flag_options={"argv": "x",
                                                             "model_proxy": "maybe"})
    with pytest.raises(evalctl.UsageError, match="unknown agent 'claude_code'"):
        choose_agent(registry, flag="claude_code", flag_options={})


def test_the_cli_refuses_an_unknown_agent_with_exit_2(tmp_path, write_suite):
    suite = write_suite(WRITE_HELLO)
    result = run_cli(tmp_path, str(suite), "--agent", "aider")
    assert result.exit_code == 2
    assert "unknown agent 'aider'" in result.output and "claude-code" in result.output
    assert not (tmp_path / "eval_reports").exists()


def test_evalctl_toml_chooses_a_preset_agent(tmp_path, write_suite):
    suite = write_suite(WRITE_HELLO)
    (tmp_path / "evalctl.toml").write_text(
        'agent = "sdk"\nsandbox = "local"\n'
        f'[agents.sdk]\nbase = "command"\nargv = "{SDK_ARGV}"\nversion = "0.9"\n')
    result = run_cli(tmp_path, str(suite), "--report", "r.json")
    assert result.exit_code == 0, result.output
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["agent"] == {"name": "sdk", "base": "command", "version": "0.9",
                               "options": {"argv": SDK_ARGV}, "chosen_by": "config"}


# --------------------------------------------------------------------------- runs


def test_an_sdk_agent_passes_and_every_call_is_metered(tmp_path):
    run = run_suite(WRITE_HELLO, sandbox="local", agent="command",
                    agent_options=sdk_options(version="1.0"), reporters=["markdown"],
                    out_dir=tmp_path)
    task = run.tasks[0]
    assert task.status == "passed", (task.error, task.checks)
    assert (task.exit_status, task.turns, task.tool_calls) == ("completed", 2, 1)
    assert task.usage == evalctl.TokenUsage(230, 25, 50, 10)
    assert run.usage == task.usage and run.cost == 0.0
    events = read_events(Path(task.ledger))
    assert [e["event"] for e in events] == ["task_start", "agent_command", "model_turn",
                                            "model_turn", "agent_exit", "task_end"]
    assert events[0]["agent"] == "command"
    assert all(e["stream"] for e in events if e["event"] == "model_turn")
    assert events[4]["exit_code"] == 0 and "Saved hello.txt." in events[4]["stdout"]
    assert run.agent == {"name": "command", "base": "command", "version": "1.0",
                         "options": {"argv": SDK_ARGV}, "chosen_by": "--agent"}
    markdown = next(tmp_path.glob("report-*.md")).read_text()
    assert "- Agent: command 1.0" in markdown


def test_an_sdk_agent_without_streaming(tmp_path):
    run = run_suite(WRITE_HELLO, sandbox="local", agent="command", out_dir=tmp_path,
                    agent_options=sdk_options(argv=SDK_ARGV + " --no-stream"))
    task = run.tasks[0]
    assert task.status == "passed", (task.error, task.checks)
    turns = [e for e in read_events(Path(task.ledger)) if e["event"] == "model_turn"]
    assert [t["stream"] for t in turns] == [False, False]


@pytest.mark.parametrize("hostile", [
    "rm ../.ledgers/write-hello.jsonl",
    "printf '{not json\\n\\xff' >> ../.ledgers/write-hello.jsonl",
], ids=["deleted", "mangled"])
def test_a_cli_agent_that_deletes_or_mangles_its_ledger_costs_the_record_not_the_totals(
        tmp_path, hostile):
    # After its model calls the agent vandalises its ledger (visible under the local
    # sandbox): turns, tokens and cost were counted as the proxy's calls came back.
    script = f'{sys.executable} {SDK_AGENT} "$1"; code=$?; {hostile}; exit $code'
    argv = f"bash -c {shlex.quote(script)} agent {{prompt}}"
    run = run_suite(WRITE_HELLO, sandbox="local", agent="command", out_dir=tmp_path,
                    agent_options=sdk_options(argv=argv))
    task = run.tasks[0]
    assert task.status == "passed", (task.error, task.checks)
    assert (task.exit_status, task.turns, task.tool_calls) == ("completed", 2, 1)
    assert task.usage == evalctl.TokenUsage(230, 25, 50, 10) and task.cost == 0.0
    ledger = Path(task.ledger)
    if hostile.startswith("rm"):
        assert not ledger.exists()
    else:
        with pytest.raises(ValueError):  # the ledger no longer parses
            read_events(ledger)


def test_a_cli_agents_turns_are_charged_to_the_run_budget(tmp_path):
    # Charged as each proxied turn arrives (nothing else charges the agent's spend): the
    # first attempt spends past --max-tokens, so the second never starts.
    suite = WRITE_HELLO + WRITE_HELLO.split("tasks:\n", 1)[1].replace(
        "id: write-hello", "id: write-hello-again")
    run = run_suite(suite, sandbox="local", agent="command", out_dir=tmp_path,
                    agent_options=sdk_options(), concurrency=1, max_tokens=100)
    assert [t.status for t in run.tasks] == ["passed", "not_run"]
    assert run.budget is not None
    assert (run.budget["spent_tokens"], run.budget["reached"]) == (230 + 25 + 50 + 10, True)


def test_the_built_in_loop_as_an_agent_plugin_reads_script_not_agent_script():
    suite = WRITE_HELLO.replace("    checks:", """\
    script:
      - tool_calls:
          - tool: write_file
            input:
              path: hello.txt
              content: "hello\\n"
      - text: Done.
    checks:""")
    run = run_suite(suite, sandbox="local")
    assert run.tasks[0].status == "passed" and run.tasks[0].turns == 2
    assert run.agent["name"] == "evalctl"


@pytest.mark.parametrize("argv, delivery", [
    ("bash -c 'printf %s \"$1\" > got.txt' agent {prompt}", "argument"),
    ("bash -c 'cat > got.txt'", "stdin"),
    ("bash -c 'cp \"$1\" got.txt' agent {prompt_file}", "file"),
])
def test_the_prompt_reaches_the_command_as_asked(argv, delivery):
    suite = """\
name: prompts
tasks:
  - id: echo
    prompt: "Say 'it' with $dollars and \\"quotes\\""
    checks:
      - type: file_contains
        path: got.txt
        text: "Say 'it' with $dollars and \\"quotes\\""
"""
    run = run_suite(suite, sandbox="local", agent="command",
                    agent_options={"argv": argv, "model_proxy": False})
    assert run.tasks[0].status == "passed", (delivery, run.tasks[0].checks, run.tasks[0].error)
    assert run.tasks[0].turns == 0


def test_final_text_from_stdout_or_json_feeds_talk_only_checks(tmp_path):
    suite = """\
name: talk
tasks:
  - id: says
    prompt: Say done.
    checks:
      - type: file_exists
        path: out.json
      - type: succeeded
"""
    argv = "bash -c 'echo {\\\"result\\\": \\\"all done\\\"} | tee out.json'"
    run = run_suite(suite, sandbox="local", agent="command", out_dir=tmp_path,
                    agent_options={"argv": argv, "final_text": "json:result",
                                   "model_proxy": False})
    assert run.tasks[0].status == "passed", run.tasks[0].checks
    events = read_events(Path(run.tasks[0].ledger))
    assert events[-2]["stdout"].strip() == '{"result": "all done"}'


def test_an_agent_that_exits_non_zero_failed_and_says_why():
    suite = WRITE_HELLO.replace("agent_script:", "unused_script:", 1) \
        .split("    unused_script:")[0] + """\
    checks:
      - type: file_exists
        path: hello.txt
"""
    run = run_suite(suite, sandbox="local", agent="command",
                    agent_options={"argv": "bash -c 'echo cannot go on >&2; exit 3'",
                                   "model_proxy": False})
    task = run.tasks[0]
    assert (task.status, task.exit_status) == ("failed", "agent_failed")
    assert task.error == "the agent exited with code 3: cannot go on"


@pytest.mark.parametrize("argv", [f"{sys.executable} /nonexistent/agent.py {{prompt}}"])
def test_an_agent_that_cannot_start_is_an_error_not_a_failure(argv):
    """Found by a newcomer: an agent not installed, or not visible in the sandbox, was
    scored as the agent failing (completion 0%, grounding 100%). A command that ends as
    a program that never ran (126, 127, a script that cannot be opened) before any model
    call is an error of the attempt, with what to check."""
    suite = WRITE_HELLO.replace("agent_script:", "unused_script:", 1) \
        .split("    unused_script:")[0] + "    checks:\n      - type: file_exists\n" \
        "        path: hello.txt\n"
    run = run_suite(suite, sandbox="local", agent="command",
                    agent_options={"argv": argv, "model_proxy": False})
    task = run.tasks[0]
    assert (task.status, task.exit_status, task.error_kind) == \
        ("error", "agent_not_started", "agent"), task.error
    assert task.error.startswith("the agent's command could not start (exit ")
    assert "visible in the sandbox" in task.error and task.checks == []


@pytest.mark.parametrize("argv", ["bash -c 'exec no-such-agent-program'",
                                  "bash -c 'exec /etc/hostname' {prompt}"])
def test_a_wrapper_whose_program_cannot_start_is_graded_with_a_hint(argv):
    """A wrapper's shell that cannot find or run the program in it exits 127 or 126, as
    an agent may itself: evalctl cannot tell the two apart (the agent's own 127 took a
    task it failed out of the score: tests/test_sandbox_r40.py), so it is graded, and
    the error says what the exit may mean."""
    suite = WRITE_HELLO.replace("agent_script:", "unused_script:", 1) \
        .split("    unused_script:")[0] + "    checks:\n      - type: file_exists\n" \
        "        path: hello.txt\n"
    run = run_suite(suite, sandbox="local", agent="command",
                    agent_options={"argv": argv, "model_proxy": False})
    task = run.tasks[0]
    assert (task.status, task.exit_status) == ("failed", "agent_failed"), task.error
    assert "a shell's exit for a program it cannot find or run" in task.error


@pytest.mark.parametrize(("argv", "said"), [
    ("evalctl-no-such-agent {prompt}",
     "agent 'command': its program 'evalctl-no-such-agent' is not found on PATH here"),
    ("/opt/nowhere/agent {prompt}",
     "agent 'command': its program /opt/nowhere/agent is not an executable file here"),
])
def test_an_agent_whose_program_is_nowhere_stops_the_run_before_any_task(tmp_path, argv,
                                                                         said):
    """Found by a newcomer: `claude` not installed made every attempt an error, one by
    one. A program found nowhere here stops the run (exit 2), as does one found here but
    out of the sandbox's reach (test_newcomer_leftovers)."""
    suite = tmp_path / "s.yaml"
    suite.write_text("- id: hello\n  prompt: Write hello.txt.\n  checks:\n"
                     "    - type: file_exists\n      path: hello.txt\n")
    refused = run_cli(tmp_path, str(suite), "--sandbox", "local", "--agent", "command",
                      "--agent-option", f"argv={argv}", "--out", str(tmp_path / "out"))
    assert refused.exit_code == 2, refused.output
    assert said in refused.output
    assert not list(tmp_path.glob("out/workspaces-*/hello"))


def test_an_agents_program_is_looked_up_in_its_path_option_too(tmp_path):
    tools = tmp_path / "tools"
    tools.mkdir()
    (tools / "evalctl-own-agent").write_text("#!/bin/sh\necho hello > hello.txt\n")
    (tools / "evalctl-own-agent").chmod(0o755)
    suite = tmp_path / "s.yaml"
    suite.write_text("- id: hello\n  prompt: Write hello.txt.\n  checks:\n"
                     "    - type: file_exists\n      path: hello.txt\n")
    ran = run_cli(tmp_path, str(suite), "--sandbox", "local", "--agent", "command",
                  "--agent-option", "argv=evalctl-own-agent", "--agent-option",
                  "model_proxy=false", "--agent-option", f"path={tools}")
    assert ran.exit_code == 0, ran.output


def test_an_agent_that_called_the_model_and_exited_127_is_graded():
    """After a model call the agent did run: exit 127 then is its own, graded."""
    argv = f"bash -c '{sys.executable} {SDK_AGENT} \"$0\" && exit 127' {{prompt}}"
    run = run_suite(WRITE_HELLO, sandbox="local", agent="command",
                    agent_options={"argv": argv})
    task = run.tasks[0]
    assert (task.status, task.exit_status, task.turns) == ("passed", "agent_failed", 2), \
        task.error


def test_the_tasks_seconds_end_a_cli_agent():
    suite = WRITE_HELLO.replace("seconds: 60", "seconds: 1.5")
    started = time.monotonic()
    run = run_suite(suite, sandbox="local", agent="command",
                    agent_options={"argv": "sleep 30", "model_proxy": False})
    assert time.monotonic() - started < 20
    task = run.tasks[0]
    assert (task.status, task.exit_status) == ("failed", "timeout")


def test_the_turn_limit_ends_a_cli_agent_with_max_turns():
    suite = WRITE_HELLO.replace("turns: 5", "turns: 1")
    run = run_suite(suite, sandbox="local", agent="command", agent_options=sdk_options())
    task = run.tasks[0]
    assert task.exit_status == "max_turns" and task.turns == 1
    assert task.status == "passed"  # the file was written in the turn it had: checks decide


def test_the_cost_limit_ends_a_cli_agent_with_cost_limit():
    suite = WRITE_HELLO.replace("      seconds: 60", "      seconds: 60\n      cost: 0.5") \
        .replace("          cache_write_tokens: 10", "          cache_write_tokens: 10\n"
                 "        cost: 0.75")
    run = run_suite(suite, sandbox="local", agent="command", agent_options=sdk_options())
    task = run.tasks[0]
    assert (task.exit_status, task.turns, task.cost) == ("cost_limit", 1, 0.75)
    assert "limit $0.5" in task.error


def test_a_cli_agent_whose_last_call_went_over_the_cost_limit_ends_cost_limit(tmp_path):
    """Found by an attacker round: an agent whose last call went over the limit, and
    which then exited on its own, was `completed` with no limit in its ledger; the built-
    in loop ends such an attempt `cost_limit`, and so does a CLI agent now."""
    suite = WRITE_HELLO.replace("      seconds: 60", "      seconds: 60\n      cost: 0.5") \
        .replace("          output_tokens: 5", "          output_tokens: 5\n        cost: 0.75")
    run = run_suite(suite, sandbox="local", agent="command", agent_options=sdk_options(),
                    out_dir=tmp_path / "out")
    task = run.tasks[0]
    assert (task.exit_status, task.turns, task.cost) == ("cost_limit", 2, 0.75), task.error
    assert "limit $0.5" in task.error
    limits = [e for e in read_events(Path(task.ledger)) if e["event"] == "limit"]
    assert [(e["limit"], e["spent"]) for e in limits] == [("cost", 0.75)]


def test_a_script_for_the_built_in_tools_is_a_clear_error_for_a_cli_agent():
    suite = WRITE_HELLO.replace("agent_script:", "script:").replace("tool: save",
                                                                    "tool: write_file") \
        .replace("              path: hello.txt\n              text:",
                 "              path: hello.txt\n              content:")
    run = run_suite(suite, sandbox="local", agent="command", agent_options=sdk_options())
    task = run.tasks[0]
    assert (task.status, task.exit_status) == ("error", "script_error")
    assert "calls 'write_file' in turn 1: the agent has no such tool; its tools: save, shell" \
        in task.error


@pytest.mark.parametrize(("typo", "said"), [
    # `file:` for `path:`: the agent's tool requires `path`.
    (("              path: hello.txt", "              file: hello.txt"),
     "its input lacks 'path', which the agent's tool requires (its arguments: path, text)"),
    # A number where the tool takes text.
    (('              text: "hello\\n"', "              text: 12"),
     "argument 'text' is int 12, and the agent's tool takes string"),
])
def test_an_agent_script_input_the_agents_tool_refuses_is_the_scripts_error(typo, said):
    """Found by a newcomer: a typo in an `agent_script` tool input reached the agent, which
    could not follow it, and the attempt was scored as the agent's failure. The input is
    now checked against the tool the agent offers, and the attempt ends `script_error`:
    an error left out of the score."""
    suite = WRITE_HELLO.replace(*typo)
    assert suite != WRITE_HELLO
    run = run_suite(suite, sandbox="local", agent="command", agent_options=sdk_options())
    task = run.tasks[0]
    assert (task.status, task.exit_status) == ("error", "script_error"), task.error
    assert "the agent_script of task 'write-hello' calls 'save' in turn 1: " + said \
        in task.error


def test_validate_accepts_a_cli_agents_own_tool_names(tmp_path, write_suite):
    from click.testing import CliRunner

    from evalctl._cli import cli

    suite = write_suite(WRITE_HELLO)
    result = CliRunner().invoke(cli, ["validate", str(suite)])
    assert result.exit_code == 0, result.output
    wrong = write_suite(WRITE_HELLO.replace("agent_script:", "script:"), "wrong.yaml")
    result = CliRunner().invoke(cli, ["validate", str(wrong)])
    assert result.exit_code == 2 and "save" in result.output


# --------------------------------------------------------------------------- the sandbox

SECRET = "sk-ant-real-key-never-in-the-sandbox-5c1e"
PROBE = r"""
set +e
env > env.txt
cat /proc/[0-9]*/environ 2>/dev/null | tr '\0' '\n' >> env.txt
for target in /tmp/evalctl-agent-escape ../evalctl-agent-escape ../../evalctl-agent-escape \
              "$OUTSIDE/evalctl-agent-escape"; do
  echo x > "$target" 2>/dev/null && echo "wrote $target" >> wrote.txt
done
python3 -c "import socket; socket.create_connection(('127.0.0.1', $PORT), timeout=3)" \
  2>/dev/null && echo reached > network.txt
# Daemons that act only once the agent has exited: a survivor would write late.
setsid -f bash -c "until [ -e $PWD/done ]; do sleep 0.1; done; sleep 1; echo late > $PWD/late.txt"
nohup bash -c "until [ -e $PWD/done ]; do sleep 0.1; done; sleep 1; echo late > $PWD/nohup.txt" \
  >/dev/null 2>&1 &
python3 {agent} "{prompt}"
touch done
"""


def test_a_cli_agent_in_bwrap_sees_no_secret_writes_nothing_outside_and_leaves_nothing(
        tmp_path, monkeypatch, require_bwrap):
    outside = tmp_path / "outside"
    outside.mkdir()
    Path("/tmp/evalctl-agent-escape").unlink(missing_ok=True)
    monkeypatch.setenv("ANTHROPIC_API_KEY", SECRET)
    listener = Listener()
    script = PROBE.replace("$OUTSIDE", str(outside)).replace("$PORT", str(listener.port)) \
        .replace("{agent}", str(SDK_AGENT))
    (tmp_path / "bin").mkdir()
    agent_file = tmp_path / "bin" / "probe-agent.sh"
    agent_file.write_text(script)
    try:
        run = run_suite(WRITE_HELLO, sandbox="bwrap", agent="command", out_dir=tmp_path / "out",
                        sandbox_options={"ro_paths": [str(SDK_AGENT.parent),
                                                     str(agent_file.parent)]},
                        agent_options={"argv": f"bash {agent_file} {{prompt}}"})
    finally:
        listener.close()
    task = run.tasks[0]
    assert task.status == "passed", (task.error, task.checks)
    assert task.turns == 2  # the model proxy was reachable: the only way out
    workspace = Path(task.workspace)
    seen = (workspace / "env.txt").read_text()
    assert "ANTHROPIC_API_KEY=evalctl-task-" in seen
    assert "ANTHROPIC_BASE_URL=http://127.0.0.1:" in seen
    assert SECRET not in seen
    ledgers = "".join(p.read_text() for p in Path(run.run_directory, ".ledgers").iterdir())
    assert SECRET not in ledgers
    # /tmp inside is the attempt's own TMPDIR; ../ lands in the sandbox's ephemeral root
    # if anywhere: what matters is that nothing outside the attempt changed (below).
    assert not (workspace / "network.txt").exists() and listener.connections == 0
    time.sleep(3)  # the daemons' delay: a survivor would act now
    assert not (workspace / "late.txt").exists() and not (workspace / "nohup.txt").exists()
    assert list(outside.iterdir()) == []
    assert not Path("/tmp/evalctl-agent-escape").exists()
    run_dir = Path(run.run_directory)
    assert not (run_dir / "evalctl-agent-escape").exists()
    assert not (run_dir.parent / "evalctl-agent-escape").exists()


def test_a_link_the_setup_left_in_tmpdir_is_not_written_through(tmp_path, require_bwrap):
    """Found by an attacker: a setup command (a repository's own `pip install`, say)
    linked $TMPDIR/evalctl-forwarder.py to a file outside, and evalctl wrote the proxy's
    forwarder through it on the host: any file of the user's (here the run's own
    journal, by a relative link) was overwritten. The forwarder is made anew, not
    opened; the socket's name is unlinked before it is bound."""
    victim = tmp_path / "victim.txt"
    victim.write_text("ORIGINAL\n")
    suite = WRITE_HELLO.replace("    agent_script:", f"""\
    setup:
      commands:
        - ln -s ../../../journal.jsonl "$TMPDIR/evalctl-forwarder.py"
        - ln -s {victim} "$TMPDIR/evalctl-model.sock"
    agent_script:""", 1)
    run = run_suite(suite, sandbox="bwrap", agent="command", out_dir=tmp_path / "out",
                    sandbox_options={"ro_paths": [str(SDK_AGENT.parent)]},
                    agent_options=sdk_options())
    task = run.tasks[0]
    assert victim.read_text() == "ORIGINAL\n"
    assert task.status == "passed", (task.error, task.checks)  # the forwarder worked
    journal = Path(run.run_directory, "journal.jsonl").read_text()
    assert journal.startswith('{"kind": "run", "format": "evalctl-journal/1"')


@pytest.mark.parametrize("sandbox", ["local", "bwrap"])
def test_what_the_setup_left_at_the_proxys_names_is_not_in_its_way(tmp_path, sandbox,
                                                                   request):
    """Found by a tester: a setup that left a directory named evalctl-forwarder.py in the
    attempt's HOME (which is its TMPDIR) ended the attempt `internal_error:
    IsADirectoryError`. The forwarder and socket now go in a directory of a fresh random
    name, made for the attempt (and removed after it): what the setup left at any name,
    directories and links alike, is neither in the way nor written through, and stays."""
    if sandbox == "bwrap":
        request.getfixturevalue("require_bwrap")
    victim = tmp_path / "victim.txt"
    victim.write_text("ORIGINAL\n")
    suite = WRITE_HELLO.replace("    agent_script:", f"""\
    setup:
      commands:
        - mkdir -p "$HOME/evalctl-forwarder.py" "$TMPDIR/evalctl-model.sock"
        - ln -s {victim} "$TMPDIR/.evalctl-proxy"
        - echo planted > "$HOME/evalctl-forwarder.py/mine"
    agent_script:""", 1)
    run = run_suite(suite, sandbox=sandbox, agent="command", out_dir=tmp_path / "out",
                    sandbox_options={"ro_paths": [str(SDK_AGENT.parent)]}
                    if sandbox == "bwrap" else {}, agent_options=sdk_options())
    task = run.tasks[0]
    assert task.status == "passed", (task.exit_status, task.error, task.checks)
    assert task.turns == 2  # through the model proxy
    assert victim.read_text() == "ORIGINAL\n"
    state = Path(run.run_directory, ".state", "write-hello")
    assert (state / "evalctl-forwarder.py" / "mine").read_text() == "planted\n"
    assert (state / "evalctl-model.sock").is_dir()
    assert [p.name for p in state.glob(".evalctl-proxy-*")] == []  # removed after


def test_the_sdk_agent_in_bwrap(tmp_path, require_bwrap):
    run = run_suite(WRITE_HELLO, sandbox="bwrap", agent="command", agent_options=sdk_options(),
                    sandbox_options={"ro_paths": [str(SDK_AGENT.parent)]})
    task = run.tasks[0]
    assert task.status == "passed", (task.error, task.checks)
    assert task.turns == 2 and task.usage.cache_read_tokens == 50
    assert run.sandbox["name"] == "bwrap"


# --------------------------------------------------------------------------- comparing


def test_compare_names_the_agent_of_each_side(tmp_path):
    suite = WRITE_HELLO.replace("    checks:", """\
    script:
      - text: Nothing to do.
    checks:""")
    loop = run_suite(suite, sandbox="local", reporters=["json"], out_dir=tmp_path / "a")
    cli = run_suite(suite, sandbox="local", agent="command", reporters=["json"],
                    agent_options=sdk_options(version="1.0"), out_dir=tmp_path / "b")
    before = evalctl.load_report(next((tmp_path / "a").glob("report-*.json")))
    after = evalctl.load_report(next((tmp_path / "b").glob("report-*.json")))
    assert (before.agent_label, after.agent_label) == (f"evalctl {evalctl.__version__}",
                                                      "command 1.0")
    comparison = compare_reports(before, after)
    markdown = comparison.to_markdown()
    assert f"| agent | evalctl {evalctl.__version__} | command 1.0 | different |" in markdown
    assert "| model | scripted | scripted | same |" in markdown
    assert comparison.warnings() == []
    assert comparison.newly_passing == ["write-hello"]
    assert comparison.to_dict()["current"]["agent"] == "command 1.0"
    assert loop.tasks[0].status == "failed" and cli.tasks[0].status == "passed"

    from click.testing import CliRunner

    from evalctl._cli import cli as evalctl_cli

    page = tmp_path / "compare.html"
    result = CliRunner().invoke(evalctl_cli, [
        "compare", str(next((tmp_path / "a").glob("report-*.json"))),
        str(next((tmp_path / "b").glob("report-*.json"))), "--html", str(page)])
    assert result.exit_code == 0, result.output
    html = page.read_text()
    assert f"baseline evalctl {evalctl.__version__} · this run command 1.0" in html
    assert "<tr><th>agent</th><td>command 1.0</td></tr>" in html


def test_a_comparison_of_two_agents_on_two_models_says_it_proves_little(tmp_path):
    suite = WRITE_HELLO
    run_suite(suite, sandbox="local", reporters=["json"], out_dir=tmp_path / "a")
    run_suite(suite, sandbox="local", agent="command", agent_options=sdk_options(),
              reporters=["json"], out_dir=tmp_path / "b")
    before = evalctl.load_report(next((tmp_path / "a").glob("report-*.json")))
    after = evalctl.load_report(next((tmp_path / "b").glob("report-*.json")))
    after.model = "another-model"
    warnings = compare_reports(before, after).warnings()
    assert len(warnings) == 1 and "cannot be put down to either" in warnings[0]


def test_an_old_report_without_an_agent_reads_as_the_built_in_loop(tmp_path):
    run = run_suite(WRITE_HELLO, sandbox="local", reporters=["json"], out_dir=tmp_path)
    path = next(tmp_path.glob("report-*.json"))
    data = json.loads(path.read_text())
    del data["agent"]
    path.write_text(json.dumps(data))
    assert evalctl.load_report(path).agent_label == "evalctl"
    assert run.agent_label == f"evalctl {evalctl.__version__}"


# --------------------------------------------------------------------------- anthropic


def test_the_anthropic_provider_forwards_a_cli_agents_own_request(tmp_path, monkeypatch):
    """The agent's request reaches the API as the agent wrote it (its system prompt, its
    tools), with the run's model and evalctl's real key; the agent saw only its token."""
    from evalctl._agent.proxy import to_sse
    from tests.messages_server import MessagesServer, message, text_block, tool_use

    def streamed(content, stop, **usage):
        _, _, body = message(content, stop, model="claude-haiku-4-5", **usage)
        return 200, {"content-type": "text/event-stream"}, to_sse(json.loads(body))

    with MessagesServer() as server:
        monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-test-real-key")
        monkeypatch.setenv("ANTHROPIC_BASE_URL", server.url)
        server.replies += [
            streamed([text_block("Saving."), tool_use("toolu_1", "save", path="hello.txt",
                                                      text="hello\n")], "tool_use",
                     input_tokens=1000, output_tokens=50, cache_read=2000),
            streamed([text_block("Saved.")], "end_turn", input_tokens=1100, output_tokens=5)]
        run = run_suite(WRITE_HELLO, provider="anthropic", model="claude-haiku-4-5",
                        sandbox="local", agent="command", out_dir=tmp_path,
                        agent_options=sdk_options(argv=SDK_ARGV.replace(
                            "{prompt}", "--no-stream {prompt}")))
    task = run.tasks[0]
    assert task.status == "passed", (task.error, task.checks)
    assert task.usage == evalctl.TokenUsage(2100, 55, 2000, 0)
    assert task.cost == pytest.approx((2100 * 1.0 + 55 * 5.0 + 2000 * 0.10) / 1e6)
    first = server.requests[0]
    assert first["model"] == "claude-haiku-4-5" and first["stream"] is True
    assert first["system"] == "You are a small agent."
    assert [t["name"] for t in first["tools"]] == ["save", "shell"]
    assert server.requests[1]["messages"][2]["content"][0]["type"] == "tool_result"
    assert all("sk-test-real-key" in (h.get("x-api-key") or h.get("authorization", ""))
               for h in server.headers)
    turns = [e for e in read_events(Path(task.ledger)) if e["event"] == "model_turn"]
    assert [t["requested_model"] for t in turns] == ["sdk-agent-model"] * 2


def test_a_forwarded_request_keeps_what_the_sdk_does_not_know():
    from evalctl.plugins.providers.anthropic import forwarded_request

    body = {"model": "claude-opus-5-5", "max_tokens": 32000, "stream": True,
            "messages": [{"role": "user", "content": "hi"}], "system": [{"type": "text",
                                                                         "text": "S"}],
            "thinking": {"type": "enabled", "budget_tokens": 31999},
            "context_management": {"edits": []}, "betas": ["claude-code-20250219"]}
    arguments = forwarded_request(body, "claude-sonnet-4-6")
    assert arguments == {
        "model": "claude-sonnet-4-6", "max_tokens": 32000,
        "messages": [{"role": "user", "content": "hi"}], "betas": ["claude-code-20250219"],
        "extra_body": {"system": [{"type": "text", "text": "S"}],
                       "thinking": {"type": "enabled", "budget_tokens": 31999},
                       "context_management": {"edits": []}}}


# --------------------------------------------------------------------------- the docs

AGENTS_DOC = (ROOT / "docs" / "agents.md").read_text()


def doc_block(language: str, containing: str) -> str:
    import re

    blocks = re.findall(rf"```{language}\n(.*?)```", AGENTS_DOC, flags=re.S)
    return next(block for block in blocks if containing in block)


def docs_suite() -> str:
    return "name: from-the-docs\n" + doc_block("yaml", "agent_script:")


def test_the_docs_suite_runs_on_the_built_in_loop_from_its_script(tmp_path):
    run = run_suite(docs_suite(), sandbox="local", out_dir=tmp_path)
    assert run.tasks[0].status == "passed", run.tasks[0].checks


def test_the_docs_config_presets_resolve(registry):
    import tomllib

    config = tomllib.loads(doc_block("toml", "[agents.my-agent]"))
    choice = choose_agent(registry, flag=None, flag_options={}, config_name="my-agent-json",
                          config_presets=config["agents"])
    assert choice.spec.name == "command" and choice.version == "0.3"
    assert choice.options["final_text"] == "json:answer"
    assert config["agent"] == "my-agent"


def test_the_docs_package_preset_registers():
    namespace: dict = {}
    exec(doc_block("python", "evalctl_register_agents"), namespace)  # noqa: S102
    plugin = type("Plugin", (), {"evalctl_register_agents":
                                 staticmethod(namespace["evalctl_register_agents"])})
    registry = registry_with(("my_cli", plugin))
    choice = choose_agent(registry, flag="my-cli", flag_options={})
    assert choice.version == "1.4.2" and choice.options["final_text"] == "stdout"


def test_the_console_says_why_a_cli_agent_exited(tmp_path):
    """Found by a newcomer: a mistyped agent command failed the task, and only the JSON
    report and the page said 'command not found'; the console named the failed check."""
    suite = tmp_path / "s.yaml"
    suite.write_text("- id: hello\n  prompt: Write hello.txt.\n  checks:\n"
                     "    - type: file_exists\n      path: hello.txt\n")
    done = run_cli(tmp_path, str(suite), "--sandbox", "local", "--agent", "command",
                   "--agent-option", "argv=bash -c 'exec evalctl-no-such-agent'", "--out",
                   str(tmp_path / "out"))
    assert done.exit_code == 1, done.output
    # ...with what a wrapper's exit 127 may mean (graded: an agent may exit 127 itself,
    # tests/test_sandbox_r40.py)
    assert "agent_failed hello: the agent exited with code 127 (a shell's exit for a " \
        "program it cannot find or run" in " ".join(done.output.split()), done.output
    assert "evalctl-no-such-agent" in done.output
