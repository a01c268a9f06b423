"""The run journal: every finished attempt, on disk the moment it finishes.

`RUN_DIR/journal.jsonl` is append-only JSON lines. The first is the run's header
(the suite, provider, versions, the options that decide results, and the attempts
planned); then one `attempt` line per finished attempt (`TaskResult.to_dict()`),
each flushed and fsynced before the attempt counts as done; `resume` lines when a
run is continued; and an `end` line when a session stops normally (why, and the
budget). A `kill -9`, an OOM kill or a power cut loses at most the attempts still
running: everything journaled survives, `evalctl report RUN_DIR` renders it, and
`evalctl run --resume RUN_DIR` runs what is missing.

Reports are rendered from the journal, never from anything else, so a report of a
finished run and one re-rendered later are the same. The latest line for an attempt
wins (a retried error is replaced, never counted twice); a torn last line (a crash
mid-write) is ignored, and any other unreadable line is named and skipped, its
attempt then counting as not run, with that (not a killed run) as its reason wherever
the line still names its attempt or the run ended normally.
"""

from __future__ import annotations

import asyncio
import errno
import json
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from evalctl._blocking import off_loop
from evalctl._errors import UsageError
from evalctl._report.results import (
    AGENT,
    BUDGET,
    COST,
    ERROR,
    EXECUTOR,
    FLAG,
    MAYBE_TEXT,
    NOT_RUN,
    PATH_TEXT,
    PLUGINS,
    REGRADE_OF,
    SANDBOX,
    TABLE,
    TASK_RESULT_SCHEMA,
    TEXT,
    TEXTS,
    USAGE,
    RunResult,
    TaskResult,
    malformed,
    read_plugins,
)
from evalctl._schema_check import SchemaCheck
from evalctl._text import json_line, parse_json

JOURNAL_NAME = "journal.jsonl"
JOURNAL_FORMAT = "evalctl-journal/1"
KILLED = ("the run stopped before this attempt finished (killed, or still running); "
          "continue it with evalctl run --resume {run_dir}")
UNREADABLE = ("the attempt finished, but its journal line ({line}) could not be read; "
              "evalctl run --resume {run_dir} runs it again")
MAYBE_UNREADABLE = " (or it finished and its journal line is one that could not be read: {lines})"
# Which attempt a damaged `attempt` line was of, when its start survived: the journal
# writes `{"kind": "attempt", "at": ..., "result": {"id": ..., "attempt": N, ...`.
_ATTEMPT_OF = re.compile(rb'"result": \{"id": ("(?:[^"\\]|\\.)*"), "attempt": (\d+)[,}]')


# The most attempts of one task a run plans: `evalctl run --repeat`'s most.
MOST_REPEATS = 10_000
_REPEAT = {"type": "integer", "minimum": 1, "maximum": MOST_REPEATS}
_MAYBE_TEXTS = {"type": ["array", "null"], "items": TEXT}
# What each kind of line holds, as evalctl writes it (`_header` in the runner and the
# regrade, `Journal`): checked as each line is read, so that nothing reading the journal
# afterwards (a resume, every report) meets a field of another type. Fields that older
# versions did not write may be absent; a resume's options are the run's identity.
_CONCURRENCY = {"type": ["integer", "null"], "minimum": 1}
_OPTIONS = {"type": "object", "properties": {
    "provider": TEXT, "model": MAYBE_TEXT, "provider_options": TABLE, "only": _MAYBE_TEXTS,
    "tags": _MAYBE_TEXTS, "repeat": _REPEAT, "sandbox": MAYBE_TEXT, "sandbox_options": TABLE,
    "config_sandbox": MAYBE_TEXT, "config_sandbox_options": TABLE, "agent": MAYBE_TEXT,
    "agent_options": TABLE, "config_agent": MAYBE_TEXT, "config_agent_options": TABLE,
    "config_agents": TABLE, "max_cost": {"type": ["number", "null"]},
    "max_tokens": {"type": ["integer", "null"]}, "concurrency": _CONCURRENCY},
    "required": ["provider", "model", "provider_options", "only", "tags", "repeat", "sandbox",
                 "sandbox_options", "config_sandbox", "config_sandbox_options"]}
_HEADER = SchemaCheck({"type": "object", "properties": {
    "started_at": TEXT,
    "suite": {"type": "object", "properties": {
        "path": PATH_TEXT, "absolute_path": PATH_TEXT, "name": TEXT, "sha256": TEXT}},
    "provider": TEXT, "model": MAYBE_TEXT, "evalctl_version": TEXT,
    "plugins": {**PLUGINS, "type": "object"},
    "run_directory": PATH_TEXT, "repeat": _REPEAT, "rate_names": TEXTS,
    "sandbox": {**SANDBOX, "type": "object"}, "agent": {**AGENT, "type": "object"},
    "executor": EXECUTOR, "options": _OPTIONS,
    "tasks": {"type": "array", "items": {"type": "object", "required": ["id"],
                                         "properties": {"id": TEXT, "tags": TEXTS}}},
    "regrade_of": REGRADE_OF}})
_RECORDS = {
    "attempt": SchemaCheck({"type": "object", "required": ["result"],
                            "properties": {"at": TEXT, "result": TASK_RESULT_SCHEMA}}),
    "retired": SchemaCheck({"type": "object", "properties": {
        "at": TEXT, "name": TEXT, "into": TEXT, "usage": USAGE, "cost": COST}}),
    "resume": SchemaCheck({"type": "object", "properties": {
        "at": TEXT, "retry_errors": FLAG, "max_cost": COST,
        "max_tokens": {"type": ["integer", "null"]}, "executor": EXECUTOR,
        "concurrency": _CONCURRENCY}}),
    "end": SchemaCheck({"type": "object", "properties": {
        "at": TEXT, "interrupted": FLAG, "reason": MAYBE_TEXT, "budget": BUDGET}}),
}


def now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def journal_path(run_dir: str | os.PathLike[str]) -> Path:
    return Path(run_dir) / JOURNAL_NAME


def attempt_name(task_id: str, attempt: int, repeat: int) -> str:
    """The workspace (and ledger) name of one attempt: the task id, or id@attempt."""
    return task_id if repeat == 1 else f"{task_id}@{attempt}"


@dataclass
class JournalContents:
    """What a journal holds: the header, the latest result per attempt, the session
    records, and the problems met reading it."""

    path: Path
    header: dict[str, Any]
    results: dict[tuple[str, int], TaskResult] = field(default_factory=dict)
    sessions: list[dict[str, Any]] = field(default_factory=list)  # resume and end lines
    problems: list[str] = field(default_factory=list)
    # The lines that could not be read (path:number): by the attempt each was of where
    # that can still be told, and those of no attempt known.
    unreadable: dict[tuple[str, int], str] = field(default_factory=dict)
    unreadable_lines: list[str] = field(default_factory=list)
    good_bytes: int = 0  # the length of the journal up to its last whole line
    read_bytes: int = 0  # its whole length when it was read (a torn last line included)
    # Everything the run spent so far, retried attempts and retired ones included:
    # priced USD, tokens, and whether any call was unpriced.
    spent_cost: float = 0.0
    spent_tokens: int = 0
    unpriced: bool = False

    def add_spend(self, usage: Mapping[str, Any] | None, cost: float | None) -> None:
        if usage:
            self.spent_tokens += total_tokens(usage)
        if cost is None:
            self.unpriced = self.unpriced or bool(usage)
        else:
            self.spent_cost += float(cost)

    def add_result_spend(self, result: TaskResult) -> None:
        self.add_spend(result.usage.to_dict(), result.cost)
        for check in result.checks:
            if check.usage is not None:
                self.add_spend(check.usage.to_dict(), check.cost)

    @property
    def run_dir(self) -> Path:
        return self.path.parent

    @property
    def repeat(self) -> int:
        return int(self.header.get("repeat", 1))

    def planned(self) -> list[tuple[str, int, tuple[str, ...]]]:
        """(task id, attempt, tags) of every attempt the run planned, in order."""
        return [(str(task["id"]), attempt, tuple(task.get("tags", ())))
                for task in self.header.get("tasks", [])
                for attempt in range(1, self.repeat + 1)]

    @property
    def concurrency(self) -> int | None:
        """The --concurrency (or the config's) the run's latest session was given, if any:
        a resume keeps it unless given another (a live run's rate limit depends on it)."""
        for session in reversed(self.sessions):
            if session.get("kind") == "resume" and session.get("concurrency") is not None:
                return int(session["concurrency"])
        given = self.header.get("options", {}).get("concurrency")
        return None if given is None else int(given)

    def last_end(self) -> dict[str, Any] | None:
        """The `end` line of the last session, if it ended normally."""
        if self.sessions and self.sessions[-1].get("kind") == "end":
            return self.sessions[-1]
        return None


def total_tokens(usage: Mapping[str, int]) -> int:
    """Every token a model processed for a call: input, output, cache reads and writes."""
    return sum(int(usage.get(k, 0)) for k in ("input_tokens", "output_tokens",
                                              "cache_read_tokens", "cache_write_tokens"))


def read_journal(run_dir: str | os.PathLike[str]) -> JournalContents:
    """The journal of `run_dir`, or a UsageError (exit 2) saying why there is none."""
    path = journal_path(run_dir)
    try:
        data = _read_regular(path)
    except FileNotFoundError:
        raise UsageError(f"{run_dir}: no {JOURNAL_NAME}; not a run directory of evalctl run "
                         "(it is the workspaces-<time> directory under --out)") from None
    except OSError as exc:
        raise UsageError(f"{path}: cannot read: {exc.strerror or exc}") from None
    lines = data.split(b"\n")
    torn = lines.pop()  # after the last newline: empty, or a line cut by a crash
    problems = [f"{path}:{len(lines) + 1}: a line cut short (the run stopped while writing "
                "it); ignored"] if torn.strip() else []
    good_bytes = len(data) - len(torn)
    header: dict[str, Any] | None = None
    contents = JournalContents(path, {}, problems=problems, good_bytes=good_bytes,
                               read_bytes=len(data))
    for number, raw in enumerate(lines, start=1):
        if not raw.strip():
            continue
        try:
            record = parse_json(raw)
            kind = record["kind"]
            if header is None:
                if kind != "run" or record.get("format") != JOURNAL_FORMAT:
                    raise ValueError(f"expected a run header of format {JOURNAL_FORMAT}")
                problem = malformed(_HEADER, record)
                if problem is not None:
                    raise UsageError(f"{path}:{number}: a journal header with a malformed "
                                     f"field ({problem}); the run cannot be read or resumed")
                header = record
                continue
            problem = malformed(_RECORDS[kind], record) if kind in _RECORDS else None
            if problem is not None:
                raise ValueError(f"a malformed field: {problem}")
            if kind == "attempt":
                result = TaskResult.from_dict(record["result"])
                contents.results[(result.task_id, result.attempt)] = result
                contents.add_result_spend(result)
            elif kind == "retired":  # an unfinished attempt's files, moved aside to rerun it
                contents.add_spend(record.get("usage"), record.get("cost"))
            elif kind in ("resume", "end"):
                contents.sessions.append(record)
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            if header is None:
                raise UsageError(f"{path}:{number}: not an evalctl journal ({exc})") from None
            contents.problems.append(f"{path}:{number}: unreadable line skipped "
                                     f"({type(exc).__name__}: {exc}); its attempt counts as "
                                     "not run")
            attempt = _attempt_of(raw)
            if attempt is None:
                contents.unreadable_lines.append(f"{path}:{number}")
            else:
                contents.unreadable[attempt] = f"{path}:{number}"
    if header is None:
        raise UsageError(f"{path}: empty journal; the run stopped before it started")
    contents.header = header
    return contents


def _open_regular(path: Path, flags: int, mode: int = 0o666) -> int:
    """A descriptor for `path`, which must be a regular file. Opened non-blocking, so
    a FIFO (or a device) at the name is refused rather than waited on: a tester's
    `journal.jsonl` that was a FIFO left `run --resume` hanging for ever. The
    descriptor is blocking again when it is returned."""
    import fcntl
    import stat

    descriptor = os.open(path, flags | os.O_NONBLOCK | os.O_CLOEXEC, mode)
    try:
        if not stat.S_ISREG(os.fstat(descriptor).st_mode):
            raise OSError(errno.EINVAL, "not a regular file", str(path))
        fcntl.fcntl(descriptor, fcntl.F_SETFL,
                    fcntl.fcntl(descriptor, fcntl.F_GETFL) & ~os.O_NONBLOCK)
    except BaseException:
        os.close(descriptor)
        raise
    return descriptor


def _read_regular(path: Path) -> bytes:
    with os.fdopen(_open_regular(path, os.O_RDONLY), "rb") as handle:
        return handle.read()


def _attempt_of(raw: bytes) -> tuple[str, int] | None:
    """(task id, attempt) of a damaged attempt line whose start is whole, else None."""
    found = _ATTEMPT_OF.search(raw)
    if found is None:
        return None
    try:
        task_id = parse_json(found[1])
    except ValueError:
        return None
    return (task_id, int(found[2])) if isinstance(task_id, str) else None


def _not_run_reason(contents: JournalContents, key: tuple[str, int], stop_reason: str,
                    ended: bool) -> tuple[str, bool]:
    """Why a planned attempt has no result, and whether it is known to have finished:
    its line could not be read (named, or one of the unreadable lines of no known attempt
    when the run ended normally, so none was left running); else the run stopped before
    it finished, unless a line that could not be read was its."""
    run_dir = contents.run_dir
    if key in contents.unreadable:
        return UNREADABLE.format(line=contents.unreadable[key], run_dir=run_dir), True
    if not contents.unreadable_lines:
        return stop_reason, False
    lines = ", ".join(contents.unreadable_lines)
    if ended:
        return UNREADABLE.format(line=f"one of {lines}" if len(contents.unreadable_lines) > 1
                                 else lines, run_dir=run_dir), True
    return stop_reason + MAYBE_UNREADABLE.format(lines=lines), False


def build_run(contents: JournalContents, *, interrupted: bool | None = None,
              stop_reason: str | None = None, budget: Mapping[str, Any] | None = None,
              finished_at: str | None = None) -> RunResult:
    """The RunResult a journal describes: every planned attempt exactly once, its latest
    journaled result, or `not_run` with the reason it did not run.

    The session being rendered may say why it stopped (`stop_reason`, `interrupted`,
    `budget`); otherwise the journal's last `end` line says, and a journal without
    one is a run that was killed (or is still going)."""
    header = contents.header
    run_dir = Path(header.get("run_directory") or contents.run_dir)
    end = contents.last_end() or {}
    if interrupted is None:
        interrupted = bool(end.get("interrupted", True))
    # Ended normally and whole: an attempt with no result was not left running.
    ended = stop_reason is None and bool(end) and not end.get("interrupted") and \
        not end.get("reason")
    stop_reason = stop_reason or end.get("reason") or \
        KILLED.format(run_dir=contents.run_dir)
    if budget is None:
        budget = end.get("budget")
    repeat = contents.repeat
    tasks: list[TaskResult] = []
    for task_id, attempt, tags in contents.planned():
        result = contents.results.get((task_id, attempt))
        if result is not None:
            tasks.append(result)
            continue
        name = attempt_name(task_id, attempt, repeat)
        started = (run_dir / name).is_dir()
        reason, finished = _not_run_reason(contents, (task_id, attempt), stop_reason, ended)
        # One that finished, its line unreadable, was not aborted: how it ended is unknown.
        tasks.append(TaskResult(
            task_id, NOT_RUN, exit_status="aborted" if started and not finished else None,
            error=reason,
            tags=tags, attempt=attempt, workspace=str(run_dir / name) if started else None,
            ledger=str(run_dir / ".ledgers" / f"{name}.jsonl") if started else None))
    suite = header.get("suite", {})
    return RunResult(
        suite_path=str(suite.get("path", "")), suite_name=str(suite.get("name", "")),
        suite_sha256=str(suite.get("sha256", "")), provider=str(header.get("provider", "")),
        model=header.get("model"), started_at=str(header.get("started_at", "")),
        finished_at=finished_at or end.get("at") or _last_time(contents),
        evalctl_version=str(header.get("evalctl_version", "")),
        plugin_versions=read_plugins(header.get("plugins"))[0],
        plugin_distributions=read_plugins(header.get("plugins"))[1], tasks=tasks,
        interrupted=interrupted, run_directory=str(run_dir), repeat=repeat,
        rate_names=tuple(header.get("rate_names", ())),
        sandbox=dict(header.get("sandbox", {})),
        agent=dict(header.get("agent") or {}),
        executor=dict(header.get("executor") or {}),
        budget=dict(budget) if budget else None,
        regrade_of=dict(header["regrade_of"]) if header.get("regrade_of") else None,
    )


def _last_time(contents: JournalContents) -> str:
    times = [s.get("at", "") for s in contents.sessions] + \
        [contents.header.get("started_at", "")]
    return max(t for t in times if isinstance(t, str))


class Journal:
    """The journal of a run in progress: appends, each durable before it returns.

    Several attempts finishing together share one fsync (group commit), which runs in
    a thread so the event loop never waits on the disk."""

    def __init__(self, path: Path, contents: JournalContents):
        self.path = path
        self.contents = contents
        try:
            descriptor = _open_regular(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
        except OSError as exc:  # a tester's resume of a run on a read-only file system
            raise UsageError(_unwritable(path.parent, exc)) from None
        self._handle = os.fdopen(descriptor, "ab")
        try:
            _lock(self._handle.fileno(), path.parent)
        except BaseException:
            self._handle.close()
            raise
        self._written = 0
        self._synced = 0
        self._sync_lock = asyncio.Lock()
        # Why the journal stopped being durable (a full disk, say), if it did: the run
        # goes on and reports from memory, and says that a resume would not see it all.
        self.failure: str | None = None

    @classmethod
    def create(cls, run_dir: Path, header: Mapping[str, Any]) -> Journal:
        """A new journal holding `header`, durable (and its directory entry too)."""
        path = journal_path(run_dir)
        record = {"kind": "run", "format": JOURNAL_FORMAT, **header}
        journal = cls(path, JournalContents(path, dict(record)))
        journal._append(record)
        journal._fsync()
        _fsync_directory(run_dir)
        return journal

    @classmethod
    def reopen(cls, contents: JournalContents, session: Mapping[str, Any]) -> Journal:
        """The journal of a run being resumed: a torn last line is cut off first, so
        the next line starts clean, then `session` (a resume line) is appended."""
        journal = cls(contents.path, contents)  # locked before anything is changed
        descriptor = journal._handle.fileno()
        if os.fstat(descriptor).st_size != contents.read_bytes:
            # Another session wrote to it between the reading and the lock (it ended
            # meanwhile): resuming from what was read would cut its lines off.
            journal.close()
            raise UsageError(f"{contents.run_dir} changed while this resume was starting "
                             "(another evalctl was running it); resume it again")
        os.ftruncate(descriptor, contents.good_bytes)
        record = {"kind": "resume", "at": now(), **session}
        journal._append(record)
        journal._fsync()
        contents.sessions.append(record)
        return journal

    def _append(self, record: Mapping[str, Any]) -> None:
        if self.failure is not None:
            return
        try:
            self._handle.write((json_line(record) + "\n").encode("utf-8"))
            self._handle.flush()  # in the OS now: a killed evalctl loses nothing from here
        except OSError as exc:
            self._failed(exc)
            return
        self._written += 1

    def _fsync(self) -> None:
        if self.failure is not None:
            return
        try:
            os.fsync(self._handle.fileno())
        except OSError as exc:
            self._failed(exc)
        self._synced = self._written

    def _failed(self, exc: OSError) -> None:
        self.failure = f"cannot write {self.path}: {exc.strerror or exc}"

    def retired(self, name: str, into: str, usage: Mapping[str, int], cost: float | None
                ) -> None:
        """Note that an attempt's leftovers were moved aside to run it again, with what
        its ledger says it had spent (so the budget still counts it)."""
        self._append({"kind": "retired", "at": now(), "name": name, "into": into,
                      "usage": dict(usage), "cost": cost})
        self.contents.add_spend(usage, cost)

    async def record(self, result: TaskResult) -> None:
        """Append a finished attempt and return once it is on disk (fsync)."""
        self.contents.results[(result.task_id, result.attempt)] = result
        self._append({"kind": "attempt", "at": now(), "result": result.to_dict()})
        mine = self._written
        async with self._sync_lock:
            if self._synced >= mine or self.failure is not None:
                return  # an fsync that started after this line was written covered it
            upto = self._written
            try:
                await off_loop(os.fsync, self._handle.fileno())
            except OSError as exc:
                self._failed(exc)
            self._synced = max(self._synced, upto)

    def end(self, *, interrupted: bool, reason: str | None,
            budget: Mapping[str, Any] | None) -> None:
        record = {"kind": "end", "at": now(), "interrupted": interrupted, "reason": reason,
                  "budget": dict(budget) if budget else None}
        self._append(record)
        self._fsync()
        self.contents.sessions.append(record)

    def close(self) -> None:
        if not self._handle.closed:
            try:
                self._handle.close()
            except OSError as exc:
                self._failed(exc)


def _lock(descriptor: int, run_dir: Path) -> None:
    """Hold the run for this session: one evalctl at a time runs or resumes a run
    directory. Found by a newcomer: a resume started while the run still went moved its
    live attempts' workspaces aside, graded a correct agent's work as failed, and ran
    every attempt twice. The lock is the kernel's (flock), so it goes with the process,
    however it ends; a file system without locks runs unlocked, as before."""
    import fcntl

    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        raise UsageError(_in_use(run_dir)) from None
    except OSError:
        pass


def _in_use(run_dir: str | os.PathLike[str]) -> str:
    return (f"{run_dir} is being run by another evalctl now (its journal is locked): wait "
            f"for that run to end, or stop it (Ctrl-C), then evalctl run --resume {run_dir}")


def _unwritable(run_dir: Path, exc: OSError) -> str:
    return (f"{run_dir}: cannot continue this run: its journal cannot be written "
            f"({exc.strerror or exc}); its reports can still be written elsewhere: "
            f"evalctl report {run_dir} --out DIR")


def check_resumable(run_dir: str | os.PathLike[str]) -> None:
    """A UsageError (exit 2) when `run_dir` cannot be continued here: another evalctl
    runs it now, or its journal, or the directory, cannot be written (a read-only file
    system, another user's run). Asked before a resume prepares or runs anything; the
    journal is opened for appending, and nothing is written. (The resume's own lock,
    when it starts, is what decides.)"""
    if journal_in_use(run_dir):
        raise UsageError(_in_use(run_dir))
    path = journal_path(run_dir)
    try:
        os.close(_open_regular(path, os.O_WRONLY | os.O_APPEND))
        if not os.access(run_dir, os.W_OK | os.X_OK):
            raise OSError(errno.EACCES, os.strerror(errno.EACCES), str(run_dir))
    except OSError as exc:
        raise UsageError(_unwritable(Path(run_dir), exc)) from None


def journal_in_use(run_dir: str | os.PathLike[str]) -> bool:
    """Whether another evalctl holds the run now (asked before a resume prepares
    anything; the resume's own lock is what decides)."""
    import fcntl

    try:  # not a FIFO: its opening would wait for a writer
        descriptor = _open_regular(journal_path(run_dir), os.O_RDONLY)
    except OSError:
        return False
    try:
        fcntl.flock(descriptor, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    except OSError:
        return False
    finally:
        os.close(descriptor)  # a lock it took goes with it
    return False


def _fsync_directory(directory: Path) -> None:
    """Make a new file's name durable, not only its content (POSIX needs both)."""
    try:
        descriptor = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return
    try:
        os.fsync(descriptor)
    except OSError:
        pass
    finally:
        os.close(descriptor)


def attempts_to_run(contents: JournalContents, retry_errors: bool
                    ) -> list[tuple[str, int]]:
    """(task id, attempt) of the planned attempts a resume runs: those with no
    journaled result, and with `retry_errors` those whose result is an error."""
    out = []
    for task_id, attempt, _ in contents.planned():
        result = contents.results.get((task_id, attempt))
        if result is None or (retry_errors and result.status == ERROR):
            out.append((task_id, attempt))
    return out


def differences(recorded: Mapping[str, Any], current: Mapping[str, Any],
                keys: Iterable[str]) -> list[str]:
    """One line per key whose value differs between the journal and now."""
    lines = []
    for key in keys:
        before, after = recorded.get(key), current.get(key)
        if before != after:
            lines.append(f"{key}: {json.dumps(before, sort_keys=True, default=str)} -> "
                         f"{json.dumps(after, sort_keys=True, default=str)}")
    return lines
