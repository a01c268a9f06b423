"""Choosing the sandbox: flags, suite defaults, config, auto, and the live-provider rule."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

import evalctl
from evalctl._cli import cli
from evalctl._plugin.registry import set_registry

from .conftest import SUITES, registry_with, run_cli

ONE_TASK = """\
- id: echo
  prompt: Write hi to a.txt.
  checks:
    - type: file_exists
      path: a.txt
  script:
    - tool_calls:
        - tool: bash
          input:
            command: echo hi > a.txt
    - text: Wrote a.txt.
"""


class Live:
    async def complete(self, request):
        return evalctl.ModelTurn(text="done")


class LiveProvider:
    @evalctl.hookimpl
    def evalctl_register_providers(self, register):
        register(evalctl.ProviderSpec(name="live_fake", create=lambda options: Live()))


def report_of(tmp_path) -> dict:
    return json.loads((tmp_path / "r.json").read_text())


def test_auto_picks_bwrap_here_and_the_report_records_it(tmp_path, require_bwrap,
                                                         write_suite):
    result = run_cli(tmp_path, str(write_suite(ONE_TASK)), "--report", "r.json")
    assert result.exit_code == 0, result.output
    assert report_of(tmp_path)["sandbox"] == {"name": "bwrap", "options": {}, "isolated": True,
                                              "chosen_by": "auto"}


SUITE_CHOOSES_LOCAL = "name: s\ndefaults:\n  sandbox: local\ntasks:\n" + \
    "".join("  " + line + "\n" for line in ONE_TASK.splitlines())


def test_a_live_provider_refuses_an_unisolated_sandbox_it_was_not_told_to_use(
        tmp_path, write_suite, require_bwrap):
    set_registry(registry_with(("live", LiveProvider())))
    suite = write_suite(SUITE_CHOOSES_LOCAL)
    refused = run_cli(tmp_path, str(suite), "--provider", "live_fake")
    assert refused.exit_code == 2
    assert "live_fake provider is live" in refused.output
    # Found by a newcomer: this said "Install bubblewrap" where bubblewrap works, and
    # did not say which line chose the sandbox.
    assert f"{suite}:3 chooses sandbox 'local'" in refused.output
    assert "Remove `sandbox:` from the suite's defaults, so that --sandbox auto chooses " \
           "'bwrap'" in refused.output
    assert "install bubblewrap" not in refused.output.lower()
    again = run_cli(tmp_path, str(suite), "--provider", "live_fake")  # from the suite cache
    assert f"{suite}:3 chooses sandbox 'local'" in again.output
    assert not list(tmp_path.glob("eval_reports/workspaces-*/echo")), "a task started"
    chosen = run_cli(tmp_path, str(suite), "--provider", "live_fake", "--sandbox", "local",
                     "--report", "r.json")
    assert chosen.exit_code == 1  # the fake model does nothing: the check fails
    assert "does not isolate the agent" in chosen.output
    assert report_of(tmp_path)["sandbox"]["chosen_by"] == "--sandbox"


def test_where_no_sandbox_isolates_the_refusal_says_to_install_bubblewrap(tmp_path,
                                                                          write_suite):
    registry = registry_with(("live", LiveProvider()))
    registry.sandboxes.pop("bwrap", None)
    set_registry(registry)
    suite = write_suite(SUITE_CHOOSES_LOCAL)
    refused = run_cli(tmp_path, str(suite), "--provider", "live_fake")
    assert refused.exit_code == 2, refused.output
    assert f"{suite}:3 chooses sandbox 'local'" in refused.output
    assert "apt-get install bubblewrap" in refused.output


def test_suite_defaults_and_config_choose_and_options_are_typed(tmp_path, write_suite,
                                                                require_bwrap):
    suite = write_suite("name: s\ndefaults:\n  sandbox:\n    name: bwrap\n    memory_mb: 512\n"
                        "tasks:\n" + "".join("  " + line + "\n" for line in ONE_TASK.splitlines()))
    result = run_cli(tmp_path, str(suite), "--report", "r.json", "--sandbox-option",
                     "max_processes=64")
    assert result.exit_code == 0, result.output
    assert report_of(tmp_path)["sandbox"] == {
        "name": "bwrap", "options": {"memory_mb": 512, "max_processes": 64}, "isolated": True,
        "chosen_by": "suite"}
    (tmp_path / "evalctl.toml").write_text('sandbox = "local"\n')
    configured = run_cli(tmp_path, str(write_suite(ONE_TASK, "plain.yaml")), "--report",
                         "r.json")
    assert configured.exit_code == 0, configured.output
    assert report_of(tmp_path)["sandbox"]["chosen_by"] == "config"


def test_bad_sandbox_choices_exit_2_before_any_task(tmp_path, write_suite):
    suite = str(write_suite(ONE_TASK))
    unknown = run_cli(tmp_path, suite, "--sandbox", "dockr")
    assert unknown.exit_code == 2 and "unknown sandbox 'dockr'" in unknown.output
    bad_option = run_cli(tmp_path, suite, "--sandbox", "local", "--sandbox-option", "image=x")
    assert bad_option.exit_code == 2
    assert "sandbox 'local' has no option 'image'; its options: none" in bad_option.output
    bad_type = run_cli(tmp_path, suite, "--sandbox", "bwrap", "--sandbox-option",
                       "memory_mb=lots")
    assert bad_type.exit_code == 2
    assert "option 'memory_mb': expected a whole number, got 'lots'" in bad_type.output
    assert "Traceback" not in unknown.output + bad_option.output + bad_type.output


def test_a_misspelled_sandbox_in_a_suite_is_a_validation_error(write_suite):
    suite = write_suite("name: s\ndefaults:\n  sandbox: bwarp\ntasks:\n" +
                        "".join("  " + line + "\n" for line in ONE_TASK.splitlines()))
    result = CliRunner().invoke(cli, ["validate", str(suite)])
    assert result.exit_code == 2 and f"{suite}:3:" in result.output


def test_doctor_says_what_runs_here(require_bwrap):
    result = CliRunner().invoke(cli, ["doctor", "--json"])
    assert result.exit_code == 0
    findings = {f["name"]: f for f in json.loads(result.output)}
    assert findings["bwrap"]["auto"] and findings["bwrap"]["available"]
    assert set(findings["bwrap"]["limits"]) == {"processes", "memory", "file_size"}
    assert not findings["local"]["auto"] and not findings["local"]["isolated"]
    text = CliRunner().invoke(cli, ["doctor"]).output
    assert "bwrap (auto's choice)" in text and "limit file_size: RLIMIT_FSIZE" in text


def test_harness_passes_in_both_sandboxes(tmp_path, require_bwrap):
    for name in ("bwrap", "local"):
        result = run_cli(tmp_path, str(SUITES / "harness.yaml"), "--sandbox", name)
        assert result.exit_code == 0, (name, result.output)


def test_bwrap_options_refuse_what_no_sandbox_can_take_and_type_what_it_can():
    """Found by an attacker: ro_paths of / or of a relative path failed every attempt's
    sandbox, and memory_mb=64.0 was refused on the command line while a suite's 64.0 was
    taken. The first are errors before the run; 64.0 is 64 both ways."""
    from evalctl._errors import UsageError
    from evalctl._plugin.options import typed_options
    from evalctl.plugins.sandboxes.bwrap import OPTIONS

    assert typed_options("sandbox", "bwrap", OPTIONS, {"memory_mb": "64.0"}) == {"memory_mb": 64}
    assert typed_options("sandbox", "bwrap", OPTIONS, {"memory_mb": 64.0}) == {"memory_mb": 64}
    for bad in ("/", "opt/tools", ""):
        with pytest.raises(UsageError, match="ro_paths"):
            typed_options("sandbox", "bwrap", OPTIONS, {"ro_paths": [bad]})
    with pytest.raises(UsageError, match="memory_mb"):
        typed_options("sandbox", "bwrap", OPTIONS, {"memory_mb": "64.5"})
