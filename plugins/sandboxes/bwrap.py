"""`bwrap`: every command of an attempt runs in a bubblewrap sandbox (Linux).

The jail itself (namespaces, mounts, cgroups, rlimits) is `bwrap_jail`; this module
makes it an evalctl sandbox: one jail per attempt, each command wrapped and supervised
by `evalctl.run_process`, and `close()` killing whatever the attempt still runs.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import evalctl
from evalctl.plugins.sandboxes import bwrap_jail
from evalctl.plugins.sandboxes.local import program_not_run

ISOLATION = (
    "bubblewrap: only the workspace and the attempt's own HOME (/home/agent) and TMPDIR "
    "(/tmp) are writable; /usr, an allowlist of /etc and the Python installation are "
    "read-only; the user's files, other workspaces, evalctl's ledgers, seed copies, reports "
    "and caches are not mounted; new user, PID, IPC, UTS, cgroup and network namespaces "
    "(no network unless the task says network: true), no capabilities, an environment built "
    "from nothing; nothing a command starts outlives it; per-attempt process, memory and "
    "file-size limits (evalctl doctor). Not isolated: CPU time and total disk space; "
    "root-owned files that are mounted can be read")

OPTIONS = {
    "type": "object",
    "properties": {
        # Bounded above as well: a limit past what the kernel takes (1e308 MiB of memory,
        # say) made every command fail instead of the suite.
        "max_processes": {"type": "integer", "minimum": 8, "maximum": 4_194_304,
                          "description": "Processes the whole attempt may run at once "
                                         "(default 512)."},
        "memory_mb": {"type": "integer", "minimum": 64, "maximum": 16_777_216,
                      "description": "Memory for the whole attempt, in MiB (default 4096)."},
        "file_size_mb": {"type": "integer", "minimum": 1, "maximum": 1_048_576,
                         "description": "Largest file a command may write, in MiB "
                                        "(default 1024)."},
        "ro_paths": {"type": "array", "items": {"type": "string", "pattern": "^/.",
                                               "description": "An absolute path, not /."},
                     "description": "Extra directories mounted read-only at their own path "
                                    "(a toolchain outside /usr, say). Never one holding "
                                    "secrets or the run directory."},
    },
}


@functools.cache
def _plugin_code_paths() -> tuple[str, ...]:
    """Where evalctl and every installed plugin's code lives, so that a Python started in
    the sandbox (a check's interpreter, pytest with evalctl's witness) can import them. In
    an editable install these are outside the Python installation. Found from the modules
    already loaded and the entry points' specs, without importing anything new."""
    import importlib.metadata
    import importlib.util

    found = {Path(evalctl.__file__).resolve().parent, Path(__file__).resolve().parents[1]}
    for entry_point in importlib.metadata.entry_points(group="evalctl"):
        top = entry_point.module.split(".", 1)[0]
        try:
            spec = importlib.util.find_spec(top)
        except (ImportError, ValueError):
            continue
        if spec is None:
            continue
        found.update(Path(p).resolve() for p in spec.submodule_search_locations or ())
        if spec.origin and spec.origin not in ("built-in", "frozen"):
            found.add(Path(spec.origin).resolve().parent)
    return tuple(sorted(str(path) for path in found if path.is_dir()))


@functools.cache
def _hidden_paths() -> tuple[Path, ...]:
    """Directories of evalctl's own that a mounted Python installation would otherwise
    show: the built-in suites hold their tasks' verify files (hidden tests). Found once
    per process, like the code paths."""
    import importlib.util

    found = {Path(evalctl.__file__).resolve().parent / "suites"}
    try:
        spec = importlib.util.find_spec("evalctl.suites")
    except (ImportError, ValueError):
        spec = None
    if spec is not None:
        found.update(Path(p).resolve() for p in spec.submodule_search_locations or ())
    return tuple(sorted(path for path in found if path.is_dir()))


async def _ended(launch: bwrap_jail.Launch) -> None:
    """Kill what the command left in its sandbox and reap the sandbox's pid 1 before the
    command counts as done: nothing it started outlives it. Usually the sandbox is gone
    already; else its pid 1 is awaited on the loop, never blocking it."""
    if launch.end(wait=False):
        return
    import asyncio  # here, not at the top: `evalctl list-plugins` never needs it

    loop = asyncio.get_running_loop()
    fd = launch.watchable()
    if fd is None:  # ended meanwhile, by the jail's close in a thread
        return
    gone = loop.create_future()
    loop.add_reader(fd, lambda: gone.done() or gone.set_result(None))
    try:
        await gone
    finally:
        loop.remove_reader(fd)
        os.close(fd)
    launch.end()


# How bubblewrap reports a program it could not execute (its execvp failed): exit 1 and
# this one line, the only output, since nothing ran.
_EXECVP_FAILED_EXIT = 1
_EXECVP_MISSING = ("No such file or directory", "Not a directory")


def _not_run(ran: evalctl.CommandResult, program: str,
             merge_stderr: bool) -> evalctl.CommandResult | None:
    """bubblewrap's report that `program` could not be executed, said as a shell (and
    `local`) says it: exit 127 or 126 (found by a newcomer: a missing program was the
    command's exit 1, the agent's failure, here and a grader's crash under local). None
    for anything else. A program that ran and wrote that line and exited 1 is taken at its
    word, as one that exits 127 is."""
    if ran.exit_code != _EXECVP_FAILED_EXIT or ran.timed_out:
        return None
    text = ran.stdout if merge_stderr else ran.stderr
    if not merge_stderr and ran.stdout:
        return None
    prefix = f"bwrap: execvp {program}: "
    if not text.startswith(prefix) or not text.endswith("\n"):
        return None
    reason = text[len(prefix):-1]
    if not reason or "\n" in reason:
        return None
    return program_not_run(program, reason in _EXECVP_MISSING, reason, merge_stderr)


class BwrapSandbox:
    def __init__(self, request: evalctl.SandboxRequest, jail: bwrap_jail.BwrapJail):
        self.request = request
        self.jail = jail

    async def run(self, command: str | Sequence[str], *, timeout: float,
                  env: Mapping[str, str] | None = None, stdin: bytes | str | None = None,
                  cwd: str | None = None, merge_stderr: bool = False,
                  output_limit: int | None = None) -> evalctl.CommandResult:
        argv, directory = self.request.command(command, cwd)
        launch = self.jail.launch(argv, self.request.env if env is None else env, directory)
        try:
            # bwrap starts with an empty environment: nothing of evalctl's own reaches it.
            ran = await evalctl.run_process(launch.argv, cwd=self.request.workspace, env={},
                                            timeout=timeout, stdin=stdin,
                                            merge_stderr=merge_stderr,
                                            output_limit=output_limit,
                                            pass_fds=launch.pass_fds,
                                            started=launch.started)
            return _not_run(ran, argv[0], merge_stderr) or ran
        except bwrap_jail.SandboxError as exc:
            # Failed closed: the command never ran. Reported as the limits' shell did.
            message = f"evalctl sandbox: {exc}\n"
            return evalctl.CommandResult(bwrap_jail.WRAPPER_FAILED,
                                         message if merge_stderr else "",
                                         "" if merge_stderr else message)
        finally:
            launch.close()
            await _ended(launch)

    async def close(self) -> None:
        # Usually nothing is left to kill and a few entries are left to look at: done
        # here, since a trip to a thread costs more than that. Anything more, off the loop.
        if self.jail.close_quickly():
            return
        import asyncio  # here, not at the top: `evalctl list-plugins` never needs it

        await asyncio.to_thread(self.jail.close)


def preflight(options: Mapping[str, Any], out_dir: Path) -> str | None:
    """What makes `ro_paths` unusable for every attempt of the run, said before the first
    (each sandbox would refuse to start, and every attempt end as an error): a path that
    does not exist, or one that holds the run's own directory, whose workspaces, ledgers
    and seeds the agent would then see (a newcomer passed `ro_paths=$PWD`)."""
    run_parent = os.path.realpath(out_dir)
    problems = []
    for path in options.get("ro_paths", ()):
        real = os.path.realpath(path)
        if not os.path.exists(real):
            problems.append(f"ro_paths: {path} does not exist")
        elif run_parent == real or run_parent.startswith(real.rstrip("/") + "/"):
            problems.append(
                f"ro_paths: {path} holds the run's directory {out_dir} (its workspaces, "
                "ledgers and seeds would be visible to the agent): put what the agent needs "
                "in a directory of its own, or write the run elsewhere with --out")
    return "; ".join(problems) or None


def _under(path: str, tops: Sequence[str]) -> bool:
    return any(path == top or path.startswith(top.rstrip("/") + "/") for top in tops)


def visible(path: str, options: Mapping[str, Any]) -> bool:
    """Whether a command in the sandbox sees the host's `path` at that same path: as
    written and as its links resolve, it lies in a directory every jail mounts read-only
    at its own place (/usr and the /bin and /lib* directories, the Python installation,
    evalctl's and its plugins' code, `ro_paths` as they resolve), and not in one a jail
    hides (the built-in suites). The /bin and /lib* links are made again inside, so
    /bin/sh is seen where /usr/bin/sh is. Found by a newcomer: an agent's program
    installed here outside them failed every attempt, one by one."""
    roots = [directory for directory in bwrap_jail.SYSTEM_RO_DIRS if os.path.isdir(directory)]
    roots += [link for link in bwrap_jail.SYSTEM_LINKS
              if os.path.isdir(link) and not os.path.islink(link)]
    roots += [str(directory) for directory in bwrap_jail.python_paths()]
    roots += [*_plugin_code_paths(), *(os.path.realpath(p) for p in options.get("ro_paths", ()))]
    links = [link for link in bwrap_jail.SYSTEM_LINKS if os.path.islink(link)]
    written = os.path.normpath(os.path.abspath(path))
    real = os.path.realpath(path)
    if _under(real, [str(hidden) for hidden in _hidden_paths()]):
        return False
    return _under(real, roots) and _under(written, [*roots, *links])


async def create(request: evalctl.SandboxRequest) -> BwrapSandbox:
    options = request.options

    def new_jail() -> bwrap_jail.BwrapJail:
        return bwrap_jail.BwrapJail(
            request.workspace, request.home, request.tmp,
            bwrap_jail.BwrapOptions(
                network=request.network,
                ro_paths=(*_plugin_code_paths(), *options.get("ro_paths", ())),
                max_processes=int(options.get("max_processes", 512)),
                memory_mb=int(options.get("memory_mb", 4096)),
                file_size_mb=int(options.get("file_size_mb", 1024)),
                # Graders run the agent's code beside their own commands: no tracing.
                tracing=request.purpose != "grading",
            ),
            hidden=_hidden_paths(), read_only=request.read_only)

    made: bwrap_jail.BwrapJail | None = None
    if _plugin_code_paths.cache_info().currsize and _hidden_paths.cache_info().currsize:
        # Once this process has opened a jail, the next usually only resolves three paths
        # and takes a pooled cgroup set: done here, since a trip to a thread costs more.
        made = new_jail()
        if made.open_quickly():
            return BwrapSandbox(request, made)

    def open_jail() -> bwrap_jail.BwrapJail:
        jail = made or new_jail()
        jail.open()
        return jail

    import asyncio  # here, not at the top: `evalctl list-plugins` never needs it

    # Off the event loop: the first jail of a process probes bubblewrap and builds the
    # sandbox's /etc, and a jail without a pooled cgroup set creates its cgroups.
    return BwrapSandbox(request, await asyncio.to_thread(open_jail))


def available() -> str | None:
    if not hasattr(os, "pidfd_open") and not Path("/proc/self/ns/user").exists():
        return "bubblewrap needs Linux"
    return bwrap_jail.probe()


@evalctl.hookimpl
def evalctl_register_sandboxes(register):
    register(evalctl.SandboxSpec(
        name="bwrap",
        create=create,
        options_schema=OPTIONS,
        description="Runs each command in a bubblewrap sandbox over the workspace.",
        isolation=ISOLATION,
        isolated=True,
        auto_priority=10,
        available=available,
        limits=bwrap_jail.enforced_limits,
        preflight=preflight,
        visible=visible,
    ))
