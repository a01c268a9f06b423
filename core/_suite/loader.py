"""Loading a suite: bytes -> strictyaml -> plain data -> JSON Schema -> Suite.

Every problem is reported with its file and line, and all of them at once.
"""

from __future__ import annotations

import hashlib
import os
import stat
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

from evalctl._errors import Problem, SuiteError, stops_the_run
from evalctl._plugin.registry import Registry, get_registry, use_registry
from evalctl._schema_check import SchemaCheck
from evalctl._sources.model import COMMIT, Source, source_from_data
from evalctl._sources.model import problems as source_problems
from evalctl._suite import cache as suite_cache
from evalctl._suite import provided
from evalctl._suite.model import (
    DEFAULT_SECONDS,
    DEFAULT_SETUP_SECONDS,
    DEFAULT_TURNS,
    Limits,
    Setup,
    Suite,
    Task,
)
from evalctl._suite.problems import schema_problems, text_problems
from evalctl._suite.rules import (
    counts_for_rule_one,
    rule_problems,
    tasks_of,
    tasks_path,
    written_tasks,
)
from evalctl._suite.schema import SOURCE, plugin_task_keys, registry_schema, schema_digest
from evalctl._suite.yamlerrors import block_words, empty_blocks
from evalctl._suite.yamlsource import MAX_DEPTH, Located, YamlSyntaxError, parse


def load_suite(path: str | Path, registry: Registry | None = None,
               use_cache: bool = True) -> Suite:
    """Load and validate a suite; raise SuiteError listing every problem."""
    registry = registry or get_registry()
    path = Path(path)
    label = str(path)
    raw = _read_suite(path, label)
    schema = registry_schema(registry)
    # Rule 1 depends on which graders count, so that is part of the key too.
    not_counting = sorted(name for name, spec in registry.graders.items()
                          if not counts_for_rule_one(spec))
    sha = hashlib.sha256(raw).hexdigest()
    # What a plugin's code decides beyond its schema (a preflight validate runs, the
    # paths a check names) is keyed by the plugins loaded: a changed one is a miss.
    key = suite_cache.cache_key(raw, schema_digest(schema), not_counting,
                                suite_cache.plugin_inputs(registry.plugins))
    if use_cache:
        cached = suite_cache.read(key)
        if cached is not None:
            try:
                warnings = [Problem(label, int(w["line"]), str(w["message"]), str(w["severity"]))
                            for w in cached["warnings"]]
                source_lines = cached["source_lines"]
                suite = _build(path, cached["data"], cached["task_lines"], source_lines, sha,
                               warnings, registry, sandbox_line=int(cached["sandbox_line"]),
                               check_lines=cached["check_lines"],
                               extra_lines=cached["extra_lines"],
                               named=cached["named_paths"])
            except (KeyError, TypeError, ValueError, AttributeError):
                suite = None  # an entry of the wrong shape is a miss: validate the file again
            if suite is not None:
                # A source is outside the file: whether it is still there is checked anew,
                # and so is what it provides.
                _check_sources(suite, source_lines, label)
                _check_named_paths(suite, label)
                return suite

    located, problems = _parse_and_validate(raw, label, schema, registry)
    errors = [p for p in problems if p.severity == "error"]
    if errors:
        # Sources written well are checked too: every problem is reported at once, not
        # a missing source directory only once the schema errors are fixed.
        raise SuiteError([*problems, *_source_problems(_written_sources(located, path.parent),
                                                       label)])
    where = tasks_path(located.data)
    task_lines = [located.line_of((*where, i)) for i in range(len(tasks_of(located.data)))]
    check_lines = [[located.line_of((*where, i, "checks", j))
                    for j in range(len(task.get("checks") or []))]
                   for i, task in enumerate(tasks_of(located.data))]
    source_lines = _source_lines(located)
    extra_lines = _extra_lines(located, plugin_task_keys(registry.providers))
    named = _named_paths(located, registry)
    sandbox_line = located.line_of(("defaults", "sandbox")) \
        if isinstance(located.data, dict) and "sandbox" in located.data.get("defaults", {}) else 0
    if use_cache:
        suite_cache.write(key, {
            "data": located.data,
            "task_lines": task_lines,
            "source_lines": source_lines,
            "sandbox_line": sandbox_line,
            "check_lines": check_lines,
            "extra_lines": extra_lines,
            "named_paths": named,
            "warnings": [{"line": p.line, "message": p.message, "severity": p.severity}
                         for p in problems],
        })
    suite = _build(path, located.data, task_lines, source_lines, sha, problems, registry,
                   sandbox_line=sandbox_line, check_lines=check_lines,
                   extra_lines=extra_lines, named=named)
    _check_sources(suite, source_lines, label)
    _check_named_paths(suite, label)
    return suite


def _named_paths(located: Located, registry: Registry) -> list[list[list[Any]]]:
    """Per task, [check index, path, line of the entry, its key] of each workspace path its
    checks name (`GraderSpec.named_paths`): what the task must provide."""
    where = tasks_path(located.data)
    found: list[list[list[Any]]] = []
    for i, task in enumerate(tasks_of(located.data)):
        named: list[list[Any]] = []
        for j, check in enumerate(task.get("checks") or []):
            spec = registry.graders.get(check.get("type")) if isinstance(check, dict) else None
            if spec is None or spec.named_paths is None:
                continue
            try:
                with use_registry(registry):
                    entries = list(spec.named_paths(dict(check)))
            except BaseException as exc:  # a plugin's bug must not stop loading; its grade runs
                if stops_the_run(exc):  # SystemExit is the plugin's: it ended evalctl, exit 0
                    raise
                continue
            for key, written in entries:
                path = provided.named_path(str(written))
                if path is not None:
                    line = located.line_of((*where, i, "checks", j, *key))
                    named.append([j, path, line, str(key[0]) if key else ""])
        found.append(named)
    return found


def _check_named_paths(suite: Suite, label: str) -> None:
    """Each path a check names that the task provides nowhere (evalctl._suite.provided)
    and the prompt does not ask the agent to write: an error at its entry's line, a
    warning when `setup:` may make it; SuiteError if any is an error.
    A task whose source's files cannot be known now is passed over (its grading says
    so, if the path is still missing then)."""
    listed: dict[Source, list[str] | None] = {}
    found: list[Problem] = []
    for task in suite.tasks:
        if not task.named_paths:
            continue
        files = provided.task_files(task, listed)
        if files is None:
            continue
        for index, path, line, key in task.named_paths:
            if provided.is_provided(path, files) or provided.agents_job(task, path):
                continue
            near = provided.nearest(path, files)
            hint = f"; did you mean '{near}'?" if near else ""
            gives = f"the source {task.source.describe()}, " if task.source else ""
            what = f"task '{task.id}', checks[{index}] ({task.checks[index]['type']}): " \
                f"{f'`{key}:` names ' if key else ''}'{path}', which the task does not give " \
                f"(it is not in {gives}files, verify_files or verify_patch)"
            if task.setup is not None:
                found.append(Problem(label, line, (
                    f"{what}{hint or '.'} `setup:` must make it: if it does not, the check is "
                    "an error, not the agent's failure"), severity="warning"))
            else:
                found.append(Problem(label, line, (
                    f"{what}; no `setup:` makes it, and the prompt does not ask the agent "
                    f"to write it{hint} (a file the agent is to write must be named in the "
                    "prompt)")))
    if any(p.severity == "error" for p in found):
        raise SuiteError([*found, *suite.warnings])
    suite.warnings.extend(found)


# What a path that is not a regular file is, for the message.
_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a named pipe (FIFO)"),
          (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a device"), (stat.S_ISBLK, "a device"))


def _suites_in(directory: Path) -> str:
    """`: DIR/suite.yaml?` for a directory given where a suite file was wanted (found by
    a newcomer: `evalctl run my-evals`, the directory `init` had just made)."""
    found = _yaml_files(directory)
    # suite.yaml is looked for among them all, not among the first three by name (a
    # directory with a.yaml, b.yaml and c.yaml beside it was answered with those).
    found = ["suite.yaml"] if "suite.yaml" in found else found[:3]
    return f": {' or '.join(str(directory / name) for name in found)}?" if found else ""


def _file_like(path: Path) -> str:
    """` (did you mean DIR/suite.yaml?)` for a suite file that is not there when its
    directory holds a YAML file of a name close to it (found by a newcomer:
    `evalctl run suite.yml` beside suite.yaml said only "No such file or directory")."""
    import difflib

    directory = path.parent
    close = difflib.get_close_matches(path.name, _yaml_files(directory), n=1, cutoff=0.85)
    return f" (did you mean {directory / close[0]}?)" if close else ""


def _yaml_files(directory: Path) -> list[str]:
    """The names of the YAML files in `directory`, sorted ([] when it cannot be read)."""
    try:
        return sorted(entry.name for entry in os.scandir(directory)
                      if entry.name.endswith((".yaml", ".yml")) and entry.is_file())
    except OSError:
        return []


def _read_suite(path: Path, label: str) -> bytes:
    """The bytes of a suite file, or a SuiteError saying why there are none. Only a
    regular file is read: reading a FIFO would wait for a writer forever, and a device
    may never end."""
    try:
        link = f" (a link to {os.readlink(path)})" if path.is_symlink() else ""
    except OSError:
        link = ""

    def refused(reason: str) -> SuiteError:
        return SuiteError([Problem(label, 0, f"cannot read suite: {reason}")])

    def not_a_file(mode: int) -> SuiteError:
        kind = next((name for test, name in _KINDS if test(mode)), "not a regular file")
        return refused(f"it is {kind}{link}; name a suite file (a .yaml file)"
                       f"{_suites_in(path) if stat.S_ISDIR(mode) else ''}")

    try:
        # Looked at before it is opened: opening a device can have effects of its own.
        mode = os.stat(path).st_mode
        if not stat.S_ISREG(mode):
            raise not_a_file(mode)
        # Non-blocking, so that what replaced the file since (a FIFO) cannot hang the
        # open; what was opened is looked at again.
        descriptor = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) |
                             getattr(os, "O_NOCTTY", 0) | getattr(os, "O_BINARY", 0))
    except FileNotFoundError:
        raise refused(f"no such file{link}" if link else
                      f"No such file or directory{_file_like(path)}") from None
    except OSError as exc:
        raise refused(f"{exc.strerror or exc}{link}") from None
    with os.fdopen(descriptor, "rb") as stream:
        mode = os.fstat(descriptor).st_mode
        if not stat.S_ISREG(mode):
            raise not_a_file(mode)
        try:
            return stream.read()
        except OSError as exc:
            raise refused(f"{exc.strerror or exc}{link}") from None


def _extra_lines(located: Located, keys: Iterable[str]) -> list[dict[str, int]]:
    """Per task, the line of each node under its plugin task keys (a provider's
    `agent_script:`), by its path from the task joined with "/": one pass over the
    lines, for a provider to say where a mistake it finds at run time is written."""
    wanted = set(keys)
    where = tasks_path(located.data)
    found: list[dict[str, int]] = [{} for _ in tasks_of(located.data)]
    if not wanted:
        return found
    depth = len(where)
    for node, line in located.lines.items():
        if len(node) > depth + 1 and node[:depth] == where and node[depth + 1] in wanted \
                and isinstance(node[depth], int) and node[depth] < len(found):
            found[node[depth]]["/".join(map(str, node[depth + 1:]))] = line
    return found


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
    found = _source_problems(((task.source, line) for task, line in
                              zip(suite.tasks, lines, strict=True)), label)
    if found:
        raise SuiteError([*found, *suite.warnings])


def _source_problems(uses: Iterable[tuple[Source | str | None, int]], label: str
                     ) -> list[Problem]:
    """The problems of each distinct source of (source, line where written) pairs, at
    the first line it is written at; a text in place of a source is its problem."""
    first: dict[Source, tuple[int, int]] = {}  # source -> (line, tasks using it)
    unusable: dict[Problem, None] = {}
    for source, line in uses:
        if isinstance(source, str):
            unusable[Problem(label, line, source)] = None
            continue
        if source is None or (source.rev is not None and not COMMIT.match(source.rev)):
            continue
        seen_line, count = first.get(source, (line, 0))
        first[source] = (seen_line, count + 1)
    found = list(unusable)
    for source, (line, count) in first.items():
        users = f" (used by {count} tasks)" if count > 1 else ""
        found += [Problem(label, line, message + users) for message in source_problems(source)]
    return found


def _written_sources(located: Located, base: Path) -> Iterator[tuple[Source | str, int]]:
    """Each task's source and the line it is written at, in a suite with errors: only a
    source whose own shape is valid (a task's own, else the defaults'), however broken
    the rest of the suite is."""
    data = located.data
    tasks = written_tasks(data)
    if tasks is None:
        return
    check = SchemaCheck(SOURCE)
    defaults = data.get("defaults") if isinstance(data, dict) else None
    written = defaults.get("source") if isinstance(defaults, dict) else None
    default = _resolved_source(written, base) if written is not None and \
        not check.errors(written) else None
    where = tasks_path(data)
    for index, task in enumerate(tasks):
        if not isinstance(task, dict):
            continue
        if "source" not in task:
            if default is not None:
                yield default, located.line_of(("defaults", "source"))
            continue
        source = _resolved_source(task["source"], base) if not check.errors(task["source"]) \
            else None
        if source is not None:
            yield source, located.line_of((*where, index, "source"))


def _resolved_source(data: Any, base: Path) -> Source | str | None:
    """The Source a valid `source:` mapping describes, or why its path cannot name a
    file (a NUL byte in it, `~user/` of a user this machine does not have)."""
    try:
        return source_from_data(data, base)
    except (ValueError, RuntimeError, OSError) as exc:
        kind = next((key for key in ("git", "dir", "archive") if key in data), "")
        return f"source {kind} {data.get(kind)!r}: not a usable path ({exc})"


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


def _build(path: Path, data: Any, task_lines: list[int], source_lines: list[int], sha: str,
           warnings: list[Problem], registry: Registry, sandbox_line: int = 0,
           check_lines: list[list[int]] | None = None,
           extra_lines: list[dict[str, int]] | None = None,
           named: list[list[list[Any]]] | None = None) -> Suite:
    defaults = {} if isinstance(data, list) else data.get("defaults", {})
    extra_keys = plugin_task_keys(registry.providers)
    base = path.parent
    tasks = []
    unusable: list[tuple[str, int]] = []
    all_check_lines = check_lines or [[] for _ in task_lines]
    all_extra_lines = extra_lines or [{} for _ in task_lines]
    all_named = named or [[] for _ in task_lines]
    for raw_task, line, source_line, lines_of_checks, lines_of_extra, named_here in zip(
            tasks_of(data), task_lines, source_lines, all_check_lines, all_extra_lines,
            all_named, strict=True):
        source = _resolved_source(raw_task.get("source", defaults.get("source")), base)
        if isinstance(source, str):
            unusable.append((source, source_line))
            source = None
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
            source=source,
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
            check_lines=tuple(int(n) for n in lines_of_checks),
            file=str(path),
            extra_lines={str(k): int(n) for k, n in lines_of_extra.items()},
            named_paths=tuple((int(j), str(p), int(n), str(k)) for j, p, n, k in named_here),
        ))
    if unusable:
        raise SuiteError([*_source_problems(((why, line) for why, line in unusable),
                                            str(path)), *warnings])
    name = "" if isinstance(data, list) else data.get("name", "")
    return Suite(path, tasks, sha, name or path.stem, list(warnings),
                 sandbox=defaults.get("sandbox"), sandbox_line=sandbox_line)


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
    problems.extend(text_problems(located, text, label, plugin_task_keys(registry.providers)))
    problems.extend(Problem(label, block[0], block_words(*block), severity="warning")
                    for block in empty_blocks(text))
    problems.extend(rule_problems(located, label, registry))
    return located, problems
