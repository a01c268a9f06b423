"""File graders: `file_exists`, `file_contains`, `no_placeholders`."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import evalctl

# Relative, no `..` segment, no backslash or drive letter, not ending in a slash: a path
# that leaves the workspace is refused by `evalctl validate` (and in editors), not only
# when the check is graded. The same rule as the core's for a task's `files:`.
INSIDE_WORKSPACE = r"^(?![/~])(?![A-Za-z]:)(?!(?:.*/)?\.\.(?:/|$))[^\\\x00]*[^/\\\x00]$"
SCAN_LIMIT = 5_000_000  # bytes read from one file: graders run in evalctl's own process
PATH = {"type": "string", "minLength": 1, "pattern": INSIDE_WORKSPACE,
        "description": "A path relative to the workspace that stays inside it (no '..', not "
                       "absolute)."}


def _target(workspace: Path, relative: str) -> Path | evalctl.CheckResult:
    try:
        return evalctl.resolve_in_workspace(workspace, relative)
    except evalctl.ConfinementError as exc:
        return evalctl.CheckResult(False, str(exc))


def grade_file_exists(check: dict[str, Any], workspace: Path,
                      result: evalctl.AgentResult) -> evalctl.CheckResult:
    target = _target(workspace, check["path"])
    if isinstance(target, evalctl.CheckResult):
        return target
    if target.is_file():
        return evalctl.CheckResult(True, f"{check['path']} exists ({target.stat().st_size} bytes)")
    if target.is_dir():
        return evalctl.CheckResult(False, f"{check['path']} is a directory, not a file")
    return evalctl.CheckResult(False, f"{check['path']} does not exist")


def grade_file_contains(check: dict[str, Any], workspace: Path,
                        result: evalctl.AgentResult) -> evalctl.CheckResult:
    target = _target(workspace, check["path"])
    if isinstance(target, evalctl.CheckResult):
        return target
    if not target.is_file():
        return evalctl.CheckResult(False, f"{check['path']} does not exist")
    try:
        with evalctl.open_in_workspace(workspace, check["path"]) as handle:
            content = handle.read(SCAN_LIMIT).decode("utf-8", errors="replace")
    except evalctl.ConfinementError as exc:
        return evalctl.CheckResult(False, str(exc))
    if "regex" in check:
        found = re.search(check["regex"], content, re.MULTILINE)
        what = f"regex {check['regex']!r}"
    else:
        found = check["text"] in content
        what = f"text {check['text']!r}"
    negate = check.get("negate", False)
    if bool(found) != negate:
        verb = "does not contain" if negate else "contains"
        return evalctl.CheckResult(True, f"{check['path']} {verb} {what}")
    if negate:
        return evalctl.CheckResult(False, f"{check['path']} contains {what}, which it must not")
    preview = content[:200].replace("\n", "\\n")
    return evalctl.CheckResult(False, f"{check['path']} does not contain {what}; "
                                      f"it starts with: {preview!r}")


PLACEHOLDERS = [
    (re.compile(r"\b(?:TODO|FIXME|XXX)\b"), "a TODO/FIXME/XXX marker"),
    (re.compile(r"\bNotImplementedError\b"), "a NotImplementedError stub"),
    (re.compile(r"your (?:code|implementation|answer|text) (?:goes )?here", re.IGNORECASE),
     "a 'your code here' placeholder"),
    (re.compile(r"\b(?:implement (?:me|this)|fill (?:this|me) in)\b", re.IGNORECASE),
     "an 'implement me' placeholder"),
    (re.compile(r"\blorem ipsum\b", re.IGNORECASE), "lorem ipsum filler"),
    (re.compile(r"<(?:placeholder|insert [^>]*)>", re.IGNORECASE), "a <placeholder>"),
]
CODE_SUFFIXES = {".py", ".js", ".ts", ".jsx", ".tsx", ".go", ".rs", ".java", ".rb",
                 ".c", ".h", ".cpp", ".sh"}
# An ellipsis standing in for a body (`pass  # TODO` is caught by the TODO marker).
CODE_PLACEHOLDERS = [
    (re.compile(r"^\s*\.\.\.\s*(?:#.*)?$"), "a '...' body"),
    (re.compile(r":\s*\.\.\.\s*(?:#.*)?$"), "a '...' body"),
]


def _placeholder_hits(relative: str, text: str, seeded: set[str]) -> list[str]:
    hits = []
    is_code = Path(relative).suffix in CODE_SUFFIXES
    for number, line in enumerate(text.splitlines(), start=1):
        if line in seeded:
            continue  # the agent did not write this line
        patterns = PLACEHOLDERS + (CODE_PLACEHOLDERS if is_code else [])
        for pattern, label in patterns:
            if pattern.search(line):
                hits.append(f"{relative}:{number}: {label}: {line.strip()[:80]}")
                break
    return hits


def grade_no_placeholders(check: dict[str, Any], workspace: Path,
                          result: evalctl.AgentResult) -> evalctl.CheckResult:
    changed = sorted(p for p, kind in result.files_changed.items() if kind != "deleted")
    hits: list[str] = []
    cut: list[str] = []
    for relative in changed:
        try:
            with evalctl.open_in_workspace(workspace, relative) as handle:
                data = handle.read(SCAN_LIMIT + 1)
        except (evalctl.ConfinementError, OSError):
            continue  # a link out, a FIFO, a hard link or gone: nothing of the agent's to read
        if len(data) > SCAN_LIMIT:
            data = data[:SCAN_LIMIT]
            cut.append(relative)
        if evalctl.looks_binary(data):
            continue
        seeded_lines: set[str] = set()
        if result.seed_path is not None and (result.seed_path / relative).is_file():
            seeded_lines = set((result.seed_path / relative).read_text(
                encoding="utf-8", errors="replace").splitlines())
        hits.extend(_placeholder_hits(relative, data.decode("utf-8", errors="replace"),
                                      seeded_lines))
    note = (f"\n(only the first {SCAN_LIMIT // 1_000_000} MB of {', '.join(cut[:5])} "
            "were scanned)") if cut else ""
    if hits:
        shown = hits[:10] + ([f"... and {len(hits) - 10} more"] if len(hits) > 10 else [])
        return evalctl.CheckResult(False, "placeholders in the agent's files:\n" +
                                   "\n".join(shown) + note)
    if not changed:
        return evalctl.CheckResult(True, "the agent created or changed no files")
    return evalctl.CheckResult(True, f"no placeholders in {len(changed)} created or changed "
                                     f"file(s){note}")


@evalctl.hookimpl
def evalctl_register_graders(register):
    register(evalctl.GraderSpec(
        name="file_exists",
        grade=grade_file_exists,
        params_schema={"type": "object", "properties": {"path": PATH}, "required": ["path"]},
        description="Is there a file at `path` in the workspace?",
        example="- type: file_exists\n  path: test_slugify.py",
        trusts="Trusts the file system after the agent stopped; the path is confined to the "
               "workspace (links that lead out are refused).",
    ))
    register(evalctl.GraderSpec(
        name="file_contains",
        grade=grade_file_contains,
        params_schema={
            "type": "object",
            "properties": {
                "path": PATH,
                "text": {"type": "string", "minLength": 1, "description": "Exact text."},
                "regex": {"type": "string", "minLength": 1,
                          "description": "A Python regular expression (multiline)."},
                "negate": {"type": "boolean", "description": "Pass when it is NOT there."},
            },
            "required": ["path"],
            "oneOf": [{"required": ["text"]}, {"required": ["regex"]}],
        },
        description="Does the file at `path` contain `text` (or match `regex`)? With "
                    "`negate: true`, does it not?",
        example="- type: file_contains\n  path: config.ini\n  regex: \"^port = 9090$\"",
        trusts="Trusts the file's content after the agent stopped; the path is confined to "
               "the workspace. It says nothing about whether the content works.",
    ))
    register(evalctl.GraderSpec(
        name="no_placeholders",
        grade=grade_no_placeholders,
        params_schema={"type": "object", "properties": {}},
        description="Are the files the agent created or changed free of placeholders (TODO, "
                    "FIXME, XXX, '...' bodies, NotImplementedError stubs, 'your code here')? "
                    "Lines that were already in the seeded files are not blamed.",
        example="- type: no_placeholders",
        trusts="Trusts evalctl's record of which files the agent created or changed (hashes "
               "taken in evalctl's process) and the seed copy, which evalctl checks against "
               "what it seeded before grading. A file is skipped only when it is binary: a NUL "
               "in its first 8 KiB and either not UTF-8 or over 10% control bytes.",
    ))
