"""evalctl.testing's rough edges a newcomer met: errors in evalctl's words, not its
internals'."""

from __future__ import annotations

import types

import pytest

import evalctl
from evalctl.testing import grade_check, registry_with, run_suite


def _plugin() -> types.ModuleType:
    def grade(check, workspace, result):
        data = (workspace / check["path"]).read_bytes()
        return evalctl.CheckResult(data.startswith(b"\x89PNG"), f"{len(data)} bytes")

    @evalctl.hookimpl
    def evalctl_register_graders(register):
        register(evalctl.GraderSpec(name="helper_png", grade=grade, params_schema={
            "type": "object", "properties": {"path": {"type": "string"}}}))

    module = types.ModuleType("helper_plugin")
    module.evalctl_register_graders = evalctl_register_graders
    return module


PLUGIN = _plugin()
SUITE = """\
- id: t
  prompt: Write a.txt.
  checks:
    - type: file_exists
      path: a.txt
  script:
    - tool_calls:
        - tool: write_file
          input:
            path: a.txt
            content: hi
    - text: Done.
"""


def test_a_check_without_a_type_says_so():
    with pytest.raises(evalctl.UsageError, match="the check has no type: give its grader's "
                                                 "name as 'type'"):
        grade_check({"path": "a.txt"}, plugins=[PLUGIN])


def test_files_may_be_bytes_and_another_type_is_said_by_its_path():
    outcome = grade_check({"type": "helper_png", "path": "i.png"},
                          files={"i.png": b"\x89PNG\r\n\xff"}, plugins=[PLUGIN])
    assert outcome.passed and outcome.detail == "7 bytes"
    with pytest.raises(TypeError, match=r"grade_check files=\{'n': \.\.\.\}: the content "
                                        "must be text or bytes, not int"):
        grade_check({"type": "helper_png", "path": "n"}, files={"n": 3}, plugins=[PLUGIN])
    with pytest.raises(TypeError, match="seed=.*must be text .*give bytes in files="):
        grade_check({"type": "helper_png", "path": "n"}, seed={"n": b"x"}, plugins=[PLUGIN])


def test_an_unknown_run_suite_option_lists_the_ones_it_takes():
    with pytest.raises(TypeError) as raised:
        run_suite(SUITE, repaet=2)
    said = str(raised.value)
    assert said.startswith("run_suite() got unknown option(s) repaet; besides plugins, "
                           "provider, sandbox, out_dir, reporters and registry, it takes: ")
    assert "repeat" in said and "RunOptions" not in said


def test_a_plugin_under_test_is_named_without_a_version_of_none():
    @evalctl.hookimpl
    def evalctl_register_graders(register):
        register("not a spec")

    broken = types.ModuleType("broken_helper")
    broken.evalctl_register_graders = evalctl_register_graders
    with pytest.raises(evalctl.UsageError) as raised:
        registry_with([broken])
    assert str(raised.value).startswith("plugin 'broken_helper' (under-test) failed")


def test_run_suite_writes_the_json_report_as_evalctl_run_does(tmp_path):
    run_suite(SUITE, sandbox="local", reporters=["markdown"], out_dir=tmp_path / "a")
    assert sorted(p.suffix for p in (tmp_path / "a").glob("report-*")) == [".json", ".md"]
    run_suite(SUITE, sandbox="local", out_dir=tmp_path / "b")
    assert [p.suffix for p in (tmp_path / "b").glob("report-*")] == [".json"]
