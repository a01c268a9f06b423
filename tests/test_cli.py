"""CliRunner tests of list-plugins and schema (validate and run have their own files)."""

from __future__ import annotations

import json
import types
from pathlib import Path

import pytest
from click.testing import CliRunner

import evalctl
from evalctl._cli import cli
from evalctl._plugin.registry import PluginSource, entry_point_sources, load_registry, set_registry
from evalctl._suite.schema import registry_schema, schema_text

from .conftest import ROOT, SUITES, run_cli


def _install_broken_plugin() -> None:
    sources = entry_point_sources() + [PluginSource("broken", lambda: 1 / 0, "broken-dist", "3")]
    set_registry(load_registry(sources, disabled=()))


def test_list_plugins_table():
    result = CliRunner().invoke(cli, ["list-plugins"])
    assert result.exit_code == 0
    for text in ("plugin", "distribution", "version", "status", "provides", "graders:",
                 "file_exists", "providers: scripted", "reporters: junit", "evalctl", "0.1.0"):
        assert text in result.output, text


def test_list_plugins_json_has_the_same_records():
    result = CliRunner().invoke(cli, ["list-plugins", "--json"])
    records = {r["plugin"]: r for r in json.loads(result.output)}
    assert records["files"] == {
        "plugin": "files", "distribution": "evalctl", "version": evalctl.__version__,
        "status": "ok", "error": None, "conflicts": [],
        "graders": ["file_exists", "file_contains", "no_placeholders"], "providers": [],
        "reporters": [], "sandboxes": [], "agents": [],
        "importers": [], "executors": []}
    assert records["local_executor"]["executors"] == ["local"]
    assert records["command"]["agents"] == ["command", "claude-code"]
    assert records["loop"]["agents"] == ["evalctl"]


def test_list_plugins_shows_failures_and_strict_mode_exits_1():
    _install_broken_plugin()
    result = CliRunner().invoke(cli, ["list-plugins"])
    assert result.exit_code == 0
    assert "broken-dist" in result.output and "ZeroDivisionError" in result.output
    strict = CliRunner().invoke(cli, ["--strict-plugins", "list-plugins", "--json"])
    assert strict.exit_code == 1
    records = {r["plugin"]: r for r in json.loads(strict.output)}
    assert records["broken"]["status"] == "failed"


def test_strict_mode_stops_validate_with_exit_2(tmp_path):
    _install_broken_plugin()
    result = CliRunner().invoke(cli, ["validate", str(ROOT / "suites" / "harness.yaml")],
                                env={"EVALCTL_STRICT_PLUGINS": "1"})
    assert result.exit_code == 2
    assert "strict mode" in result.output and "broken-dist 3" in result.output


def test_schema_prints_the_composed_schema_including_third_party_graders():
    @evalctl.hookimpl
    def evalctl_register_graders(register):
        register(evalctl.GraderSpec(name="word_count", grade=lambda c, w, r: None,
                                    params_schema={"type": "object", "properties": {
                                        "max": {"type": "integer"}}}))

    plugin = types.ModuleType("wc")
    plugin.evalctl_register_graders = evalctl_register_graders
    sources = entry_point_sources() + [PluginSource.from_object("wc", plugin, "wc-dist", "1")]
    set_registry(load_registry(sources, disabled=()))
    full = json.loads(CliRunner().invoke(cli, ["schema"]).output)
    assert "check_word_count" in full["$defs"]
    assert "word_count" in full["$defs"]["check"]["properties"]["type"]["enum"]
    builtins = json.loads(CliRunner().invoke(cli, ["schema", "--builtins"]).output)
    assert "check_word_count" not in builtins["$defs"]


def test_the_published_schema_is_not_stale(registry):
    builtins = registry.from_distribution("grader", "evalctl")
    assert "judge" not in builtins and "file_exists" in builtins
    published = (ROOT / "schemas" / "suite.schema.json").read_text()
    assert published == schema_text(registry_schema(registry, builtins_only=True)), \
        "schemas/suite.schema.json is stale: run evalctl schema --builtins -o " \
        "schemas/suite.schema.json"


def test_schema_writes_a_file(tmp_path):
    target = tmp_path / "out" / "schema.json"
    target.parent.mkdir()  # a missing one is refused (tests/test_cli_newcomer_r9.py)
    result = CliRunner().invoke(cli, ["schema", "--builtins", "-o", str(target)])
    assert result.exit_code == 0
    assert json.loads(target.read_text())["$schema"].endswith("2020-12/schema")


def test_help_lists_every_command():
    result = CliRunner().invoke(cli, ["--help"])
    for command in ("run", "validate", "schema", "list-plugins"):
        assert command in result.output


def test_help_and_list_plugins_import_no_sdk_and_no_event_loop():
    """`--help` and `list-plugins` stay quick: no model SDK, no Ray, no YAML or schema
    library, and no asyncio (about 10 ms) is imported to answer them."""
    import subprocess
    import sys

    heavy = ["anthropic", "ray", "playwright", "yaml", "strictyaml", "jsonschema",
             "jsonschema_rs", "asyncio"]
    probe = ("import sys\nfrom evalctl._cli import main\nsys.argv = ['evalctl', *sys.argv[1:]]\n"
             "try:\n    main()\nexcept SystemExit:\n    pass\n"
             f"print([m for m in {heavy!r} if m in sys.modules], file=sys.stderr)\n")
    for arguments in (["--help"], ["list-plugins"]):
        done = subprocess.run([sys.executable, "-c", probe, *arguments], capture_output=True,
                              text=True, timeout=60)
        assert done.stderr.strip().splitlines()[-1] == "[]", (arguments, done.stderr)


def test_evalctl_asks_for_more_descriptors_than_the_usual_soft_limit():
    """Every running command holds about five descriptors: at a soft limit of 1,024, a
    few hundred concurrent calls made other attempts' commands fail to start. evalctl
    raises its soft limit toward the hard one (to 65,536 at most)."""
    import resource
    import subprocess
    import sys

    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    probe = ("import resource, sys\nfrom evalctl._cli import main\n"
             "sys.argv = ['evalctl', '--help']\n"
             "try:\n    main()\nexcept SystemExit:\n    pass\n"
             "print(resource.getrlimit(resource.RLIMIT_NOFILE)[0], file=sys.stderr)\n")
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60,
        preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (256, hard)))
    wanted = 65_536 if hard == resource.RLIM_INFINITY else min(hard, 65_536)
    assert int(done.stderr.strip().splitlines()[-1]) == wanted, done.stderr


@pytest.mark.parametrize("arguments", [
    ["run", "harness", "--max-cost", "nan"], ["run", "harness", "--max-drop", "nan"],
    ["run", "harness", "--max-cost", "inf"], ["compare", "a.json", "b.json", "--alpha", "nan"],
    ["run", "harness", "--repeat", "99999999999999999999999"]])
def test_numbers_that_would_switch_a_guard_off_are_refused(arguments):
    """Found by an attacker: every comparison with NaN is false, so `--max-cost nan`
    switched the budget off and `--max-drop nan` the baseline gate; `--repeat 10**23`
    ran for ever making attempts. Each is a usage error, exit 2."""
    result = CliRunner().invoke(cli, arguments)
    assert result.exit_code == 2, result.output
    assert "not a finite number" in result.output or "range" in result.output


def test_sigterm_before_a_run_can_report_is_an_interruption_not_a_traceback(tmp_path):
    """SIGTERM cancels the run's task; work that does not wind down into a report
    (cancelled before it reaches the attempts, say) ends as an interruption, exit 130."""
    import subprocess
    import sys

    probe = ("import asyncio, os, signal, sys, threading\n"
             "from evalctl import _cli\n"
             "threading.Timer(0.3, lambda: os.kill(os.getpid(), signal.SIGTERM)).start()\n"
             "try:\n    _cli._interruptible(asyncio.sleep(30))\n"
             "except KeyboardInterrupt:\n    print('interrupted')\n")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0 and done.stdout.strip() == "interrupted", done.stderr


@pytest.mark.parametrize("target", ["suite", "other", "device"])
def test_report_never_overwrites_what_is_not_a_report(tmp_path, target):
    """Found by a newcomer: `--report` replaced the suite being run, and `--report
    /dev/null` wrote /dev/null-2 (as root). A path that is the suite, a file that is not
    an earlier JSON report, or a device is refused before the run, exit 2."""
    suite = tmp_path / "suite.yaml"
    suite.write_text((SUITES / "harness.yaml").read_text())
    other = tmp_path / "notes.json"
    other.write_text('{"mine": true}\n')
    path = {"suite": suite, "other": other, "device": Path("/dev/null")}[target]
    before = path.read_bytes() if target != "device" else b""
    result = run_cli(tmp_path, str(suite), "--report", str(path), "--out", "out")
    assert result.exit_code == 2, result.output
    assert f"--report {path}: it " in result.output and "Traceback" not in result.output
    assert not (tmp_path / "out").exists() and not Path("/dev/null-2").exists()
    if target != "device":
        assert path.read_bytes() == before
    # An earlier report at the path is what CI writes every run: replaced.
    assert run_cli(tmp_path, str(suite), "--report", "r.json").exit_code == 0
    first = (tmp_path / "r.json").read_text()
    assert run_cli(tmp_path, str(suite), "--report", "r.json").exit_code == 0
    assert (tmp_path / "r.json").read_text() != first


def test_a_grader_with_an_invalid_params_schema_is_reported_not_a_traceback(tmp_path):
    """Found by a newcomer: {"type": "strng"} gave validate and run a jsonschema traceback
    (exit 1), and `evalctl schema` wrote an invalid schema."""
    @evalctl.hookimpl
    def evalctl_register_graders(register):
        register(evalctl.GraderSpec(
            name="mistyped", grade=lambda c, w, r: evalctl.CheckResult(True),
            params_schema={"type": "object", "properties": {"path": {"type": "strng"}}}))

    plugin = types.ModuleType("mistyped")
    plugin.evalctl_register_graders = evalctl_register_graders  # type: ignore[attr-defined]
    set_registry(load_registry(entry_point_sources() + [
        PluginSource.from_object("mistyped", plugin, "evalctl-mistyped", "0.1")], disabled=()))
    suite = tmp_path / "s.yaml"
    suite.write_text("- id: t\n  prompt: p\n  checks:\n    - type: mistyped\n"
                     "      path: a.txt\n")
    result = CliRunner().invoke(cli, ["validate", str(suite)])
    assert result.exit_code == 2, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    assert "params_schema is not a valid JSON Schema" in result.output
    printed = CliRunner().invoke(cli, ["schema"])
    from jsonschema import Draft202012Validator

    Draft202012Validator.check_schema(json.loads(printed.stdout))


def _reporters_plugin(*specs: tuple[str, str]) -> types.ModuleType:
    def write(run, path):
        return evalctl.write_atomically(path, f"{path.name}\n")

    @evalctl.hookimpl
    def evalctl_register_reporters(register):
        for name, extension in specs:
            register(evalctl.ReporterSpec(name=name, write=write, extension=extension))

    plugin = types.ModuleType("reporters")
    plugin.evalctl_register_reporters = evalctl_register_reporters  # type: ignore[attr-defined]
    return plugin


SCRIPTED_SUITE = """\
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
            content: x
    - text: Wrote a.txt.
"""


def test_two_reporters_of_one_extension_are_refused_before_any_task(tmp_path):
    """Found by a newcomer: both wrote report-X.txt, the second over the first, and both
    said "wrote"."""
    from .conftest import registry_with

    set_registry(registry_with(("texts", _reporters_plugin(("plain", "txt"),
                                                           ("slack", "txt")))))
    (tmp_path / "suite.yaml").write_text(SCRIPTED_SUITE)
    refused = run_cli(tmp_path, "suite.yaml", "--reporter", "plain", "--reporter", "slack",
                      "--out", "out")
    assert refused.exit_code == 2
    assert ("reporters 'plain' (test-dist 1.0) and 'slack' (test-dist 1.0) both write "
            "report-<run>.txt, so one would overwrite the other") in refused.output
    assert not (tmp_path / "out").exists()  # nothing ran
    ran = run_cli(tmp_path, "suite.yaml", "--reporter", "plain", "--out", "out")
    assert ran.exit_code == 0, ran.output


def test_a_reporters_dotted_extension_is_normalised_and_a_bad_one_refused(tmp_path):
    from .conftest import registry_with

    registry = registry_with(("dotted", _reporters_plugin(("dotted", ".csv"))))
    assert registry.reporters["dotted"].extension == "csv"  # not report-X..csv
    set_registry(registry)
    (tmp_path / "suite.yaml").write_text(SCRIPTED_SUITE)
    ran = run_cli(tmp_path, "suite.yaml", "--reporter", "dotted", "--out", "out")
    assert ran.exit_code == 0, ran.output
    assert [p.suffix for p in (tmp_path / "out").glob("report-*.csv")] == [".csv"]
    assert not list((tmp_path / "out").glob("*..csv"))
    for extension in ("", ".", "c/sv", "csv "):
        with pytest.raises(ValueError, match="extension"):
            evalctl.ReporterSpec(name="r", write=lambda run, path: path, extension=extension)


def test_write_reports_never_writes_one_report_over_another(tmp_path):
    from evalctl._report.writing import write_reports
    from evalctl.testing import run_suite

    from .conftest import registry_with

    registry = registry_with(("texts", _reporters_plugin(("plain", "txt"), ("slack", "txt"))))
    run = run_suite(SCRIPTED_SUITE, registry=registry, sandbox="local", out_dir=tmp_path)
    written, failures = write_reports(run, registry, ["plain", "slack"], tmp_path / "r")
    assert len(written) == 1 and written[0].read_text() == f"{written[0].name}\n"
    assert failures == [f"reporter 'slack' was not written: {written[0]} is reporter "
                        "'plain''s (both write .txt)"]


def test_every_command_but_list_plugins_warns_of_a_failed_plugin_once(tmp_path):
    """Found by a newcomer: run, validate, schema and init said nothing of a plugin that
    failed (init wrote a schema without its graders)."""
    _install_broken_plugin()
    said = ("warning: plugin 'broken' (broken-dist 3) failed to load, so nothing it "
            "provides can be used: import failed: ZeroDivisionError: division by zero")
    for arguments in (["validate", str(SUITES / "harness.yaml")], ["schema"],
                      ["init", str(tmp_path / "starter")]):
        result = CliRunner().invoke(cli, arguments)
        assert result.exit_code == 0, result.output
        lines = [line for line in result.stderr.splitlines() if "broken" in line]
        assert len(lines) == 1 and lines[0].startswith(said), arguments
        assert lines[0].endswith("(evalctl list-plugins shows every plugin)")
    (tmp_path / "suite.yaml").write_text(SCRIPTED_SUITE)
    ran = run_cli(tmp_path, "suite.yaml", "--out", "out")
    assert ran.exit_code == 0 and said in ran.stderr
    listed = CliRunner().invoke(cli, ["list-plugins"])
    assert "warning" not in listed.stderr


def test_an_unknown_type_is_one_line_whatever_a_failed_plugins_error_holds(tmp_path):
    def explode():
        raise ImportError("no module named 'sdk'\n  (and a second line)\n")

    set_registry(load_registry(entry_point_sources() + [
        PluginSource("multi", explode, "multi-dist", "1")], disabled=()))
    suite = tmp_path / "s.yaml"
    suite.write_text("- id: t\n  prompt: p\n  checks:\n    - type: file_exists\n"
                     "      path: a.txt\n    - type: sdk_check\n")
    result = CliRunner().invoke(cli, ["validate", str(suite)])
    assert result.exit_code == 2
    lines = result.stdout.splitlines()
    assert len(lines) == 2 and lines[0].startswith(f"{suite}:6: error:")
    assert "no module named 'sdk' (and a second line)" in lines[0]


def test_a_reporters_write_may_return_none_but_nothing_else(tmp_path):
    """Found by a newcomer: a write() that returned None was a TypeError."""
    from evalctl._report.writing import write_reports
    from evalctl.testing import run_suite

    from .conftest import registry_with

    def writes_returns_none(run, path):
        evalctl.write_atomically(path, "x\n")

    def returns_a_number(run, path):
        evalctl.write_atomically(path, "x\n")
        return 3

    def writes_nothing(run, path):
        return None

    @evalctl.hookimpl
    def evalctl_register_reporters(register):
        for name, write in (("none_ok", writes_returns_none), ("number", returns_a_number),
                            ("nothing", writes_nothing)):
            register(evalctl.ReporterSpec(name=name, write=write, extension=name))

    plugin = types.ModuleType("returns")
    plugin.evalctl_register_reporters = evalctl_register_reporters  # type: ignore[attr-defined]
    registry = registry_with(("returns", plugin))
    run = run_suite(SCRIPTED_SUITE, registry=registry, sandbox="local", out_dir=tmp_path)
    written, failures = write_reports(run, registry, ["none_ok", "number", "nothing"],
                                      tmp_path / "r")
    assert [p.suffix for p in written] == [".none_ok"]
    assert len(failures) == 2
    assert "reporter 'number' from plugin 'returns' (test-dist 1.0) returned 3 from write(), " \
        "which is no report file" in failures[0]
    assert "reporter 'nothing'" in failures[1] and "returned None" in failures[1]
