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
from evalctl._sources.model import COMMIT, Source, source_from_data
from evalctl._sources.model import problems as source_problems
from evalctl._suite import cache as suite_cache
from evalctl._suite.model import (
    DEFAULT_SECONDS,
    DEFAULT_SETUP_SECONDS,
    DEFAULT_TURNS,
    Limits,
    Setup,
    Suite,
    Task,
)
from evalctl._suite.problems import schema_problems
from evalctl._suite.rules import counts_for_rule_one, rule_problems, tasks_of, tasks_path
from evalctl._suite.schema import plugin_task_keys, registry_schema, schema_digest
from evalctl._suite.yamlsource import MAX_DEPTH, Located, YamlSyntaxError, parse


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
                suite = _build(path, cached["data"], cached["task_lines"], sha, warnings,
                               registry)
                source_lines = cached["source_lines"]
            except (KeyError, TypeError, ValueError, AttributeError):
                suite = None  # an entry of the wrong shape is a miss: validate the file again
            if suite is not None:
                # A source is outside the file: whether it is still there is checked anew.
                _check_sources(suite, source_lines, label)
                return suite

    located, problems = _parse_and_validate(raw, label, schema, registry)
    errors = [p for p in problems if p.severity == "error"]
    if errors:
        raise SuiteError(problems)
    where = tasks_path(located.data)
    task_lines = [located.line_of((*where, i)) for i in range(len(tasks_of(located.data)))]
    source_lines = _source_lines(located)
    if use_cache:
        suite_cache.write(key, {
            "data": located.data,
            "task_lines": task_lines,
            "source_lines": source_lines,
            "warnings": [{"line": p.line, "message": p.message, "severity": p.severity}
                         for p in problems],
        })
    suite = _build(path, located.data, task_lines, sha, problems, registry)
    _check_sources(suite, source_lines, label)
    return suite


def _source_lines(located: Located) -> list[int]:
    """Per task, the line its source is written at (its own, or the defaults')."""
    data, where = located.data, tasks_path(located.data)
    has_default = isinstance(data, dict) and "source" in data.get("defaults", {})
    lines = []
    for index, task in enumerate(tasks_of(data)):
        if "source" in task:
            lines.append(located.line_of((*where, index, "source")))
        elif has_default:
            lines.append(located.line_of(("defaults", "source")))
        else:
            lines.append(located.line_of((*where, index)))
    return lines


def _check_sources(suite: Suite, lines: list[int], label: str) -> None:
    """Every distinct source checked once (a missing path, an unsafe archive, a commit a
    local repository lacks), reported where it is written; SuiteError if any fails."""
    first: dict[Source, tuple[int, int]] = {}  # source -> (line, tasks using it)
    for task, line in zip(suite.tasks, lines, strict=True):
        if task.source is None or (task.source.rev is not None and
                                   not COMMIT.match(task.source.rev)):
            continue
        seen_line, count = first.get(task.source, (line, 0))
        first[task.source] = (seen_line, count + 1)
    found = []
    for source, (line, count) in first.items():
        users = f" (used by {count} tasks)" if count > 1 else ""
        found += [Problem(label, line, message + users) for message in source_problems(source)]
    if found:
        raise SuiteError([*found, *suite.warnings])


def validate_suite(path: str | Path, registry: Registry | None = None) -> list[Problem]:
    """Every problem in a suite, errors and warnings, without raising. An unchanged file
    is answered from the validated-suite cache (an entry is verified before use, and
    one that fails is a miss): its warnings are stored with it, and only a suite that
    validated is ever stored, so the answer is the one a full validation gives."""
    try:
        suite = load_suite(path, registry)
    except SuiteError as exc:
        return exc.problems
    return suite.warnings


def _build(path: Path, data: Any, task_lines: list[int], sha: str,
           warnings: list[Problem], registry: Registry) -> Suite:
    defaults = {} if isinstance(data, list) else data.get("defaults", {})
    extra_keys = plugin_task_keys(registry.providers)
    base = path.parent
    tasks = []
    for raw_task, line in zip(tasks_of(data), task_lines, strict=True):
        limits = {**defaults.get("limits", {}), **raw_task.get("limits", {})}
        setup = raw_task.get("setup", defaults.get("setup"))
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
            source=source_from_data(raw_task.get("source", defaults.get("source")), base),
            setup=Setup(tuple(setup["commands"]),
                        float(setup.get("timeout", DEFAULT_SETUP_SECONDS)),
                        bool(setup.get("network", False))) if setup else None,
            verify_patch=raw_task.get("verify_patch"),
            limits=Limits(
                turns=int(limits.get("turns", DEFAULT_TURNS)),  # 2.0 is an integer too
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
    deep = located.too_deep()
    if deep is not None:
        raise SuiteError([Problem(label, located.line_of(deep),
                                  f"nested more than {MAX_DEPTH} levels deep; a suite needs "
                                  "only a few")])

    problems = list(schema_problems(located, schema, label, registry))
    problems.extend(rule_problems(located, label, registry))
    return located, problems
