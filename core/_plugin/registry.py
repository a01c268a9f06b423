"""Plugin discovery, isolation of broken plugins, and the registry of what they provide.

Every grader, provider, reporter, sandbox, agent, importer and executor, built-in or
not, comes from the `evalctl` entry-point group. A plugin that fails to import,
implements a hook that does not exist, or raises in its hook is recorded with its error
and skipped, so one broken plugin cannot take down the rest. Two plugins providing the
same name make that name unusable until one is removed: evalctl never picks a winner by
install order.
"""

from __future__ import annotations

import contextlib
import difflib
import inspect
import os
import re
import sys
import traceback
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

import pluggy

from evalctl._errors import PluginError, UsageError, stops_the_run
from evalctl._plugin import hookspecs
from evalctl._plugin.specs import (
    AgentSpec,
    ExecutorSpec,
    GraderSpec,
    ImporterSpec,
    ProviderSpec,
    ReporterSpec,
    SandboxSpec,
)
from evalctl._text import did_you_mean

ENTRY_POINT_GROUP = "evalctl"
BUILTIN_DISTRIBUTION = "evalctl"
DISABLE_ENV = "EVALCTL_DISABLE_PLUGINS"
STRICT_ENV = "EVALCTL_STRICT_PLUGINS"
# Report files evalctl's own reporters write and the core relies on: a plugin reporter of
# one of these extensions was accepted and then either never chosen (json, always
# written) or taken by `evalctl view` for its HTML page, and overwritten by --rerender.
CORE_EXTENSIONS = {
    "json": "evalctl always writes report-<run>.json, and finds a run's report by "
            "report-*.json",
    "html": "evalctl view shows report-<run>.html as the run's page and renders it again "
            "with --rerender",
}

# hook name -> (kind of thing registered, spec class it must be)
HOOKS: dict[str, tuple[str, type]] = {
    "evalctl_register_graders": ("grader", GraderSpec),
    "evalctl_register_providers": ("provider", ProviderSpec),
    "evalctl_register_reporters": ("reporter", ReporterSpec),
    "evalctl_register_sandboxes": ("sandbox", SandboxSpec),
    "evalctl_register_agents": ("agent", AgentSpec),
    "evalctl_register_importers": ("importer", ImporterSpec),
    "evalctl_register_executors": ("executor", ExecutorSpec),
}
KINDS = ("grader", "provider", "reporter", "sandbox", "agent", "importer", "executor")
_PLURALS = {"sandbox": "sandboxes"}  # the rest take an s ("installed sandboxs" was a typo)


@dataclass
class PluginSource:
    """Something to load as a plugin: an entry point, or an object in tests."""

    name: str
    load: Callable[[], Any]
    distribution: str | None = None
    version: str | None = None

    @classmethod
    def from_object(cls, name: str, plugin: Any, distribution: str | None = None,
                    version: str | None = None) -> PluginSource:
        return cls(name, lambda: plugin, distribution, version)


@dataclass
class PluginRecord:
    """What `evalctl list-plugins` shows for one plugin."""

    name: str
    distribution: str | None
    version: str | None
    status: str = "ok"  # ok | failed | disabled
    error: str | None = None
    provides: dict[str, list[str]] = field(default_factory=lambda: {k: [] for k in KINDS})
    conflicts: list[str] = field(default_factory=list)
    # The file its code was loaded from (a module's, or a class's module's), when known:
    # what the validated-suite cache looks at for code changed under one version.
    origin: str | None = None
    # Every hook ran: what it provides (or claims, when it failed after) is all known.
    claims_known: bool = False

    @property
    def _distribution_said(self) -> str:
        # No "None" for a plugin without a version (evalctl.testing's "under-test None")
        if not self.distribution:
            return "no distribution"
        return f"{self.distribution} {self.version}" if self.version else self.distribution

    @property
    def label(self) -> str:
        return f"plugin '{self.name}' ({self._distribution_said})"

    @property
    def described(self) -> str:
        """The label, saying so when the plugin failed to load."""
        if self.status != "failed":
            return self.label
        return f"plugin '{self.name}' ({self._distribution_said}, which failed to load)"

    @property
    def qualified_name(self) -> str:
        """DISTRIBUTION:NAME, what EVALCTL_DISABLE_PLUGINS takes to set aside this plugin
        alone when another distribution uses its entry-point name too."""
        return f"{self.distribution}:{self.name}" if self.distribution else self.name

    @property
    def builtin(self) -> bool:
        return self.distribution == BUILTIN_DISTRIBUTION

    @property
    def shown_status(self) -> str:
        return "conflict" if self.status == "ok" and self.conflicts else self.status

    def to_dict(self) -> dict[str, Any]:
        return {
            "plugin": self.name,
            "distribution": self.distribution,
            "version": self.version,
            "status": self.shown_status,
            "error": self.error,
            "conflicts": list(self.conflicts),
            "graders": list(self.provides["grader"]),
            "providers": list(self.provides["provider"]),
            "reporters": list(self.provides["reporter"]),
            "sandboxes": list(self.provides["sandbox"]),
            "agents": list(self.provides["agent"]),
            "importers": list(self.provides["importer"]),
            "executors": list(self.provides["executor"]),
        }


@dataclass
class Registry:
    plugins: list[PluginRecord]
    specs: dict[str, dict[str, Any]]  # kind -> name -> spec
    owners: dict[tuple[str, str], list[PluginRecord]]

    @property
    def graders(self) -> dict[str, GraderSpec]:
        return self.specs["grader"]

    @property
    def providers(self) -> dict[str, ProviderSpec]:
        return self.specs["provider"]

    @property
    def reporters(self) -> dict[str, ReporterSpec]:
        return self.specs["reporter"]

    @property
    def sandboxes(self) -> dict[str, SandboxSpec]:
        return self.specs["sandbox"]

    @property
    def agents(self) -> dict[str, AgentSpec]:
        return self.specs["agent"]

    @property
    def importers(self) -> dict[str, ImporterSpec]:
        return self.specs["importer"]

    @property
    def executors(self) -> dict[str, ExecutorSpec]:
        return self.specs["executor"]

    def unknown_disabled_warning(self, disabled: Iterable[str]) -> str | None:
        """What to say when EVALCTL_DISABLE_PLUGINS names no installed plugin: found by a
        newcomer to be accepted silently, so that a typo there disabled nothing."""
        names = [p.name for p in self.plugins]
        qualified = {f"{_normalised(p.distribution)}:{p.name}" for p in self.plugins
                     if p.distribution}
        unknown = sorted(entry for entry in set(disabled) if entry not in names and (
            ":" not in entry or f"{_normalised(entry.split(':', 1)[0])}:"
                                f"{entry.split(':', 1)[1]}" not in qualified))
        if not unknown:
            return None
        # Each plugin as it is disabled alone: DISTRIBUTION:NAME where two share a name
        # (`tpgrader` alone, once suggested for a `DIST:NAME` typo, disables both, and the
        # list said "tpgrader, tpgrader").
        forms = sorted(dict.fromkeys(self.disable_name(p) for p in self.plugins))
        said = []
        for name in unknown:
            providers = [f"{kind} of plugin '{self.disable_name(p)}'" for p in self.plugins
                         for kind in KINDS if name in p.provides[kind]]
            hint = f" (it is a {' and a '.join(providers)})" if providers else \
                did_you_mean(name, forms if ":" in name else
                             [form for form in forms if ":" not in form])
            if not hint and ":" not in name:  # a shared name: say each plugin's form
                close = difflib.get_close_matches(name, names, n=1)
                shared = [self.disable_name(p) for p in self.plugins if p.name in close]
                if shared:
                    hint = f" (did you mean {' or '.join(repr(f) for f in shared)}?)"
            said.append(f"'{name}'{hint}")
        return (f"{DISABLE_ENV} names {', '.join(said)}, which no installed plugin is called: "
                f"{'it disables' if len(unknown) == 1 else 'they disable'} nothing; installed "
                f"plugins: {', '.join(forms) or 'none'}")

    def failure_warnings(self) -> list[str]:
        """One line per plugin that failed to load: what every command but list-plugins
        says, so that a plugin is never missing unnoticed."""
        return [f"{p.label} failed to load, so nothing it provides can be used: {p.error} "
                "(evalctl list-plugins shows every plugin)"
                for p in self.plugins if p.status == "failed"]

    def problems(self) -> list[str]:
        """Every plugin failure and name conflict, one line each."""
        lines = [f"{p.label} failed: {p.error}" for p in self.plugins if p.status == "failed"]
        for (kind, name), records in sorted(self.owners.items()):
            if len(records) > 1:
                lines.append(self._conflict_message(kind, name, records))
        return lines

    def require_healthy(self) -> None:
        """Strict mode: any plugin failure or conflict is a hard error."""
        problems = self.problems()
        if problems:
            raise PluginError("plugin problems (strict mode):\n  " + "\n  ".join(problems))

    def get(self, kind: str, name: str) -> Any:
        spec = self.specs[kind].get(name)
        if spec is None:
            raise UsageError(self.explain_missing(kind, name))
        return spec

    def from_distribution(self, kind: str, distribution: str) -> dict[str, Any]:
        """The specs of one kind that a distribution provides ("evalctl": the built-ins)."""
        return {name: spec for name, spec in self.specs[kind].items()
                if (owner := self.plugin_of(kind, name)) is not None
                and owner.distribution == distribution}

    def plugin_of(self, kind: str, name: str) -> PluginRecord | None:
        records = self.owners.get((kind, name))
        return records[0] if records and len(records) == 1 else None

    def plugins_providing(self, wanted: Iterable[tuple[str, Any]]) -> set[str]:
        """The entry-point names of the plugins that provide any of `wanted`, (kind, name)
        pairs; a name that is not text (absent from an old record) is passed over."""
        return {record.name for kind, name in dict.fromkeys(wanted) if isinstance(name, str)
                for record in self.owners.get((kind, name), [])}

    def explain_missing(self, kind: str, name: str) -> str:
        """Why `name` is not available, and what to do about it."""
        records = self.owners.get((kind, name), [])
        if len(records) > 1:
            return self._conflict_message(kind, name, records)
        if records and records[0].status == "failed":
            return (f"{kind} '{name}' is provided by {records[0].label}, which failed to "
                    f"load: {records[0].error}")
        known = sorted(self.specs[kind])
        message = f"unknown {kind} '{name}'"
        close = did_you_mean(name, known)
        message += close
        message += f"; installed {_PLURALS.get(kind, kind + 's')}: {', '.join(known) or 'none'}"
        # A plugin that is installed but did not load may well be what provides it: say
        # so, and suggest installing nothing (the fix is to enable or repair it).
        # A plugin that failed after all its hooks ran registered what it claims (a
        # conflict, or its own error above): only the others may provide this name.
        failed = [p for p in self.plugins if p.status == "failed" and not p.claims_known]
        if failed:
            message += "; plugins that failed to load and may provide it: " + "; ".join(
                f"{p.label}: {p.error}" for p in failed
            )
        disabled = [p for p in self.plugins if p.status == "disabled"]
        named = [p for p in disabled if p.name == name]
        if named:
            message += (f"; plugin '{name}' is installed but disabled by {DISABLE_ENV}: remove "
                        "it from there to use it")
        elif disabled:
            message += (f"; disabled by {DISABLE_ENV}: {', '.join(p.name for p in disabled)} "
                        "(installed, and may provide it: remove it from there to use it)")
        # A plugin with hooks that registered nothing at all may be meant to provide it
        # (registering on a condition not met here, say).
        empty = [p for p in self.plugins if p.status == "ok" and not p.builtin
                 and not any(p.provides.values())]
        if empty:
            message += "; installed plugins that provide nothing and may be meant to: " + \
                ", ".join(p.label for p in empty)
        if not close and not failed and not disabled and not empty:
            # Never a package name made of the typed text: `pip install evalctl-<typo>`
            # would invite whoever registers that name on PyPI.
            message += (". If a plugin provides it, install the plugin package that provides "
                        "it, then check evalctl list-plugins")
        return message

    def disable_name(self, record: PluginRecord) -> str:
        """What to put in EVALCTL_DISABLE_PLUGINS to set aside this plugin alone: its
        entry-point name, or DISTRIBUTION:NAME when another plugin has that name too."""
        shared = any(other is not record and other.name == record.name
                     for other in self.plugins)
        return record.qualified_name if shared else record.name

    def _conflict_message(self, kind: str, name: str, records: list[PluginRecord]) -> str:
        # Never advise disabling a built-in: the plugin that took its name is the one to
        # rename or set aside.
        outsiders = [r for r in records if not r.builtin] or records
        disable = " or ".join(f"{DISABLE_ENV}={self.disable_name(r)}" for r in outsiders)
        builtins = [r for r in records if r.builtin]
        if builtins:
            others = " and ".join(r.described for r in outsiders)
            return (f"{kind} '{name}' is built into evalctl (its plugin "
                    f"'{builtins[0].name}') and also registered by {others}, so neither is "
                    f"used; a plugin cannot replace a built-in: give its {kind} a name of its "
                    f"own (prefixed with the plugin's, say), or disable it with {disable}")
        return (f"{kind} '{name}' is registered by both "
                f"{' and '.join(r.described for r in records)}, so neither is used (never one by "
                f"install order); uninstall one, or disable one with {disable}")


# The last reading of every distribution's entry points (one reading costs as much as a
# reading of one group): lookalike_groups looks through it again rather than read anew.
_last_scan: Any = None


def entry_point_sources() -> list[PluginSource]:
    from importlib.metadata import entry_points

    global _last_scan
    _last_scan = entry_points()
    sources = []
    # Reading a distribution's metadata parses its METADATA file every time (about half
    # a millisecond): once per distribution, not twice per entry point.
    named: dict[Any, tuple[str | None, str | None]] = {}
    for ep in _last_scan.select(group=ENTRY_POINT_GROUP):
        dist = getattr(ep, "dist", None)
        if dist is not None and id(dist) not in named:
            metadata = dist.metadata
            named[id(dist)] = (metadata["Name"], metadata["Version"])
        name, version = named[id(dist)] if dist is not None else (None, None)
        sources.append(PluginSource(ep.name, ep.load, name, version))
    return sorted(sources, key=lambda s: s.name)


def lookalike_groups() -> list[str]:
    """A line for each entry point of a distribution that depends on evalctl but is in a
    group evalctl does not read and whose name looks like `evalctl`
    (`evalctl.plugins`, `evalctl_plugins`, `evalclt`): such a plugin is never loaded and
    never listed (found by a newcomer). For list-plugins only: it reads every
    distribution's entry points (about a millisecond)."""
    from importlib.metadata import entry_points

    found = []
    checked: dict[int, bool] = {}
    every = _last_scan or entry_points()  # 3.11: a mapping of groups; both have these two
    lookalikes = [ep for group in sorted(every.groups)
                  if group != ENTRY_POINT_GROUP and _looks_like_ours(group)
                  for ep in every.select(group=group)]
    for ep in lookalikes:
        dist = getattr(ep, "dist", None)
        if dist is None:
            continue
        if id(dist) not in checked:
            checked[id(dist)] = dist.metadata["Name"] != BUILTIN_DISTRIBUTION and any(
                _normalised(re.split(r"[\s;<>=!~\[(@]", requirement, maxsplit=1)[0])
                == BUILTIN_DISTRIBUTION for requirement in dist.requires or ())
        if checked[id(dist)]:
            found.append(f"{dist.metadata['Name']} {dist.metadata['Version']} declares "
                         f"'{ep.name} = {ep.value}' in the entry-point group '{ep.group}', "
                         f"which evalctl does not read, so it is not loaded: plugins are "
                         f"found in the group '{ENTRY_POINT_GROUP}' "
                         f"([project.entry-points.{ENTRY_POINT_GROUP}] in pyproject.toml)")
    return found


def _looks_like_ours(group: str) -> bool:
    squeezed = re.sub(r"[^a-z0-9]", "", group.lower())
    return squeezed.startswith(ENTRY_POINT_GROUP) or difflib.SequenceMatcher(
        None, squeezed, ENTRY_POINT_GROUP).ratio() >= 0.8


def disabled_from_env() -> set[str]:
    return {n.strip() for n in os.environ.get(DISABLE_ENV, "").split(",") if n.strip()}


def _normalised(distribution: str) -> str:
    """A distribution's name as PyPI compares them (PEP 503): `Foo_Bar` is `foo-bar`."""
    return re.sub(r"[-_.]+", "-", distribution).lower()


def _is_disabled(source: PluginSource, blocked: set[str]) -> bool:
    """Whether EVALCTL_DISABLE_PLUGINS names this plugin: by its entry-point name (every
    plugin of that name), or as DISTRIBUTION:NAME (that distribution's alone; a
    distribution's name holds no colon)."""
    if source.name in blocked:
        return True
    if source.distribution is None:
        return False
    return any(_normalised(entry.split(":", 1)[0]) == _normalised(source.distribution)
               and entry.split(":", 1)[1] == source.name
               for entry in blocked if ":" in entry)


def strict_from_env() -> bool:
    return os.environ.get(STRICT_ENV, "").strip().lower() in {"1", "true", "yes", "on"}


_EVALCTL_DIRECTORY = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_NOT_PLUGINS = tuple(dict.fromkeys(os.path.abspath(d) for d in (
    _EVALCTL_DIRECTORY, os.path.dirname(os.__file__), os.path.dirname(pluggy.__file__))))


def _describe_exception(exc: BaseException) -> str:
    """The exception, at the innermost line of the plugin's own code: a spec evalctl
    refused (a grader name in capitals) was said at evalctl's line that refused it, not
    the plugin's that made it (found by a newcomer)."""
    frames = traceback.extract_tb(exc.__traceback__)
    theirs = [frame for frame in frames if _plugins_own(frame.filename)]
    # No line of the plugin's (its module is missing): no place rather than evalctl's, or
    # importlib's (an import that failed was said "at .../importlib/__init__.py:126").
    where = f" at {theirs[-1].filename}:{theirs[-1].lineno}" if theirs else ""
    return f"{type(exc).__name__}: {exc}{where}"


def _plugins_own(filename: str) -> bool:
    """Whether a traceback's file is a plugin's (or a library's it uses): not evalctl's,
    not the standard library's (importlib), not frozen or generated code."""
    if filename.startswith("<"):
        return False
    path = os.path.abspath(filename)
    return not any(path.startswith(directory + os.sep) for directory in _NOT_PLUGINS)


def _caller_location() -> str:
    """` at FILE:LINE` of the plugin code that called into evalctl, or nothing."""
    frame: Any = sys._getframe(1)
    while frame is not None and not _plugins_own(frame.f_code.co_filename):
        frame = frame.f_back
    return f" at {frame.f_code.co_filename}:{frame.f_lineno}" if frame is not None else ""


def _definition_location(function: Any) -> str:
    """` at FILE:LINE` where a hook is defined, or nothing."""
    code = getattr(inspect.unwrap(function), "__code__", None)
    if code is None or not _plugins_own(code.co_filename):
        return ""
    return f" at {code.co_filename}:{code.co_firstlineno}"


def _hook_misuse(pm: pluggy.PluginManager, plugin: Any) -> str | None:
    """A misspelled or unmarked hook would be silently ignored; make it an error."""
    for attr in sorted(dir(plugin)):
        if not attr.startswith("evalctl_"):
            continue
        value = getattr(plugin, attr, None)
        if not callable(value) or isinstance(value, type):
            continue
        if attr not in HOOKS:
            close = difflib.get_close_matches(attr, list(HOOKS), n=1)
            hint = f" (did you mean {close[0]}?)" if close else ""
            return f"unknown hook {attr}{hint}"
        if pm.parse_hookimpl_opts(plugin, attr) is None:
            return f"{attr} is not marked with @evalctl.hookimpl"
        wrong = _signature_misuse(attr, value)
        if wrong:
            return wrong
    return None


def _signature_misuse(hook: str, function: Any) -> str | None:
    """A hook evalctl cannot call as `hook(register)`: one without the argument returned
    its specs and registered nothing, unnoticed (found by a newcomer); one whose argument
    has another name was refused in pluggy's words."""
    where = _definition_location(function)
    if inspect.iscoroutinefunction(function) or inspect.isasyncgenfunction(function):
        # Called, it returned a coroutine never awaited (a RuntimeWarning on stderr) and
        # was said to have "returned coroutine".
        return (f"{hook} is async def: evalctl calls hooks without awaiting them; make it "
                f"a plain def{where}")
    try:
        parameters = [p for p in inspect.signature(function).parameters.values()
                      if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    except (TypeError, ValueError):
        return None
    kind = HOOKS[hook][0]
    spec = HOOKS[hook][1].__name__
    if not parameters:
        return (f"{hook}() takes no argument: evalctl calls {hook}(register), and the hook "
                f"calls register(evalctl.{spec}(...)) once per {kind}; nothing a hook "
                f"returns is registered{where}")
    other = [p.name for p in parameters if p.name != "register"]
    if other:
        return (f"{hook}({', '.join(p.name for p in parameters)}): evalctl passes one "
                f"argument, by the name register; name it so, and take no other{where}")
    if parameters[0].kind == parameters[0].KEYWORD_ONLY:
        # pluggy passes only positional parameters: it was called with none, and said
        # so at evalctl's line
        return (f"{hook}(*, register): register is keyword-only, and evalctl passes it as "
                f"an ordinary parameter: write {hook}(register){where}")
    return None


def load_registry(
    sources: Iterable[PluginSource] | None = None,
    disabled: Iterable[str] | None = None,
) -> Registry:
    """Load plugins (from entry points unless `sources` is given) into a fresh registry."""
    pm = pluggy.PluginManager(ENTRY_POINT_GROUP)
    pm.add_hookspecs(hookspecs)
    blocked = set(disabled_from_env() if disabled is None else disabled)
    records: list[PluginRecord] = []
    owners: dict[tuple[str, str], list[PluginRecord]] = {}
    specs: dict[tuple[str, str], Any] = {}
    staged_by_record: list[tuple[PluginRecord, list[tuple[str, Any]]]] = []

    sources = list(entry_point_sources() if sources is None else sources)
    enabled = [s for s in sources if not _is_disabled(s, blocked)]
    # The entry-point name is a plugin's name (list-plugins, EVALCTL_DISABLE_PLUGINS, the
    # report): two distributions that use one make both unusable, never the one that
    # happens to load first (pluggy refused the second with its whole registry's repr).
    namesakes: dict[str, list[PluginSource]] = {}
    for source in enabled:
        namesakes.setdefault(source.name, []).append(source)

    for source in sources:
        record = PluginRecord(source.name, source.distribution, source.version)
        records.append(record)
        if _is_disabled(source, blocked):
            record.status = "disabled"
            continue
        staged: list[tuple[str, Any]] = []
        staged_by_record.append((record, staged))
        try:
            record.origin = _load_one(pm, source, staged, record)
        except Exception as exc:  # a broken plugin must not take down the others
            record.status = "failed"
            # One line: it goes into every `file:line:` error that needs the plugin.
            record.error = _one_line(str(exc) if isinstance(exc, _PluginFault)
                                     else _describe_exception(exc))
        others = [o for o in namesakes[source.name] if o is not source]
        if others and record.status == "ok":
            record.status = "failed"
            record.error = _namesake_error(source, others)
        # What a failed plugin registered before it failed still claims its names: another
        # plugin's grader of that name must not silently take its place.
        for kind, spec in staged:
            if spec.name in record.provides[kind]:
                continue
            record.provides[kind].append(spec.name)
            owners.setdefault((kind, spec.name), []).append(record)
            if record.status == "ok":
                specs[(kind, spec.name)] = spec

    _refuse_builtin_rates(staged_by_record, specs)
    by_kind: dict[str, dict[str, Any]] = {k: {} for k in KINDS}
    for (kind, name), holders in owners.items():
        if len(holders) == 1:
            if (kind, name) in specs:
                by_kind[kind][name] = specs[(kind, name)]
        else:
            for holder in holders:
                others_said = ", ".join(o.described for o in holders if o is not holder)
                holder.conflicts.append(f"{kind} '{name}' also registered by {others_said}")
    return Registry(records, by_kind, owners)


def _refuse_builtin_rates(staged_by_record: list[tuple[PluginRecord, list[tuple[str, Any]]]],
                          specs: dict[tuple[str, str], Any]) -> None:
    """Fail a plugin whose grader names a rate a built-in grader declares (`grounding`):
    its checks would be counted in evalctl's own figure, which the docs define, as a
    plugin's grader named `file_exists` would replace the built-in. Its specs are taken
    out; the names it registered still claim theirs."""
    builtin_rates = {spec.rate: spec.name for record, staged in staged_by_record
                     if record.builtin for kind, spec in staged
                     if kind == "grader" and spec.rate}
    for record, staged in staged_by_record:
        if record.builtin or record.status != "ok":
            continue
        for kind, spec in staged:
            if kind == "grader" and spec.rate in builtin_rates:
                record.status = "failed"
                record.error = (
                    f"grader '{spec.name}': rate '{spec.rate}' is that of evalctl's "
                    f"built-in grader '{builtin_rates[spec.rate]}' ({spec.rate}_rate in "
                    f"the report), which its checks would be counted in; name a rate of "
                    f"your own, prefixed with the plugin's name ({record.name}_{spec.rate})")
                for other_kind, other in staged:
                    specs.pop((other_kind, other.name), None)
                break


def _namesake_error(source: PluginSource, others: list[PluginSource]) -> str:
    def label(s: PluginSource) -> str:
        return f"{s.distribution} {s.version}" if s.distribution else "no distribution"

    every = [source, *others]
    disable = " or ".join(f"{DISABLE_ENV}={s.distribution}:{s.name}" for s in every
                          if s.distribution)
    return (f"entry-point name '{source.name}' is also used by "
            f"{', '.join(label(o) for o in others)}: a plugin's name must be its own, so "
            f"neither is loaded (never one by install order); uninstall one, or disable one "
            f"with {disable or DISABLE_ENV}")


class _PluginFault(Exception):
    """A plugin error whose message is already the whole story."""


def _load_one(pm: pluggy.PluginManager, source: PluginSource,
              staged: list[tuple[str, Any]], record: PluginRecord) -> str | None:
    """Import, validate and call one plugin's hooks, appending what it registers to
    `staged` (what it registered before failing stays there, as its claims). Returns
    the file the plugin's code came from, when known."""
    try:
        plugin = source.load()
    except BaseException as exc:
        if isinstance(exc, KeyboardInterrupt):
            raise
        raise _PluginFault(f"import failed: {_describe_exception(exc)}") from exc
    origin = getattr(plugin, "__file__", None) or getattr(
        sys.modules.get(str(getattr(plugin, "__module__", ""))), "__file__", None)
    misuse = _hook_misuse(pm, plugin)
    if misuse:
        raise _PluginFault(misuse)
    if not any(pm.parse_hookimpl_opts(plugin, hook) is not None for hook in HOOKS
               if hasattr(plugin, hook)):
        # It was listed `ok` providing nothing, and a suite's check of its type was then
        # "unknown", with advice to install what was installed (found by a newcomer whose
        # entry point named the package, not the module holding the hooks).
        where = f" ({origin})" if isinstance(origin, str) else ""
        raise _PluginFault(
            f"implements no evalctl hook: its entry point loads "
            f"{getattr(plugin, '__name__', type(plugin).__name__)}{where}, which has no "
            "evalctl_register_* function marked with @evalctl.hookimpl; point the entry "
            "point at the module that defines them")
    # Registered under a name of pluggy's own, and only while its hooks are called: the
    # same module behind two entry points, or two plugins of one name, never meet there
    # (pluggy's refusal printed its whole registry).
    try:
        internal = pm.register(plugin, name=f"{source.name}#{id(plugin)}")
    except pluggy.PluginValidationError as exc:
        raise _PluginFault(f"invalid hook: {_one_line(str(exc))}") from exc
    except ValueError as exc:
        raise _PluginFault(f"invalid hook: {_one_line(str(exc)).split('{', 1)[0]}") from exc
    locations: dict[int, str] = {}  # id(spec) -> " at FILE:LINE" of its register call
    try:
        for hook_name, (kind, spec_class) in HOOKS.items():
            for impl in getattr(pm.hook, hook_name).get_hookimpls():
                if impl.plugin is not plugin:
                    continue

                hook_running = [True]

                def register(spec: Any, kind: str = kind, spec_class: type = spec_class,
                             hook_running: list[bool] = hook_running,
                             hook_name: str = hook_name) -> None:
                    if not hook_running[0]:
                        # Kept by the hook and called after it returned: nothing reads the
                        # list any more, so the spec was silently never registered (found
                        # by a plugin newcomer).
                        raise RuntimeError(
                            f"register() was called after {hook_name} returned; evalctl "
                            f"registers only what the hook registers while it runs: call "
                            f"register(evalctl.{spec_class.__name__}(...)) inside it")
                    if not isinstance(spec, spec_class):
                        raise TypeError(
                            f"register() in a {kind} hook takes evalctl.{spec_class.__name__}, "
                            f"got {type(spec).__name__}"
                        )
                    problem = _reserved_extension(spec, source)
                    if problem:
                        raise ValueError(problem)
                    staged.append((kind, spec))
                    locations[id(spec)] = _caller_location()

                arguments = {"register": register}
                try:
                    returned = impl.function(**{a: arguments[a] for a in impl.argnames})
                except BaseException as exc:  # SystemExit too, as an import's is
                    if stops_the_run(exc):
                        raise
                    raise _PluginFault(f"{hook_name} raised {_describe_exception(exc)}") from exc
                finally:
                    hook_running[0] = False
                if inspect.iscoroutine(returned):
                    returned.close()  # never awaited: no RuntimeWarning on stderr
                if returned is not None:
                    raise _PluginFault(
                        f"{hook_name} returned {type(returned).__name__}: nothing a hook "
                        f"returns is registered; call register(evalctl.{spec_class.__name__}"
                        f"(...)) once per {kind} instead")
        record.claims_known = True
        seen: set[tuple[str, str]] = set()
        for kind, spec in staged:
            if (kind, spec.name) in seen:
                raise _PluginFault(f"registers {kind} '{spec.name}' twice"
                                   f"{locations.get(id(spec), '')}")
            seen.add((kind, spec.name))
        for kind, spec in staged:
            problem = _schema_problem(spec)
            if problem:  # at the plugin's line that registered it, as a bad name is
                raise _PluginFault(f"{kind} '{spec.name}': {problem}"
                                   f"{locations.get(id(spec), '')}")
    finally:
        if internal is not None:
            pm.unregister(name=internal)
    return origin if isinstance(origin, str) else None


def _reserved_extension(spec: Any, source: PluginSource) -> str | None:
    """A plugin reporter whose file would be one the core writes or owns."""
    if not isinstance(spec, ReporterSpec) or source.distribution == BUILTIN_DISTRIBUTION:
        return None
    # `acme.json` too: report-<run>.acme.json is a report-*.json, taken for the run's
    owned = "json" if spec.extension.rsplit(".", 1)[-1] == "json" else spec.extension
    if owned not in CORE_EXTENSIONS:
        return None
    return (f"reporter {spec.name!r}: extension {spec.extension!r} is evalctl's own "
            f"({CORE_EXTENSIONS[owned]}); give the report an extension of its own")


def _schema_problem(spec: Any) -> str | None:
    """What is wrong with the schemas a spec declares (a grader's params, any plugin's
    options, a provider's task keys), found when it registers: a mistake there gave a
    traceback in validate and run, nonsense errors at the suite's lines, or an invalid
    `evalctl schema` (found by a newcomer)."""
    from evalctl._schema_check import object_schema_problem, schema_problem

    for attribute in ("params_schema", "options_schema"):
        schema = getattr(spec, attribute, None)
        if isinstance(schema, Mapping):
            problem = object_schema_problem(schema)
            if problem:
                return f"{attribute} {problem}"
    for key, schema in (getattr(spec, "task_schema", None) or {}).items():
        problem = schema_problem(schema)
        if problem:
            return f"task_schema['{key}'] is not a valid JSON Schema: {problem}"
    return None


def _one_line(text: str) -> str:
    return " ".join(text.split())


_default: Registry | None = None
# The registry of the run in progress, so that plugins asking for a provider
# (evalctl.create_provider) get the run's plugins, not whatever is installed.
_active: ContextVar[Registry | None] = ContextVar("evalctl_active_registry", default=None)


def get_registry(strict: bool | None = None) -> Registry:
    """The process-wide registry from installed entry points, loaded once."""
    global _default
    if _default is None:
        _default = load_registry()
        # Said once, when the registry is loaded: a name that disables nothing.
        warning = _default.unknown_disabled_warning(disabled_from_env())
        if warning:
            print(f"warning: {warning}", file=sys.stderr)
    if strict if strict is not None else strict_from_env():
        _default.require_healthy()
    return _default


def set_registry(registry: Registry | None) -> None:
    """Replace the process-wide registry (tests), or forget it with None."""
    global _default
    _default = registry


def active_registry() -> Registry:
    """The registry of the run in progress, else the installed plugins' registry."""
    return _active.get() or get_registry()


@contextlib.contextmanager
def use_registry(registry: Registry) -> Iterator[None]:
    """Make `registry` the active one for the code run inside (and the tasks it starts)."""
    token = _active.set(registry)
    try:
        yield
    finally:
        _active.reset(token)
