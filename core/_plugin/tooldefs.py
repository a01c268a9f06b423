"""The six tools as the model sees them, their limits, and the reference that
docs/tools.md is generated from. Kept import-light: the suite loader reads the names to
warn about prompts that dictate the method.

The limits live here, not in the tools' implementation, so that the agent's tools
(`evalctl._agent.tools`) and the generated reference read the same numbers.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from evalctl._files import IGNORED_DIRS
from evalctl._plugin.types import ToolDefinition
from evalctl._process import OUTPUT_LIMIT

# What other agents call the six tools: a suite's `tool: create_file` is meant as
# write_file, though by spelling it is closest to read_file (which "did you mean" said).
TOOL_SYNONYMS: Mapping[str, str] = {
    "create_file": "write_file", "create": "write_file", "write": "write_file",
    "save_file": "write_file", "new_file": "write_file", "overwrite_file": "write_file",
    "open_file": "read_file", "view_file": "read_file", "view": "read_file",
    "cat": "read_file", "read": "read_file", "show_file": "read_file",
    "str_replace": "edit_file", "str_replace_editor": "edit_file", "replace": "edit_file",
    "patch_file": "edit_file", "modify_file": "edit_file", "update_file": "edit_file",
    "shell": "bash", "run_command": "bash", "execute": "bash", "exec": "bash",
    "terminal": "bash", "run": "bash", "sh": "bash", "command": "bash",
    "find": "glob", "find_files": "glob", "list_files": "glob", "ls": "glob",
    "list_dir": "glob", "search": "grep", "search_files": "grep", "ripgrep": "grep",
    "rg": "grep",
}

READ_DEFAULT_LINES = 2_000
LINE_LIMIT = 2_000
GREP_MAX_MATCHES = 200
GREP_LINE_LIMIT = 500
GLOB_MAX_RESULTS = 500
SEARCH_MAX_FILE_BYTES = 5_000_000
SEARCH_MAX_TOTAL_BYTES = 200_000_000  # one grep reads at most this much in all
SEARCH_MAX_LINES = 2_000_000  # and matches at most this many lines (each a Python step)
WALK_MAX_ENTRIES = 200_000  # one glob or grep looks at most at this many paths
GLOB_MAX_PARTS = 64  # a glob pattern's parts ('a/**/*.py' has three), runs of ** as one
GLOB_MAX_STEPS = 5_000_000  # matching work one glob or grep may do: parts x names
READ_MAX_BYTES = 100_000_000  # one read_file reads at most this much of a file
SEARCH_MAX_SECONDS = 20  # a glob or grep stops after this long (costly patterns)
SEARCH_PROGRAM_BYTES = 512 * 1024  # RE2's memory for one grep pattern: its size
# How deep a tool call's arguments may nest: real ones nest a few levels; an attacker's
# 500 made evalctl's own recursion (the ledger's clipping, JSON) fail the attempt.
ARGUMENTS_MAX_DEPTH = 64
# What a call whose arguments cannot be used gets instead of them: the tool says why.
UNUSABLE_ARGUMENTS = "evalctl_unusable_arguments"
# The calls of one turn run concurrently, this many at a time: a turn of 400 bash calls
# (an attacker's) took every descriptor evalctl had, and other attempts' commands failed.
TOOL_CALLS_AT_ONCE = 16
EDIT_MAX_FILE_BYTES = 10_000_000
BASH_DEFAULT_TIMEOUT = 60.0
BASH_MAX_TIMEOUT = 600

READ_FILE = ToolDefinition(
    "read_file",
    "Read a text file in the workspace. Returns numbered lines. Use offset (1-based line) "
    "and limit to page through long files.",
    {
        "type": "object",
        "properties": {
            "path": {"type": "string", "description": "Path relative to the workspace."},
            "offset": {"type": "integer", "minimum": 1, "description": "First line, 1-based."},
            "limit": {"type": "integer", "minimum": 1, "description": "How many lines."},
        },
        "required": ["path"],
        "additionalProperties": False,
    },
)
WRITE_FILE = ToolDefinition(
    "write_file",
    "Create or overwrite a file in the workspace with the given content. Parent "
    "directories are created.",
    {
        "type": "object",
        "properties": {
            "path": {"type": "string", "description": "Path relative to the workspace."},
            "content": {"type": "string", "description": "The whole new content."},
        },
        "required": ["path", "content"],
        "additionalProperties": False,
    },
)
EDIT_FILE = ToolDefinition(
    "edit_file",
    "Replace old_text with new_text in a file. old_text must match exactly and be unique "
    "unless replace_all is true.",
    {
        "type": "object",
        "properties": {
            "path": {"type": "string", "description": "Path relative to the workspace."},
            "old_text": {"type": "string", "minLength": 1,
                         "description": "The exact text to replace."},
            "new_text": {"type": "string", "description": "What replaces it."},
            "replace_all": {"type": "boolean",
                            "description": "Replace every occurrence (default false)."},
        },
        "required": ["path", "old_text", "new_text"],
        "additionalProperties": False,
    },
)
BASH = ToolDefinition(
    "bash",
    "Run a bash command in the workspace. Returns the exit code and combined output "
    "(long output keeps its head and tail).",
    {
        "type": "object",
        "properties": {
            "command": {"type": "string", "minLength": 1,
                        "description": "A bash script, run with bash -c."},
            "timeout": {"type": "number", "exclusiveMinimum": 0, "maximum": BASH_MAX_TIMEOUT,
                        "description": "Seconds before the command is killed (default "
                                       f"{BASH_DEFAULT_TIMEOUT:g})."},
        },
        "required": ["command"],
        "additionalProperties": False,
    },
)
GLOB = ToolDefinition(
    "glob",
    "List workspace files matching a glob pattern such as '**/*.py'.",
    {
        "type": "object",
        "properties": {"pattern": {"type": "string", "minLength": 1,
                                   "description": "A glob relative to the workspace."}},
        "required": ["pattern"],
        "additionalProperties": False,
    },
)
GREP = ToolDefinition(
    "grep",
    "Search file contents with a regular expression. Optionally limit to a path (file or "
    "directory) or a glob. Returns path:line:text, capped.",
    {
        "type": "object",
        "properties": {
            "pattern": {"type": "string", "minLength": 1,
                        "description": "A regular expression (RE2 syntax: no lookaround "
                                       "or backreferences)."},
            "path": {"type": "string",
                     "description": "A file or directory to search (default: everything)."},
            "glob": {"type": "string", "description": "Only files matching this glob."},
        },
        "required": ["pattern"],
        "additionalProperties": False,
    },
)

TOOL_DEFINITIONS = (READ_FILE, WRITE_FILE, EDIT_FILE, BASH, GLOB, GREP)
TOOL_NAMES = tuple(t.name for t in TOOL_DEFINITIONS)
WRITING_TOOLS = frozenset({"write_file", "edit_file", "bash"})


def tool_definitions() -> tuple[ToolDefinition, ...]:
    """The built-in agent's six tools (read_file, write_file, edit_file, bash, glob,
    grep) as a provider receives them in `ModelRequest.tools`: name, description and
    the JSON Schema of their arguments."""
    return TOOL_DEFINITIONS


@dataclass(frozen=True)
class ToolReference:
    """What docs/tools.md says of a tool beyond its schema: a scripted call's `input`,
    the limits the tool enforces, and the errors the model can get back."""

    example: Mapping[str, Any]
    limits: tuple[str, ...]
    errors: tuple[str, ...]


_MB = 1_000_000
_OUTSIDE = ("a path outside the workspace (`..`, an absolute path, a link that leads out) "
            "is refused")
_NOT_REGULAR = ("a hard link, or a file that is not a regular one (a FIFO, a device, a "
                "socket), is refused")
_READ_ONLY = "in a `permissions: read-only` task: permission denied (recorded as a denial)"
_SHOWN = (f"output over {OUTPUT_LIMIT:,} characters keeps its head and tail, with a note "
          "of what was cut")

TOOL_REFERENCE: dict[str, ToolReference] = {
    "read_file": ToolReference(
        {"path": "config.ini"},
        (f"shows at most `limit` lines (default {READ_DEFAULT_LINES:,}) from line `offset`, "
         "numbered, and says where to continue",
         f"a line over {LINE_LIMIT:,} characters is cut, with a note",
         f"reads at most {READ_MAX_BYTES // _MB} MB of the file, and says when it stopped",
         _SHOWN),
        ("the path does not exist", "the path is a directory (use glob to list it)",
         "a binary file is not shown (its size is)", _OUTSIDE, _NOT_REGULAR)),
    "write_file": ToolReference(
        {"path": "notes/summary.md", "content": "# Summary\n"},
        ("creates missing parent directories", "writes UTF-8 text, replacing the whole file"),
        ("the path is a directory", _OUTSIDE, _NOT_REGULAR, _READ_ONLY)),
    "edit_file": ToolReference(
        {"path": "config.ini", "old_text": "port = 8080", "new_text": "port = 9090"},
        ("`old_text` must match exactly, whitespace included, and once unless `replace_all` "
         "is true",
         f"files over {EDIT_MAX_FILE_BYTES // _MB} MB are refused (edit them with bash)"),
        ("the file does not exist", "a binary file", "`old_text` is not found",
         "`old_text` appears more than once (give more context, or set `replace_all`)",
         _OUTSIDE, _NOT_REGULAR, _READ_ONLY)),
    "bash": ToolReference(
        {"command": "wc -w < words.txt"},
        ("runs `bash -c COMMAND` in the attempt's sandbox, in the workspace, with an "
         "environment built from nothing (PATH, the attempt's HOME and TMPDIR, a UTF-8 "
         "locale)",
         f"killed with everything it started after `timeout` seconds (default "
         f"{BASH_DEFAULT_TIMEOUT:g}, at most {BASH_MAX_TIMEOUT})",
         "standard output and error are merged; " + _SHOWN),
        ("a non-zero exit code is an error result: `exit code N` and the output",
         "a timeout: the command and its children were killed, with the output so far",
         _READ_ONLY)),
    "glob": ToolReference(
        {"pattern": "**/*.py"},
        (f"lists at most {GLOB_MAX_RESULTS} files, sorted, and how many more matched",
         "files only; " + ", ".join(f"`{d}`" for d in sorted(IGNORED_DIRS)) + " are skipped",
         f"looks at most at {WALK_MAX_ENTRIES:,} paths (any depth; linked directories are "
         "not entered), and no more than the pattern can be matched against quickly "
         f"({GLOB_MAX_STEPS:,} steps, a step a pattern part and path name, and "
         f"{SEARCH_MAX_SECONDS} s), and says when it stopped"),
        ("a pattern that is absolute or contains `..`",
         f"a pattern of more than {GLOB_MAX_PARTS} parts (a run of `**` counts as one)",
         "no match is not an error: the result says so")),
    "grep": ToolReference(
        {"pattern": "def slugify", "glob": "**/*.py"},
        (f"at most {GREP_MAX_MATCHES} matches as `path:line:text`, and how many more there "
         "were",
         f"a matching line is cut at {GREP_LINE_LIMIT} characters",
         f"binary files and files over {SEARCH_MAX_FILE_BYTES // _MB} MB are not searched, "
         "and are named",
         f"reads at most {SEARCH_MAX_TOTAL_BYTES // _MB} MB and {SEARCH_MAX_LINES:,} lines in "
         "all, and looks at most at "
         f"{WALK_MAX_ENTRIES:,} paths (fewer for a costly `glob`, as glob does), and says "
         "what it left out",
         "the pattern is matched by RE2, in time linear in the text: no pattern can make "
         f"it hang; a pattern too big for RE2's {SEARCH_PROGRAM_BYTES // 1024} KB program "
         f"budget is refused, and a search stops after {SEARCH_MAX_SECONDS} s, saying so"),
        ("an invalid regular expression (RE2 syntax, as Python's `re` without lookaround "
         "or backreferences)", "`path` does not exist",
         "a `glob` that is absolute or contains `..`, or of more than "
         f"{GLOB_MAX_PARTS} parts", _OUTSIDE)),
}
