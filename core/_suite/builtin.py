"""The built-in suites, which ship inside the package (`evalctl.suites`), and the rule
that lets a bare name stand for one: `evalctl run harness` runs the file `harness` when
there is one, else the built-in suite of that name."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evalctl._errors import Problem, SuiteError
from evalctl._suite.yamlsource import YamlSyntaxError, parse_document
from evalctl._text import did_you_mean

BARE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]*$")  # no separator, no extension


@dataclass(frozen=True)
class BuiltinSuite:
    """What `evalctl suites` shows of one built-in suite."""

    name: str
    path: Path
    description: str
    tasks: int
    scripted: int  # tasks with a script: the ones that can pass offline

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "path": str(self.path), "description": self.description,
                "tasks": self.tasks, "scripted": self.scripted}


def builtin_directory() -> Path | None:
    """Where the built-in suites are: inside the installed package, or the checkout's
    suites/ in an editable install. None when evalctl was installed without them."""
    from importlib.util import find_spec

    try:  # found, not imported: the package is data, and this module sits below the facade
        spec = find_spec("evalctl.suites")
    except ImportError:
        return None
    locations = spec.submodule_search_locations if spec is not None else None
    return next((Path(entry) for entry in locations or ()), None)


def builtin_paths() -> dict[str, Path]:
    directory = builtin_directory()
    if directory is None:
        return {}
    return {path.stem: path for path in sorted(directory.glob("*.yaml"))}


def builtin_suites() -> list[BuiltinSuite]:
    """Each built-in suite with its task count and its `description:`. Read, not
    validated: `evalctl validate NAME` does that."""
    suites = []
    for name, path in builtin_paths().items():
        try:
            data = parse_document(path.read_text(encoding="utf-8"), str(path)).data
        except (OSError, UnicodeDecodeError, YamlSyntaxError):
            data = None
        mapping = data if isinstance(data, dict) else {}
        tasks = data if isinstance(data, list) else mapping.get("tasks") or []
        tasks = [t for t in tasks if isinstance(t, dict)] if isinstance(tasks, list) else []
        description = mapping.get("description")
        suites.append(BuiltinSuite(
            name, path,
            " ".join(description.split()) if isinstance(description, str) else "",
            len(tasks), sum(1 for t in tasks if t.get("script"))))
    return suites


def resolve_suite(argument: str | Path) -> Path:
    """The suite file an argument names: the path itself when it is not a bare name or a
    file of that name exists, else the built-in suite of that name. A directory of the
    name is not a suite, so the built-in wins over it (`core` run from evalctl's own
    checkout, which holds a `core/` package). A bare name that is none of these is a
    SuiteError that says so, with the built-in names."""
    path = Path(argument)
    if not BARE_NAME.match(str(argument)) or (path.exists() and not path.is_dir()):
        return path
    known = builtin_paths()
    if path.name in known:
        return known[path.name]
    if path.exists():  # a directory: the loader says why it is not a suite
        return path
    hint = did_you_mean(path.name, known)
    listed = f"; built-in suites: {', '.join(known)} (evalctl suites describes them)" \
        if known else ""
    raise SuiteError([Problem(str(argument), 0, "cannot read suite: no such file, and no "
                                                f"built-in suite of that name{hint}{listed}")])
