"""The built-in suites travel with the package: `evalctl run harness` from anywhere, and
`evalctl suites` says what there is. (The installed wheel is tested in
test_entry_points.py.)"""

from __future__ import annotations

import json

from click.testing import CliRunner

from evalctl._cli import cli

from .conftest import SUITES, run_cli


def test_a_bare_name_runs_the_built_in_suite_from_an_empty_directory(tmp_path):
    result = run_cli(tmp_path, "harness", "--report", "r.json")
    assert result.exit_code == 0, result.output
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["suite"]["name"] == "harness"
    assert report["summary"]["passed"] == report["summary"]["total"] == 5
    assert report["suite"]["sha256"] == _sha256(SUITES / "harness.yaml")


def _sha256(path) -> str:
    import hashlib

    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_a_file_of_that_name_wins_over_the_built_in(tmp_path):
    (tmp_path / "harness").write_text(
        "- id: mine\n  prompt: p\n  checks:\n    - type: file_exists\n      path: a.txt\n")
    result = run_cli(tmp_path, "harness", "--report", "r.json")
    assert result.exit_code == 1  # the local suite ran: its one task has no script
    assert [t["id"] for t in json.loads((tmp_path / "r.json").read_text())["tasks"]] == ["mine"]


def test_a_directory_of_that_name_does_not_hide_the_built_in(tmp_path):
    """Found by a newcomer: the README's `evalctl run core --scripted`, from the checkout
    the install step leaves you in, failed with "it is a directory" (evalctl's own
    `core/` package). A directory is not a suite: the built-in runs."""
    (tmp_path / "harness").mkdir()
    result = run_cli(tmp_path, "harness", "--report", "r.json")
    assert result.exit_code == 0, result.output
    assert json.loads((tmp_path / "r.json").read_text())["suite"]["name"] == "harness"
    (tmp_path / "mine").mkdir()  # no built-in of that name: the directory is refused
    result = run_cli(tmp_path, "mine")
    assert result.exit_code == 2 and "it is a directory" in result.output


def test_an_unknown_name_says_there_is_no_such_file_nor_built_in(tmp_path):
    result = run_cli(tmp_path, "harnes")
    assert result.exit_code == 2
    assert result.output.startswith("harnes: error: cannot read suite: no such file, and no "
                                    "built-in suite of that name (did you mean 'harness'?); "
                                    "built-in suites: adversarial, core, general, harness, live, "
                                    "realrepo"), \
        result.output
    assert not (tmp_path / "eval_reports").exists()


def test_validate_takes_bare_names_too():
    result = CliRunner().invoke(cli, ["validate", "harness", "general"])
    assert result.exit_code == 0, result.output
    assert result.output.strip() == "2 suites: 0 error(s), 0 warning(s)"


def test_suites_lists_each_built_in_with_its_tasks_and_purpose():
    result = CliRunner().invoke(cli, ["suites"])
    assert result.exit_code == 0, result.output
    for name in ("harness", "general", "core", "live", "adversarial", "realrepo"):
        assert name in result.output
    assert "evalctl run harness" in result.output
    listed = {s["name"]: s for s in json.loads(
        CliRunner().invoke(cli, ["suites", "--json"]).output)}
    assert set(listed) == {"harness", "general", "core", "live", "adversarial", "realrepo"}
    assert (listed["harness"]["tasks"], listed["harness"]["scripted"]) == (5, 5)
    assert (listed["core"]["tasks"], listed["core"]["scripted"]) == (4, 1)
    assert (listed["live"]["tasks"], listed["live"]["scripted"]) == (3, 0)
    for suite in listed.values():
        assert suite["description"], suite["name"]
        assert suite["path"].endswith(f"{suite['name']}.yaml")


def test_help_starts_a_newcomer_with_forms_that_work_outside_a_checkout():
    help_text = CliRunner().invoke(cli, ["--help"]).output
    assert "evalctl run harness" in help_text and "evalctl init" in help_text
    assert "suites/" not in help_text
    for command in ("suites", "init"):
        assert command in help_text
