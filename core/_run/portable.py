"""Running one attempt away from the run: on another machine, or in another process.

An executor that runs attempts elsewhere (a cluster's workers) ships each one as a
`PortableAttempt`: plain, picklable data (the task, the provider, sandbox and agent as
chosen, the versions the run was prepared with). Where it lands, `run_portable` builds the
attempt's provider, sandbox and agent from the plugins installed there, runs the attempt
in a scratch run directory exactly as the run would (`runner.run_task`), and packs the
outcome: the result, the ledger, the cassette (the model exchanges, for replays) and,
unless told not to, the workspace and its seed copy, as one gzip'd tar. Back at the run,
`receive` unpacks it (every member checked, nothing outside its place) into the run
directory, where a local attempt would have left the same files, and returns the result
with the run directory's paths.
"""

from __future__ import annotations

import io
import json
import os
import socket
import stat
import tarfile
import tempfile
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from evalctl._errors import UsageError, describe_crash, plugin_failure_ignored, stops_the_run
from evalctl._files import remove_tree
from evalctl._plugin.options import provider_options as checked_provider_options
from evalctl._plugin.registry import Registry, active_registry, use_registry
from evalctl._plugin.types import ExitStatus
from evalctl._report.results import ERROR, TaskResult
from evalctl._run.agents import AgentChoice
from evalctl._run.sandboxing import SandboxChoice
from evalctl._suite.model import Suite, Task
from evalctl._text import escape_text
from evalctl._version import __version__
from evalctl._workspace import cassette_path

FORMAT = "evalctl-attempt/1"
RESULT, LEDGER, CASSETTE = "result.json", "ledger.jsonl", "cassette.jsonl"
WORKSPACE, SEED = "workspace", "seed"


@dataclass(frozen=True)
class PortableAttempt:
    """One attempt, as data: what a process with evalctl and the same plugins installed
    needs to run it. Built by the run (`Attempt.portable()`); opaque to executors."""

    task: Task
    number: int
    name: str
    repeat: int
    run_dir: str  # the run's directory, where the outcome will land
    provider: str
    provider_options: Mapping[str, Any]
    sandbox: Mapping[str, Any]  # name, options, chosen_by
    agent: Mapping[str, Any]  # name, base, options, version, chosen_by
    error_statuses: frozenset[str]
    evalctl_version: str
    plugins: Mapping[str, Any] = field(default_factory=dict)  # name: distribution, version


# What a worker sends back of a workspace is bounded: a file the agent made (a sparse
# terabyte, say) must not fill the driver's disk or memory. The graded result is made on
# the worker and never depends on these.
FILE_LIMIT_BYTES = 64 * 1024 * 1024
OUTCOME_LIMIT_BYTES = 512 * 1024 * 1024


def _inside_link(target: str) -> bool:
    """A link kept in a returned workspace: relative, with no `..` anywhere, so however
    links chain, each step goes down from a directory inside the workspace."""
    return bool(target) and not target.startswith("/") and ".." not in target.split("/")


def _entries(top: Path, arcname: str) -> Iterator[tuple[str, str, os.stat_result]]:
    """(path, name in the archive, lstat) of `top` and everything under it, depth first,
    without recursion. What cannot be read (a path past PATH_MAX, say) is skipped."""
    pending = [(str(top), arcname)]
    while pending:
        path, name = pending.pop()
        try:
            status = os.lstat(path)
        except OSError:
            continue
        yield path, name, status
        if not stat.S_ISDIR(status.st_mode):  # lstat: a link to a directory is not one
            continue
        try:
            with os.scandir(path) as listing:
                children = sorted(entry.name for entry in listing)
        except OSError:
            continue
        pending.extend((os.path.join(path, child), f"{name}/{child}")
                       for child in reversed(children))


def _packed(result: TaskResult, scratch: Path | None, name: str, workspace: bool) -> bytes:
    """The outcome as one gzip'd tar: result.json, and from the scratch run directory
    the ledger, the cassette and (with `workspace`) the workspace and its seed copy.

    Packing never fails the attempt: the result is already graded. Only regular files,
    directories and links that stay inside go in (a FIFO, a device, a link leading out
    are left out), and no file over FILE_LIMIT_BYTES, no sparse file, nothing past
    OUTCOME_LIMIT_BYTES in all, and nothing that cannot be read (a path too long)."""
    buffer = io.BytesIO()
    total = 0
    with tarfile.open(fileobj=buffer, mode="w:gz", compresslevel=1) as archive:
        data = json.dumps(result.to_dict(), ensure_ascii=True).encode()
        info = tarfile.TarInfo(RESULT)
        info.size, info.mtime = len(data), int(time.time())
        archive.addfile(info, io.BytesIO(data))
        parts = [] if scratch is None else [
            (scratch / ".ledgers" / f"{name}.jsonl", LEDGER),
            (cassette_path(scratch, name), CASSETTE)]
        if workspace and scratch is not None:
            parts += [(scratch / name, WORKSPACE), (scratch / ".seed" / name, SEED)]
        for top, arcname in parts:
            for path, member, status in _entries(top, arcname):
                info = tarfile.TarInfo(member)
                info.mode, info.mtime = status.st_mode & 0o755, int(status.st_mtime)
                try:
                    if stat.S_ISDIR(status.st_mode):
                        # Always enterable: the driver extracts member by member, and a
                        # directory made 000 first would keep out what lies in it.
                        info.type, info.mode = tarfile.DIRTYPE, 0o755
                        archive.addfile(info)
                    elif stat.S_ISLNK(status.st_mode):
                        target = os.readlink(path)
                        if _inside_link(target):
                            info.type, info.linkname = tarfile.SYMTYPE, target
                            archive.addfile(info)
                    elif stat.S_ISREG(status.st_mode):
                        sparse = status.st_blocks * 512 < status.st_size
                        if sparse or status.st_size > FILE_LIMIT_BYTES or \
                                total + status.st_size > OUTCOME_LIMIT_BYTES:
                            continue
                        with open(path, "rb") as handle:
                            info.size = os.fstat(handle.fileno()).st_size
                            archive.addfile(info, handle)
                        total += info.size
                except OSError:
                    continue  # unreadable (the attempt's processes are gone): left out
    return buffer.getvalue()


def _error(payload: PortableAttempt, message: str, status: str = ExitStatus.INTERNAL_ERROR
           ) -> TaskResult:
    return TaskResult(payload.task.id, ERROR, exit_status=status, tags=payload.task.tags,
                      attempt=payload.number, error=escape_text(message))


def _version_problem(payload: PortableAttempt, registry: Registry) -> str | None:
    """Results mean what the run's versions mean: a worker with another evalctl or other
    plugins must not run the attempt."""
    from evalctl._report.results import plugin_shown
    from evalctl._run.runner import plugin_versions

    if payload.evalctl_version != __version__:
        return (f"this worker has evalctl {__version__}, the run {payload.evalctl_version}; "
                "install the same version on every node")
    here = plugin_versions(registry)
    differ = sorted(name for name in {*here, *payload.plugins}
                    if here.get(name) != payload.plugins.get(name))
    if differ:
        shown = ", ".join(f"{n} (run {plugin_shown(payload.plugins.get(n))}, here "
                          f"{plugin_shown(here.get(n))})" for n in differ)
        return f"this worker's plugins differ from the run's: {shown}; install the same ones"
    return None


async def run_portable(payload: PortableAttempt, throttle: Any = None,
                       workspace: bool = True, host: str | None = None) -> bytes:
    """Run `payload` here, in a scratch run directory that is removed afterwards, and
    return its packed outcome. `throttle` is the run's shared limit on model calls (an
    object with `async acquire()` and `async release(generation, outcome)`), None for
    none; `workspace` False leaves the workspace and seed copy out of the outcome."""
    from evalctl._agent.throttle import SharedThrottle
    from evalctl._run.runner import PreparedRun, RunOptions, run_task

    if not isinstance(payload, PortableAttempt):
        raise TypeError(f"run_portable takes what Attempt.portable() returns, got "
                        f"{type(payload).__name__}")
    started = time.monotonic()
    host = host or socket.gethostname()
    registry = active_registry()  # the run's, in its own process; else the installed
    problem = _version_problem(payload, registry)
    if problem is not None:
        return _packed(_hosted(_error(payload, problem, ExitStatus.EXECUTOR_ERROR), host,
                               started), None, "", False)
    base = tempfile.mkdtemp(prefix="evalctl-attempt-")
    scratch = Path(base).resolve() / "run"
    scratch.mkdir()
    provider = None
    try:
        with use_registry(registry):
            try:
                spec = registry.get("provider", payload.provider)
                provider = spec.create(checked_provider_options(spec, payload.provider_options))
                sandbox = SandboxChoice(registry.get("sandbox", payload.sandbox["name"]),
                                        dict(payload.sandbox.get("options") or {}),
                                        str(payload.sandbox.get("chosen_by", "auto")))
                agent = AgentChoice(str(payload.agent["name"]),
                                    registry.get("agent", payload.agent["base"]),
                                    dict(payload.agent.get("options") or {}),
                                    payload.agent.get("version"),
                                    str(payload.agent.get("chosen_by", "default")))
            except UsageError as exc:
                return _packed(_hosted(_error(payload, f"cannot run here: {exc}",
                                              ExitStatus.EXECUTOR_ERROR), host, started),
                               None, "", False)
            unavailable = sandbox.spec.available()
            if unavailable is not None:
                result = _error(payload, f"the sandbox failed to start: sandbox "
                                f"'{sandbox.spec.name}' cannot run on {host}: {unavailable}",
                                ExitStatus.SANDBOX_ERROR)
                return _packed(_hosted(result, host, started), None, "", False)
            suite = Suite(Path(payload.run_dir), [payload.task], "")
            prepared = PreparedRun(
                suite, [payload.task], provider, 1, RunOptions(repeat=payload.repeat),
                registry, scratch, sandbox, agent, frozenset(payload.error_statuses))
            shared = SharedThrottle(throttle) if throttle is not None else None
            try:
                result = await run_task(payload.task, prepared, payload.number,
                                        throttle=shared)
            except BaseException as exc:  # a bug in evalctl or a plugin: this attempt's error
                if stops_the_run(exc):  # a plugin's SystemExit is its error, as elsewhere
                    raise
                result = _error(payload, f"internal error: {describe_crash(exc)}")
        _relocate(result, scratch, Path(payload.run_dir))
        return _packed(_hosted(result, host, started), scratch, payload.name, workspace)
    finally:
        close = getattr(provider, "aclose", None)
        if close is not None:
            with plugin_failure_ignored():
                await close()
        _remove(base)


def _remove(path: str | Path) -> None:
    """Remove a scratch tree of any depth or path length (rm walks by descriptor;
    shutil.rmtree recurses and raises RecursionError on a deep one)."""
    remove_tree(path)
    if os.path.lexists(path):
        import subprocess

        subprocess.run(["rm", "-rf", "--", os.fspath(path)], check=False, timeout=600,
                       stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL)


def _hosted(result: TaskResult, host: str, started: float) -> TaskResult:
    result.host = host
    result.duration = round(time.monotonic() - started, 4)
    return result


def _relocate(result: TaskResult, scratch: Path, run_dir: Path) -> None:
    """What the result says of the scratch run directory (a check's detail naming a file
    in the workspace) said of the run directory, where the files will be."""
    old, new = str(scratch), str(run_dir)
    result.error = result.error.replace(old, new) if result.error else result.error
    for check in result.checks:
        check.detail = check.detail.replace(old, new)


def receive(outcome: bytes, run_dir: Path, name: str, task_id: str, number: int
            ) -> TaskResult:
    """Unpack a packed outcome into `run_dir` as attempt `name` (its workspace, seed copy
    and ledger where a local attempt leaves them) and return its result. Blocking work:
    callers on an event loop run it in a thread. An outcome that is not one, or that is
    another attempt's, raises ValueError; a member that would land outside its place (a
    link out of the workspace, say) is left out."""
    staging = Path(tempfile.mkdtemp(prefix=f".incoming-{name[:40]}-", dir=run_dir))
    try:
        try:
            with tarfile.open(fileobj=io.BytesIO(outcome), mode="r:gz") as archive:
                for member in archive:
                    try:
                        archive.extract(member, staging, filter=_kept)
                    except OSError:
                        if member.name == RESULT:
                            raise
                        # One member that cannot land here (a path too long) is left
                        # out; the graded result does not depend on it.
        except (tarfile.TarError, OSError, EOFError) as exc:
            raise ValueError(f"the attempt's outcome is not readable: {exc}") from None
        try:
            data = json.loads((staging / RESULT).read_text(encoding="utf-8"))
            result = TaskResult.from_dict(data)
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise ValueError(f"the attempt's outcome has no readable result: {exc}") from None
        if (result.task_id, result.attempt) != (task_id, number):
            raise ValueError(f"the outcome is of {result.task_id} #{result.attempt}, not of "
                             f"{task_id} #{number}")
        places = {LEDGER: run_dir / ".ledgers" / f"{name}.jsonl",
                  CASSETTE: cassette_path(run_dir, name),
                  WORKSPACE: run_dir / name, SEED: run_dir / ".seed" / name}
        for part, target in places.items():
            if os.path.lexists(staging / part):
                target.parent.mkdir(parents=True, exist_ok=True)
                os.replace(staging / part, target)
        result.workspace = str(places[WORKSPACE])
        result.ledger = str(places[LEDGER])
        return result
    finally:
        _remove(staging)


def _kept(member: tarfile.TarInfo, destination: str) -> tarfile.TarInfo | None:
    """tarfile's `data` filter, member by member: an unsafe member (an absolute link, a
    link out of the workspace, a device) is skipped rather than failing the rest."""
    if member.name.split("/", 1)[0] not in (RESULT, LEDGER, CASSETTE, WORKSPACE, SEED):
        return None
    if member.issym() and not _inside_link(member.linkname):
        return None  # checked here too: the worker is not the only writer of an outcome
    try:
        return tarfile.data_filter(member, destination)
    except tarfile.FilterError:
        return None
