"""JSON Schema errors in a suite, said the way a person would say them, at file:line."""

from __future__ import annotations

import copy
import difflib
import re
from collections.abc import Iterable, Mapping
from typing import Any

from evalctl._errors import Problem
from evalctl._plugin.registry import Registry
from evalctl._schema_check import error_words, surely_valid, unusable_numbers
from evalctl._suite.schema import FILE_PATH_PATTERN, file_path_reason
from evalctl._suite.yamlsource import Located
from evalctl._text import SURROGATE


def shown(text: str) -> str:
    """`text` for a one-line message: as it is when printable, else with its control
    characters escaped (a task id "t\\n" must not break the line it is named in)."""
    return text if text.isprintable() else text.encode("unicode_escape").decode("ascii")


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


def _suggest(word: str, options: Iterable[str]) -> str | None:
    """The option `word` was probably meant to be: a tool it is another agent's name
    for, a close spelling, or the one option it is the first or last part of (`old` for
    `old_text`)."""
    from evalctl._plugin.tooldefs import TOOL_SYNONYMS

    options = [o for o in options if isinstance(o, str)]
    # Another agent's name for a tool, before spelling: `create_file` means write_file.
    meant = TOOL_SYNONYMS.get(word.lower())
    if meant in options:
        return meant
    close = difflib.get_close_matches(word, options, n=1)
    if close:
        return close[0]
    parts = [o for o in options if o.startswith(f"{word}_") or o.endswith(f"_{word}")]
    return parts[0] if len(parts) == 1 else None


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
                parts.append(f"task '{shown(node['id'])}'")
                continue
            label = f"{owner}[{step}]" if owner is not None else f"[{step}]"
            if owner == "checks" and isinstance(node, dict) and isinstance(node.get("type"), str):
                label += f" ({node['type']})"
            if owner == "tool_calls" and isinstance(node, dict) and \
                    isinstance(node.get("tool"), str):
                label += f" ({node['tool']})"
            parts.append(label)
        else:
            parts.append(f"'{step}'")
    return ", ".join(parts) or "the suite"


def schema_problems(located: Located, schema: Mapping[str, Any], label: str,
                     registry: Registry) -> Iterable[Problem]:
    data: Any = located.data
    odd: dict[tuple[Any, ...], tuple[Any, str]] = {}
    if located.odd_numbers:
        odd = {path: (_at(data, path), why) for path, why in unusable_numbers(data)}
    if odd:
        # The validators cannot be trusted with these numbers (Python's lets NaN through
        # every bound), so each is validated as a finite number of its own type: the rest
        # of the suite is still checked in this pass, and a number where the schema wants
        # text is refused as any number there is ("quote it").
        data = _replaced(data, {path: 0.5 if isinstance(value, float) else 0
                                for path, (value, _) in odd.items()})
    explained: set[tuple[Any, ...]] = set()
    found: list[Problem] = []
    if not surely_valid(data, schema):
        from jsonschema import Draft202012Validator

        validator = Draft202012Validator(schema)
        seen: set[tuple[int, str]] = set()
        for error in validator.iter_errors(data):
            for line, message in _explain(error, located, registry, odd, explained):
                if (line, message) not in seen:
                    seen.add((line, message))
                    found.append(Problem(label, line, message))
    # A number the schema would take is still one no JSON document holds.
    yield from (Problem(label, located.line_of(path), f"{_where(located, path)}: {why}")
                for path, (_, why) in odd.items() if path not in explained)
    yield from found


# A YAML escape of a UTF-16 surrogate (`\\udc00`, `\\U0000d800`): a suite is UTF-8 text, so
# that is the only way a lone surrogate gets into one, and only a suite that has one is
# looked through (a walk of every suite would cost a cold load of a large one dearly).
_SURROGATE_ESCAPE = re.compile(r"\\(?:u|U0000)[dD][89a-fA-F]")
_NUL_ESCAPE = re.compile(r"\\(?:0|x00|u0000|U00000000)")
_LONE = ("holds a lone surrogate ({code}), which is not a character: no path, file or "
         "command can hold it; write the character itself (in YAML \\U0001f600, not the "
         "pair \\ud83d\\ude00)")


def text_problems(located: Located, text: str, label: str, task_keys: Iterable[str]
                  ) -> Iterable[Problem]:
    """Text no path, file or command can hold, which the schema lets through and the
    run would then fail on (a check that crashes, a workspace that cannot be seeded):
    a lone surrogate anywhere but in what the model is told or says (a task's prompt and
    the providers' `task_keys`, such as a script, which are sent escaped), and a NUL in a
    setup command."""
    data = located.data
    tasks = () if isinstance(data, list) else ("tasks",)
    said = {"prompt", *task_keys}
    if _SURROGATE_ESCAPE.search(text):
        pending: list[tuple[tuple[Any, ...], Any]] = [((), data)]
        while pending:
            path, node = pending.pop()
            if isinstance(node, str):
                found = SURROGATE.search(node)
                if found:
                    yield Problem(label, located.line_of(path), f"{_where(located, path)}: "
                                  + _LONE.format(code=shown(found.group())))
            elif isinstance(node, dict):
                in_task = len(path) == len(tasks) + 1 and path[:-1] == tasks
                for key, value in node.items():
                    found = SURROGATE.search(key)
                    if found:
                        yield Problem(label, located.key_lines.get(
                            (*path, key), located.line_of(path)),
                            f"{_where(located, path)}: the key '{shown(key)}' "
                            + _LONE.format(code=shown(found.group())))
                    elif not (in_task and key in said):
                        pending.append(((*path, key), value))
            elif isinstance(node, list):
                pending.extend(((*path, index), item) for index, item in enumerate(node))
    if _NUL_ESCAPE.search(text):
        owners = [(("defaults",), data.get("defaults"))] if isinstance(data, dict) else []
        written = data if isinstance(data, list) else data.get("tasks") \
            if isinstance(data, dict) else None
        if isinstance(written, list):
            owners += [((*tasks, index), task) for index, task in enumerate(written)]
        for path, owner in owners:
            setup = owner.get("setup") if isinstance(owner, dict) else None
            commands = setup.get("commands") if isinstance(setup, dict) else None
            for index, command in enumerate(commands if isinstance(commands, list) else []):
                if isinstance(command, str) and "\x00" in command:
                    where = (*path, "setup", "commands", index)
                    yield Problem(label, located.line_of(where),
                                  f"{_where(located, where)}: holds a NUL character (\\x00), "
                                  "which no command can")


def _at(data: Any, path: tuple[Any, ...]) -> Any:
    for step in path:
        data = data[step]
    return data


def _replaced(data: Any, values: Mapping[tuple[Any, ...], Any]) -> Any:
    """A copy of `data` with the value at each path replaced; only the containers on
    those paths are copied (the rest is shared), so it costs what the paths do."""
    copies: dict[tuple[Any, ...], Any] = {(): copy.copy(data)}
    for path, value in values.items():
        node = copies[()]
        for depth in range(1, len(path)):
            prefix = path[:depth]
            if prefix not in copies:
                copies[prefix] = copy.copy(node[path[depth - 1]])
                node[path[depth - 1]] = copies[prefix]
            node = copies[prefix]
        node[path[-1]] = value
    return copies[()]


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    return "array" if isinstance(value, list) else "object"


def _branch_types(branch: Any) -> set[str] | None:
    """The JSON types a union's branch can take, or None when it does not say."""
    if not isinstance(branch, Mapping):
        return None
    declared = branch.get("type")
    if isinstance(declared, str):
        return {declared}
    if isinstance(declared, list):
        return set(declared)
    if isinstance(branch.get("enum"), list):
        return {_json_type(value) for value in branch["enum"]}
    if "const" in branch:
        return {_json_type(branch["const"])}
    return None


def _takes_type(branch: Any, value: Any) -> bool:
    types = _branch_types(branch)
    if types is None:
        return True
    kind = _json_type(value)
    return kind in types or (kind == "integer" and "number" in types) or \
        (kind == "number" and "integer" in types and float(value).is_integer())


def _discriminator(branches: list[Any]) -> str | None:
    """The key every one of these mapping branches fixes to a value of its own with
    `const` (a sandbox's `name`, a check's `type`), or None."""
    first = branches[0].get("properties", {}) if isinstance(branches[0], Mapping) else {}
    for key, value in first.items():
        if isinstance(value, Mapping) and "const" in value and all(
                isinstance(b, Mapping) and b.get("type") == "object" and
                isinstance(b.get("properties", {}).get(key), Mapping) and
                "const" in b["properties"][key] for b in branches):
            return str(key)
    return None


def _branch_words(branch: Any) -> str:
    if isinstance(branch.get("enum"), list):
        return "one of " + ", ".join(map(str, branch["enum"]))
    if "const" in branch:
        return repr(branch["const"])
    types = sorted(_branch_types(branch) or ())
    return " or ".join(_TYPE_WORDS.get(t, t) for t in types) or "something else"


def _meant_branch(error: Any, instance: Any, path: tuple[Any, ...], located: Located,
                  registry: Registry) -> int | list[tuple[int, str]] | None:
    """The branch of a union (oneOf, anyOf) that `instance` was meant for, by its type
    and, for a mapping, by the key that names the branch (a sandbox's `name`): its
    errors are the ones to show, since every other branch's would be false ("expected
    'local', got 'bwrap'"). Or the problems themselves when no branch is meant (an
    unknown name, a value of a type no branch takes), or None when it cannot be told."""
    branches = error.validator_value
    line, where = located.line_of(path), _where(located, path)
    fitting = [index for index, branch in enumerate(branches) if _takes_type(branch, instance)]
    if not fitting:
        words = " or ".join(dict.fromkeys(_branch_words(b) for b in branches))
        return [(line, f"{where}: expected {words}; got {_describe_value(instance)}")]
    if isinstance(instance, dict):
        key = _discriminator([branches[index] for index in fitting])
        if key is not None:
            names = {index: branches[index]["properties"][key]["const"] for index in fitting}
            listed = ", ".join(map(str, names.values()))
            if key not in instance:
                return [(line, f"{where}: missing required key '{key}' (one of {listed})")]
            chosen = instance[key]
            matching = [index for index, name in names.items()
                        if name == chosen and type(name) is type(chosen)]
            if not matching:
                key_line = located.line_of((*path, key))
                key_where = _where(located, (*path, key))
                kind = path[-1] if path and isinstance(path[-1], str) else None
                if isinstance(chosen, str) and kind in registry.specs:
                    # A sandbox (or other plugin) of that name is not installed: say
                    # which are, and why it may be missing.
                    return [(key_line, f"{key_where}: "
                                       f"{registry.explain_missing(kind, chosen)}")]
                return [(key_line, f"{key_where}: expected one of {listed}; got "
                                   f"{_describe_value(chosen)}")]
            fitting = matching
    return fitting[0] if len(fitting) == 1 else None


def _explain(error: Any, located: Located, registry: Registry,
             odd: Mapping[tuple[Any, ...], tuple[Any, str]],
             explained: set[tuple[Any, ...]]) -> list[tuple[int, str]]:
    """What `error` means, at its line. `odd` holds the numbers no JSON document holds,
    by path (the validated data has a stand-in there) and why; the paths whose number is
    explained here (a number where text is wanted) are added to `explained`."""
    path = tuple(error.absolute_path)
    line = located.line_of(path)
    where = _where(located, path)
    kind = error.validator
    instance = error.instance
    if path in odd:
        instance, _ = odd[path]
        if not isinstance(instance, float):
            return []  # an integer too long to show: its own message says what to do
        if kind not in ("allOf", "anyOf", "oneOf"):
            if kind not in ("type", "enum", "const"):
                return []  # a bound the stand-in broke: its own message says it
            explained.add(path)
    if kind == "if":
        return []  # the `then`/`else` errors that follow say what is wrong
    if kind == "oneOf" and all(set(b) == {"required"} for b in error.validator_value):
        # Before the branches' own errors: "missing 'text'" and "missing 'regex'" would
        # read as if both were required.
        keys = ", ".join(f"'{b['required'][0]}'" for b in error.validator_value)
        return [(line, f"{where}: needs exactly one of {keys}")]
    if kind in ("anyOf", "oneOf") and error.context:
        meant = _meant_branch(error, instance, path, located, registry)
        if isinstance(meant, list):
            if path in odd:
                explained.add(path)
            return meant
        if meant is not None:
            explained_here = [item for sub in error.context
                              if sub.relative_schema_path[0] == meant
                              for item in _explain(sub, located, registry, odd, explained)]
            if explained_here:
                return explained_here
    if kind in ("allOf", "anyOf", "oneOf") and error.context:
        return [item for sub in error.context
                for item in _explain(sub, located, registry, odd, explained)]
    if kind == "type" and not path:
        return [(line, "expected a list of tasks, or a mapping with 'tasks:'; got "
                       f"{_describe_value(instance)}")]
    if kind == "type":
        expected = error.validator_value
        words = " or ".join(_TYPE_WORDS.get(t, t) for t in
                            (expected if isinstance(expected, list) else [expected]))
        message = f"{where}: expected {words}, got {_describe_value(instance)}"
        if expected == "string" and not isinstance(instance, dict | list):
            message += "; quote it to make it text"
        elif expected == "string" and path in located.flow:
            brackets = "[...]" if isinstance(instance, list) else "{...}"
            message += (f" (written {brackets}, flow style); a text that starts with "
                        f"'{brackets[0]}' must be quoted to be text")
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
            close = _suggest(key, allowed)
            message += f" (did you mean '{close}'?)" if close else \
                f"; allowed: {', '.join(allowed)}"
            out.append((located.key_lines.get((*path, key), line), message))
        return out
    if kind == "enum" and path and path[-1] == "type" and len(path) > 2 and path[-3] == "checks":
        return [(line, f"{where}: unknown check type {instance!r}: "
                       f"{registry.explain_missing('grader', str(instance))}")]
    if kind == "enum":
        options = ", ".join(map(str, error.validator_value))
        message = f"{where}: expected one of {options}; got {_describe_value(instance)}"
        close = _suggest(instance, error.validator_value) if isinstance(instance, str) else None
        return [(line, message + (f" (did you mean '{close}'?)" if close else ""))]
    if kind == "const":
        return [(line, f"{where}: expected {error.validator_value!r}, got "
                       f"{_describe_value(instance)}")]
    if kind == "pattern" and "propertyNames" in error.schema_path:
        # The instance is a mapping key: point at the key's own line.
        key_line = located.key_lines.get((*path, instance), line)
        reason = error.schema.get("description") or f"must match {error.validator_value}"
        if error.validator_value == FILE_PATH_PATTERN and isinstance(instance, str):
            reason = file_path_reason(instance)
        return [(key_line, f"{where}: {instance!r} {reason}")]
    if kind == "pattern" and error.validator_value == FILE_PATH_PATTERN and \
            isinstance(instance, str):
        # A check's path, with the reason that applies (found by a newcomer: `~/a.py`
        # was told "no '..', not absolute", neither of which it is).
        return [(line, f"{where}: {instance!r} {file_path_reason(instance)}")]
    if kind == "pattern":
        reason = error.schema.get("description") or f"must match {error.validator_value}"
        return [(line, f"{where}: {instance!r} is not valid: {reason}")]
    if kind == "dependentRequired":
        return [(line, f"{where}: '{key}' needs '{needed}' too")
                for key, required in error.validator_value.items() if key in instance
                for needed in required if needed not in instance]
    if kind == "minItems" and instance == [] and path in ((), ("tasks",)):
        # Found by a newcomer: `tasks: []` validated clean, and `run` then refused it
        # with "no task matches the --only/--tag selection", when none was given.
        return [(line, "the suite has no tasks: add at least one (- id: ..., prompt: ..., "
                       "checks: ...)")]
    if kind == "minItems" and instance == []:
        return [(line, f"{where}: must not be empty")]
    if kind == "minLength":
        return [(line, f"{where}: must not be empty")]
    return [(line, f"{where}: {error_words(error)}")]
