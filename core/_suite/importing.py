"""`evalctl import NAME FILE`: an importer plugin reads a benchmark's file, and evalctl
validates what it made against the installed plugins' suite schema and rules before
writing a suite. Problems are reported at the input's lines; nothing is written unless
the whole suite is valid."""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evalctl._errors import Problem, SuiteError, UsageError
from evalctl._plugin.options import typed_options
from evalctl._plugin.registry import Registry
from evalctl._plugin.types import ImportedSuite
from evalctl._suite.loader import load_suite
from evalctl._suite.yamlwrite import dump, task_lines


@dataclass
class ImportResult:
    text: str  # the suite, as YAML
    tasks: int
    warnings: list[Problem]


def import_suite(registry: Registry, importer: str, source: Path, output: Path | None,
                 options: Mapping[str, Any]) -> ImportResult:
    """Read `source` with the importer, validate the suite it makes as if it were at
    `output` (local paths in it are relative to that file; the current directory when
    printed), and return it. SuiteError with every problem, at the input's lines."""
    spec = registry.get("importer", importer)
    typed = typed_options("importer", spec.name, spec.options_schema, options)
    label = str(source)
    if not source.is_file():
        raise SuiteError([Problem(label, 0, "cannot read: no such file")])
    try:
        imported = spec.read(source, typed)
    except (UsageError, SuiteError):
        raise
    except Exception as exc:  # a broken importer plugin: its error, not a traceback
        raise UsageError(f"importer '{spec.name}' failed: {type(exc).__name__}: {exc}") \
            from None
    if not isinstance(imported, ImportedSuite):
        raise UsageError(f"importer '{spec.name}' returned {type(imported).__name__}, "
                         "expected evalctl.ImportedSuite")
    problems = [Problem(label, p.line, p.message, p.severity) for p in imported.problems]
    if any(p.severity == "error" for p in problems):
        raise SuiteError(problems)
    if not imported.tasks:
        raise SuiteError([*problems, Problem(label, 0, "no task to import")])
    text = _suite_text(spec.name, source, imported)
    count, warnings = _validate(text, output, label, imported, registry)
    return ImportResult(text, count, [*problems, *warnings])


def _suite_text(name: str, source: Path, imported: ImportedSuite) -> str:
    suite: dict[str, Any] = {"name": imported.name or source.stem}
    if imported.description:
        suite["description"] = imported.description
    if imported.defaults:
        suite["defaults"] = imported.defaults
    suite["tasks"] = imported.tasks
    try:
        return dump(suite, header=f"Imported by `evalctl import {name} {source.name}`.")
    except ValueError as exc:
        raise UsageError(f"importer '{name}' made a suite that cannot be written: {exc}") \
            from None


def _validate(text: str, output: Path | None, label: str, imported: ImportedSuite,
              registry: Registry) -> tuple[int, list[Problem]]:
    """Load the suite from a scratch file where it will be written; map its problems to
    the lines of the input the tasks came from."""
    directory = (output.parent if output is not None else Path.cwd()).resolve()
    directory.mkdir(parents=True, exist_ok=True)
    fd, scratch = tempfile.mkstemp(dir=directory, prefix=".evalctl-import-", suffix=".yaml")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        try:
            suite = load_suite(Path(scratch), registry, use_cache=False)
        except SuiteError as exc:
            raise SuiteError(_mapped(exc.problems, text, label, imported)) from None
    finally:
        with contextlib.suppress(OSError):
            os.unlink(scratch)
    return len(suite.tasks), _mapped(suite.warnings, text, label, imported)


def _mapped(problems: list[Problem], text: str, label: str,
            imported: ImportedSuite) -> list[Problem]:
    """A problem in the generated suite, said at the input line of the task it is in."""
    starts = task_lines(text)
    out = []
    for problem in problems:
        index = max((i for i, start in enumerate(starts) if start <= problem.line), default=None)
        line = imported.lines[index] if index is not None and index < len(imported.lines) \
            else 0
        task = imported.tasks[index].get("id", "?") if index is not None else None
        where = f"the imported task '{task}'" if task else "the imported suite"
        out.append(Problem(label, line, f"{where} is not a valid suite task: "
                                        f"{problem.message}", problem.severity))
    return out
