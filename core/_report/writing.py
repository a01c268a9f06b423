"""Writing a run's reports through the reporter plugins. One broken reporter does
not stop the others from writing, and a report's path that is taken by a directory
does not stop it either: the report goes beside it, under the next free name."""

from __future__ import annotations

import os
from pathlib import Path

from evalctl._errors import UsageError, describe_crash, stops_the_run
from evalctl._plugin.registry import Registry
from evalctl._report.results import RunResult


def report_stem(run: RunResult) -> str:
    name = Path(run.run_directory).name
    return "report-" + (name.removeprefix("workspaces-") if name else "run")


def check_reporters(registry: Registry, names: tuple[str, ...] | list[str]) -> None:
    """Refuse, when the reporters are chosen (before any task runs), a name no reporter
    has, and two reporters that would write one file: each writes report-<run>.<its
    extension>, so two of one extension overwrote each other, both saying "wrote" (found
    by a newcomer)."""
    by_extension: dict[str, list[str]] = {}
    for name in dict.fromkeys(names):
        spec = registry.get("reporter", name)
        by_extension.setdefault(spec.extension, []).append(name)
    for extension, sharing in by_extension.items():
        if len(sharing) > 1:
            def who(name: str) -> str:
                owner = registry.plugin_of("reporter", name)
                return f"'{name}'" + (f" ({owner.distribution} {owner.version})"
                                      if owner and owner.distribution else "")

            raise UsageError(
                f"reporters {' and '.join(who(name) for name in sharing)} both write "
                f"report-<run>.{extension}, so one would overwrite the other; choose one of "
                "them (--reporter, or reporters in evalctl.toml; json is always written)")


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
    taken: dict[Path, str] = {}
    for name, wanted in targets:
        spec = registry.get("reporter", name)
        path = free_path(wanted)
        if taken.get(path, name) != name:  # never one report over another's
            failures.append(f"reporter '{name}' was not written: {path} is reporter "
                            f"'{taken[path]}''s (both write .{spec.extension})")
            continue
        taken[path] = name
        owner = registry.plugin_of("reporter", name)
        who = f" from {owner.label}" if owner else ""
        existed = os.path.lexists(path)
        try:
            returned = spec.write(run, path)
        except BaseException as exc:  # a broken reporter must not cost the other reports
            # SystemExit too (found by a newcomer: a reporter's sys.exit(0) ended evalctl
            # with exit 0 after failed tasks, the later reporters never written).
            if stops_the_run(exc):
                raise
            failures.append(f"reporter '{name}'{who} failed writing {path}: {_reason(exc)}"
                            f"{_remove_partial(path, existed)}")
            continue
        # `write` returns the path it wrote (what write_atomically returns); None is
        # taken as `path` when a file is there (returning None was a TypeError).
        if returned is None and path.is_file():
            returned = path
        if not isinstance(returned, str | Path) or not Path(returned).is_file():
            failures.append(f"reporter '{name}'{who} returned {returned!r} from write(), "
                            f"which is no report file: write writes {path} and returns "
                            "that path (what evalctl.write_atomically returns)"
                            f"{_remove_partial(path, existed)}")
            continue
        written.append(Path(returned))
    return written, failures


def _remove_partial(path: Path, existed: bool) -> str:
    """Remove what a failed reporter left at `path`, when nothing was there before it ran
    (a reporter writing with open() left an empty report-*.out behind a run that said it
    failed, found by a newcomer); never a file that was there before (an earlier run's
    report) nor a directory. Returns what to add to the failure's message."""
    import stat

    if existed:
        return ""
    try:
        if stat.S_ISDIR(os.lstat(path).st_mode):
            return ""
        os.unlink(path)
    except OSError:
        return ""
    return "; the partial file it left was removed"


def _reason(exc: BaseException) -> str:
    """What went wrong, for the user. An OSError names the file it failed on, which for
    an atomic write is a hidden temporary file (`.r.json.x1y2.tmp`) the user never asked
    for: its reason alone is said, since the message names the report's path already."""
    if isinstance(exc, OSError) and exc.strerror:
        name = Path(str(exc.filename)).name if exc.filename else ""
        temporary = name.startswith(".") and name.endswith(".tmp")
        return exc.strerror if not exc.filename or temporary else \
            f"{exc.strerror}: {exc.filename}"
    return describe_crash(exc)


def free_path(path: Path) -> Path:
    """`path`, or when a directory (or anything but a file) is in the way, the first of
    `name-2.ext`, `name-3.ext`... that is free: a report is never lost to a name."""
    if path.is_file() or not path.exists():
        return path
    for number in range(2, 10_000):
        candidate = path.with_name(f"{path.stem}-{number}{path.suffix}")
        if not candidate.exists():
            return candidate
    return path  # let the reporter fail, and say why


# How much of a file at --report's path is read to tell an earlier report from anything
# else: the format is the JSON report's second key.
_SNIFF_BYTES = 4096


def report_path_problem(path: Path, suite: Path | None = None) -> str | None:
    """Why `--report PATH` must not be written, known before the run: it is the suite,
    something other than a file or a directory (a device: a report is written by a
    rename, which would replace it), or a file that is not an earlier JSON report (it
    would be lost), or in a directory that cannot be written or created (found after a
    run, that cost the run its report). None when it may be written: a new path, a
    directory in the way (the report goes beside it), or an earlier report (CI writes
    the same path every run)."""
    unwritable = directory_problem(path.parent, creates_parents=True)
    if unwritable:
        return unwritable
    if not path.exists() or path.is_dir():
        return None
    if not path.is_file():
        return ("is not a regular file (a device, a pipe or a socket); a report is a file: "
                "name a path for it")
    try:
        if suite is not None and suite.exists() and path.samefile(suite):
            return "is the suite being run; name another path for the report"
        with open(path, "rb") as handle:
            head = handle.read(_SNIFF_BYTES)
    except OSError as exc:
        return f"cannot be read to see what it holds: {exc.strerror or exc}"
    if b'"format": "evalctl-run/' not in head and b'"format":"evalctl-run/' not in head:
        return ("exists and is not an evalctl JSON report, so writing it would lose it; "
                "remove it or name another path")
    return None



def directory_problem(directory: Path, *, creates_parents: bool) -> str | None:
    """Why a file cannot be written into `directory`, said as the end of "it ...", or
    None. With `creates_parents` (write_atomically makes missing directories), a
    directory that does not exist is fine when its nearest existing ancestor is a
    directory that can be written; without, it is refused."""
    import os

    directory = Path(directory) if str(directory) else Path(".")
    existing = directory
    while not existing.exists() and existing != existing.parent:
        if not creates_parents:
            return (f"is in a directory that does not exist ({directory}); create it first "
                    "or name another path")
        existing = existing.parent
    if not existing.is_dir():
        return (f"cannot be written: {existing} is not a directory, so {directory} cannot "
                "be made")
    if not os.access(existing, os.W_OK | os.X_OK):
        made = "" if existing == directory else f" (where {directory} would be made)"
        return (f"cannot be written: the directory {existing}{made} is not writable by "
                "you; name another path")
    return None
