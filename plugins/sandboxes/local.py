"""`local`: commands run on this machine as the user running evalctl, without isolation.

For trusted scripted suites and machines without bubblewrap. What it still does: each
command gets the environment evalctl builds from nothing (no credential), starts in the
workspace, runs in its own process group that is killed when the command ends or times
out, and has its output capped. What it does not do: stop a command from reading or
writing anything the user can, from reaching the network, or from outliving the task by
starting a session of its own. evalctl says so wherever it is chosen.
"""

from __future__ import annotations

import errno
from collections.abc import Mapping, Sequence

import evalctl

ISOLATION = ("none: commands run as you, on your files and network; only the environment "
             "(no credentials), the process group and the output are controlled")

# What an exec says of a program that is not there at all (a shell's 127); anything else
# (no permission, a directory, not a program) is one that cannot be executed (126).
NOT_THERE = frozenset({errno.ENOENT, errno.ENOTDIR})
NOT_FOUND_EXIT, NOT_EXECUTABLE_EXIT = 127, 126


def _shell_script(program: str, env: Mapping[str, str]) -> str | None:
    """The file `program` names, as execvp finds it: itself when it holds a slash, else
    the first of its name on `env`'s PATH."""
    import shutil

    return program if "/" in program else shutil.which(program, path=env.get("PATH"))


def program_not_run(program: str, missing: bool, reason: str,
                    merge_stderr: bool) -> evalctl.CommandResult:
    """The result of a command whose program could not be run, as a shell reports it and
    every built-in sandbox's run() returns it: exit 127 when there is no such program (a
    bare name found nowhere on PATH: "NAME: command not found"; a path to nothing), 126
    when there is one that cannot be executed (no permission, a directory), the reason on
    stderr (on stdout with merge_stderr). Nothing ran."""
    said = f"{program}: command not found" if missing and "/" not in program else \
        f"{program}: {reason}"
    message = said + "\n"
    return evalctl.CommandResult(NOT_FOUND_EXIT if missing else NOT_EXECUTABLE_EXIT,
                                 message if merge_stderr else "",
                                 "" if merge_stderr else message)


class LocalSandbox:
    def __init__(self, request: evalctl.SandboxRequest):
        self.request = request

    async def run(self, command: str | Sequence[str], *, timeout: float,
                  env: Mapping[str, str] | None = None, stdin: bytes | str | None = None,
                  cwd: str | None = None, merge_stderr: bool = False,
                  output_limit: int | None = None) -> evalctl.CommandResult:
        argv, directory = self.request.command(command, cwd)
        env = self.request.env if env is None else env
        try:
            try:
                return await evalctl.run_process(
                    argv, cwd=directory, env=env, timeout=timeout, stdin=stdin,
                    merge_stderr=merge_stderr, output_limit=output_limit)
            except OSError as exc:
                script = _shell_script(argv[0], env) \
                    if exc.errno == errno.ENOEXEC and exc.filename == argv[0] else None
                if script is None:
                    raise
                # An executable file that is no program (a script without #!): run by
                # /bin/sh, as execvp (bwrap's) and a shell run it.
                return await evalctl.run_process(
                    ["/bin/sh", script, *argv[1:]], cwd=directory, env=env,
                    timeout=timeout, stdin=stdin, merge_stderr=merge_stderr,
                    output_limit=output_limit)
        except OSError as exc:
            # The program itself could not be executed (Popen names it as the file):
            # said as a shell says it, as bwrap's run says it (found by a newcomer: the
            # same missing program was a grader's crash here, an exit 1 under bwrap).
            # Anything else (no such directory, no descriptor left) is the machine's.
            if exc.filename != argv[0] or exc.errno is None:
                raise
            return program_not_run(argv[0], exc.errno in NOT_THERE,
                                   exc.strerror or str(exc), merge_stderr)

    async def close(self) -> None:
        """Nothing to tear down: each command's process group died with the command."""


@evalctl.hookimpl
def evalctl_register_sandboxes(register):
    register(evalctl.SandboxSpec(
        name="local",
        create=LocalSandbox,
        description="Runs commands directly on this machine (no isolation).",
        isolation=ISOLATION,
        isolated=False,
        auto_priority=0,
    ))
