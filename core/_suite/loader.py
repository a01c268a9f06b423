"""Loading a suite: bytes -> strictyaml -> plain data -> JSON Schema -> Suite.

Every problem is reported with its file and line, and all of them at once.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from evalctl._errors import Problem, SuiteError
from evalctl._plugin.registry import Registry, get_registry
from evalctl._suite import cache as suite_cache
from evalctl._suite.model import DEFAULT_SECONDS, DEFAULT_TURNS, Limits, Suite, Task
from evalctl._suite.problems import schema_problems
from evalctl._suite.rules import counts_for_rule_one, rule_problems, tasks_of, tasks_path
from evalctl._suite.schema import plugin_task_keys, registry_schema, schema_digest
from evalctl._suite.yamlsource import Located, YamlSyntaxError, parse


def load_suite(path: str | Path, registry: Registry | None = None,
               use_cache: bool = True) -> Suite:
    """Load and validate a suite; raise SuiteError listing every problem."""
    registry = registry or get_registry()
    path = Path(path)
    label = str(path)
    try:
        raw = path.read_bytes()
    except IsADirectoryError:
        raise SuiteError([Problem(label, 0, "cannot read suite: it is a directory; name a "
                                            "suite file (a .yaml file)")]) from None
    except OSError as exc:
        raise SuiteError([Problem(label, 0, f"cannot read suite: {exc.strerror or exc}")]) \
            from None
    schema = registry_schema(registry)
    # Rule 1 depends on which graders count, so that is part of the key too.
    not_counting = sorted(name for name, spec in registry.graders.items()
                          if not counts_for_rule_one(spec))
    sha = hashlib.sha256(raw).hexdigest()
    key = suite_cache.cache_key(raw, schema_digest(schema), not_counting)
    if use_cache:
        cached = suite_cache.read(key)
        if cached is not None:
            try:
                warnings = [Problem(label, int(w["line"]), str(w["message"]), str(w["severity"]))
                            for w in cached["warnings"]]
                return _build(path, cached["data"], cached["task_lines"], sha, warnings,
                              registry)
            except (KeyError, TypeError, ValueError, AttributeError):
                pass  # an entry of the wrong shape is a miss: validate the file again

    located, problems = _parse_and_validate(raw, label, schema, registry)
    errors = [p for p in problems if p.severity == "error"]
    if errors:
        raise SuiteError(problems)
    where = tasks_path(located.data)
    task_lines = [located.line_of((*where, i)) for i in range(len(tasks_of(located.data)))]
    if use_cache:
        suite_cache.write(key, {
            "data": located.data,
            "task_lines": task_lines,
            "warnings": [{"line": p.line, "message": p.message, "severity": p.severity}
                         for p in problems],
        })
    return _build(path, located.data, task_lines, sha, problems, registry)


def validate_suite(path: str | Path, registry: Registry | None = None) -> list[Problem]:
    """Every problem in a suite, errors and warnings, without raising."""
    try:
        suite = load_suite(path, registry, use_cache=False)
    except SuiteError as exc:
        return exc.problems
    return suite.warnings


def _build(path: Path, data: Any, task_lines: list[int], sha: str,
           warnings: list[Problem], registry: Registry) -> Suite:
    defaults = {} if isinstance(data, list) else data.get("defaults", {})
    extra_keys = plugin_task_keys(registry.providers)
    tasks = []
    for raw_task, line in zip(tasks_of(data), task_lines, strict=True):
        limits = {**defaults.get("limits", {}), **raw_task.get("limits", {})}
        tasks.append(Task(
            id=raw_task["id"],
            prompt=raw_task["prompt"],
            checks=tuple(raw_task["checks"]),
            files=dict(raw_task.get("files", {})),
            verify_files=dict(raw_task.get("verify_files", {})),
            protected=tuple(dict.fromkeys([*defaults.get("protected", []),
                                           *raw_task.get("protected", [])])),
            tags=tuple(dict.fromkeys([*defaults.get("tags", []), *raw_task.get("tags", [])])),
            permissions=raw_task.get("permissions", defaults.get("permissions", "full")),
            network=raw_task.get("network", defaults.get("network", False)),
            limits=Limits(
                turns=limits.get("turns", DEFAULT_TURNS),
                seconds=float(limits.get("seconds", DEFAULT_SECONDS)),
                cost=limits.get("cost"),
            ),
            extra={key: raw_task[key] for key in extra_keys if key in raw_task},
            line=line,
        ))
    name = "" if isinstance(data, list) else data.get("name", "")
    return Suite(path, tasks, sha, name or path.stem, list(warnings),
                 sandbox=defaults.get("sandbox"))


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

    problems = list(schema_problems(located, schema, label, registry))
    problems.extend(rule_problems(located, label, registry))
    return located, problems
