"""Testing helpers for plugin authors, in the spirit of pytest's `pytester`.

    from evalctl.testing import grade_check, run_suite

    def test_word_count_fails_on_a_short_file():
        outcome = grade_check({"type": "word_count", "path": "a.txt", "min": 3},
                              files={"a.txt": "two words"}, plugins=[my_plugin])
        assert not outcome.passed

Both helpers go through the same code as `evalctl run`: a real workspace, the real
sandbox, the real grading path. `plugins` are plugin objects (modules or classes with
`@evalctl.hookimpl` hooks) registered beside the installed ones, as an entry point
would register them.
"""

from __future__ import annotations

import asyncio
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from evalctl._errors import UsageError
from evalctl._plugin.registry import PluginSource, Registry, entry_point_sources, load_registry
from evalctl._plugin.types import AgentResult, ExitStatus, SandboxRequest, TokenUsage
from evalctl._report.results import CheckOutcome, RunResult

__all__ = ["example_problem", "grade_check", "registry_with", "run_suite"]


def registry_with(plugins: Sequence[Any] = (), *, installed: bool = True) -> Registry:
    """A registry of the installed plugins (unless `installed=False`) plus `plugins`,
    each registered as a plugin named after its `__name__` (or its class's). A plugin
    under test that is also installed counts once, as the one under test; plugins named
    in EVALCTL_DISABLE_PLUGINS stay out."""
    under_test = {id(plugin) for plugin in plugins}
    sources = [source for source in (entry_point_sources() if installed else [])
               if not _loads_one_of(source, under_test)]
    for plugin in plugins:
        name = getattr(plugin, "__name__", None) or type(plugin).__name__
        sources.append(PluginSource.from_object(name.rsplit(".", 1)[-1], plugin, "under-test"))
    registry = load_registry(sources)  # EVALCTL_DISABLE_PLUGINS holds here too
    failed = [p for p in registry.plugins if p.status == "failed" and p.distribution ==
              "under-test"]
    if failed:
        raise UsageError("; ".join(f"{p.label} failed: {p.error}" for p in failed))
    wrong = [f"grader '{name}': {problem}"
             for p in registry.plugins if p.distribution == "under-test"
             for name in p.provides["grader"]
             if name in registry.graders and (problem := example_problem(
                 registry.graders[name], registry))]
    if wrong:
        raise UsageError("; ".join(wrong))
    return registry


def example_problem(spec: Any, registry: Registry) -> str | None:
    """Why a grader's `example` is not a check a suite takes, or None (no example, or a
    good one): it is read as a suite reads YAML (flow style included) and validated as
    `validate` validates a check. Checked for the plugins
    under test by `registry_with` (so by `grade_check` and `run_suite`): at registration
    it would cost every command a YAML parser."""
    from evalctl._suite.yamlsource import YamlSyntaxError, parse

    if not spec.example:
        return None
    try:
        located = parse(spec.example, "example")
    except YamlSyntaxError as exc:
        return f"its example is not YAML a suite takes (line {exc.line}): {exc.message}"
    data = located.data
    if not isinstance(data, list) or len(data) != 1 or not isinstance(data[0], dict):
        return ("its example must be one check, as it is written under `checks:` "
                f"(- type: {spec.name} ...)")
    try:
        _validate_check(data[0], spec, registry)
    except UsageError as exc:
        return f"its example is not a valid check: {exc}"
    return None


def _loads_one_of(source: PluginSource, objects: set[int]) -> bool:
    try:
        return id(source.load()) in objects
    except Exception:  # a broken installed plugin is the registry's to report
        return False


def grade_check(check: Mapping[str, Any], files: Mapping[str, str | bytes] | None = None, *,
                seed: Mapping[str, str] | None = None, plugins: Sequence[Any] = (),
                final_text: str = "Done.", exit_status: str = ExitStatus.COMPLETED,
                sandbox: str = "auto", sandbox_options: Mapping[str, Any] | None = None,
                registry: Registry | None = None) -> CheckOutcome:
    """Grade one check against a workspace you describe.

    `seed` is what the task seeded (the `files:` of a suite), `files` what the agent left
    on top of it (created or changed): text (written as UTF-8), or bytes for a file that
    is not (binary, or not UTF-8); `seed` is text, as a suite's `files:` are.
    `final_text` and `exit_status` are the agent's.
    The check runs through the installed grader (or one from `plugins`) exactly as in a
    run, in a fresh sandbox (`sandbox`, with `sandbox_options`) over the workspace, and
    its outcome is returned. A grader that crashes has its traceback written to stderr.
    """
    from evalctl._run.runner import grade
    from evalctl._run.sandboxing import choose_sandbox, open_sandbox
    from evalctl._workspace import create_workspace, new_run_directory, sandbox_environment

    _check_contents(files, "files", (str, bytes), "text or bytes")
    _check_contents(seed, "seed", (str,), "text (a suite's files: are text; give bytes in "
                    "files=)")
    if not isinstance(check, Mapping) or not isinstance(check.get("type"), str):
        # it was "unknown grader 'None'"
        raise UsageError(f"the check has no type: give its grader's name as 'type', as a "
                         f"suite does (- type: word_count ...); got {check!r}")
    registry = registry or registry_with(plugins)
    spec = registry.get("grader", check["type"])
    _validate_check(check, spec, registry)
    with tempfile.TemporaryDirectory(prefix="evalctl-testing-") as scratch:
        workspace = create_workspace(new_run_directory(Path(scratch)), "task", seed or {})
        for relative, content in (files or {}).items():
            target = workspace.resolve(relative)
            target.parent.mkdir(parents=True, exist_ok=True)
            if isinstance(content, bytes):
                target.write_bytes(content)
            else:
                target.write_text(content, encoding="utf-8")
        choice = choose_sandbox(registry, _offline_provider(), flag=sandbox,
                                flag_options=dict(sandbox_options or {}),
                                suite_default=None, config_name=None, config_options={})

        async def graded() -> CheckOutcome:
            box = await open_sandbox(choice, SandboxRequest(
                workspace.root, workspace.home, workspace.tmp,
                sandbox_environment(workspace.home, workspace.tmp), options=choice.options,
                purpose="grading", attempt="task"))
            result = AgentResult(final_text, exit_status, turns=1, tool_calls=0,
                                 usage=TokenUsage(), cost=0.0, duration=0.0,
                                 files_changed=workspace.changed_files(),
                                 ledger_path=workspace.ledger_path,
                                 seed_path=workspace.seed_path, sandbox=box)
            try:
                return await grade(check, spec, workspace.root, result,
                                   ledger=workspace.ledger_path)
            finally:
                await box.close()

        outcome = asyncio.run(graded())
        _show_crashes(workspace.ledger_path)
        return outcome


def _check_contents(files: Mapping[str, Any] | None, argument: str, types: tuple[type, ...],
                    said: str) -> None:
    """A file's content of a type grade_check does not write, said by its path (bytes
    were "data must be str, not bytes")."""
    for relative, content in (files or {}).items():
        if not isinstance(content, types):
            raise TypeError(f"grade_check {argument}={{{relative!r}: ...}}: the content must "
                            f"be {said}, not {type(content).__name__}")


def _show_crashes(ledger: Path) -> None:
    """A crashed grader's traceback, written to stderr (pytest shows it with a failing
    test) before the scratch workspace and its ledger go."""
    import json
    import sys

    try:
        lines = ledger.read_text(encoding="utf-8").splitlines()
    except OSError:
        return
    for line in lines:
        event = json.loads(line)
        if event.get("event") == "grader_crashed":
            sys.stderr.write(f"evalctl.testing: {event['error']}\n{event['traceback']}")


def _validate_check(check: Mapping[str, Any], spec: Any, registry: Registry) -> None:
    """What `evalctl validate` and `run` refuse in a check, refused here too, before it
    is graded: the grader's params_schema (as the suite schema holds it: keys it does not
    name refused), and a preflight that reads only the checks (found by a newcomer: a
    check with a misspelt key was graded as if valid)."""
    import inspect

    from evalctl._plugin.registry import use_registry
    from evalctl._suite.problems import schema_problems
    from evalctl._suite.schema import check_schema
    from evalctl._suite.yamlsource import Located

    said = [problem.message.removeprefix("the suite: ") for problem in schema_problems(
        Located(dict(check)), check_schema(spec), "check", registry)]
    if not said and spec.preflight is not None and spec.validate_with_preflight and \
            not inspect.iscoroutinefunction(spec.preflight):
        try:
            with use_registry(registry):
                spec.preflight([dict(check)])
        except UsageError as exc:
            said.append(str(exc))
    if said:
        raise UsageError(f"invalid {spec.name} check (evalctl validate refuses it too): "
                         + "; ".join(said))


def run_suite(suite: str | Path, *, plugins: Sequence[Any] = (), provider: str = "scripted",
              sandbox: str = "auto", out_dir: str | Path | None = None,
              reporters: Sequence[str] = (), registry: Registry | None = None,
              **options: Any) -> RunResult:
    """Run a suite (a path, or YAML text) through a registry holding `plugins` and
    return its RunResult. `reporters` are written to `out_dir` (a temporary directory
    when not given), with the JSON report, which `evalctl run` always writes (an
    `out_dir` given alone gets the JSON report). Extra
    keyword arguments are `evalctl.run` options such as `only=("task-id",)`, `repeat=2`
    or `provider_options={...}`; one it does not take is a TypeError listing them."""
    import dataclasses

    from evalctl._report.writing import check_reporters, write_reports
    from evalctl._run.runner import RunOptions, execute, prepare_run
    from evalctl._suite.loader import load_suite

    # An unknown option was a TypeError naming RunOptions.__init__, evalctl's internals.
    allowed = sorted(f.name for f in dataclasses.fields(RunOptions) if f.init
                     and f.name not in ("provider", "out_dir", "sandbox"))
    unknown = sorted(set(options) - set(allowed))
    if unknown:
        raise TypeError(f"run_suite() got unknown option(s) {', '.join(unknown)}; besides "
                        "plugins, provider, sandbox, out_dir, reporters and registry, it "
                        f"takes: {', '.join(allowed)}")
    registry = registry or registry_with(plugins)
    # The JSON report too, as `evalctl run` always writes it (only the chosen reporters'
    # files were written, found by a newcomer), and to an out_dir given alone.
    reporters = tuple(dict.fromkeys(("json", *reporters))) \
        if reporters or out_dir is not None else ()
    if reporters:
        check_reporters(registry, list(reporters))
    with tempfile.TemporaryDirectory(prefix="evalctl-testing-") as scratch:
        path = Path(suite) if isinstance(suite, Path) or "\n" not in str(suite) else None
        if path is None:
            path = Path(scratch) / "suite.yaml"
            path.write_text(str(suite), encoding="utf-8")
        out = Path(out_dir) if out_dir is not None else Path(scratch) / "out"
        loaded = load_suite(path, registry, use_cache=False)
        prepared = prepare_run(loaded, registry, RunOptions(
            provider=provider, out_dir=out, sandbox=sandbox, **options))
        result = asyncio.run(execute(prepared))
        if reporters:
            _, failures = write_reports(result, registry, list(reporters), out)
            if failures:
                raise RuntimeError("; ".join(failures))
        return result


def _offline_provider() -> Any:
    """The provider stand-in for choosing a grading sandbox: no model runs there."""
    from evalctl._plugin.specs import ProviderSpec

    return ProviderSpec(name="grading_only", create=lambda options: None, live=False)
