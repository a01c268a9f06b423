"""Errors that evalctl turns into a message and an exit code instead of a traceback."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass


class EvalctlError(Exception):
    """An error the user can act on. The CLI prints it and exits with `exit_code`."""

    exit_code = 2


class UsageError(EvalctlError):
    """Bad input or configuration: exit 2 before any task starts."""


class ProviderSetupError(UsageError):
    """The run's provider refused its configuration (a missing API key, say)."""


class PluginError(EvalctlError):
    """A plugin failed while strict mode is on, or a needed plugin is unusable."""


@dataclass(frozen=True, order=True)
class Problem:
    """One finding in a suite file, printed as `file:line: severity: message` (or
    `file: severity: message` when no line applies: line 0, a file that cannot be read)."""

    file: str
    line: int
    message: str
    severity: str = "error"  # or "warning"

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}" if self.line else self.file
        return f"{where}: {self.severity}: {self.message}"


class SuiteError(UsageError):
    """A suite that cannot be run; carries every problem found, not only the first."""

    def __init__(self, problems: list[Problem], note: str = ""):
        self.problems = sorted(problems, key=lambda p: (p.file, p.line, p.message))
        self.note = note  # a line after the problems, of no line of the file's
        super().__init__("\n".join([*(str(p) for p in self.problems), *([note] if note
                                                                         else [])]))


class ProviderError(Exception):
    """The model could not be reached or answered unusably after retries.

    Raised by providers; the agent loop records it and the task counts as an error,
    not a failure, while the run goes on. `status` is the exit status recorded
    (provider_error unless the provider knows better, e.g. script_error).
    """

    def __init__(self, message: str, status: str = "provider_error"):
        super().__init__(message)
        self.status = status


class RateLimited(ProviderError):
    """The model's service refused the call for now: rate limited (HTTP 429) or
    overloaded, after the provider's own retries.

    Raised by providers instead of a plain ProviderError so the run can adapt: it lowers
    how many model calls it makes at once, waits `retry_after` seconds (when the service
    said; else it backs off), asks again, and raises its concurrency again as calls
    succeed. Only when the service keeps refusing does the attempt end as an error.
    """

    def __init__(self, message: str, retry_after: float | None = None):
        super().__init__(message)
        self.retry_after = retry_after


class RequestRejected(ProviderError):
    """The model's service refused the request itself as invalid (HTTP 400, say): the
    request's fault, not the service's.

    For the built-in loop, which writes the requests, it ends the attempt as any
    ProviderError does. Through the model proxy the request is a CLI agent's own, so the
    agent gets the refusal, as the API would give it, and the attempt goes on: a model
    driving the agent must not turn its attempt into an error (out of the score) by
    sending a malformed request.
    """

    RECORDED = "request_rejected"  # what a cassette records, so a replay refuses alike


class GraderUnavailable(Exception):
    """A check cannot run here, for a reason outside the agent's work: a tool the
    grader needs is not installed, a service it needs is misconfigured.

    Raised by a grader with a message that says how to fix it ("pytest is not
    installed: pip install pytest"). The check is then reported as an error with that
    message, never as a failure, and the attempt is left out of completion.
    """


def stops_the_run(exc: BaseException) -> bool:
    """Whether `exc`, caught around a plugin's code, is the run's own stop, to be raised
    on: Ctrl-C (KeyboardInterrupt), a coroutine being closed (GeneratorExit), or the
    cancellation of the task that called the plugin (asyncio.CancelledError while that
    task is being cancelled: Ctrl-C, SIGTERM, a timeout around it). Anything else a
    plugin raises is the plugin's failure, reported as any exception is: SystemExit too
    (a helper's sys.exit(), an argparse main() called for its work), which caught as
    nothing ended evalctl with exit 0, no reports and no word (found by a newcomer)."""
    if isinstance(exc, KeyboardInterrupt | GeneratorExit):
        return True
    import asyncio  # here: `import evalctl` stays quick

    if not isinstance(exc, asyncio.CancelledError):
        return False
    try:
        task = asyncio.current_task()
    except RuntimeError:  # no loop runs here: nothing of the run's was cancelled
        return False
    return task is not None and task.cancelling() > 0


def describe_crash(exc: BaseException) -> str:
    """A plugin's exception in a line: its type and message, and for SystemExit, what
    raises one (its message alone, `0`, says nothing)."""
    if isinstance(exc, SystemExit):
        return (f"SystemExit({exc.code!r}): sys.exit() or exit() was called, by the "
                "plugin or code it calls (an argparse main(), say)")
    return f"{type(exc).__name__}: {exc}"


@contextlib.contextmanager
def plugin_failure_ignored() -> Iterator[None]:
    """contextlib.suppress(Exception) around a plugin's call whose failure changes
    nothing (a provider's aclose()), that lets only the run's own stop through: a
    plugin's SystemExit is ignored as well."""
    try:
        yield
    except BaseException as exc:
        if stops_the_run(exc):
            raise
