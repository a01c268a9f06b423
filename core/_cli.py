"""The `evalctl` command. Imports stay inside commands so `--help` is instant."""

from __future__ import annotations

import contextlib
import os
import sys
from pathlib import Path
from typing import Any

import click

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130
ALWAYS_REPORTED = "json"
DEFAULT_REPORTERS = ("markdown",)


class _FiniteRange(click.FloatRange):
    """A FloatRange that refuses NaN and infinity: every comparison with NaN is false, so
    `--max-cost nan` passed FloatRange(min=0) and switched the budget off. Named as a
    number: click's "'abc' is not a valid float range" named its type (a newcomer's)."""

    name = "number"

    def convert(self, value: Any, param: click.Parameter | None,
                ctx: click.Context | None) -> Any:
        import math

        number = super().convert(value, param, ctx)
        if not math.isfinite(number):
            self.fail(f"{value!r} is not a finite number.", param, ctx)
        return number


class _Fraction(_FiniteRange):
    """A number from 0 to 1 that says, for one over 1, what a fraction is: `--max-drop 5`
    meant 5 points and was told only "not in the range 0<=x<=1" (found by a newcomer)."""

    def __init__(self) -> None:
        super().__init__(0, 1)

    def convert(self, value: Any, param: click.Parameter | None,
                ctx: click.Context | None) -> Any:
        try:
            return super().convert(value, param, ctx)
        except click.BadParameter as exc:
            number = _number_or_none(value)
            if number is not None and 1 < number <= 100:
                self.fail(f"{value} is more than 1: it is a fraction of the tasks (0.05 is "
                          f"5 points): write {number / 100:g} for {number:g} points", param,
                          ctx)
            raise exc


def _number_or_none(value: Any) -> float | None:
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


class _Whole(click.IntRange):
    """An IntRange that says "whole number": click's own message, "'x' is not a valid
    integer range", names its type, not what to write (found by a newcomer)."""

    name = "whole number"


# More attempts of one task than anyone means: --repeat 10**23 ran for ever making them.
MOST_REPEATS = 10_000


class _Group(click.Group):
    """Turns evalctl's own errors into a message and an exit code, never a traceback."""

    def make_context(self, info_name: str | None, args: list[str],
                     parent: click.Context | None = None, **extra: Any) -> click.Context:
        try:
            return super().make_context(info_name, args, parent, **extra)
        except click.UsageError as exc:  # evalctl's own options (`evalctl --bogus`)
            _show_usage_error(self, exc)
            raise click.exceptions.Exit(exc.exit_code) from None

    def invoke(self, ctx: click.Context) -> Any:
        from evalctl._errors import EvalctlError, SuiteError

        saved = _signal_handlers()
        try:
            return super().invoke(ctx)
        except click.UsageError as exc:  # a command's arguments, as click parsed them
            _show_usage_error(self, exc)
            ctx.exit(exc.exit_code)
        except SuiteError as exc:  # its lines already say `file:line: error: ...`
            click.echo(str(exc), err=True)
            ctx.exit(exc.exit_code)
        except EvalctlError as exc:
            click.echo(f"error: {exc}", err=True)
            ctx.exit(exc.exit_code)
        except KeyboardInterrupt:  # a third Ctrl-C while the first is wound down
            # Here, not in main(): click's own handler would say "Aborted!" and exit 1,
            # which means "a task failed".
            run_dir = (ctx.obj or {}).get("run_dir")
            click.echo("interrupted" + (
                f": the journal holds every attempt that finished; evalctl report {run_dir} "
                f"writes their reports, evalctl run --resume {run_dir} continues the run"
                if run_dir is not None else ""), err=True)
            _quit_now(saved)
            ctx.exit(EXIT_INTERRUPTED)
        finally:  # the outcome is decided
            _settle_signals(saved)


def _quit_now(saved: tuple[Any, Any]) -> None:
    """Quit at once with exit 130, as a third Ctrl-C asks, when evalctl is the process:
    the exit handlers run (the pool's threads, scratch and cgroups are cleaned up), and
    the interpreter is not finalized. Finalized after a Ctrl-C that landed while the
    reports were written, it sometimes ended by SIGINT (-2) instead, with no traceback
    and SIGINT ignored by then (found by the test of the third Ctrl-C, about one time in
    six). Called in another program (CliRunner, a test), it does nothing."""
    if not _SETTLE_ON_EXIT:
        return
    import atexit

    _settle_signals(saved)
    with contextlib.suppress(Exception):
        atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(EXIT_INTERRUPTED)


def _show_usage_error(group: click.Command, exc: click.UsageError) -> None:
    """click's own report of a bad command line, with evalctl's lower-case `error:` (as
    every other evalctl error says it), and a hint when an option of `evalctl` itself
    was given after the command (`evalctl run --strict-plugins`)."""
    if type(exc).show is not click.UsageError.show:  # its own way (no arguments: the help)
        exc.show()
        return
    message = exc.format_message()
    if isinstance(exc, click.NoSuchOption):
        own = {name for param in group.params for name in param.opts}
        if exc.option_name in own:
            message += (f"\n{exc.option_name} is an option of evalctl itself: put it before "
                        f"the command (evalctl {exc.option_name} "
                        f"{exc.ctx.info_name if exc.ctx else 'COMMAND'} ...)")
    if exc.ctx is not None:
        hint = ""
        if exc.ctx.command.get_help_option(exc.ctx) is not None:
            hint = f"Try '{exc.ctx.command_path} {exc.ctx.help_option_names[0]}' for help.\n"
        click.echo(f"{exc.ctx.get_usage()}\n{hint}", err=True, color=exc.ctx.color)
    click.echo(f"error: {message}", err=True)


class _Stops:
    """The Ctrl-Cs and SIGTERMs a command got, counted over the whole of it: the run and
    the writing of its reports after. The first asks the run to stop (or, once it has
    ended, lets the reports finish, and the exit is then 130); the next Ctrl-C says what
    is happening and that another quits at once; the one after that quits at once. A
    later SIGTERM changes nothing. Found by a tester: one Ctrl-C while a finished run
    wrote its reports lost them, and one SIGTERM then killed evalctl outright."""

    def __init__(self, run_dir: Path | None = None) -> None:
        self.run_dir = run_dir
        self.stopped = False  # a first Ctrl-C or SIGTERM came
        self.late = False  # ... after the run had ended: while its reports were written
        self.warned = False  # told that another Ctrl-C quits at once
        self.cancel: Any = None  # while the run goes: stops it

    def _later(self) -> str:
        return f" (evalctl report {self.run_dir} writes them later)" \
            if self.run_dir is not None else ""

    @staticmethod
    def _say(message: str) -> None:
        # From a signal handler: a write to stderr it interrupted must not be lost to it.
        with contextlib.suppress(RuntimeError, OSError, ValueError):
            click.echo(message, err=True)

    def terminate(self) -> None:
        """SIGTERM, and a first Ctrl-C."""
        if self.stopped:  # the next ones: the run already winds down
            return
        self.stopped = True
        if self.cancel is not None:
            self.cancel()
            return
        self.late = self.warned = True
        self._say("\ninterrupted: the run has finished and its reports are being written; "
                  "press Ctrl-C again to quit at once, without them" + self._later())

    def interrupt(self) -> None:
        """Ctrl-C: the first stops, the second says so, the third quits at once."""
        if not self.stopped:
            self.terminate()
        elif not self.warned:
            self.warned = True
            self._say("\nstopping: " + ("the running attempts are being cleaned up and "
                                         "the reports written" if self.cancel is not None
                                         else "the reports are being written") +
                      "; press Ctrl-C again to quit at once, without them" + self._later())
        else:
            raise KeyboardInterrupt


def _signal_handlers() -> tuple[Any, Any]:
    import signal

    return signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)


def _settle_signals(saved: tuple[Any, Any]) -> None:
    """A command's outcome is decided: in evalctl's own process, Ctrl-C and SIGTERM are
    ignored from here on, so one that lands while the interpreter shuts down neither
    prints "Exception ignored in threading._shutdown ... KeyboardInterrupt" nor changes
    the exit status; what is left (the tools' pool, scratch) is bounded. Called in
    another program (CliRunner, a test), its own handlers are put back."""
    import signal

    wanted = (signal.SIG_IGN, signal.SIG_IGN) if _SETTLE_ON_EXIT else saved
    with contextlib.suppress(ValueError, TypeError, OSError):  # not the main thread
        for number, handler in zip((signal.SIGINT, signal.SIGTERM), wanted, strict=True):
            if handler is not None:
                signal.signal(number, handler)


# main() sets it: evalctl is the process, not a library some other program called.
_SETTLE_ON_EXIT = False


def _interruptible(coroutine: Any, stops: _Stops | None = None) -> Any:
    """asyncio.run(coroutine), with SIGTERM (what `timeout`, CI runners and `kill`
    send) taken as Ctrl-C's first press: the run's task is cancelled, so the finished
    attempts are reported, the rest marked not run, and children and scratch removed.
    Its default action killed evalctl outright. Set on the loop itself, so it holds
    where SIGINT is ignored (a job started in the background); a second SIGTERM, while
    the run winds down, changes nothing.

    A second Ctrl-C while the run winds down says what is happening and that a third
    quits at once; asyncio's own handler quit on the second, and a newcomer who pressed
    twice got no reports and no word of how to continue. `stops` counts them; when the
    run has ended (normally or not) it goes on counting, by the same rules, while the
    command writes its reports (see _Stops), until _settle_signals."""
    import asyncio
    import signal

    stops = stops if stops is not None else _Stops()
    # asyncio.run puts its own handler in place of Python's: asked before it does.
    own_sigint = signal.getsignal(signal.SIGINT) is signal.default_int_handler

    def after_the_run() -> None:
        """From the moment the run's handlers go: the reports are written under these."""
        stops.cancel = None
        with contextlib.suppress(ValueError, OSError):  # not the main thread
            signal.signal(signal.SIGTERM, lambda *_: stops.terminate())
            if own_sigint:  # not where SIGINT is ignored (a job in the background)
                signal.signal(signal.SIGINT, lambda *_: stops.interrupt())

    async def main() -> Any:
        loop = asyncio.get_running_loop()
        task = asyncio.current_task()
        assert task is not None
        stops.cancel = task.cancel
        # Not the main thread, or no signals here: as before.
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
            loop.add_signal_handler(signal.SIGTERM, stops.terminate)
            if own_sigint:  # not where SIGINT is ignored (a job in the background)
                loop.add_signal_handler(signal.SIGINT, stops.interrupt)
        try:
            return await coroutine
        finally:
            with contextlib.suppress(Exception):
                loop.remove_signal_handler(signal.SIGTERM)
            with contextlib.suppress(Exception):
                loop.remove_signal_handler(signal.SIGINT)
            after_the_run()

    try:
        return asyncio.run(main())
    except asyncio.CancelledError:
        if not stops.stopped:
            raise
        raise KeyboardInterrupt from None  # stopped before it could report: "interrupted"
    finally:
        stops.cancel = None


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="evalctl")
@click.option("--strict-plugins", is_flag=True, envvar="EVALCTL_STRICT_PLUGINS",
              help="Any plugin that fails to load, or a name two plugins register, is a hard "
                   "error (also EVALCTL_STRICT_PLUGINS=1).")
@click.pass_context
def cli(ctx: click.Context, strict_plugins: bool) -> None:
    """Run AI agents on task suites in real workspaces and grade what they left behind.

    \b
    Quick start (offline, no API key):
      evalctl run harness         a built-in suite (evalctl suites lists them)
      evalctl init my-evals       a starter suite of your own, and what to run next
    """
    ctx.obj = {"strict": strict_plugins}


def _config(registry: Any = None, unused: Any = ()) -> Any:
    """The team defaults (evalctl.toml or [tool.evalctl]), their warnings said; with a
    registry, the plugins they name checked too (but those of the keys in `unused`)."""
    from evalctl._run.config import load_config

    config = load_config(registry=registry, unused=unused)
    for warning in config.warnings:
        click.echo(f"warning: {warning}", err=True)
    return config


def _registry(ctx: click.Context, strict: bool | None = None, warn: bool = True):
    """The installed plugins' registry. Each plugin that failed to load is said once, a
    line on standard error, by every command but list-plugins (whose table says it): run,
    validate, schema and init said nothing, and init wrote a schema without the failed
    plugin's graders (found by a newcomer)."""
    from evalctl._plugin.registry import get_registry

    registry = get_registry(strict=ctx.obj["strict"] if strict is None else strict)
    if warn and not ctx.obj.get("warned_failed"):
        ctx.obj["warned_failed"] = True
        for line in registry.failure_warnings():
            click.echo(f"warning: {line}", err=True)
    return registry


@cli.command("list-plugins")
@click.option("--json", "as_json", is_flag=True, help="Print the records as JSON.")
@click.pass_context
def list_plugins(ctx: click.Context, as_json: bool) -> None:
    """Show installed plugins, what they provide, and any that failed."""
    registry = _registry(ctx, strict=False, warn=False)
    records = [p.to_dict() for p in registry.plugins]
    if as_json:
        import json

        click.echo(json.dumps(records, indent=2))
    else:
        from rich.console import Console
        from rich.table import Table

        table = Table(title="evalctl plugins")
        for column in ("plugin", "distribution", "version", "status", "provides"):
            table.add_column(column)
        for record in records:
            provides = "; ".join(f"{kind}: {', '.join(record[kind])}"
                                 for kind in ("graders", "providers", "reporters", "sandboxes",
                                              "agents", "importers", "executors")
                                 if record[kind])
            status = record["status"]
            style = {"ok": "green", "failed": "red", "conflict": "red"}.get(status, "yellow")
            table.add_row(record["plugin"], record["distribution"] or "-",
                          record["version"] or "-", f"[{style}]{status}[/]", provides or "-")
        console = Console(width=None if sys.stdout.isatty() else 120)
        console.print(table)
        for record in records:
            if record["error"]:
                console.print(f"[red]{record['plugin']}[/]: {record['error']}", markup=True,
                              highlight=False)
            for conflict in record["conflicts"]:
                console.print(f"[red]{record['plugin']}[/]: {conflict}", highlight=False)
    from evalctl._plugin.registry import lookalike_groups

    for hint in lookalike_groups():  # on stderr: --json's output stays the records
        click.echo(f"hint: {hint}", err=True)
    if ctx.obj["strict"] and registry.problems():
        ctx.exit(EXIT_FAILED)


@cli.command()
@click.option("--json", "as_json", is_flag=True, help="Print the findings as JSON.")
@click.pass_context
def doctor(ctx: click.Context, as_json: bool) -> None:
    """Say which sandboxes can run here, what each isolates, and which per-task limits
    this machine actually enforces."""
    from evalctl._run.sandboxing import describe_sandboxes

    findings = describe_sandboxes(_registry(ctx, strict=False))
    if as_json:
        import json

        click.echo(json.dumps(findings, indent=2))
        return
    for finding in findings:
        mark = "auto's choice" if finding["auto"] else \
            ("available" if finding["available"] else "unavailable")
        click.echo(f"{finding['name']} ({mark})")
        if finding["reason"]:
            click.echo(f"  cannot run: {finding['reason']}")
        click.echo(f"  isolates: {finding['isolation'] or 'not described'}")
        for limit, how in finding["limits"].items():
            click.echo(f"  limit {limit}: {how}")
    if not any(f["available"] for f in findings):
        ctx.exit(EXIT_FAILED)


@cli.command()
@click.option("--builtins", is_flag=True,
              help="Only the graders that ship with evalctl (what schemas/ publishes).")
@click.option("--output", "-o", type=click.Path(dir_okay=False, path_type=Path),
              help="Write to this file instead of standard output (its directory must "
                   "exist).")
@click.pass_context
def schema(ctx: click.Context, builtins: bool, output: Path | None) -> None:
    """Print the suite JSON Schema for the installed graders."""
    from evalctl._files import write_atomically
    from evalctl._suite.schema import registry_schema, schema_text

    if output:
        _output_problem(output, "--output")
    text = schema_text(registry_schema(_registry(ctx), builtins_only=builtins))
    if output:
        write_atomically(output, text)
    else:
        click.echo(text, nl=False)


@cli.command()
@click.argument("directory", default=".", type=click.Path(file_okay=False, path_type=Path))
@click.option("--force", is_flag=True, help="Overwrite the suite and schema if they exist.")
@click.pass_context
def init(ctx: click.Context, directory: Path, force: bool) -> None:
    """Write a starter suite into DIRECTORY (default: here): suite.yaml, with one task
    that passes and one that shows a failure, and suite.schema.json for your editor."""
    import shlex

    from evalctl._suite.starter import FAILING_TASK, write_starter

    written = write_starter(directory, _registry(ctx), force=force)
    suite = shlex.quote(str(written.suite))
    click.echo(f"wrote {written.suite}: two tasks that run offline, one passing and one "
               "showing a failure")
    click.echo(f"wrote {written.schema}: the schema of the installed plugins, for your "
               "editor (the suite's first line points at it)")
    click.echo("\nnext:")
    evalctl = _invoked_as()
    hints = ((f"{evalctl} validate {suite}", "every problem, at file:line"),
             (f"{evalctl} run {suite}", "1 of 2 passes; the table says which checks failed"),
             (f"${{EDITOR:-vi}} {suite}", f"uncomment the script of {FAILING_TASK}, run again: "
                                          "2 of 2 pass"))
    width = max(len(command) for command, _ in hints)
    for command, why in hints:
        click.echo(f"  {command:<{width}}  # {why}")


def _invoked_as() -> str:
    """The command that runs this evalctl, for hints to copy: `evalctl` when that name
    on PATH is this one, else the path it was started by (`.venv/bin/evalctl`, which a
    bare `evalctl` would not find before the venv is activated: found by a newcomer)."""
    import os
    import shlex
    import shutil

    started = sys.argv[0] if sys.argv else ""
    if os.path.basename(started) == "evalctl":
        on_path = shutil.which("evalctl")
        if on_path and os.path.realpath(on_path) == os.path.realpath(started):
            return "evalctl"
        return shlex.quote(started)
    here = os.path.join(os.path.dirname(os.path.abspath(__file__)), "__main__.py")
    if started and os.path.realpath(started) == os.path.realpath(here):  # python -m evalctl
        return f"{shlex.quote(sys.executable)} -m evalctl"
    return "evalctl"


@cli.command("suites")
@click.option("--json", "as_json", is_flag=True, help="Print them as JSON.")
def list_suites(as_json: bool) -> None:
    """List the built-in suites: what each is for, and how many tasks it has."""
    from evalctl._suite.builtin import builtin_suites

    suites = builtin_suites()
    if as_json:
        import json

        click.echo(json.dumps([s.to_dict() for s in suites], indent=2))
        return
    from rich.console import Console
    from rich.table import Table

    table = Table(title="built-in suites")
    for column, justify in (("suite", "left"), ("tasks", "right"), ("scripted", "right"),
                            ("what it is for", "left")):
        table.add_column(column, justify=justify)  # type: ignore[arg-type]
    for suite in suites:
        table.add_row(suite.name, str(suite.tasks), str(suite.scripted), suite.description)
    console = Console(width=None if sys.stdout.isatty() else 120)
    console.print(table)
    console.print("Scripted tasks run offline, with no API key. Run a suite by its name, "
                  "e.g. evalctl run harness (a file of that name here is run instead).",
                  highlight=False)


@cli.command()
@click.argument("suites", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.pass_context
def validate(ctx: click.Context, suites: tuple[Path, ...]) -> None:
    """Check suites (files, or built-in names) against the schema and the suite rules;
    report every problem."""
    from evalctl._errors import SuiteError
    from evalctl._suite.builtin import resolve_suite
    from evalctl._suite.loader import validate_suite

    registry = _registry(ctx)
    errors = warnings = 0
    for argument in suites:
        try:
            path = resolve_suite(argument)
        except SuiteError as exc:
            problems = exc.problems
        else:
            problems = validate_suite(path, registry)
        for problem in problems:
            click.echo(str(problem))
        errors += sum(1 for p in problems if p.severity == "error")
        warnings += sum(1 for p in problems if p.severity == "warning")
    noun = "suite" if len(suites) == 1 else "suites"
    click.echo(f"{len(suites)} {noun}: {errors} error(s), {warnings} warning(s)")
    ctx.exit(EXIT_USAGE if errors else EXIT_OK)


@cli.command("import")
@click.argument("importer", metavar="FORMAT")
@click.argument("file", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--output", "-o", type=click.Path(dir_okay=False, path_type=Path),
              help="Write the suite to this file (default: standard output; its directory "
                   "must exist). Local paths in it are relative to this file.")
@click.option("--option", "options", multiple=True, metavar="KEY=VALUE",
              help="An importer setting, e.g. repo_url=/mirrors/{repo} (repeatable).")
@click.option("--force", is_flag=True, help="Overwrite OUTPUT if it exists.")
@click.pass_context
def import_(ctx: click.Context, importer: str, file: Path, output: Path | None,
            options: tuple[str, ...], force: bool) -> None:
    """Turn a benchmark's file into a suite: FORMAT is an importer (swebench: SWE-bench
    instances, one JSON object a line). The suite is validated before it is written;
    problems are reported at FILE:LINE, exit 2, and nothing is written.

    \b
    Example:
      evalctl import swebench instances.jsonl -o swe.yaml
      evalctl run swe.yaml --provider anthropic
    """
    from evalctl._errors import UsageError
    from evalctl._files import write_atomically
    from evalctl._suite.importing import import_suite

    if output is not None and output.exists() and not force:
        raise UsageError(f"{output} exists; pass --force to overwrite it")
    if output is not None:
        _output_problem(output, "--output")
    result = import_suite(_registry(ctx), importer, file, output,
                          _parse_options(options, "--option"))
    for warning in result.warnings:
        click.echo(str(warning), err=True)
    if output is None:
        click.echo(result.text, nl=False)
        return
    write_atomically(output, result.text)
    click.echo(f"wrote {output}: {result.tasks} task(s), validated; next: evalctl run {output}",
               err=True)


def _parse_options(pairs: tuple[str, ...], flag: str = "--provider-option") -> dict[str, str]:
    from evalctl._errors import UsageError

    options = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise UsageError(f"{flag} takes KEY=VALUE, got {pair!r}")
        options[key.strip()] = value
    return options


@cli.command()
@click.argument("suite", type=click.Path(path_type=Path), required=False)
@click.option("--resume", "resume_dir", type=click.Path(file_okay=False, path_type=Path),
              metavar="RUN_DIR",
              help="Continue a run that stopped (killed, interrupted, out of budget): run "
                   "only the attempts its journal has no result for. Suite and options come "
                   "from the journal.")
@click.option("--retry-errors", is_flag=True,
              help="With --resume: also rerun the attempts that ended in an error.")
@click.option("--max-cost", type=_FiniteRange(min=0), metavar="USD",
              help="Budget for the whole run (agent and judges): once spent, no new attempt "
                   "starts; the rest are reported not run and --resume continues them.")
@click.option("--max-tokens", type=_Whole(min=0), metavar="N",
              help="Token budget for the whole run, like --max-cost.")
@click.option("--only", multiple=True, metavar="ID", help="Run only this task (repeatable).")
@click.option("--tag", "tags", multiple=True, metavar="T",
              help="Run tasks with this tag (repeatable: tasks with any of the tags; with "
                   "--only, a task must be named and tagged).")
@click.option("--scripted", is_flag=True, help="Use the scripted provider (the default).")
@click.option("--provider", metavar="NAME", help="The model provider, e.g. anthropic.")
@click.option("--model", metavar="M", help="The model the provider should use.")
@click.option("--provider-option", "provider_options", multiple=True, metavar="KEY=VALUE",
              help="A provider setting, e.g. max_tokens=4096 (repeatable).")
@click.option("--sandbox", metavar="NAME",
              help="Where commands run: auto (default: bwrap where it is available, else "
                   "local), bwrap (bubblewrap: only the workspace writable, no network, no "
                   "secrets, nothing outlives the task) or local (no isolation: commands run "
                   "as you; refused for a live provider unless named here).")
@click.option("--sandbox-option", "sandbox_options", multiple=True, metavar="KEY=VALUE",
              help="A sandbox setting, e.g. memory_mb=2048 (repeatable; see evalctl doctor).")
@click.option("--agent", metavar="NAME",
              help="The system under test: evalctl (the built-in loop, default), command (any "
                   "CLI agent in the sandbox, metered by evalctl's model proxy), claude-code, "
                   "or a preset (docs/agents.md).")
@click.option("--agent-option", "agent_options", multiple=True, metavar="KEY=VALUE",
              help="An agent setting, e.g. 'argv=my-agent {prompt}' or version=1.2 "
                   "(repeatable).")
@click.option("--concurrency", type=_Whole(min=1), metavar="N",
              help="Tasks run at once (default: the provider's, 8 scripted, 4 anthropic).")
@click.option("--executor", metavar="NAME",
              help="How attempts are scheduled: local (default: here, up to --concurrency "
                   "at once) or an installed executor, e.g. ray (evalctl-ray: on a Ray "
                   "cluster's workers).")
@click.option("--executor-option", "executor_options", multiple=True, metavar="KEY=VALUE",
              help="An executor setting, e.g. address=auto for ray (repeatable; "
                   "evalctl list-plugins names the executors).")
@click.option("--report", type=click.Path(dir_okay=False, path_type=Path),
              help="Also write the JSON report to this path.")
@click.option("--reporter", "reporters", multiple=True, metavar="NAME",
              help="Another report format, e.g. junit (repeatable; default markdown). The "
                   "JSON report is always written: compare and --baseline read it.")
@click.option("--out", type=click.Path(file_okay=False, path_type=Path),
              help="Directory for workspaces and reports (default eval_reports).")
@click.option("--repeat", type=_Whole(1, MOST_REPEATS), metavar="K", default=1,
              show_default=True,
              help="Run each task K times, each in its own workspace (pass@k, pass^k).")
@click.option("--baseline", type=click.Path(path_type=Path),
              help="A run to gate against (a JSON report or a run directory, as compare "
                   "takes): exit 1 only on a regression.")
@click.option("--max-drop", type=_Fraction(), default=0.0, show_default=True,
              help="With --baseline: the completion drop tolerated (0.05 = 5 points).")
@click.option("--fail-on-flip/--allow-flips", default=True, show_default=True,
              help="With --baseline: whether a task that passed and now fails is a "
                   "regression by itself.")
@click.pass_context
def run(ctx: click.Context, suite: Path | None, resume_dir: Path | None, retry_errors: bool,
        max_cost: float | None, max_tokens: int | None, only: tuple[str, ...],
        tags: tuple[str, ...], scripted: bool, provider: str | None, model: str | None,
        provider_options: tuple[str, ...], sandbox: str | None,
        sandbox_options: tuple[str, ...], agent: str | None, agent_options: tuple[str, ...],
        concurrency: int | None, executor: str | None, executor_options: tuple[str, ...],
        report: Path | None,
        reporters: tuple[str, ...], out: Path | None, repeat: int, baseline: Path | None,
        max_drop: float, fail_on_flip: bool) -> None:
    """Run a suite and grade it.

    SUITE is a file, or the name of a built-in suite (evalctl suites) when no file of
    that name exists. Every finished attempt is journaled in the run directory as it
    finishes; a run that stopped (killed, interrupted, out of budget) continues with
    `evalctl run --resume RUN_DIR`.

    \b
    Exit status:
      0    every task passed
      1    a task failed or errored, the budget left some not run, or a reporter failed
      2    bad input or usage, found before any task starts
      130  interrupted (Ctrl-C, SIGTERM): reports cover the finished tasks (one
           while the reports are written lets them finish; press again to quit at once)
    With --baseline, 0 and 1 say instead whether the run regressed against it.
    """
    from evalctl._errors import ProviderSetupError, UsageError
    from evalctl._report.compare import compare_reports, gate
    from evalctl._report.console import RunView
    from evalctl._report.journal import attempts_to_run, check_resumable, read_journal
    from evalctl._report.writing import check_reporters, write_reports
    from evalctl._run.runner import (
        RunOptions,
        execute,
        naming_missing_plugins,
        prepare_run,
        resumed_options,
        select_tasks,
    )
    from evalctl._suite.builtin import resolve_suite
    from evalctl._suite.loader import load_suite

    if scripted and provider and provider != "scripted":
        raise UsageError("--scripted and --provider are alternatives; give one")
    if retry_errors and resume_dir is None:
        raise UsageError("--retry-errors works with --resume RUN_DIR")
    if baseline is None:  # a gate without its baseline would be a green gate checking nothing
        loose = [flag for name, flag in (
            ("max_drop", "--max-drop"),
            ("fail_on_flip", "--fail-on-flip" if fail_on_flip else "--allow-flips"))
            if _given(ctx, name, ctx.params.get(name))]
        if loose:
            raise click.UsageError(
                f"{' and '.join(loose)} only work{'s' if len(loose) == 1 else ''} with "
                "--baseline RUN (they set how the run is gated against a baseline): add "
                "--baseline, or leave them out", ctx)
    baseline_report = None
    if baseline is not None and report is not None and _same_file(report, baseline):
        # Found by a newcomer: the regressing run replaced its baseline, and the next run,
        # gated against the regression itself, said "No regression" and exited 0.
        raise UsageError(f"--report {report} is the --baseline: the run would overwrite the "
                         "report it is gated against, and a regression would become the next "
                         "run's baseline. Write the report elsewhere, and copy it over the "
                         "baseline once the gate passes")
    if baseline is not None:  # read as compare reads it: a run directory works too
        stored_baseline = _read_run_saying_which(baseline, "--baseline ")
        for problem in stored_baseline.problems:
            click.echo(f"warning: --baseline {baseline}: {problem}", err=True)
        baseline_report = stored_baseline.run
    registry = _registry(ctx)
    # A resume takes its provider, sandbox and agent from the journal, not the config.
    config = _config(registry, unused=[key for key, chosen in (
        ("provider", scripted or provider or resume_dir), ("sandbox", sandbox or resume_dir),
        ("agent", agent or resume_dir), ("executor", executor), ("reporters", reporters))
        if chosen])
    parsed_provider_options = _parse_options(provider_options)
    parsed_sandbox_options = _parse_options(sandbox_options, "--sandbox-option")
    parsed_agent_options = _parse_options(agent_options, "--agent-option")
    # The executor decides where attempts run, not what they mean: a resume may use another.
    scheduling = {"executor": executor,
                  "executor_options": _parse_options(executor_options, "--executor-option"),
                  "config_executor": config.get("executor"),
                  "config_executor_options": config.get("executor_options", {})}
    if resume_dir is not None:
        _a_directory(resume_dir, "--resume")
        # The journal holds the run's suite and options; flags may only repeat them.
        contents = read_journal(resume_dir)
        check_resumable(resume_dir)  # not run by another, nor read-only: said up front
        for problem in contents.problems:
            click.echo(f"warning: {problem}", err=True)
        given = {name: value for name, value in (
            ("provider", "scripted" if scripted else provider), ("model", model),
            ("provider_options", parsed_provider_options), ("only", list(only)),
            ("tags", list(tags)), ("repeat", repeat), ("sandbox", sandbox),
            ("sandbox_options", parsed_sandbox_options), ("agent", agent),
            ("agent_options", parsed_agent_options), ("max_cost", max_cost),
            ("max_tokens", max_tokens), ("retry_errors", retry_errors))
            if _given(ctx, name, value)}
        # --concurrency given now, else the run's own (journaled), else the config's.
        configured = config.get("concurrency")
        if concurrency is None and contents.concurrency is not None and configured \
                and configured != contents.concurrency:
            click.echo(f"note: resuming at the run's concurrency, {contents.concurrency} "
                       f"(evalctl.toml says {configured}; --concurrency {configured} to use "
                       "it)", err=True)
        options = resumed_options(contents, given, concurrency or contents.concurrency
                                  or configured, out or resume_dir.resolve().parent,
                                  scheduling)
        recorded = contents.header.get("suite", {})
        suite_path = resolve_suite(suite) if suite else \
            Path(recorded.get("absolute_path") or recorded.get("path", ""))
        if not suite and not suite_path.is_file() and not suite_path.is_symlink():
            # Found by a newcomer: a suite moved since read only "No such file or
            # directory", and said nothing of how to give it at its new place.
            from evalctl._errors import Problem, SuiteError

            raise SuiteError([Problem(str(suite_path), 0, (
                "cannot read suite: No such file or directory" if not suite_path.exists()
                else "cannot read suite: it is not a file") + ": the run's suite is no longer "
                f"there. If it moved, give its new path: evalctl run NEW_PATH --resume "
                f"{resume_dir} (the suite must be unchanged)")])
    elif suite is None:
        raise UsageError("give a SUITE to run, or --resume RUN_DIR to continue a run")
    else:
        _note_unused_agent_options(config, agent)
        suite_path = resolve_suite(suite)
        configured = config.get("provider", "scripted")
        chosen = "scripted" if scripted else provider or configured
        # The config's model and options are for the config's provider: `--scripted` in a
        # team that runs anthropic must not hand the scripted provider a model.
        from_config = chosen == configured
        options = RunOptions(
            provider=chosen,
            model=model or (config.get("model") if from_config else None),
            provider_options={**(config.get("provider_options", {}) if from_config else {}),
                              **parsed_provider_options},
            concurrency=concurrency or config.get("concurrency"),
            out_dir=out or Path(config.get("out", "eval_reports")),
            only=only, tags=tags, repeat=repeat,
            sandbox=sandbox, sandbox_options=parsed_sandbox_options,
            config_sandbox=config.get("sandbox"),
            config_sandbox_options=config.get("sandbox_options", {}),
            config_sandbox_origin=config.where("sandbox"),
            agent=agent, agent_options=parsed_agent_options,
            config_agent=config.get("agent"),
            config_agent_options=config.get("agent_options", {}),
            config_agents=config.get("agents", {}),
            max_cost=max_cost, max_tokens=max_tokens, **scheduling,
        )
    # A resume needs what the run was made with: a plugin since uninstalled is named.
    def missing_named() -> contextlib.AbstractContextManager[None]:
        if options.resume is None:
            return contextlib.nullcontext()
        return naming_missing_plugins(options.resume.header.get("plugins"), registry,
                                      str(options.resume.run_dir))

    with missing_named():
        loaded = load_suite(suite_path, registry)
    for warning in loaded.warnings:
        click.echo(str(warning), err=True)
    _report_path_checked(report, suite_path)
    # The JSON report is always written: it is the run's record, and what compare and
    # --baseline read. --reporter (or the config's reporters) choose the others.
    reporter_names = tuple(dict.fromkeys(
        (ALWAYS_REPORTED, *(reporters or config.get("reporters", DEFAULT_REPORTERS)))))
    check_reporters(registry, reporter_names)
    if baseline_report is not None:
        _shares_a_task(baseline, baseline_report,
                       select_tasks(loaded, options.only, options.tags))
    try:
        with missing_named():
            prepared = prepare_run(loaded, registry, options)
    except ProviderSetupError as exc:
        offline = "" if not registry.get("provider", options.provider).live else \
            "; to run offline without a model, use --scripted"
        raise UsageError(f"{exc}{offline}") from None
    _warn_tasks_without_turns(registry, options.provider, prepared.tasks,
                              prepared.agent)
    if not prepared.sandbox.spec.isolated:
        click.echo(f"warning: sandbox '{prepared.sandbox.spec.name}' does not isolate the agent: "
                   f"{prepared.sandbox.spec.isolation}", err=True)

    to_run = len(prepared.tasks) * options.repeat
    if options.resume is not None:
        to_run = len(attempts_to_run(options.resume, options.retry_errors))
        # The attempts in error are kept unless --retry-errors: say so, and how to rerun
        # them (a newcomer saw "0 of 1 attempt(s) to run" and no hint).
        left_in_error = len(attempts_to_run(options.resume, True)) - to_run
        errors_hint = (f" ({left_in_error} in error, kept as journaled: add --retry-errors "
                       "to run them again)") if left_in_error else ""
        # Of a finished run, said in words (found by an outside review: "0 of 1
        # attempt(s) to run" alone did not say whether anything was wrong).
        complete = "" if to_run else (": the run is already complete (every attempt has "
                                      "a result): its results follow, and its reports are "
                                      "written again")
        click.echo(f"resuming {prepared.run_dir}: {to_run} of "
                   f"{len(prepared.tasks) * options.repeat} attempt(s) to run{errors_hint}"
                   f"{complete}", err=True)

    view = RunView(to_run, repeat=options.repeat)
    with view:
        ctx.obj["run_dir"] = prepared.run_dir  # for what a third Ctrl-C says
        stops = _Stops(prepared.run_dir)
        result = _interruptible(execute(prepared, progress=view.update), stops)
    view.print_summary(result)
    for task in result.tasks:
        for problem in task.record_problems:
            click.echo(f"warning: {result.label(task)}: {problem}", err=True)
    if prepared.journal_failure:
        click.echo(f"warning: the journal stopped being written ({prepared.journal_failure}); "
                   "these reports are complete, but a resume of this run would rerun the "
                   "attempts it is missing", err=True)
    if baseline_report is not None:  # before writing: reporters show the gate's verdict too
        result.comparison = compare_reports(baseline_report, result, registry=registry)
        result.comparison.gate_reasons = gate(result.comparison, max_drop, fail_on_flip)
    written, failures = write_reports(result, registry, reporter_names, options.out_dir, report)
    if options.resume is not None:
        more, more_failures = _rerender_earlier_reports(result, registry, reporter_names,
                                                        Path(options.out_dir),
                                                        prepared.run_dir.parent)
        written += more
        failures += more_failures
    for path in written:
        click.echo(f"wrote {path}")
    for failure in failures:
        click.echo(f"error: {failure}", err=True)
    if result.interrupted:
        click.echo("interrupted: reports cover the tasks that finished; continue with "
                   f"evalctl run --resume {prepared.run_dir}", err=True)
        ctx.exit(EXIT_INTERRUPTED)
    if stops.late:  # the run had finished: a signal while its reports were written
        click.echo("interrupted: the run had finished, and its reports are complete",
                   err=True)
        ctx.exit(EXIT_INTERRUPTED)
    if result.budget and result.budget.get("reached"):
        click.echo(f"{result.count('not_run')} attempt(s) not run: the budget was reached; "
                   f"continue with evalctl run --resume {prepared.run_dir} and a higher "
                   "--max-cost/--max-tokens", err=True)
    if result.comparison is not None:
        comparison = result.comparison
        reasons = comparison.gate_reasons or []
        for warning in comparison.warnings():
            click.echo(f"warning: {warning}", err=True)
        click.echo(comparison.to_markdown())
        for reason in reasons:
            click.echo(f"regression against {baseline}: {reason}", err=True)
        ctx.exit(EXIT_FAILED if reasons or failures else EXIT_OK)
    ctx.exit(EXIT_OK if result.all_passed and not failures else EXIT_FAILED)


def _note_unused_agent_options(config: Any, agent: str | None) -> None:
    """The config's `[agent_options]` go with its `agent`: a run whose --agent is
    another runs without them, and says so (found by a newcomer: dropped in silence)."""
    configured = config.get("agent")
    if not agent or not configured or agent == configured or not config.get("agent_options"):
        return
    click.echo(f"note: {config.where('agent_options')}: [agent_options] are for the config's "
               f"agent '{configured}'; this run's --agent {agent} runs without them",
               err=True)


def _warn_tasks_without_turns(registry: Any, provider: str, tasks: list[Any],
                              agent: Any = None) -> None:
    """A provider whose turns come from the suite (live = False: scripted) fails every
    task of the built-in loop that has none of its task keys: `evalctl run live` without
    --provider ran the default and reported 0/3 with no word why. Said before the run;
    not refused, since a suite may mean some tasks for a real model and run the others
    offline. A CLI agent (`agent`, not the built-in loop) may do its work without the
    model: for it this is a note of what its model calls get, not "cannot pass" (found by
    a newcomer: said of a task that then passed), and nothing without the model proxy."""
    from evalctl._run.agents import DEFAULT_AGENT

    spec = registry.get("provider", provider)
    keys = set(spec.task_schema)
    if spec.live or not keys:
        return
    cli_agent = agent is not None and agent.spec.name != DEFAULT_AGENT
    if cli_agent and agent.options.get("model_proxy", True) is False:
        return
    missing = [task.id for task in tasks if not keys & set(task.extra)]
    if not missing:
        return
    shown = ", ".join(missing[:5]) + (f" and {len(missing) - 5} more" if len(missing) > 5
                                      else "")
    nothing = f"{len(missing)} of {len(tasks)} task(s) have nothing for the {provider} " \
        f"provider to serve (no {' or '.join(sorted(keys))})"
    if cli_agent:
        click.echo(f"note: {nothing}: a model call of agent '{agent.name}' gets a canned "
                   "reply, so they pass only on what the agent does without a model: "
                   f"{shown}. To serve it a model, use --provider NAME, or write its turns "
                   "under agent_script: (docs/agents.md)", err=True)
        return
    click.echo(f"warning: {nothing}, so they cannot pass: {shown}. To run them against a "
               "model, use --provider NAME (evalctl list-plugins names the providers)",
               err=True)


def _rerender_earlier_reports(result: Any, registry: Any, written_now: tuple[str, ...],
                              out_dir: Path, beside_run: Path) -> tuple[list[Path], list[str]]:
    """On a resume, render again every report of the run that exists in another format
    (a junit `evalctl report` wrote, say), in the resume's output directory and beside
    the run directory: left as it was, it would say "not run" where the new JSON beside
    it says "passed". The journal has everything, so they are rendered, not removed."""
    from evalctl._report.writing import report_stem, write_reports

    stem = report_stem(result)
    written: list[Path] = []
    failures: list[str] = []
    by_extension: dict[str, list[str]] = {}
    for name, spec in registry.reporters.items():
        by_extension.setdefault(spec.extension, []).append(name)
    for directory in dict.fromkeys((out_dir.resolve(), beside_run.resolve())):
        done_here = set(written_now) if directory == out_dir.resolve() else set()
        formats = []
        for earlier in sorted(directory.glob(f"{stem}.*")):
            extension = earlier.name[len(stem) + 1:]
            names = by_extension.get(extension, [])
            if not earlier.is_file() or set(names) & done_here:
                continue
            if len(names) == 1:
                formats.append(names[0])
            else:  # no reporter, or several, make this format: it cannot be rendered again
                click.echo(f"warning: {earlier} is from before this resume and was not "
                           "rendered again (no single installed reporter writes ."
                           f"{extension}): it does not show the attempts run now", err=True)
        if formats:
            more, more_failures = write_reports(result, registry, formats, directory)
            written += more
            failures += more_failures
    return written, failures


def _a_directory(path: Path, what: str) -> None:
    """Refuse a run directory that is not there as that, not as a missing journal."""
    from evalctl._errors import UsageError

    if not path.exists():
        raise UsageError(f"{what} {path}: no such directory")
    if not path.is_dir():
        raise UsageError(f"{what} {path}: not a directory; name a run directory "
                         "(eval_reports/workspaces-<time>)")


def _report_path_checked(report: Path | None, suite: Path | None = None) -> None:
    """Refuse `--report PATH` that must not be written (report_path_problem), before
    any work: found now, not after a run that may have cost hours and dollars."""
    from evalctl._errors import UsageError
    from evalctl._report.writing import report_path_problem

    problem = report_path_problem(report, suite) if report is not None else None
    if problem:
        raise UsageError(f"--report {report}: it {problem}")


def _same_file(one: Path, other: Path) -> bool:
    """Whether two paths name the same file (through links, or as written when neither
    exists yet)."""
    try:
        return os.path.samefile(one, other)
    except OSError:
        return os.path.realpath(one) == os.path.realpath(other)


def _output_problem(path: Path, flag: str) -> None:
    """Refuse an output file whose directory is missing or cannot be written, before
    any work: creating directories a typo named is not the user's intent, and the other
    -o options refuse it too."""
    from evalctl._errors import UsageError
    from evalctl._report.writing import directory_problem

    problem = directory_problem(path.parent, creates_parents=False)
    if problem:
        raise UsageError(f"{flag} {path}: it {problem}")


def _given(ctx: click.Context, name: str, value: Any) -> bool:
    """Whether an option was given on the command line (or its environment variable),
    as opposed to left at its default."""
    from click.core import ParameterSource

    if name == "provider" and value == "scripted" and ctx.params.get("scripted"):
        return True  # --scripted
    source = ctx.get_parameter_source(name)
    return source in (ParameterSource.COMMANDLINE, ParameterSource.ENVIRONMENT)


@cli.command("report")
@click.argument("run_dir", type=click.Path(path_type=Path))
@click.option("--reporter", "reporters", multiple=True, metavar="NAME",
              help="Another report format, e.g. junit or html (repeatable; default "
                   "markdown). The JSON report is always written.")
@click.option("--out", type=click.Path(file_okay=False, path_type=Path),
              help="Directory for the reports (default: the one that holds RUN_DIR).")
@click.option("--report", type=click.Path(dir_okay=False, path_type=Path),
              help="Also write the JSON report to this path.")
@click.pass_context
def report_command(ctx: click.Context, run_dir: Path, reporters: tuple[str, ...],
                   out: Path | None, report: Path | None) -> None:
    """Render a run's reports again, from its journal: any reporter, any time.

    RUN_DIR is a run directory (eval_reports/workspaces-<time>), or a JSON report. A
    finished run, one still going and one that was killed (its unfinished attempts
    reported not run) all render. Exit 0 when every report was written, 1 when a
    reporter failed, 2 when there is no run there.
    """
    from evalctl._report.rundir import read_run
    from evalctl._report.writing import check_reporters, write_reports

    _report_path_checked(report)
    stored = read_run(run_dir)
    for problem in stored.problems:
        click.echo(f"warning: {problem}", err=True)
    registry = _registry(ctx)
    if not reporters:
        config = _config(registry, unused=["provider", "sandbox", "agent", "executor"])
        reporters = tuple(config.get("reporters", DEFAULT_REPORTERS))
    names = tuple(dict.fromkeys((ALWAYS_REPORTED, *reporters)))
    check_reporters(registry, names)
    written, failures = write_reports(stored.run, registry, names,
                                      out or stored.stem.parent, report)
    for path in written:
        click.echo(f"wrote {path}")
    for failure in failures:
        click.echo(f"error: {failure}", err=True)
    ctx.exit(EXIT_FAILED if failures else EXIT_OK)


@cli.command("regrade")
@click.argument("run_dir", type=click.Path(path_type=Path))
@click.option("--suite", type=click.Path(path_type=Path),
              help="Grade with this suite's checks (a file or a built-in name; default: the "
                   "run's suite as it is now).")
@click.option("--out", type=click.Path(file_okay=False, path_type=Path),
              help="Directory for the new run directory and reports (default: the one that "
                   "holds RUN_DIR).")
@click.option("--reporter", "reporters", multiple=True, metavar="NAME",
              help="Another report format (repeatable; default markdown). The JSON report "
                   "is always written.")
@click.option("--report", type=click.Path(dir_okay=False, path_type=Path),
              help="Also write the JSON report to this path.")
@click.option("--concurrency", type=_Whole(min=1), metavar="N",
              help="Attempts graded at once (default 4).")
@click.pass_context
def regrade(ctx: click.Context, run_dir: Path, suite: Path | None, out: Path | None,
            reporters: tuple[str, ...], report: Path | None, concurrency: int | None) -> None:
    """Grade a finished run's kept workspaces again with the current checks, calling no
    model: after a grader or a check improved, see the new verdicts for free.

    RUN_DIR is a run directory (eval_reports/workspaces-<time>). Nothing in it changes:
    the workspaces are copied into a new run directory, graded there in a fresh sandbox
    of the run's kind, and the new reports say they are a regrade of RUN_DIR. Judge
    checks are not asked again. Exit 0 all passed, 1 a task failed or errored, 2 no run
    or nothing to regrade there.
    """
    from evalctl._report.console import RunView
    from evalctl._report.writing import check_reporters, write_reports
    from evalctl._run.regrade import execute_regrade, plan_regrade, summary_line

    _a_directory(run_dir, "RUN_DIR")
    _report_path_checked(report, suite)
    registry = _registry(ctx)
    if not reporters:
        config = _config(registry, unused=["provider", "sandbox", "agent", "executor"])
        reporters = tuple(config.get("reporters", DEFAULT_REPORTERS))
    names = tuple(dict.fromkeys((ALWAYS_REPORTED, *reporters)))
    check_reporters(registry, names)
    prepared = plan_regrade(run_dir, registry, suite=suite, out_dir=out,
                            concurrency=concurrency)
    for problem in prepared.source.problems:
        click.echo(f"warning: {problem}", err=True)
    stops = _Stops()
    result = _interruptible(execute_regrade(prepared), stops)
    RunView(len(result.tasks), repeat=result.repeat).print_summary(result)
    for warning in prepared.warnings:
        click.echo(f"warning: {warning}", err=True)
    click.echo(summary_line(result, prepared), err=True)
    written, failures = write_reports(result, registry, names, prepared.out_dir, report)
    for path in written:
        click.echo(f"wrote {path}")
    for failure in failures:
        click.echo(f"error: {failure}", err=True)
    if result.interrupted:
        from evalctl._run.regrade import how_to_regrade_again

        click.echo("interrupted: reports cover the attempts that were graded; "
                   + how_to_regrade_again(Path(result.run_directory),
                                          {"regrade_of": result.regrade_of},
                                          reported=True), err=True)
        ctx.exit(EXIT_INTERRUPTED)
    if stops.stopped:  # a signal while the reports were written: they are complete
        click.echo("interrupted: the regrade had finished, and its reports are complete",
                   err=True)
        ctx.exit(EXIT_INTERRUPTED)
    ctx.exit(EXIT_OK if result.all_passed and not failures else EXIT_FAILED)


@cli.command("script")
@click.argument("run_dir", type=click.Path(path_type=Path))
@click.argument("task_id")
@click.option("--attempt", type=_Whole(min=1), default=1, show_default=True,
              metavar="N", help="Which attempt of a run with --repeat.")
@click.option("--indent", type=_Whole(min=0), default=0, show_default=True,
              metavar="N",
              help="Spaces before every line, to paste under a task (4 under `tasks:`).")
def script_command(run_dir: Path, task_id: str, attempt: int, indent: int) -> None:
    """Print the `script:` turns that reproduce an attempt of the built-in loop under the
    scripted provider: a failure seen live becomes a scripted regression test.

    \b
    Example:
      evalctl script eval_reports/workspaces-<time> add-a-test --indent 4
    """
    from evalctl._errors import UsageError
    from evalctl._run.scripting import script_of

    script = script_of(run_dir, task_id, attempt)
    try:
        text = script.yaml(indent)
    except ValueError as exc:
        raise UsageError(f"the turns of '{task_id}' cannot be written as a script: {exc}") \
            from None
    for warning in script.warnings:
        click.echo(f"warning: {warning}", err=True)
    click.echo(text, nl=False)


def _shares_a_task(path: Path, baseline: Any, tasks: list[Any]) -> None:
    """A baseline with none of the run's tasks could only ever say "no regression":
    refuse it before any task starts."""
    from evalctl._errors import UsageError

    before = {t.task_id for t in baseline.by_task()}
    if not before & {t.id for t in tasks}:
        raise UsageError(f"{path} shares no task with this run: nothing to gate against "
                         f"(the baseline ran {baseline.suite_path}: "
                         f"{', '.join(sorted(before)) or 'no task'})")


def _read_run_saying_which(path: Path, flag: str = "") -> Any:
    """read_run, saying which report a directory of reports stood for: its newest, which
    `compare eval_reports now.json` used without naming it (found by a newcomer)."""
    from evalctl._report.rundir import read_run

    stored = read_run(path)
    if path.is_dir() and stored.source.parent == path and stored.source.suffix == ".json":
        click.echo(f"note: {flag}{path}: its newest report, {stored.source}", err=True)
    return stored


@cli.command()
@click.argument("baseline", type=click.Path(path_type=Path))
@click.argument("current", type=click.Path(path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="JSON instead of Markdown.")
@click.option("--alpha", type=_FiniteRange(0, 1, min_open=True, max_open=True),
              default=0.05, show_default=True, help="Significance level of the test.")
@click.option("--output", "-o", type=click.Path(dir_okay=False, path_type=Path),
              help="Also write the comparison to this file.")
@click.option("--html", "html_path", type=click.Path(dir_okay=False, path_type=Path),
              help="Also write the current run's HTML report, with the comparison, here.")
@click.pass_context
def compare(ctx: click.Context, baseline: Path, current: Path, as_json: bool, alpha: float,
            output: Path | None, html_path: Path | None) -> None:
    """Compare two runs (JSON reports or run directories): flips, rate and cost changes,
    and significance.

    Exit 0 when there is no regression (no significant drop in completion), 1 when
    there is one or cannot be ruled out (a task that passed in the baseline was not
    graded now), 2 when a report is unusable.
    """
    import json

    from evalctl._errors import UsageError
    from evalctl._files import write_atomically
    from evalctl._report.compare import compare_reports
    from evalctl._report.viewing import HTML_REPORTER

    for path, flag in ((output, "--output"), (html_path, "--html")):
        if path is not None:
            _output_problem(path, flag)
    html_reporter = _registry(ctx).get("reporter", HTML_REPORTER) if html_path else None
    before, after = _read_run_saying_which(baseline).run, _read_run_saying_which(current).run
    comparison = compare_reports(before, after, alpha,
                                 registry=_registry(ctx, warn=False))
    unusable = comparison.nothing_in_common()
    if unusable:
        raise UsageError(unusable)
    for warning in comparison.warnings():
        click.echo(f"warning: {warning}", err=True)
    text = json.dumps(comparison.to_dict(), indent=2) + "\n" if as_json else \
        comparison.to_markdown()
    click.echo(text, nl=False)
    if output:
        write_atomically(output, text)
    if html_reporter is not None and html_path is not None:
        after.comparison = comparison
        click.echo(f"wrote {html_reporter.write(after, html_path)}", err=True)
    unverified = comparison.unverified_reason()
    if unverified:
        click.echo(unverified, err=True)
    ctx.exit(EXIT_FAILED if comparison.regression or unverified else EXIT_OK)


@cli.command()
@click.argument("target", required=False, type=click.Path(path_type=Path))
@click.option("--rerender", is_flag=True, help="Render the HTML again even if it is current.")
@click.option("--no-open", is_flag=True, help="Print the report's path; start no browser.")
@click.pass_context
def view(ctx: click.Context, target: Path | None, rerender: bool, no_open: bool) -> None:
    """Open a run's HTML report in your browser, rendering it first if needed.

    TARGET is a run directory, a JSON report, or a directory of reports (the newest);
    by default the newest run under the output directory (eval_reports). Where no
    browser can be shown (CI, an SSH session) the path is printed instead.
    """
    from evalctl._report.rundir import read_run
    from evalctl._report.viewing import browser_available, html_report, open_in_browser

    if target is None:
        target = Path(_config().get("out", "eval_reports"))
        if not target.exists():  # a first look, before any run: say how to make one
            from evalctl._errors import UsageError

            elsewhere = _report_directories(Path("."))
            if elsewhere:  # runs written with --out (found by a newcomer)
                raise UsageError(f"no runs in {target} (it does not exist); runs written "
                                 f"with --out are here: view them with evalctl view "
                                 f"{' or evalctl view '.join(map(str, elsewhere))}")
            raise UsageError(f"no runs here yet ({target} does not exist): make one with "
                             "evalctl run SUITE (evalctl run harness runs a built-in one "
                             "offline), or name a run directory or report to view")
    path, reused, elsewhere = html_report(read_run(target), _registry(ctx), rerender)
    if elsewhere:
        click.echo(f"note: {elsewhere}: the report is written to a directory of yours "
                   "under the temporary directory instead", err=True)
    # Said as the other commands say a file they did or did not write (found by a
    # newcomer: "wrote" the first time, a bare "report" after, read as another file).
    click.echo(f"up to date, not rendered again: {path} (--rerender renders it anew)"
               if reused else f"wrote {path}")
    if not no_open and browser_available() and open_in_browser(path):
        click.echo("opened it in your browser")
    elif not no_open:
        click.echo("no browser to open here: open the file above, or copy it where there is one")


def _report_directories(where: Path) -> list[Path]:
    """The directories right under `where` that hold a run's JSON report (`--out DIR`
    of earlier runs), at most three, by name; only the first 200 entries are looked in,
    so a directory of thousands costs little."""
    import itertools

    found = []
    try:
        with os.scandir(where) as listing:
            entries = sorted(itertools.islice(listing, 200), key=lambda entry: entry.name)
    except OSError:
        return []
    for entry in entries:
        try:
            if entry.is_dir(follow_symlinks=False) and \
                    any(Path(entry.path).glob("report-*.json")):
                found.append(Path(entry.name))
        except OSError:
            continue
        if len(found) == 3:
            break
    return found


# The descriptors evalctl asks for (as its soft limit, up to the hard one): every running
# command holds about five (pipes, a pidfd), and at the usual soft limit of 1,024 a few
# hundred concurrent calls left other attempts' commands failing to start.
OPEN_FILES_WANTED = 65_536


def _more_descriptors() -> None:
    import resource

    try:
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        wanted = OPEN_FILES_WANTED if hard == resource.RLIM_INFINITY else \
            min(hard, OPEN_FILES_WANTED)
        if soft != resource.RLIM_INFINITY and soft < wanted:
            resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
    except (OSError, ValueError):
        pass  # as it was: a platform or container that does not let it be raised


def main() -> None:
    global _SETTLE_ON_EXIT
    _SETTLE_ON_EXIT = True
    _more_descriptors()
    try:
        cli(prog_name="evalctl")
    except KeyboardInterrupt:  # a second Ctrl-C, while the first is being wound down
        click.echo("interrupted", err=True)
        sys.exit(EXIT_INTERRUPTED)
