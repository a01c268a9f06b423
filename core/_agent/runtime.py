"""One attempt of an agent plugin: its ledger, its context, its limits, its result.

The runner calls `run_agent` with the run's agent (an `AgentSpec`'s `run` and its
options); without one it runs the built-in loop. Whatever the agent, the ledger opens
with `task_start` and closes with `task_end`; every model call, the built-in loop's or a
CLI agent's through the model proxy, goes through one `ModelCalls` for the attempt (the
run's throttle and budget), which counts turns, tokens and cost in memory as they arrive
(the ledger is the audit trail, never read back: an agent under the local sandbox can
delete or mangle it); and the files changed are measured against the seed, off the event
loop, so every agent is counted the same way.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import secrets
import time
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any

from evalctl._agent.cassette import CassetteRecorder
from evalctl._agent.ledger import LEDGER_TEXT_LIMIT, Ledger
from evalctl._agent.loop import SYSTEM_PROMPT, run_loop
from evalctl._agent.proxy import SOCKET_NAME, ModelProxy, forwarder_source
from evalctl._agent.throttle import UNTHROTTLED, CallThrottle, ModelCalls, SpendCallback
from evalctl._blocking import off_loop
from evalctl._errors import describe_crash, stops_the_run
from evalctl._files import small_tree, write_new_file
from evalctl._plugin.types import (
    AgentContext,
    AgentLimits,
    AgentOutcome,
    AgentResult,
    ExitStatus,
    Sandbox,
)
from evalctl._process import CommandResult
from evalctl._suite.model import Task
from evalctl._text import truncate
from evalctl._workspace import Workspace, sandbox_environment

FORWARDER_NAME = "evalctl-forwarder.py"
FORWARDER_START_SECONDS = 30
# A plugin's own run gets this long past the task's seconds to wind down (its command
# already has the task's seconds as its timeout) before it is cancelled.
GRACE_SECONDS = 10.0
WRAPPER_FAILED = 125

AgentRun = Callable[[AgentContext], Awaitable[AgentOutcome]]


def _small_workspace(task: Task, workspace: Workspace) -> bool:
    """Whether an attempt's walks and hashes are small enough for the event loop: a
    small seed (its copy is walked too), and a small tree now."""
    return task.small_seed() and small_tree(workspace.root)


def proxy_wrapper(script: str, directory: str = ".") -> str:
    """`script` behind the model forwarder: a bash script that starts the forwarder in the
    sandbox, points ANTHROPIC_BASE_URL at it, then runs `script`. The forwarder and the
    proxy's socket are in `directory` of the attempt's TMPDIR."""
    where = f"$TMPDIR/{directory}"
    return (
        f'exec 3< <(exec python3 "{where}/{FORWARDER_NAME}" "{where}/{SOCKET_NAME}")\n'
        f"if ! IFS= read -r -t {FORWARDER_START_SECONDS} EVALCTL_MODEL_PORT <&3; then\n"
        "  echo 'evalctl: the model forwarder did not start in the sandbox "
        "(is python3 on its PATH?)' >&2\n"
        f"  exit {WRAPPER_FAILED}\n"
        "fi\n"
        "exec 3<&-\n"
        'export ANTHROPIC_BASE_URL="http://127.0.0.1:$EVALCTL_MODEL_PORT"\n'
        "unset EVALCTL_MODEL_PORT\n"
        f"{script}\n")


async def run_agent(task: Task, provider: Any, workspace: Workspace, sandbox: Sandbox,
                    system_prompt: str = SYSTEM_PROMPT, *, agent: AgentRun | None = None,
                    options: Mapping[str, Any] | None = None, name: str = "evalctl",
                    env: Mapping[str, str] | None = None,
                    throttle: CallThrottle | None = None,
                    on_spend: SpendCallback | None = None,
                    cassette: CassetteRecorder | None = None, attempt: int = 1,
                    ledger: Ledger | None = None) -> AgentResult:
    """Run one attempt to its end with `agent` (the built-in loop when None).

    Cancellation records 'aborted' and re-raises; an unexpected exception is recorded as
    'internal_error' and re-raised. `throttle` is the run's shared limit on model calls at
    once (it adapts to rate limits); `on_spend(usage, cost)` is told of every model turn
    as it arrives, so a run-wide budget sees spending before the attempt ends. Every model
    exchange goes to `cassette` when given (closed when the attempt ends), and every
    request says it is of `attempt`. The ledger's `task_end` carries the final text and
    the files changed: what graders were given, for a regrade. `ledger` is the attempt's
    ledger when the caller opened it already (off the event loop, with its other files)."""
    started = time.monotonic()
    if ledger is None:
        ledger = await off_loop(Ledger, workspace.ledger_path)  # creates a file: blocks
    ledger.append("task_start", task_id=task.id, prompt=task.prompt, agent=name,
                  permissions=task.permissions, limits=task.limits.to_dict())
    limits = AgentLimits(task.limits.turns, task.limits.seconds, task.limits.cost)
    proxied = {"tool_calls": 0}
    # A command run without the model proxy may have used a model evalctl never saw: the
    # attempt's cost is then unknown (None), never a silent $0.
    unmetered = False
    calls = ModelCalls(provider, ledger, throttle or CallThrottle(UNTHROTTLED), on_spend,
                       cassette=cassette, attempt=attempt)

    async def loop() -> AgentOutcome:
        return await run_loop(task, provider, workspace, sandbox, ledger, system_prompt,
                              calls=calls)

    async def command(script: str, *, env: Mapping[str, str] | None = None,
                      stdin: str | None = None, model_proxy: bool = True,
                      ) -> tuple[AgentOutcome, CommandResult]:
        nonlocal unmetered
        unmetered = unmetered or not model_proxy
        seconds_left = max(0.1, limits.seconds - (time.monotonic() - started))
        outcome, result, tool_calls = await run_command(
            script, sandbox=sandbox, workspace=workspace, ledger=ledger, provider=provider,
            task=task, limits=limits, env={**context.env, **(env or {})}, stdin=stdin,
            model_proxy=model_proxy, timeout=seconds_left, calls=calls)
        proxied["tool_calls"] += tool_calls
        return outcome, result

    context = AgentContext(
        task_id=task.id, prompt=task.prompt, task=task.as_request_data(), limits=limits,
        workspace=workspace.root, sandbox=sandbox,
        env=dict(env) if env is not None else sandbox_environment(workspace.home, workspace.tmp),
        options=dict(options or {}), name=name, _loop=loop, _command=command,
        _record=ledger.append)
    try:
        if agent is None:
            outcome = await loop()
        else:
            try:
                async with asyncio.timeout(limits.seconds + GRACE_SECONDS):
                    outcome = await agent(context)
            except TimeoutError:
                ledger.append("limit", limit="seconds", value=limits.seconds)
                outcome = AgentOutcome(ExitStatus.TIMEOUT,
                                       error=f"stopped after {limits.seconds:g}s")
            if not isinstance(outcome, AgentOutcome):
                raise TypeError(f"agent {name!r}: run() returned {type(outcome).__name__}, "
                                "expected evalctl.AgentOutcome")
    except asyncio.CancelledError:
        ledger.append("task_end", status=ExitStatus.ABORTED, error="cancelled")
        ledger.close()
        raise
    except BaseException as exc:  # a bug: the ledger still ends honestly; the runner records it
        if stops_the_run(exc):  # Ctrl-C
            raise
        # (an agent plugin's SystemExit too: the runner makes it the attempt's error)
        ledger.append("task_end", status=ExitStatus.INTERNAL_ERROR, error=describe_crash(exc))
        ledger.close()
        raise
    finally:
        if cassette is not None:
            cassette.close()
    # Hashing the workspace reads every file the agent left: on the event loop only when
    # that is a small tree (a trip to a thread would cost more), else off it. The list is
    # bounded (its cut is recorded); the protected files' changes are listed first, so
    # the protected-files check never depends on where it was cut.
    files_changed = workspace.changed_files(task.protected) \
        if _small_workspace(task, workspace) else \
        await off_loop(workspace.changed_files, task.protected)
    cut = {} if files_changed.complete else {"files_changed_omitted": files_changed.omitted,
                                             "files_changed_note": files_changed.note()}
    ledger.append("task_end", status=outcome.exit_status, error=outcome.error,
                  final_text=outcome.final_text, files_changed=files_changed,
                  as_left=files_changed.digests, **cut)
    ledger.close()
    return AgentResult(
        final_text=outcome.final_text,
        exit_status=outcome.exit_status,
        turns=calls.turns,
        tool_calls=outcome.tool_calls if outcome.tool_calls is not None
        else proxied["tool_calls"],
        usage=calls.usage,
        cost=None if unmetered else calls.cost,
        duration=round(time.monotonic() - started, 4),
        files_changed=files_changed,
        files_changed_omitted=files_changed.omitted,
        ledger_path=workspace.ledger_path,
        error=outcome.error,
        seed_path=workspace.seed_path,
    )


def _proxy_directory(tmp: Path) -> str:
    """A new directory in `tmp` for the model proxy's forwarder and socket, named at
    random (`.evalctl-proxy-<hex>`) so that nothing the setup left can be in its way,
    made through a descriptor of `tmp` (no link followed), readable by the sandbox's
    user. Returns its name."""
    parent = os.open(tmp, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        name = f".evalctl-proxy-{secrets.token_hex(8)}"
        os.mkdir(name, 0o700, dir_fd=parent)
        made = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC,
                       dir_fd=parent)
        try:
            os.fchmod(made, 0o755)  # as TMPDIR itself: the sandbox's user reaches in
        finally:
            os.close(made)
    finally:
        os.close(parent)
    return name


def _remove_proxy_directory(tmp: Path, name: str) -> None:
    """The proxy's directory gone after the attempt's command, when it holds only what
    evalctl put there; what the agent did to it (a link, its own files) stays, and no
    link is followed."""
    with contextlib.suppress(OSError):
        parent = os.open(tmp, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        try:
            inside = os.open(name, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC,
                             dir_fd=parent)
            try:
                for entry in (FORWARDER_NAME, SOCKET_NAME):
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(entry, dir_fd=inside)
            finally:
                os.close(inside)
            os.rmdir(name, dir_fd=parent)
        finally:
            os.close(parent)


# How a program that never ran ends: a shell's "not found" (127) or "not executable"
# (126), or an interpreter that cannot open its script (python's exit 2 with this line).
_NOT_STARTED_EXITS = frozenset({126, 127})
_SCRIPT_NOT_OPENED = re.compile(r"can't open file .*\[Errno (?:2|13)\]")
_SCRIPT_NAMED = re.compile(r"can't open file '(.*)': \[Errno (?:2|13)\]")


def _could_not_start(result: CommandResult) -> bool:
    return result.exit_code in _NOT_STARTED_EXITS or (
        result.exit_code == 2 and _SCRIPT_NOT_OPENED.search(result.stderr) is not None)


# Asked in a shell of its own, which runs nothing of the agent's: is the command's program
# there to run (found, and an executable file when found as one), and, for an
# interpreter's exit 2, the script it is given? Exit 0: it is, and the exit was the
# program's own; 1: it is not.
_STARTS_PROBE = (
    'p=$(command -v -- "$1") || exit 1\n'
    'case $p in */*) [ -f "$p" ] && [ -x "$p" ] || exit 1;; esac\n'
    '[ -z "$2" ] || [ -e "$2" ] || exit 1\n'
    "exit 0\n")


async def _confirmed_not_started(sandbox: Sandbox, script: str, result: CommandResult,
                                 env: Mapping[str, str], root: Path) -> bool:
    """Whether a command that ended as a program that never ran (`_could_not_start`)
    really did not run: its exit status and output are the agent's to choose (a CLI agent
    that exits 127 on a task it cannot do took the task out of the score as an error;
    found by an attacker round), so the program its command line names is looked for with
    the agent's PATH in the sandbox, by a shell of evalctl's, as the `command` check
    does, and the script an interpreter could not open (exit 2) must be one it was given
    (`root`: the directory it ran in). A program found there ran, and its exit is its
    own: graded. A probe that cannot run says nothing either way: not started, as
    before."""
    import shlex

    # The command line is the whole script (a prompt given as an argument may hold line
    # breaks, quoted), but for the line that first saves the prompt to a file.
    first, _, rest = script.partition("\n")
    line = rest if rest and first.startswith('cat > "$TMPDIR/') else script
    try:
        words = shlex.split(line)
    except ValueError:
        return True
    if not words:
        return True
    script_word = ""
    if result.exit_code == 2:  # "can't open file '...'": only a script it was given counts
        said = _SCRIPT_NAMED.search(result.stderr)
        given = {*words[1:], *(os.path.join(root, word) for word in words[1:])}
        if said is None or said.group(1) not in given:
            return False
        script_word = said.group(1)
    try:
        probe = await sandbox.run(["bash", "-c", _STARTS_PROBE, "bash", words[0], script_word],
                                  timeout=30, env=env)
    except Exception:  # the sandbox could not run it: nothing learnt
        return True
    return probe.exit_code != 0


async def run_command(script: str, *, sandbox: Sandbox, workspace: Workspace, ledger: Ledger,
                      provider: Any, task: Task, limits: AgentLimits, env: Mapping[str, str],
                      stdin: str | None, model_proxy: bool, timeout: float,
                      calls: ModelCalls | None = None) -> tuple[AgentOutcome, CommandResult, int]:
    """A CLI agent's command in the sandbox, behind the model proxy: until it exits, its
    time runs out, or the proxy stops the attempt (a limit, a provider error)."""
    proxy: ModelProxy | None = None
    full_env = dict(env)
    shown = script
    directory: str | None = None
    if model_proxy:
        # The setup's sandbox shared this TMPDIR, and could leave anything at a name
        # known in advance (a directory at the forwarder's name was an internal error):
        # the forwarder and socket go in a directory of a fresh random name, made here.
        directory = _proxy_directory(workspace.tmp)
        where = workspace.tmp / directory
        write_new_file(where, FORWARDER_NAME, forwarder_source().encode("utf-8"))
        proxy = ModelProxy(provider, ledger, limits, task.as_request_data(),
                           where / SOCKET_NAME, calls=calls, locate=task.locate)
        await proxy.start()
        full_env["ANTHROPIC_API_KEY"] = proxy.token
        full_env.pop("ANTHROPIC_AUTH_TOKEN", None)
        script = proxy_wrapper(script, directory)
    ledger.append("agent_command", script=truncate(shown, LEDGER_TEXT_LIMIT),
                  model_proxy=model_proxy, timeout=round(timeout, 3))
    result: CommandResult | None = None
    running = asyncio.ensure_future(sandbox.run(script, timeout=timeout, env=full_env,
                                                stdin=stdin))
    stop_watch = asyncio.ensure_future(proxy.stopped.wait()) if proxy is not None else None
    try:
        waiting: set[asyncio.Future[Any]] = {running}
        if stop_watch is not None:
            waiting.add(stop_watch)
        await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
        if running.done():
            result = running.result()
        else:  # the proxy ended the attempt: end the agent (its process group dies)
            running.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await running
    finally:
        if not running.done():
            running.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await running
        if stop_watch is not None:
            stop_watch.cancel()
        if proxy is not None:
            await proxy.close()
        if directory is not None:
            _remove_proxy_directory(workspace.tmp, directory)
    if result is not None:
        ledger.append("agent_exit", exit_code=result.exit_code, timed_out=result.timed_out,
                      stdout=truncate(result.stdout, LEDGER_TEXT_LIMIT),
                      stderr=truncate(result.stderr, LEDGER_TEXT_LIMIT))
    else:
        ledger.append("agent_exit", exit_code=None, stopped_by=proxy.stop_status if proxy
                      else None)
        result = CommandResult(None, "", "", False)
    final_text = proxy.final_text if proxy is not None else ""
    tool_calls = proxy.tool_calls if proxy is not None else 0
    if proxy is not None and (proxy.stop_status is not None or proxy.end_over_cost()):
        outcome = AgentOutcome(proxy.stop_status, final_text, proxy.stop_error)
    elif result.timed_out:
        ledger.append("limit", limit="seconds", value=limits.seconds)
        outcome = AgentOutcome(ExitStatus.TIMEOUT, final_text,
                               f"stopped after {limits.seconds:g}s")
    elif result.exit_code != 0 and (proxy is None or proxy.calls == 0) and \
            _could_not_start(result) and \
            await _confirmed_not_started(sandbox, shown, result, env, workspace.root):
        tail = truncate(result.stderr.strip() or result.stdout.strip(), 600, keep="tail")
        outcome = AgentOutcome(ExitStatus.AGENT_NOT_STARTED, final_text,
                               f"the agent's command could not start (exit "
                               f"{result.exit_code}: {tail or 'no output'}); is it installed, "
                               "and is its directory visible in the sandbox (docs/agents.md)?")
    elif result.exit_code != 0:
        tail = truncate(result.stderr.strip() or result.stdout.strip(), 600, keep="tail")
        # 127 and 126 are also what a shell says of a program it cannot find or run: a
        # wrapper script's, which evalctl cannot tell from the agent's own (it is graded).
        hint = " (a shell's exit for a program it cannot find or run: is everything the " \
            "agent's command runs installed, and visible in the sandbox?)" \
            if result.exit_code in _NOT_STARTED_EXITS else ""
        outcome = AgentOutcome(ExitStatus.AGENT_FAILED, final_text,
                               f"the agent exited with code {result.exit_code}{hint}"
                               + (f": {tail}" if tail else ""))
    else:
        outcome = AgentOutcome(ExitStatus.COMPLETED, final_text)
    return outcome, result, tool_calls
