"""Graders that run something in the workspace: `command`, `tests_pass`, `python`.

Each runs in the attempt's grading sandbox (a fresh one, after the agent's has been
closed) with a timeout, so a crash or a hang fails only its check and nothing the
workspace holds runs outside the sandbox.
"""

from __future__ import annotations

import json
import marshal
import re
import secrets
import sys
from pathlib import Path
from typing import Any

import evalctl
from evalctl.plugins.graders import tests_pass

TAIL = 1_500
TIMEOUT = {"type": "number", "exclusiveMinimum": 0, "description": "Seconds (default 60)."}


def _tail(output: str) -> str:
    return evalctl.truncate(output.strip(), TAIL, keep="tail")


async def _run(result: evalctl.AgentResult, command: str | list[str], timeout: float,
               stdin: bytes | str | None = None) -> evalctl.CommandResult:
    if result.sandbox is None:
        raise RuntimeError("this grader runs commands, and the run gave it no sandbox")
    return await result.sandbox.run(command, timeout=timeout, stdin=stdin, merge_stderr=True)


async def grade_command(check: dict[str, Any], workspace: Path,
                        result: evalctl.AgentResult) -> evalctl.CheckResult:
    timeout = check.get("timeout", 60)
    ran = await _run(result, check["command"], timeout)
    if ran.timed_out:
        return evalctl.CheckResult(False, f"timed out after {timeout:g}s\n{_tail(ran.stdout)}")
    if ran.exit_code == 0:
        return evalctl.CheckResult(True, f"exit 0\n{_tail(ran.stdout)}".strip())
    programs = programs_of(check["command"]) if ran.exit_code == 127 else []
    absent = [program for program in programs if not await _found_in_sandbox(result, program)]
    if absent:
        program = absent[0]
        # Found on the host's PATH by the preflight, but not where the check runs (bwrap
        # mounts the system's directories, not ~/.cargo/bin, say): the suite's or the
        # machine's doing, an error, not the agent's failure (found by an attacker round).
        # Asked of a shell of its own, which runs nothing of the agent's: the check's own
        # exit 127 and output could be the agent's code's.
        raise evalctl.GraderUnavailable(
            f"the check's program {program!r} is not found in the sandbox the checks run "
            "in; under bwrap, add its directory with --sandbox-option ro_paths=DIR")
    return evalctl.CheckResult(False, f"exit {ran.exit_code}\n{_tail(ran.stdout)}".strip())


async def _found_in_sandbox(result: evalctl.AgentResult, program: str) -> bool:
    probe = await _run(result, ["bash", "-c", 'command -v -- "$1" >/dev/null', "bash",
                                program], 30)
    return probe.exit_code == 0


# Words bash runs without looking on PATH: a check starting with one says nothing of what
# is installed.
_SHELL_WORDS_TEXT = (
    "alias bg bind break builtin caller cd command compgen complete compopt continue "
    "declare dirs disown echo enable eval exec exit export false fc fg getopts hash help "
    "history jobs kill let local logout mapfile popd printf pushd pwd read readarray "
    "readonly return set shift shopt source suspend test times trap true type typeset "
    "ulimit umask unalias unset wait . : [ [[ ! { if then else elif fi case esac for "
    "select while until do done in function time coproc")
_SHELL_WORDS = frozenset(_SHELL_WORDS_TEXT.split())
_PLAIN_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.+-]*$")


# Commands that run the program after their own options: the program is looked up past
# them (found by a newcomer: `timeout 30 shellcheck a.sh` was not).
_WRAPPERS = {"timeout": 1, "env": 0, "nice": 0, "nohup": 0, "time": 0, "stdbuf": 0}
# Their options that take a value as the next word (`timeout -k 5 60 x`, `nice -n 10 x`).
_WRAPPER_VALUES = {"timeout": {"-k", "--kill-after", "-s", "--signal"},
                   "nice": {"-n", "--adjustment"}, "env": {"-u", "--unset", "-C", "--chdir"},
                   "stdbuf": {"-i", "-o", "-e"}}


def programs_of(command: str) -> list[str]:
    """The programs a check's command surely runs that bash looks up on PATH: the first
    of its first line (past `VAR=value`s, a `cd DIR &&`, and wrappers such as `timeout
    30` or `env`), and those of the stages piped from it. Plain names only (not a path,
    a builtin, a keyword or anything the shell expands); none when the line cannot be
    split as a shell would. What runs after `||`, `;` or on later lines may be meant to
    be missing (`command -v x || ...`), so it is not looked at."""
    import shlex

    try:
        lexer = shlex.shlex(command.strip().split("\n", 1)[0], posix=True,
                            punctuation_chars=True)
        lexer.whitespace_split = True
        lexer.commenters = "#"
        words = list(lexer)
    except ValueError:
        return []
    stages: list[list[str]] = [[]]
    for word in words:
        if word == "&&" and stages[-1][:1] == ["cd"] and len(stages) == 1:
            stages[-1] = []  # `cd DIR && program`: the program is what runs
        elif word == "|":
            stages.append([])
        elif word and set(word) <= set("&|;()<>"):
            break  # `&&` after a program, `||`, `;`, redirections: what follows may not run
        else:
            stages[-1].append(word)
    found = []
    for stage in stages:
        program = _program(stage)
        if program is not None and program not in found:
            found.append(program)
    return found


def _program(words: list[str]) -> str | None:
    """The program a simple command's words run, past assignments and wrappers."""
    while words:
        if re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", words[0]):
            words = words[1:]  # VAR=value before the program
            continue
        wrapper = words[0]
        skip = _WRAPPERS.get(wrapper)
        if skip is None:
            break
        words = words[1:]
        while words and words[0].startswith("-"):
            takes_value = words[0] in _WRAPPER_VALUES.get(wrapper, ())
            words = words[2 if takes_value else 1:]  # the wrapper's own options
        words = words[skip:]  # and its operands (timeout's duration)
    if not words or words[0] in _SHELL_WORDS or not _PLAIN_NAME.match(words[0]) or \
            words[0].isdigit():  # an operand of a wrapper's not known here, not a program
        return None
    return words[0]


def preflight_command(checks: list[dict[str, Any]]) -> None:
    """Every check whose command starts with a program that is not installed here,
    refused before any task (exit 2): it would fail every attempt with exit 127,
    counted as the agent's failure (found by a newcomer). Looked up on the PATH checks
    run with: evalctl's own interpreter's directory, then the user's. A program the
    agent builds is named by its path (`./build/tool`), and is not looked up."""
    import shutil

    path = evalctl.command_path()
    missing = sorted({program for check in checks
                      for program in programs_of(str(check.get("command", "")))
                      if shutil.which(program, path=path) is None})
    if missing:
        raise evalctl.UsageError(
            f"the command(s) {', '.join(map(repr, missing))} are not installed here (not "
            "found on PATH): install them, or name a program the agent builds by its path "
            "(./build/tool)")


# The python check's runner: a fresh interpreter (-I: no environment variables, no user
# site, not the current directory first on sys.path) reads the check from standard input,
# runs it with `workspace` and `result` in scope, and only when the check's code ran to
# its end prints a line with the nonce it was given. An agent's module that calls
# os._exit(0) or raises SystemExit(0) while the check imports it ends the interpreter
# before that line, which is how the grader tells "held" from "never finished".
#
# The plan comes marshalled (the same interpreter writes and reads it), and traceback is
# imported only when the check fails: json and traceback were a quarter of a passing
# check's time (about 5 of 21 ms), as much as the interpreter's own start-up.
RUNNER = r"""
import marshal, os, sys, types
from pathlib import Path


def main():
    # Taken before the check's code runs: the agent's code it imports could replace
    # sys.exit, print or os._exit, but not these references.
    hard_exit, write, out = os._exit, os.write, os.dup(1)
    data = sys.stdin.buffer.read()
    size = int.from_bytes(data[:8], "big")
    plan = marshal.loads(data[8:8 + size])
    # As a text stream reads it: UTF-8, any line ending a newline.
    code = data[8 + size:].decode("utf-8").replace("\r\n", "\n").replace("\r", "\n")
    end_line = plan.pop("end_line")
    workspace = Path(plan["workspace"])
    sys.path.append(str(workspace))  # importable, but after the standard library
    result = types.SimpleNamespace(**plan["result"])
    result.usage = types.SimpleNamespace(**plan["result"]["usage"])
    namespace = {"__name__": "__check__", "workspace": workspace, "result": result}
    try:
        exec(compile(code, "<check>", "exec"), namespace)
    except SystemExit as exc:
        write(2, f"the check did not run to its end: SystemExit({exc.code!r}) was raised\n"
                 .encode())
        hard_exit(3)
    except BaseException:
        import traceback

        kind, error, frames = sys.exc_info()
        while frames is not None and frames.tb_frame.f_code.co_filename != "<check>":
            frames = frames.tb_next
        try:
            text = "".join(traceback.format_exception(kind, error, frames))
        except BaseException:
            text = f"{kind.__name__}: (its message could not be shown)\n"
        write(2, text.encode("utf-8", "backslashreplace"))
        hard_exit(1)
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except BaseException:
        pass
    write(out, ("\n" + end_line + "\n").encode())
    hard_exit(0)


main()
"""
END_MARK = "evalctl-check-finished:"


async def grade_python(check: dict[str, Any], workspace: Path,
                       result: evalctl.AgentResult) -> evalctl.CheckResult:
    timeout = check.get("timeout", 60)
    end_line = END_MARK + secrets.token_hex(16)
    data = result.to_dict()
    # The ledger is evalctl's record, out of the sandbox's reach: the check gets a copy.
    data["events"] = _ledger_events(result.ledger_path)
    # Through JSON first: the check sees exactly the values a JSON report holds (lists,
    # not tuples); then marshalled, for the runner, with its length, and the code after.
    plan = marshal.dumps(json.loads(json.dumps(
        {"workspace": str(workspace), "result": data, "end_line": end_line})))
    ran = await _run(result, [sys.executable, "-I", "-c", RUNNER], timeout,
                     stdin=len(plan).to_bytes(8, "big") + plan + check["code"].encode("utf-8"))
    if ran.timed_out:
        return evalctl.CheckResult(False, f"the assertion timed out after {timeout:g}s")
    output, finished = _without_end_line(ran.stdout, end_line)
    if ran.exit_code == 0 and finished:
        return evalctl.CheckResult(True, "the assertion held" + (f"\n{_tail(output)}" if
                                                                  output.strip() else ""))
    if ran.exit_code == 0:
        return evalctl.CheckResult(
            False, "suspected gaming: the interpreter exited with status 0 before the check's "
                   "code reached its end (something it ran, such as an import of the agent's "
                   "code, called os._exit(0) or ended the process)" +
                   (f"\n{_tail(output)}" if output.strip() else ""), suspected_gaming=True)
    if ran.exit_code == 3 and "SystemExit(" in output:
        code_zero = "SystemExit(0)" in output or "SystemExit(None)" in output
        return evalctl.CheckResult(
            False, ("suspected gaming: " if code_zero else "") + _tail(output),
            suspected_gaming=code_zero)
    return evalctl.CheckResult(False, _explain_failure(output, ran.exit_code))


def preflight_python(checks: list[dict[str, Any]]) -> None:
    """Every check's code compiled before any task starts (as the runner compiles it):
    code that cannot run is the suite's mistake, exit 2, not a failure of every agent."""
    problems = []
    for check in checks:
        code = check["code"].replace("\r\n", "\n").replace("\r", "\n")
        try:
            compile(code, "<check>", "exec")
        except (SyntaxError, ValueError) as exc:  # ValueError: a NUL in the code
            where = f"line {exc.lineno}: " if getattr(exc, "lineno", None) else ""
            first = code.strip().splitlines()[0][:60] if code.strip() else ""
            problems.append(f"the python check starting {first!r} does not compile: {where}"
                            f"{getattr(exc, 'msg', None) or exc}")
    if problems:
        raise evalctl.UsageError("; ".join(problems))


def _ledger_events(path: Path | None) -> list[Any]:
    if path is None or not path.is_file():
        return []
    events = []
    # JSON Lines end at "\n" alone: splitlines() would also split at U+2028, U+2029 and
    # U+0085, which the ledger keeps as they are inside strings, and an agent that put
    # one in a command would lose that event from what the check sees.
    for line in path.read_text(encoding="utf-8", errors="replace").split("\n"):
        try:
            events.append(json.loads(line))
        except (ValueError, RecursionError):
            continue  # a line being written as the agent was stopped, or nested past reading
    return events


def _without_end_line(output: str, end_line: str) -> tuple[str, bool]:
    """The output without the runner's end line, and whether that line was printed."""
    text = output.rstrip("\n")
    if text.endswith(end_line):
        return text[: -len(end_line)].rstrip("\n"), True
    return output, False


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
        preflight=preflight_command,
        params_schema={
            "type": "object",
            "properties": {"command": {"type": "string", "minLength": 1,
                                       "pattern": "^[^\\x00]*$",
                                       "description": "A bash command (no NUL byte); exit 0 "
                                                      "passes."},
                           "timeout": TIMEOUT},
            "required": ["command"],
        },
        description="Does a bash command, run in the workspace after the agent finished, "
                    "exit 0? A command that starts with a program not installed here (not "
                    "on PATH) stops the run before any task, exit 2: it would fail every "
                    "agent. Name a program the agent builds by its path (./build/tool). A "
                    "check that exits 127 because its first program is not in the sandbox "
                    "(bwrap does not mount ~/.cargo/bin, say) is an error, not a failure: a "
                    "shell of its own, which runs nothing of the agent's, is asked.",
        example="- type: command\n  command: python fizzbuzz.py | tail -n 1 | grep -qx FizzBuzz"
                "\n  timeout: 30",
        trusts="Trusts the command's exit status, and that the suite wrote the command. The "
               "command runs in the grading sandbox, so it cannot reach outside the workspace "
               "under bwrap, where its processes cannot trace each other or write each "
               "other's memory either: in `python3 solution.py | grep -qx 42` the agent's "
               "code cannot make the shell report success. But whatever of the agent's the "
               "command runs last (a script it calls, say) decides that exit status, and a "
               "Python program the command runs, even the suite's own hidden script, imports "
               "the workspace's modules ahead of the standard library (Python puts the "
               "script's directory, or the current one for -c, first on sys.path): an "
               "agent's json.py stands in for json. To run Python of the suite's against the "
               "agent's work, use the `python` check, which puts the workspace last.",
    ))
    register(evalctl.GraderSpec(
        name="tests_pass",
        grade=tests_pass.grade_tests_pass,
        preflight=tests_pass.preflight,
        named_paths=tests_pass.named_paths,
        params_schema=tests_pass.PARAMS,
        description="Do the workspace's tests pass, as evalctl's own pytest plugin saw them "
                    "run? Configured by evalctl, not the workspace: an agent-written conftest.py "
                    "fails the check, an agent-changed pytest configuration is replaced by the "
                    "seeded one, and collecting or running no tests is a failure. Needs pytest "
                    "installed beside evalctl, or in the interpreter `python:` names.",
        example="- type: tests_pass\n  tests:\n    - tests/test_slugify.py",
        trusts=tests_pass.TRUSTS,
    ))
    register(evalctl.GraderSpec(
        name="python",
        grade=grade_python,
        preflight=preflight_python,
        validate_with_preflight=True,
        params_schema={
            "type": "object",
            "properties": {
                "code": {"type": "string", "minLength": 1,
                         "description": "Python statements, usually asserts, with `workspace` "
                                        "(a pathlib.Path, also on sys.path after the standard "
                                        "library, and the current directory) and `result` "
                                        "(the agent's "
                                        "result, see docs/plugins.md; `result.events` is its "
                                        "ledger as a list of events) in scope. Passes when it "
                                        "runs to its end without raising."},
                "timeout": TIMEOUT,
            },
            "required": ["code"],
        },
        description="Does a Python assertion about the workspace hold? It runs in a "
                    "subprocess, so a crash or a hang fails only this check.",
        example="- type: python\n  code: |\n    import json\n"
                "    data = json.loads((workspace / \"people.json\").read_text())\n"
                "    assert len(data) == 3, data",
        trusts="Trusts an end-of-check line, with a fresh nonce, that its interpreter writes "
               "(through references taken before the check ran) only after the check's code "
               "ran to its end: an early os._exit(0), SystemExit(0) or a replaced sys.exit in "
               "the agent's code fails it, as suspected gaming where the exit said success. "
               "The workspace is on sys.path after the standard library, so an agent's "
               "csv.py cannot stand in for the real one. Code written to read the nonce from "
               "its own process could forge the line.",
    ))
