"""The README's commands and example package are the ones that exist and run."""

from __future__ import annotations

import re

from .conftest import ROOT

README = (ROOT / "README.md").read_text()
WORDCOUNT = ROOT / "tests" / "distributions" / "wordcount"


def code_blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", README, flags=re.S)


def test_the_readme_opens_with_the_two_commands_and_ci_runs_the_test_command():
    setup_and_run, setup_and_test = code_blocks("sh")[:2]
    # A built-in suite by name: the same command works from a wheel, with no checkout
    # (test_entry_points runs it from an empty directory).
    assert setup_and_run.strip().endswith(".venv/bin/evalctl run harness")
    assert "pytest" in setup_and_test
    assert setup_and_test.strip() in (ROOT / ".ci" / "run").read_text()


def test_the_readme_names_no_suite_by_a_checkout_path_a_wheel_user_lacks():
    commands = "\n".join(code_blocks("sh"))
    assert "suites/" not in commands


def test_the_readme_plugin_example_is_the_tested_distribution():
    assert (WORDCOUNT / "pyproject.toml").read_text() in code_blocks("toml")
    source = (WORDCOUNT / "src" / "evalctl_wordcount" / "__init__.py").read_text()
    assert source in code_blocks("python")


def test_the_plugin_guide_says_to_import_nothing_heavy_at_module_level_for_every_kind():
    """It was said for providers and executors only; a newcomer's grader imported its SDK
    at module level and slowed list-plugins, validate and schema by its import time."""
    guide = (ROOT / "docs" / "plugins.md").read_text()
    sections = dict(re.findall(r"^## (\w[\w ]*)\n(.*?)(?=^## |\Z)", guide, flags=re.S | re.M))
    assert "Import nothing heavy at module level" in sections["Hooks"]
    for kind, where in (("Graders", "inside `grade`"), ("Reporters", "inside `write`"),
                        ("Providers", "inside `create`"), ("Executors", "inside `create`")):
        assert where in sections[kind] and "never" in sections[kind], kind


def test_the_testing_section_names_examples_registry_with_refuses_and_takes():
    """It said flow style (`argv: [cat, out.txt]`) was refused, long after suites took
    it (found by a newcomer): what it quotes is checked against example_problem."""
    import dataclasses
    import types

    import evalctl
    from evalctl.testing import example_problem, registry_with

    guide = (ROOT / "docs" / "plugins.md").read_text()
    testing = " ".join(guide.split("## Testing a plugin", 1)[1].split("## ", 1)[0].split())
    refused = re.search(r"YAML a suite refuses \(a list left open, such as `([^`]+)`\), or a "
                        r"check its schema refuses \(`([^`]+)` for an integer\)", testing)
    taken = re.search(r"Flow style is YAML a suite takes \(`([^`]+)`", testing)
    assert refused and taken, testing

    @evalctl.hookimpl
    def evalctl_register_graders(register):
        register(evalctl.GraderSpec(
            name="doc_count", grade=lambda check, workspace, result: None,
            params_schema={"type": "object", "properties": {
                "path": {"type": "string"}, "min": {"type": "integer"}}}))

    plugin = types.ModuleType("doc_plugin")
    plugin.evalctl_register_graders = evalctl_register_graders
    registry = registry_with([plugin])
    spec = registry.graders["doc_count"]

    def problem(example: str) -> str | None:
        return example_problem(dataclasses.replace(spec, example=example), registry)

    for line in refused.groups():
        assert problem(f"- type: doc_count\n  path: a.txt\n  {line}"), line
    assert problem(taken.group(1).replace("word_count", "doc_count")) is None
