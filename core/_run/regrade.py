"""`evalctl regrade RUN_DIR`: the current checks on a finished run's kept workspaces.

Nothing of the original run is changed: each graded attempt's workspace, seed copy,
ledger and cassette are copied into a new run directory, and the task's checks (the
suite as it is now, the graders installed now) grade the copy exactly as `evalctl run`
grades an attempt (`_run.grading`): protected files against the files the agent changed
(from its ledger's `task_end`) and against the seed copy (the copy keeps what code a
check executed changed while the run graded), the verify files written again, every check in a fresh
sandbox of the run's kind. No model is called: judge checks are left out, and the
agent's turns, tokens and cost are the recorded run's. The new run's journal and
reports say it is a regrade and of which run (`regrade_of`).
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import shutil
from collections.abc import Awaitable, Collection
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from evalctl._agent.ledger import read_events
from evalctl._errors import UsageError
from evalctl._files import IGNORED_DIRS, copy_file, directory_inside, snapshot
from evalctl._plugin.options import typed_options
from evalctl._plugin.registry import Registry, use_registry
from evalctl._plugin.types import AgentResult, ExitStatus, Sandbox, SandboxRequest
from evalctl._report.journal import (
    Journal,
    JournalContents,
    attempt_name,
    build_run,
    now,
    read_journal,
)
from evalctl._report.results import (
    ERROR,
    FAILED,
    NOT_RUN,
    PASSED,
    CheckOutcome,
    RunResult,
    TaskResult,
)
from evalctl._run.grading import (
    GradingSandboxFailed,
    attempt_status,
    grade_attempt,
    make_repositories_safe,
)
from evalctl._run.integrity import SEED_INTEGRITY, protected_changes_after_the_agent
from evalctl._run.sandboxing import SandboxChoice, open_sandbox
from evalctl._sources.patch import patched_files
from evalctl._suite.builtin import resolve_suite
from evalctl._suite.loader import load_suite
from evalctl._suite.model import Suite, Task
from evalctl._version import __version__
from evalctl._workspace import (
    Workspace,
    attempt_paths,
    new_run_directory,
    new_workspace,
    sandbox_environment,
)

# Why a regrade's unfinished attempts were not graded. A regrade is not continued (nor
# resumed: `evalctl run --resume` would run the agent again): it is made again.
INTERRUPTED = "the regrade was interrupted"



def how_to_regrade_again(regrade_dir: Path, header: dict[str, Any], *,
                         reported: bool = False) -> str:
    """What to do with a regrade that did not finish (its journal's `header`); `reported`:
    its reports were just written."""
    source = (header.get("regrade_of") or {}).get("run_directory") or "RUN_DIR"
    return (f"a regrade is not continued: run `evalctl regrade {source}` again, which "
            "grades every kept workspace of that run anew into a new run directory, "
            "calling no model" + ("" if reported else
                                  f"; `evalctl report {regrade_dir}` writes the reports of "
                                  "what this one graded"))


JUDGE = "judge"  # the grader kind that asks a model: never asked in a regrade
DEFAULT_CONCURRENCY = 4


@dataclass
class PlannedAttempt:
    task: Task
    recorded: TaskResult
    name: str


@dataclass
class PreparedRegrade:
    """Everything checked before anything is written: the run, the suite, the sandbox,
    and which attempts are graded again (the rest are carried over as they were)."""

    source: JournalContents
    suite: Suite
    registry: Registry
    sandbox: SandboxChoice
    out_dir: Path
    attempts: list[PlannedAttempt]
    carried: list[tuple[TaskResult, str]]  # (result, why it is not graded again)
    concurrency: int = DEFAULT_CONCURRENCY
    warnings: list[str] = field(default_factory=list)
    run_dir: Path | None = None


def plan_regrade(run_dir: Path, registry: Registry, *, suite: Path | None = None,
                 out_dir: Path | None = None, concurrency: int | None = None
                 ) -> PreparedRegrade:
    """What a regrade of `run_dir` will do, or a UsageError (exit 2) saying why it
    cannot: no run there, its suite gone, no kept workspace, its sandbox unusable."""
    source = read_journal(run_dir)
    header = source.header
    if suite is None:
        recorded = header.get("suite", {})
        suite = Path(recorded.get("absolute_path") or recorded.get("path", ""))
        if not suite.is_file():
            raise UsageError(f"{run_dir}: the run's suite {suite} is not there any more; "
                             "pass the suite to grade with --suite")
    from evalctl._run.runner import naming_missing_plugins

    # A grader (or the sandbox) the run used whose plugin is gone since: named with its
    # distribution, not only "unknown grader".
    with naming_missing_plugins(header.get("plugins"), registry, str(run_dir)):
        loaded = load_suite(resolve_suite(suite), registry)
    by_id = {task.id: task for task in loaded.tasks}
    attempts: list[PlannedAttempt] = []
    carried: list[tuple[TaskResult, str]] = []
    for task_id, attempt, _ in source.planned():
        recorded = source.results.get((task_id, attempt))
        if recorded is None:
            continue  # never finished: reported not run, as in the run's own reports
        name = attempt_name(task_id, attempt, source.repeat)
        why = _not_regradable(recorded, by_id.get(task_id), source.run_dir / name)
        if why:
            carried.append((recorded, why))
        else:
            attempts.append(PlannedAttempt(by_id[task_id], recorded, name))
    if not attempts:
        reasons = "; ".join(sorted({why for _, why in carried})) or "no attempt finished"
        raise UsageError(f"{run_dir}: no kept workspace to regrade ({reasons})")
    with naming_missing_plugins(header.get("plugins"), registry, str(run_dir)):
        sandbox = _sandbox(header, registry)
    return PreparedRegrade(source, loaded, registry, sandbox,
                           Path(out_dir) if out_dir else source.run_dir.resolve().parent,
                           attempts, carried, concurrency or DEFAULT_CONCURRENCY)


def _not_regradable(recorded: TaskResult, task: Task | None, workspace: Path) -> str | None:
    if task is None:
        return "its task is not in the suite"
    if not recorded.checks and recorded.status == ERROR:
        return "it was not graded (the agent never worked)"
    if not workspace.is_dir():
        return "its workspace was not kept"
    return None


def _sandbox(header: dict[str, Any], registry: Registry) -> SandboxChoice:
    """The recorded run's sandbox, with its options: the checks run the agent's code."""
    recorded = header.get("sandbox") or {}
    name = recorded.get("name")
    if not name:
        raise UsageError("the journal does not say which sandbox the run used")
    spec = registry.get("sandbox", name)
    reason = spec.available()
    if reason is not None:
        raise UsageError(f"the run graded in sandbox '{name}', which cannot run here: "
                         f"{reason}")
    options = typed_options("sandbox", name, spec.options_schema,
                            dict(recorded.get("options") or {}))
    return SandboxChoice(spec, options, "regrade")


async def execute_regrade(prepared: PreparedRegrade) -> RunResult:
    """Grade the planned attempts again into a new run directory; its RunResult."""
    with use_registry(prepared.registry):
        return await _execute(prepared)


async def _execute(prepared: PreparedRegrade) -> RunResult:
    try:
        run_dir = new_run_directory(prepared.out_dir)
    except OSError as exc:
        raise UsageError(f"cannot create a run directory under {prepared.out_dir}: "
                         f"{exc.strerror or exc}") from None
    prepared.run_dir = run_dir
    journal = Journal.create(run_dir, _header(prepared, run_dir))
    gate = asyncio.Semaphore(prepared.concurrency)

    async def one(planned: PlannedAttempt) -> None:
        async with gate:
            result = await _regrade_attempt(prepared, planned, run_dir)
            await journal.record(result)

    # Interrupted (Ctrl-C, SIGTERM: the task is cancelled, the gathered attempts with
    # it, their sandboxes closed), the journal ends as a run's does and the reports cover
    # the attempts graded (found by an outside tester: it ended with no `end` line, no
    # report and only "interrupted").
    interrupted = False
    try:
        for recorded, _ in prepared.carried:
            await journal.record(recorded)
        await asyncio.gather(*(one(planned) for planned in prepared.attempts))
    except asyncio.CancelledError:
        interrupted = True
        current = asyncio.current_task()
        if current is not None:
            current.uncancel()
    except BaseException:
        journal.close()
        raise
    reason = INTERRUPTED if interrupted else None
    journal.end(interrupted=interrupted, reason=reason, budget=None)
    journal.close()
    return build_run(journal.contents, interrupted=interrupted, stop_reason=reason)


def _header(prepared: PreparedRegrade, run_dir: Path) -> dict[str, Any]:
    from evalctl._run.runner import plugin_versions

    original = {k: v for k, v in prepared.source.header.items() if k not in ("kind", "format")}
    suite, registry = prepared.suite, prepared.registry
    return {
        **original,
        "started_at": now(),
        "suite": {"path": str(suite.path), "absolute_path": str(Path(suite.path).resolve()),
                  "name": suite.name, "sha256": suite.sha256},
        "evalctl_version": __version__,
        "plugins": plugin_versions(registry),
        "run_directory": str(run_dir),
        "rate_names": sorted({s.rate for s in registry.graders.values() if s.rate}),
        "regrade_of": {"run_directory": str(prepared.source.run_dir.resolve()),
                       "started_at": original.get("started_at"),
                       "suite_sha256": original.get("suite", {}).get("sha256")},
    }


async def _regrade_attempt(prepared: PreparedRegrade, planned: PlannedAttempt,
                           run_dir: Path) -> TaskResult:
    task, recorded, name = planned.task, planned.recorded, planned.name
    workspace = await asyncio.to_thread(_copy_attempt, prepared.source.run_dir, run_dir, name,
                                        prepared.warnings)
    agent, as_left = await asyncio.to_thread(_recorded_agent, recorded, workspace, task,
                                             prepared.warnings)
    verify: dict[str, str | None] = dict(task.verify_files)
    if task.verify_patch:
        verify = {**await asyncio.to_thread(patched_files, workspace.seed_path,
                                            task.verify_patch), **verify}
    # The copy holds the verify files the run wrote: the checks of the workspace as the
    # agent left it must not see them (grading writes them again after those checks).
    await asyncio.to_thread(_verify_paths_as_the_agent_left_them, workspace,
                            {*verify, *_patch_paths(task)}, agent.files_changed or {},
                            prepared.warnings)

    def open_grading(state: tuple[Path, Path], read_only: tuple[str, ...]
                     ) -> Awaitable[Sandbox]:
        home, tmp = state
        return open_sandbox(prepared.sandbox, SandboxRequest(
            workspace.root, home, tmp, sandbox_environment(home, tmp), network=task.network,
            options=prepared.sandbox.options, purpose="grading", attempt=name,
            read_only=read_only))

    # What code a check executed changed in the workspace while the run graded is in the
    # copy: protected files are compared with the seed here, before grading writes.
    tampered = await asyncio.to_thread(_protected_since_the_agent, task, workspace, agent,
                                       verify)
    # The checks of the workspace as the agent left it keep the run's verdicts: the copy
    # is the workspace as the run's checks left it (found by an attacker round: a module
    # that removed its own TODO when the run's tests imported it passed no_placeholders
    # in the regrade, after failing it in the run). One the run did not grade is graded.
    # So do the checks that read only, graded before any check ran code, when code a
    # check ran changed the workspace since the agent left it; otherwise the copy is as
    # the agent left it, and they are graded again.
    diverged = await asyncio.to_thread(_changed_since_the_agent, workspace,
                                       agent.files_changed, as_left,
                                       {*verify, *_patch_paths(task)})
    if diverged:
        # Not the workspace the agent left: no check can be graded again on it (found by
        # an attacker round: the agent's module rewrote itself to a fix when the run's
        # tests imported it, and the regrade's tests passed). Every verdict the run gave
        # is kept; a check it did not give is graded on the copy.
        shown = ", ".join(diverged[:3]) + (" ..." if len(diverged) > 3 else "")
        carried = _carried([c for c in recorded.checks if c.type in prepared.registry.graders],
                           f"code a check ran changed the kept workspace after the agent: "
                           f"{shown}")
    else:
        carried = _carried(_graded_as_the_agent_left_it(recorded.checks, prepared.registry),
                           "the kept workspace is as the run's checks left it, not as the "
                           "agent did")
    try:
        checks = await grade_attempt(task, workspace, agent, verify, prepared.registry,
                                     open_grading, skip_kinds=(JUDGE,), carried=carried,
                                     carry_every=bool(diverged))
    except GradingSandboxFailed as exc:
        return _copy_result(recorded, ERROR, [], workspace,
                            exit_status=ExitStatus.SANDBOX_ERROR,
                            error=f"the sandbox failed to start: {exc}")
    finally:
        # The copy's checks ran the agent's code too, which may have written .git/config
        # again (found by an attacker round: the regrade's kept copy was live).
        await make_repositories_safe(workspace, task.source)
    # The seed copy was checked when the run graded; that evidence is not in the copy.
    checks += [c for c in recorded.checks if c.type == SEED_INTEGRITY and not c.passed]
    if tampered is not None:
        checks.append(tampered)
    status = attempt_status(recorded.exit_status, checks, _error_statuses(prepared, recorded))
    return _copy_result(recorded, status, checks, workspace)


def _protected_since_the_agent(task: Task, workspace: Workspace, agent: AgentResult,
                               verify: dict[str, str | None]) -> CheckOutcome | None:
    return protected_changes_after_the_agent(task, workspace, agent.files_changed,
                                             {*verify, *_patch_paths(task)})


def _error_statuses(prepared: PreparedRegrade, recorded: TaskResult) -> set[str]:
    """The exit statuses that make an attempt an error: the kernel's, the recorded
    provider's, and any status that is not an agent's (a provider not installed now)."""
    statuses = set(ExitStatus.ERRORS)
    provider = prepared.registry.providers.get(str(prepared.source.header.get("provider")))
    if provider is not None:
        statuses |= set(provider.error_statuses)
    if recorded.exit_status and recorded.exit_status not in ExitStatus.AGENT:
        statuses.add(recorded.exit_status)
    return statuses


def _carried(checks: list[CheckOutcome], why: str) -> list[CheckOutcome]:
    """The run's verdicts of `checks`, each detail saying it was carried and why."""
    return [dataclasses.replace(c, detail=f"{c.detail}\n(the run's verdict, carried: {why})")
            for c in checks]


def _graded_as_the_agent_left_it(checks: list[CheckOutcome], registry: Registry
                                 ) -> list[CheckOutcome]:
    """Of a run's checks, those of the workspace as the agent left it
    (`as_left_by_agent`), which the copy is not: their verdicts are kept."""
    return [check for check in checks if (spec := registry.graders.get(check.type))
            is not None and spec.as_left_by_agent]


def _copy_result(recorded: TaskResult, status: str, checks: list[Any], workspace: Workspace,
                 **changes: Any) -> TaskResult:
    data = recorded.to_dict()
    data.update(status=status, workspace=str(workspace.root), ledger=str(workspace.ledger_path))
    result = TaskResult.from_dict(data)
    result.checks = list(checks)
    for key, value in changes.items():
        setattr(result, key, value)
    return result


def _recorded_agent(recorded: TaskResult, workspace: Workspace, task: Task,
                    warnings: list[str]) -> tuple[AgentResult, dict[str, str] | None]:
    """What the graders were given when the run graded: the recorded totals, and the
    final text and files changed from the ledger's `task_end`; and the digests of the
    files the agent created or changed, as it left them (None when the ledger does not
    record them). A ledger without them (a run of an older evalctl) gives the last model
    turn's text and the changes measured against the seed copy, verify files left out."""
    final_text, files_changed, as_left, omitted = None, None, None, 0
    try:
        ends = [e for e in read_events(workspace.ledger_path) if e.get("event") == "task_end"]
    except (OSError, ValueError, RecursionError):
        ends = []
    if ends and isinstance(ends[-1].get("files_changed"), dict):
        final_text = str(ends[-1].get("final_text") or "")
        files_changed = {str(k): str(v) for k, v in ends[-1]["files_changed"].items()}
        if isinstance(ends[-1].get("as_left"), dict):
            as_left = {str(k): str(v) for k, v in ends[-1]["as_left"].items()}
        cut = ends[-1].get("files_changed_omitted")
        omitted = cut if isinstance(cut, int) and not isinstance(cut, bool) and cut > 0 else 0
    else:
        warnings.append(f"{workspace.task_id}: its ledger does not record the files changed "
                        "and the final text; they were measured again from the workspace")
        final_text = _last_turn_text(workspace.ledger_path)
        verify = set(task.verify_files) | (set(_patch_paths(task)))
        measured = workspace.changed_files(task.protected)
        files_changed = {p: c for p, c in measured.items() if p not in verify}
        omitted = measured.omitted
    return AgentResult(
        final_text=final_text, exit_status=recorded.exit_status or ExitStatus.COMPLETED,
        turns=recorded.turns, tool_calls=recorded.tool_calls, usage=recorded.usage,
        cost=recorded.cost, duration=recorded.duration, files_changed=files_changed,
        ledger_path=workspace.ledger_path, error=recorded.error,
        seed_path=workspace.seed_path, files_changed_omitted=omitted), as_left


def _changed_since_the_agent(workspace: Workspace, files_changed: dict[str, str],
                             as_left: dict[str, str] | None,
                             written: Collection[str] = ()) -> list[str]:
    """The paths of the copy that are not as the agent left them (the seed, with the
    agent's changes by their recorded digests): what code a check of the run's ran
    changed. None known (empty) when the ledger records no digests (an older run); a
    change whose digest is not recorded counts as changed."""
    if as_left is None:
        return []
    expected = {path: digest for path, digest in workspace.seed.items()
                if files_changed.get(path) != "deleted"}
    for path, kind in files_changed.items():
        if kind != "deleted":
            expected[path] = as_left.get(path, "")
    now = snapshot(workspace.root)
    # A link the agent made reads what it points at, which the digests do not cover
    # (found by an attacker round: calc.py a link into .git, where the file it named was
    # rewritten while the run's tests ran): not known to be as the agent left it.
    links = [path for path, digest in as_left.items() if digest.startswith("symlink:")]
    # A directory neither seeded nor holding a file the agent made was made while the
    # run's checks ran (found by an attacker round: the agent's module found the empty
    # build/ the run's tests had left, and the regrade passed).
    made_by_the_agent_or_the_run = [path for path, kind in files_changed.items()
                                    if kind != "deleted"] + list(written)
    known = _directories(workspace.seed_path) | {
        "/".join(path.split("/")[:depth]) for path in made_by_the_agent_or_the_run
        for depth in range(1, path.count("/") + 1)}
    made = [f"{path}/" for path in _directories(workspace.root) - known]
    return sorted(links + made + [path for path in now.keys() | expected.keys()
                                  if now.get(path) != expected.get(path)])


def _directories(root: Path, limit: int = 100_000) -> set[str]:
    """The directories under `root` (relative; links not followed, the directories
    evalctl does not track left out), at most `limit` of them."""
    found: set[str] = set()
    pending = [""]
    while pending and len(found) < limit:
        relative = pending.pop()
        try:
            with os.scandir(root / relative if relative else root) as entries:
                for entry in entries:
                    if entry.name not in IGNORED_DIRS and entry.is_dir(follow_symlinks=False):
                        inner = f"{relative}/{entry.name}" if relative else entry.name
                        found.add(inner)
                        pending.append(inner)
        except OSError:
            continue
    return found


def _patch_paths(task: Task) -> list[str]:
    if not task.verify_patch:
        return []
    from evalctl._sources.patch import patch_paths

    return patch_paths(task.verify_patch)


def _last_turn_text(ledger: Path) -> str:
    try:
        with open(ledger, encoding="utf-8", errors="replace") as handle:
            texts = [event.get("text", "") for event in map(_json_or_empty, handle)
                     if event.get("event") == "model_turn"]
    except OSError:
        return ""
    return str(texts[-1]) if texts else ""


def _json_or_empty(line: str) -> dict[str, Any]:
    try:
        value = json.loads(line)
    except (ValueError, RecursionError):
        return {}
    return value if isinstance(value, dict) else {}


def _copy_attempt(source_run: Path, run_dir: Path, name: str,
                  warnings: list[str]) -> Workspace:
    """A new attempt in `run_dir` holding a copy of `name`'s workspace, seed copy, ledger
    and cassette from `source_run`, with a fresh HOME and TMPDIR. What could not be
    copied is named in `warnings`: the graders will not see it."""
    workspace = new_workspace(run_dir, name)
    origin = attempt_paths(source_run, name)
    for label, source, copy in (("workspace", origin["workspace"], workspace.root),
                                ("seed copy", origin["seed"], workspace.seed_path)):
        missed = copy_tree(source, copy)
        if missed:
            shown = ", ".join(_short(p) for p in missed[:3])
            warnings.append(f"{name}: {len(missed)} entr{'y' if len(missed) == 1 else 'ies'} "
                            f"of its {label} could not be copied, so the graders do not see "
                            f"them (a path too long for the copy's place, say): {shown}"
                            + (" ..." if len(missed) > 3 else ""))
    for label, target in (("ledger", workspace.ledger_path),
                          ("cassette", workspace.cassette_path)):
        if target is not None and origin[label].is_file() and not origin[label].is_symlink():
            shutil.copyfile(origin[label], target)
    workspace.seed = snapshot(workspace.seed_path)
    return workspace


def _verify_paths_as_the_agent_left_them(workspace: Workspace, paths: set[str],
                                         files_changed: dict[str, str],
                                         warnings: list[str]) -> None:
    """Put the copy's verify `paths` back as the agent left them, as far as the run
    kept that: the kept workspace holds the verify files the run's grading wrote (found
    by an attacker round: an agent that only named the hidden test in its summary
    failed grounding in the run and passed it in the regrade, which saw the hidden
    test in the copy). A path the agent did not change (not in `files_changed`, the
    ledger's record of what it changed before grading) is given the seed copy's file,
    or nothing when the seed has none; one the agent deleted is removed; and a
    directory left empty by the removal that the seed does not hold goes too (the run
    made it for a verify file; an empty directory the agent made itself there is lost
    with it). A path the agent created or changed is left as the copy has it: the run
    replaced the agent's file with the verify file (or removed it, for a verify path
    of no content), and the kept workspace holds nothing else of the agent's version,
    so the checks of the workspace as the agent left it see that a file of the agent's
    was there (grounding), but read the verify file's content in it, not the agent's.
    A ledger that does not record the changes (an older evalctl's) names no verify
    path: every one is then taken as not the agent's, the reading that cannot credit
    an agent with a hidden file."""
    root, seed = workspace.root, workspace.seed_path
    for relative in sorted(paths):
        change = files_changed.get(relative)
        if change in ("created", "modified"):
            continue
        parts = relative.split("/")
        if any(part in ("", ".", "..") for part in parts):
            continue  # not a path the run could have written
        parent = directory_inside(root, parts[:-1])
        if parent is None:
            continue  # a link or a file on the way: the run wrote nothing there
        target = parent / parts[-1]
        try:
            if target.is_symlink() or target.is_file():
                target.unlink()
            elif target.exists():
                continue  # a directory: the run could not write there, it is the agent's
            origin = seed / relative
            if change is None and directory_inside(seed, parts[:-1]) is not None and \
                    (origin.is_symlink() or origin.is_file()):
                if origin.is_symlink():
                    os.symlink(os.readlink(origin), target)
                else:
                    copy_file(origin, target)
                continue
        except OSError as exc:
            warnings.append(f"{workspace.task_id}: its verify file {relative} could not be "
                            f"put back as the agent left it ({exc.strerror or exc}): the "
                            "checks of the workspace as the agent left it may see it")
            continue
        for depth in range(len(parts) - 1, 0, -1):
            directory = root.joinpath(*parts[:depth])
            if (seed.joinpath(*parts[:depth])).is_dir():
                break
            try:
                directory.rmdir()
            except OSError:
                break  # not empty (the agent's files, or another verify file's)


def _short(relative: str) -> str:
    """A path for a warning: a very deep one by its length and its ends."""
    if len(relative) <= 120:
        return relative
    return f"{relative[:40]}...{relative[-40:]} ({len(relative)} characters)"


def copy_tree(origin: Path, target: Path) -> list[str]:
    """Copy what an agent left: directories, regular files (with their mode, not their
    times: a file keyed by size and time, a large or sparse one, then differs from the
    agent's digest, and the copy counts as changed, the safe side; sparse files stay
    sparse; a file with several names copied once, linked under the others) and links
    (as links, never followed). FIFOs, sockets and devices
    are left out and never opened; a file swapped for one between the look and the open
    is not read. Iterative: the agent decides how deep the tree goes. Returns the
    relative paths that could not be copied (a directory that cannot be read, a path
    longer than the kernel takes where the copy is made), so a caller can say so."""
    target.mkdir(parents=True, exist_ok=True)
    missed: list[str] = []
    # A file under several names is copied once and linked under the others, as the
    # agent left it: copied under each, 200 names of a 10 MB file were 2 GB of the
    # regrade's disk (found by an attacker round).
    copied: dict[tuple[int, int], str] = {}
    pending = [(os.fspath(origin), os.fspath(target), "")]
    while pending:
        here, there, prefix = pending.pop()
        try:
            entries = list(os.scandir(here))
        except OSError:
            missed.append(prefix.rstrip("/") or ".")
            continue
        for entry in entries:
            destination = os.path.join(there, entry.name)
            try:
                if entry.is_symlink():
                    os.symlink(os.readlink(entry.path), destination)
                elif entry.is_dir(follow_symlinks=False):
                    os.mkdir(destination)
                    pending.append((entry.path, destination, f"{prefix}{entry.name}/"))
                elif entry.is_file(follow_symlinks=False):
                    info = entry.stat(follow_symlinks=False)
                    inode = (info.st_dev, info.st_ino)
                    if info.st_nlink > 1 and inode in copied:
                        os.link(copied[inode], destination)
                    elif copy_file(entry.path, destination) and info.st_nlink > 1:
                        copied[inode] = destination
            except OSError:
                missed.append(prefix + entry.name)  # the graders will not see it: say so
    return missed


def summary_line(run: RunResult, prepared: PreparedRegrade) -> str:
    """One line for the console: what was regraded, and what changed."""
    source = prepared.source.results
    changed = [t for t in run.tasks if t.status in (PASSED, FAILED, ERROR)
               and source.get((t.task_id, t.attempt)) is not None
               and source[(t.task_id, t.attempt)].status != t.status]
    regraded = len(prepared.attempts)
    if run.interrupted:
        graded = sum(1 for t in run.tasks if t.status != NOT_RUN) - len(prepared.carried)
        regraded = f"{max(graded, 0)} of {regraded}"
    return (f"regraded {regraded} attempt(s) of {prepared.source.run_dir}"
            + (f"; {len(prepared.carried)} carried over as they were" if prepared.carried
               else "")
            + f"; {len(changed)} changed verdict")
