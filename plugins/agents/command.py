"""`command`: any CLI agent, run inside the attempt's sandbox, in the workspace.

The prompt reaches it as an argument (`{prompt}` in `argv`), in a file (`{prompt_file}`)
or on its standard input (neither). Its model calls go through evalctl's model proxy
(ANTHROPIC_BASE_URL and a per-attempt ANTHROPIC_API_KEY in its environment), which
meters and limits them; the task's seconds are its timeout; its exit code and output go
to the ledger. `claude-code` is a preset of it: Claude Code headless.
"""

from __future__ import annotations

import json
import os
import shlex
from collections.abc import Callable, Mapping
from typing import Any

import evalctl

PROMPT = "{prompt}"
PROMPT_FILE = "{prompt_file}"
PROMPT_FILE_NAME = "evalctl-prompt.md"

OPTIONS = {
    "type": "object",
    "properties": {
        "argv": {"type": "string", "minLength": 1,
                 "description": "The command line, split like a shell does (no pipes or "
                                "variables). {prompt} is replaced by the task's prompt, "
                                "{prompt_file} by the path of a file that holds it; with "
                                "neither, the prompt is the command's standard input."},
        "env": {"type": "array", "items": {"type": "string", "pattern": "^[A-Za-z_][A-Za-z0-9_]*="},
                "description": "NAME=VALUE variables for the agent (comma-separated on the "
                               "command line). Never put a real API key here: the agent gets "
                               "the proxy's own."},
        "path": {"type": "array", "items": {"type": "string", "minLength": 1},
                 "description": "Directories put first on the agent's PATH (where the CLI is "
                                "installed; under bwrap mount them too: --sandbox-option "
                                "ro_paths=DIR)."},
        "final_text": {"type": "string", "pattern": r"^(model|stdout|json:.+)(?![\s\S])",
                       "description": "What the agent said last, for talk-only checks: "
                                      "model (the last model turn's text, the default), "
                                      "stdout, or json:KEY (that key of the JSON it printed)."},
        "model_proxy": {"type": "boolean",
                        "description": "Serve the Messages API to the agent (default true). "
                                       "Without it the agent has no model: for tests."},
    },
    "required": ["argv"],
}

CLAUDE_CODE = {
    "argv": "claude -p {prompt} --output-format json --dangerously-skip-permissions",
    # Headless, and nothing but the model proxy: no auto-update, telemetry, error
    # reports or side traffic (bwrap has no network anyway; these avoid waiting on it).
    "env": ["DISABLE_AUTOUPDATER=1", "DISABLE_TELEMETRY=1", "DISABLE_ERROR_REPORTING=1",
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1", "DISABLE_NON_ESSENTIAL_MODEL_CALLS=1",
            "CLAUDE_CODE_DISABLE_TERMINAL_TITLE=1"],
    "final_text": "json:result",
}


def command_script(argv: str, prompt: str) -> tuple[str, str | None]:
    """The bash script that runs `argv` with the prompt delivered, and its stdin."""
    try:
        words = shlex.split(argv)
    except ValueError as exc:
        raise evalctl.UsageError(f"agent option argv: {exc}: {argv!r}") from None
    if not words:
        raise evalctl.UsageError("agent option argv is empty")
    quoted = []
    by_file = False
    for word in words:
        if PROMPT_FILE in word:
            by_file = True
            pieces = [shlex.quote(piece) for piece in word.split(PROMPT_FILE)]
            quoted.append(f'"$TMPDIR/{PROMPT_FILE_NAME}"'.join(pieces))
        else:
            quoted.append(shlex.quote(word.replace(PROMPT, prompt)))
    command = " ".join(quoted)
    if by_file:  # the prompt arrives on stdin and goes to the file; the agent reads nothing
        return f'cat > "$TMPDIR/{PROMPT_FILE_NAME}"\n{command} < /dev/null', prompt
    if PROMPT in argv:
        return command, None
    return command, prompt


def _final_text(how: str, model_text: str, result: evalctl.CommandResult) -> str:
    if how == "stdout":
        return result.stdout.strip()
    if how.startswith("json:"):
        key = how.removeprefix("json:")
        try:
            document: Any = json.loads(result.stdout)
        except (ValueError, RecursionError):  # not JSON, or nested past reading
            return model_text
        value = document.get(key) if isinstance(document, dict) else None
        return value if isinstance(value, str) else model_text
    return model_text


async def run(context: evalctl.AgentContext) -> evalctl.AgentOutcome:
    options = context.options
    script, stdin = command_script(options["argv"], context.prompt)
    env = dict(name_value.split("=", 1) for name_value in options.get("env", ()))
    if options.get("path"):
        env["PATH"] = ":".join([*options["path"], env.get("PATH") or context.env.get("PATH", "")])
    outcome, result = await context.run_command(
        script, env=env, stdin=stdin, model_proxy=options.get("model_proxy", True))
    final_text = _final_text(options.get("final_text", "model"), outcome.final_text, result)
    return evalctl.AgentOutcome(outcome.exit_status, final_text, outcome.error,
                                outcome.tool_calls)


# What a shell would do in a command line and argv does not: its words run as they are.
_OPERATORS = {"||": "a command list", "&&": "a command list", ">>": "a redirection",
              "|": "a pipe", ";": "a command list", "&": "a background job",
              "<": "a redirection", ">": "a redirection", "(": "a subshell", ")": "a subshell"}


def shell_syntax(argv: str) -> str | None:
    """The first piece of shell syntax in `argv` outside quotes (a pipe, a redirection,
    `&&`, `;`, a `$VAR`, `${...}`, `$(...)` or backticks, a leading `~`), in words, or
    None. argv is split into words and run as they are, so these reached the agent as
    literal arguments (found by a newcomer: `{prompt} | tee out.log` gave the agent
    '|', 'tee' and 'out.log', and exited 0). Quoted ('|', '$x') they are the agent's text."""
    quote = ""
    start_of_word = True
    index = 0
    while index < len(argv):
        char = argv[index]
        if quote == "'":
            quote = "" if char == "'" else quote
        elif char == "\\":
            index += 1  # the next character is escaped
        elif char == "$" and index + 1 < len(argv) and (
                argv[index + 1] in "{(" or argv[index + 1].isalpha() or argv[index + 1] == "_"):
            end = index + 2
            while end < len(argv) and (argv[end].isalnum() or argv[end] == "_"):
                end += 1
            shown = {"{": "${...}", "(": "$(...)"}.get(argv[index + 1], argv[index:end])
            return f"a variable or substitution '{shown}'"
        elif char == "`":
            return "a command substitution '`...`'"
        elif quote == '"':
            quote = "" if char == '"' else quote
        elif char in "'\"":
            quote = char
        elif char in _OPERATORS:
            token = argv[index:index + 2] if argv[index:index + 2] in _OPERATORS else char
            return f"{_OPERATORS[token]} '{token}'"
        elif char == "~" and start_of_word:
            return "a home directory (~), which only a shell expands"
        start_of_word = char.isspace()
        index += 1
    return None


def check_option(key: str, value: Any) -> str | None:
    """What is wrong with an option's value on any machine, or None: an `argv` holding
    shell syntax, which no shell reads, or one that cannot be split into words. Said at
    its line in evalctl.toml, for every preset there, used by the run or not (found by
    a newcomer: a preset's pipe was said without its line, and only by a run using it)."""
    if key != "argv" or not isinstance(value, str):
        return None
    syntax = shell_syntax(value)
    if syntax:
        return (f"{value!r} holds {syntax}: argv is not run by a shell but split into "
                "words, each given to the program as it is. Put the command line in a "
                "script and run that (argv='bash /path/to/run-agent.sh {prompt}', the script "
                "doing `python agent.py \"$1\" | tee out.log`), and write paths out in full "
                "({prompt} and {prompt_file} are replaced, nothing else is)")
    try:
        shlex.split(value)
    except ValueError as exc:
        # Found by a newcomer: every attempt was then an internal error, which a resume
        # cannot fix (it refuses changed options).
        return (f"{value!r} cannot be split into words ({str(exc).lower()}): close the "
                "quote, or drop the trailing backslash")
    return None


def preflight(options: Mapping[str, Any],
              visible: Callable[[str], bool] = lambda path: True) -> str | None:
    """Why the agent cannot run as given, or None: a program not found on this machine,
    looked up as the sandbox's PATH is made (the agent's `path` option, evalctl's
    interpreter's directory, then yours), or found here but out of the sandbox's reach
    (`visible`: what the run's sandbox shows), as are the interpreter its `#!` line names
    and a script it is given first (`python /opt/agent/agent.py`). Found by newcomers:
    `claude` not installed, or installed outside what bwrap mounts, failed every attempt
    one by one. Its argv's own mistakes are `check_option`'s, said before."""
    argv = str(options.get("argv", ""))
    try:
        words = shlex.split(argv)
    except ValueError:
        return None  # check_option's to say, before any preflight
    if not words:
        return None
    search = [*options.get("path", ()), *evalctl.command_path().split(os.pathsep)]
    program = words[0]
    if "/" in program:
        if not (os.path.isfile(program) and os.access(program, os.X_OK)):
            return f"its program {program} is not an executable file here"
        found = [program]
    else:
        found = _on_path(program, search)
        if not found:
            return (f"its program {program!r} is not found on PATH here: install it, or "
                    "give its directory with --agent-option path=DIR (and, under bwrap, "
                    "--sandbox-option ro_paths=DIR)")
    shown = [path for path in found if not os.path.isabs(path) or visible(path)]
    if not shown:
        return _unseen("its program" if "/" in program else f"its program {program!r}",
                       found[0])
    interpreter = _interpreter(shown[0], search, visible)
    if interpreter is not None:
        return interpreter
    script = words[1] if len(words) > 1 else ""
    if os.path.isabs(script) and os.path.isfile(script) and not visible(script):
        return _unseen("the script it is given", script)
    return None


def _on_path(program: str, search: list[str]) -> list[str]:
    """Every executable file named `program` in the directories of `search`, in order."""
    found = []
    for directory in search:
        candidate = os.path.join(directory, program)
        if directory and os.path.isfile(candidate) and os.access(candidate, os.X_OK) \
                and candidate not in found:
            found.append(candidate)
    return found


def _interpreter(program: str, search: list[str], visible: Callable[[str], bool]
                 ) -> str | None:
    """Why the interpreter `program`'s `#!` line names is out of the sandbox's reach,
    or None (found by a newcomer: `#!/usr/bin/env node`, node installed in HOME)."""
    try:
        with open(program, "rb") as stream:
            head = stream.read(256)
    except OSError:
        return None
    if not head.startswith(b"#!"):
        return None
    words = head[2:].split(b"\n", 1)[0].decode("utf-8", "replace").split()
    if not words or not os.path.isabs(words[0]):
        return None
    named = words[0]
    if os.path.basename(named) == "env":
        rest = [word for word in words[1:] if not word.startswith("-") and "=" not in word]
        if not rest:
            return None
        found = _on_path(rest[0], search)
        if found and not any(visible(path) for path in found if os.path.isabs(path)):
            return _unseen(f"the interpreter {rest[0]!r} its program's #! line names",
                           found[0])
        return None
    if os.path.isfile(named) and not visible(named):
        return _unseen("the interpreter its program's #! line names", named)
    return None


def _unseen(what: str, path: str) -> str:
    """The message for a host path the sandbox does not show, with what to mount."""
    written, real = os.path.dirname(os.path.abspath(path)), os.path.dirname(os.path.realpath(path))
    common = os.path.commonpath([written, real])
    mount = written if real == written else \
        common if common.count("/") > 1 else f"{written},{real}"
    return (f"{what} is at {path} here, which the sandbox does not show: mount its "
            f"directory read-only with --sandbox-option ro_paths={mount} (or ro_paths "
            "under [sandbox_options] in evalctl.toml)")


@evalctl.hookimpl
def evalctl_register_agents(register):
    register(evalctl.AgentSpec(
        name="command",
        run=run,
        preflight=preflight,
        check_option=check_option,
        options_schema=OPTIONS,
        description="Any CLI agent, run in the sandbox with the model proxy: "
                    "--agent-option 'argv=my-agent --task {prompt}'.",
    ))
    register(evalctl.AgentSpec(
        name="claude-code",
        base="command",
        defaults=CLAUDE_CODE,
        description="Claude Code (npm @anthropic-ai/claude-code) headless: claude -p, JSON "
                    "output, its own tools, every model call through evalctl's proxy. "
                    "Needs `claude` on the sandbox's PATH (agent option path=DIR).",
    ))
