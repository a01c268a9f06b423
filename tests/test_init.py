"""`evalctl init`, and the README's five commands from nothing to a green suite."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
from pathlib import Path

from click.testing import CliRunner

from evalctl._cli import cli
from evalctl._suite.loader import validate_suite
from evalctl._suite.starter import UNCOMMENT_MARKER

from .conftest import ROOT, environment_without_evalctl_settings, run_cli

EVALCTL = Path(sys.executable).parent / "evalctl"


def uncomment_the_script(suite: Path) -> None:
    """What the failing task's comment asks a person to do, as an editor's toggle-comment
    does it: the commented lines after the marker lose their `# `."""
    head, marker, tail = suite.read_text().partition(UNCOMMENT_MARKER + "\n")
    assert marker, "the starter suite lost its marker"
    lines = tail.splitlines(keepends=True)
    for index, line in enumerate(lines):
        if not line.startswith("    # "):
            break
        lines[index] = "    " + line[len("    # "):]
    suite.write_text(head + marker + "".join(lines))


def test_init_writes_a_clean_suite_and_the_installed_plugins_schema(tmp_path):
    result = CliRunner().invoke(cli, ["init", str(tmp_path / "my-evals")])
    assert result.exit_code == 0, result.output
    suite = tmp_path / "my-evals" / "suite.yaml"
    schema = tmp_path / "my-evals" / "suite.schema.json"
    assert suite.read_text().startswith("# yaml-language-server: $schema=suite.schema.json\n")
    assert schema.read_text() == CliRunner().invoke(cli, ["schema"]).output
    assert validate_suite(suite) == []
    assert "name: my-evals\n" in suite.read_text()
    commands = [line.split("#")[0].strip() for line in result.output.splitlines()
                if line.startswith("  ")]
    quoted = shlex.quote(str(suite))
    assert commands == [f"evalctl validate {quoted}", f"evalctl run {quoted}",
                        f"${{EDITOR:-vi}} {quoted}"]


def test_one_task_passes_one_shows_a_failure_and_the_comment_makes_it_pass(tmp_path):
    assert CliRunner().invoke(cli, ["init", str(tmp_path / "evals")]).exit_code == 0
    suite = tmp_path / "evals" / "suite.yaml"
    first = run_cli(tmp_path, str(suite), "--report", "r.json")
    assert first.exit_code == 1, first.output
    tasks = {t["id"]: t for t in json.loads((tmp_path / "r.json").read_text())["tasks"]}
    assert tasks["write-a-greeting"]["status"] == "passed"
    failing = tasks["summarize-notes"]
    assert failing["status"] == "failed" and failing["exit_status"] == "completed"
    assert [c["type"] for c in failing["checks"] if not c["passed"]] == ["file_exists",
                                                                          "file_contains"]
    uncomment_the_script(suite)
    assert validate_suite(suite) == []
    second = run_cli(tmp_path, str(suite), "--report", "r.json")
    assert second.exit_code == 0, second.output
    assert "2/2 tasks passed" in second.output


def test_init_never_overwrites_without_force(tmp_path):
    assert CliRunner().invoke(cli, ["init", str(tmp_path)]).exit_code == 0
    suite = tmp_path / "suite.yaml"
    suite.write_text("mine\n")
    again = CliRunner().invoke(cli, ["init", str(tmp_path)])
    assert again.exit_code == 2
    assert f"{suite} and {tmp_path / 'suite.schema.json'} already exist" in again.output
    assert suite.read_text() == "mine\n"
    forced = CliRunner().invoke(cli, ["init", str(tmp_path), "--force"])
    assert forced.exit_code == 0 and suite.read_text() != "mine\n"
    (tmp_path / "afile").write_text("")
    on_a_file = CliRunner().invoke(cli, ["init", str(tmp_path / "afile")])
    assert on_a_file.exit_code == 2 and "Traceback" not in on_a_file.output


def _readme_block(title: str) -> list[str]:
    readme = (ROOT / "README.md").read_text()
    section = readme.split(f"## {title}\n", 1)[1]
    block = re.search(r"```sh\n(.*?)```", section, flags=re.S).group(1)
    return [line.split("  #")[0].strip() for line in block.splitlines() if line.strip()]


def test_the_readmes_five_commands_give_a_newcomer_a_green_suite(tmp_path):
    """Commands 2 to 5 of the README, as written (the venv's evalctl is this one; the
    install, command 1, is what CI and the wheel test do)."""
    commands = _readme_block("Your own suite, in five commands")
    assert len(commands) == 5
    assert commands[0] == "python3 -m venv .venv && .venv/bin/pip install ."
    assert commands[3] == "${EDITOR:-vi} my-evals/suite.yaml"
    environment = {**environment_without_evalctl_settings(), "EVALCTL_NO_CACHE": "1"}
    outputs = []
    for command in commands[1:]:
        if command.startswith("${EDITOR"):
            uncomment_the_script(tmp_path / "my-evals" / "suite.yaml")
            continue
        argv = shlex.split(command)
        assert argv[0] == ".venv/bin/evalctl", command
        done = subprocess.run([str(EVALCTL), *argv[1:]], cwd=tmp_path, capture_output=True,
                              text=True, env=environment, timeout=120)
        outputs.append((done.returncode, done.stdout))
    (init_code, _), (first_code, first), (last_code, last) = outputs
    assert init_code == 0
    assert first_code == 1 and "1/2 tasks passed" in first
    assert last_code == 0 and "2/2 tasks passed" in last


def test_the_readmes_config_examples_load_where_they_say(tmp_path):
    from evalctl._run.config import load_config

    readme = (ROOT / "README.md").read_text()
    blocks = re.findall(r"```toml\n(.*?)```", readme, flags=re.S)
    flat = next(b for b in blocks if b.startswith("reporters = "))
    nested = next(b for b in blocks if b.startswith("[tool.evalctl]\n"))
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "evalctl.toml").write_text(flat)
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "pyproject.toml").write_text(nested)
    first, second = load_config(tmp_path / "a"), load_config(tmp_path / "b")
    assert first.values == second.values
    assert first.get("provider_options") == {"max_tokens": 4096}
