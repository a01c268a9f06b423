"""The hooks a plugin implements. Each docstring is the reference for that hook.

Hooks follow the register-callback style: evalctl calls the hook with a `register`
function and the plugin calls it once per thing it provides. A plugin implements
only the hooks it needs.
"""

from __future__ import annotations

from collections.abc import Callable

import pluggy

hookspec = pluggy.HookspecMarker("evalctl")
hookimpl = pluggy.HookimplMarker("evalctl")


@hookspec
def evalctl_register_graders(register: Callable[..., None]) -> None:
    """Register check types for suites.

    Call ``register(evalctl.GraderSpec(...))`` once per grader. The spec's ``name`` is
    the ``type:`` a suite uses; its ``params_schema`` becomes part of the published
    suite schema, so editors and ``evalctl validate`` check the grader's parameters.
    ``grade(check, workspace, result)`` receives the check's mapping from the suite,
    the task's workspace as a ``pathlib.Path`` and the ``evalctl.AgentResult``, and
    returns ``evalctl.CheckResult(passed, detail)``. It may be ``async def``. A grader
    that raises counts as a failed check with the exception in its detail.
    """


@hookspec
def evalctl_register_providers(register: Callable[..., None]) -> None:
    """Register model providers, selected with ``evalctl run --provider NAME``.

    Call ``register(evalctl.ProviderSpec(name, create))``. ``create(options)`` returns
    an object with ``async def complete(request: evalctl.ModelRequest) ->
    evalctl.ModelTurn``. Import SDKs inside ``create``, not at module level, so that
    ``evalctl --help`` and ``list-plugins`` stay fast. Raise ``evalctl.ProviderError``
    from ``complete`` when the model cannot be reached after retries.
    """


@hookspec
def evalctl_register_reporters(register: Callable[..., None]) -> None:
    """Register report formats, selected with ``evalctl run --reporter NAME``.

    Call ``register(evalctl.ReporterSpec(name, write, extension))``.
    ``write(run_result, path)`` writes an ``evalctl.RunResult`` to ``path`` (use
    ``evalctl.write_atomically``) and returns the path written.
    """


@hookspec
def evalctl_register_sandboxes(register: Callable[..., None]) -> None:
    """Register sandboxes, selected with ``evalctl run --sandbox NAME``.

    Call ``register(evalctl.SandboxSpec(name, create, ...))``. ``create(request)``
    receives an ``evalctl.SandboxRequest`` and returns an ``evalctl.Sandbox``: an
    object with ``async run(command, *, timeout, env=None, stdin=None, cwd=None,
    merge_stderr=False, output_limit=None) -> evalctl.CommandResult`` and ``async
    close()``, after which no process it started may be alive. Everything the agent
    or a task's files can execute runs through it: the ``bash`` tool and graders'
    subprocesses. ``evalctl.run_process`` supervises a child process for you.
    """


@hookspec
def evalctl_register_agents(register: Callable[..., None]) -> None:
    """Register agents (the system under test), selected with ``evalctl run --agent NAME``.

    Call ``register(evalctl.AgentSpec(name, run=...))`` for an agent of your own:
    ``async run(context: evalctl.AgentContext) -> evalctl.AgentOutcome`` does one
    attempt's work, running everything through ``context.sandbox`` (a CLI agent through
    ``context.run_command``, which meters its model calls). Or register a preset of an
    installed agent: ``evalctl.AgentSpec(name, base="command", defaults={...},
    version=...)``.
    """


@hookspec
def evalctl_register_importers(register: Callable[..., None]) -> None:
    """Register benchmark formats, used with ``evalctl import NAME FILE``.

    Call ``register(evalctl.ImporterSpec(name, read, ...))``. ``read(path, options)``
    returns an ``evalctl.ImportedSuite``: the tasks it made of the file and the
    problems it found, each at its line. evalctl validates the suite against the
    installed plugins' schema and writes it; the importer writes nothing.
    """


@hookspec
def evalctl_register_executors(register: Callable[..., None]) -> None:
    """Register executors (how attempts are scheduled), selected with ``evalctl run
    --executor NAME``.

    Call ``register(evalctl.ExecutorSpec(name, create, ...))``. ``create(options)``
    returns an object whose ``execute(plan: evalctl.ExecutionPlan)`` is an async
    generator: it runs the plan's attempts (``attempt.run()`` here, or
    ``attempt.portable()`` elsewhere, through ``evalctl.run_portable``, then
    ``attempt.accept(outcome)``) and yields each ``evalctl.TaskResult`` as it finishes.
    Import heavy libraries (a cluster's client) inside ``create``, not at module level.
    """
