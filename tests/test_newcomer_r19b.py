"""A newcomer's findings, round 19 (second part): a live provider refused under
evalctl.toml's `sandbox = "local"` with "Install bubblewrap" where bubblewrap works, a
resume that left its errors out without naming --retry-errors, raw jsonschema text for
--agent-option, and an unknown name in EVALCTL_DISABLE_PLUGINS accepted silently."""

from __future__ import annotations

import pytest

import evalctl
from evalctl._plugin.registry import set_registry

from .conftest import registry_with, run_cli
from .test_journal import ERRORING
from .test_sandbox_choice import ONE_TASK
from .test_sandbox_choice import LiveProvider as _LiveProvider

# -- 4. a live provider under evalctl.toml's `sandbox = "local"` -------------------------

def _refused_under(tmp_path, config: str, text: str):
    """A run with a live provider, `config` holding `text`: refused with exit 2."""
    (tmp_path / "s.yaml").write_text(ONE_TASK)
    (tmp_path / config).write_text(text)
    refused = run_cli(tmp_path, "s.yaml", "--provider", "live_fake")
    assert refused.exit_code == 2, refused.output
    return refused


def test_a_live_provider_refused_under_the_configs_local_sandbox_names_its_line(
        tmp_path, require_bwrap):
    set_registry(registry_with(("live", _LiveProvider())))
    refused = _refused_under(tmp_path, "evalctl.toml",
                             'reporters = ["json"]\nsandbox = "local"\n')
    assert f"{tmp_path / 'evalctl.toml'}:2 chooses sandbox 'local'" in refused.output
    assert "--sandbox auto chooses 'bwrap'" in refused.output
    assert "--sandbox local on the command line" in refused.output
    assert "install bubblewrap" not in refused.output.lower()  # it works here
    assert not list(tmp_path.glob("eval_reports/workspaces-*/echo")), "a task started"


def test_the_same_in_pyproject_names_its_table(tmp_path, require_bwrap):
    set_registry(registry_with(("live", _LiveProvider())))
    refused = _refused_under(tmp_path, "pyproject.toml",
                             '[project]\nname = "x"\n\n[tool.evalctl]\nsandbox = "local"\n')
    assert f"{tmp_path / 'pyproject.toml'}:5 [tool.evalctl] chooses sandbox 'local'" \
        in refused.output


def test_without_an_isolating_sandbox_the_refusal_still_says_to_install_bubblewrap(
        tmp_path):
    registry = registry_with(("live", _LiveProvider()))
    registry.sandboxes.pop("bwrap", None)
    set_registry(registry)
    refused = _refused_under(tmp_path, "evalctl.toml", 'sandbox = "local"\n')
    assert f"{tmp_path / 'evalctl.toml'}:1 chooses sandbox 'local'" in refused.output
    assert "apt-get install bubblewrap" in refused.output


# -- 13. a resume that leaves its errors out says how to rerun them -----------------------



def test_a_resume_that_leaves_errors_out_names_retry_errors(tmp_path):
    (tmp_path / "s.yaml").write_text(ERRORING)
    first = run_cli(tmp_path, "s.yaml", "--reporter", "json", "--sandbox", "local")
    assert first.exit_code == 1, first.output
    run_dir = next((tmp_path / "eval_reports").glob("workspaces-*"))
    plain = run_cli(tmp_path, "--resume", str(run_dir))
    assert "0 of 3 attempt(s) to run (1 in error, kept as journaled: add --retry-errors " \
           "to run them again)" in plain.output, plain.output
    retried = run_cli(tmp_path, "--resume", str(run_dir), "--retry-errors")
    assert "1 of 3 attempt(s) to run\n" in retried.output, retried.output


# -- 5. --agent-option: an unknown option named with a did-you-mean -----------------------

def test_an_unknown_agent_option_gets_a_did_you_mean_like_provider_options(tmp_path):
    (tmp_path / "s.yaml").write_text(ONE_TASK)
    result = run_cli(tmp_path, "s.yaml", "--agent", "command", "--agent-option", "argv=true",
                     "--agent-option", "fnal_text=stdout")
    assert result.exit_code == 2, result.output
    assert "error: agent 'command' has no option 'fnal_text' (did you mean 'final_text'?); " \
           "known options: argv, env, path, final_text, model_proxy, version" in result.output
    assert "Additional properties" not in result.output


def test_every_unknown_agent_option_of_a_preset_is_named(registry):
    from evalctl._run.agents import choose_agent

    with pytest.raises(evalctl.UsageError) as refused:
        choose_agent(registry, flag="mine", flag_options={"zzz": "1", "verson": "2"},
                     config_presets={"mine": {"base": "command", "argv": "x"}})
    message = str(refused.value)
    assert "agent 'mine' (a preset of 'command') has no option 'zzz';" in message
    assert "has no option 'verson' (did you mean 'version'?)" in message


# -- 12. EVALCTL_DISABLE_PLUGINS naming no installed plugin -------------------------------

def test_an_unknown_name_in_disable_plugins_is_warned_about_once(tmp_path, monkeypatch):
    monkeypatch.setenv("EVALCTL_DISABLE_PLUGINS", "bwrapp, nonexist,tests_pass,local")
    (tmp_path / "s.yaml").write_text(ONE_TASK)
    result = run_cli(tmp_path, "s.yaml", "--sandbox", "bwrap", "--reporter", "json")
    warnings = [line for line in result.output.splitlines()
                if line.startswith("warning: EVALCTL_DISABLE_PLUGINS")]
    assert len(warnings) == 1, result.output
    assert "'bwrapp' (did you mean 'bwrap'?)" in warnings[0]
    assert "'nonexist'," in warnings[0]
    assert "'tests_pass' (it is a grader of plugin 'commands')" in warnings[0]
    assert "'local'" not in warnings[0].split("installed plugins:")[0]  # a plugin's name


def test_known_names_in_disable_plugins_are_not_warned_about(tmp_path, monkeypatch):
    monkeypatch.setenv("EVALCTL_DISABLE_PLUGINS", "local")
    (tmp_path / "s.yaml").write_text(ONE_TASK)
    result = run_cli(tmp_path, "s.yaml", "--sandbox", "bwrap", "--reporter", "json")
    assert "EVALCTL_DISABLE_PLUGINS" not in result.output, result.output


# -- 16. the Ray executor does not pass on Ray's advice about its own `--address` flag ----

# What ray.init(address="auto") raises (Ray 2.60) when it finds no running cluster.
RAY_NOT_FOUND = ("Could not find any running Ray instance. Please specify the one to connect "
                 "to by setting `--address` flag or `RAY_ADDRESS` environment variable.")


def test_the_ray_executor_gives_its_own_advice_not_rays_address_flag():
    """A stand-in for ray (no cluster, and ray not imported: whatever runs on this machine
    cannot change what is said)."""
    executor_module = pytest.importorskip("evalctl_ray.executor")

    class NoCluster:
        @staticmethod
        def init(*args, **kwargs):
            raise ConnectionError(RAY_NOT_FOUND)

    executor = object.__new__(executor_module.RayExecutor)
    executor.ray, executor.address = NoCluster(), "auto"
    with pytest.raises(evalctl.UsageError) as refused:
        executor._connect({})
    message = str(refused.value)
    assert message.startswith("cannot reach the Ray cluster at auto: Could not find any "
                              "running Ray instance; name a running one with "
                              "--executor-option address=HOST:PORT, start one with "), message
    assert "`--address` flag" not in message and "Please specify" not in message
    assert message.endswith("or use --executor-option address=local for one machine")
