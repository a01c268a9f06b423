"""Newcomers' leftovers: a CLI agent's argv with shell syntax in evalctl.toml said without
its line, and not at all in a preset the run does not use."""

from __future__ import annotations

from .conftest import run_cli
from .test_newcomer_r22 import WRITE_HELLO

# ------------------------------------------ 1: argv's shell syntax in evalctl.toml, at its line

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
