"""Choosing the run's executor: how its attempts are scheduled.

The choice: `--executor NAME` on the command line, else `executor` in evalctl.toml, else
the installed executor that declares itself the default (`ExecutorSpec.default`: the
built-in `local`). Options are typed and checked like every plugin's, the config's
`executor_options` only for the config's executor; the executor is created before any
task, so one that cannot work (a cluster out of reach) stops the run with exit 2.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from evalctl._errors import UsageError
from evalctl._plugin.options import typed_options
from evalctl._plugin.registry import Registry
from evalctl._plugin.specs import ExecutorSpec


@dataclass(frozen=True)
class ExecutorChoice:
    """The run's executor: its spec, its validated options, the executor it created,
    and how it was chosen."""

    spec: ExecutorSpec
    options: Mapping[str, Any] = field(default_factory=dict)
    executor: Any = None
    chosen_by: str = "default"  # "--executor", "config" or "default"

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.spec.name, "options": dict(self.options),
                "chosen_by": self.chosen_by}


def default_executor(registry: Registry) -> ExecutorSpec:
    """The executor a run uses when none is chosen: the one that says it is the default."""
    defaults = sorted(name for name, spec in registry.executors.items() if spec.default)
    if len(defaults) == 1:
        return registry.executors[defaults[0]]
    installed = ", ".join(sorted(registry.executors)) or "none"
    if not defaults:
        raise UsageError(f"no installed executor is the default (installed: {installed}); "
                         "choose one with --executor NAME")
    raise UsageError(f"executors {', '.join(defaults)} each say they are the default; "
                     "choose one with --executor NAME")


def choose_executor(registry: Registry, *, flag: str | None, flag_options: Mapping[str, Any],
                    config_name: str | None = None,
                    config_options: Mapping[str, Any] | None = None) -> ExecutorChoice:
    """The run's executor, created, or a UsageError (exit 2) saying why it cannot be."""
    if flag:
        spec, chosen_by, options = registry.get("executor", flag), "--executor", {}
        if config_name == flag:  # the config's options are for the executor it names
            options = dict(config_options or {})
    elif config_name:
        spec, chosen_by, options = (registry.get("executor", config_name), "config",
                                    dict(config_options or {}))
    else:
        spec, chosen_by, options = default_executor(registry), "default", {}
    typed = typed_options("executor", spec.name, spec.options_schema,
                          {**options, **flag_options})
    try:
        executor = spec.create(dict(typed))
    except UsageError as exc:
        raise UsageError(f"executor '{spec.name}': {exc}") from None
    return ExecutorChoice(spec, typed, executor, chosen_by)
