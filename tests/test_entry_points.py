"""The entry-point path, through real installs of small test distributions."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from .conftest import ROOT, environment_without_evalctl_settings

DISTRIBUTIONS = Path(__file__).parent / "distributions"


def _pip(*args: str, cwd: Path | None = None) -> None:
    subprocess.run([sys.executable, "-m", "pip", "--disable-pip-version-check", "-q", *args],
                   check=True, cwd=cwd, capture_output=True, text=True)


@pytest.fixture(scope="module")
def plugin_site(tmp_path_factory) -> Path:
    """The test distributions, really installed (pip, no network) into one prefix."""
    target = tmp_path_factory.mktemp("site")
    _pip("install", "--no-deps", "--no-build-isolation", "--no-index", "--target", str(target),
         *(str(DISTRIBUTIONS / name) for name in ("wordcount", "broken", "misspelled",
                                                   "duplicate", "extras", "misgrouped")))
    return target


def evalctl_in(site: Path, *args: str, cwd: Path | None = None,
               **env: str) -> subprocess.CompletedProcess[str]:
    environment = environment_without_evalctl_settings()
    environment["PYTHONPATH"] = os.pathsep.join([str(site), environment.get("PYTHONPATH", "")])
    environment["EVALCTL_NO_CACHE"] = "1"
    environment.update(env)
    return subprocess.run([sys.executable, "-m", "evalctl", *args], capture_output=True,
                          text=True, env=environment, cwd=cwd)


def test_list_plugins_shows_good_failed_and_conflicting_plugins(plugin_site):
    done = evalctl_in(plugin_site, "list-plugins", "--json")
    assert done.returncode == 0, done.stderr
    records = {r["plugin"]: r for r in json.loads(done.stdout)}
    assert records["wordcount"]["distribution"] == "evalctl-wordcount"
    assert records["wordcount"]["version"] == "1.0.0"
    assert records["broken"]["status"] == "failed"
    assert "evalctl_dependency_that_is_not_installed" in records["broken"]["error"]
    assert records["misspelled"]["status"] == "failed"
    assert "evalctl_register_grader" in records["misspelled"]["error"]
    # word_count is claimed twice: both sides are told, naming the other distribution.
    assert records["wordcount"]["status"] == "conflict"
    assert "evalctl-duplicate 2.0.0" in records["wordcount"]["conflicts"][0]
    assert "evalctl-wordcount 1.0.0" in records["duplicate"]["conflicts"][0]
    assert records["duplicate"]["graders"] == ["word_count", "always_true"]
    assert records["files"]["status"] == "ok"  # built-ins unaffected


def test_list_plugins_hints_at_a_distribution_in_a_look_alike_group(plugin_site):
    """Found by a newcomer: a plugin declared under `evalctl.plugins` was never loaded,
    and nothing said so."""
    for arguments in (["list-plugins"], ["list-plugins", "--json"]):
        done = evalctl_in(plugin_site, *arguments)
        assert done.returncode == 0
        assert ("hint: evalctl-misgrouped 0.1.0 declares 'misgrouped = evalctl_misgrouped' in "
                "the entry-point group 'evalctl.plugins', which evalctl does not read, so it "
                "is not loaded: plugins are found in the group 'evalctl'") in done.stderr
    assert "misgrouped" not in {r["plugin"] for r in json.loads(done.stdout)}


def test_the_table_lists_errors_and_strict_mode_exits_1(plugin_site):
    done = evalctl_in(plugin_site, "list-plugins")
    assert done.returncode == 0
    assert "failed" in done.stdout and "evalctl-broken" in done.stdout
    strict = evalctl_in(plugin_site, "--strict-plugins", "list-plugins")
    assert strict.returncode == 1
    by_env = evalctl_in(plugin_site, "list-plugins", EVALCTL_STRICT_PLUGINS="1")
    assert by_env.returncode == 1


def test_a_suite_using_a_conflicting_grader_names_both_distributions(plugin_site, tmp_path):
    suite = tmp_path / "s.yaml"
    suite.write_text("- id: t\n  prompt: p\n  checks:\n    - type: word_count\n"
                     "      path: a.txt\n")
    done = evalctl_in(plugin_site, "validate", str(suite))
    assert done.returncode == 2
    assert f"{suite}:4:" in done.stdout
    assert "evalctl-wordcount 1.0.0" in done.stdout and "evalctl-duplicate 2.0.0" in done.stdout
    assert "Traceback" not in done.stderr


def test_a_third_party_grader_is_validated_and_run(plugin_site, tmp_path):
    disable = {"EVALCTL_DISABLE_PLUGINS": "duplicate,broken,misspelled"}
    bad = tmp_path / "bad.yaml"
    bad.write_text("- id: t\n  prompt: p\n  checks:\n    - type: word_count\n"
                   "      path: a.txt\n      min: many\n")
    done = evalctl_in(plugin_site, "validate", str(bad), **disable)
    assert done.returncode == 2
    assert f"{bad}:6:" in done.stdout and "expected a whole number" in done.stdout

    good = tmp_path / "good.yaml"
    good.write_text(
        "- id: t\n  prompt: Write three words to a.txt.\n  checks:\n"
        "    - type: word_count\n      path: a.txt\n      min: 3\n  script:\n"
        "    - tool_calls:\n        - tool: write_file\n          input:\n"
        "            path: a.txt\n            content: one two three\n"
        "    - text: Wrote a.txt.\n")
    done = evalctl_in(plugin_site, "run", str(good), "--out", str(tmp_path / "out"),
                      cwd=tmp_path, **disable)
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads(next((tmp_path / "out").glob("report-*.json")).read_text())
    assert report["tasks"][0]["checks"][0]["detail"] == "a.txt has 3 words"
    assert report["plugins"]["wordcount"] == "1.0.0"
    assert report["plugin_distributions"]["wordcount"] == "evalctl-wordcount"


def test_a_failed_plugin_does_not_stop_a_run_that_does_not_need_it(plugin_site, tmp_path):
    done = evalctl_in(plugin_site, "run", str(ROOT / "suites" / "harness.yaml"), "--only",
                      "write-file", "--out", str(tmp_path / "out"), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    strict = evalctl_in(plugin_site, "--strict-plugins", "run",
                        str(ROOT / "suites" / "harness.yaml"), "--out", str(tmp_path / "o2"),
                        cwd=tmp_path)
    assert strict.returncode == 2
    assert "evalctl-broken" in strict.stderr and "Traceback" not in strict.stderr


@pytest.fixture(scope="module")
def namesake_site(tmp_path_factory) -> Path:
    """evalctl-wordcount beside evalctl-namesake, which uses its entry-point name."""
    target = tmp_path_factory.mktemp("namesake-site")
    _pip("install", "--no-deps", "--no-build-isolation", "--no-index", "--target", str(target),
         *(str(DISTRIBUTIONS / name) for name in ("wordcount", "namesake")))
    return target


def test_two_distributions_with_one_entry_point_name_load_neither_and_name_both(
        namesake_site, tmp_path):
    """Found by a newcomer: the second silently failed with pluggy's "Plugin name already
    registered" and its whole registry's repr, and the grader it would have registered
    (here a built-in's name) was then not a conflict, so the other distribution's won."""
    done = evalctl_in(namesake_site, "list-plugins", "--json")
    records = [r for r in json.loads(done.stdout) if r["plugin"] == "wordcount"]
    assert sorted(r["distribution"] for r in records) == ["evalctl-namesake",
                                                          "evalctl-wordcount"]
    for record in records:
        assert record["status"] == "failed"
        other = ({"evalctl-namesake", "evalctl-wordcount"} - {record["distribution"]}).pop()
        assert f"entry-point name 'wordcount' is also used by {other}" in record["error"]
        assert "EVALCTL_DISABLE_PLUGINS=evalctl-namesake:wordcount" in record["error"]
        assert "already registered" not in record["error"] and "{" not in record["error"]

    suite = tmp_path / "s.yaml"
    suite.write_text("- id: t\n  prompt: p\n  checks:\n    - type: file_exists\n"
                     "      path: a.txt\n")
    checked = evalctl_in(namesake_site, "validate", str(suite))
    assert checked.returncode == 2
    line = next(line for line in checked.stdout.splitlines() if line.startswith(f"{suite}:4:"))
    assert "grader 'file_exists' is built into evalctl" in line
    assert "evalctl-namesake 0.4.0, which failed to load" in line
    assert "EVALCTL_DISABLE_PLUGINS=evalctl-namesake:wordcount" in line
    strict = evalctl_in(namesake_site, "--strict-plugins", "validate", str(suite))
    assert strict.returncode == 2 and "evalctl-namesake" in strict.stderr


def test_one_of_two_namesakes_is_disabled_by_its_distribution(namesake_site, tmp_path):
    good = tmp_path / "good.yaml"
    good.write_text(
        "- id: t\n  prompt: Write three words to a.txt.\n  checks:\n"
        "    - type: word_count\n      path: a.txt\n      min: 3\n"
        "    - type: file_exists\n      path: a.txt\n  script:\n"
        "    - tool_calls:\n        - tool: write_file\n          input:\n"
        "            path: a.txt\n            content: one two three\n"
        "    - text: Wrote a.txt.\n")
    done = evalctl_in(namesake_site, "--strict-plugins", "run", str(good), "--out",
                      str(tmp_path / "out"), cwd=tmp_path,
                      EVALCTL_DISABLE_PLUGINS="evalctl_Namesake:wordcount")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "names" not in done.stderr  # no "disables nothing" warning
    report = json.loads(next((tmp_path / "out").glob("report-*.json")).read_text())
    # The report says which of the two distributions the plugin came from.
    assert report["plugins"]["wordcount"] == "1.0.0"
    assert report["plugin_distributions"]["wordcount"] == "evalctl-wordcount"
    assert report["plugin_distributions"]["files"] == "evalctl"


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    # Build from a copy so the checkout gets no build/ or egg-info droppings.
    source = tmp_path_factory.mktemp("source") / "evalctl"
    shutil.copytree(ROOT, source, ignore=shutil.ignore_patterns(
        ".git", ".venv", "build", "dist", "*.egg-info", "__pycache__", "eval_reports",
        ".cache"))
    _pip("wheel", "--no-deps", "--no-build-isolation", "--no-index", "-w", str(out), str(source))
    return next(out.glob("evalctl-*.whl"))


def test_the_wheel_holds_the_plugins_their_entry_points_and_the_schema(wheel):
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        entry_points = next(n for n in names if n.endswith("entry_points.txt"))
        declared = archive.read(entry_points).decode()
    for module in ("evalctl/__init__.py", "evalctl/py.typed", "evalctl/_plugin/registry.py",
                   "evalctl/_agent/loop.py", "evalctl/_agent/forwarder.py",
                   "evalctl/plugins/agents/command.py", "evalctl/plugins/agents/builtin.py",
                   "evalctl/plugins/graders/files.py", "evalctl/plugins/providers/scripted.py",
                   "evalctl/plugins/providers/anthropic.py",
                   "evalctl/plugins/reporters/junit.py", "evalctl/schemas/suite.schema.json",
                   "evalctl/suites/harness.yaml", "evalctl/suites/core.yaml",
                   "evalctl/suites/general.yaml", "evalctl/suites/live.yaml",
                   "evalctl/suites/realrepo.yaml", "evalctl/suites/realrepo/NOTICE",
                   "evalctl/suites/realrepo/LICENSE.parse",
                   "evalctl/suites/realrepo/parse-1.20.0.bundle",
                   "evalctl/plugins/importers/swebench.py"):
        assert module in names, module
    assert "[evalctl]" in declared
    for name in ("files = evalctl.plugins.graders.files", "scripted = evalctl.plugins.providers"
                 ".scripted", "junit = evalctl.plugins.reporters.junit",
                 "swebench = evalctl.plugins.importers.swebench"):
        assert name in declared
    assert "evalctl = evalctl._cli:main" in declared


def test_the_installed_wheel_works(wheel, tmp_path):
    site = tmp_path / "site"
    _pip("install", "--no-deps", "--no-index", "--target", str(site), str(wheel))
    done = evalctl_in(site, "list-plugins", "--json")
    assert done.returncode == 0, done.stderr
    assert {r["plugin"] for r in json.loads(done.stdout)} >= {"files", "scripted", "json"}
    where = evalctl_in(site, "schema", "--builtins")
    shipped = (site / "evalctl" / "schemas" / "suite.schema.json").read_text()
    assert where.stdout == shipped
    probe = subprocess.run(
        [sys.executable, "-c", "import evalctl; print(evalctl.__file__)"], capture_output=True,
        text=True, env={**environment_without_evalctl_settings(), "PYTHONPATH": str(site)},
        timeout=60)
    assert probe.stdout.strip().startswith(str(site))


def test_the_installed_wheel_runs_a_built_in_suite_green_from_an_empty_directory(wheel,
                                                                                 tmp_path):
    """A wheel user's first command, with the `evalctl` script the wheel installs, in a
    directory with nothing in it: no checkout, no suites/."""
    site = tmp_path / "site"
    _pip("install", "--no-deps", "--no-index", "--target", str(site), str(wheel))
    empty = tmp_path / "empty"
    empty.mkdir()
    environment = {**environment_without_evalctl_settings(), "PYTHONPATH": str(site),
                   "EVALCTL_NO_CACHE": "1"}
    script = site / "bin" / "evalctl"
    done = subprocess.run([str(script), "run", "harness"], capture_output=True, text=True,
                          cwd=empty, env=environment, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "5/5 tasks passed" in done.stdout
    report = json.loads(next((empty / "eval_reports").glob("report-*.json")).read_text())
    assert report["suite"]["path"].startswith(str(site / "evalctl" / "suites"))
    listed = subprocess.run([str(script), "suites", "--json"], capture_output=True, text=True,
                            cwd=empty, env=environment, timeout=60)
    assert {s["name"] for s in json.loads(listed.stdout)} == {"adversarial", "core", "general",
                                                              "harness", "live", "realrepo"}
    started = subprocess.run([str(script), "init", "my-evals"], capture_output=True, text=True,
                             cwd=empty, env=environment, timeout=60)
    assert started.returncode == 0, started.stderr
    ran = subprocess.run([str(script), "run", "my-evals/suite.yaml"], capture_output=True,
                         text=True, cwd=empty, env=environment, timeout=300)
    assert ran.returncode == 1 and "1/2 tasks passed" in ran.stdout, ran.stdout + ran.stderr
    # The real-repository suite's bundle travels in the wheel too (its clone is cached
    # under this test's own cache directory).
    real = subprocess.run([str(script), "run", "realrepo"], capture_output=True, text=True,
                          cwd=empty, timeout=300,
                          env={**environment, "XDG_CACHE_HOME": str(tmp_path / "cache")})
    assert real.returncode == 0 and "1/1 tasks passed" in real.stdout, real.stdout + real.stderr
    assert list((tmp_path / "cache" / "evalctl" / "sources" / "git").iterdir())


@pytest.mark.parametrize("distribution, tests", [("extras", 3), ("wordcount", 8)])
def test_third_party_plugins_pass_their_own_tests(plugin_site, tmp_path, distribution, tests):
    """A grader, reporter, provider and sandbox tested with evalctl.testing alone,
    against their real installs."""
    environment = environment_without_evalctl_settings()
    environment["PYTHONPATH"] = os.pathsep.join([str(plugin_site),
                                                 environment.get("PYTHONPATH", "")])
    environment["EVALCTL_DISABLE_PLUGINS"] = "duplicate,broken,misspelled"
    home = DISTRIBUTIONS / distribution
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           "--rootdir", str(home), "--confcutdir", str(home), "-c", os.devnull,
                           str(home / "tests")], capture_output=True,
                          text=True, env=environment, cwd=tmp_path, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"{tests} passed" in done.stdout


def test_list_plugins_shows_a_third_party_sandbox(plugin_site):
    done = evalctl_in(plugin_site, "list-plugins", "--json")
    extras = next(r for r in json.loads(done.stdout) if r["plugin"] == "extras")
    assert (extras["reporters"], extras["providers"], extras["sandboxes"]) == \
        (["csv"], ["echo"], ["recording"])
