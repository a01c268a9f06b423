"""Before the agent: the workspace's seed (a source and files), the verify files it
implies, and the task's setup commands, run in a sandbox of their own.

Anything that goes wrong here is the task's or the machine's problem, not the agent's:
the attempt is an error (exit status `setup_error`) and the agent never starts. What
happened is in the attempt's ledger, before the agent's events.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

from evalctl._agent.ledger import LEDGER_TEXT_LIMIT, Ledger
from evalctl._blocking import off_loop
from evalctl._errors import describe_crash, stops_the_run
from evalctl._files import ConfinementError
from evalctl._plugin.types import Sandbox
from evalctl._sources.git import SourceError
from evalctl._sources.patch import patched_files
from evalctl._suite.model import Task
from evalctl._text import truncate
from evalctl._workspace import Workspace, seed_workspace


class SetupFailed(Exception):
    """The attempt cannot start; the message says why."""


async def prepare_workspace(task: Task, workspace: Workspace, *,
                            seeded: bool | Exception = False) -> dict[str, str | None]:
    """Seed the workspace and compute its verify files (path -> content, None to delete).
    `seeded` says the caller seeded it already, off the event loop (True), or what that
    raised. Raises SetupFailed, recorded in the ledger."""
    try:
        if isinstance(seeded, Exception):
            raise seeded
        if not seeded:
            # Creating files and hashing them block: never on the event loop. A source
            # (a git clone, an archive) can take seconds: the default pool, so the small
            # one stays free for other attempts' quick work.
            await (asyncio.to_thread if task.source else off_loop)(
                seed_workspace, workspace, task.files, task.source)
        patched = await asyncio.to_thread(patched_files, workspace.seed_path,
                                          task.verify_patch) if task.verify_patch else {}
    except (SourceError, ConfinementError, OSError) as exc:
        what = task.source.describe() if task.source else "its files"
        message = f"the workspace could not be prepared from {what}: {exc}"
        _record(workspace, "setup_end", status="failed", error=message)
        raise SetupFailed(message) from None
    return {**patched, **task.verify_files}


async def run_setup(task: Task, workspace: Workspace,
                    open_sandbox: Callable[[], Awaitable[Sandbox]]) -> None:
    """Run the task's setup commands in a fresh sandbox; SetupFailed at the first that
    fails or times out. Afterwards, what setup made is part of the seed: what the agent
    starts with, and what its changes are measured from."""
    setup = task.setup
    if setup is None:
        return
    ledger = Ledger(workspace.ledger_path)
    try:
        ledger.append("setup_start", commands=list(setup.commands), timeout=setup.timeout,
                      network=setup.network)
        try:
            sandbox = await open_sandbox()
        except BaseException as exc:  # a sandbox plugin's SystemExit too
            if stops_the_run(exc):
                raise
            message = f"the setup sandbox failed to start: {describe_crash(exc)}"
            ledger.append("setup_end", status="failed", error=message)
            raise SetupFailed(message) from None
        try:
            for index, command in enumerate(setup.commands, 1):
                started = time.monotonic()
                ran = await sandbox.run(command, timeout=setup.timeout, merge_stderr=True)
                output = truncate(ran.stdout, LEDGER_TEXT_LIMIT, keep="both")
                ledger.append("setup_command", index=index, command=command,
                              exit_code=ran.exit_code, timed_out=ran.timed_out,
                              seconds=round(time.monotonic() - started, 3), output=output)
                if ran.timed_out or ran.exit_code != 0:
                    why = f"timed out after {setup.timeout:g}s" if ran.timed_out else \
                        f"exited with status {ran.exit_code}"
                    tail = truncate(ran.stdout.strip(), 1_000, keep="tail")
                    message = (f"setup command {index} of {len(setup.commands)} ({command!r}) "
                               f"{why}" + (f":\n{tail}" if tail else "") + _missing_module(tail))
                    ledger.append("setup_end", status="failed", error=message)
                    raise SetupFailed(message)
        finally:
            await sandbox.close()  # nothing setup started outlives it
        ledger.append("setup_end", status="ok")
    finally:
        ledger.close()
    await asyncio.to_thread(workspace.adopt_setup)


def _missing_module(output: str) -> str:
    """A hint when setup failed for a Python module the sandbox's Python lacks: that
    Python is the one evalctl runs on (pytest, say, which evalctl itself does not need)."""
    import re
    import sys

    found = re.search(r"No module named '?([A-Za-z0-9_.]+)'?", output)
    if found is None:
        return ""
    module = found.group(1).split(".")[0]
    return (f"\n(the sandbox runs the Python evalctl runs on; install {module} there: "
            f"{sys.executable} -m pip install {module})")


def _record(workspace: Workspace, event: str, **fields: object) -> None:
    ledger = Ledger(workspace.ledger_path)
    try:
        ledger.append(event, **fields)
    finally:
        ledger.close()
