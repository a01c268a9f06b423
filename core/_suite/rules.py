"""The rules that keep a suite honest, beyond its schema.

1. Every task needs a mechanical check the agent cannot satisfy by talking (an error).
2. Prompts state the goal, not the method: naming one of the agent's tools is a warning.
Task ids must be unique, and unique regardless of case (workspaces are directories).
A check the preflight of a grader that reads only its checks refuses (a python check
whose code does not compile, a regex RE2 cannot match) is an error at the check's line.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Iterable
from typing import Any

from evalctl._errors import Problem, UsageError, describe_crash, stops_the_run
from evalctl._plugin.registry import Registry, use_registry
from evalctl._plugin.tooldefs import TOOL_NAMES
from evalctl._suite.model import DEFAULT_SECONDS, DEFAULT_TURNS
from evalctl._suite.problems import shown
from evalctl._suite.schema import FILE_PATH_PATTERN, RESERVED_TASK_IDS
from evalctl._suite.yamlsource import Located

_FILE_PATH = re.compile(FILE_PATH_PATTERN)
_TOOL_IN_PROMPT = re.compile(r"\b(" + "|".join(map(re.escape, TOOL_NAMES)) + r")\b")


def tasks_path(data: Any) -> tuple[str, ...]:
    return () if isinstance(data, list) else ("tasks",)


def tasks_of(data: Any) -> list[Any]:
    return data if isinstance(data, list) else data["tasks"]


def written_tasks(data: Any) -> list[Any] | None:
    """The suite's list of tasks as written (a top-level list, or `tasks:`), whatever
    else is wrong with it; None when there is no list."""
    tasks = data if isinstance(data, list) else data.get("tasks") if isinstance(data, dict) \
        else None
    return tasks if isinstance(tasks, list) else None


def _tasks_with_ids(located: Located) -> Iterable[tuple[tuple, dict]]:
    """Every task that has a text id, however broken the rest of it is."""
    data = located.data
    tasks = written_tasks(data)
    if tasks is None:
        return
    base = tasks_path(data)
    for index, task in enumerate(tasks):
        if isinstance(task, dict) and isinstance(task.get("id"), str):
            yield (*base, index), task


def _well_formed_tasks(located: Located, registry: Registry) -> Iterable[tuple[tuple, dict]]:
    """Tasks whose shape the rules can read, even when other parts have schema errors."""
    for path, task in _tasks_with_ids(located):
        if not (isinstance(task.get("prompt"), str) and isinstance(task.get("checks"), list)):
            continue
        checks = task["checks"]
        if checks and all(isinstance(c, dict) and c.get("type") in registry.graders
                          for c in checks):
            yield path, task


def counts_for_rule_one(spec: Any) -> bool:
    """Rule 1: only a mechanical check that talk cannot satisfy keeps a task honest.
    Judges never decide pass or fail, so they cannot be that check."""
    return spec.kind == "mechanical" and not spec.talk_only


def rule_problems(located: Located, label: str, registry: Registry) -> Iterable[Problem]:
    yield from _id_problems(located, label)
    for path, task in _well_formed_tasks(located, registry):
        line = located.line_of(path)
        task_id = task["id"]
        files, hidden = task.get("files"), task.get("verify_files")
        if isinstance(files, dict) and isinstance(hidden, dict):
            for shared in sorted(set(files) & set(hidden)):
                yield Problem(label, located.key_lines.get((*path, "verify_files", shared), line),
                              f"task '{shown(task_id)}': '{shared}' is in both files and "
                              "verify_files; a verify file is written after the agent, so it "
                              "cannot also be seeded")
        yield from _patch_problems(located, label, path, task)
        yield from _file_name_problems(located, label, path, task)
        yield from _check_problems(located, label, path, task, registry)
        yield from _provider_problems(located, label, path, task, registry)
        types = [check["type"] for check in task["checks"]]
        if not any(counts_for_rule_one(registry.graders[t]) for t in types):
            yield Problem(label, line, (
                f"task '{shown(task_id)}': no check ({', '.join(types)}) is a mechanical one the "
                "agent cannot satisfy by talking; add one that inspects what it left behind, "
                f"such as {_counting_examples(registry)}"))
        named = sorted(set(_TOOL_IN_PROMPT.findall(task["prompt"])))
        if named:
            yield Problem(label, located.line_of((*path, "prompt")), (
                f"task '{shown(task_id)}': the prompt names the agent's tool(s) "
                f"{', '.join(named)}; "
                "state the goal, not the method"), severity="warning")


def _check_problems(located: Located, label: str, path: tuple, task: dict,
                    registry: Registry) -> Iterable[Problem]:
    """Each check refused by the preflight of a grader that reads only its checks
    (`validate_with_preflight`), at the check's line: found by a newcomer to pass
    validate and then stop the run with no file:line. Other preflights may depend on the
    machine (a judge's API key) and are called by the run alone, before any task."""
    for index, check in enumerate(task["checks"]):
        spec = registry.graders[check["type"]]
        preflight = spec.preflight
        if preflight is None or not spec.validate_with_preflight or \
                inspect.iscoroutinefunction(preflight):
            continue
        try:
            with use_registry(registry):
                preflight([dict(check)])
        except BaseException as exc:
            if stops_the_run(exc):  # SystemExit is the plugin's: it ended evalctl, exit 0
                raise
            # A crash stops the run as a refusal does, so validate says so too, at the
            # check's line (found by a plugin newcomer: validate passed, run stopped).
            yield Problem(label, located.line_of((*path, "checks", index)),
                          f"task '{shown(task['id'])}', checks[{index}] ({check['type']}): "
                          f"{preflight_refusal(registry, check['type'], exc)}")


def preflight_refusal(registry: Registry, grader: str, exc: BaseException) -> str:
    """Why a grader's preflight refused its checks: a UsageError's own words, or its
    crash, naming the plugin (the run's preflight and validate say it alike)."""
    if isinstance(exc, UsageError):
        return str(exc)
    owner = registry.plugin_of("grader", grader)
    return (f"the grader's preflight failed{f' ({owner.label})' if owner else ''}: "
            f"{describe_crash(exc)}")


def _provider_problems(located: Located, label: str, path: tuple, task: dict,
                       registry: Registry) -> Iterable[Problem]:
    """What each provider's `task_problems` finds in the task keys it reads (the
    scripted provider: a script whose last turn calls tools, so that the agent asks for
    a turn it does not have), at the line of the node it names: found by a newcomer to
    pass validate and end every attempt of the task script_error."""
    defaults = located.data.get("defaults") if isinstance(located.data, dict) else None
    written = [limits for limits in ((defaults or {}).get("limits"), task.get("limits"))
               if isinstance(limits, dict)]
    limits = {"turns": DEFAULT_TURNS, "seconds": DEFAULT_SECONDS, "cost": None}
    for given in written:
        limits.update(given)
    seen = {**task, "limits": limits}
    for spec in registry.providers.values():
        if spec.task_problems is None or not set(spec.task_schema) & set(task):
            continue
        try:
            found = list(spec.task_problems(seen))
        except Exception:  # noqa: S112 - a plugin's bug must not stop validation
            continue
        for node, message, severity in found:
            yield Problem(label, located.line_of((*path, *node)), str(message),
                          severity="warning" if severity == "warning" else "error")


# The longest name of one file or directory that Linux file systems take, in bytes.
NAME_MAX = 255


def _file_name_problems(located: Located, label: str, path: tuple, task: dict
                        ) -> Iterable[Problem]:
    """Names in files and verify_files that no workspace can hold (an empty or '.' part,
    a part over NAME_MAX bytes) and a name that is another's directory (`d` and `d/e`):
    found by an attacker to pass validate and fail every attempt's setup."""
    named: dict[str, str] = {}
    for field in ("files", "verify_files"):
        mapping = task.get(field)
        if not isinstance(mapping, dict):
            continue
        for name in mapping:
            if not _FILE_PATH.search(name):
                continue  # refused by the schema, with its reason: one error per name
            where = located.key_lines.get((*path, field, name), located.line_of(path))
            parts = name.split("/")
            if any(part in ("", ".") for part in parts):
                # With the name meant (found by a newcomer: `./a.py:` was refused
                # without saying what to write instead).
                meant = "/".join(part for part in parts if part not in ("", "."))
                why = "has an empty or '.' part" + \
                    (f": write '{shown(meant)}'" if meant else "")
            elif any(len(part.encode("utf-8", "surrogatepass")) > NAME_MAX for part in parts):
                why = f"has a part over {NAME_MAX} bytes, more than a file system takes"
            else:
                named.setdefault(name, field)
                continue
            yield Problem(label, where, f"task '{shown(task['id'])}': {field} '{shown(name)}' "
                                        f"{why}")
    for name, field in named.items():
        parts = name.split("/")
        for depth in range(1, len(parts)):
            parent = "/".join(parts[:depth])
            if parent in named:
                yield Problem(label, located.key_lines.get((*path, field, name),
                                                           located.line_of(path)),
                              f"task '{shown(task['id'])}': {field} '{shown(name)}' is inside "
                              f"'{shown(parent)}', which {named[parent]} makes a file")
                break


def _patch_problems(located: Located, label: str, path: tuple, task: dict) -> Iterable[Problem]:
    """A verify_patch must be a diff, touch only paths inside the workspace, and not
    touch a path verify_files also writes."""
    from evalctl._sources.patch import patch_paths
    from evalctl._sources.patch import patch_problems as problems_of

    patch = task.get("verify_patch")
    if not isinstance(patch, str) or not patch:
        return
    line = located.line_of((*path, "verify_patch"))
    for problem in problems_of(patch):
        yield Problem(label, line, f"task '{shown(task['id'])}': verify_patch: {problem}")
    hidden = task.get("verify_files")
    if isinstance(hidden, dict):
        for shared in sorted(set(patch_paths(patch)) & set(hidden)):
            yield Problem(label, line, f"task '{shown(task['id'])}': '{shared}' is in both "
                                       "verify_patch and verify_files; give it in one")


def _id_problems(located: Located, label: str) -> Iterable[Problem]:
    """Duplicate ids, over every task with an id: reported with the other errors, not
    only once those are fixed."""
    first_seen: dict[str, int] = {}
    by_folded_case: dict[str, str] = {}  # lower-cased id -> the first id spelled that way
    for path, task in _tasks_with_ids(located):
        task_id = task["id"]
        id_line = located.line_of((*path, "id"))
        if task_id in first_seen:
            yield Problem(label, id_line, f"duplicate task id '{shown(task_id)}' (first used "
                                          f"at line {first_seen[task_id]})")
        else:
            first_seen[task_id] = id_line
        if task_id.lower() in RESERVED_TASK_IDS:
            yield Problem(label, id_line, (
                f"task id '{shown(task_id)}' is the name of the file every run directory "
                f"keeps its journal in ({task_id.lower()}"
                + (", on a file system that ignores case" if task_id != task_id.lower()
                   else "") + "), where this task's workspace would go: choose another id"))
        folded = by_folded_case.setdefault(task_id.lower(), task_id)
        if folded != task_id:
            yield Problem(label, id_line, f"task id '{task_id}' differs from another only in "
                                          "case; workspaces would collide on some systems")


def _counting_examples(registry: Registry) -> str:
    """Installed graders that satisfy rule 1, for the message: the core names none."""
    names = sorted(name for name, spec in registry.graders.items() if counts_for_rule_one(spec))
    if not names:
        return "a mechanical grader (none is installed)"
    return ", ".join(names[:6]) + (", ..." if len(names) > 6 else "")
