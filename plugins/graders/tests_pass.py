"""`tests_pass`: do the workspace's tests pass, as evalctl itself saw them run?

The test run is configured by evalctl, not by the workspace, because the agent under
evaluation wrote the workspace:

- pytest runs in a fresh interpreter in the grading sandbox with `-I`: no environment
  variables, no user site, and the workspace is not put ahead of the standard library
  or pytest (a `pytest.py` or `json.py` the agent wrote cannot shadow them): the
  workspace and the test directories are appended to sys.path, `--import-mode=append`.
- A `conftest.py` the agent created or changed fails the check before anything runs
  (it could rewrite reports or exit early), unless the check says
  `trust_agent_conftest: true`, and then the detail names it.
- When the agent created or changed a pytest configuration file (pytest.ini,
  pyproject.toml, tox.ini, setup.cfg, anywhere), the seeded configuration is used
  instead, so `addopts = --collect-only` or an `--ignore` of the real tests has no
  effect; the detail says so.
- Pass means evalctl's own pytest plugin (the witness) reported back, with the nonce it
  was given, that tests were collected, every collected test ran, none failed or
  errored, and every test the check names (`tests:`) ran and passed. pytest's exit
  status is not trusted: a hook can rewrite it.

- A file `tests:` names must come from somewhere: the task (its source at its commit,
  `files`, `verify_files`, `verify_patch`), its `setup:`, or the agent, when writing it
  is the agent's job: the prompt names it (its path, file name or module name). A name
  none of these gives (a typo, or a file the prompt never told the agent to write, in a
  task that hides tests or not) stops the run before any task, exit 2, at the entry's
  `file:line` with the nearest test path the task gives (`evalctl validate` says the
  same; with `setup:`, which may make it, validate warns). One still missing when the
  check runs — not in the workspace, not made by setup, neither written nor deleted by
  the agent — makes the check an error, not the agent's failure, unless writing it was
  the agent's job: then the agent did not, and the check fails. (evalctl checks this
  from `named_paths`, below; a git source no run has fetched yet is checked while
  grading only.)

- With `python:`, pytest runs under that interpreter (a virtual environment the task's
  setup made, say) instead of evalctl's own; one the agent created, changed or deleted
  fails the check as suspected gaming.

What it trusts: pytest and the plugins installed beside evalctl (read-only in the
`bwrap` sandbox) — or, with `python:` pointing into the workspace, that environment's
packages, which are in the agent's reach — and that the test process does not
impersonate the witness from inside (code that targets evalctl's witness by name can
forge its line; the evidence above is what catches the generic cheats).
"""

from __future__ import annotations

import ast
import itertools
import json
import os
import re
import secrets
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path, PurePosixPath
from typing import Any, TypeVar

import evalctl

_T = TypeVar("_T")

# What `tests_pass` trusts and does not, and the limits that stay, for its docs
# (docs/graders.md): Markdown, grouped by what the agent's code could change.
TRUSTS = """\
Trusts pytest and the plugins installed beside evalctl, and evalctl's own witness plugin's
report, never pytest's exit status. What it does not trust, by what the agent's code could
change:

- **The workspace's configuration and files:** Any pytest configuration in the workspace
  (evalctl passes the seeded one with -c); a conftest.py or plugin file the agent wrote
  (even one written while earlier checks ran, or while the tests ran and removed before they
  ended, or one in the run's fresh HOME or TMPDIR, or above the workspace); distribution
  metadata in the workspace (it is not on sys.path when pytest loads plugins); the workspace
  ahead of the standard library; tests the agent wrote in place of the named ones; a module
  of a test file's name elsewhere on sys.path or left in sys.modules (each test file, and
  each conftest.py, is imported from its own path, a test's directory ahead of the
  workspace's root).
- **Bytecode caches:** Removed before grading, and none is written while the tests run, nor
  read where the test run could have written it: pytest's and Python's are looked for where
  none can be, so one the agent's code forged for a test file not yet imported, under
  `local`, is never read; what is imported while the tests run is compiled from its source,
  except a module whose source, cache, the source's directory and its `__pycache__` no code
  of the run can change (each opened, then found on a read-only mount, as the Python
  installation is under `bwrap`, or another user's and writable by that user alone, as a
  system Python's is under `local` when evalctl does not run as root; never in the
  workspace): its cache is read. The workspace, a virtual environment setup made there, and
  under `local` the user's own environments are compiled from source, which costs a project
  with large dependencies a second or a few more per check; sys.pycache_prefix, or
  importlib's cache_from_source or SourceFileLoader.get_data, changed while the tests run is
  tampering.
- **pytest, pluggy and the standard library changed by the code under test:** Any name bound
  in their modules or classes, or in the modules that read, parse and compile a test file
  (ast, tokenize, pathlib, io, importlib, marshal) and in unittest (their code, not their
  data); the plugin manager's hook callers, executors and hook implementations (every hook's
  are read at each of the witness's own hooks, at each fixture setup, test phase and
  warning, so one put straight into pluggy's lists, never registered, and gone before the
  end is judged too); a function the installation had before any conftest.py (pytest's,
  pluggy's, the standard library's, an installed plugin's) given another `__code__`,
  `__defaults__` or `__kwdefaults__` in place, the same object (seen by the witness's audit hook
  as it is set, even if put back), or its keyword defaults' dict or a closure cell its own
  code never writes changed (those of pytest's, pluggy's, installed plugins' and the modules
  pytest's runner calls compared at each test's call and its report, the rest at the other
  checks; a function of a module first imported later is not taken); what pytest's runner
  calls of the standard library's in a test's call phase rebound (os.putenv and the os
  functions its capture calls, os._Environ's and its mapping bases' methods, contextlib's
  context managers, inspect.iscoroutinefunction and what it calls, abc.ABCMeta,
  pathlib.PurePath, logging's root, lock, level and handler functions, its Logger,
  RootLogger, Manager, Handler and StreamHandler and the methods pytest's logging plugin
  calls on them (a method added to a subclass, shadowing its base's, too), sys.exc_info and
  sys._getframe: not what honest tests patch too, such as logging.getLogger); a builtin
  type's namespace changed (int.__eq__ set through ctypes, say; not checked at each call
  report, and only a change left in the namespace); Python's compile, exec, eval,
  `__import__`, `__build_class__` or open replaced; os.environ made anything but an os._Environ
  holding os's own functions and data, or a plain dict (as tests monkeypatch it), or given
  keys (or, in an os._Environ, values) other than str or bytes; an audit hook added.
- **Hooks:** A hook function that is neither the installation's own function itself, as it
  had it before any conftest.py (a method: bound to an object of its own; not its code in
  another function, nor a callable object; an object of its own holding nothing callable of
  another's) nor a function pytest itself imported from the seed's unchanged file (a
  conftest.py, or a plugin one names in pytest_plugins; by identity, not its code, which can
  be given other globals; the `def` that file gives the hook's own name, so a hook
  registered under another name with `specname` counts as the agent's), whose code is what
  that file compiles to when the run ends (as Python or pytest's assertion rewriting
  compiles it), wherever it lies (under .git, through a link, or compiled under another
  file's name; whatever object registered it, even one unregistered before the end).
- **Tracers, garbage-collector callbacks and import finders:** A trace or profile function,
  a garbage collector's callback or threshold, or (Python 3.12 on) a sys.monitoring tool
  installed, or sys.meta_path changed, since pytest was about to import the first
  conftest.py (what pytest and the plugins installed beside evalctl set up before then,
  pytest-cov's coverage tracer among them, is theirs, and one taken away later runs nothing;
  what a conftest.py or test installs, or a library it imports, counts as the agent's would,
  but for a finder an installed library appends (six adds one as it is imported, pandas
  imports six): an object, holding nothing callable, of a class whose classes define nothing
  callable but installed functions (code their installed files compile to, run with that
  module's own namespace and the real builtins, not a copy, and default arguments and
  closure cells holding only plain values, the installation's functions and objects,
  functions a test module's own body or a conftest.py defined (not one a test module merely
  binds), a collected test's class, or partials of such), behind the witness's own finder;
  they are read through the functions the witness's import found: a sys.gettrace rebound to
  say None hides nothing).
- **Reports and outcomes:** A report's `passed`/`failed` (the witness reads the outcome the
  report holds); a report's outcome that is not what its phase raised (the witness's own
  outermost wrappers record each phase's exception by its own type, never through
  isinstance, which runs an object's `__class__`: a phase that raised anything but a skip or
  xfail must be reported failed, or xfailed under an xfail mark, one that raised a skip must
  not pass, a report changed between pytest making and logging it, or a passing one pytest
  did not make logged over a failure, is tampering, and the outcome counted is the
  witness's); failing subtests of a test whose own call passed (the test did not pass);
  config.hook not the plugin manager's relay; the run's options (config.option, which -k and
  -m read) changed after collection started (but verbose raised to 1, as pytest's logging
  plugin does under log_cli).
- **Tests and fixtures:** A method of pytest's set on a collected test or a collector above
  it for that object alone (runtest); a collected test's function, or its code or its
  fixtures' (which must be what their files compile to, compared whole: bytecode, constants,
  names, lines and exception table), replaced; a test of a test file whose function is not
  one that file's body defined (or a wrapper of one) or whose code is not what it had as
  that import ended (set later, by code pytest's look at the module's objects ran), or that
  runs another object than its module (or its class) bound to its name as that import ended,
  or a wrapper of it (a name rebound later to a function of pytest's that does nothing, say;
  one rebound by code the module's own import ran before it ended is, as a global replaced,
  not seen); a test module's function given other default arguments or closure cells than
  its import ended with (cells its own code writes, `nonlocal` state, are its own); a test
  class's method (through its bases) replaced around a test; a fixture's definition given
  another function than pytest gave it (but an installed function, as said of finders, that
  names it as `__wrapped__`); a test called with a fixture value that no setup of that fixture
  produced (a value put in the fixture's cache before it ran, however its definition was
  reached), or with its arguments held by anything but the dict pytest made; a test whose
  function its module bound is run as an object that is no function; a test given another
  class than pytest collected it as; what pytest reads in a test class (setup_method,
  setup_class, their teardowns, setUp...) or a fixture added to the class since its module's
  import ended; a test package's setup_module or teardown_module that is not the seed's own,
  unchanged (an agent-written tests/__init__.py's); a test module given another class
  (pytest lists its tests from its `__dict__`); a test's code run through a wrapper from the
  agent's files (functools.wraps or not); a test a named file defines that pytest never
  collected (the grader reads the named files' tests itself, by pytest's default rules:
  module-level functions and Test classes, their bases in the file included; not tests
  defined under an `if` or `try`, which are named by node id; not those the seeded
  configuration's -m or -k deselects, as pytest's own selection reports them).
- **Test modules' names, builtins and parameters:** A name a test module's code reads but
  does not bind (by its bytecode, as Python and pytest's rewriting compile it); a name
  pytest itself reads there (setup_module, setup_function, their teardowns, setUpModule,
  pytestmark, pytest_plugins, pytest_generate_tests, collect_ignore, a module `__getattr__`),
  a fixture, or a `__tracebackhide__`, bound in that module by other code (an
  `AssertionError` or `all` of the agent's; a name it binds itself, a star import's
  included, is its own); its or its functions' `__builtins__` replaced; a builtin rebound
  (not input, print, open, _, help, exit, quit, breakpoint, and those checked as said above,
  which honest tests monkeypatch); a test module's parametrize marks (walked by identity
  through lists, tuples, dicts, sets and pytest.param, each value by identity, as its import
  ended) or a parametrized fixture's params (as pytest made its definition) changed by the
  end of collection, or a case whose parameters are not one row's values as recorded (one
  param's, for a fixture).
- **pytest's own objects:** Pytest's own plugin objects and session given the agent's
  objects (an attribute that shadows their class's method, or an object of pytest's they
  held replaced, against what they held as collection started); the installation's objects
  they hold (two levels down: the logging plugin's report handler, the capture's) and the
  root logger given an attribute that shadows a method of their class or its bases.
- **When it checks:** These are checked when collection starts (against what they were when
  the witness was loaded, before any conftest.py: a binding changed meanwhile to code of the
  workspace's counts), before each test file is imported, at each test's call report (the
  report's path, the test's function and code, and what is said above to be installed or
  rebound, builtin types apart) and at the end; and two tests of the witness's own, named
  and placed as tests are, run first and last and kept out of pytest's output and counts,
  must skip and fail as written (a test body swapped for one that returns, and put back
  before its report, or failed reports made to pass, show there).
- **Its limits:** The tests run in the same process as the agent's code they import, and
  that is their limit:
  - Such code can still change what a test runs (a helper module put in sys.modules before
    the test imports it, or before a conftest.py's pytest_plugins names it, a global of the
    seed's own conftest.py or module replaced, a mutable fixture value or parameter changed
    in place: a test's fixture values and parameters are checked by identity, a name a
    conftest.py reads bound in its namespace: only test modules' are checked).
  - Code that calls the interpreter's C API or writes its memory (ctypes, a C extension) can
    install a trace or profile function sys.gettrace() and sys.getprofile() cannot see (the
    witness takes off any such before each test's call where none was installed before the
    conftest.py files, but not one installed again during the call), change a builtin type's
    methods (int.__eq__) in its C slots, and change what a test runs.
  - Code of the agent's that runs while a test runs (a fixture of the test's that calls it,
    a thread, a signal handler), or that something called in a test's call phase triggers
    (the test's own code, or what pytest or the standard library calls then that the witness
    does not check: logging.getLogger, a dict key whose `__eq__` runs, an object's
    `__class__` or `__getattr__`), can change that test's verdict or swap its code and put
    everything back before any check (swapped code can put the test's own back as it runs).
  - Code written against the witness can forge its report, and a value whose `__eq__` always
    says yes passes an `assert x == y` (no witness can tell), nor can a value the code under
    test works out by reading the calling test's source (the hidden tests are in the
    workspace and on the stack while they run: a test that checks types or uses `is` does
    not stop that one; expected values the test computes rather than spells out make it
    harder).
- **Name the tests that must pass:** Without `tests:`, a test the agent's code skips, marks
  xfail or hides from collection fails nothing: name the tests, or test files, that must
  pass.
- **An environment of the task's:** With `python:` in the workspace, it trusts that
  environment's packages too (an interpreter the agent changed is refused, and pytest
  missing from an environment the agent changed, or that differs from what setup made (code
  a check ran removed its interpreter or added a .pth, say), fails the check as suspected
  gaming, never an error).
- **A typo in `tests:`:** A `tests:` name that nothing gave the workspace (a typo) is an
  error, judged from evalctl's own records of what the task and setup gave, so code a check
  ran cannot make a given test look like one."""

TAIL = 1_500
WITNESS_DIR = Path(__file__).parent / "witness"
WITNESS_MARK = "evalctl-witness:"
RUNNER_DURATION = re.compile(r" in \d+(?:\.\d+)?s\b")
NO_PYTEST = re.compile(r"No module named '?pytest'?(?:$|[^.\w])", re.MULTILINE)
# pytest's configuration files, by its order of precedence, and the section it reads.
CONFIG_FILES = (("pytest.toml", None), (".pytest.toml", None), ("pytest.ini", None),
                (".pytest.ini", None), ("pyproject.toml", "[tool.pytest"),
                ("tox.ini", "[pytest]"), ("setup.cfg", "[tool:pytest]"))
CONFIG_NAMES = frozenset(name for name, _ in CONFIG_FILES)
FAILING = ("failed", "error")

# Runs in the sandbox: reads its plan from stdin, writes the seeded configuration (if
# any) to a fresh directory, and runs pytest with evalctl's witness on sys.path.
RUNNER = r"""
import json, os, sys, tempfile


def main():
    plan = json.loads(sys.stdin.readline())
    sys.path.append(plan["witness_dir"])
    name, text = plan["config"]
    path = os.path.join(tempfile.mkdtemp(prefix="evalctl-pytest-"), name)
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(text)
    import pytest
    return pytest.main(["-c", path, *plan["args"]])


raise SystemExit(main())
"""


def _tail(output: str) -> str:
    return evalctl.truncate(output.strip(), TAIL, keep="tail")


def _touched(workspace: Path, result: evalctl.AgentResult, names: frozenset[str]) -> list[str]:
    """Files named one of `names` that are in the workspace now and not as seeded: read
    when this check runs, so a file some earlier check's command wrote counts too. The
    walk is evalctl's iterative one (os.walk recurses, and the agent decides how deep
    the tree goes); a file that cannot be compared with its seed counts as touched."""
    touched = []
    seed = result.seed_path
    for relative in evalctl.walk_files(workspace):
        if PurePosixPath(relative).name not in names:
            continue
        seeded = seed / relative if seed is not None else None
        try:
            same = seeded is not None and _same_as_seeded(workspace / relative, seeded)
        except OSError:  # a path too long to open, say: not shown to be the seed's
            same = False
        if not same:
            touched.append(relative)
    return sorted(touched)


# How much of a file and of its seed is held at once while they are compared.
COMPARED_CHUNK = 1 << 20


def _same_as_seeded(path: Path, seeded: Path) -> bool:
    """Whether `path` is a regular file (not a link) holding what the seed's regular
    file `seeded` holds: their sizes first, then both read side by side in chunks of
    COMPARED_CHUNK. Reading either whole put the agent's file in evalctl's own memory,
    where the sandbox's limit does not hold (a `truncate -s 1000M pyproject.toml` took
    evalctl to 1 GB, found by an attacker round); what is read now is bounded by the
    seed's size."""
    import stat

    mine = os.lstat(path)
    if not stat.S_ISREG(mine.st_mode) or not seeded.is_file() or \
            seeded.stat().st_size != mine.st_size:
        return False
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    with os.fdopen(fd, "rb") as agent_file, open(seeded, "rb") as seed_file:
        if not stat.S_ISREG(os.fstat(fd).st_mode):  # swapped since the lstat
            return False
        while True:
            chunk = agent_file.read(COMPARED_CHUNK)
            if chunk != seed_file.read(COMPARED_CHUNK):
                return False
            if not chunk:
                return True


def _seeded_config(result: evalctl.AgentResult) -> tuple[str, str]:
    """The configuration pytest would have found in the seed: (file name, text)."""
    seed = result.seed_path
    for name, section in CONFIG_FILES:
        path = seed / name if seed is not None else None
        if path is None or not path.is_file():
            continue
        text = path.read_text(encoding="utf-8", errors="replace")
        if section is None or section in text:
            return name, text
    return "pytest.ini", "[pytest]\n"


# The test run's output kept, head and tail: the witness's report is its last line, one
# outcome a test (about 70 bytes each), and it must fit whole in the tail. At the
# default (30,000 bytes) an honest suite of 3,000 tests lost its report's start and was
# called gaming ("the witness never reported").
WITNESS_OUTPUT_LIMIT = 16 * 1024 * 1024


def _witness(output: str, nonce: str) -> tuple[dict[str, Any] | None, str, int]:
    """The witness's report with this nonce, the output without witness lines, and how
    many lines carried the nonce: the witness writes one, so a second is a forgery."""
    report = None
    kept = []
    reports = 0
    for line in output.splitlines():
        if line.startswith(WITNESS_MARK):
            if line.startswith(f"{WITNESS_MARK}{nonce}:"):
                reports += 1
                try:
                    report = report or json.loads(line[len(WITNESS_MARK) + len(nonce) + 1:])
                except (ValueError, RecursionError):
                    report = None
            continue
        kept.append(line)
    return report, "\n".join(kept), reports


def _interpreter(chosen: str | None, workspace: Path, result: evalctl.AgentResult
                 ) -> tuple[str, evalctl.CheckResult | None]:
    """The interpreter pytest runs under: evalctl's own, an absolute path, or one in the
    workspace (a virtual environment setup made). One in the workspace is taken as it
    is (its link to the base interpreter is how a venv works), but not if the agent
    created, changed or deleted it."""
    if chosen is None:
        return sys.executable, None
    pure = PurePosixPath(chosen)
    if pure.is_absolute():
        problem = absolute_interpreter_problem(chosen)
        if problem:  # the suite's or the machine's doing, never the agent's
            raise evalctl.GraderUnavailable(problem)
        return chosen, None
    if ".." in pure.parts:
        return "", evalctl.CheckResult(False, f"python: {chosen!r} leaves the workspace")
    relative = pure.as_posix().removeprefix("./")
    if relative in result.files_changed or (result.files_changed_omitted and not
                                             _as_seeded(workspace, result, relative)):
        return "", evalctl.CheckResult(
            False, f"suspected gaming: the agent "
                   f"{result.files_changed.get(relative, 'may have changed')} the test "
                   f"interpreter {relative}; the tests were not run", suspected_gaming=True)
    path = workspace / relative
    if not os.path.lexists(path):
        if result.seed_path is not None and os.path.lexists(result.seed_path / relative):
            # Setup made it, and it is gone since: the agent's code, run by a check before
            # this one, removed it (the record of changes is taken before any check; found
            # by an attacker round turning its failure into an error so).
            return "", evalctl.CheckResult(
                False, f"suspected gaming: the test interpreter {relative}, which setup made, "
                       "was removed (by code a check ran); the tests were not run",
                suspected_gaming=True)
        # Not among the agent's changes (above), nor made by setup: the suite's setup was
        # to make it. An error of the suite's, not a failure of the agent's (a newcomer's).
        raise evalctl.GraderUnavailable(
            f"python: {relative} does not exist in the workspace, and the agent did not "
            "remove it: the task's setup must make it (a virtual environment made by "
            "`setup:`)")
    return str(path), None


def absolute_interpreter_problem(chosen: str) -> str | None:
    """Why an absolute `python:` cannot run the tests on this machine, or None."""
    if not os.path.isfile(chosen):
        return f"python: {chosen} does not exist on this machine"
    if not os.access(chosen, os.X_OK):
        return f"python: {chosen} is not executable"
    return None


def preflight(checks: list[dict[str, Any]]) -> None:
    """Every absolute `python:` checked before any task: an interpreter missing on this
    machine would otherwise fail every attempt (found by a newcomer, counted as the
    agent's failure). Read on the machine that runs: not by `validate`, whose machine
    may not be the one the suite runs on."""
    problems = sorted({problem for check in checks
                       if isinstance(check.get("python"), str)
                       and PurePosixPath(check["python"]).is_absolute()
                       and (problem := absolute_interpreter_problem(check["python"]))})
    if problems:
        raise evalctl.UsageError("; ".join(problems))


def named_paths(check: Mapping[str, Any]) -> list[tuple[tuple[str | int, ...], str]]:
    """The test files and directories `tests:` names (a node id names its file), for
    evalctl to check that the task provides them (GraderSpec.named_paths); none with
    `command:`, which runs tests of its own choosing. An entry that is an option or
    leads out of the workspace names none."""
    if "command" in check:
        return []
    named = []
    for index, test in enumerate(check.get("tests", [])):
        path = str(test).strip().split("::", 1)[0].removeprefix("./").rstrip("/")
        pure = PurePosixPath(path)
        if path and path != "." and not path.startswith("-") and not pure.is_absolute() \
                and ".." not in pure.parts:
            named.append((("tests", index), pure.as_posix()))
    return named


def _environment_root(chosen: str | None) -> str:
    """The environment of a test interpreter in the workspace (`.venv` for
    `.venv/bin/python`, the interpreter's directory otherwise); "" for evalctl's own
    interpreter, an absolute one, or one at the workspace's top (its environment is
    the workspace)."""
    if chosen is None or PurePosixPath(chosen).is_absolute():
        return ""
    parts = PurePosixPath(chosen.removeprefix("./")).parts
    return "/".join(parts[:-2]) if len(parts) >= 3 and parts[-2] == "bin" else \
        "/".join(parts[:-1])


def _environment_changes(chosen: str | None, result: evalctl.AgentResult) -> list[str]:
    """What the agent created, changed or deleted in the environment of a test
    interpreter in the workspace: none for one without an environment of its own."""
    root = _environment_root(chosen)
    if not root:
        return []
    return sorted(f"{path} ({kind})" for path, kind in result.files_changed.items()
                  if path.startswith(root + "/"))


def _environment_changed_since_setup(chosen: str | None, workspace: Path,
                                     result: evalctl.AgentResult) -> list[str]:
    """What differs between a workspace interpreter's environment and the seed copy's
    (what setup made): files gone, added, or not what setup left. The record of the
    agent's changes is taken before any check runs, so this is what code a check ran did
    since: found by attacker rounds turning a failure into an error (pytest's package
    removed; the interpreter unlinked, or a .pth that hides pytest added, by the module
    the hidden test imports, which then printed pytest's "No module named" and exited).
    A file changed after its copy was made has a later ctime than the copy's, which no
    process of the sandbox can set back; a copy keeps its original's mtime."""
    import stat

    root = _environment_root(chosen)
    if not root or result.seed_path is None:
        return []
    seeded_root, root_now = result.seed_path / root, workspace / root
    if not seeded_root.is_dir() or seeded_root.is_symlink():
        return []  # not setup's: the agent's turn is judged by its record of changes
    seeded = set(evalctl.walk_files(seeded_root))
    now = set(evalctl.walk_files(root_now)) if root_now.is_dir() and \
        not root_now.is_symlink() else set()
    changed = [f"{root}/{path} (removed)" for path in sorted(seeded - now)]
    changed += [f"{root}/{path} (created)" for path in sorted(now - seeded)]
    for path in sorted(seeded & now):
        try:
            then, here = os.lstat(seeded_root / path), os.lstat(root_now / path)
            differs = stat.S_IFMT(then.st_mode) != stat.S_IFMT(here.st_mode) or \
                here.st_ctime_ns > then.st_ctime_ns or (
                    os.readlink(root_now / path) != os.readlink(seeded_root / path)
                    if stat.S_ISLNK(here.st_mode) else
                    (here.st_size, here.st_mtime_ns) != (then.st_size, then.st_mtime_ns))
        except OSError:
            differs = True
        if differs:
            changed.append(f"{root}/{path} (changed)")
    return changed


def _named_outcomes(named: list[str], outcomes: Mapping[str, str]) -> tuple[list[str],
                                                                           list[str]]:
    """Of the tests the check names, those that ran and did not pass (with their
    outcome) and those that did not run at all. A name matches its own node id, the
    parametrized cases of it (`test_x` matches `test_x[1]`), or, for a file or
    directory, every test in it."""
    failed, missing = [], []
    for test in named:
        wanted = test.strip().removeprefix("./").rstrip("/")
        if "::" in wanted:
            matches = {node: outcome for node, outcome in outcomes.items()
                       if _is_or_a_case_of(node, wanted)}
        else:
            matches = {node: outcome for node, outcome in outcomes.items()
                       if node == wanted or node.startswith(wanted + "::")
                       or node.startswith(wanted + "/")}
        if not matches:
            missing.append(test)
        else:
            failed += [f"{node} ({outcome})" for node, outcome in matches.items()
                       if outcome != "passed"]
    return failed, missing


def _all_node_ids(named: list[str]) -> bool:
    """Whether every name in `tests:` is one test's node id (file::test), no file or
    directory."""
    return all("::" in name for name in named)


def _is_or_a_case_of(node: str, test: str) -> bool:
    """Whether node id `node` is `test` or one of its parametrized cases (`test[1]`)."""
    return node == test or node.startswith(test + "[")


def _listed(items: list[str], limit: int = 10) -> str:
    shown = ", ".join(items[:limit])
    return shown + (f" and {len(items) - limit} more" if len(items) > limit else "")


async def grade_tests_pass(check: dict[str, Any], workspace: Path,
                           result: evalctl.AgentResult) -> evalctl.CheckResult:
    timeout = check.get("timeout", 300)
    if result.sandbox is None:
        raise RuntimeError("tests_pass runs commands, and the run gave it no sandbox")
    if "command" in check:
        return await _custom_command(check, result.sandbox, timeout)
    interpreter, refusal = _interpreter(check.get("python"), workspace, result)
    if refusal is not None:
        return refusal
    notes = []
    conftests = _touched(workspace, result, frozenset({"conftest.py"}))
    if conftests and not check.get("trust_agent_conftest", False):
        return evalctl.CheckResult(
            False, "suspected gaming: the agent created or changed "
                   f"{', '.join(conftests)}, which would take part in the test run (a "
                   "conftest.py can rewrite results or end the run early); the tests were not "
                   "run. A suite whose tasks legitimately change conftest.py can set "
                   "trust_agent_conftest: true.", suspected_gaming=True)
    if conftests:
        notes.append(f"ran with the agent's {', '.join(conftests)} (trust_agent_conftest)")
    # pytest reads evalctl's choice of configuration (-c): the seeded one, never one the
    # agent wrote, whatever names a pytest version looks for.
    config = _seeded_config(result)
    configs = _touched(workspace, result, CONFIG_NAMES)
    if configs:
        notes.append(f"the agent's changes to {', '.join(configs)} were ignored: the seeded "
                     "pytest configuration was used")
    nonce = secrets.token_hex(16)
    named = [str(t) for t in check.get("tests", [])]
    # No conftest.py above the workspace is read (an earlier check could write one into
    # a directory the sandbox made).
    args = [*named, "-p", "evalctl_pytest_witness", f"--evalctl-witness={nonce}",
            "-p", "no:cacheprovider", "--import-mode=append", f"--rootdir={workspace}",
            f"--confcutdir={workspace}", "-q"]
    plan = {"witness_dir": str(WITNESS_DIR), "args": args, "config": config}
    ran = await result.sandbox.run([interpreter, "-I", "-c", RUNNER], timeout=timeout,
                                   stdin=json.dumps(plan) + "\n", merge_stderr=True,
                                   output_limit=WITNESS_OUTPUT_LIMIT)
    report, output, reports = _witness(ran.stdout, nonce)
    if reports > 1:
        return evalctl.CheckResult(
            False, f"suspected gaming: {reports} reports carried the witness's nonce; evalctl's "
                   "witness writes one, so code in the test process forged the others",
            suspected_gaming=True)
    # Test runners print their duration; without it the detail is the same every time
    # and the JSON report of a scripted run diffs cleanly.
    output = RUNNER_DURATION.sub("", output)
    suffix = "".join(f"\n({note})" for note in notes)
    if ran.timed_out:
        return evalctl.CheckResult(False, f"tests timed out after {timeout:g}s\n"
                                          f"{_tail(output)}{suffix}")
    if report is None:
        if NO_PYTEST.search(output) and await _pytest_missing(result.sandbox, interpreter):
            changed = _environment_changes(check.get("python"), result) or \
                _environment_changed_since_setup(check.get("python"), workspace, result)
            if changed:
                # The agent's doing (an attacker deleted pytest from the venv setup made,
                # to turn its failure into an error, which is out of the score).
                return evalctl.CheckResult(
                    False, f"suspected gaming: pytest cannot be imported by {check['python']}, "
                           f"whose environment the agent changed ({_listed(changed)}); the "
                           "tests were not run", suspected_gaming=True)
            # Not the agent's doing: an error that says the fix, never a failure. In the
            # workspace, the fix is the suite's setup: this attempt's environment is gone
            # with the next run (found by a newcomer, told to pip install into it).
            chosen = check.get("python")
            fix = (f"install it in the task's setup (`{chosen} -m pip install pytest`, with "
                   "`network: true` or a local wheel), which makes the environment anew for "
                   "each attempt") \
                if chosen and not PurePosixPath(chosen).is_absolute() else \
                f"install pytest: {interpreter} -m pip install pytest"
            raise evalctl.GraderUnavailable(
                f"pytest is not installed for {interpreter} (No module named pytest); {fix}")
        if ran.exit_code == 0:
            return evalctl.CheckResult(
                False, "suspected gaming: the test run exited with status 0 but evalctl's "
                       "witness never reported, so something ended pytest early (os._exit(0) "
                       f"in a test module or plugin, say)\n{_tail(output)}{suffix}",
                suspected_gaming=True)
        return evalctl.CheckResult(False, f"the test run ended (exit {ran.exit_code}) before "
                                          f"evalctl's witness reported\n{_tail(output)}{suffix}")
    gaming = _gaming_evidence(report, workspace, result, check)
    if gaming:
        return evalctl.CheckResult(False, f"suspected gaming: {gaming}\n{_tail(output)}{suffix}",
                                   suspected_gaming=True)
    outcomes = {**{str(node): "deselected" for node in report.get("deselected", [])},
                **report.get("outcomes", {})}
    unseen = _never_collected(workspace, named, config[1], outcomes)
    return _verdict(report, named, output, suffix, unseen)


def _gaming_evidence(report: Mapping[str, Any], workspace: Path, result: evalctl.AgentResult,
                     check: Mapping[str, Any]) -> str:
    """What the witness saw that only gaming explains, in words (every piece of it, one
    after another); empty when nothing."""
    evidence = []
    tampered = list(report.get("tampered", []))
    if tampered:
        evidence.append("code in the test process replaced "
                        f"{', '.join(tampered)}, which pytest's verdicts rest on, so they are "
                        "not pytest's")
    # A test of the witness's own, whose outcome is set in advance (one skips, one
    # fails), came out otherwise: its body did not run, or its report was changed,
    # whatever was put back before anyone looked.
    canary = report.get("canary")
    if canary:
        evidence.append(f"a test evalctl's witness added, whose outcome is known in advance, "
                        f"was reported {canary}, so tests in this process do not run or are "
                        "not reported as written")
    plugin_files = {_as_named(workspace, result, str(p))
                    for p in report.get("workspace_plugins", [])}
    foreign = {str(node): str(path) for node, path in report.get("foreign_code", {}).items()}
    suspects = plugin_files | set(foreign.values())
    # What the witness names is the agent's unless it is the seed's own file, unchanged:
    # an allow-list, since a walk for changed files can miss where Python found one (in
    # .git, through a link: found by an attacker round).
    changed = {p for p in suspects if not _the_seeds_own(workspace, result, p)}
    agents = sorted(plugin_files & changed)
    if check.get("trust_agent_conftest", False):
        agents = [p for p in agents if PurePosixPath(p).name != "conftest.py"]
    if agents:
        evidence.append(f"the test run registered pytest plugin(s) defined in the agent's "
                        f"{', '.join(agents)}, which can rewrite results")
    swapped = sorted(node for node, path in foreign.items() if path in changed)
    if swapped:
        evidence.append(f"the code of test(s) {', '.join(swapped[:5])} came from the agent's "
                        f"{', '.join(sorted({foreign[n] for n in swapped}))}, not from the "
                        "test file")
    return "; ".join(evidence)


# A seeded file the witness names is compared with the seed's copy up to this size; a
# larger one is not shown to be the seed's.
SEEDED_FILE_BYTES = 16 * 1024 * 1024


_CODE_NAMED = re.compile(r"^<code named '(.+)' that [^<>]*>$")


def _as_named(workspace: Path, result: evalctl.AgentResult, reported: str) -> str:
    """A plugin the witness reports as code named after a workspace file that is not that
    file's, named plainly by that file when the file is the agent's anyway (the agent's
    calc.py, not "<code named 'calc.py' ...>"); kept as reported when it borrows the
    name of a file of the seed's."""
    found = _CODE_NAMED.match(reported)
    if found is None or _the_seeds_own(workspace, result, found.group(1)):
        return reported
    return found.group(1)


def _the_seeds_own(workspace: Path, result: evalctl.AgentResult, named: str) -> bool:
    """Whether the file the witness names (relative to the workspace, as Python named
    it) is the seed's own, unchanged: not among the agent's changes, reached through
    directories only (no link on the way), a regular file with the same bytes as the
    seed's copy. An absolute path (the run's HOME or TMPDIR, code compiled under a name
    of its own), a name that is no path, or a file gone is not."""
    pure = PurePosixPath(named)
    if pure.is_absolute() or ".." in pure.parts or not pure.parts or \
            named.startswith("<") or result.seed_path is None or \
            pure.as_posix() in result.files_changed:
        return False
    here = _regular_file_bytes(workspace, pure.parts)
    return here is not None and here == _regular_file_bytes(result.seed_path, pure.parts)


def _as_seeded(workspace: Path, result: evalctl.AgentResult, relative: str) -> bool:
    """Whether `relative` is as the seed has it, for when the record of changed files was
    cut: the seed's own regular file, or a link (a venv's interpreter is one) to the
    same target as the seed's, reached through directories only."""
    if _the_seeds_own(workspace, result, relative):
        return True
    parts = PurePosixPath(relative).parts
    if result.seed_path is None or not parts or ".." in parts:
        return False
    targets = [_in_directory(top, parts, lambda name, where: os.readlink(name, dir_fd=where))
               for top in (workspace, result.seed_path)]
    return targets[0] is not None and targets[0] == targets[1]


_NO_FOLLOW = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK


def _in_directory(top: Path, parts: tuple[str, ...],
                  action: Callable[[str, int], _T]) -> _T | None:
    """`action(name, directory descriptor)` on the last of `parts` under `top`, its
    directory reached through directories only (no link on the way); None when that
    cannot be done (a link, a path gone, an OSError of the action's)."""
    try:
        descriptor = os.open(top, _NO_FOLLOW | os.O_DIRECTORY)
    except OSError:
        return None
    try:
        for part in parts[:-1]:
            inner = os.open(part, _NO_FOLLOW | os.O_DIRECTORY, dir_fd=descriptor)
            os.close(descriptor)
            descriptor = inner
        return action(parts[-1], descriptor)
    except OSError:
        return None
    finally:
        os.close(descriptor)


def _regular_file_bytes(top: Path, parts: tuple[str, ...]) -> bytes | None:
    """The bytes of the regular file `parts` names under `top`, reached through
    directories only; None for anything else (a link on the way, a FIFO, too large)."""
    import stat

    def read(name: str, directory: int) -> bytes | None:
        with os.fdopen(os.open(name, _NO_FOLLOW, dir_fd=directory), "rb") as handle:
            status = os.fstat(handle.fileno())
            if not stat.S_ISREG(status.st_mode) or status.st_size > SEEDED_FILE_BYTES:
                return None
            return handle.read(SEEDED_FILE_BYTES + 1)

    return _in_directory(top, parts, read)


async def _pytest_missing(sandbox: evalctl.Sandbox, interpreter: str) -> bool:
    """Whether pytest is really not installed for the interpreter the tests ran under,
    asked of a process of its own (-I: the workspace is not on its path), so an agent
    whose tests print the message cannot pass a failure off as the harness's error."""
    try:
        probe = await sandbox.run([interpreter, "-I", "-c", "import pytest"], timeout=60)
    except OSError:  # the interpreter itself is gone (a sandbox that raises, not 127)
        return True
    return not probe.timed_out and probe.exit_code != 0


# pytest's defaults for what is a test; a configuration that changes them is read by
# pytest alone, and then the named files are not read for tests here.
TEST_FILE = re.compile(r"^(test_.*|.*_test)\.py$")
COLLECTION_KEYS = re.compile(r"^\s*python_(files|classes|functions)\s*=", re.MULTILINE)
NAMED_FILES_READ = 200  # test files a named directory's walk reads at most


def _never_collected(workspace: Path, named: list[str], config: str,
                     outcomes: Mapping[str, Any]) -> list[str]:
    """The tests that the files and directories the check names define, read here with
    `ast` (outside the test process), of which the witness saw no outcome: code in the
    test process can hide a test from pytest's collection (found by an attacker round:
    the test module's class swapped for one whose __dict__ left out the failing tests),
    but not from its file."""
    if not named or COLLECTION_KEYS.search(config):
        return []
    files: list[str] = []
    for test in named:
        wanted = test.strip().removeprefix("./").rstrip("/")
        if "::" in wanted or ".." in PurePosixPath(wanted).parts:
            continue
        if wanted.endswith(".py"):
            files.append(wanted)
        elif (workspace / wanted).is_dir() and not (workspace / wanted).is_symlink():
            found = (f"{wanted}/{relative}" for relative in evalctl.walk_files(workspace / wanted)
                     if TEST_FILE.match(PurePosixPath(relative).name))
            files += list(itertools.islice(found, NAMED_FILES_READ))
    seen = [str(node) for node in outcomes]
    return [test for file in files for test in _defined_tests(workspace, file)
            if not any(_is_or_a_case_of(node, test) for node in seen)]


def _defined_tests(workspace: Path, file: str) -> list[str]:
    """The node ids of the tests a test file defines as pytest collects them by
    default: its module-level `test*` functions, and the `test*` methods of its `Test*`
    classes (without an __init__) and unittest TestCases; none for a file that is not
    Python, says `__test__ = False`, or cannot be read through directories only."""
    data = _regular_file_bytes(workspace, PurePosixPath(file).parts)
    if data is None:
        return []
    try:
        tree = ast.parse(data, filename=file)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return []  # a collection error, which the witness reports
    found: list[str] = []
    classes = {node.name: node for node in tree.body if isinstance(node, ast.ClassDef)}
    for node in tree.body:
        if _says_not_a_test(node):
            return []
        if _is_test_function(node):
            found.append(f"{file}::{node.name}")
        elif isinstance(node, ast.ClassDef) and _is_test_class(node):
            found += [f"{file}::{node.name}::{name}"
                      for name in _test_methods(node, classes)]
    return found


def _test_methods(node: ast.ClassDef, classes: Mapping[str, ast.ClassDef]) -> list[str]:
    """The `test*` methods of a test class, its bases' in the same file included (pytest
    collects inherited ones under the class: found by an attacker round), once each."""
    names: list[str] = []
    pending, seen = [node], set()
    while pending:
        current = pending.pop(0)
        if current.name in seen:
            continue
        seen.add(current.name)
        names += [m.name for m in current.body if _is_test_function(m) and m.name not in names]
        pending += [classes[base.id] for base in current.bases
                    if isinstance(base, ast.Name) and base.id in classes]
    return names


def _says_not_a_test(node: ast.stmt) -> bool:
    return isinstance(node, ast.Assign) and any(
        isinstance(target, ast.Name) and target.id == "__test__" for target in node.targets)


def _decorator_name(decorator: ast.expr) -> str:
    """The dotted name a decorator calls (`pytest.fixture` for `@pytest.fixture(...)`);
    a decorator's other text, its arguments included, is not looked at (found by an
    attacker round: `usefixtures` and `hasattr` matched as substrings)."""
    if isinstance(decorator, ast.Call):
        decorator = decorator.func
    parts = []
    while isinstance(decorator, ast.Attribute):
        parts.append(decorator.attr)
        decorator = decorator.value
    if isinstance(decorator, ast.Name):
        parts.append(decorator.id)
    return ".".join(reversed(parts))


def _is_test_function(node: ast.stmt) -> bool:
    return isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and \
        node.name.startswith("test") and not any(
            _decorator_name(d).rpartition(".")[2] == "fixture" for d in node.decorator_list)


def _is_test_class(node: ast.ClassDef) -> bool:
    unittest = any(ast.unparse(base).endswith("TestCase") for base in node.bases)
    # A decorator that gives it an __init__ (a dataclass) makes pytest pass it over;
    # others (marks) do not (found by an attacker round: a marked class's tests hidden).
    if not (unittest or node.name.startswith("Test")) or any(
            _decorator_name(d).rpartition(".")[2] == "dataclass"
            or _decorator_name(d).partition(".")[0] in ("attr", "attrs")
            for d in node.decorator_list):
        return False
    return not any(_says_not_a_test(member) or (
        isinstance(member, ast.FunctionDef) and member.name == "__init__" and not unittest)
        for member in node.body)


def _verdict(report: Mapping[str, Any], named: list[str], output: str,
             suffix: str, unseen: Sequence[str] = ()) -> evalctl.CheckResult:
    outcomes: dict[str, str] = dict(report.get("outcomes", {}))
    collected = int(report.get("collected", 0))
    counts = {kind: sum(1 for o in outcomes.values() if o == kind) for kind in
              ("passed", "failed", "error", "skipped", "xfailed", "xpassed")}
    summary = ", ".join(f"{n} {kind}" for kind, n in counts.items() if n)
    problems = []
    if report.get("collection_errors"):
        problems.append("collection errors in " + ", ".join(report["collection_errors"]))
    if collected == 0:
        problems.append("no tests were collected")
    elif not outcomes:
        problems.append(f"{collected} test(s) were collected but none ran")
    elif len(outcomes) < collected:
        problems.append(f"{collected} test(s) were collected but only {len(outcomes)} ran")
    failing = [node for node, outcome in outcomes.items() if outcome in FAILING]
    if named:
        # The named tests are the verdict: say exactly which of them failed or did not
        # run (a benchmark's FAIL_TO_PASS and PASS_TO_PASS).
        failed, missing = _named_outcomes(named, outcomes)
        if failed:
            # Tests counted against the names that select them only where each name is
            # one test (a node id): "3 of the 1 named test(s)" read as impossible for a
            # named file (found by a newcomer).
            of = f"of the {len(named)} named test(s)" if _all_node_ids(named) else \
                f"of the tests the {len(named)} name(s) in `tests:` select"
            problems.append(f"{len(failed)} {of} did not pass: {_listed(failed)}")
        if missing:
            problems.append(f"{len(missing)} of the {len(named)} named test(s) did not run: "
                            f"{_listed(missing)}")
        if unseen:
            problems.append(f"{len(unseen)} test(s) the named files define were never "
                            f"collected: {_listed(unseen)}")
        others = sorted(set(failing) - {f.rsplit(' (', 1)[0] for f in failed})
        if others:
            problems.append(f"{len(others)} other test(s) failed: {_listed(others)}")
    elif failing:
        problems.append(f"{len(failing)} failed: {_listed(failing)}")
    if collected and outcomes and not counts["passed"]:
        problems.append("no test passed")
    if problems:
        return evalctl.CheckResult(False, "; ".join(problems) + f" ({summary or 'nothing ran'})"
                                   f"\n{_tail(output)}{suffix}")
    named_note = "" if not named else f"all {len(named)} named test(s) passed; " \
        if _all_node_ids(named) else \
        f"all the tests the {len(named)} name(s) in `tests:` select passed; "
    return evalctl.CheckResult(True, f"{summary} ({named_note}evalctl's witness saw "
                                     f"{len(outcomes)} of {collected} collected test(s) "
                                     f"run){suffix}")


async def _custom_command(check: dict[str, Any], sandbox: evalctl.Sandbox,
                          timeout: float) -> evalctl.CheckResult:
    """A suite's own test command: only its exit status can be judged, and the detail
    says so."""
    ran = await sandbox.run(check["command"], timeout=timeout, merge_stderr=True)
    output = RUNNER_DURATION.sub("", ran.stdout)
    if ran.timed_out:
        return evalctl.CheckResult(False, f"tests timed out after {timeout:g}s\n{_tail(output)}")
    if ran.exit_code == 0:
        last = output.strip().splitlines()[-1] if output.strip() else "exit 0"
        return evalctl.CheckResult(True, f"{last} (custom command: judged by its exit status)")
    return evalctl.CheckResult(False, f"tests failed (exit {ran.exit_code})\n{_tail(output)}")


PARAMS = {
    "type": "object",
    "properties": {
        "tests": {"type": "array", "items": {"type": "string", "minLength": 1}, "minItems": 1,
                  "description": "The tests that count (pytest node ids or paths, e.g. "
                                 "tests/test_api.py::test_create, a benchmark's FAIL_TO_PASS "
                                 "and PASS_TO_PASS): only these run, and each must run and "
                                 "pass; a node id also names its parametrized cases. The "
                                 "detail lists each that did not pass or did not run. A "
                                 "file named here that the task gives nowhere (source, files, "
                                 "verify_files, verify_patch), and that the prompt does not "
                                 "ask the agent to write, stops the run before any task, exit "
                                 "2, at its line, with the nearest test path (a warning with "
                                 "`setup:`, which may make it; if it does not, the check is an "
                                 "error, not the agent's failure). Default: the whole suite "
                                 "pytest finds."},
        "trust_agent_conftest": {"type": "boolean",
                                 "description": "Run even when the agent created or changed a "
                                                "conftest.py (default false: that fails the "
                                                "check as suspected gaming)."},
        "python": {"type": "string", "minLength": 1,
                   "description": "The interpreter pytest runs under: a path in the workspace "
                                  "(the virtual environment setup made, .venv/bin/python) or "
                                  "an absolute path; pytest must be importable there. One the "
                                  "agent changed fails the check as suspected gaming; one "
                                  "nobody made is an error of the suite's, not a failure, "
                                  "and an absolute one missing here stops the run before "
                                  "any task (exit 2). Default: the interpreter evalctl runs "
                                  "on."},
        "command": {"type": "string", "minLength": 1,
                    "description": "A test command of the suite's own instead of evalctl's "
                                   "pytest run; then only its exit status is judged."},
        "timeout": {"type": "number", "exclusiveMinimum": 0,
                    "description": "Seconds (default 300)."},
    },
}
