"""A third-party reporter (`csv`), provider (`echo`) and sandbox (`recording`) for
evalctl, written against `import evalctl` only, as any plugin package would be."""

from __future__ import annotations

import csv
import io
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import evalctl

# -- reporter: one CSV row per attempt -------------------------------------------------

def write_csv(run: evalctl.RunResult, path: Path) -> Path:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(["task", "attempt", "status", "failed_checks", "cost"])
    for task in run.tasks:
        writer.writerow([task.task_id, task.attempt, task.status,
                         " ".join(c.type for c in task.failed_checks()),
                         evalctl.format_money(task.cost)])
    return evalctl.write_atomically(path, buffer.getvalue())


# -- provider: writes the prompt to answer.txt, then says so ---------------------------

class EchoProvider:
    async def complete(self, request: evalctl.ModelRequest) -> evalctl.ModelTurn:
        if request.turn_index == 0:
            call = evalctl.ToolCall("echo_1", "write_file",
                                    {"path": "answer.txt", "content": request.task["prompt"]})
            return evalctl.ModelTurn(tool_calls=[call], stop_reason=evalctl.StopReason.TOOL_USE,
                                     usage=evalctl.TokenUsage(3, 2), cost=0.0, model="echo")
        return evalctl.ModelTurn(text="Wrote answer.txt.", usage=evalctl.TokenUsage(4, 1),
                                 cost=0.0, model="echo")


# -- sandbox: runs commands like `local`, and logs each one to a file ------------------

class RecordingSandbox:
    def __init__(self, request: evalctl.SandboxRequest):
        self.request = request
        self.log = Path(request.options["log"])

    async def run(self, command: str | Sequence[str], *, timeout: float,
                  env: Mapping[str, str] | None = None, stdin: bytes | str | None = None,
                  cwd: str | None = None, merge_stderr: bool = False,
                  output_limit: int | None = None) -> evalctl.CommandResult:
        argv, directory = self.request.command(command, cwd)
        with self.log.open("a", encoding="utf-8") as handle:
            handle.write(f"{self.request.purpose}\t{self.request.attempt}\t{argv[-1][:60]!r}\n")
        try:
            return await evalctl.run_process(argv, cwd=directory,
                                             env=self.request.env if env is None else env,
                                             timeout=timeout, stdin=stdin,
                                             merge_stderr=merge_stderr,
                                             output_limit=output_limit)
        except OSError as exc:
            if exc.filename != argv[0]:  # not the program: the machine's own failure
                raise
            # The program cannot be run: said as a shell says it, as the sandbox contract
            # asks (127 when it is not there, 126 when it cannot be executed), never
            # raised, which would be the grader's crash.
            missing = isinstance(exc, (FileNotFoundError, NotADirectoryError))
            said = f"{argv[0]}: command not found\n" if missing and "/" not in argv[0] \
                else f"{argv[0]}: {exc.strerror}\n"
            return evalctl.CommandResult(127 if missing else 126,
                                         said if merge_stderr else "",
                                         "" if merge_stderr else said)

    async def close(self) -> None:
        with self.log.open("a", encoding="utf-8") as handle:
            handle.write(f"{self.request.purpose}\t{self.request.attempt}\tclosed\n")


@evalctl.hookimpl
def evalctl_register_reporters(register: Any) -> None:
    register(evalctl.ReporterSpec(name="csv", write=write_csv, extension="csv",
                                  description="One CSV row per attempt."))


@evalctl.hookimpl
def evalctl_register_providers(register: Any) -> None:
    register(evalctl.ProviderSpec(name="echo", create=lambda options: EchoProvider(),
                                  description="Writes the prompt to answer.txt.", live=False))


@evalctl.hookimpl
def evalctl_register_sandboxes(register: Any) -> None:
    register(evalctl.SandboxSpec(
        name="recording", create=RecordingSandbox,
        options_schema={"type": "object", "properties": {"log": {"type": "string"}},
                        "required": ["log"]},
        description="Runs commands unisolated and logs each one.",
        isolation="none; every command is logged", isolated=False, auto_priority=-1))
