"""The published suite schema: the core's task schema plus every grader's params.

One schema serves editors (`evalctl schema`, schemas/suite.schema.json) and the loader,
so a suite that is clean in an editor loads, and one that loads is clean in an editor.
"""

from __future__ import annotations

import copy
import hashlib
import json
import re
from collections.abc import Mapping
from typing import Any

from evalctl._plugin.specs import GraderSpec, ProviderSpec, SandboxSpec

DIALECT = "https://json-schema.org/draft/2020-12/schema"
# `(?![\s\S])` is the end of the text in every dialect: `$` is not (Python's re, which
# jsonschema uses, also matches it before a final newline; an editor's ECMA regex does
# not), and "t\n" must not pass as a task id anywhere.
END = r"(?![\s\S])"
TASK_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}" + END
# Names a run directory holds besides the workspaces, which are named by task id: its
# journal (`_report.journal.JOURNAL_NAME`). Its other entries (.state, .grading, .seed,
# .ledgers, .cassettes, .retired) start with a dot, which no task id does. Compared
# lower-cased, as ids are with each other: on a file system that ignores case
# (macOS's, by default) `Journal.JSONL` is the journal too. Found by an outside tester:
# a task `journal.jsonl` failed as the agent's failure, and a resume retired the journal.
RESERVED_TASK_IDS = frozenset({"journal.jsonl"})
COMMIT_PATTERN = r"^(?:[0-9a-f]{40}|[0-9a-f]{64})" + END
# Relative, no `..` segment, no backslash, drive letter or line break, not ending in a
# slash.
FILE_PATH_PATTERN = (r"^(?![/~])(?![A-Za-z]:)(?!(?:.*/)?\.\.(?:/|" + END + r"))"
                     r"[^\\\x00\n\r]*[^/\\\x00\n\r]" + END)



def file_path_reason(name: str) -> str:
    """Why `name`, refused by FILE_PATH_PATTERN, is no file path of the workspace: the
    one reason that applies (a newcomer's `dir/` was said to have a '..', an absolute
    path or a backslash)."""
    inside = "must be a relative path that stays inside the workspace"
    if name.startswith("/"):
        return f"{inside}: it is absolute"
    if name.startswith("~"):
        return f"{inside}: it starts with '~' (a home directory)"
    if re.match(r"[A-Za-z]:", name):
        return f"{inside}: it starts with a drive letter"
    if "\\" in name:
        return f"{inside}: it has a backslash (separate directories with '/')"
    if ".." in re.split(r"[/\n\r]", name):
        return f"{inside}: it has a '..' part"
    if re.search(r"[\x00\n\r]", name):
        return "must be a file's path: it holds a NUL character or a line break"
    if not name:
        return "must name a file: it is empty (write the file's path, e.g. 'dir/a.txt')"
    if name.endswith("/"):
        return "must name a file: it ends with '/' (write the file's path, e.g. 'dir/a.txt')"
    return f"{inside} (no '..', no absolute path, no backslash)"


LIMITS = {
    "type": "object",
    "description": "When the agent loop is stopped. The exit status records which limit hit.",
    "properties": {
        "turns": {"type": "integer", "minimum": 1, "description": "Most model turns."},
        "seconds": {"type": "number", "exclusiveMinimum": 0,
                    "description": "The agent's wall-clock seconds; not setup's nor the "
                                   "checks', which have timeouts of their own."},
        "cost": {"type": "number", "minimum": 0, "description": "Most USD spent on the model."},
    },
    "additionalProperties": False,
}

PROTECTED = {
    "type": "array",
    "items": {"type": "string", "minLength": 1},
    "description": "Globs of files the agent must not create, change or delete (tests/*, "
                   "conftest.py): doing so fails the task as suspected gaming. '*' also "
                   "matches '/'.",
}


def _file_map(description: str) -> dict[str, Any]:
    return {
        "type": "object",
        "description": description,
        "propertyNames": {
            "pattern": FILE_PATH_PATTERN,
            "description": "must be a relative path that stays inside the workspace "
            "(no '..', no absolute path, no backslash)",
        },
        "additionalProperties": {"type": "string"},
    }


NETWORK = {
    "type": "boolean",
    "description": "Whether the sandbox lets commands reach the network (default false).",
}

SOURCE = {
    "type": "object",
    "description": "Where the workspace starts from; files: are written on top. One of git "
                   "(a repository URL or local path, or a git bundle, at the commit rev), dir "
                   "(a local directory, copied) or archive (a .tar.gz, .tgz, .tar.bz2, .tar.xz, "
                   ".tar or .zip, unpacked). Local paths are relative to the suite file.",
    "properties": {
        "git": {"type": "string", "minLength": 1,
                "description": "A repository: a URL (https://..., ssh, file://), or a local "
                               "repository or git bundle, relative to the suite file."},
        "rev": {"type": "string", "pattern": COMMIT_PATTERN,
                "description": "must be a full commit id (40 hexadecimal digits): a branch or "
                               "tag moves, so results could not be reproduced"},
        "dir": {"type": "string", "minLength": 1,
                "description": "A local directory copied into the workspace (without .git), "
                               "relative to the suite file."},
        "archive": {"type": "string", "minLength": 1,
                    "description": "A .tar.gz, .tgz, .tar.bz2, .tar.xz, .tar or .zip unpacked "
                                   "into the workspace, relative to the suite file."},
        "strip": {"type": "integer", "minimum": 0,
                  "description": "Leading path components removed from the archive's members "
                                 "(1 for an sdist's name-1.0/)."},
    },
    "oneOf": [{"required": ["git"]}, {"required": ["dir"]}, {"required": ["archive"]}],
    "dependentRequired": {"git": ["rev"], "rev": ["git"], "strip": ["archive"]},
    "additionalProperties": False,
}

SETUP = {
    "type": "object",
    "description": "Commands run in the task's sandbox before the agent starts (create a "
                   "virtual environment in the workspace, install the project). A failed "
                   "setup is an error of the attempt, not a failure of the agent; its output "
                   "is in the ledger.",
    "properties": {
        "commands": {"type": "array", "minItems": 1,
                     "items": {"type": "string", "minLength": 1},
                     "description": "bash scripts run one after another in the workspace; "
                                    "the first that fails ends the setup."},
        "timeout": {"type": "number", "exclusiveMinimum": 0,
                    "description": "Seconds each command may take (default 600)."},
        "network": {"type": "boolean",
                    "description": "Whether setup's commands may reach the network (default "
                                   "false); the agent's own network is the task's network:."},
    },
    "required": ["commands"],
    "additionalProperties": False,
}

VERIFY_PATCH = {
    "type": "string",
    "minLength": 1,
    "description": "A unified diff (git diff output), such as a benchmark's test patch: "
                   "applied to the seed's copies of the files it touches, and the results "
                   "written after the agent finished, like verify_files.",
}

PERMISSIONS = {
    "enum": ["full", "read-only"],
    "description": "read-only denies write_file, edit_file and bash.",
}

def _task_schema(plugin_keys: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {
            "id": {
                "type": "string",
                "pattern": TASK_ID_PATTERN,
                "description": "Unique in the suite and usable as a directory name: letters, "
                "digits, '.', '_' and '-', starting with a letter or digit.",
            },
            "prompt": {"type": "string", "minLength": 1,
                       "description": "The goal, not the method."},
            "files": _file_map("Files seeded into the fresh workspace: relative path -> "
                               "content."),
            "verify_files": _file_map(
                "Files written into the workspace only after the agent finished, just before "
                "grading (the real tests, say): the agent never sees them. A path may not also "
                "be in files."),
            "verify_patch": VERIFY_PATCH,
            "protected": PROTECTED,
            "source": SOURCE,
            "setup": SETUP,
            "checks": {
                "type": "array",
                "minItems": 1,
                "items": {"$ref": "#/$defs/check"},
                "description": "Mechanical checks of what the agent left; all must pass.",
            },
            "tags": {"type": "array", "items": {"type": "string"}},
            "permissions": PERMISSIONS,
            "limits": LIMITS,
            "network": NETWORK,
            **{key: copy.deepcopy(dict(schema)) for key, schema in plugin_keys.items()},
        },
        "required": ["id", "prompt", "checks"],
        "additionalProperties": False,
    }


def check_schema(spec: GraderSpec) -> dict[str, Any]:
    """The schema of one grader's checks, as the suite schema holds it."""
    schema = copy.deepcopy(dict(spec.params_schema))
    schema["type"] = "object"
    schema["properties"] = {"type": {"const": spec.name}, **schema.get("properties", {})}
    schema.setdefault("additionalProperties", False)
    if spec.description and "description" not in schema:
        schema["description"] = spec.description
    return schema


def plugin_task_keys(providers: Mapping[str, ProviderSpec]) -> dict[str, Any]:
    """The task keys providers contribute (the scripted provider's `script:`, say), by
    key; when two providers declare one key, the first by name is published."""
    keys: dict[str, Any] = {}
    for name in sorted(providers):
        for key, schema in providers[name].task_schema.items():
            keys.setdefault(key, schema)
    return keys


def _sandbox_schema(sandboxes: Mapping[str, SandboxSpec]) -> dict[str, Any]:
    """`sandbox:` in a suite's defaults: a name, or a mapping of `name` and the
    sandbox's own options, checked against its options_schema."""
    names = sorted(sandboxes)
    choices: list[dict[str, Any]] = [{"enum": ["auto", *names]}]
    for name in names:
        options = copy.deepcopy(dict(sandboxes[name].options_schema))
        choices.append({
            "type": "object",
            "properties": {"name": {"const": name}, **options.get("properties", {})},
            "required": ["name"],
            "additionalProperties": False,
        })
    return {"description": "The sandbox the suite's commands run in (--sandbox overrides).",
            "oneOf": choices}


def build_schema(graders: Mapping[str, GraderSpec],
                 task_keys: Mapping[str, Any] | None = None,
                 sandboxes: Mapping[str, SandboxSpec] | None = None) -> dict[str, Any]:
    """Compose the suite schema for these graders and plugin task keys (sorted, so the
    output is stable)."""
    names = sorted(graders)
    defs: dict[str, Any] = {
        "task": _task_schema(task_keys or {}),
        "check": {
            "type": "object",
            "required": ["type"],
            "properties": {"type": {"enum": names, "description": "The grader to run."}},
            "allOf": [
                {
                    "if": {"properties": {"type": {"const": name}}, "required": ["type"]},
                    "then": {"$ref": f"#/$defs/check_{name}"},
                }
                for name in names
            ],
        },
        "suite_mapping": {
            "type": "object",
            "properties": {
                "name": {"type": "string"},
                "description": {"type": "string"},
                "defaults": {
                    "type": "object",
                    "description": "Applied to every task that does not set its own.",
                    "properties": {
                        "permissions": PERMISSIONS,
                        "limits": LIMITS,
                        "network": NETWORK,
                        "protected": PROTECTED,
                        "source": SOURCE,
                        "setup": SETUP,
                        "tags": {"type": "array", "items": {"type": "string"}},
                        "sandbox": {"$ref": "#/$defs/sandbox"},
                    },
                    "additionalProperties": False,
                },
                "tasks": {"type": "array", "minItems": 1, "items": {"$ref": "#/$defs/task"}},
            },
            "required": ["tasks"],
            "additionalProperties": False,
        },
    }
    for name in names:
        defs[f"check_{name}"] = check_schema(graders[name])
    defs["sandbox"] = _sandbox_schema(sandboxes or {})
    return {
        "$schema": DIALECT,
        "title": "evalctl suite",
        "description": "A list of tasks, or a mapping with `tasks:` and suite-level defaults.",
        "if": {"type": "array"},
        "then": {"minItems": 1, "items": {"$ref": "#/$defs/task"}},
        "else": {"$ref": "#/$defs/suite_mapping"},
        "$defs": defs,
    }


def schema_text(schema: Mapping[str, Any]) -> str:
    return json.dumps(schema, indent=2, sort_keys=False) + "\n"


def schema_digest(schema: Mapping[str, Any]) -> str:
    return hashlib.sha256(json.dumps(schema, sort_keys=True).encode()).hexdigest()


def registry_schema(registry: Any, builtins_only: bool = False) -> dict[str, Any]:
    """The suite schema for what a registry holds, or for evalctl's own plugins only
    (what schemas/suite.schema.json publishes)."""
    if builtins_only:
        return build_schema(registry.from_distribution("grader", "evalctl"),
                            plugin_task_keys(registry.from_distribution("provider", "evalctl")),
                            registry.from_distribution("sandbox", "evalctl"))
    return build_schema(registry.graders, plugin_task_keys(registry.providers),
                        registry.sandboxes)
