"""Graders that run something in the workspace: `command`, `tests_pass`, `python`.

Each runs in a subprocess with a timeout, in its own process group, with provider
credentials scrubbed from the environment, so a crash or a hang cannot take the run
down.
"""

from __future__ import annotations

import contextlib
import json
import re
import sys
import tempfile
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import evalctl

# evalctl._agent.tools (and with it asyncio) is imported when a check runs, not when the
# plugin loads: list-plugins and --help stay fast.

TAIL = 1_500
TIMEOUT = {"type": "number", "exclusiveMinimum": 0, "description": "Seconds (default 60)."}


def _tail(output: str) -> str:
    output = output.strip()
    return output if len(output) <= TAIL else "..." + output[-TAIL:]


@contextlib.contextmanager
def _grader_environment() -> Iterator[tuple[Path, dict[str, str]]]:
    """A scratch directory (HOME and TMPDIR) and an environment without credentials."""
    from evalctl._agent.tools import scrubbed_environment

    with tempfile.TemporaryDirectory(prefix="evalctl-grader-") as scratch:
        yield Path(scratch), scrubbed_environment(Path(scratch), Path(scratch))


async def _run(command: str, workspace: Path, timeout: float) -> tuple[int | None, str, bool]:
    from evalctl._process import run_command

    with _grader_environment() as (_, env):
        return await run_command(command, cwd=workspace, env=env, timeout=timeout)


async def grade_command(check: dict[str, Any], workspace: Path,
                        result: evalctl.AgentResult) -> evalctl.CheckResult:
    timeout = check.get("timeout", 60)
    code, output, timed_out = await _run(check["command"], workspace, timeout)
    if timed_out:
        return evalctl.CheckResult(False, f"timed out after {timeout:g}s\n{_tail(output)}")
    if code == 0:
        return evalctl.CheckResult(True, f"exit 0\n{_tail(output)}".strip())
    return evalctl.CheckResult(False, f"exit {code}\n{_tail(output)}".strip())


RUNNER_DURATION = re.compile(r" in \d+(?:\.\d+)?s\b")
NO_TESTS = re.compile(r"\bno tests ran\b|\bcollected 0 items\b|\bRan 0 tests\b")


async def grade_tests_pass(check: dict[str, Any], workspace: Path,
                           result: evalctl.AgentResult) -> evalctl.CheckResult:
    default = f"{_quote(sys.executable)} -m pytest -q -p no:cacheprovider"
    command = check.get("command", default)
    timeout = check.get("timeout", 300)
    code, output, timed_out = await _run(command, workspace, timeout)
    # Test runners print their duration; without it, the detail of a scripted run is the
    # same every time and the JSON report diffs cleanly.
    output = RUNNER_DURATION.sub("", output)
    if timed_out:
        return evalctl.CheckResult(False, f"tests timed out after {timeout:g}s\n{_tail(output)}")
    if code == 5 or NO_TESTS.search(output):
        return evalctl.CheckResult(False, f"no tests were collected\n{_tail(output)}")
    if code == 0:
        return evalctl.CheckResult(True, _tail(output).splitlines()[-1] if output.strip() else
                                   "tests passed")
    return evalctl.CheckResult(False, f"tests failed (exit {code})\n{_tail(output)}")


def _quote(text: str) -> str:
    import shlex

    return shlex.quote(text)


def _check_body(code: str, workspace: Path, data: dict[str, Any]) -> Callable[[], None]:
    """The check's code with `workspace` and `result` in scope, as a function to run in a
    forked child or a fresh interpreter; an exception shows only the check's frames."""
    import types

    def body() -> None:
        sys.path.insert(0, str(workspace))  # as `python -c` in the workspace would have it
        result = types.SimpleNamespace(**data)
        result.usage = types.SimpleNamespace(**data["usage"])
        namespace = {"__name__": "__check__", "workspace": workspace, "result": result}
        try:
            exec(compile(code, "<check>", "exec"), namespace)
        except Exception:
            kind, error, frames = sys.exc_info()
            while frames is not None and frames.tb_frame.f_code.co_filename != "<check>":
                frames = frames.tb_next
            traceback.print_exception(kind, error, frames)
            raise SystemExit(1) from None

    return body


def run_check_file(path: str) -> None:
    """Entry for the spawned form: run the check described by a JSON file."""
    payload = json.loads(Path(path).read_text(encoding="utf-8"))
    _check_body(payload["code"], Path(payload["workspace"]), payload["result"])()


async def grade_python(check: dict[str, Any], workspace: Path,
                       result: evalctl.AgentResult) -> evalctl.CheckResult:
    from evalctl._process import can_fork, run_command, run_forked

    timeout = check.get("timeout", 60)
    with _grader_environment() as (scratch, env):
        if can_fork():
            # A fork of this process starts in about a millisecond; a new interpreter
            # costs 20 ms or more, and suites are full of these checks.
            code, output, timed_out = await run_forked(
                _check_body(check["code"], workspace, result.to_dict()), workspace, env,
                timeout)
        else:
            payload = scratch / "check.json"
            payload.write_text(json.dumps({"code": check["code"], "workspace": str(workspace),
                                           "result": result.to_dict()}), encoding="utf-8")
            program = (f"from {__name__} import run_check_file; "
                       f"run_check_file({str(payload)!r})")
            command = f"{_quote(sys.executable)} -c {_quote(program)}"
            code, output, timed_out = await run_command(command, workspace, env, timeout)
    if timed_out:
        return evalctl.CheckResult(False, f"the assertion timed out after {timeout:g}s")
    if code == 0:
        return evalctl.CheckResult(True, "the assertion held" + (f"\n{_tail(output)}" if
                                                                  output.strip() else ""))
    return evalctl.CheckResult(False, _explain_failure(output, code))


def _explain_failure(output: str, code: int | None) -> str:
    lines = [line for line in output.strip().splitlines() if line.strip()]
    if not lines:
        return f"the check's code exited with {code}"
    last = lines[-1]
    if last.startswith("AssertionError"):
        message = last.partition(":")[2].strip()
        where = next((line.strip() for line in reversed(lines) if '"<check>"' in line), "")
        return f"assertion failed{': ' + message if message else ''} ({where})".replace(" ()", "")
    return f"the check's code raised {last}\n{_tail(output)}"


@evalctl.hookimpl
def evalctl_register_graders(register):
    register(evalctl.GraderSpec(
        name="command",
        grade=grade_command,
        params_schema={
            "type": "object",
            "properties": {"command": {"type": "string", "minLength": 1,
                                       "description": "A bash command; exit 0 passes."},
                           "timeout": TIMEOUT},
            "required": ["command"],
        },
        description="Does a bash command, run in the workspace after the agent finished, "
                    "exit 0?",
        example="- type: command\n  command: python fizzbuzz.py | tail -n 1 | grep -qx FizzBuzz"
                "\n  timeout: 30",
    ))
    register(evalctl.GraderSpec(
        name="tests_pass",
        grade=grade_tests_pass,
        params_schema={
            "type": "object",
            "properties": {
                "command": {"type": "string", "minLength": 1,
                            "description": "Test command (default: the harness's "
                                           "`python -m pytest -q`)."},
                "timeout": {**TIMEOUT, "description": "Seconds (default 300)."},
            },
        },
        description="Do the workspace's tests pass? Collecting no tests is a failure. The "
                    "default command needs pytest installed beside evalctl.",
        example="- type: tests_pass",
    ))
    register(evalctl.GraderSpec(
        name="python",
        grade=grade_python,
        params_schema={
            "type": "object",
            "properties": {
                "code": {"type": "string", "minLength": 1,
                         "description": "Python statements, usually asserts, with `workspace` "
                                        "(a pathlib.Path, also first on sys.path and the "
                                        "current directory) and `result` (the agent's "
                                        "result) in scope. Passes when it raises nothing."},
                "timeout": TIMEOUT,
            },
            "required": ["code"],
        },
        description="Does a Python assertion about the workspace hold? It runs in a "
                    "subprocess, so a crash or a hang fails only this check.",
        example="- type: python\n  code: |\n    import json\n"
                "    data = json.loads((workspace / \"people.json\").read_text())\n"
                "    assert len(data) == 3, data",
    ))
