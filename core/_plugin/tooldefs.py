"""The six tools as the model sees them. Kept import-light: the suite loader reads
the names to warn about prompts that dictate the method."""

from __future__ import annotations

from evalctl._plugin.types import ToolDefinition

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
            "path": {"type": "string"},
            "content": {"type": "string"},
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
            "path": {"type": "string"},
            "old_text": {"type": "string", "minLength": 1},
            "new_text": {"type": "string"},
            "replace_all": {"type": "boolean"},
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
            "command": {"type": "string", "minLength": 1},
            "timeout": {"type": "number", "exclusiveMinimum": 0, "maximum": 600,
                        "description": "Seconds before the command is killed (default 60)."},
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
        "properties": {"pattern": {"type": "string", "minLength": 1}},
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
            "pattern": {"type": "string", "minLength": 1},
            "path": {"type": "string"},
            "glob": {"type": "string"},
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
