"""The bwrap jail: each isolation property is demonstrated by running something inside.

The tests only look at processes and files they created: host pids of sandboxed processes are
learned through SO_PEERCRED on a unix socket in the workspace (the kernel translates the pid
into our PID namespace), or from the attempt's own cgroup.  Network tests use 127.0.0.1 only.
Every subprocess has a timeout.
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import secrets
import select
import shlex
import shutil
import socket
import stat
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from evalctl.plugins.sandboxes import bwrap_jail as bs

from .conftest import require_bwrap

pytestmark = pytest.mark.usefixtures(require_bwrap.__name__)

PY = sys.executable
SECRET = "sk-secret-do-not-leak-7f3a"
BASE_ENV = {"PATH": f"{os.path.dirname(PY)}:/usr/bin:/bin", "LANG": "C.UTF-8"}
HAS_CGROUPS = bs._machine_cgroups().version != 0


# --------------------------------------------------------------------------- fixtures/helpers


@dataclass
class Layout:
    """A run directory shaped like evalctl's: workspaces side by side, state beside them."""

    base: Path
    run: Path
    workspace: Path
    home: Path
    tmp: Path
    sibling: Path
    report: Path


def make_layout(base: Path) -> Layout:
    reports = base / "eval_reports"
    run = reports / "workspaces-20260101-000000"
    for task in ("task-a", "task-b"):
        (run / task).mkdir(parents=True)
        (run / ".state" / task / "home").mkdir(parents=True)
        (run / ".state" / task / "tmp").mkdir(parents=True)
        (run / ".seed" / task).mkdir(parents=True)
        (run / ".seed" / task / "seed.txt").write_text("seed")
    (run / ".ledgers").mkdir()
    (run / ".ledgers" / "task-b.jsonl").write_text('{"secret": "ledger"}\n')
    (run / ".cassettes").mkdir()  # the model exchanges a replay serves: the agent's own too
    (run / ".cassettes" / "task-a.jsonl").write_text('{"secret": "cassette"}\n')
    (run / "task-b" / "answer.txt").write_text("the sibling's answer")
    report = reports / "report.json"
    report.write_text("{}")
    return Layout(
        base=base,
        run=run,
        workspace=run / "task-a",
        home=run / ".state" / "task-a" / "home",
        tmp=run / ".state" / "task-a" / "tmp",
        sibling=run / "task-b",
        report=report,
    )


@pytest.fixture
def layout() -> Iterator[Layout]:
    """Outside /tmp, like evalctl's eval_reports/ (see test_workspace_under_host_tmp)."""
    base = Path(tempfile.mkdtemp(prefix="bwrap-sandbox-test-", dir="/var/tmp"))
    try:
        yield make_layout(base)
    finally:
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture
def make_jail(layout: Layout) -> Iterator[Callable[..., bs.BwrapJail]]:
    jails: list[bs.BwrapJail] = []

    def make(cgroups: bs.CgroupSetup | None = None, **options: Any) -> bs.BwrapJail:
        jail = bs.BwrapJail(
            layout.workspace, layout.home, layout.tmp, bs.BwrapOptions(**options), cgroups=cgroups
        )
        jail.open()
        jails.append(jail)
        return jail

    yield make
    for jail in jails:
        jail.close()


def start(jail: bs.BwrapJail, argv: list[str], env: Mapping[str, str],
          cwd: Path | None = None, outer_env: Mapping[str, str] | None = None,
          **popen: Any) -> subprocess.Popen[Any]:
    """Start `argv` in the jail as BwrapSandbox.run does (bwrap, its descriptors, then
    Launch.started); the outer process gets `outer_env` ({})."""
    launch = jail.launch(argv, dict(env), cwd or jail.workspace)
    try:
        proc = subprocess.Popen(launch.argv, env=dict(outer_env or {}),
                                pass_fds=launch.pass_fds, **popen)
        try:
            launch.started(proc.pid)
        except BaseException:
            proc.kill()
            proc.wait(timeout=10)
            launch.end()
            raise
        proc.launch = launch  # type: ignore[attr-defined]  # to end() once it is reaped
        return proc
    finally:
        launch.close()


def run_argv(jail: bs.BwrapJail, argv: list[str], env: Mapping[str, str], *,
             timeout: float = 60, outer_env: Mapping[str, str] | None = None,
             input: str | None = None) -> subprocess.CompletedProcess[str]:
    proc = start(jail, argv, env, outer_env=outer_env, stdin=subprocess.PIPE,
                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        out, err = proc.communicate(input, timeout=timeout)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
        proc.launch.end()  # type: ignore[attr-defined]
    return subprocess.CompletedProcess(argv, proc.returncode, out, err)


def run(
    jail: bs.BwrapJail,
    script: str,
    *,
    env: Mapping[str, str] | None = None,
    timeout: float = 60,
    outer_env: Mapping[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run a bash script in the jail's workspace; the outer process gets `outer_env` ({})."""
    return run_argv(jail, ["bash", "-c", script], BASE_ENV if env is None else env,
                    timeout=timeout, outer_env=outer_env)


def starttime(pid: int) -> int | None:
    """Field 22 of /proc/<pid>/stat: with the pid, identifies one process over time."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat.rsplit(")", 1)[1].split()[19])


def exists(pid: int, started: int | None) -> bool:
    return started is not None and starttime(pid) == started


REPORTER = """\
import os, socket, sys
# Tell the test our pid (it reads it with SO_PEERCRED), wait for its ack, become argv[2:].
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.connect(sys.argv[1])
s.recv(1)
s.close()
os.execvp(sys.argv[2], sys.argv[2:])
"""


class PidCollector:
    """Accepts connections on a unix socket; records each peer's host pid and start time."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.pids: list[tuple[int, int | None]] = []
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._sock.bind(str(path))
        self._sock.listen(64)
        self._sock.settimeout(0.1)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._sock.accept()
            except TimeoutError:
                continue
            with conn:
                raw = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
                pid = struct.unpack("3i", raw)[0]
                self.pids.append((pid, starttime(pid)))
                conn.sendall(b"k")

    def wait_for(self, count: int, timeout: float = 20) -> None:
        deadline = time.monotonic() + timeout
        while len(self.pids) < count and time.monotonic() < deadline:
            time.sleep(0.02)
        assert len(self.pids) >= count, f"only {len(self.pids)} of {count} reporters connected"

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self._sock.close()


@pytest.fixture
def collector(layout: Layout) -> Iterator[PidCollector]:
    (layout.workspace / "report.py").write_text(REPORTER)
    pids = PidCollector(layout.workspace / "pids.sock")
    yield pids
    pids.close()


class Listener:
    """A TCP listener on 127.0.0.1 that records what it receives."""

    def __init__(self) -> None:
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen(8)
        self._sock.settimeout(0.1)
        self.port = self._sock.getsockname()[1]
        self.received: list[bytes] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._sock.accept()
            except TimeoutError:
                continue
            with conn:
                conn.settimeout(2)
                with contextlib.suppress(OSError):
                    self.received.append(conn.recv(100))

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self._sock.close()


@pytest.fixture
def listener() -> Iterator[Listener]:
    srv = Listener()
    yield srv
    srv.close()


# --------------------------------------------------------------------------- probe and limits


def test_probe_succeeds_here_and_is_cached() -> None:
    assert bs.probe() is None
    hits = bs.probe.cache_info().hits
    assert bs.probe() is None
    assert bs.probe.cache_info().hits == hits + 1


def test_probe_reasons(tmp_path: Path) -> None:
    assert bs._probe_with(None) == (
        "bwrap not found; install the bubblewrap package (apt-get install bubblewrap)"
    )
    # A bwrap that fails the way it does when unprivileged user namespaces are disabled.
    fake = tmp_path / "bwrap"
    message = "bwrap: No permissions to create new namespace, likely because the kernel does not"
    fake.write_text(f"#!/bin/sh\necho '{message}' >&2\necho 'second line' >&2\nexit 1\n")
    fake.chmod(0o755)
    assert bs._probe_with(str(fake)) == message


def test_enforced_limits_on_this_machine() -> None:
    limits = bs.enforced_limits()
    print("\nenforced_limits():", json.dumps(limits, indent=1))
    assert set(limits) == {"processes", "memory", "file_size"}
    assert limits["file_size"] == "RLIMIT_FSIZE"
    setup = bs._machine_cgroups()
    if setup.version == 1:
        assert limits["processes"] == "cgroup v1 pids.max"
        assert limits["memory"] == "cgroup v1 memory.limit_in_bytes"
    elif setup.version == 2:
        assert limits["processes"] == "cgroup v2 pids.max"
        assert limits["memory"] == "cgroup v2 memory.max"


HYBRID_MOUNTINFO = """\
27 1 254:0 / / rw,relatime - ext4 /dev/vda rw
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
37 31 0:34 / /sys/fs/cgroup/freezer rw,relatime - cgroup cgroup rw,freezer
39 31 0:36 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
"""
HYBRID_CGROUP = "8:pids:/\n6:freezer:/\n4:memory:/process_api/abc\n0::/\n"
V2_MOUNTINFO = "30 23 0:26 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n"
V2_CGROUP = "0::/user.slice/user-1000.slice/session-2.scope\n"


def test_locate_cgroup_dirs_hybrid_and_pure_v2() -> None:
    v1, v2 = bs.locate_cgroup_dirs(HYBRID_MOUNTINFO, HYBRID_CGROUP)
    assert v1 == {
        "pids": Path("/sys/fs/cgroup/pids"),
        "memory": Path("/sys/fs/cgroup/memory/process_api/abc"),
        "freezer": Path("/sys/fs/cgroup/freezer"),
    }
    assert v2 == Path("/sys/fs/cgroup/unified")
    v1, v2 = bs.locate_cgroup_dirs(V2_MOUNTINFO, V2_CGROUP)
    assert v1 == {}
    assert v2 == Path("/sys/fs/cgroup/user.slice/user-1000.slice/session-2.scope")
    # A container whose cgroup2 mount's root is its own cgroup (no cgroup namespace).
    mountinfo = "30 23 0:26 /docker/ab /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n"
    assert bs.locate_cgroup_dirs(mountinfo, "0::/docker/ab\n")[1] == Path("/sys/fs/cgroup")


def test_detect_falls_back_to_rlimits_when_cgroups_unusable(tmp_path: Path) -> None:
    # A "cgroup2 mount" that is a plain directory: creating a child works, but it has no
    # pids.max, so it is not a cgroup; and a v1 mount point that does not exist.
    fake = tmp_path / "cg"
    fake.mkdir()
    (fake / "cgroup.controllers").write_text("pids memory\n")
    (fake / "cgroup.subtree_control").write_text("pids memory\n")
    mountinfo = f"30 23 0:26 / {fake} rw - cgroup2 cgroup2 rw\n"
    setup = bs.detect_cgroups(mountinfo, "0::/\n")
    assert setup.version == 0 and "pids.max missing" in setup.reason
    mountinfo = f"39 31 0:36 / {tmp_path / 'absent'} rw - cgroup cgroup rw,pids\n"
    setup = bs.detect_cgroups(mountinfo, "8:pids:/\n")
    assert setup.version == 0 and "cannot create a cgroup" in setup.reason
    assert not list(fake.glob("evalctl-probe-*"))  # probe children are removed

    limits = bs._describe_limits(setup)
    if os.geteuid() == 0:
        assert limits["processes"] == "rlimit RLIMIT_NPROC (not enforced for root)"
    assert limits["memory"].startswith("rlimit RLIMIT_AS")


# --------------------------------------------------------------------------- what to mount


def test_package_paths_from_pth_and_editable_finder(tmp_path: Path) -> None:
    site = tmp_path / "site-packages"
    src, core, plugins = tmp_path / "src", tmp_path / "repo" / "core", tmp_path / "repo" / "plugins"
    for directory in (site, src, core, plugins):
        directory.mkdir(parents=True)
    (site / "__editable___demo_0_1_finder.py").write_text(
        "import sys\n"
        f"MAPPING: dict[str, str] = {{'demo': '{core}', 'demo.plugins': '{plugins}'}}\n"
        "NAMESPACES: dict[str, list[str]] = {}\n"
        "raise SystemExit('the finder must be read, never run')\n"
    )
    (site / "demo.pth").write_text(
        f"# comment\n{src}\nimport __editable___demo_0_1_finder; "
        "__editable___demo_0_1_finder.install()\n"
    )
    assert bs._pth_paths(site / "demo.pth") == [str(src), str(core), str(plugins)]
    # And in this venv: evalctl (an editable install) and its judge plugin are found
    # without importing evalctl (which may not even import mid-refactor).
    found = bs.package_paths()
    print("\npackage_paths():", [str(p) for p in found])
    spec = __import__("importlib.util").util.find_spec("evalctl")
    if spec is not None:
        assert all(Path(p).resolve() in found for p in spec.submodule_search_locations or [])


def test_mount_order_and_pruning() -> None:
    mounts = [
        bs._Mount("rw", "/host/ws", Path("/data/ws")),
        bs._Mount("ro", "/data", Path("/data")),
        bs._Mount("ro", "/data/ws/ro", Path("/data/ws/ro")),  # re-protects inside rw
        bs._Mount("ro", "/data/lib", Path("/data/lib")),  # redundant under /data
        bs._Mount("symlink", "usr/bin", Path("/bin")),
    ]
    ordered = [(m.kind, str(m.dest)) for m in bs._order_mounts(mounts)]
    assert ordered == [
        ("ro", "/data"),
        ("symlink", "/bin"),
        ("rw", "/data/ws"),
        ("ro", "/data/ws/ro"),
    ]


def test_an_attempts_own_mounts_join_the_base_order_exactly_as_ordering_all_would(
        monkeypatch) -> None:
    """The base plan's share of the order is worked out once; joining an attempt's own
    read-write binds to it must give what ordering everything anew gives, whatever the
    trees (random ones, places shared and nested every way)."""
    import random

    chooser = random.Random(22)
    names = ["a", "b", "c"]

    def place() -> str:
        return "/" + "/".join(chooser.choice(names) for _ in range(chooser.randint(1, 3)))

    def mount(kinds: list[str]) -> bs._Mount:
        kind, dest = chooser.choice(kinds), place()
        source = dest if kind == "ro" and chooser.random() < 0.7 else "/host" + place()
        return bs._Mount(kind, source, Path(dest))

    anew = []  # the fallback: everything ordered again
    order_mounts = bs._order_mounts
    monkeypatch.setattr(bs, "_order_mounts", lambda mounts: anew.append(1) or order_mounts(mounts))
    for _ in range(3000):
        system = tuple(mount(["ro", "ro", "symlink", "rw"]) for _ in range(chooser.randint(0, 5)))
        code = tuple(mount(["ro"]) for _ in range(chooser.randint(0, 3)))
        both = [*system, *code]
        base = bs._BasePlan(system, code, (), kept=tuple(bs._kept_mounts(both)),
                            places=frozenset(str(m.dest) for m in both),
                            identity_ro=tuple(str(m.dest) for m in both if bs._identity_ro(m)))
        own = [mount(["rw"]) for _ in range(chooser.randint(1, 3))]
        assert bs._order_with_base(base, own) == order_mounts([*both, *own])
    assert 500 < 3000 - len(anew) < 2900  # both ways taken, often


# --------------------------------------------------------------------------- argv shape


def test_launch_argv_shape(make_jail: Callable[..., bs.BwrapJail], layout: Layout) -> None:
    jail = make_jail()
    launch = jail.launch(["echo", "hi"], {"FOO": "bar"}, layout.workspace)
    try:
        argv = launch.argv
        print("\nlaunch() argv:", argv)
        # On the host: bwrap itself, nothing in front of it.
        assert argv[0] == bs._find_bwrap()
        bwrap_args = argv
        for flag in (
            "--unshare-user",
            "--unshare-pid",
            "--unshare-ipc",
            "--unshare-uts",
            "--unshare-cgroup",
            "--unshare-net",
            "--die-with-parent",
            "--new-session",
            "--clearenv",
            "--disable-userns",
        ):
            assert flag in bwrap_args
        assert bwrap_args[bwrap_args.index("--cap-drop") + 1] == "ALL"
        # The descriptors bwrap inherits: the filter, where it reports, what it waits on.
        passed = {flag: int(bwrap_args[bwrap_args.index(flag) + 1])
                  for flag in ("--seccomp", "--info-fd", "--block-fd")}
        assert sorted(passed.values()) == sorted(launch.pass_fds)
        assert os.readlink(f"/proc/self/fd/{passed['--seccomp']}") == str(bs.seccomp_filter())
        # bubblewrap's own init is pid 1 (no --as-pid-1): no shell of ours in front.
        assert "--as-pid-1" not in bwrap_args
        assert bwrap_args[-3:] == ["--", "echo", "hi"]
        pairs = [tuple(bwrap_args[i + 1 : i + 3]) for i, a in enumerate(bwrap_args)
                 if a == "--setenv"]
        assert pairs == [("FOO", "bar"), ("HOME", "/home/agent"), ("TMPDIR", "/tmp")]
    finally:
        launch.close()
    assert all(not Path(f"/proc/self/fd/{fd}").exists() for fd in launch.pass_fds)
    with pytest.raises(ValueError):
        jail.launch(["true"], {}, layout.sibling)
    with pytest.raises(ValueError):
        jail.launch(["true"], {"A=B": "x"}, layout.workspace)
    unopened = bs.BwrapJail(layout.workspace, layout.home, layout.tmp, bs.BwrapOptions())
    with pytest.raises(bs.SandboxError):
        unopened.launch(["true"], {}, layout.workspace)


def test_refuses_read_only_path_that_exposes_the_run(layout: Layout) -> None:
    jail = bs.BwrapJail(
        layout.workspace, layout.home, layout.tmp, bs.BwrapOptions(ro_paths=(str(layout.base),))
    )
    with pytest.raises(bs.SandboxError, match="every workspace"):
        jail.open()
    assert jail.cgroup_dirs == {}  # a failed open() leaves nothing behind


# --------------------------------------------------------------------------- filesystem


CHECK_PATHS = """\
import json, os, sys
spec = json.loads(sys.argv[1])
print(json.dumps({
    "exists": {p: os.path.lexists(p) for p in spec["paths"]},
    "listing": {d: sorted(os.listdir(d)) if os.path.isdir(d) else None for d in spec["dirs"]},
}))
"""


def test_only_needed_paths_are_visible(
    make_jail: Callable[..., bs.BwrapJail], layout: Layout
) -> None:
    extra = layout.base / "shared-ro"
    extra.mkdir()
    (extra / "data.txt").write_text("shared")
    jail = make_jail(ro_paths=(str(extra),))
    host_home = Path.home()
    must_hide = [
        host_home / ".bashrc",
        host_home / ".cache",
        host_home / ".claude",
        host_home / ".npmrc",
        host_home / ".config",
        host_home / ".pyenv" / "shims",
        Path("/work/scratch"),
        Path("/work/main/.git"),
        Path("/work/main/tests"),
        Path("/work/main/pyproject.toml"),
        layout.sibling,
        layout.sibling / "answer.txt",
        layout.run / ".ledgers",
        layout.run / ".cassettes",
        layout.run / ".seed",
        layout.run / ".state",
        layout.home,
        layout.tmp,
        layout.report,
        Path("/etc/shadow"),
        Path("/etc/gshadow"),
        Path("/etc/ssh"),
        Path("/etc/ssl/private"),
        Path("/etc/npmrc"),
        Path("/etc/pip.conf"),
        Path("/etc/environment"),
        Path("/etc/sudoers"),
        Path("/var/lib"),
        Path("/var/log"),
        Path("/var/cache"),
        Path("/run"),
        Path("/sys"),
        Path("/opt"),
        Path("/srv"),
        Path("/mnt"),
        Path("/sys/fs/cgroup"),
        Path("/boot"),
    ]
    must_show = [
        layout.workspace,
        Path("/etc/resolv.conf"),
        Path("/etc/passwd"),
        Path("/etc/hosts"),
        Path("/etc/ld.so.cache"),
        Path("/etc/ssl/certs"),
        Path("/usr/bin/env"),
        Path("/bin/sh"),
        Path(sys.prefix),
        Path(sys.base_prefix),
        Path(os.path.realpath(PY)),
        extra / "data.txt",
        *bs.package_paths(),
    ]
    dirs = [layout.run, Path("/work"), Path("/work/main"), host_home, Path("/home"), Path("/")]
    spec = {"paths": [str(p) for p in must_hide + must_show], "dirs": [str(d) for d in dirs]}
    (layout.workspace / "check.py").write_text(CHECK_PATHS)
    done = run(jail, f"python check.py '{json.dumps(spec)}'")
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout)
    print("\nlistings inside:", json.dumps(seen["listing"], indent=1))
    assert [p for p in map(str, must_hide) if seen["exists"][p]] == []
    assert [p for p in map(str, must_show) if not seen["exists"][p]] == []

    listing = seen["listing"]
    assert listing[str(layout.run)] == ["task-a"]  # no sibling, .ledgers, .cassettes, .seed...
    assert listing["/home"] == ["agent"]
    # /root and /work only hold the path leading to what Python needs.
    needed = {p for p in bs.python_paths() + [extra]}
    for top in (host_home, Path("/work")):
        expected = sorted({p.relative_to(top).parts[0] for p in needed if p.is_relative_to(top)})
        # None: not there at all, as nothing Python needs lives below it on this machine
        assert listing[str(top)] == (expected or None), top
    assert set(listing["/"]) <= {
        "bin",
        "dev",
        "etc",
        "home",
        "lib",
        "lib32",
        "lib64",
        "libx32",
        "proc",
        "root",
        "sbin",
        "tmp",
        "usr",
        "work",
    } | {Path(str(p)).parts[1] for p in needed | {layout.workspace}}


def test_only_workspace_home_and_tmp_are_writable(
    make_jail: Callable[..., bs.BwrapJail], layout: Layout
) -> None:
    jail = make_jail()
    (layout.workspace / "seeded.txt").write_text("seed")
    writable = [
        f"{layout.workspace}/new.txt",
        "seeded.txt",
        "/home/agent/home.txt",
        "/tmp/tmp.txt",
        "/dev/shm/x",
    ]
    read_only = [
        "/new.txt",
        "/usr/new.txt",
        "/etc/new.txt",
        "/etc/passwd",
        "/etc/ssl/certs/x",
        f"{sys.prefix}/new.txt",
        f"{sys.base_prefix}/new.txt",
        "/work/main/core/new.txt",
        f"{Path.home()}/new.txt",
        "/home/new.txt",
        f"{layout.run}/new.txt",
        "/proc/new.txt",
    ]
    script = "\n".join(
        [
            f'( echo data >> "{p}" ) 2>/dev/null && echo "WROTE {p}" || echo "DENIED {p}"'
            for p in writable + read_only
        ]
        + ['echo "HOME=$HOME TMPDIR=$TMPDIR"', "mkdir -p sub/dir && touch sub/dir/f && rm -r sub"]
    )
    done = run(jail, script)
    assert done.returncode == 0, done.stderr
    print("\n" + done.stdout)
    for path in writable:
        assert f"WROTE {path}" in done.stdout
    for path in read_only:
        assert f"DENIED {path}" in done.stdout
    assert "HOME=/home/agent TMPDIR=/tmp" in done.stdout
    # The writes landed in the attempt's own directories on the host.
    assert (layout.workspace / "new.txt").read_text() == "data\n"
    assert (layout.workspace / "seeded.txt").read_text() == "seeddata\n"
    assert (layout.home / "home.txt").read_text() == "data\n"
    assert (layout.tmp / "tmp.txt").read_text() == "data\n"
    assert (layout.workspace / "new.txt").stat().st_uid == os.geteuid()
    assert not (layout.run / "new.txt").exists()


def test_a_home_that_is_the_tmpdir_is_one_directory_inside_too(layout: Layout) -> None:
    """The graders' HOME is their TMPDIR (one directory): inside, /home/agent is /tmp, so
    what is written through either lands in that directory once, and nothing else is
    writable that was not before."""
    jail = bs.BwrapJail(layout.workspace, layout.tmp, layout.tmp, bs.BwrapOptions())
    with jail:
        done = run(jail, 'echo one > ~/a && echo two > /tmp/b && cat /tmp/a ~/b && '
                         'cd ~ && pwd -P && echo "HOME=$HOME TMPDIR=$TMPDIR" && '
                         '( echo x > /home/other ) 2>/dev/null || echo DENIED')
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["one", "two", "/tmp", "HOME=/home/agent", "TMPDIR=/tmp",
                                   "DENIED"]
    # Beside them only the empty directories bwrap makes for mounts below /tmp (evalctl's
    # code, when it lives under the host's /tmp, as in CI).
    made = {p.name for p in layout.tmp.iterdir()} - {"a", "b"}
    assert (layout.tmp / "a").read_text() == "one\n" and (layout.tmp / "b").read_text() == "two\n"
    assert all((layout.tmp / name).is_dir() and
               not any(found.is_file() for found in (layout.tmp / name).rglob("*"))
               for name in made), made
    assert not any(layout.home.iterdir())


def test_read_only_paths_cannot_be_changed_removed_or_replaced(layout: Layout) -> None:
    """The graders' sandbox keeps the protected files read-only (SandboxRequest.read_only):
    code a check runs cannot rewrite a protected test and put it back before the
    comparison after the checks. A bound file cannot be written, truncated, removed,
    renamed or replaced; a bound directory gains nothing; the rest stays writable. A
    path that is not there, a link, or one outside the workspace binds nothing."""
    (layout.workspace / "tests").mkdir()
    (layout.workspace / "tests" / "test_a.py").write_text("assert True\n")
    (layout.workspace / "src" / "deep").mkdir(parents=True)
    (layout.workspace / "src" / "deep" / "test_b.py").write_text("assert True\n")
    (layout.workspace / "conftest.py").write_text("# seeded\n")
    (layout.workspace / "calc.py").write_text("x = 1\n")
    (layout.workspace / "link").symlink_to("/etc")
    jail = bs.BwrapJail(layout.workspace, layout.tmp, layout.tmp, bs.BwrapOptions(),
                        read_only=("tests", "conftest.py", "src/deep/test_b.py", "gone.py",
                                   "link", "../task-b"))
    attempts = [
        "echo x >> conftest.py", ": > conftest.py", "rm -f conftest.py",
        "mv calc.py conftest.py", "chmod 777 conftest.py", "touch -d @0 conftest.py",
        "echo x > tests/test_a.py", "rm -rf tests", "touch tests/test_b.py",
        "mkdir tests/sub", "mv tests tests2",
        # The directories above a protected file cannot be moved aside with it inside.
        "mv src src2", "mv src/deep src/deep2", "rm -rf src",
        "echo x > src/deep/test_b.py",
    ]
    script = "\n".join(f'( {a} ) 2>/dev/null && echo "DID {a}" || echo "REFUSED {a}"'
                       for a in attempts)
    with jail:
        done = run(jail, script + "\necho y >> calc.py && touch new.py src/deep/new.py && "
                                  "echo OTHERS")
    assert done.returncode == 0, done.stderr
    for attempt in attempts:
        assert f"REFUSED {attempt}" in done.stdout, done.stdout
    assert done.stdout.rstrip().endswith("OTHERS")
    assert (layout.workspace / "conftest.py").read_text() == "# seeded\n"
    assert sorted(p.name for p in (layout.workspace / "tests").iterdir()) == ["test_a.py"]
    assert (layout.workspace / "calc.py").read_text() == "x = 1\ny\n"
    assert (layout.sibling / "answer.txt").read_text() == "the sibling's answer"
    whole = bs.BwrapJail(layout.workspace, layout.tmp, layout.tmp, bs.BwrapOptions(),
                         read_only=(".",))
    with whole:
        done = run(whole, '( echo x >> calc.py ) 2>/dev/null || echo REFUSED; '
                          '( touch new2.py ) 2>/dev/null || echo REFUSED; echo y > /tmp/ok')
    assert done.stdout.split() == ["REFUSED", "REFUSED"], done.stdout + done.stderr
    assert (layout.tmp / "ok").read_text() == "y\n"


def test_workspace_under_host_tmp(tmp_path: Path) -> None:
    """A run directory under the host's /tmp still works: the path to the workspace is
    then made inside the jail's own tmp (mounted at /tmp), read-only, so nothing is
    written beside the workspace, in the attempt's tmp or the real run directory."""
    layout = make_layout(tmp_path)
    jail = bs.BwrapJail(layout.workspace, layout.home, layout.tmp, bs.BwrapOptions())
    with jail:
        done = run(jail, f"touch new.txt && ls -A {layout.run} && touch /tmp/mine.txt && "
                         "! touch ../parent.txt 2>/dev/null")
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["task-a"]
    assert (layout.workspace / "new.txt").exists()
    assert (layout.tmp / "mine.txt").exists()  # the rest of /tmp is the attempt's
    assert not (layout.run / "parent.txt").exists()
    assert not (layout.tmp / layout.run.relative_to("/tmp") / "parent.txt").exists()


def test_the_path_to_a_workspace_under_tmp_cannot_be_led_out_of_the_sandbox(
        tmp_path: Path) -> None:
    """Found by an attacker round: a command replaced a directory on the way to the
    workspace, inside its own /tmp, with a link to /oldroot/<host path>; the next
    command's bubblewrap, making the workspace's mount point, followed it and made the
    rest of the path on the host, as the harness's user."""
    layout = make_layout(tmp_path)
    target = Path(tempfile.mkdtemp(prefix="bwrap-target-", dir="/var/tmp"))
    try:
        first = layout.run.relative_to("/tmp").parts[0]
        jail = bs.BwrapJail(layout.workspace, layout.home, layout.tmp, bs.BwrapOptions())
        with jail:
            attack = run(jail, f"mv /tmp/{first} /tmp/moved; "
                               f"rm -rf /tmp/{first}; ln -s /oldroot{target} /tmp/{first}; "
                               f"mkdir /tmp/{first}/x; "
                               f"ls -ld /tmp/{first}")
            assert "Device or resource busy" in attack.stderr  # a mount point
            assert "Read-only file system" in attack.stderr
            assert attack.stdout.startswith("d")  # still the directory it was
            again = run(jail, "pwd")
        assert again.returncode == 0, again.stderr
        assert again.stdout.strip() == str(layout.workspace)
        assert list(target.iterdir()) == []
    finally:
        shutil.rmtree(target, ignore_errors=True)


def test_a_link_on_the_way_to_a_mount_point_is_refused_not_followed(tmp_path: Path) -> None:
    layout = make_layout(tmp_path)
    first = layout.run.relative_to("/tmp").parts[0]
    (layout.tmp / first).symlink_to(tmp_path)
    jail = bs.BwrapJail(layout.workspace, layout.home, layout.tmp, bs.BwrapOptions())
    with pytest.raises(bs.SandboxError, match="is not a directory of its own"):
        jail.open()


# --------------------------------------------------------------------------- identity


def test_namespaces_identity_and_no_capabilities(make_jail: Callable[..., bs.BwrapJail]) -> None:
    jail = make_jail()
    names = ["user", "mnt", "pid", "ipc", "uts", "net", "cgroup"]
    script = "\n".join(
        [
            "echo uid=$(id -u) gid=$(id -g) user=$(id -un) host=$(hostname)",
            "grep -E '^(Cap(Inh|Prm|Eff|Bnd|Amb)|NoNewPrivs):' /proc/self/status",
            "unshare -U true 2>/dev/null && echo NESTED_USERNS=yes || echo NESTED_USERNS=no",
            "unshare -r true 2>/dev/null && echo NESTED_ROOT=yes || echo NESTED_ROOT=no",
            "echo SID=$(ps -o sid= -p $$ | tr -d ' ') PID=$$",
            *[f"echo NS {n} $(readlink /proc/self/ns/{n})" for n in names],
        ]
    )
    done = run(jail, script)
    assert done.returncode == 0, done.stderr
    out = done.stdout
    print("\n" + out)
    assert "uid=1000 gid=1000 user=agent host=sandbox" in out
    for cap in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"):
        assert f"{cap}:\t0000000000000000" in out
    assert "NoNewPrivs:\t1" in out
    assert "NESTED_USERNS=no" in out and "NESTED_ROOT=no" in out
    sid, pid = (line for line in out.splitlines() if line.startswith("SID=")).__next__().split()
    # --new-session: the session is led by the sandbox's pid 1, not by anything outside.
    assert sid == "SID=1" and pid == "PID=2"
    inside = {
        line.split()[1]: line.split()[2] for line in out.splitlines() if line.startswith("NS ")
    }
    for name in names:
        assert inside[name] != os.readlink(f"/proc/self/ns/{name}"), name


# --------------------------------------------------------------------------- python inside


SAMPLE_TESTS = """\
import multiprocessing
import os
import ssl


def test_tmp_path(tmp_path):
    (tmp_path / "x").write_text("1")
    assert str(tmp_path).startswith("/tmp/")


def test_multiprocessing_needs_dev_shm():
    with multiprocessing.Pool(2) as pool:
        assert pool.map(abs, [-1, -2]) == [1, 2]


def test_tls_context_loads_system_certificates():
    assert ssl.create_default_context().cert_store_stats()["x509_ca"] > 0


def test_identity():
    assert os.getuid() == 1000 and os.environ["HOME"] == "/home/agent"
"""


def test_python_and_pytest_work_inside(
    make_jail: Callable[..., bs.BwrapJail], layout: Layout
) -> None:
    jail = make_jail()
    (layout.workspace / "tests").mkdir()
    (layout.workspace / "tests" / "test_sample.py").write_text(SAMPLE_TESTS)
    done = run(jail, "python -m pytest -q tests", timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "4 passed" in done.stdout
    assert (layout.tmp / "pytest-of-agent").is_dir()  # pytest's basetemp went to the jail's tmp

    probe_evalctl = (
        "import importlib.util, importlib.metadata as m, json; "
        "s = importlib.util.find_spec('evalctl'); "
        "print(json.dumps([list(s.submodule_search_locations), m.version('evalctl')]))"
    )
    done = run(jail, f'python -c "{probe_evalctl}"')
    assert done.returncode == 0, done.stderr
    locations, version = json.loads(done.stdout)
    assert locations and all(Path(p) in bs.package_paths() for p in locations)
    assert version


# --------------------------------------------------------------------------- environment


ENV_PROBE = """\
echo '== /proc/*/environ'; cat /proc/*/environ 2>/dev/null | tr '\\0' '\\n'
echo '== ps eww'; ps eww -e
echo '== /proc/1/environ'; tr '\\0' '\\n' < /proc/1/environ
echo "== /proc/$PPID/environ (PPID)"; tr '\\0' '\\n' < /proc/$PPID/environ
echo '== /proc/1/cmdline'; tr '\\0' ' ' < /proc/1/cmdline; echo
echo '== env'; env
"""


def test_environment_is_exactly_env_and_no_secret_leaks(
    make_jail: Callable[..., bs.BwrapJail], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", SECRET)
    jail = make_jail()
    env = {**BASE_ENV, "VISIBLE": "marker-visible"}
    done = run(jail, ENV_PROBE, env=env, outer_env={})
    assert done.returncode == 0, done.stderr
    assert SECRET not in done.stdout + done.stderr
    assert "marker-visible" in done.stdout  # the probes do read environments
    assert "ANTHROPIC_API_KEY" not in done.stdout
    # pid 1 inside is bubblewrap's init, started with no environment at all.
    section = done.stdout.split("== /proc/1/environ\n", 1)[1].split("==", 1)[0]
    assert section == ""
    assert done.stdout.split("== /proc/1/cmdline\n", 1)[1].startswith(f"{bs._find_bwrap()} ")

    script = "import json, os; print(json.dumps(dict(os.environ)))"
    done = run_argv(jail, [PY, "-I", "-c", script], env)
    seen = json.loads(done.stdout)
    seen.pop("LC_CTYPE", None)  # Python's own locale coercion (PEP 538) adds it
    expected = {**env, "HOME": "/home/agent", "TMPDIR": "/tmp", "PWD": str(jail.workspace)}
    assert seen == expected  # bwrap adds PWD after --chdir; nothing else


def test_bwrap_started_with_an_environment_is_refused(
    make_jail: Callable[..., bs.BwrapJail], monkeypatch: pytest.MonkeyPatch, layout: Layout
) -> None:
    """A caller that forgets env={} for bwrap: its pid 1 (a fork of bwrap) would show that
    environment, a secret of the harness's among it, at /proc/1/environ inside. The jail
    refuses to let such a sandbox run anything."""
    monkeypatch.setenv("ANTHROPIC_API_KEY", SECRET)
    jail = make_jail()
    with pytest.raises(bs.SandboxError, match="must get none"):
        run(jail, "touch ran; tr '\\0' '\\n' < /proc/1/environ > seen", outer_env=dict(os.environ))
    assert not (layout.workspace / "ran").exists()
    assert not jail._running  # its pid 1 was killed and reaped


# --------------------------------------------------------------------------- processes


ESCAPES = """\
R="python report.py $PWD/pids.sock"
setsid -f $R sleep 300
nohup $R sleep 301 >/dev/null 2>&1 &
( trap '' HUP TERM; exec $R sleep 302 ) &
python -c '
import os, sys
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        os.execvp("python", ["python", "report.py", sys.argv[1], "sleep", "303"])
    os._exit(0)
os.wait()
' $PWD/pids.sock
disown -a
for i in $(seq 400); do [ -e go ] && exit 0; sleep 0.05; done
exit 3
"""


def test_no_process_outlives_its_command(
    make_jail: Callable[..., bs.BwrapJail], layout: Layout, collector: PidCollector
) -> None:
    jail = make_jail()
    proc = start(jail, ["bash", "-c", ESCAPES], BASE_ENV, stdout=subprocess.PIPE,
                 stderr=subprocess.PIPE)
    try:
        collector.wait_for(4)
        learned = list(collector.pids)
        assert all(exists(pid, started) for pid, started in learned)  # really running now
        (layout.workspace / "go").touch()
        _, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
        proc.launch.end()  # as BwrapSandbox.run does before the command counts as done
    assert proc.returncode == 0, err
    survivors = [pid for pid, started in learned if exists(pid, started)]
    print(f"\nescape attempts (host pids) {[p for p, _ in learned]}; survivors {survivors}")
    assert survivors == []
    for path in jail.cgroup_dirs.values():
        assert (path / "cgroup.procs").read_text().split() == []


def test_end_kills_what_the_command_left_and_reaps_its_pid_1(
    make_jail: Callable[..., bs.BwrapJail], layout: Layout, collector: PidCollector
) -> None:
    """bwrap's outer process exits with the command; the sandbox's pid 1 (bubblewrap's
    init) waits on for the daemon. Launch.end() kills it, which ends the daemon with its
    PID namespace, and reaps it: as this process's orphan (it is their subreaper), it is
    not left as a zombie for anyone else."""
    jail = make_jail()
    script = ("python report.py $PWD/pids.sock sleep 300 &\n"
              "for i in $(seq 400); do [ -e go ] && exit 0; sleep 0.05; done; exit 3")
    proc = start(jail, ["bash", "-c", script], BASE_ENV,
                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        collector.wait_for(1)
        init = proc.launch.child_pid
        init_started = starttime(init)
        (layout.workspace / "go").touch()
        assert proc.wait(timeout=30) == 0  # the command has ended; its daemon runs on
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
    daemon, daemon_started = collector.pids[0]
    assert exists(init, init_started)  # alive, or a zombie that only this process may reap
    assert proc.launch.end()
    assert not exists(daemon, daemon_started)
    assert not exists(init, init_started)  # reaped, not a zombie
    assert not jail._running
    assert proc.launch.end()  # idempotent


def test_killing_the_wrapper_kills_the_sandbox(
    make_jail: Callable[..., bs.BwrapJail], layout: Layout, collector: PidCollector
) -> None:
    """--die-with-parent (and the PID namespace): SIGKILL to the process we spawned is enough."""
    jail = make_jail()
    proc = start(jail, ["bash", "-c", "python report.py $PWD/pids.sock sleep 300 & wait"],
                 BASE_ENV, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        collector.wait_for(1)
    finally:
        proc.kill()
        proc.wait(timeout=10)
    pid, started = collector.pids[0]
    deadline = time.monotonic() + 5
    while exists(pid, started) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert not exists(pid, started)


def test_exit_status_and_output_pass_through(make_jail: Callable[..., bs.BwrapJail]) -> None:
    jail = make_jail()
    done = run(jail, "echo out; echo err >&2; exit 42")
    assert (done.returncode, done.stdout, done.stderr) == (42, "out\n", "err\n")
    killed = run(jail, "kill -9 $$")
    assert killed.returncode == 128 + 9  # a signal death reads like a shell's 128+N
    piped = run_argv(jail, ["cat"], BASE_ENV, input="stdin reaches the command", timeout=30)
    assert piped.stdout == "stdin reaches the command"


@pytest.mark.skipif(not HAS_CGROUPS, reason="no writable cgroup on this machine")
def test_commands_do_not_accumulate_process_charges(
    make_jail: Callable[..., bs.BwrapJail],
) -> None:
    """With bwrap's own pid 1, each command left a zombie for the host's init to reap, holding
    one pids charge: 14 commands exhausted max_processes=16.  With SANDBOX_INIT, none."""
    jail = make_jail(max_processes=16)
    pids = jail.cgroup_dirs.get("pids", jail.cgroup_dirs.get("unified"))
    assert pids is not None
    for _ in range(40):
        done = run(jail, "sleep 30 & (sleep 30 &) ; true", timeout=30)
        assert done.returncode == 0, done.stderr
        assert bs._read(pids / "pids.current").strip() == "0"


@pytest.mark.skipif(not HAS_CGROUPS, reason="no writable cgroup on this machine")
def test_close_kills_a_running_attempt_and_removes_its_cgroups(
    layout: Layout, collector: PidCollector
) -> None:
    jail = bs.BwrapJail(layout.workspace, layout.home, layout.tmp, bs.BwrapOptions())
    jail.open()
    cgroups = jail.cgroup_dirs
    assert cgroups and all(path.is_dir() for path in cgroups.values())
    script = "R='python report.py pids.sock'; setsid -f $R sleep 300; $R sleep 301"
    proc = start(jail, ["bash", "-c", script], BASE_ENV, stdout=subprocess.DEVNULL,
                 stderr=subprocess.DEVNULL)
    try:
        collector.wait_for(2)
        started = time.monotonic()
        jail.close()
        print(f"\nclose() took {1000 * (time.monotonic() - started):.1f} ms")
        proc.wait(timeout=10)
    finally:
        jail.close()
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
    # bwrap, outside the cgroups, saw the sandbox's pid 1 killed and reported it as a
    # shell would (128 + SIGKILL).
    assert proc.returncode == 128 + 9
    assert [pid for pid, started in collector.pids if exists(pid, started)] == []
    # Empty, and kept for the next attempt until the process ends.
    assert all((path / "cgroup.procs").read_text() == "" for path in cgroups.values())
    bs._CGROUP_POOL.drain()
    assert not any(path.exists() for path in cgroups.values())


@pytest.mark.skipif(not HAS_CGROUPS, reason="no writable cgroup on this machine")
def test_the_next_attempt_reuses_empty_cgroups_with_the_same_limits(layout: Layout) -> None:
    def jail(**limits: int) -> bs.BwrapJail:
        made = bs.BwrapJail(layout.workspace, layout.home, layout.tmp,
                            bs.BwrapOptions(**limits))
        made.open()
        return made

    bs._CGROUP_POOL.drain()
    first = jail(max_processes=40)
    cgroups = first.cgroup_dirs
    first.close()
    second = jail(max_processes=40)
    other = jail(max_processes=41)  # other limits: cgroups of its own
    try:
        assert second.cgroup_dirs == cgroups
        assert other.cgroup_dirs != cgroups
        limit = cgroups.get("pids", cgroups.get("unified"))
        if limit is not None and (limit / "pids.max").exists():
            assert (limit / "pids.max").read_text().strip() == "40"
        done = run(second, "echo ran", timeout=30)
        assert done.stdout == "ran\n", done.stderr
    finally:
        second.close()
        other.close()
        bs._CGROUP_POOL.drain()
    assert not any(path.exists() for path in cgroups.values())


# --------------------------------------------------------------------------- network


@pytest.mark.parametrize("network", [False, True])
def test_network(make_jail: Callable[..., bs.BwrapJail], listener: Listener, network: bool) -> None:
    jail = make_jail(network=network)
    done = run(jail, f"echo hi > /dev/tcp/127.0.0.1/{listener.port}", timeout=30)
    time.sleep(0.2)
    if network:
        assert done.returncode == 0, done.stderr
        assert b"hi\n" in listener.received
    else:
        assert done.returncode != 0
        assert "Connection refused" in done.stderr or "Network is unreachable" in done.stderr
        assert listener.received == []
        lo = run(jail, "cat /proc/net/dev | tail -n +3 | cut -d: -f1 | tr -d ' '")
        assert lo.stdout.split() == ["lo"]  # only a loopback of its own


# --------------------------------------------------------------------------- limits


FORK_COUNT = """\
import os, time
count = 0
for _ in range(2000):
    try:
        pid = os.fork()
    except OSError:
        continue
    if pid == 0:
        time.sleep(30)
        os._exit(0)
    count += 1
print("forked", count, flush=True)
"""


def _sample_pids_current(jail: bs.BwrapJail, stop: threading.Event, peak: list[int]) -> None:
    current = jail.cgroup_dirs.get("pids", jail.cgroup_dirs.get("unified", Path("/nonexistent")))
    while not stop.is_set():
        with_procs = bs._read(current / "pids.current").strip()
        if with_procs:
            peak.append(int(with_procs))
        time.sleep(0.01)


@pytest.mark.skipif(
    "pids" not in bs._machine_cgroups().controllers, reason="no pids cgroup: see rlimit test"
)
def test_fork_bomb_stays_under_max_processes(
    make_jail: Callable[..., bs.BwrapJail], layout: Layout
) -> None:
    jail = make_jail(max_processes=64)
    (layout.workspace / "forks.py").write_text(FORK_COUNT)
    stop, peak = threading.Event(), [0]
    sampler = threading.Thread(target=_sample_pids_current, args=(jail, stop, peak), daemon=True)
    sampler.start()
    try:
        precise = run(jail, "python forks.py", timeout=60)
    finally:
        stop.set()
        sampler.join(timeout=5)
    forked = int(precise.stdout.split()[-1])
    # The sandbox's pid 1 and bash/python take 2 of the 64 (bwrap's outer process, on
    # the host, is not counted).
    assert 50 <= forked <= 64 - 2
    assert max(peak) <= 64
    assert (jail.cgroup_dirs["pids"] / "pids.current").read_text().strip() == "0"


MEMORY_HOG = """\
import sys
chunks = []
for step in range(1, 129):  # up to 8 GiB in 64 MiB steps, each page touched
    try:
        chunks.append(b"x" * (64 << 20))
    except MemoryError:
        print("MemoryError after", (step - 1) * 64, "MiB", flush=True)
        sys.exit(7)
    print("allocated", step * 64, flush=True)
print("allocated everything", flush=True)
"""


@pytest.mark.parametrize("mode", ["machine", "rlimits"])
def test_memory_hog_is_stopped(
    make_jail: Callable[..., bs.BwrapJail], layout: Layout, mode: str
) -> None:
    jail = make_jail(memory_mb=256, cgroups=bs.NO_CGROUPS if mode == "rlimits" else None)
    (layout.workspace / "hog.py").write_text(MEMORY_HOG)
    done = run(jail, "python hog.py; echo rc=$?", timeout=120)
    lines = done.stdout.splitlines()
    allocated = [
        int(line.split()[1])
        for line in lines
        if line.startswith("allocated ") and line.split()[1].isdigit()
    ]
    print(
        f"\n{mode} ({jail.limits['memory']}): last lines {lines[-2:]} {done.stderr.strip()[-80:]}"
    )
    assert "allocated everything" not in done.stdout
    assert max(allocated, default=0) <= 256
    if "cgroup" in jail.limits["memory"]:
        assert lines[-1] == "rc=137"  # SIGKILL from the cgroup's OOM killer
        memory = jail.cgroup_dirs.get("memory")
        if memory is not None:
            assert "oom_kill 1" in bs._read(memory / "memory.oom_control")
    else:
        assert lines[-1] == "rc=7" and "MemoryError" in done.stdout


@pytest.mark.parametrize("mode", ["machine", "rlimits"])
def test_file_size_limit(make_jail: Callable[..., bs.BwrapJail], layout: Layout, mode: str) -> None:
    jail = make_jail(file_size_mb=16, cgroups=bs.NO_CGROUPS if mode == "rlimits" else None)
    script = (
        "truncate -s 2G big; echo truncate=$?\n"
        "dd if=/dev/zero of=big2 bs=1M count=64 status=none; echo dd=$?\n"
        "python -c \"open('big3', 'wb').write(b'x' * (32 << 20))\"; echo python=$?\n"
        "head -c 8M /dev/zero > small && echo small=ok\n"
    )
    done = run(jail, script)
    print("\n" + done.stdout + done.stderr)
    # Beyond the limit a writer gets SIGXFSZ, which ends it unless it ignores the signal
    # (Python does, and then gets EFBIG). No core file: RLIMIT_CORE is 0.
    assert "File size limit exceeded" in done.stderr and "core dumped" not in done.stderr
    assert "truncate=153" in done.stdout and "dd=153" in done.stdout  # 128 + SIGXFSZ
    assert "OSError: [Errno 27] File too large" in done.stderr and "python=1" in done.stdout
    assert "small=ok" in done.stdout
    for name in ("big", "big2", "big3"):
        assert (layout.workspace / name).stat().st_size <= 16 << 20


def test_a_lower_file_size_limit_of_the_users_own_stays(layout: Layout) -> None:
    """The file size limit is set from the host (prlimit): one the user's shell already
    holds lower than file_size_mb is kept, not raised (as root it could be)."""
    script = f"""
import resource, subprocess, sys
from pathlib import Path
from evalctl.plugins.sandboxes import bwrap_jail as bs
resource.setrlimit(resource.RLIMIT_FSIZE, (8 << 20, 8 << 20))
jail = bs.BwrapJail(Path({str(layout.workspace)!r}), Path({str(layout.home)!r}),
                    Path({str(layout.tmp)!r}), bs.BwrapOptions(file_size_mb=16),
                    cgroups=bs.NO_CGROUPS)
jail.open()
launch = jail.launch(["bash", "-c", "ulimit -S -f; ulimit -H -f"], {{"PATH": "/usr/bin:/bin"}},
                     jail.workspace)
proc = subprocess.Popen(launch.argv, env={{}}, pass_fds=launch.pass_fds,
                        stdout=subprocess.PIPE, text=True)
launch.started(proc.pid)
launch.close()
print(proc.communicate()[0], end="")
launch.end()
jail.close()
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=60)
    assert done.stdout.split() == ["8192", "8192"], done.stdout + done.stderr  # KiB, in bash


def test_rlimit_fallback_without_cgroups(
    make_jail: Callable[..., bs.BwrapJail], layout: Layout
) -> None:
    """What a machine without writable cgroups gets; RLIMIT_NPROC does not hold for root."""
    jail = make_jail(cgroups=bs.NO_CGROUPS, max_processes=64, memory_mb=512, file_size_mb=16)
    assert jail.cgroup_dirs == {}
    (layout.workspace / "forks.py").write_text(FORK_COUNT.replace("range(2000)", "range(200)"))
    limits = run(jail, "cat /proc/self/limits; python forks.py", timeout=60)
    assert limits.returncode == 0, limits.stderr
    assert "Max processes             64" in limits.stdout
    assert f"Max address space         {512 << 20}" in limits.stdout
    assert f"Max file size             {16 << 20}" in limits.stdout
    forked = int(limits.stdout.split()[-1])
    print(f"\nrlimit fallback {jail.limits}: forked {forked} of 200 with RLIMIT_NPROC=64")
    if os.geteuid() == 0:
        assert jail.limits["processes"] == "rlimit RLIMIT_NPROC (not enforced for root)"
        assert forked == 200  # the kernel exempts uid 0 (INIT_USER) from RLIMIT_NPROC
    else:
        assert forked < 64


# --------------------------------------------------------------------------- timing


def _timed(argv: list[str], timeout: float = 10) -> float:
    """Wall time of one run, waiting on a pidfd (Popen.wait(timeout) polls with back-off)."""
    started = time.perf_counter()
    proc = subprocess.Popen(argv, env={}, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    pidfd = os.pidfd_open(proc.pid)
    try:
        poller = select.poll()
        poller.register(pidfd, select.POLLIN)
        if not poller.poll(timeout * 1000):
            proc.kill()
        proc.wait(timeout=timeout)
    finally:
        os.close(pidfd)
    assert proc.returncode == 0
    return time.perf_counter() - started


def test_machine_wide_proc_files_are_read_only(make_jail: Callable[..., bs.BwrapJail]) -> None:
    """Found by an attacker: as root, kernel.core_pattern (a program the kernel runs as host
    root on a crash) and other sysctls were writable from inside."""
    jail = make_jail()
    before = Path("/proc/sys/vm/swappiness").read_text()
    done = run(jail, "echo 17 > /proc/sys/vm/swappiness; echo swappiness=$?; "
                     "echo '|/tmp/x %p' > /proc/sys/kernel/core_pattern; echo core=$?; "
                     "echo 500 > /proc/self/oom_score_adj; echo oom=$?; "
                     "find /proc -writable -type f 2>/dev/null | head -5")
    assert "swappiness=1" in done.stdout and "core=1" in done.stdout, done.stdout
    assert "oom=1" in done.stdout, done.stdout  # the whole of /proc, a process's own files too
    assert done.stdout.strip().splitlines()[3:] == [], done.stdout  # nothing else writable
    assert Path("/proc/sys/vm/swappiness").read_text() == before
    assert "|/tmp/x" not in Path("/proc/sys/kernel/core_pattern").read_text()


def test_no_setuid_file_survives_the_attempt(make_jail: Callable[..., bs.BwrapJail],
                                             layout: Layout) -> None:
    jail = make_jail()
    done = run(jail, "cp /usr/bin/id ./id-copy && chmod 6755 ./id-copy && "
                     "stat -c %a ./id-copy; mkdir -p $HOME/bin && cp ./id-copy $HOME/bin/ && "
                     "chmod 4755 $HOME/bin/id-copy; mkdir sgdir && chmod 2777 sgdir && "
                     "chmod g+s .")
    assert done.stdout.strip() == "6755", done.stdout + done.stderr
    jail.close()
    for path in (layout.workspace / "id-copy", layout.home / "bin" / "id-copy"):
        assert path.stat().st_mode & 0o7777 == 0o755, oct(path.stat().st_mode)
    # Found by an attacker: setgid directories (and the workspace itself) kept the bit.
    assert (layout.workspace / "sgdir").stat().st_mode & 0o7777 == 0o777
    assert not layout.workspace.stat().st_mode & 0o6000


def test_the_kernel_keyrings_are_out_of_reach(make_jail: Callable[..., bs.BwrapJail]) -> None:
    """Found by an attacker: keyrings are not namespaced, and with the sandbox's uid the
    harness's own, code inside added keys to the host user's keyrings by serial number
    (a channel between attempts) and unlinked the host's keys."""
    jail = make_jail()
    code = ("import ctypes, os\n"
            "libc = ctypes.CDLL(None, use_errno=True)\n"
            "calls = {'keyctl': (250, 0, -3, 0), 'add_key': (248, b'user', b'x', b'p', 1, -3),\n"
            "         'request_key': (249, b'user', b'x', None, -3)}\n"
            "for name, args in calls.items():\n"
            "    result = libc.syscall(*args)\n"
            "    print(name, result, os.strerror(ctypes.get_errno()))\n")
    if os.uname().machine != "x86_64":
        pytest.skip("the syscall numbers in this test are x86_64's")
    done = run(jail, f"python3 -c {shlex.quote(code)}; grep Seccomp: /proc/self/status")
    assert done.stdout.splitlines() == [
        "keyctl -1 Operation not permitted", "add_key -1 Operation not permitted",
        "request_key -1 Operation not permitted", "Seccomp:\t2"], done.stdout + done.stderr


PID_1_PROBE = """\
import ctypes, os, time
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
def call(*args):
    result = libc.syscall(*map(ctypes.c_long, args))
    return "EPERM" if result == -1 and ctypes.get_errno() == 1 else f"allowed ({result})"
def attach(pid):
    outcome = call(101, 16, pid, 0, 0)  # ptrace(PTRACE_ATTACH, pid)
    if outcome != "EPERM":  # let it go (stopped, then PTRACE_DETACH): pid 1 must run on
        os.waitpid(pid & 0xFFFFFFFF, 0x40000000)
        call(101, 17, pid & 0xFFFFFFFF, 0, 0)
    return outcome
print("attach 1:", attach(1))
print("attach 1 + 2**32:", attach(1 + 2**32))  # the kernel reads a pid as 32 bits
print("pidfd_open 1:", call(434, 1, 0))
print("pidfd_open 1 + 2**32:", call(434, 1 + 2**32, 0))
print("process_vm_readv 1:", call(310, 1, 0, 0, 0, 0, 0))
print("prlimit64 1:", call(302, 1, 0, 0, 0))
print("prlimit64 self:", "EPERM" if call(302, 0, 0, 0, 0) == "EPERM" else "allowed")
# pidfs (6.13+): a handle made from one's own pidfd, its inode counted down, opened a
# pidfd of pid 1, and pidfd_getfd took its eventfd.
print("open_by_handle_at:", call(304, -100, 0, 0))
own = os.pidfd_open(os.getpid())
print("pidfd_getfd:", call(438, own, 0, 0))
try:
    open("/proc/1/mem", "r+b")
    print("/proc/1/mem: writable")
except OSError as exc:
    print("/proc/1/mem:", exc.strerror)
child = os.fork()
if child == 0:
    time.sleep(30)
    os._exit(0)
print("attach its own child:", "EPERM" if attach(child) == "EPERM" else "allowed")
os.kill(child, 9)
"""


def test_pid_1_is_out_of_reach(make_jail: Callable[..., bs.BwrapJail]) -> None:
    """Found by attackers: code inside traced bubblewrap's init (pid 1) and cleared its
    parent-death signal, so the sandbox outlived a killed evalctl; with pid 1's eventfd
    (pidfd_getfd, from a pidfd that pidfs's file handles gave without pidfd_open) it
    could report any exit status for the command. Tracing, reading, limiting or taking a
    pidfd of pid 1 is refused (however the pid is spelled), and so are pidfd_getfd and
    open_by_handle_at; a command can still trace its own processes (gdb, strace)."""
    if os.uname().machine != "x86_64":
        pytest.skip("the syscall numbers in this test are x86_64's")
    jail = make_jail()
    done = run(jail, f"python3 -c {shlex.quote(PID_1_PROBE)}", timeout=60)
    assert done.stdout.splitlines() == [
        "attach 1: EPERM", "attach 1 + 2**32: EPERM", "pidfd_open 1: EPERM",
        "pidfd_open 1 + 2**32: EPERM", "process_vm_readv 1: EPERM", "prlimit64 1: EPERM",
        "prlimit64 self: allowed", "open_by_handle_at: EPERM", "pidfd_getfd: EPERM",
        "/proc/1/mem: Read-only file system", "attach its own child: allowed",
    ], done.stdout + done.stderr


PIDFS_FORGERY = r"""
import ctypes, os, struct, sys
libc = ctypes.CDLL(None, use_errno=True)
own = os.pidfd_open(os.getpid())
handle = ctypes.create_string_buffer(8 + 128)
struct.pack_into("Ii", handle, 0, 128, 0)
mount = ctypes.c_int()
if libc.syscall(303, own, b"", handle, ctypes.byref(mount), 0x1000) < 0:  # name_to_handle_at
    sys.exit("no pidfs handles here")
size = struct.unpack_from("I", handle, 0)[0]
inode = struct.unpack_from("Q", handle.raw, 8)[0]
for candidate in range(inode - 1, max(inode - 5000, 0), -1):
    guess = ctypes.create_string_buffer(handle.raw[:8 + size], 8 + size)
    struct.pack_into("Q", guess, 8, candidate)
    pidfd = libc.syscall(304, own, guess, os.O_RDONLY)  # open_by_handle_at
    if pidfd >= 0 and "Pid:\t1\n" in open(f"/proc/self/fdinfo/{pidfd}").read():
        break
else:
    sys.exit("no pidfd of pid 1")
for name in os.listdir("/proc/1/fd"):
    if os.readlink(f"/proc/1/fd/{name}") == "anon_inode:[eventfd]":
        event = libc.syscall(438, pidfd, int(name), 0)  # pidfd_getfd
        if event >= 0:
            os.write(event, struct.pack("Q", 0 + 1))  # "the command exited 0"
            print("forged")
"""


def test_the_command_s_exit_status_cannot_be_forged_through_pid_1(
    make_jail: Callable[..., bs.BwrapJail], layout: Layout
) -> None:
    """Found by an attacker (kernel 6.13+): a pidfd of pid 1 from pidfs's file handles,
    then its eventfd through pidfd_getfd, and bubblewrap reported 0 for a command that
    exited 7. (Where the kernel has no pidfs handles, nothing was possible to begin
    with.)"""
    if os.uname().machine != "x86_64":
        pytest.skip("the syscall numbers in this test are x86_64's")
    (layout.workspace / "forge.py").write_text(PIDFS_FORGERY)
    done = run(make_jail(), "python3 forge.py; exit 7", timeout=60)
    assert done.returncode == 7, done.stdout + done.stderr
    assert "forged" not in done.stdout


TRACING_PROBE = r"""
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
def refused(*args):
    return libc.syscall(*map(ctypes.c_long, args)) == -1 and ctypes.get_errno() == 1
shell = os.getppid()  # the command's own bash, which reports its status
attached = not refused(101, 16, shell, 0, 0)  # ptrace(PTRACE_ATTACH)
if attached:  # let it go: it must run on
    os.waitpid(shell, 0x40000000)
    libc.syscall(ctypes.c_long(101), ctypes.c_long(17), ctypes.c_long(shell), 0, 0)
print("ptrace:", "allowed" if attached else "refused")
print("process_vm_writev:", "refused" if refused(311, shell, 0, 0, 0, 0, 0) else "allowed")
"""


@pytest.mark.parametrize("purpose", ["agent", "grading"])
def test_graders_commands_cannot_trace_each_other(
    layout: Layout, purpose: str
) -> None:
    """Found by an attacker: in a check such as `python3 solution.py | grep -qx 42`, the
    agent's code traced the check's own shell (gdb -p $PPID, "call _exit(0)") and the
    check passed for a wrong answer. In the graders' sandbox no command may trace or
    write another's memory; the agent's keeps them, for gdb and strace."""
    import asyncio

    import evalctl
    from evalctl.plugins.sandboxes import bwrap

    if os.uname().machine != "x86_64":
        pytest.skip("the syscall numbers in this test are x86_64's")
    (layout.workspace / "probe.py").write_text(TRACING_PROBE)

    async def probe() -> evalctl.CommandResult:
        sandbox = await bwrap.create(evalctl.SandboxRequest(
            workspace=layout.workspace, home=layout.home, tmp=layout.tmp, env=BASE_ENV,
            purpose=purpose))
        try:
            return await sandbox.run("python3 probe.py; true", timeout=60)
        finally:
            await sandbox.close()

    done = asyncio.run(probe())
    expected = "allowed" if purpose == "agent" else "refused"
    assert done.stdout.splitlines() == [f"ptrace: {expected}",
                                        f"process_vm_writev: {expected}"], done.output


@pytest.mark.skipif(not HAS_CGROUPS, reason="no writable cgroup on this machine")
def test_a_cgroup_still_charged_with_memory_is_not_reused(layout: Layout) -> None:
    """Found by an attacker: memory an attempt left charged (a memfd held by another
    process) went with its reused cgroup to the next attempt, which was OOM-killed."""
    bs._CGROUP_POOL.drain()
    first = bs.BwrapJail(layout.workspace, layout.home, layout.tmp, bs.BwrapOptions())
    first.open()
    cgroups = first.cgroup_dirs
    memory = cgroups.get("memory", cgroups.get("unified"))
    if memory is None or not any((memory / name).exists()
                                 for name in ("memory.usage_in_bytes", "memory.current")):
        first.close()
        pytest.skip("no memory controller here")
    done = run(first, "head -c 100000000 /dev/zero > big && echo written")
    assert done.stdout == "written\n", done.stderr
    assert first._charged_bytes() > bs.POOL_MAX_CHARGE  # the file's page cache
    first.close()
    (layout.workspace / "big").unlink()
    second = bs.BwrapJail(layout.workspace, layout.home, layout.tmp, bs.BwrapOptions())
    second.open()
    try:
        assert second.cgroup_dirs != cgroups
    finally:
        second.close()
        bs._CGROUP_POOL.drain()


@pytest.fixture
def deep_root() -> Iterator[Path]:
    """A directory for trees too deep for Python's own rmtree (and pytest's cleanup):
    removed with rm -rf, which walks them without recursing."""
    base = Path(tempfile.mkdtemp(prefix="evalctl-deep-", dir="/var/tmp"))
    try:
        yield base
    finally:
        subprocess.run(["rm", "-rf", str(base)], check=False, timeout=120)


def test_setid_bits_are_cleared_however_deep_or_long_the_path(deep_root: Path) -> None:
    """Found by an attacker: os.walk skipped a directory past PATH_MAX, and recursed out of
    stack 1,200 levels down, leaving setuid-root files in the kept workspace."""
    root = deep_root / "ws"
    root.mkdir()
    plain = root / "plain"
    plain.write_text("x")
    plain.chmod(0o6755)
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    name = "d" * 200
    for _ in range(25):  # 25 x 201 bytes: past PATH_MAX (4096)
        os.mkdir(name, dir_fd=fd)
        child = os.open(name, os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
        os.close(fd)
        fd = child
    deep_file = os.open("deep", os.O_WRONLY | os.O_CREAT, 0o755, dir_fd=fd)
    os.fchmod(deep_file, 0o4755)
    os.close(deep_file)
    os.close(fd)
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    for level in range(1500):  # deeper than Python's recursion limit
        name_here = "narrow" if level == 0 else "a"
        os.mkdir(name_here, dir_fd=fd)
        child = os.open(name_here, os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
        os.close(fd)
        fd = child
    bottom = os.open("bottom", os.O_WRONLY | os.O_CREAT, 0o755, dir_fd=fd)
    os.fchmod(bottom, 0o2755)
    os.close(bottom)
    bottom_fd = fd  # kept open to look at the file afterwards
    bs.strip_setid_bits(root)
    assert plain.stat().st_mode & 0o7777 == 0o755
    assert os.stat("bottom", dir_fd=bottom_fd).st_mode & 0o7777 == 0o755
    os.close(bottom_fd)
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    for _ in range(25):
        child = os.open(name, os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
        os.close(fd)
        fd = child
    assert os.stat("deep", dir_fd=fd).st_mode & 0o7777 == 0o755
    os.close(fd)


def test_jails_opened_at_once_in_a_fresh_process_all_work(tmp_path: Path) -> None:
    """Jails are built in worker threads: the first ones of a process used to race to
    assemble the shared /etc ("File exists"), and the attempts that lost failed."""
    script = f"""
import sys, threading
from pathlib import Path
from evalctl.plugins.sandboxes import bwrap_jail as bs
base = Path({str(tmp_path)!r})
failures = []
def one(index):
    layout = [base / f"{{name}}{{index}}" for name in ("ws", "home", "tmp")]
    for path in layout:
        path.mkdir()
    jail = bs.BwrapJail(*layout, bs.BwrapOptions())
    try:
        jail.open()
        jail.close()
    except Exception as exc:
        failures.append(repr(exc))
threads = [threading.Thread(target=one, args=(i,)) for i in range(8)]
for thread in threads:
    thread.start()
for thread in threads:
    thread.join()
print(failures)
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]", done.stdout


@pytest.mark.skipif(not HAS_CGROUPS, reason="no writable cgroup on this machine")
def test_a_sandbox_that_cannot_join_its_cgroups_never_runs_the_command(
    make_jail: Callable[..., bs.BwrapJail], layout: Layout, tmp_path: Path
) -> None:
    """The sandbox waits (--block-fd) until it is in the attempt's cgroups: when that
    fails, it is killed while it waits, and the command never runs. Through the plugin,
    the command reports the failure with exit 125, as the shell that joined did."""
    import asyncio

    import evalctl
    from evalctl.plugins.sandboxes import bwrap

    jail = make_jail()
    kept = jail._cgroup_dirs
    jail._cgroup_dirs = {name: tmp_path / "gone" for name in kept}
    try:
        with pytest.raises(bs.SandboxError, match="cannot limit the sandbox"):
            start(jail, ["bash", "-c", "touch ran"], BASE_ENV)
        sandbox = bwrap.BwrapSandbox(evalctl.SandboxRequest(
            workspace=layout.workspace, home=layout.home, tmp=layout.tmp, env=BASE_ENV), jail)
        done = asyncio.run(sandbox.run("touch ran", timeout=30))
        merged = asyncio.run(sandbox.run("touch ran", timeout=30, merge_stderr=True))
    finally:
        jail._cgroup_dirs = kept
    assert done.exit_code == bs.WRAPPER_FAILED
    assert done.stderr.startswith("evalctl sandbox: cannot limit the sandbox")
    assert merged.exit_code == bs.WRAPPER_FAILED
    assert merged.stdout.startswith("evalctl sandbox: cannot limit the sandbox")
    assert not (layout.workspace / "ran").exists()
    assert run(jail, "touch ran").returncode == 0  # the same jail, limited again, runs it
    assert (layout.workspace / "ran").exists()


def test_strip_setid_bits_within_a_budget_only_looks(tmp_path: Path) -> None:
    """With a budget (on the event loop) it changes nothing: a bit to clear, or more
    entries than the budget, and it says so; the walk without one clears."""
    for n in range(5):
        (tmp_path / f"f{n}").write_text("x")
    assert bs.strip_setid_bits(tmp_path, budget=5)
    assert not bs.strip_setid_bits(tmp_path, budget=4)
    (tmp_path / "f3").chmod(0o4755)
    assert not bs.strip_setid_bits(tmp_path, budget=5)
    assert (tmp_path / "f3").stat().st_mode & 0o7777 == 0o4755
    assert bs.strip_setid_bits(tmp_path)
    assert (tmp_path / "f3").stat().st_mode & 0o7777 == 0o755
    tmp_path.chmod(0o2755)  # the root itself
    assert not bs.strip_setid_bits(tmp_path, budget=5)
    assert bs.strip_setid_bits(tmp_path)
    assert not tmp_path.stat().st_mode & 0o6000


@pytest.mark.skipif(not HAS_CGROUPS, reason="no writable cgroup on this machine")
def test_quick_open_and_close_only_do_bounded_work(layout: Layout) -> None:
    """open_quickly() opens only with a planned mount set and a pooled cgroup set;
    close_quickly() closes only with nothing left in the cgroups and small trees. Either
    refuses without doing anything that open() or close() would not do again."""
    def jail(**limits: int) -> bs.BwrapJail:
        return bs.BwrapJail(layout.workspace, layout.home, layout.tmp,
                            bs.BwrapOptions(**limits))

    bs._CGROUP_POOL.drain()
    cold = jail(max_processes=77)
    assert not cold.open_quickly()  # no empty cgroup set with these limits yet
    assert cold.cgroup_dirs == {}
    cold.open()
    assert run(cold, "true").returncode == 0
    for n in range(bs.QUICK_CLOSE_ENTRIES + 1):
        (layout.home / f"f{n}").write_text("x")
    (layout.home / "f0").chmod(0o4755)
    assert not cold.close_quickly()  # HOME is too big to walk on the loop
    assert cold.cgroup_dirs  # still its own: close() finishes the work
    cold.close()
    assert (layout.home / "f0").stat().st_mode & 0o7777 == 0o755
    for n in range(bs.QUICK_CLOSE_ENTRIES + 1):
        (layout.home / f"f{n}").unlink()

    warm = jail(max_processes=77)
    assert warm.open_quickly()  # the cold jail's cgroups, from the pool
    busy = start(warm, ["sleep", "30"], BASE_ENV, stdout=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 10
        while not warm._members() and time.monotonic() < deadline:
            time.sleep(0.01)
        # What this asserts needs the sandbox running: said apart when it is not.
        assert warm._members(), f"the sandbox never ran (exit {busy.poll()})"
        assert not warm.close_quickly()  # a process still runs: close() kills it
        assert warm._members()
    finally:
        warm.close()
        busy.wait(timeout=10)
    again = jail(max_processes=77)
    assert again.open_quickly()
    (layout.workspace / "s").write_text("x")
    (layout.workspace / "s").chmod(0o4755)
    assert not again.close_quickly()  # a bit to clear: changing a mode is not the loop's
    assert (layout.workspace / "s").stat().st_mode & 0o7777 == 0o4755
    (layout.workspace / "s").unlink()
    assert again.close_quickly()
    assert again.cgroup_dirs == {}
    assert bs._CGROUP_POOL.has(again._pool_key())
    bs._CGROUP_POOL.drain()


@pytest.mark.skipif(not HAS_CGROUPS, reason="no writable cgroup on this machine")
def test_pooled_cgroups_removed_under_the_process_are_made_anew(layout: Layout) -> None:
    """Found by an attacker: an evalctl in another PID namespace cannot see this one's
    pid, so its stale-cgroup sweep removed this process's idle pooled cgroups, and the
    next jail's commands failed (exit 125). A pooled set that is gone is made anew."""
    def jail() -> bs.BwrapJail:
        return bs.BwrapJail(layout.workspace, layout.home, layout.tmp,
                            bs.BwrapOptions(max_processes=78))

    bs._CGROUP_POOL.drain()
    first = jail()
    first.open()
    pooled = dict(first.cgroup_dirs)
    first.close()
    assert bs._CGROUP_POOL.has(first._pool_key())
    for path in pooled.values():
        path.rmdir()  # as the other evalctl's sweep did
    second = jail()
    assert second.open_quickly()
    try:
        assert second.cgroup_dirs and all(p.is_dir() for p in second.cgroup_dirs.values())
        assert second.cgroup_dirs != pooled
        assert run(second, "true").returncode == 0
    finally:
        second.close()
        bs._CGROUP_POOL.drain()


def test_a_sandbox_that_fails_to_set_up_reports_bubblewraps_own_error(
    make_jail: Callable[..., bs.BwrapJail], tmp_path: Path
) -> None:
    """A mount that fails kills the sandbox before it waits on --block-fd, maybe before
    evalctl puts it into its cgroups: the command then reports bubblewrap's message and
    status, not a failure to limit it."""
    gone = tmp_path / "gone"
    gone.mkdir()
    jail = make_jail(ro_paths=(str(gone),))
    gone.rmdir()
    for _ in range(5):  # either order of the race
        done = run(jail, "true")
        assert done.returncode == 1, done
        assert "gone" in done.stderr and "evalctl sandbox" not in done.stderr, done.stderr


def test_a_quick_strip_stops_at_a_directory_too_large_to_list(emptied_directory: Path
                                                             ) -> None:
    big, tmp_path = emptied_directory, emptied_directory.parent
    (big / "s").write_text("x")
    (big / "s").chmod(0o4755)
    assert big.stat().st_size > bs.QUICK_DIRECTORY_BYTES
    assert not bs.strip_setid_bits(tmp_path, budget=256)
    assert bs.strip_setid_bits(tmp_path)  # the full walk has no such bound
    assert (big / "s").stat().st_mode & 0o7777 == 0o755


@pytest.mark.skipif(os.geteuid() != 0, reason="as another user the sandbox owns no node")
def test_the_hosts_device_nodes_cannot_be_changed_from_inside(
        make_jail: Callable[..., bs.BwrapJail]) -> None:
    """Found by an attacker: as root, bwrap's --dev bound the host's /dev nodes, which
    the sandbox (root's uid on the host) could chmod for the whole machine. Nodes of
    evalctl's own, owned by nobody, are bound over them: they work, and a chmod fails."""
    before = {name: os.stat(f"/dev/{name}") for name in bs.DEVICE_NODES
              if os.path.exists(f"/dev/{name}")}
    jail = make_jail()
    try:
        done = run(jail, "echo gone > /dev/null && head -c 4 /dev/zero | wc -c && "
                         "head -c 4 /dev/urandom | wc -c && "
                         "for n in null zero full random urandom tty; do "
                         "chmod 000 /dev/$n 2>/dev/null && echo changed $n; "
                         "chmod g+s /dev/$n 2>/dev/null && echo changed $n; done; true")
    finally:  # should the protection ever fail, the machine is put back first
        for name, info in before.items():
            if os.stat(f"/dev/{name}").st_mode != info.st_mode:
                os.chmod(f"/dev/{name}", stat.S_IMODE(info.st_mode))
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["4", "4"], done.stdout
    for name, info in before.items():
        now = os.stat(f"/dev/{name}")
        assert (now.st_mode, now.st_uid, now.st_ctime_ns) == \
            (info.st_mode, info.st_uid, info.st_ctime_ns), name


_ADD_KEY = {"x86_64": 248, "aarch64": 217}


@pytest.mark.skipif(not os.path.exists("/proc/keys") or platform.machine() not in _ADD_KEY,
                    reason="no keyrings in this kernel, or add_key's number unknown here")
def test_the_harness_users_keys_are_not_listed_inside(
        make_jail: Callable[..., bs.BwrapJail]) -> None:
    """Found by an attacker round: the keyring calls are refused inside, but /proc/keys
    listed the harness user's keys (serial number, description) to the sandbox, whose
    uid is the harness's. A key of this test's own thread (gone with the thread) must
    not show inside; /proc/keys is an empty file there."""
    import ctypes

    description = f"evalctl-test-{secrets.token_hex(6)}"
    listed: dict[str, Any] = {}

    def in_a_thread_of_its_own() -> None:
        libc = ctypes.CDLL(None, use_errno=True)
        serial = libc.syscall(_ADD_KEY[platform.machine()], b"user", description.encode(),
                              b"secret", 6, -1)  # -1: this thread's keyring
        assert serial > 0, os.strerror(ctypes.get_errno())
        with open("/proc/keys") as keys:
            listed["host"] = keys.read()
        listed["inside"] = run(make_jail(), "cat /proc/keys; echo end")

    thread = threading.Thread(target=in_a_thread_of_its_own)
    thread.start()
    thread.join()
    assert description in listed["host"]  # the key is there to be seen
    inside = listed["inside"]
    assert inside.returncode == 0, inside.stderr
    assert description not in inside.stdout and inside.stdout.strip() == "end", inside.stdout


@pytest.mark.skipif(os.geteuid() != 0, reason="as another user the sandbox owns no node")
def test_without_its_own_device_nodes_the_sandbox_is_refused(monkeypatch) -> None:
    """Where evalctl owns /dev's nodes but cannot make its own (no CAP_MKNOD), running
    the sandbox would put the machine's devices at its mercy: bwrap is reported
    unavailable, with why, instead."""
    def no_mknod(*args: Any, **kwargs: Any) -> None:
        raise PermissionError(1, "Operation not permitted")

    bs._private_device_nodes.cache_clear()
    monkeypatch.setattr(os, "mknod", no_mknod)
    try:
        reason = bs._probe_with(bs._find_bwrap())
        assert reason is not None and "device nodes" in reason and "/dev/" in reason
    finally:
        monkeypatch.undo()
        bs._private_device_nodes.cache_clear()
    assert bs._probe_with(bs._find_bwrap()) is None


def test_the_shared_directory_is_in_memory_when_it_can_be(tmp_path: Path) -> None:
    """The /etc copy (some 700 files, removed at exit) goes to /dev/shm: on ext4 without
    a journal, removing it from /tmp made the next run's copy fifteen times slower. Where
    /dev/shm cannot be written, the system's temporary directory is used."""
    probe = ("import sys\nfrom pathlib import Path\n"
             "from evalctl.plugins.sandboxes import bwrap_jail as bs\n"
             "if len(sys.argv) > 1:\n    bs.MEMORY_SCRATCH = Path(sys.argv[1])\n"
             "etc, _ = bs._shared_etc()\n"
             "print(etc.parent.parent, (etc / 'passwd').is_file())\n")
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    for arguments, parent in (([], "/dev/shm"),
                              ([str(tmp_path / "no-such-directory")], str(scratch))):
        done = subprocess.run([sys.executable, "-c", probe, *arguments], capture_output=True,
                              text=True, timeout=60, env={**os.environ, "TMPDIR": str(scratch)})
        assert done.returncode == 0, done.stderr
        assert done.stdout.split() == [parent, "True"], done.stdout
    assert list(scratch.iterdir()) == []  # removed at exit


def _shared_dir_probe(code: str, scratch: Path, memory: Path | None = None) -> list[str]:
    """Run `code` in a fresh interpreter (the shared directory is made once per process),
    with bs imported, /dev/shm as `memory` if given and TMPDIR as `scratch`."""
    setup = ("import sys, os\nfrom pathlib import Path\n"
             "from evalctl.plugins.sandboxes import bwrap_jail as bs\n"
             + (f"bs.MEMORY_SCRATCH = Path({str(memory)!r})\n" if memory else ""))
    done = subprocess.run([sys.executable, "-c", setup + code], capture_output=True,
                          text=True, timeout=60, env={**os.environ, "TMPDIR": str(scratch)})
    assert done.returncode == 0, done.stderr
    return done.stdout.split()


def test_a_full_dev_shm_is_passed_over_for_the_temporary_directory(tmp_path: Path) -> None:
    """Anyone may fill /dev/shm: with less room than the shared files need, the temporary
    directory is used, and the sandbox works as before."""
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    code = ("bs.SCRATCH_MIN_BYTES = 1 << 62\n"
            "etc, _ = bs._shared_etc()\n"
            "print(etc.parent.parent, bs._probe_with(bs._find_bwrap()))\n")
    assert _shared_dir_probe(code, scratch) == [str(scratch), "None"]


def test_an_etc_that_cannot_be_finished_is_a_stated_reason_and_left_clean(
        tmp_path: Path) -> None:
    """A disk that fills while /etc is copied: the probe says why bwrap cannot be used
    (no traceback), nothing half-made is left, and the next try builds a whole one."""
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    code = ("import errno, shutil\nreal = shutil.copyfile\n"
            "def full(*args, **kwargs):\n"
            "    raise OSError(errno.ENOSPC, 'No space left on device')\n"
            "shutil.copyfile = full\n"
            "reason = bs._probe_with(bs._find_bwrap())\n"
            "print('reason:' + reason.replace(' ', '_'))\n"
            "print(len([p for p in bs._shared_dir().iterdir() if p.name.startswith('etc-')]))\n"
            "shutil.copyfile = real\n"
            "etc, _ = bs._shared_etc()\nprint((etc / 'passwd').is_file())\n")
    reason, left, whole = _shared_dir_probe(code, scratch, memory=tmp_path / "no-shm")
    assert reason.startswith("reason:cannot_make_the_sandbox's_/etc") and "No_space" in reason
    assert (left, whole) == ("0", "True")


def test_a_killed_evalctls_shared_directory_is_removed_by_the_next(tmp_path: Path) -> None:
    """A shared directory is held by a lock its process keeps until it dies, however it
    dies: the next evalctl removes those no process holds, and leaves the ones in use,
    another user's, and (for a day) ones not yet locked."""
    import fcntl

    scratch = tmp_path / "tmp"
    scratch.mkdir()
    killed = subprocess.Popen(
        [sys.executable, "-c", "from evalctl.plugins.sandboxes import bwrap_jail as bs\n"
         f"bs.MEMORY_SCRATCH = bs.Path({str(tmp_path / 'no-shm')!r})\n"
         "print(bs._shared_dir(), flush=True)\nimport time\ntime.sleep(60)\n"],
        stdout=subprocess.PIPE, text=True, env={**os.environ, "TMPDIR": str(scratch)})
    assert killed.stdout is not None
    abandoned = Path(killed.stdout.readline().strip())
    killed.kill()
    killed.wait()
    assert abandoned.is_dir() and abandoned.parent == scratch
    in_use = scratch / f"{bs.SHARED_PREFIX}in-use"
    in_use.mkdir()
    (in_use / bs.ALIVE_NAME).touch()
    held = os.open(in_use / bs.ALIVE_NAME, os.O_RDONLY)
    fcntl.flock(held, fcntl.LOCK_EX)
    making, old = scratch / f"{bs.SHARED_PREFIX}making", scratch / f"{bs.SHARED_PREFIX}old"
    making.mkdir()
    old.mkdir()
    os.utime(old, (time.time() - 2 * bs.UNLOCKED_STALE_SECONDS,) * 2)
    unrelated = scratch / "evalctl-other"
    unrelated.mkdir()
    try:
        mine = _shared_dir_probe("print(bs._shared_dir())\n", scratch,
                                 memory=tmp_path / "no-shm")
    finally:
        os.close(held)
    assert not abandoned.exists() and not old.exists()
    assert in_use.is_dir() and making.is_dir() and unrelated.is_dir()
    assert not Path(mine[0]).exists()  # its own, removed at its exit


def test_dev_shm_filled_after_it_was_found_roomy_falls_back_to_the_temporary_directory(
        tmp_path: Path) -> None:
    """Anyone may fill /dev/shm between evalctl's look and its copy: the /etc copy that
    cannot be finished there is made in the temporary directory instead."""
    scratch, memory = tmp_path / "tmp", tmp_path / "shm"
    scratch.mkdir()
    memory.mkdir()
    code = ("import errno, shutil\nreal = shutil.copyfile\n"
            "def full_in_memory(source, target, *args, **kwargs):\n"
            f"    if str(target).startswith({str(memory)!r}):\n"
            "        raise OSError(errno.ENOSPC, 'No space left on device')\n"
            "    return real(source, target, *args, **kwargs)\n"
            "shutil.copyfile = full_in_memory\nbs.SCRATCH_MIN_BYTES = 0\n"
            "etc, _ = bs._shared_etc()\n"
            "print(bs._shared_dir().parent, etc.parent.parent, (etc / 'passwd').is_file())\n")
    assert _shared_dir_probe(code, scratch, memory=memory) == \
        [str(memory), str(scratch), "True"]


def test_a_fifo_where_the_lock_should_be_never_holds_evalctl(tmp_path: Path) -> None:
    """A FIFO planted as a shared directory's lock file (an agent of a `local` run can
    write there) is passed over, not opened for ever; an abandoned directory in either
    place, /dev/shm or the temporary directory, is removed."""
    scratch, memory = tmp_path / "tmp", tmp_path / "shm"
    scratch.mkdir()
    memory.mkdir()
    planted = memory / f"{bs.SHARED_PREFIX}planted"
    planted.mkdir()
    os.mkfifo(planted / bs.ALIVE_NAME)
    abandoned = scratch / f"{bs.SHARED_PREFIX}abandoned"
    abandoned.mkdir()
    (abandoned / bs.ALIVE_NAME).touch()
    _shared_dir_probe("bs.SCRATCH_MIN_BYTES = 0\nprint(bs._shared_dir())\n", scratch,
                      memory=memory)
    assert planted.is_dir() and not abandoned.exists()


@pytest.mark.skipif(os.geteuid() != 0, reason="only root's sandboxes get evalctl's own nodes")
def test_device_nodes_outside_the_shared_directory_are_held_and_swept(tmp_path: Path) -> None:
    """Where the shared directory's file system is mounted nodev (most /dev/shm), the
    device nodes go under /var/tmp: that directory is held like the shared one, so one
    left by a killed evalctl is removed by the next (it was left for ever)."""
    scratch, fallback = tmp_path / "tmp", tmp_path / "var-tmp"
    scratch.mkdir()
    fallback.mkdir()
    setup = ("import os, sys\nfrom pathlib import Path\n"
             "from evalctl.plugins.sandboxes import bwrap_jail as bs\n"
             f"bs.MEMORY_SCRATCH = Path({str(tmp_path / 'no-shm')!r})\n"
             f"bs.DEVICE_FALLBACKS = (Path({str(fallback)!r}),)\n"
             "real = os.statvfs\n"
             "class NoDev:\n"
             "    def __init__(self, info): self.info = info\n"
             "    def __getattr__(self, name): return getattr(self.info, name)\n"
             "    f_flag = os.ST_NODEV\n"
             f"os.statvfs = lambda p: NoDev(real(p)) if str(p).startswith({str(scratch)!r}) "
             "else real(p)\n")
    env = {**os.environ, "TMPDIR": str(scratch)}
    killed = subprocess.Popen(
        [sys.executable, "-c", setup + "nodes = bs._private_device_nodes()\n"
         "print(Path(nodes[0][0]).parent, flush=True)\nimport time\ntime.sleep(60)\n"],
        stdout=subprocess.PIPE, text=True, env=env)
    assert killed.stdout is not None
    nodes = Path(killed.stdout.readline().strip())
    killed.kill()
    killed.wait()
    assert nodes.parent == fallback and (nodes / "null").exists()
    done = subprocess.run([sys.executable, "-c", setup + "bs._shared_dir()\n"],
                          capture_output=True, text=True, timeout=60, env=env)
    assert done.returncode == 0, done.stderr
    assert not nodes.exists()
