"""Choosing the run's sandbox, and opening and closing one per attempt.

The choice, most specific first: `--sandbox NAME` on the command line, `sandbox:` in
the suite's defaults, `sandbox` in evalctl.toml, else `auto`: the available sandbox
with the highest `auto_priority`. A live provider never runs in a sandbox that does
not isolate unless the user named that sandbox on the command line.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from evalctl._errors import UsageError
from evalctl._plugin.options import typed_options
from evalctl._plugin.registry import Registry
from evalctl._plugin.specs import ProviderSpec, SandboxSpec
from evalctl._plugin.types import Sandbox, SandboxRequest

AUTO = "auto"


@dataclass(frozen=True)
class SandboxChoice:
    """The sandbox a run uses, its validated options, and how it was chosen."""

    spec: SandboxSpec
    options: Mapping[str, Any] = field(default_factory=dict)
    chosen_by: str = AUTO  # "--sandbox", "suite", "config" or "auto"

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.spec.name, "options": dict(self.options),
                "isolated": self.spec.isolated, "chosen_by": self.chosen_by}


def choose_sandbox(registry: Registry, provider: ProviderSpec, *, flag: str | None,
                   flag_options: Mapping[str, str], suite_default: Any,
                   config_name: str | None, config_options: Mapping[str, Any],
                   suite_origin: str | None = None,
                   config_origin: str | None = None) -> SandboxChoice:
    """The run's sandbox, or a UsageError (exit 2) saying why none can be used. The
    origins ("FILE:LINE") say where the suite's defaults and the team defaults choose it."""
    suite_name, suite_options = _suite_sandbox(suite_default)
    candidates = [(flag, "--sandbox", {}), (suite_name, "suite", suite_options),
                  (config_name, "config", dict(config_options))]
    name, chosen_by, options = next(((n, by, o) for n, by, o in candidates if n),
                                    (AUTO, AUTO, {}))
    if name == AUTO:
        spec, chosen_by = _auto(registry), AUTO
    else:
        spec = registry.get("sandbox", name)
    reason = spec.available()
    if reason is not None:
        raise UsageError(f"sandbox '{spec.name}' cannot run here: {reason}")
    # The config's options go with the config's sandbox when it names one (like its
    # provider_options with its provider); when it names none they are defaults for
    # whatever sandbox is chosen, auto included, as --sandbox-option's are. Before, they
    # were silently dropped unless `sandbox =` was set too.
    if chosen_by != "config" and config_options and (not config_name
                                                    or config_name == spec.name):
        options = {**dict(config_options), **options}
    # Typed and checked like every plugin's options: an unknown one is refused.
    merged = typed_options("sandbox", spec.name, spec.options_schema,
                           {**options, **flag_options})
    if not spec.isolated and provider.live and chosen_by != "--sandbox":
        origin = {"suite": suite_origin, "config": config_origin}.get(chosen_by)
        raise UsageError(_refusal(registry, provider, spec, chosen_by, origin))
    return SandboxChoice(spec, merged, chosen_by)


def _refusal(registry: Registry, provider: ProviderSpec, spec: SandboxSpec,
             chosen_by: str, origin: str | None) -> str:
    """Why a live provider may not run in `spec`, which does not isolate, and what to do.
    Found by newcomers: `sandbox = "local"` in evalctl.toml, or `sandbox: local` in the
    suite's defaults, was refused with "Install bubblewrap" on a machine where bubblewrap
    works, and the line that chose it was not named."""
    unisolated = (f"the {provider.name} provider is live, and sandbox '{spec.name}' does not "
                  f"isolate the agent ({spec.isolation or 'no isolation'})")
    accept = f"or accept the risk with --sandbox {spec.name} on the command line"
    setting = {"config": ("the team defaults (evalctl.toml or [tool.evalctl] in "
                          "pyproject.toml)", "Remove that setting"),
               "suite": ("the suite's defaults", "Remove `sandbox:` from the suite's defaults")}
    if chosen_by in setting:
        default_place, remove = setting[chosen_by]
        unisolated = f"{origin or default_place} chooses sandbox '{spec.name}'; {unisolated}"
        isolating = next((s for s in _ranked(registry)
                          if s.isolated and s.available() is None), None)
        if isolating is not None:
            return (f"{unisolated}. {remove}, so that --sandbox auto chooses "
                    f"'{isolating.name}' (it isolates, and can run here), {accept}")
    return (f"{unisolated}. Install bubblewrap (Debian/Ubuntu: apt-get install bubblewrap; "
            f"Fedora: dnf install bubblewrap) so that --sandbox auto can contain it, {accept}")


def _ranked(registry: Registry) -> list[SandboxSpec]:
    """The sandboxes in the order `auto` considers them."""
    return sorted(registry.sandboxes.values(), key=lambda s: (-s.auto_priority, s.name))


def _auto(registry: Registry) -> SandboxSpec:
    ranked = _ranked(registry)
    for spec in ranked:
        if spec.available() is None:
            return spec
    reasons = "; ".join(f"{s.name}: {s.available()}" for s in ranked) or "none is installed"
    raise UsageError(f"no sandbox can run on this machine ({reasons})")


def _suite_sandbox(value: Any) -> tuple[str | None, dict[str, Any]]:
    if value is None:
        return None, {}
    if isinstance(value, str):
        return value, {}
    options = dict(value)
    return options.pop("name"), options


async def open_sandbox(choice: SandboxChoice, request: SandboxRequest) -> Sandbox:
    sandbox = choice.spec.create(request)
    if inspect.isawaitable(sandbox):
        sandbox = await sandbox
    return sandbox


def describe_sandboxes(registry: Registry) -> list[dict[str, Any]]:
    """What `evalctl doctor` reports: per sandbox, whether it can run here (and why not),
    what it isolates, the limits it enforces on this machine, and which auto picks."""
    findings = []
    chosen = False
    for spec in _ranked(registry):
        reason = spec.available()
        limits = dict(spec.limits()) if reason is None else {}
        auto = reason is None and not chosen
        chosen = chosen or auto
        findings.append({"name": spec.name, "available": reason is None, "reason": reason,
                         "auto": auto, "isolated": spec.isolated, "isolation": spec.isolation,
                         "limits": limits})
    return findings
