"""Plugins registered in a fresh plugin manager: isolation, conflicts, strictness."""

from __future__ import annotations

import types

import pytest

import evalctl
from evalctl._errors import PluginError, UsageError
from evalctl._plugin.registry import PluginSource, load_registry

from .conftest import registry_with


def _module(name: str, **attributes) -> types.ModuleType:
    module = types.ModuleType(name)
    module.__dict__.update(attributes)
    return module


def _grader_plugin(*names: str, kind: str = "mechanical") -> types.ModuleType:
    @evalctl.hookimpl
    def evalctl_register_graders(register):
        for name in names:
            register(evalctl.GraderSpec(name=name, kind=kind,
                                        grade=lambda c, w, r: evalctl.CheckResult(True)))

    return _module("plugin", evalctl_register_graders=evalctl_register_graders)


def test_a_good_plugin_registers_what_it_provides():
    registry = load_registry([PluginSource.from_object("good", _grader_plugin("alpha", "beta"),
                                                       "good-dist", "1.2")])
    assert sorted(registry.graders) == ["alpha", "beta"]
    record = registry.plugins[0]
    assert (record.status, record.distribution, record.version) == ("ok", "good-dist", "1.2")
    assert record.provides["grader"] == ["alpha", "beta"]


def test_a_plugin_that_fails_to_import_is_recorded_and_skipped():
    def explode():
        raise ImportError("no module named 'missing_dependency'")

    registry = load_registry([PluginSource("broken", explode, "broken-dist", "0.1"),
                              PluginSource.from_object("good", _grader_plugin("alpha"))])
    broken = registry.plugins[0]
    assert broken.status == "failed"
    assert "import failed" in broken.error and "missing_dependency" in broken.error
    assert "alpha" in registry.graders


def test_a_misspelled_hook_fails_validation_with_a_suggestion():
    @evalctl.hookimpl
    def evalctl_register_grader(register):
        register(evalctl.GraderSpec(name="x", grade=lambda c, w, r: None))

    registry = load_registry([PluginSource.from_object(
        "typo", _module("typo", evalctl_register_grader=evalctl_register_grader))])
    record = registry.plugins[0]
    assert record.status == "failed"
    assert "unknown hook evalctl_register_grader" in record.error
    assert "did you mean evalctl_register_graders" in record.error
    assert registry.graders == {}


def test_an_unmarked_hook_is_an_error_not_silently_ignored():
    def evalctl_register_graders(register):
        pass

    registry = load_registry([PluginSource.from_object(
        "unmarked", _module("unmarked", evalctl_register_graders=evalctl_register_graders))])
    assert "not marked with @evalctl.hookimpl" in registry.plugins[0].error


def test_a_hook_with_unknown_arguments_is_rejected():
    @evalctl.hookimpl
    def evalctl_register_graders(register, config):
        pass

    registry = load_registry([PluginSource.from_object(
        "args", _module("args", evalctl_register_graders=evalctl_register_graders))])
    assert registry.plugins[0].status == "failed"
    assert "config" in registry.plugins[0].error


def test_a_hook_without_register_that_returns_its_specs_fails_its_plugin():
    """Found by a newcomer: it registered nothing, and nothing said so."""
    @evalctl.hookimpl
    def evalctl_register_graders():
        return [evalctl.GraderSpec(name="x", grade=lambda c, w, r: None)]

    registry = load_registry([PluginSource.from_object(
        "returns", _module("returns", evalctl_register_graders=evalctl_register_graders))])
    assert registry.plugins[0].status == "failed"
    assert registry.plugins[0].error.startswith(
        "evalctl_register_graders() takes no argument: evalctl calls "
        "evalctl_register_graders(register), and the hook calls "
        "register(evalctl.GraderSpec(...)) once per grader; nothing a hook returns is "
        f"registered at {__file__}:")


def test_a_hook_that_registers_and_returns_specs_fails_its_plugin():
    @evalctl.hookimpl
    def evalctl_register_reporters(register):
        return [evalctl.ReporterSpec(name="x", write=lambda run, path: path, extension="x")]

    registry = load_registry([PluginSource.from_object(
        "returns", _module("returns", evalctl_register_reporters=evalctl_register_reporters))])
    assert "evalctl_register_reporters returned list: nothing a hook returns is registered; " \
        "call register(evalctl.ReporterSpec(...)) once per reporter instead" in \
        registry.plugins[0].error


def test_a_hooks_argument_of_another_name_is_said_in_evalctls_words():
    @evalctl.hookimpl
    def evalctl_register_graders(reg):
        pass

    registry = load_registry([PluginSource.from_object(
        "named", _module("named", evalctl_register_graders=evalctl_register_graders))])
    assert registry.plugins[0].error.startswith(
        "evalctl_register_graders(reg): evalctl passes one argument, by the name register; "
        f"name it so, and take no other at {__file__}:")


def test_a_hook_that_raises_registers_nothing_and_others_still_work():
    @evalctl.hookimpl
    def evalctl_register_graders(register):
        register(evalctl.GraderSpec(name="half", grade=lambda c, w, r: None))
        raise RuntimeError("boom")

    registry = load_registry([
        PluginSource.from_object("raiser", _module("r", evalctl_register_graders=
                                                   evalctl_register_graders)),
        PluginSource.from_object("good", _grader_plugin("alpha")),
    ])
    raiser = registry.plugins[0]
    assert raiser.status == "failed"
    assert "RuntimeError: boom" in raiser.error
    assert "half" not in registry.graders  # all or nothing
    assert "alpha" in registry.graders


def test_a_hook_that_exits_is_a_failed_plugin_not_the_end_of_evalctl():
    """As an import's SystemExit already was: a hook's (a helper's sys.exit()) ended
    every evalctl command with exit 0 and no word."""
    @evalctl.hookimpl
    def evalctl_register_graders(register):
        raise SystemExit(0)

    registry = load_registry([
        PluginSource.from_object("exits", _module("e", evalctl_register_graders=
                                                  evalctl_register_graders)),
        PluginSource.from_object("good", _grader_plugin("alpha")),
    ])
    assert registry.plugins[0].status == "failed"
    assert "evalctl_register_graders raised SystemExit: 0" in registry.plugins[0].error
    assert "alpha" in registry.graders


def test_registering_something_that_is_not_a_spec_fails_the_plugin():
    @evalctl.hookimpl
    def evalctl_register_graders(register):
        register({"name": "dict"})

    registry = load_registry([PluginSource.from_object(
        "wrong", _module("w", evalctl_register_graders=evalctl_register_graders))])
    assert "takes evalctl.GraderSpec, got dict" in registry.plugins[0].error


def test_a_register_kept_and_called_after_the_hook_returned_is_refused():
    """Found by a plugin newcomer: a hook that saved `register` and called it later
    (lazily, at its first check) registered nothing, and nothing said so."""
    kept = []

    @evalctl.hookimpl
    def evalctl_register_graders(register):
        kept.append(register)

    registry = load_registry([PluginSource.from_object(
        "lazy", _module("lazy", evalctl_register_graders=evalctl_register_graders))])
    assert registry.plugins[0].status == "ok"
    with pytest.raises(RuntimeError, match=r"register\(\) was called after "
                       r"evalctl_register_graders returned; .* call "
                       r"register\(evalctl.GraderSpec\(\.\.\.\)\) inside it"):
        kept[0](evalctl.GraderSpec(name="late", grade=lambda c, w, r: None))
    assert "late" not in registry.graders


@pytest.mark.parametrize("spec, message", [
    (lambda: evalctl.GraderSpec(name="g", grade=lambda check, result: None),
     "grader 'g': grade must take 3 arguments (check, workspace, result), as evalctl calls "
     "it; it is grade(check, result)"),
    (lambda: evalctl.GraderSpec(name="g", grade=lambda c, w, r: None,
                                preflight=lambda: None),
     "grader 'g': preflight must take 1 argument (checks)"),
    (lambda: evalctl.ReporterSpec(name="r", write=lambda run: None, extension="csv"),
     "reporter 'r': write must take 2 arguments (run_result, path)"),
    (lambda: evalctl.ProviderSpec(name="p", create=lambda: None),
     "provider 'p': create must take 1 argument (options)"),
    (lambda: evalctl.ExecutorSpec(name="e", create=lambda options, more: None),
     "executor 'e': create must take 1 argument (options)"),
    (lambda: evalctl.ImporterSpec(name="i", read=lambda path: None),
     "importer 'i': read must take 2 arguments (path, options)"),
])
def test_a_plugin_function_of_the_wrong_arity_is_refused_at_registration(spec, message):
    """Found by a plugin newcomer: accepted, it failed at its first call, in every
    attempt; the message names the parameters evalctl passes and the ones it has."""
    with pytest.raises(TypeError) as raised:
        spec()
    assert str(raised.value).startswith(message)


def test_plugin_functions_with_defaults_varargs_or_as_objects_are_accepted():
    class Grade:
        def __call__(self, check, workspace, result, extra=None):
            return evalctl.CheckResult(True)

    evalctl.GraderSpec(name="a", grade=Grade())
    evalctl.GraderSpec(name="b", grade=lambda *args: None, preflight=print)
    evalctl.ReporterSpec(name="c", write=lambda run, path, **options: path, extension="c")


@pytest.mark.parametrize("kwargs, message", [
    ({"name": "Bad Name"}, "lowercase"),
    ({"name": "ok", "kind": "vibes"}, "kind must be one of"),
    ({"name": "ok", "params_schema": {"type": "array"}}, "object schema"),
    ({"name": "ok", "params_schema": {"properties": {"type": {}}}}, "must not define 'type'"),
])
def test_invalid_grader_specs_are_refused(kwargs, message):
    with pytest.raises((ValueError, TypeError), match=message):
        evalctl.GraderSpec(grade=lambda c, w, r: None, **kwargs)


def test_two_plugins_registering_one_name_is_an_error_naming_both_distributions():
    registry = load_registry([
        PluginSource.from_object("first", _grader_plugin("same", "only_first"), "dist-one", "1"),
        PluginSource.from_object("second", _grader_plugin("same"), "dist-two", "2"),
    ])
    assert "same" not in registry.graders  # never resolved by install order
    assert "only_first" in registry.graders
    with pytest.raises(UsageError) as raised:
        registry.get("grader", "same")
    message = str(raised.value)
    assert "dist-one 1" in message and "dist-two 2" in message
    assert all(r.shown_status == "conflict" for r in registry.plugins)
    with pytest.raises(PluginError):
        registry.require_healthy()


def _raising_after(name: str) -> types.ModuleType:
    @evalctl.hookimpl
    def evalctl_register_graders(register):
        register(evalctl.GraderSpec(name=name, grade=lambda c, w, r: None))
        raise RuntimeError("boom")

    return _module("raising", evalctl_register_graders=evalctl_register_graders)


def test_a_name_a_failed_plugin_registered_still_conflicts():
    """Another distribution's grader must not silently take the place of the one a failed
    plugin registered (found by a newcomer)."""
    registry = load_registry([
        PluginSource.from_object("raiser", _raising_after("same"), "dist-one", "1"),
        PluginSource.from_object("good", _grader_plugin("same", "other"), "dist-two", "2"),
    ])
    assert "same" not in registry.graders and "other" in registry.graders
    message = registry.explain_missing("grader", "same")
    assert "dist-one 1, which failed to load" in message and "dist-two 2" in message
    assert any("grader 'same'" in problem for problem in registry.problems())


def test_two_plugins_of_one_entry_point_name_both_fail_naming_each_other():
    registry = load_registry([
        PluginSource.from_object("same", _grader_plugin("alpha"), "dist-one", "1"),
        PluginSource.from_object("same", _grader_plugin("beta"), "dist-two", "2"),
    ])
    assert [p.status for p in registry.plugins] == ["failed", "failed"]
    first, second = registry.plugins
    assert "entry-point name 'same' is also used by dist-two 2" in first.error
    assert "entry-point name 'same' is also used by dist-one 1" in second.error
    assert "EVALCTL_DISABLE_PLUGINS=dist-one:same" in first.error
    assert "already registered" not in first.error + second.error
    assert registry.graders.keys().isdisjoint({"alpha", "beta"})
    assert "which failed to load" in registry.explain_missing("grader", "alpha")
    # Both ran every hook: neither may provide a name they did not register.
    assert "may provide it" not in registry.explain_missing("grader", "gamma")
    # One of them is set aside by its distribution: the other loads.
    chosen = load_registry([
        PluginSource.from_object("same", _grader_plugin("alpha"), "dist-one", "1"),
        PluginSource.from_object("same", _grader_plugin("beta"), "dist-two", "2"),
    ], disabled={"Dist_Two:same"})
    assert [p.status for p in chosen.plugins] == ["ok", "disabled"]
    assert "alpha" in chosen.graders
    assert chosen.unknown_disabled_warning({"Dist_Two:same"}) is None
    assert "'dist-three:same'" in chosen.unknown_disabled_warning({"dist-three:same"})


def test_a_plugin_taking_a_builtins_name_is_told_to_rename_it():
    registry = load_registry([
        PluginSource.from_object("files", _grader_plugin("file_exists"), "evalctl", "0.1"),
        PluginSource.from_object("mine", _grader_plugin("file_exists"), "my-dist", "1"),
    ])
    message = registry.explain_missing("grader", "file_exists")
    assert "grader 'file_exists' is built into evalctl" in message
    assert "plugin 'mine' (my-dist 1)" in message and "a name of its own" in message
    # Never advice to disable evalctl's own plugin.
    assert "EVALCTL_DISABLE_PLUGINS=mine" in message
    assert "EVALCTL_DISABLE_PLUGINS=files" not in message


def test_one_module_behind_two_entry_points_is_a_conflict_not_a_pluggy_error():
    plugin = _grader_plugin("alpha")
    registry = load_registry([PluginSource.from_object("one", plugin, "dist-one", "1"),
                              PluginSource.from_object("two", plugin, "dist-two", "2")])
    assert [p.shown_status for p in registry.plugins] == ["conflict", "conflict"]
    assert "dist-one 1" in registry.explain_missing("grader", "alpha")


def _schema_plugin(**spec) -> types.ModuleType:
    @evalctl.hookimpl
    def evalctl_register_graders(register):
        register(evalctl.GraderSpec(name="checked", grade=lambda c, w, r: None, **spec))

    return _module("schemas", evalctl_register_graders=evalctl_register_graders)


@pytest.mark.parametrize("schema, said", [
    ({"type": "object", "properties": {"path": {"type": "strng"}}},
     "params_schema is not a valid JSON Schema: 'strng' is not a JSON Schema type (one of "
     "string, integer, number, boolean, array, object, null), at properties.path.type"),
    ({"type": "object", "properties": {"path": {"type": "string"}}, "required": "path"},
     "params_schema is not a valid JSON Schema: 'path' is not of type 'array', at required"),
    ({"path": {"type": "string"}, "min": {"type": "integer"}},
     "params_schema has 'path', 'min' at its top level, where JSON Schema keywords go: the "
     "keys go under properties"),
    ({"type": "object", "properties": {"path": {"type": "string"}}, "requried": ["path"]},
     "'requried', which is no JSON Schema keyword (did you mean 'required'?)"),
    ({"type": "object", "properties": {"path": {"type": "string"}}, "required": ["pth"]},
     "requires 'pth', which its properties do not declare"),
    ({"type": "object", "properties": {"x": {"type": "string", "pattern": "([a-z"}}},
     "pattern '([a-z' is not a regular expression Python reads"),
    ({"type": "object", "properties": {"x": {"$ref": "https://example.com/x.json"}}},
     "names another document"),
])
def test_a_params_schema_that_is_no_json_schema_fails_its_plugin(schema, said):
    """Found by a newcomer: such schemas registered, list-plugins said ok, and validate
    gave a jsonschema traceback (exit 1) or an error per character of `required`."""
    registry = load_registry([PluginSource.from_object("mine", _schema_plugin(
        params_schema=schema), "my-dist", "1")])
    record = registry.plugins[0]
    assert record.status == "failed"
    assert record.error.startswith("grader 'checked': ")
    assert said in record.error
    assert "checked" not in registry.graders
    assert "my-dist 1" in registry.explain_missing("grader", "checked")


def test_every_plugin_kinds_schemas_are_checked_at_registration():
    @evalctl.hookimpl
    def evalctl_register_providers(register):
        register(evalctl.ProviderSpec(name="p", create=lambda options: None, options_schema={
            "type": "object", "properties": {"model": {"type": "text"}}}))

    registry = load_registry([PluginSource.from_object(
        "prov", _module("prov", evalctl_register_providers=evalctl_register_providers))])
    assert "provider 'p': options_schema is not a valid JSON Schema: 'text'" in \
        registry.plugins[0].error

    @evalctl.hookimpl
    def evalctl_register_sandboxes(register):
        register(evalctl.SandboxSpec(name="s", create=lambda request: None, options_schema={
            "type": "object", "properties": {"image": {"minLength": "1"}}}))

    registry = load_registry([PluginSource.from_object(
        "box", _module("box", evalctl_register_sandboxes=evalctl_register_sandboxes))])
    assert "sandbox 's': options_schema is not a valid JSON Schema" in registry.plugins[0].error

    @evalctl.hookimpl
    def evalctl_register_providers(register):  # noqa: F811
        register(evalctl.ProviderSpec(name="q", create=lambda options: None,
                                      task_schema={"turns": {"type": "lst"}}))

    registry = load_registry([PluginSource.from_object(
        "task", _module("task", evalctl_register_providers=evalctl_register_providers))])
    assert "provider 'q': task_schema['turns'] is not a valid JSON Schema" in \
        registry.plugins[0].error


def test_the_installed_schemas_are_seen_valid_without_a_validator(registry):
    """Every schema is checked as its plugin registers; those of the usual shape, as every
    installed plugin's is, without importing a validator (list-plugins imports none)."""
    from evalctl._schema_check import _surely_a_schema

    for kind, specs in registry.specs.items():
        for name, spec in specs.items():
            schemas = [getattr(spec, attribute) for attribute in ("params_schema",
                                                                  "options_schema")
                       if hasattr(spec, attribute)]
            schemas += list((getattr(spec, "task_schema", None) or {}).values())
            assert all(map(_surely_a_schema, schemas)), (kind, name)


@pytest.mark.parametrize("schema", [
    {"minLength": True}, {"minLength": -1}, {"minLength": 1.5}, {"type": ["string", "string"]},
    {"type": []}, {"allOf": []}, {"multipleOf": 0}, {"required": ["a", "a"]},
    {"required": [1]}, {"properties": {"a": 3}}, {"items": []}, {"enum": "a"},
    {"dependentRequired": {"a": "b"}}, {"pattern": 1}, {"uniqueItems": 1},
    {"maximum": "3"}, {"additionalProperties": None}, {"anyOf": [{"type": "strng"}]},
])
def test_the_quick_look_never_passes_what_the_metaschema_refuses(schema):
    from jsonschema import Draft202012Validator
    from jsonschema.exceptions import SchemaError

    from evalctl._schema_check import _surely_a_schema, schema_problem

    with pytest.raises(SchemaError):
        Draft202012Validator.check_schema(schema)
    assert not _surely_a_schema(schema)
    assert schema_problem(schema)


def test_disabled_plugins_are_not_loaded():
    loaded = []

    def load():
        loaded.append(True)
        return _grader_plugin("alpha")

    registry = load_registry([PluginSource("blocked", load)], disabled={"blocked"})
    assert loaded == [] and registry.plugins[0].status == "disabled"
    assert "disabled by EVALCTL_DISABLE_PLUGINS: blocked" in registry.explain_missing(
        "grader", "alpha")


def test_disable_list_comes_from_the_environment(monkeypatch):
    monkeypatch.setenv("EVALCTL_DISABLE_PLUGINS", "a, b")
    registry = load_registry([PluginSource.from_object("a", _grader_plugin("x")),
                              PluginSource.from_object("c", _grader_plugin("y"))])
    assert [p.status for p in registry.plugins] == ["disabled", "ok"]


def test_strict_mode_turns_any_failure_into_an_error():
    registry = load_registry([PluginSource("bad", lambda: 1 / 0)])
    assert registry.problems()
    with pytest.raises(PluginError, match="ZeroDivisionError"):
        registry.require_healthy()


def test_unknown_names_explain_failed_plugins_and_suggest():
    registry = load_registry([PluginSource.from_object("good", _grader_plugin("file_exists")),
                              PluginSource("bad", lambda: 1 / 0, "bad-dist", "9")])
    message = registry.explain_missing("grader", "file_exist")
    assert "did you mean 'file_exists'" in message
    assert "bad-dist 9" in message and "ZeroDivisionError" in message


def test_builtins_come_from_entry_points(registry):
    assert {"succeeded", "file_exists", "file_contains", "command", "tests_pass", "python",
            "no_placeholders", "grounding"} <= set(registry.graders)
    assert {"scripted", "anthropic"} <= set(registry.providers)
    assert {"json", "markdown", "junit"} <= set(registry.reporters)
    for kind, names in (("grader", ["file_exists", "grounding"]), ("provider", ["scripted"]),
                        ("reporter", ["json"])):
        for name in names:
            assert registry.plugin_of(kind, name).distribution == "evalctl"


def test_registry_with_adds_a_test_plugin():
    registry = registry_with(("extra", _grader_plugin("extra_grader")))
    assert "extra_grader" in registry.graders and "file_exists" in registry.graders


def test_a_spec_evalctl_refuses_is_said_at_the_plugins_line_not_evalctls():
    """Found by a newcomer: "grader name must be lowercase" pointed at evalctl's own
    source line."""
    @evalctl.hookimpl
    def evalctl_register_graders(register):
        register(evalctl.GraderSpec(name="Bad Name", grade=lambda c, w, r: None))

    registry = load_registry([PluginSource.from_object(
        "capitals", _module("capitals", evalctl_register_graders=evalctl_register_graders))])
    error = registry.plugins[0].error
    assert "grader name 'Bad Name' must be lowercase" in error
    assert f" at {__file__}:" in error and "specs.py" not in error


def test_the_built_in_graders_examples_are_checks_a_suite_takes(registry):
    from evalctl.testing import example_problem

    for name, spec in registry.graders.items():
        assert example_problem(spec, registry) is None, name


@pytest.mark.parametrize("example, said", [
    ("- type: listed\n  argv: [cat, out.txt",
     "grader 'listed': its example is not YAML a suite takes (line 2): invalid YAML: a list "
     "written in [...] (flow style) starts on this line and is not closed"),
    ("- type: listed\n  argv:\n    - 3",
     "grader 'listed': its example is not a valid check: invalid listed check (evalctl "
     "validate refuses it too): argv[0]: expected text"),
    ("type: listed", "its example must be one check, as it is written under `checks:`"),
])
def test_registry_with_refuses_a_grader_whose_example_a_suite_would_refuse(example, said):
    """Found by a newcomer: an example suites refused (then, flow style) went into the
    generated docs unchecked."""
    from evalctl.testing import registry_with as plugin_registry

    plugin = _module("listed")

    @evalctl.hookimpl
    def evalctl_register_graders(register):
        register(evalctl.GraderSpec(
            name="listed", grade=lambda c, w, r: None, example=example,
            params_schema={"type": "object", "properties": {
                "argv": {"type": "array", "items": {"type": "string"}}}}))

    plugin.evalctl_register_graders = evalctl_register_graders
    with pytest.raises(UsageError) as raised:
        plugin_registry([plugin])
    assert said in str(raised.value)


def _rated_plugin(name: str, rate: str) -> types.ModuleType:
    @evalctl.hookimpl
    def evalctl_register_graders(register):
        register(evalctl.GraderSpec(name=name, rate=rate,
                                    grade=lambda c, w, r: evalctl.CheckResult(True)))

    return _module("rated", evalctl_register_graders=evalctl_register_graders)


@pytest.mark.parametrize("rate, key", [("completion", "completion_rate"),
                                       ("judge", "judge_rate")])
def test_a_rate_named_as_a_summary_key_of_the_core_fails_its_plugin(rate, key):
    """Found by a newcomer: rate="completion" overwrote summary.completion_rate (0.5 with
    2 of 3 attempts passed) and the console said "completion 67%, completion 50%";
    rate="judge" silently lost one of the two figures."""
    registry = load_registry([PluginSource.from_object(
        "tp2_rate", _rated_plugin("tp2_rated", rate), "tp2-rate", "0.1.0")])
    record = registry.plugins[0]
    assert record.status == "failed" and "tp2_rated" not in registry.graders
    assert f"grader 'tp2_rated': rate '{rate}' is reserved" in record.error
    assert key in record.error
    assert any("plugin 'tp2_rate' (tp2-rate 0.1.0)" in w for w in registry.failure_warnings())


def test_a_plugin_rate_named_as_a_builtin_graders_fails_the_plugin_not_the_builtin():
    registry = load_registry([
        PluginSource.from_object("grounding", _rated_plugin("grounding", "grounding"),
                                 "evalctl", "0.1"),
        PluginSource.from_object("mine", _rated_plugin("mine_claims", "grounding"),
                                 "my-dist", "1"),
    ])
    builtin, mine = registry.plugins
    assert builtin.status == "ok" and "grounding" in registry.graders
    assert mine.status == "failed" and "mine_claims" not in registry.graders
    assert ("rate 'grounding' is that of evalctl's built-in grader 'grounding'"
            in mine.error and "mine_grounding" in mine.error)


def test_two_plugins_naming_one_rate_make_one_figure():
    """A rate is a figure over every check whose grader names it, whoever registered
    it: documented (docs/plugins.md), not a conflict."""
    registry = load_registry([
        PluginSource.from_object("one", _rated_plugin("one_style", "shared_style"), "d1", "1"),
        PluginSource.from_object("two", _rated_plugin("two_style", "shared_style"), "d2", "1"),
    ])
    assert all(r.status == "ok" for r in registry.plugins)
    assert {registry.graders["one_style"].rate, registry.graders["two_style"].rate} == {
        "shared_style"}


def _reporter_plugin(extension: str) -> types.ModuleType:
    @evalctl.hookimpl
    def evalctl_register_reporters(register):
        register(evalctl.ReporterSpec(name="acme", extension=extension,
                                      write=lambda run, path: path))

    return _module("acme", evalctl_register_reporters=evalctl_register_reporters)


@pytest.mark.parametrize(("extension", "owned"), [
    # accepted once, but never chosen: the json reporter always writes report-<run>.json
    ("json", "always writes report-<run>.json"),
    ("JSON", "always writes report-<run>.json"),
    ("acme.json", "finds a run's report by report-*.json"),
    # accepted once, then shown by `evalctl view` as the run's page and overwritten
    ("html", "evalctl view shows report-<run>.html"),
])
def test_a_plugin_reporter_may_not_write_a_file_the_core_owns(extension, owned):
    registry = load_registry([PluginSource.from_object("acme", _reporter_plugin(extension),
                                                       "acme-dist", "1.0")])
    record = registry.plugins[0]
    assert record.status == "failed" and "acme" not in registry.reporters
    assert f"reporter 'acme': extension '{extension.lower()}' is evalctl's own" in record.error
    assert owned in record.error and "test_registry.py:" in record.error


def test_a_reporters_extension_is_lower_case():
    """`CSV` was a format of its own beside `csv`: the same file on a case-insensitive
    file system, and never found by `--reporter` collisions."""
    registry = load_registry([PluginSource.from_object("acme", _reporter_plugin(".CSV"))])
    assert registry.reporters["acme"].extension == "csv"
    assert load_registry([PluginSource.from_object(
        "acme", _reporter_plugin("acme.html"))]).reporters["acme"].extension == "acme.html"


def test_a_plugin_that_implements_no_hook_fails_and_is_named_for_its_types():
    """An entry point naming the package, not the module holding the hooks, was listed
    `ok` providing nothing; validate then advised installing the plugin package."""
    registry = load_registry([PluginSource.from_object(
        "nohooks", _module("nohooks", __file__="/x/nohooks/__init__.py"), "nohooks-dist", "1")])
    record = registry.plugins[0]
    assert record.status == "failed"
    assert record.error.startswith("implements no evalctl hook: its entry point loads nohooks "
                                   "(/x/nohooks/__init__.py)")
    said = registry.explain_missing("grader", "nohooks_words")
    assert "plugins that failed to load and may provide it: plugin 'nohooks'" in said
    assert "install the plugin package" not in said


def test_an_unknown_name_names_an_installed_plugin_that_provides_nothing():
    @evalctl.hookimpl
    def evalctl_register_graders(register):
        pass  # registers on a condition not met here

    registry = load_registry([PluginSource.from_object(
        "empty", _module("empty", evalctl_register_graders=evalctl_register_graders),
        "empty-dist", "1")])
    assert registry.plugins[0].status == "ok"
    said = registry.explain_missing("grader", "empty_words")
    assert "installed plugins that provide nothing and may be meant to: plugin 'empty' " \
        "(empty-dist 1)" in said
    assert "install the plugin package" not in said


def test_a_failed_import_is_said_at_the_plugins_line_never_importlibs(tmp_path, monkeypatch):
    from importlib.metadata import EntryPoint

    (tmp_path / "imports_missing.py").write_text("import evalctl\nimport no_such_sdk_xyz\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    registry = load_registry([  # loaded as an installed entry point is
        PluginSource(name, EntryPoint(name, module, "evalctl").load)
        for name, module in (("imports", "imports_missing"), ("missing", "no_such_plugin_xyz"))])
    imports, missing = registry.plugins
    assert imports.error == ("import failed: ModuleNotFoundError: No module named "
                             f"'no_such_sdk_xyz' at {tmp_path / 'imports_missing.py'}:2")
    # its own module missing: no line of the plugin's, so no place (it was importlib's)
    assert missing.error == ("import failed: ModuleNotFoundError: No module named "
                             "'no_such_plugin_xyz'")


def test_a_bad_schema_is_said_at_the_plugins_line_as_a_bad_name_is():
    @evalctl.hookimpl
    def evalctl_register_graders(register):
        register(evalctl.GraderSpec(name="typo", grade=lambda c, w, r: None,
                                    params_schema={"type": "object", "properties": {
                                        "x": {"type": "strng"}}}))

    line = evalctl_register_graders.__code__.co_firstlineno + 2
    registry = load_registry([PluginSource.from_object(
        "schema", _module("schema", evalctl_register_graders=evalctl_register_graders))])
    error = registry.plugins[0].error
    assert error.startswith("grader 'typo': params_schema is not a valid JSON Schema")
    assert error.endswith(f" at {__file__}:{line}")


def test_a_keyword_only_register_is_said_at_the_plugins_hook():
    @evalctl.hookimpl
    def evalctl_register_graders(*, register):
        pass

    registry = load_registry([PluginSource.from_object(
        "kwonly", _module("kwonly", evalctl_register_graders=evalctl_register_graders))])
    assert registry.plugins[0].error == (
        "evalctl_register_graders(*, register): register is keyword-only, and evalctl passes "
        "it as an ordinary parameter: write evalctl_register_graders(register) at "
        f"{__file__}:{evalctl_register_graders.__code__.co_firstlineno}")


def test_an_async_hook_is_said_to_be_one_and_never_left_unawaited(recwarn):
    import gc

    @evalctl.hookimpl
    async def evalctl_register_graders(register):
        pass

    registry = load_registry([PluginSource.from_object(
        "asynchook", _module("asynchook", evalctl_register_graders=evalctl_register_graders))])
    gc.collect()
    assert registry.plugins[0].error.startswith(
        "evalctl_register_graders is async def: evalctl calls hooks without awaiting them; "
        "make it a plain def at ")
    assert not [w for w in recwarn if "never awaited" in str(w.message)]


def test_a_disable_typo_is_answered_with_forms_that_disable_one_plugin():
    """A `DIST:NAME` typo was answered with `NAME`, which disables both plugins of that
    name, and the installed plugins were listed "tpgrader, tpgrader"."""
    registry = load_registry([
        PluginSource.from_object("tpgrader", _grader_plugin("a_one"), "tp-dup-a", "1"),
        PluginSource.from_object("tpgrader", _grader_plugin("b_one"), "tp-dup-b", "1"),
        PluginSource.from_object("other", _grader_plugin("c_one"), "other-dist", "1")])
    installed = "installed plugins: other, tp-dup-a:tpgrader, tp-dup-b:tpgrader"
    said = registry.unknown_disabled_warning({"tp-dup-b:tpgrder"})
    assert "'tp-dup-b:tpgrder' (did you mean 'tp-dup-b:tpgrader'?)" in said
    assert said.endswith(installed)
    said = registry.unknown_disabled_warning({"tpgrder"})
    assert "'tpgrder' (did you mean 'tp-dup-a:tpgrader' or 'tp-dup-b:tpgrader'?)" in said
    assert registry.unknown_disabled_warning({"othr"}).startswith(
        "EVALCTL_DISABLE_PLUGINS names 'othr' (did you mean 'other'?)")
