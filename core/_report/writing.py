"""Writing a run's reports through the reporter plugins. One broken reporter does
not stop the others from writing."""

from __future__ import annotations

from pathlib import Path

from evalctl._plugin.registry import Registry
from evalctl._report.results import RunResult


def report_stem(run: RunResult) -> str:
    name = Path(run.run_directory).name
    return "report-" + (name.removeprefix("workspaces-") if name else "run")


def write_reports(run: RunResult, registry: Registry, names: tuple[str, ...] | list[str],
                  out_dir: Path, json_path: Path | None = None) -> tuple[list[Path], list[str]]:
    """Write each named report under `out_dir` (and the JSON also to `json_path`).

    Returns the paths written and a message per reporter that failed.
    """
    targets: list[tuple[str, Path]] = [
        (name, Path(out_dir) / f"{report_stem(run)}.{registry.reporters[name].extension}")
        for name in dict.fromkeys(names)
    ]
    if json_path is not None:
        targets.append(("json", Path(json_path)))
    written: list[Path] = []
    failures: list[str] = []
    for name, path in targets:
        spec = registry.get("reporter", name)
        try:
            written.append(Path(spec.write(run, path)))
        except Exception as exc:  # a broken reporter must not cost the other reports
            owner = registry.plugin_of("reporter", name)
            who = f" from {owner.label}" if owner else ""
            failures.append(f"reporter '{name}'{who} failed writing {path}: "
                            f"{type(exc).__name__}: {exc}")
    return written, failures
