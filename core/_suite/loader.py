"""Loading a suite: bytes -> strictyaml -> plain data -> JSON Schema -> Suite.

Every problem is reported with its file and line, and all of them at once.
"""

from __future__ import annotations

import difflib
import hashlib
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from evalctl._suite import cache as suite_cache
from evalctl._plugin.tooldefs import TOOL_NAMES
from evalctl._errors import Problem, SuiteError
from evalctl._plugin.registry import Registry, get_registry
from evalctl._suite.schema import build_schema, schema_digest
from evalctl._suite.yamlsource import Located, YamlSyntaxError, parse

DEFAULT_TURNS = 30
DEFAULT_SECONDS = 600.0
_TOOL_IN_PROMPT = re.compile(r"\b(" + "|".join(map(re.escape, TOOL_NAMES)) + r")\b")


@dataclass(frozen=True)
class Limits:
    turns: int = DEFAULT_TURNS
    seconds: float = DEFAULT_SECONDS
    cost: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"turns": self.turns, "seconds": self.seconds, "cost": self.cost}


@dataclass(frozen=True)
class Task:
    id: str
    prompt: str
    checks: tuple[Mapping[str, Any], ...]
    files: Mapping[str, str] = field(default_factory=dict)
    tags: tuple[str, ...] = ()
    permissions: str = "full"
    limits: Limits = field(default_factory=Limits)
    script: tuple[Mapping[str, Any], ...] | None = None
    line: int = 1

    def as_request_data(self) -> dict[str, Any]:
        """The task as providers see it in ModelRequest.task."""
        return {
            "id": self.id,
            "prompt": self.prompt,
            "script": list(self.script) if self.script is not None else None,
        }


@dataclass
class Suite:
    path: Path
    tasks: list[Task]
    sha256: str
    name: str = ""
    warnings: list[Problem] = field(default_factory=list)


def load_suite(path: str | Path, registry: Registry | None = None,
               use_cache: bool = True) -> Suite:
    """Load and validate a suite; raise SuiteError listing every problem."""
    registry = registry or get_registry()
    path = Path(path)
    label = str(path)
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise SuiteError([Problem(label, 1, f"cannot read suite: {exc.strerror or exc}")]) from None
    schema = build_schema(registry.graders)
    # Rule 1 depends on which graders count, so that is part of the key too.
    not_counting = sorted(name for name, spec in registry.graders.items() if not _counts(spec))
    sha = hashlib.sha256(raw).hexdigest()
    key = suite_cache.cache_key(raw, schema_digest(schema), not_counting)
    if use_cache:
        cached = suite_cache.read(key)
        if cached is not None:
            warnings = [Problem(label, w["line"], w["message"], w["severity"])
                        for w in cached["warnings"]]
            return _build(path, cached["data"], cached["task_lines"], sha, warnings)

    located, problems = _parse_and_validate(raw, label, schema, registry)
    errors = [p for p in problems if p.severity == "error"]
    if errors:
        raise SuiteError(problems)
    tasks_path = _tasks_path(located.data)
    task_lines = [located.line_of((*tasks_path, i)) for i in range(len(_tasks_of(located.data)))]
    if use_cache:
        suite_cache.write(key, {
            "data": located.data,
            "task_lines": task_lines,
            "warnings": [{"line": p.line, "message": p.message, "severity": p.severity}
                         for p in problems],
        })
    return _build(path, located.data, task_lines, sha, problems)


def validate_suite(path: str | Path, registry: Registry | None = None) -> list[Problem]:
    """Every problem in a suite, errors and warnings, without raising."""
    try:
        suite = load_suite(path, registry, use_cache=False)
    except SuiteError as exc:
        return exc.problems
    return suite.warnings


def _tasks_path(data: Any) -> tuple[str, ...]:
    return () if isinstance(data, list) else ("tasks",)


def _tasks_of(data: Any) -> list[Any]:
    return data if isinstance(data, list) else data["tasks"]


def _build(path: Path, data: Any, task_lines: list[int], sha: str,
           warnings: list[Problem]) -> Suite:
    defaults = {} if isinstance(data, list) else data.get("defaults", {})
    tasks = []
    for raw_task, line in zip(_tasks_of(data), task_lines, strict=True):
        limits = {**defaults.get("limits", {}), **raw_task.get("limits", {})}
        tasks.append(Task(
            id=raw_task["id"],
            prompt=raw_task["prompt"],
            checks=tuple(raw_task["checks"]),
            files=dict(raw_task.get("files", {})),
            tags=tuple(dict.fromkeys([*defaults.get("tags", []), *raw_task.get("tags", [])])),
            permissions=raw_task.get("permissions", defaults.get("permissions", "full")),
            limits=Limits(
                turns=limits.get("turns", DEFAULT_TURNS),
                seconds=float(limits.get("seconds", DEFAULT_SECONDS)),
                cost=limits.get("cost"),
            ),
            script=tuple(raw_task["script"]) if "script" in raw_task else None,
            line=line,
        ))
    name = "" if isinstance(data, list) else data.get("name", "")
    return Suite(path, tasks, sha, name or path.stem, list(warnings))


def _parse_and_validate(raw: bytes, label: str, schema: Mapping[str, Any],
                        registry: Registry) -> tuple[Located, list[Problem]]:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise SuiteError([Problem(label, line, f"not UTF-8: byte 0x{raw[exc.start]:02x} "
                                               "cannot be decoded; save the file as UTF-8")]) \
            from None
    if text.startswith("\ufeff"):
        text = text[1:]
    if not any(line.strip() and not line.lstrip().startswith("#") for line in text.splitlines()):
        raise SuiteError([Problem(label, 1, "empty suite: expected a list of tasks, or a "
                                            "mapping with 'tasks:'")])
    try:
        located = parse(text, label)
    except YamlSyntaxError as exc:
        raise SuiteError([Problem(label, exc.line, exc.message)]) from None

    problems = list(_schema_problems(located, schema, label, registry))
    problems.extend(_rule_problems(located, label, registry))
    return located, problems


# -- JSON Schema errors, made readable ------------------------------------------------

def _describe_value(value: Any) -> str:
    if value is None:
        return "nothing (null)"
    if isinstance(value, bool):
        return f"the boolean {str(value).lower()}"
    if isinstance(value, int | float):
        return f"the number {value}"
    if isinstance(value, str):
        return f"the text {value!r}"
    if isinstance(value, list):
        return "a list"
    return "a mapping"


_TYPE_WORDS = {"string": "text", "integer": "a whole number", "number": "a number",
               "boolean": "true or false", "array": "a list", "object": "a mapping",
               "null": "nothing"}


def _where(located: Located, path: tuple[Any, ...]) -> str:
    """A readable location: task 'x', checks[1] (file_exists), 'path'."""
    parts: list[str] = []
    node = located.data
    for index, step in enumerate(path):
        node = node[step] if isinstance(node, dict | list) else None
        if isinstance(step, str) and index + 1 < len(path) and isinstance(path[index + 1], int):
            continue  # named together with the index that follows: checks[1]
        if isinstance(step, int):
            owner = path[index - 1] if index else None
            if owner in (None, "tasks") and isinstance(node, dict) and \
                    isinstance(node.get("id"), str):
                parts.append(f"task '{node['id']}'")
                continue
            label = f"{owner}[{step}]" if owner is not None else f"[{step}]"
            if owner == "checks" and isinstance(node, dict) and isinstance(node.get("type"), str):
                label += f" ({node['type']})"
            parts.append(label)
        else:
            parts.append(f"'{step}'")
    return ", ".join(parts) or "the suite"


def _schema_problems(located: Located, schema: Mapping[str, Any], label: str,
                     registry: Registry) -> Iterable[Problem]:
    from jsonschema import Draft202012Validator

    validator = Draft202012Validator(schema)
    seen: set[tuple[int, str]] = set()
    for error in validator.iter_errors(located.data):
        for line, message in _explain(error, located, registry):
            if (line, message) not in seen:
                seen.add((line, message))
                yield Problem(label, line, message)


def _explain(error: Any, located: Located, registry: Registry) -> list[tuple[int, str]]:
    path = tuple(error.absolute_path)
    line = located.line_of(path)
    where = _where(located, path)
    kind = error.validator
    instance = error.instance
    if kind == "if":
        return []  # the `then`/`else` errors that follow say what is wrong
    if kind in ("allOf", "anyOf", "oneOf") and error.context:
        return [item for sub in error.context for item in _explain(sub, located, registry)]
    if kind == "type" and not path:
        return [(line, "expected a list of tasks, or a mapping with 'tasks:'; got "
                       f"{_describe_value(instance)}")]
    if kind == "oneOf" and all(set(b) == {"required"} for b in error.validator_value):
        keys = ", ".join(f"'{b['required'][0]}'" for b in error.validator_value)
        return [(line, f"{where}: needs exactly one of {keys}")]
    if kind == "type":
        expected = error.validator_value
        words = " or ".join(_TYPE_WORDS.get(t, t) for t in
                            (expected if isinstance(expected, list) else [expected]))
        message = f"{where}: expected {words}, got {_describe_value(instance)}"
        if expected == "string" and not isinstance(instance, dict | list):
            message += "; quote it to make it text"
        return [(line, message)]
    if kind == "required":
        missing = [k for k in error.validator_value if k not in instance]
        what = f" for check type {instance['type']}" if "type" in instance and path and \
            isinstance(path[-1], int) and len(path) > 1 and path[-2] == "checks" else ""
        return [(line, f"{where}: missing required key '{k}'{what}") for k in missing]
    if kind == "additionalProperties":
        allowed = list(error.schema.get("properties", {}))
        out = []
        for key in instance:
            if key in allowed:
                continue
            message = f"{where}: unexpected key '{key}'"
            close = difflib.get_close_matches(key, allowed, n=1)
            message += f" (did you mean '{close[0]}'?)" if close else \
                f"; allowed: {', '.join(allowed)}"
            out.append((located.key_lines.get((*path, key), line), message))
        return out
    if kind == "enum" and path and path[-1] == "type" and len(path) > 2 and path[-3] == "checks":
        return [(line, f"{where}: unknown check type {instance!r}: "
                       f"{registry.explain_missing('grader', str(instance))}")]
    if kind == "enum":
        options = ", ".join(map(str, error.validator_value))
        return [(line, f"{where}: expected one of {options}; got {_describe_value(instance)}")]
    if kind == "const":
        return [(line, f"{where}: expected {error.validator_value!r}, got "
                       f"{_describe_value(instance)}")]
    if kind == "pattern" and "propertyNames" in error.schema_path:
        # The instance is a mapping key: point at the key's own line.
        key_line = located.key_lines.get((*path, instance), line)
        reason = error.schema.get("description") or f"must match {error.validator_value}"
        return [(key_line, f"{where}: {instance!r} {reason}")]
    if kind == "pattern":
        reason = error.schema.get("description") or f"must match {error.validator_value}"
        return [(line, f"{where}: {instance!r} is not valid: {reason}")]
    if kind == "minItems" and instance == []:
        return [(line, f"{where}: must not be empty")]
    if kind == "minLength":
        return [(line, f"{where}: must not be empty")]
    return [(line, f"{where}: {error.message}")]


# -- Suite rules ---------------------------------------------------------------------

def _well_formed_tasks(located: Located, registry: Registry) -> Iterable[tuple[tuple, dict]]:
    """Tasks whose shape the rules can read, even when other parts have schema errors."""
    data = located.data
    tasks = data if isinstance(data, list) else data.get("tasks") if isinstance(data, dict) \
        else None
    if not isinstance(tasks, list):
        return
    base = _tasks_path(data)
    for index, task in enumerate(tasks):
        if not (isinstance(task, dict) and isinstance(task.get("id"), str)
                and isinstance(task.get("prompt"), str) and isinstance(task.get("checks"), list)):
            continue
        checks = task["checks"]
        if checks and all(isinstance(c, dict) and c.get("type") in registry.graders
                          for c in checks):
            yield (*base, index), task


def _counts(spec: Any) -> bool:
    """Rule 1: only a mechanical check that talk cannot satisfy keeps a task honest.
    Judges never decide pass or fail, so they cannot be that check."""
    return spec.kind == "mechanical" and not spec.talk_only


def _rule_problems(located: Located, label: str, registry: Registry) -> Iterable[Problem]:
    first_seen: dict[str, int] = {}
    for path, task in _well_formed_tasks(located, registry):
        line = located.line_of(path)
        task_id = task["id"]
        id_line = located.line_of((*path, "id"))
        if task_id in first_seen:
            yield Problem(label, id_line, f"duplicate task id '{task_id}' (first used at line "
                                          f"{first_seen[task_id]})")
        else:
            first_seen[task_id] = id_line
        if task_id.lower() in {t.lower() for t in first_seen if t != task_id}:
            yield Problem(label, id_line, f"task id '{task_id}' differs from another only in "
                                          "case; workspaces would collide on some systems")
        types = [check["type"] for check in task["checks"]]
        if not any(_counts(registry.graders[t]) for t in types):
            yield Problem(label, line, (
                f"task '{task_id}': no check ({', '.join(types)}) is a mechanical one the "
                "agent cannot satisfy by talking; add one that inspects what it left behind, "
                "such as file_exists, file_contains, command or tests_pass"))
        named = sorted(set(_TOOL_IN_PROMPT.findall(task["prompt"])))
        if named:
            yield Problem(label, located.line_of((*path, "prompt")), (
                f"task '{task_id}': the prompt names the agent's tool(s) {', '.join(named)}; "
                "state the goal, not the method"), severity="warning")

