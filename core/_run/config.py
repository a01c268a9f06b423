"""Team defaults for `evalctl run`, from evalctl.toml or [tool.evalctl] in
pyproject.toml, read from the current directory only (not its parents). An evalctl.toml
that sets anything wins, and [tool.evalctl] is then ignored, with a warning. Flags
override them."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from evalctl._errors import Problem, SuiteError
from evalctl._plugin.options import option_problem
from evalctl._run.agents import option_value_problem
from evalctl._text import did_you_mean

KEYS = {"reporters": list, "provider": str, "model": str, "concurrency": int, "out": str,
        "provider_options": dict, "sandbox": str, "sandbox_options": dict, "agent": str,
        "agent_options": dict, "agents": dict, "executor": str, "executor_options": dict}
_TYPE_WORDS = {list: "a list", str: "text", int: "a whole number", dict: "a table"}
# Where tomllib puts the position of a syntax error in its message.
_TOML_POSITION = re.compile(r"at line (\d+), column \d+")


@dataclass
class Config:
    source: str | None = None
    values: dict[str, Any] = field(default_factory=dict)
    # Said to the user, not refused: both files set defaults, and one is ignored.
    warnings: list[str] = field(default_factory=list)
    # Where the values were read: the file, its text, and the table ([tool.evalctl]).
    path: Path | None = None
    text: str = ""
    table: tuple[str, ...] = ()

    def get(self, key: str, default: Any = None) -> Any:
        return self.values.get(key, default)

    def where(self, key: str) -> str | None:
        """Where `key` is set: "FILE:LINE" (with " [tool.evalctl]" for pyproject.toml),
        or None when no file sets it."""
        if self.path is None or key not in self.values:
            return None
        at = self.problem((key,), "")
        return (f"{at.file}:{at.line}" if at.line else at.file) + \
            (" [tool.evalctl]" if self.table else "")

    def problem(self, keys: tuple[str, ...], message: str) -> Problem:
        """A problem at the line that sets `keys` (a key, or a table's key, in order)."""
        prefix = "[tool.evalctl] " if self.table else ""
        line = _line_of(self.text, (*self.table, *keys[:-1]), keys[-1]) or \
            (_line_of(self.text, self.table, keys[0]) if len(keys) > 1 else 0)
        return Problem(str(self.path), line, prefix + message)


# The keys that name a plugin, and its kind.
_NAMED = {"provider": "provider", "sandbox": "sandbox", "agent": "agent",
          "executor": "executor"}
# The keys holding a named plugin's options: they are checked against the plugin the
# config names (with none named, they go to whatever plugin the run chooses).
_OPTIONS = {"provider_options": "provider", "sandbox_options": "sandbox",
            "executor_options": "executor"}


def plugin_problems(config: Config, registry: Any, unused: Iterable[str] = ()
                    ) -> list[Problem]:
    """Every plugin the config names, and every option it gives one, that is not
    installed, each at its file:line with a did-you-mean: found by a newcomer to be
    named with no file:line, one per run, as if a flag were wrong. Keys in `unused` (a
    flag chose that plugin instead) are not checked."""
    if config.path is None:
        return []
    skip = set(unused)
    problems = []
    for key, kind in _NAMED.items():
        name = config.get(key)
        if key in skip or not isinstance(name, str):
            continue
        known = set(registry.specs[kind])
        if kind == "sandbox":
            known.add("auto")
        if kind == "agent":
            known |= set(config.get("agents", {}))
        if name not in known:
            problems.append(config.problem((key,), f"'{key}': "
                                           f"{registry.explain_missing(kind, name)}"))
    reporters = config.get("reporters", [])
    if "reporters" not in skip and isinstance(reporters, list):  # text: said by _check
        for name in reporters:
            if isinstance(name, str) and name not in registry.specs["reporter"]:
                problems.append(config.problem(("reporters",), "'reporters': "
                                               f"{registry.explain_missing('reporter', name)}"))
    problems += _preset_problems(config, registry, used=config.get("agent")
                                 if "agent" not in skip else None)
    problems += _agent_option_problems(config, registry)
    for key, kind in _OPTIONS.items():
        name, options = config.get(kind), config.get(key)
        if kind in skip or not isinstance(options, dict):
            continue
        if not isinstance(name, str):
            # No plugin named: the options go to whichever the run chooses, so only one
            # that no installed plugin of the kind takes is surely a mistake.
            properties: dict[str, Any] = {}
            for spec in registry.specs[kind].values():
                properties.update(spec.options_schema.get("properties", {}))
            for option in options:
                if option not in properties:
                    problems.append(config.problem(
                        (key, option), f"'{key}': no {kind} has an option '{option}'"
                        f"{did_you_mean(option, list(properties))}; their options: "
                        f"{', '.join(properties) or 'none'}"))
            continue
        spec = registry.specs[kind].get(name)
        if spec is None:
            continue  # its name is the problem, said above
        properties = dict(spec.options_schema.get("properties", {}))
        for option, value in options.items():
            if option not in properties:
                problems.append(config.problem(
                    (key, option), f"'{key}': {kind} '{name}' has no option '{option}'"
                    f"{did_you_mean(option, list(properties))}; its options: "
                    f"{', '.join(properties) or 'none'}"))
                continue
            said = _type_problem(option, value, properties[option])
            if said:  # found by a newcomer: said one run at a time, without a line
                problems.append(config.problem((key, option), f"'{key}': {kind} '{name}' "
                                                             f"option {said}"))
    return problems


def _type_problem(key: str, value: Any, schema: Mapping[str, Any]) -> str | None:
    """What is wrong with an option's value, in words, or None."""
    return option_problem(key, value, schema, toml=True)


_PRESET_KEYS = ("base", "version")  # a preset's own keys; the rest are its agent's options


def _preset_problems(config: Config, registry: Any, used: Any) -> list[Problem]:
    """Every `[agents.NAME]` preset's mistakes, used by this run or not, at their lines
    (found by a newcomer: they came one per run, without a line, and an unused preset's
    never): a base that is neither an installed agent nor a preset, a loop of presets,
    an option its agent does not take (with a did-you-mean) or of the wrong type. A
    required option left out is not one: it may come from --agent-option. A base that
    is not installed here is only a warning in a preset this run does not use (`used`:
    the config's agent), as a team's preset for an agent some machines lack."""
    presets = config.get("agents")
    if not isinstance(presets, dict):
        return []
    agents = registry.specs["agent"]
    problems = []
    for name, preset in presets.items():
        if not isinstance(preset, dict):
            problems.append(config.problem(("agents", name), f"[agents.{name}] must be a "
                                           f"table of a base and options, got {preset!r}"))
            continue
        chain, root = [name], None
        while root is None:
            base = presets.get(chain[-1], {}).get("base") if chain[-1] in presets else None
            if not isinstance(base, str):
                problems.append(config.problem(("agents", chain[-1]), f"[agents.{chain[-1]}] "
                                               "needs base = \"AGENT\": the agent it presets"))
                break
            if base in agents:
                root = _installed_root(agents, base)
            elif base in chain:
                problems.append(config.problem(("agents", name, "base"), "agent presets form "
                                               f"a loop: {' -> '.join([*chain, base])}"))
                break
            elif base in presets:
                chain.append(base)
            else:
                near = did_you_mean(base, [p for p in presets if p != chain[-1]])
                missing = config.problem(("agents", chain[-1], "base"),
                                         f"[agents.{chain[-1]}] base: " + (
                                             f"no agent or preset '{base}'{near}" if near
                                             else registry.explain_missing('agent', base)))
                if used in presets and _reaches(presets, used, chain[-1]):
                    problems.append(missing)
                else:
                    warning = f"{missing.file}:{missing.line}: {missing.message} (not used " \
                        "by this run)"
                    if warning not in config.warnings:
                        config.warnings.append(warning)
                break
        if root is None:
            continue
        properties = root.options_schema.get("properties", {})
        for key, value in preset.items():
            if key in _PRESET_KEYS:
                continue
            if key not in properties:
                problems.append(config.problem(
                    ("agents", name, key), f"[agents.{name}]: agent '{root.name}' has no "
                    f"option '{key}'{did_you_mean(key, [*properties, *_PRESET_KEYS])}; its "
                    f"options: {', '.join(properties) or 'none'}"))
                continue
            said = _type_problem(key, value, properties[key]) or \
                _value_problem(root, key, value)
            if said:
                problems.append(config.problem(("agents", name, key),
                                               f"[agents.{name}] {said}"))
    return list(dict.fromkeys(problems))


def _value_problem(spec: Any, key: str, value: Any) -> str | None:
    """What the agent's own `check_option` says of an option's value (shell syntax in
    command's argv), beginning with the option's name, or None."""
    said = option_value_problem(spec, key, value)
    return f"{key}: {said}" if said else None


def _installed_root(agents: Mapping[str, Any], name: str) -> Any:
    """The installed agent that runs for installed agent `name`: an installed preset's
    (claude-code is one of command's) options are its base agent's (found by a newcomer:
    "its options: none")."""
    root = agents[name]
    for _ in range(len(agents)):
        if root.run is not None or root.base not in agents:
            break
        root = agents[root.base]
    return root


def _agent_of(config: Config, registry: Any, name: str) -> Any:
    """The installed agent that runs for `name` (an agent, or a preset in the config),
    or None when that is not known (a missing base, a loop: said on their own)."""
    presets = config.get("agents")
    presets = presets if isinstance(presets, dict) else {}
    agents = registry.specs["agent"]
    seen = set()
    while name not in agents:
        preset = presets.get(name)
        if name in seen or not isinstance(preset, dict) or not isinstance(preset.get("base"), str):
            return None
        seen.add(name)
        name = preset["base"]
    return _installed_root(agents, name)


def _agent_option_problems(config: Config, registry: Any) -> list[Problem]:
    """`[agent_options]`'s mistakes, each at its line, as a preset's are (found by a
    newcomer: one line of JSON Schema's words, without a line): an option the config's
    agent does not take (with a did-you-mean), or a value of the wrong type or form.
    They go with the config's `agent`; with none named they are not used (said by a
    warning, as is a run whose --agent is another)."""
    options, name = config.get("agent_options"), config.get("agent")
    if not isinstance(options, dict) or not options:
        return []
    if not isinstance(name, str):
        config.warnings.append(
            f"{config.where('agent_options')}: [agent_options] go with the config's `agent`, "
            "and it names none: they are not used. Name the agent (agent = \"NAME\") or "
            "give them in a preset ([agents.NAME], docs/agents.md)")
        return []
    spec = _agent_of(config, registry, name)
    if spec is None:
        return []  # the agent's name or its preset's base is the problem, said on its own
    properties = dict(spec.options_schema.get("properties", {}))
    known = [*properties, *_PRESET_KEYS[1:]]
    problems = []
    for option, value in options.items():
        if option == "version":
            continue  # any agent takes it, for the report
        via = f" (a preset of '{spec.name}')" if name != spec.name else ""
        if option not in properties:
            problems.append(config.problem(
                ("agent_options", option), f"[agent_options]: agent '{name}'{via} has no "
                f"option '{option}'{did_you_mean(option, known)}; its options: "
                f"{', '.join(known)}"))
            continue
        said = _type_problem(option, value, properties[option]) or \
            _value_problem(spec, option, value)
        if said:
            problems.append(config.problem(("agent_options", option),
                                           f"[agent_options] {said}"))
    return problems


def _reaches(presets: dict[str, Any], start: str, wanted: str) -> bool:
    """Whether the chain of presets from `start` passes through `wanted`."""
    seen, name = set(), start
    while name in presets and name not in seen:
        if name == wanted:
            return True
        seen.add(name)
        base = presets[name].get("base") if isinstance(presets[name], dict) else None
        name = base if isinstance(base, str) else ""
    return False


def load_config(directory: Path | None = None, registry: Any = None,
                unused: Iterable[str] = ()) -> Config:
    """The defaults in `directory` (default: the current one). Every problem in the
    file chosen is reported at once, each at its line where it can be found; with a
    `registry`, the plugins it names too (but those of the keys in `unused`)."""
    directory = directory or Path.cwd()
    candidates = [(directory / "evalctl.toml", ()), (directory / "pyproject.toml", ("tool",
                                                                                       "evalctl"))]
    for index, (path, keys) in enumerate(candidates):
        if not path.is_file():
            continue
        text, data = _read(path)
        for key in keys:
            data = data.get(key, {})
        if not data:
            continue
        if not isinstance(data, dict):
            raise SuiteError([Problem(str(path), _line_of(text, keys[:-1], keys[-1]),
                                      f"[{'.'.join(keys)}] must be a table")])
        problems = _check(path, text, keys, data)
        config = Config(f"{path}" + (" [tool.evalctl]" if keys else ""), dict(data),
                        path=path, text=text, table=keys)
        if registry is not None:
            problems += plugin_problems(config, registry, unused)
        if problems:
            raise SuiteError(sorted(problems, key=lambda p: p.line))
        for other, other_keys in candidates[index + 1:]:
            if _sets_defaults(other, other_keys):
                config.warnings.append(
                    f"both {path.name} and {other.name} [{'.'.join(other_keys)}] set evalctl "
                    f"defaults here: {path.name} is used, and {other.name}'s are ignored")
        return config
    return Config()


def _read(path: Path) -> tuple[str, dict[str, Any]]:
    import tomllib

    try:
        text = path.read_text(encoding="utf-8")
        return text, tomllib.loads(text)
    except (tomllib.TOMLDecodeError, UnicodeDecodeError, ValueError) as exc:
        # ValueError: an integer longer than Python reads (4,300 digits)
        position = _TOML_POSITION.search(str(exc))
        line = int(position.group(1)) if position else \
            _last_line(path) if "end of document" in str(exc) else _line_of_long_number(path)
        raise SuiteError([Problem(str(path), line, f"invalid TOML: {exc}")]) from None
    except OSError as exc:
        raise SuiteError([Problem(str(path), 0, f"cannot read: {exc.strerror or exc}")]) \
            from None


def _last_line(path: Path) -> int:
    """The last line that holds anything (tomllib says "at end of document" without a
    line when a list or table is left open)."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError):
        return 0
    return max((number for number, line in enumerate(lines, start=1) if line.strip()),
               default=0)


def _line_of_long_number(path: Path) -> int:
    """The line of an integer too long for Python (tomllib says no position for it)."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError):
        return 0
    return next((number for number, line in enumerate(lines, start=1)
                 if re.search(r"\d{4301,}", line.replace("_", ""))), 0)


def _sets_defaults(path: Path, keys: tuple[str, ...]) -> bool:
    """Whether `path` exists and sets anything under `keys` (a broken file: no)."""
    if not path.is_file():
        return False
    try:
        _, data = _read(path)
    except SuiteError:
        return False
    for key in keys:
        data = data.get(key, {}) if isinstance(data, dict) else {}
    return bool(data)


def _check(path: Path, text: str, table: tuple[str, ...], data: dict[str, Any]
           ) -> list[Problem]:
    """Every problem of the keys in `data`."""
    problems = []
    prefix = "[tool.evalctl] " if table else ""

    def problem(key: str, message: str) -> None:
        problems.append(Problem(str(path), _line_of(text, table, key), prefix + message))

    for key, value in data.items():
        expected = KEYS.get(key)
        if expected is None:
            mean = did_you_mean(key, KEYS)
            hint = ""
            if key == "tool" and not table:
                hint = ("; [tool.evalctl] belongs in pyproject.toml: in evalctl.toml, "
                        "write the keys at the top level, without a table header")
            problem(key, f"unknown key '{key}'{mean}; known: {', '.join(KEYS)}{hint}")
        elif not isinstance(value, expected) or isinstance(value, bool):
            problem(key, f"'{key}' must be {_TYPE_WORDS[expected]}, got {value!r}")
        elif key == "reporters" and not all(isinstance(r, str) for r in value):
            problem(key, "'reporters' must be a list of names")
        elif key == "concurrency" and value < 1:
            # As --concurrency refuses it: 0 was taken for "unset", and -5 blamed the flag.
            problem(key, f"'concurrency' must be at least 1, got {value}")
        elif key == "out" and "\x00" in value:
            problem(key, f"'out' must be a directory's path, got {value!r}: no path holds a "
                         "NUL character")
    return problems


def _line_of(text: str, table: tuple[str, ...], key: str) -> int:
    """The line (from 1) where `key` is set in `table`, found by a scan of the lines:
    tomllib says where a syntax error is, but not where a key it parsed was. Best effort:
    `key = ...` under the table's header, or a header `[table.key]`; 0 when not found."""
    wanted_header = ".".join((*table, key))
    current: str = ""
    key_line = re.compile(rf"""\s*(?:{re.escape(key)}|"{re.escape(key)}"|'{re.escape(key)}')"""
                          r"\s*[.=]")
    for number, line in enumerate(text.splitlines(), start=1):
        stripped = line.strip()
        if stripped.startswith("["):
            current = re.sub(r"\s", "", stripped.strip("[]").split("]")[0]).replace('"', "")
            if current == wanted_header or current.startswith(wanted_header + "."):
                return number
            continue
        if current == ".".join(table) and key_line.match(line):
            return number
    return 0
