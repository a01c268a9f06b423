"""`local`: commands run on this machine as the user running evalctl, without isolation.

For trusted scripted suites and machines without bubblewrap. What it still does: each
command gets the environment evalctl builds from nothing (no credential), starts in the
workspace, runs in its own process group that is killed when the command ends or times
out, and has its output capped. What it does not do: stop a command from reading or
writing anything the user can, from reaching the network, or from outliving the task by
starting a session of its own. evalctl says so wherever it is chosen.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import evalctl

ISOLATION = ("none: commands run as you, on your files and network; only the environment "
             "(no credentials), the process group and the output are controlled")


class LocalSandbox:
    def __init__(self, request: evalctl.SandboxRequest):
        self.request = request

    async def run(self, command: str | Sequence[str], *, timeout: float,
                  env: Mapping[str, str] | None = None, stdin: bytes | str | None = None,
                  cwd: str | None = None, merge_stderr: bool = False,
                  output_limit: int | None = None) -> evalctl.CommandResult:
        argv, directory = self.request.command(command, cwd)
        return await evalctl.run_process(
            argv, cwd=directory, env=self.request.env if env is None else env,
            timeout=timeout, stdin=stdin, merge_stderr=merge_stderr, output_limit=output_limit)

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
