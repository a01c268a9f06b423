"""Grading one attempt's workspace: the integrity checks between the agent and the
graders, then every check of the task in a fresh sandbox, then what a check that ran the
agent's code may have changed. One path for `evalctl run` and `evalctl regrade`, so a
regrade means what the run's grading meant.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import inspect
import itertools
import os
from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

from evalctl._agent.ledger import Ledger
from evalctl._blocking import off_loop
from evalctl._errors import GraderUnavailable, UsageError, describe_crash, stops_the_run
from evalctl._files import empty_directory, small_tree, walk_files
from evalctl._plugin.registry import Registry
from evalctl._plugin.specs import CheckResult, GraderSpec
from evalctl._plugin.types import AgentResult, Sandbox
from evalctl._report.results import ERROR, FAILED, PASSED, CheckOutcome
from evalctl._run.integrity import (
    CACHE_NAMES,
    detach_protected_links,
    protected_changes,
    protected_changes_during_grading,
    protected_snapshot,
    read_only_paths,
    remove_bytecode_caches,
    restore_seed,
    write_verify_files,
)
from evalctl._sources.git import SeedOrigin, neutralise_repository_config, seed_origin
from evalctl._sources.model import Source
from evalctl._suite import provided
from evalctl._suite.model import Task
from evalctl._text import escape_text, truncate
from evalctl._workspace import Workspace, attempt_paths, grading_state

T = TypeVar("T")


class GradingSandboxFailed(Exception):
    """The grading sandbox could not start (the cause is chained): the attempt is an
    error, not a failure."""


async def grade(check: Mapping[str, Any], spec: GraderSpec, workspace: Path,
                result: AgentResult, *, before: Callable[[], object] | None = None,
                after: Callable[[], object] | None = None,
                ledger: Path | None = None) -> CheckOutcome:
    """One check; a grader that raises is a failed check with the exception as detail.
    `before` and `after` (blocking file-system work) run first and last, in the same trip
    off the event loop as a synchronous grader (`after` only with one). A crash's
    traceback is appended to `ledger` (the attempt's), as a `grader_crashed` event, and
    the detail says so."""
    watched = _Watched(result.sandbox) if result.sandbox is not None else None
    if watched is not None:  # a copy: the attempt's own result is left as it is
        result = dataclasses.replace(result, sandbox=watched)
    try:
        if inspect.iscoroutinefunction(spec.grade):
            if before is not None:
                await off_loop(before)
            answer = await spec.grade(dict(check), workspace, result)
        else:
            # A grader is plugin code of any speed: a slow one makes the pool grow, so
            # it never holds other attempts' file work and starts for long.
            answer = await off_loop(_around, before, after, spec.grade,
                                    dict(check), workspace, result)
        if not isinstance(answer, CheckResult):
            if inspect.iscoroutine(answer):
                answer.close()  # never to run: no warning of it at exit
            raise _BadAnswer(f"grade() returned {type(answer).__name__}, expected "
                             "evalctl.CheckResult")
        if watched is not None and watched.unawaited():
            # Found by a newcomer: a synchronous grader's CheckResult(bool(ran), ...) over
            # a command that never ran passed.
            raise _BadAnswer("result.sandbox.run(...) was called without `await`, so its "
                             "command never ran (a grader that runs commands is `async def` "
                             "and awaits them)")
    except GraderUnavailable as exc:  # not the agent's doing: an error that says the fix
        return CheckOutcome(spec.name, spec.kind, False,
                            escape_text(f"cannot run here: {exc}"), error=True, rate=spec.rate,
                            talk_only=spec.talk_only)
    except UsageError as exc:  # configuration, not a bug: say so, without alarm
        return CheckOutcome(spec.name, spec.kind, False,
                            escape_text(f"the {spec.name} check cannot run: {exc}"),
                            error=True, rate=spec.rate, talk_only=spec.talk_only)
    except BaseException as exc:
        # SystemExit too (a helper's sys.exit(), an argparse main()): a crash like any
        # other, never the end of the run (found by a newcomer: it ended evalctl with
        # exit 0, no reports). Only the run's own stop goes on up.
        if isinstance(exc, _Raised):
            exc = exc.raised
        elif stops_the_run(exc):
            raise
        said = f"grader crashed: {describe_crash(exc)}" if not isinstance(exc, _BadAnswer) \
            else f"grader crashed: TypeError: {exc}"
        if ledger is not None and not isinstance(exc, _BadAnswer):
            # Found by a newcomer: only "grader crashed: KeyError: 'min'" survived, and the
            # plugin's author had no line to look at. The ledger is the attempt's audit
            # trail, kept with the run (never in the sandbox's reach).
            await off_loop(_record_crash, ledger, spec.name, said, exc)
            said += (f" (its traceback: the grader_crashed event of the attempt's ledger, "
                     f"{ledger.parent.name}/{ledger.name})")
        return CheckOutcome(spec.name, spec.kind, False, escape_text(said),
                            error=True, rate=spec.rate, talk_only=spec.talk_only)
    finally:
        if watched is not None:
            watched.unawaited()  # those of a grader that raised are closed too
    # Whatever text a grader returns (a file name that is not UTF-8, a control
    # character from a test's output) is kept, escaped, so every reporter can show it.
    # CheckResult refuses anything but True or False for its flags; read as such all
    # the same (a subclass could skip its check): only True passes.
    return CheckOutcome(spec.name, spec.kind, answer.passed is True,
                        escape_text(str(answer.detail)),
                        usage=answer.usage, cost=answer.cost, rate=spec.rate,
                        suspected_gaming=answer.suspected_gaming is True,
                        rated=answer.rated is not False, talk_only=spec.talk_only)


# A crash's traceback in the ledger: its frames, the last ones kept when there are many
# (a recursion's thousand frames), cut to this many characters, head and tail.
CRASH_TRACEBACK_LIMIT = 20_000


def _record_crash(path: Path, grader: str, said: str, exc: BaseException) -> None:
    """Append a grader's crash, with its traceback, to the attempt's ledger (closed with
    the agent: opened again, numbering on)."""
    import traceback

    trace = "".join(traceback.format_exception(exc, limit=-100))
    ledger = Ledger(path)
    ledger.append("grader_crashed", grader=grader, error=said,
                  traceback=truncate(trace, CRASH_TRACEBACK_LIMIT))
    ledger.close()


class _Watched:
    """The graders' sandbox as a check gets it: every coroutine its `run` makes is
    kept, so one never awaited (a synchronous grader cannot await; an async one may
    forget to) is found when the check ends, and closed: its command never ran, and
    nothing the grader made of it is an answer. Anything else is the sandbox's own."""

    def __init__(self, sandbox: Sandbox):
        self._sandbox = sandbox
        self._made: list[Any] = []

    def run(self, *args: Any, **kwargs: Any) -> Any:
        made = self._sandbox.run(*args, **kwargs)
        if inspect.iscoroutine(made):
            if len(self._made) >= 64:  # a check of many commands keeps only those to watch
                self._made = [m for m in self._made
                              if inspect.getcoroutinestate(m) == inspect.CORO_CREATED]
            self._made.append(made)
        return made

    async def close(self) -> None:
        await self._sandbox.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._sandbox, name)

    def unawaited(self) -> bool:
        """Whether a coroutine `run` made was never started; each such is closed."""
        never = [made for made in self._made
                 if inspect.getcoroutinestate(made) == inspect.CORO_CREATED]
        for made in never:
            made.close()
        self._made = [made for made in self._made if made not in never]
        return bool(never)


async def grade_attempt(task: Task, workspace: Workspace, agent: AgentResult,
                        verify: Mapping[str, str | None], registry: Registry,
                        open_grading: Callable[[tuple[Path, Path], tuple[str, ...]],
                                               Awaitable[Sandbox]], *,
                        skip_kinds: Collection[str] = (),
                        carried: Sequence[CheckOutcome] = (),
                        carry_every: bool = False) -> list[CheckOutcome]:
    """Every check of `task` on `workspace`, after the integrity checks (protected files
    against `agent.files_changed`, the seed copy, the verify files written now), in the
    sandbox `open_grading(state, read_only)` opens with the graders' own HOME and TMPDIR
    (made here) and the protected files read-only (GradingSandboxFailed when it cannot
    open). Checks whose grader is of a kind in
    `skip_kinds` are left out (a regrade's judges). Checks of the workspace as the agent
    left it (`GraderSpec.as_left_by_agent`) go first, before the hidden verify files are
    written and before that sandbox opens (`result.sandbox` is None for them); the
    report keeps the task's order. `carried`: outcomes from an earlier grading, taken in
    order by type instead of grading again (a regrade's), for those checks, and for
    every check with `carry_every` (a copy that is not as the agent left it)."""
    specs = [(check, registry.graders[check["type"]]) for check in task.checks]
    graded = [(check, spec) for check, spec in specs if spec.kind not in skip_kinds]
    as_left = [index for index, (_, spec) in enumerate(graded) if spec.as_left_by_agent]
    outcomes: dict[int, CheckOutcome] = {}
    # The walks between the agent and the graders read a small workspace on the loop
    # (nothing changes it meanwhile: the agent's sandbox is closed). What writes (verify
    # files, bytecode caches to remove) goes off it: on ext4 a create or a removal can
    # wait for the journal to commit.
    small = task.small_seed() and small_tree(workspace.root, without=CACHE_NAMES)
    # With checks of the workspace as the agent left it, the hidden files are written
    # only after them (found by an attacker round: grounding counted a hidden test the
    # agent's summary named, and never wrote, as a file of the agent's).
    hidden_now = verify if not as_left else {}
    integrity, before_grading, state = \
        _before_grading(task, workspace, agent, hidden_now, sweep=False) \
        if small and not hidden_now else \
        await off_loop(_before_grading, task, workspace, agent, hidden_now)
    earlier: dict[str, list[CheckOutcome]] = {}
    for outcome in carried:
        earlier.setdefault(outcome.type, []).append(outcome)
    for index in as_left:  # they read files in evalctl's own process: no cache to sweep
        check, spec = graded[index]
        outcomes[index] = earlier[spec.name].pop(0) if earlier.get(spec.name) else \
            await grade(check, spec, workspace.root, agent, ledger=workspace.ledger_path)
    if as_left and verify:
        written, before_grading = await off_loop(_write_hidden_files, task, workspace,
                                                 verify)
        integrity += written
    try:
        written_paths = [path for path, content in verify.items() if content is not None]
        agent.sandbox = await open_grading(state, read_only_paths(task, before_grading,
                                                                  written_paths))
    except BaseException as exc:  # a sandbox plugin's SystemExit too
        if stops_the_run(exc):
            raise
        raise GradingSandboxFailed(str(exc)) from exc
    try:
        checks = list(integrity)
        # Every check starts with the graders' HOME and TMPDIR as the sandbox opened it
        # (found by an outside tester: the hidden tests imported the agent's module,
        # which wrote ~/.npmrc there, and the next check, `npm test`, ran the script it
        # named and passed). What is in it now is the sandbox's own (bwrap's mount
        # points): kept; anything else is removed before a check that follows one that
        # ran, found by one scandir on the loop, removed off it.
        home = state[0]
        kept = _names(home) or frozenset()
        ran = False
        # The bytecode caches are swept again before every check (one that ran the
        # agent's code may have left a forged cache for the next): before the first by
        # _before_grading, after a synchronous grader in its own trip, else before.
        clean = functools.partial(remove_bytecode_caches, workspace.root)
        cleaned = True
        rest = [index for index in range(len(graded)) if index not in outcomes]
        for step, index in enumerate(rest):
            check, spec = graded[index]
            if carry_every and earlier.get(spec.name):
                outcomes[index] = earlier[spec.name].pop(0)
                continue
            then = clean if step + 1 < len(rest) and \
                not inspect.iscoroutinefunction(spec.grade) else None
            # A small workspace with no cache to remove needs no sweep (nor a trip).
            swept = cleaned or (small and small_tree(workspace.root, without=CACHE_NAMES))
            unprovided = await off_loop(_unprovided, task, check, spec, workspace, agent) \
                if spec.named_paths is not None and task.named_paths else None
            if unprovided is not None:  # nothing ran: the workspace is as it was
                outcomes[index] = unprovided
                continue
            stale = ran and _stale(home, kept)
            outcomes[index] = await grade(
                check, spec, workspace.root, agent, after=then, ledger=workspace.ledger_path,
                before=_both(None if swept else clean,
                             functools.partial(_fresh_home, home, kept) if stale else None))
            cleaned = then is not None
            ran = True
        checks += [outcomes[index] for index in range(len(graded))]
    finally:
        await agent.sandbox.close()
    late = protected_changes_during_grading(
        task, before_grading,
        protected_snapshot(task, workspace.root) if small and small_tree(workspace.root)
        else await off_loop(protected_snapshot, task, workspace.root)) \
        if task.protected else None
    if late is not None:
        checks.append(late)
    return checks


# Workspace files read at most for a did-you-mean when a named path is missing.
NEAREST_FROM = 20_000


def _unprovided(task: Task, check: Mapping[str, Any], spec: GraderSpec,
                workspace: Workspace, agent: AgentResult) -> CheckOutcome | None:
    """An error in place of the check when a path it names (`GraderSpec.named_paths`)
    was provided by nothing: not in the workspace nor the seed (setup's work included),
    not created or deleted by the agent, and not asked of it by the prompt (found by a
    newcomer: a typo in `tests:` failed the attempt of an agent that had fixed the bug).
    A path that is the agent's to write (`provided.agents_job`: the prompt names it) is
    left to its grader, whose failure says so. Called only for a check whose grader names
    paths (`spec.named_paths`), of a task naming some."""
    index = next((i for i, written in enumerate(task.checks) if written is check), None)
    missing = [(path, key) for at, path, _, key in task.named_paths
               if at == index and not provided.agents_job(task, path)
               and provided.missing_in_workspace(path, workspace.root, task, workspace.seed,
                                                 agent.files_changed)]
    if not missing or agent.files_changed_omitted:
        return None
    present = list(itertools.islice(walk_files(workspace.root), NEAREST_FROM))
    said = []
    for path, key in missing:
        near = provided.nearest(path, present)
        said.append(f"{f'`{key}:` names ' if key else ''}'{path}'"
                    f"{f' (did you mean {near!r}?)' if near else ''}")
    return CheckOutcome(spec.name, spec.kind, False, escape_text(
        f"cannot run here: {'; '.join(said)}, which nothing gave the workspace: not the "
        "task (source, files, verify_files, verify_patch), not its setup, and the agent, "
        "whose prompt does not ask for it, did not write it. A mistake of the suite's, not "
        "the agent's failure: fix the name, or name the file in the prompt if the agent is "
        "to write it"), error=True, rate=spec.rate, talk_only=spec.talk_only)


def _write_hidden_files(task: Task, workspace: Workspace, verify: Mapping[str, str | None]
                        ) -> tuple[list[CheckOutcome], dict[str, str]]:
    """The verify files, written after the checks of the workspace as the agent left it,
    and the protected files' hashes taken again (a verify file may be one of them)."""
    written = write_verify_files(verify, workspace)
    protected = _protected_before_the_checks(task, workspace)
    return [written] if written is not None else [], protected


def _before_grading(task: Task, workspace: Workspace, agent: AgentResult,
                    verify: Mapping[str, str | None], *, sweep: bool = True
                    ) -> tuple[list[CheckOutcome], dict[str, str], tuple[Path, Path]]:
    """Between the agent and the graders, in one go (on the loop for a small workspace
    with nothing to write or remove, else in one trip off it): evidence of tampering,
    the hidden files, the bytecode caches removed before the first check, the protected
    files' hashes before the checks run, and the graders' HOME and TMPDIR. `sweep`
    False: the caller has seen that there is no cache to remove."""
    integrity = [outcome for outcome in (
        protected_changes(task, agent.files_changed, workspace), restore_seed(task, workspace),
        write_verify_files(verify, workspace)) if outcome is not None]
    if sweep:
        remove_bytecode_caches(workspace.root)
    return integrity, _protected_before_the_checks(task, workspace), grading_state(workspace)


def _protected_before_the_checks(task: Task, workspace: Workspace) -> dict[str, str]:
    """The protected files' hashes before the checks run, their hard links detached."""
    protected = protected_snapshot(task, workspace.root) if task.protected else {}
    if protected:  # a link of the agent's to a protected file would outlast read_only
        detach_protected_links(task, workspace.root, protected)
    return protected


def _names(directory: Path) -> frozenset[str] | None:
    """The names in a directory (None when it cannot be listed): one scandir."""
    try:
        return frozenset(os.listdir(directory))
    except OSError:
        return None


def _stale(home: Path, kept: frozenset[str]) -> bool:
    """Whether the graders' HOME and TMPDIR hold more than the sandbox's own `kept`; so
    too when it cannot be listed: the agent's code, run by a check, can take its read
    permission away (chmod 0311 ~) and leave a file there that the next check's tool
    opens by name (~/.npmrc), which an evalctl not running as root could then not see
    (found by an attacker round). _fresh_home gives it back its owner's permissions."""
    names = _names(home)
    return names is None or not kept.issuperset(names)


def _fresh_home(home: Path, kept: frozenset[str]) -> None:
    """Empty the graders' HOME and TMPDIR but for `kept` (the sandbox's own), never
    through a link; a check does not run with what could not be removed."""
    left = empty_directory(home, keep=kept)
    if _names(home) is None:  # still not to be listed: what is in it is not known
        left = ["(it cannot be listed)"]
    if left:
        raise GraderUnavailable(
            f"what the check before left in the graders' HOME and TMPDIR ({home}) could "
            f"not be removed ({', '.join(sorted(left)[:5])}), and this check would read it")


def _both(first: Callable[[], object] | None, second: Callable[[], object] | None
          ) -> Callable[[], object] | None:
    """One callable doing `first` then `second` (either None: the other)."""
    if first is None or second is None:
        return first or second
    return lambda: (first(), second())


class _BadAnswer(TypeError):
    """What a grader returned, refused here: the detail says it all, and a traceback of
    this module's would point at nothing of the grader's."""


class _Raised(Exception):
    """What a synchronous grader raised in its pool thread that is not an Exception
    (SystemExit, KeyboardInterrupt...), carried back to the loop as one. In that thread
    nothing is the run's own: a signal reaches the main thread only, and the run cancels
    the await, not the thread's work; carried bare, a KeyboardInterrupt or a
    CancelledError would stop the run as if it were."""

    def __init__(self, raised: BaseException):
        super().__init__(raised)
        self.raised = raised


def _around(before: Callable[[], object] | None, after: Callable[[], object] | None,
            func: Callable[..., T], *args: Any) -> T:
    if before is not None:
        before()
    try:
        return func(*args)
    except Exception:
        raise
    except BaseException as exc:
        raise _Raised(exc) from None
    finally:
        if after is not None:
            after()


def attempt_status(exit_status: str | None, checks: list[CheckOutcome],
                   error_statuses: Collection[str]) -> str:
    """The attempt's verdict from its mechanical checks (a judge never decides): an
    error when the agent's exit status is one; else failed when any mechanical check
    ran and failed, even if another could not run (the agent must not turn a failure
    or caught gaming into an uncounted error by breaking a grader); else an error when
    a mechanical check could not run or crashed; else passed."""
    mechanical = [c for c in checks if c.kind == "mechanical"]
    if exit_status in error_statuses:
        return ERROR
    if any(not c.passed and not c.error for c in mechanical):
        return FAILED
    if any(c.error for c in mechanical):
        return ERROR
    return PASSED


# A tree with no entry of these names holds no git directory (a bare one has a HEAD).
_NO_REPOSITORY = frozenset({".git", "HEAD"})


async def make_repositories_safe(workspace: Workspace, source: Source | None
                                 ) -> tuple[str, ...]:
    """Take out of the git directories the agent could write (its workspace, its HOME
    and TMPDIR, kept as .state/<attempt> on the host, and the graders', .grading/<attempt>,
    where a check ran the agent's code) what git would run for a
    user who runs it there later: an agent's `core.fsmonitor`, hooks, a staged .git
    path (`neutralise_repository_config`), recorded in the ledger. What could not be made
    safe, for the result to say. Called when the attempt is over, grading included (a
    check may run the agent's code). A workspace seeded from a git `source` is checked
    against its seed commit too (and given one back, if the agent removed it). A small
    tree with no git directory is told so on the loop, without a trip."""
    origin = seed_origin(source)
    roots = [root for root in dict.fromkeys((workspace.root, workspace.home, workspace.tmp,
                                             workspace.grading_path))
             if (origin is not None and root == workspace.root)
             or not small_tree(root, without=_NO_REPOSITORY)]
    if not roots:
        return ()
    done = await off_loop(_neutralise_and_record, workspace, roots, origin)
    return tuple(f"its {path} could not be made safe to run git in: {what}"
                 for path, what in done.items() if what.startswith("NOT"))


def _neutralise_and_record(workspace: Workspace, roots: list[Path],
                           origin: SeedOrigin | None) -> dict[str, str]:
    done: dict[str, str] = {}
    for root in roots:
        ours = root == workspace.root
        label = "" if ours else f"{root.parent.name}/{root.name}/"
        done.update({label + path: what for path, what in neutralise_repository_config(
            root, workspace.seed_path if ours else None,
            origin=origin if ours else None).items()})
    if done:  # the agent's ledger was closed with its attempt: opened again, numbering on
        ledger = Ledger(workspace.ledger_path)
        ledger.append("repository_neutralised", paths=done)
        ledger.close()
    return done


def make_repositories_safe_now(run_dir: Path, name: str, source: Source | None) -> None:
    """make_repositories_safe for an attempt known by name only, blocking: for one that
    was interrupted or killed (the run is stopping, or a resume retires what it left).
    A problem is passed over: nothing else can be done for it then."""
    paths = attempt_paths(run_dir, name)
    for root, origin in ((paths["workspace"], seed_origin(source)), (paths["state"], None),
                         (paths["grading"], None)):
        if os.path.isdir(root) and not os.path.islink(root):
            with contextlib.suppress(Exception):
                neutralise_repository_config(root, origin=origin)

