"""A bubblewrap (bwrap) sandbox for one task attempt: a prototype for evalctl.

Each command an agent (or a check) runs is wrapped so that it executes:

* in fresh user, mount, PID, IPC, UTS, cgroup and (unless allowed) network namespaces, as
  uid/gid 1000 with no capabilities and no way to create further user namespaces;
* over a filesystem built from nothing: the workspace (read-write, at its own absolute path),
  the attempt's HOME and TMPDIR (read-write, at /home/agent and /tmp), and read-only: /usr, the
  /bin, /lib* links, an allowlist of /etc, the Python prefixes and the evalctl package sources;
* with exactly the environment the caller gives: bwrap runs with an empty environment
  (Launch.started refuses one that does not), so no /proc/*/environ anywhere (inside, or on
  the host) holds a secret of the harness, not even that of pid 1, bwrap's own init;
* so that no process outlives the command (Launch.end kills the sandbox's pid 1 when the
  command has ended, which tears its PID namespace down, and reaps it);
* in the attempt's cgroup(s) (pids and memory; cgroup.kill on v2) when this machine lets us
  create them, with RLIMIT_FSIZE (and RLIMIT_NPROC/RLIMIT_AS when there is no cgroup): bwrap
  reports the sandbox's pid and waits (--info-fd, --block-fd) until the harness has put it
  there (Launch.started), so nothing inside runs uncounted.

Why HOME and TMPDIR are mounted at /home/agent and /tmp rather than at their own host paths:
programs that hard-code /tmp (or ignore TMPDIR) still land in the attempt's own directory instead
of failing on a read-only root; HOME agrees with the synthetic /etc/passwd entry (getpwuid-based
tools like ssh or git see the same home as $HOME); and the paths are the same for every
attempt, which keeps transcripts comparable.  (The host paths are not hidden: every bind's
source, .state/<task>/tmp and the shared /etc's directory among them, is named in the sandbox's
/proc/self/mountinfo; none of them is reachable from inside.)  The workspace itself stays at
its host path, so paths the agent prints mean the same thing to the harness.

Only the standard library is used.  Everything here is Linux-specific.
"""

from __future__ import annotations

import ast
import atexit
import contextlib
import errno
import functools
import importlib.metadata
import importlib.util
import logging
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

log = logging.getLogger(__name__)

# Identity inside the sandbox.  Host root maps to this uid: files the sandbox creates in the
# workspace are owned by the harness's own uid on the host.
SANDBOX_UID = 1000
SANDBOX_GID = 1000
SANDBOX_USER = "agent"
SANDBOX_HOME = Path("/home/agent")
SANDBOX_TMP = Path("/tmp")
SANDBOX_HOSTNAME = "sandbox"
# The sandbox's uid is the harness's uid on the host: when evalctl runs as root, the
# kernel's ownership checks treat sandboxed code as root for files it can reach. A fresh
# /proc has root-owned files that change the whole machine (sysctls such as
# kernel.core_pattern, which runs a program as root on the host; sysrq-trigger; IRQ
# affinity; PSI triggers...), so the whole /proc is remounted read-only: one remount
# instead of a read-only bind per entry, each of which costs bubblewrap a pass over the
# mount table. Reading stays possible, as it was with per-entry binds.
PROC_COVERS = ("--remount-ro", "/proc")
# The keyring calls are refused inside (BLOCKED_SYSCALLS), but /proc/keys lists every key
# the harness's uid may view, with its serial number and description (found by an
# attacker round): an empty file is laid over it. /proc/key-users shows only counts.
KEYS_LIST = "/proc/keys"

# Top-level directories made visible read-only.  /opt, /srv, /var, /run, /sys are not: pass
# them through BwrapOptions.ro_paths if a suite needs something there.
SYSTEM_RO_DIRS = ("/usr",)
# On merged-/usr systems these are symlinks into /usr and are recreated as symlinks.
SYSTEM_LINKS = ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")

# The parts of /etc tools need.  /etc as a whole is not mounted: it can hold secrets (shadow,
# ssh host keys, ssl/private, pip.conf/npmrc with index tokens, environment), and because the
# sandbox uid maps to the host uid that owns them (root), owner-only files would be readable.
# passwd, group and hosts are synthesized (see _synthetic_etc_files) rather than copied.
ETC_ALLOWLIST = (
    "alternatives",  # /usr/bin/awk, /usr/bin/editor... are links through here
    "bash.bashrc",
    "ca-certificates.conf",
    "debian_version",
    "gai.conf",
    "host.conf",
    "inputrc",
    "java-*",  # JDK conf/ links into /etc/java-<n>-openjdk
    "ld.so.cache",  # without it the dynamic loader misses /usr/lib/<triplet>
    "ld.so.conf",
    "ld.so.conf.d",
    "locale.alias",
    "localtime",
    "magic",
    "magic.mime",
    "mime.types",
    "mtab",
    "networks",
    "nsswitch.conf",
    "os-release",
    "profile",
    "protocols",
    "python3*",
    "resolv.conf",
    "rpc",
    "services",
    "shells",
    "ssl/certs",
    "ssl/openssl.cnf",
    "terminfo",
    "timezone",
)

# Allowlisted /etc directories with more entries than this are bind-mounted, not copied.
# Copying (once per process, mostly symlinks) costs milliseconds once; every bind costs
# bubblewrap a pass over the mount table for every command of every attempt.
ETC_COPY_MAX_ENTRIES = 1024

# pid 1 inside the sandbox is bubblewrap's own init: it forks the command, reaps whatever is
# reparented to it, and reports the command's exit status to bwrap's outer process, which then
# exits.  It does not end with the command: it waits until every process in the sandbox is
# gone, so a daemon the command left would keep it (and the daemon) alive, and once the outer
# bwrap has exited, --die-with-parent's SIGKILL would make it an orphan for the host's init to
# reap (holding a pids-cgroup charge until then; some containers' inits never reap).  So the
# harness holds a pidfd on it from the moment bwrap reports it (it waits on --block-fd then,
# so it cannot be gone), is its subreaper (PR_SET_CHILD_SUBREAPER: the orphan comes to evalctl,
# not the host's init), and when the command has ended kills it, which makes the kernel kill
# every process left in its PID namespace, and reaps it (Launch.end).  Our own init (a shell as
# pid 1, --as-pid-1) did the same from inside at the cost of one more exec per command.

# Exit status of a command whose sandbox could not be given its limits (it fails closed).
WRAPPER_FAILED = 125

# How long bwrap may take to report the sandbox's pid (--info-fd) before it is killed.
START_SECONDS = 30.0

_BWRAP_CANDIDATES = ("/usr/bin/bwrap", "/usr/local/bin/bwrap", "/bin/bwrap")


class SandboxError(RuntimeError):
    """The sandbox cannot be set up as asked."""


# Jails are built in worker threads, several at once: what is worked out once per process
# (and may make files, such as the shared /etc) is worked out under one lock.
_ONCE_LOCK = threading.RLock()
_T = TypeVar("_T")


def _once(function: Callable[..., _T]) -> Callable[..., _T]:
    """functools.cache, with the first computation of each value made under _ONCE_LOCK."""
    cached = functools.lru_cache(maxsize=64)(function)

    @functools.wraps(function)
    def once(*args: Any) -> _T:
        with _ONCE_LOCK:
            return cached(*args)

    once.cache_clear = cached.cache_clear  # type: ignore[attr-defined]
    once.cache_info = cached.cache_info  # type: ignore[attr-defined]
    return once


# --------------------------------------------------------------------------- bwrap itself


@functools.cache
def _find_bwrap() -> str | None:
    """Where bwrap is (looked up once per process: every command of every attempt uses it)."""
    found = shutil.which("bwrap")
    if found:
        return os.path.realpath(found)
    return next((c for c in _BWRAP_CANDIDATES if os.access(c, os.X_OK)), None)


@functools.cache
def _bwrap_options_supported(bwrap: str) -> frozenset[str]:
    """The long options this bwrap's --help lists (e.g. --disable-userns appeared in 0.8)."""
    try:
        done = subprocess.run(
            [bwrap, "--help"], env={}, capture_output=True, text=True, timeout=10, check=False
        )
    except (OSError, subprocess.SubprocessError):
        return frozenset()
    return frozenset(re.findall(r"(?m)^\s+(--[a-z][a-z0-9-]*)", done.stdout + done.stderr))


def _system_mounts() -> list[_Mount]:
    """/usr and the /bin, /lib* links (or directories, if not merged): what the probe and
    every jail mount."""
    mounts: list[_Mount] = []
    for directory in SYSTEM_RO_DIRS:
        if os.path.isdir(directory):
            mounts.append(_Mount("ro", directory, Path(directory)))
    for link in SYSTEM_LINKS:
        if os.path.islink(link):
            mounts.append(_Mount("symlink", os.readlink(link), Path(link)))
        elif os.path.isdir(link):
            mounts.append(_Mount("ro", link, Path(link)))
    return mounts


def _namespace_args(bwrap: str, network: bool) -> list[str]:
    """Namespaces, identity and capabilities: shared by probe() and BwrapJail.wrap()."""
    args = [
        "--unshare-user",
        "--unshare-pid",
        "--unshare-ipc",
        "--unshare-uts",
        "--unshare-cgroup",
    ]
    if not network:
        args.append("--unshare-net")
    args += ["--uid", str(SANDBOX_UID), "--gid", str(SANDBOX_GID)]
    if "--disable-userns" in _bwrap_options_supported(bwrap):
        args.append("--disable-userns")
    # As uid 0 bwrap keeps every capability unless told otherwise (bubblewrap#561).
    args += ["--cap-drop", "ALL", "--die-with-parent", "--new-session"]
    args += ["--hostname", SANDBOX_HOSTNAME]
    return args


def _probe_with(bwrap: str | None) -> str | None:
    """probe() without the cache, for a given bwrap path (None: not installed)."""
    if bwrap is None:
        return "bwrap not found; install the bubblewrap package (apt-get install bubblewrap)"
    try:
        seccomp_filter()
        _private_device_nodes()
        _shared_etc()
    except SandboxError as exc:
        return str(exc)
    true = shutil.which("true", path="/usr/bin:/bin") or "/usr/bin/true"
    argv = [bwrap, *_namespace_args(bwrap, network=False),
            *(arg for mount in _system_mounts() for arg in mount.args())]
    # --as-pid-1: `true` is the sandbox's pid 1, which bwrap reaps (its own init would be
    # an orphan for whoever reaps this process's orphans).
    argv += ["--proc", "/proc", "--dev", "/dev", "--remount-ro", "/", "--as-pid-1", "--", true]
    try:
        done = subprocess.run(argv, env={}, capture_output=True, text=True, timeout=20, check=False)
    except subprocess.TimeoutExpired:
        return f"{bwrap} did not run a trivial command within 20 s"
    except OSError as exc:
        return f"cannot execute {bwrap}: {exc}"
    if done.returncode == 0:
        return None
    lines = [line.strip() for line in done.stderr.splitlines() if line.strip()]
    return lines[0] if lines else f"{bwrap} exited with status {done.returncode}"


@_once
def probe() -> str | None:
    """None when bwrap can run a trivial command here; else a one-line reason.  Cached."""
    return _probe_with(_find_bwrap())


# --------------------------------------------------------------------------- cgroups


@dataclass(frozen=True)
class CgroupSetup:
    """Where this process may create per-attempt cgroups, as found by detect_cgroups().

    version 1: `parents` maps controller ("pids", "memory", "freezer") to the directory under
    which an attempt's cgroup for that controller is created.  version 2: `parents` has one
    entry, "unified".  version 0: no usable cgroup; `reason` says why.
    """

    version: int
    parents: Mapping[str, Path] = field(default_factory=dict)
    controllers: frozenset[str] = frozenset()
    reason: str = ""


NO_CGROUPS = CgroupSetup(0, reason="cgroups disabled")


def _unescape_mount_path(text: str) -> str:
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), text)


def locate_cgroup_dirs(mountinfo: str, proc_cgroup: str) -> tuple[dict[str, Path], Path | None]:
    """This process's own cgroup directories: ({v1 controller: dir}, cgroup v2 dir or None).

    `mountinfo` is /proc/self/mountinfo and `proc_cgroup` is /proc/self/cgroup.  Pure, so it can
    be tested with the text of other machines.
    """
    own: dict[str, str] = {}  # controller name ("" for v2) -> path in that hierarchy
    for line in proc_cgroup.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        _, controllers, path = parts
        for name in controllers.split(",") if controllers else [""]:
            own[name] = path

    def join(mount_root: str, mount_point: str, path: str) -> Path:
        # The hierarchy's root may be mounted at a sub-cgroup (containers without cgroupns).
        if mount_root != "/" and (path == mount_root or path.startswith(mount_root + "/")):
            path = path[len(mount_root) :]
        return Path(mount_point, path.lstrip("/"))

    v1: dict[str, Path] = {}
    v2: Path | None = None
    for line in mountinfo.splitlines():
        left, sep, right = line.partition(" - ")
        if not sep:
            continue
        fields, tail = left.split(), right.split()
        if len(fields) < 5 or len(tail) < 3:
            continue
        root, mount_point = _unescape_mount_path(fields[3]), _unescape_mount_path(fields[4])
        fstype, super_options = tail[0], tail[2].split(",")
        if fstype == "cgroup2" and "" in own and v2 is None:
            v2 = join(root, mount_point, own[""])
        elif fstype == "cgroup":
            for name in ("pids", "memory", "freezer"):
                if name in super_options and name in own and name not in v1:
                    v1[name] = join(root, mount_point, own[name])
    return v1, v2


def _read(path: str | Path) -> str:
    """The text of a small kernel file (cgroup, proc), "" when it cannot be read. Raw
    calls: a buffered text file object costs three more system calls, and every attempt
    reads a few of these on the event loop."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return ""
    try:
        chunks = []
        while chunk := os.read(fd, 65536):
            chunks.append(chunk)
        return b"".join(chunks).decode("utf-8", "replace")
    except OSError:
        return ""
    finally:
        os.close(fd)


def _write(path: Path, value: str) -> None:
    with open(path, "w") as handle:
        handle.write(value)


def _try_child(parent: Path, control_file: str) -> str | None:
    """Create and remove a probe cgroup under `parent`; None if that works, else why not."""
    child = parent / f"evalctl-probe-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    try:
        child.mkdir()
    except OSError as exc:
        return f"cannot create a cgroup under {parent}: {exc.strerror or exc}"
    try:
        if not (child / control_file).exists():
            return f"{parent} does not behave like a cgroup ({control_file} missing)"
        if not os.access(child / control_file, os.W_OK):
            return f"{child / control_file} is not writable"
        return None
    finally:
        with contextlib.suppress(OSError):
            child.rmdir()


def detect_cgroups(mountinfo: str | None = None, proc_cgroup: str | None = None) -> CgroupSetup:
    """Find where per-attempt cgroups can be created, preferring v1 controllers when a hybrid
    machine has bound pids/memory to v1 (they are then unavailable in the v2 hierarchy).

    Attempt cgroups are created *below this process's own cgroup*, so they only ever narrow
    what the harness is already allowed; nothing is created elsewhere in the hierarchy.
    """
    if mountinfo is None:
        mountinfo = _read("/proc/self/mountinfo")
    if proc_cgroup is None:
        proc_cgroup = _read("/proc/self/cgroup")
    v1, v2 = locate_cgroup_dirs(mountinfo, proc_cgroup)
    reasons: list[str] = []

    if "pids" in v1 or "memory" in v1:
        usable: dict[str, Path] = {}
        # No freezer: it only stopped forks racing the kill on close, and every command
        # runs in a PID namespace that dies with its init, so there is no race to stop;
        # a third cgroup per attempt cost a third of the attempt's cgroup time.
        for name, control in (
            ("pids", "pids.max"),
            ("memory", "memory.limit_in_bytes"),
        ):
            if name not in v1:
                continue
            why = _try_child(v1[name], control)
            if why is None:
                usable[name] = v1[name]
            else:
                reasons.append(f"v1 {name}: {why}")
        if "pids" in usable or "memory" in usable:
            return CgroupSetup(1, usable, frozenset(usable), "; ".join(reasons))

    if v2 is not None:
        why = _prepare_v2_parent(v2)
        if why is None:
            controllers = frozenset(_read(v2 / "cgroup.subtree_control").split())
            return CgroupSetup(2, {"unified": v2}, controllers & {"pids", "memory"})
        reasons.append(f"v2: {why}")
    if not reasons:
        reasons.append("no cgroup hierarchy with the pids or memory controller is mounted")
    return CgroupSetup(0, reason="; ".join(reasons))


def _enable_v2_controllers(parent: Path, names: list[str]) -> str | None:
    for name in names:
        try:
            _write(parent / "cgroup.subtree_control", f"+{name}")
        except OSError as exc:
            return f"cannot enable {name} in {parent}/cgroup.subtree_control: {exc.strerror}"
    return None


def _prepare_v2_parent(parent: Path) -> str | None:
    """Make pids and memory available to children of `parent` (cgroup v2); None when done.

    Enabling a controller in cgroup.subtree_control fails (EBUSY) while `parent` itself holds
    processes, unless it is the root cgroup (the "no internal processes" rule).  If the only
    process in `parent` is this one (e.g. evalctl started with `systemd-run --scope -p
    Delegate=yes`), it moves itself into the leaf `parent`/evalctl-harness first, as systemd's
    delegation docs prescribe; a side effect of the first detect_cgroups().  If other
    processes share the cgroup, they are left alone and we fall back to rlimits.
    Untested on a real pure-v2 machine (the development machine is v1 hybrid).
    """
    available = set(_read(parent / "cgroup.controllers").split())
    wanted = {"pids", "memory"} & available
    if not wanted:
        return f"{parent}/cgroup.controllers offers neither pids nor memory"
    missing = sorted(wanted - set(_read(parent / "cgroup.subtree_control").split()))
    why = _enable_v2_controllers(parent, missing)
    if why is not None and _read(parent / "cgroup.procs").split() == [str(os.getpid())]:
        leaf = parent / "evalctl-harness"
        try:
            leaf.mkdir(exist_ok=True)
            _write(leaf / "cgroup.procs", str(os.getpid()))
        except OSError as exc:
            return f"{why}; moving this process into {leaf} failed: {exc.strerror}"
        why = _enable_v2_controllers(parent, missing)
    if why is not None:
        return why
    return _try_child(parent, "pids.max" if "pids" in wanted else "memory.max")


@_once
def _machine_cgroups() -> CgroupSetup:
    return detect_cgroups()


def _describe_limits(setup: CgroupSetup) -> dict[str, str]:
    is_root = os.geteuid() == 0
    limits: dict[str, str] = {}
    if "pids" in setup.controllers:
        limits["processes"] = f"cgroup v{setup.version} pids.max"
    elif is_root:
        limits["processes"] = "rlimit RLIMIT_NPROC (not enforced for root)"
    else:
        limits["processes"] = (
            f"rlimit RLIMIT_NPROC (counts every process of uid {os.geteuid()} on the machine)"
        )
    if "memory" in setup.controllers:
        limits["memory"] = (
            "cgroup v1 memory.limit_in_bytes" if setup.version == 1 else "cgroup v2 memory.max"
        )
    else:
        limits["memory"] = "rlimit RLIMIT_AS (address space per process, not a total)"
    limits["file_size"] = "RLIMIT_FSIZE"
    return limits


def enforced_limits() -> dict[str, str]:
    """Which per-task limits this machine enforces, and how (see _describe_limits)."""
    return _describe_limits(_machine_cgroups())


# --------------------------------------------------------------------------- what to mount


def _editable_finder_paths(finder: Path) -> list[str]:
    """Directories named in a setuptools editable finder's MAPPING/NAMESPACES (read, not run)."""
    try:
        tree = ast.parse(finder.read_text(), str(finder))
    except (OSError, SyntaxError, ValueError):
        return []
    found: list[str] = []
    for node in tree.body:
        target: ast.expr | None = None
        value_node: ast.expr | None = None
        if isinstance(node, ast.AnnAssign):
            target, value_node = node.target, node.value
        elif isinstance(node, ast.Assign) and len(node.targets) == 1:
            target, value_node = node.targets[0], node.value
        if not (isinstance(target, ast.Name) and target.id in ("MAPPING", "NAMESPACES")):
            continue
        if value_node is None:
            continue
        try:
            value = ast.literal_eval(value_node)
        except (ValueError, TypeError, SyntaxError):
            continue
        if isinstance(value, dict):
            for item in value.values():
                found += [item] if isinstance(item, str) else [str(p) for p in item]
    return found


def _pth_paths(pth: Path) -> list[str]:
    """Directories a .pth file adds to sys.path, including editable-finder mappings."""
    found: list[str] = []
    try:
        lines = pth.read_text().splitlines()
    except OSError:
        return found
    for line in lines:
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith(("import ", "import\t")):
            for module in dict.fromkeys(re.findall(r"__editable___[A-Za-z0-9_]+_finder", line)):
                found += _editable_finder_paths(pth.parent / f"{module}.py")
            continue
        found.append(str(pth.parent / line))
    return found


def package_paths(distribution: str = "evalctl", entry_point_group: str = "evalctl") -> list[Path]:
    """Source directories of the evalctl package and of its plugins' distributions.

    For a regular install they are inside site-packages (already under sys.prefix); for an
    editable install they are wherever the .pth files and editable finders point.  Found from
    the imported module (if any), importlib's spec for the top-level package (which does not
    import it), the distributions' .pth files, and the entry points of `entry_point_group`.
    """
    found: list[str] = []
    module = sys.modules.get(distribution)
    if module is not None:
        if module.__file__:
            found.append(os.path.dirname(module.__file__))
        found += list(getattr(module, "__path__", []) or [])
    with contextlib.suppress(Exception):  # a broken package must not break the sandbox
        spec = importlib.util.find_spec(distribution)
        if spec is not None:
            found += list(spec.submodule_search_locations or [])
            if spec.origin and os.path.isabs(spec.origin):
                found.append(os.path.dirname(spec.origin))

    names = {distribution}
    with contextlib.suppress(Exception):
        for entry_point in importlib.metadata.entry_points(group=entry_point_group):
            if entry_point.dist is not None:
                names.add(entry_point.dist.name)
    for name in sorted(names):
        try:
            files = importlib.metadata.distribution(name).files or []
        except importlib.metadata.PackageNotFoundError:
            continue
        for file in files:
            if file.suffix == ".pth":
                found += _pth_paths(Path(str(file.locate())))

    result: list[Path] = []
    for path in found:
        real = Path(os.path.realpath(path))
        if real.is_dir() and real not in result:
            result.append(real)
    return result


@functools.cache
def _python_paths() -> tuple[Path, ...]:
    return tuple(python_paths())


def python_paths() -> list[Path]:
    """Read-only directories Python needs: prefixes, the interpreter's real directory, evalctl.

    Jails use a per-process cache of this (finding entry points costs a few ms).
    """
    raw = [
        sys.prefix,
        sys.base_prefix,
        sys.exec_prefix,
        sys.base_exec_prefix,
        os.path.dirname(os.path.realpath(sys.executable)),
    ]
    result: list[Path] = []
    for path in [Path(os.path.realpath(p)) for p in raw] + package_paths():
        if path.is_dir() and path not in result:
            result.append(path)
    return result


@dataclass(frozen=True)
class _Mount:
    """One bwrap filesystem operation: a read-only or read-write bind, a symlink, or an
    empty read-only directory laid over a place ("empty"; no source)."""

    kind: str  # "ro", "rw", "symlink", "empty"
    source: str
    dest: Path

    def args(self) -> list[str]:
        if self.kind == "symlink":
            return ["--symlink", self.source, str(self.dest)]
        if self.kind == "empty":
            return ["--tmpfs", str(self.dest), "--remount-ro", str(self.dest)]
        return ["--ro-bind" if self.kind == "ro" else "--bind", self.source, str(self.dest)]


def _etc_entries() -> list[Path]:
    entries: list[Path] = []
    for pattern in ETC_ALLOWLIST:
        entries += sorted(Path("/etc").glob(pattern))
    return entries


def _count_entries(directory: Path, limit: int) -> int:
    """Entries below `directory`, counting no further than `limit`."""
    count = 0
    for _, subdirs, files in os.walk(directory):
        count += len(subdirs) + len(files)
        if count > limit:
            break
    return count


def _synthetic_etc_files() -> dict[str, str]:
    """passwd, group and hosts for the sandbox identity and hostname."""
    return {
        "passwd": (
            "root:x:0:0:root:/root:/usr/sbin/nologin\n"
            f"{SANDBOX_USER}:x:{SANDBOX_UID}:{SANDBOX_GID}:{SANDBOX_USER}:{SANDBOX_HOME}:/bin/bash\n"
            "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n"
        ),
        "group": f"root:x:0:\n{SANDBOX_USER}:x:{SANDBOX_GID}:\nnogroup:x:65534:\n",
        "hosts": (
            f"127.0.0.1\tlocalhost {SANDBOX_HOSTNAME}\n::1\tlocalhost ip6-localhost ip6-loopback\n"
        ),
    }


def _assemble_etc(target: Path) -> list[_Mount]:
    """Build the sandbox's /etc in `target`; return the binds to lay over it.

    Allowlisted files and small directories are copied (a snapshot taken at open()),
    symlinks into /usr or /proc are recreated, passwd/group/hosts are synthesized, and big
    directories (alternatives, ssl/certs...) are bind-mounted read-only over the copy.  One
    bind for /etc instead of one per entry: bwrap's cost grows with every mount it makes.
    """
    binds: list[_Mount] = []
    target.mkdir(mode=0o755, exist_ok=True)
    target.chmod(0o755)  # mkdtemp made it 0700: the sandbox's uid must read it
    for entry in _etc_entries():
        dest = target / entry.relative_to("/etc")
        dest.parent.mkdir(parents=True, exist_ok=True)
        try:
            if entry.is_symlink() and os.path.realpath(entry).startswith(("/usr/", "/proc/")):
                os.symlink(os.readlink(entry), dest)
            elif entry.is_dir():
                if _count_entries(entry, ETC_COPY_MAX_ENTRIES) > ETC_COPY_MAX_ENTRIES:
                    dest.mkdir(mode=0o755)
                    binds.append(_Mount("ro", os.path.realpath(entry), entry))
                else:
                    shutil.copytree(entry, dest, symlinks=True)
            elif entry.exists():  # a file, or a symlink elsewhere (e.g. into /run): copy it
                shutil.copyfile(entry, dest)
                dest.chmod(0o644)
        except OSError as exc:
            if exc.errno in (errno.ENOSPC, errno.EDQUOT):
                raise  # the copy's side is full: no /etc of this one is complete
            log.warning("not copying %s into the sandbox's /etc: %s", entry, exc)
    for name, text in _synthetic_etc_files().items():
        (target / name).write_text(text)
        (target / name).chmod(0o644)
    return binds


def _remove_if_creator(directory: Path, creator: int) -> None:
    if os.getpid() == creator:  # not from a forked child that exits through atexit
        shutil.rmtree(directory, ignore_errors=True)


# Where the shared directory goes when it can: a memory file system. It holds some 700
# small files (the /etc copy is mostly symlinks) and is removed at exit; on ext4 without
# a journal an inode freed in the last minutes is passed over, one by one, whenever a
# new one is allocated, so each run's removal made the next run's copy take 300 ms
# instead of 20 (and every file made near it afterwards dearer).
MEMORY_SCRATCH = Path("/dev/shm")
# What /dev/shm must have free to be used (anyone may fill it; Docker's is 64 MB): the
# copy takes about 1 MB and 700 inodes.
SCRATCH_MIN_BYTES = 16 * 1024 * 1024
SCRATCH_MIN_INODES = 4096
SHARED_PREFIX = "evalctl-bwrap-"
# In each shared directory, a file its process holds an flock on while it lives: the
# lock goes with the process however it ends (SIGKILL, SIGTERM), in any PID namespace,
# so a later evalctl can tell an abandoned directory from one in use and remove it.
ALIVE_NAME = ".alive"
# A directory with no lock file is in the making, or from an evalctl before the lock:
# removed only once it is this old.
UNLOCKED_STALE_SECONDS = 24 * 3600
_ALIVE: list[int] = []  # the lock's descriptor, open for the process's life
# Where device nodes go when the shared directory's file system is mounted nodev.
DEVICE_FALLBACKS = (Path("/var/tmp"), Path("/dev"))


def _roomy(directory: Path) -> bool:
    """Whether `directory` has room for the shared directory (a file system reporting no
    inode count, as tmpfs with nr_inodes=0 does, has no limit on them)."""
    try:
        info = os.statvfs(directory)
    except OSError:
        return False
    inodes_ok = info.f_files == 0 or info.f_favail >= SCRATCH_MIN_INODES
    return info.f_bavail * info.f_frsize >= SCRATCH_MIN_BYTES and inodes_ok


def _remove_abandoned(parent: Path) -> None:
    """Remove shared directories of this user's that no living process holds: evalctl
    killed by a signal leaves its directory (about 1 MB in memory in /dev/shm)."""
    import fcntl
    import stat

    try:
        entries = list(os.scandir(parent))
    except OSError:
        return
    for entry in entries:
        if not entry.name.startswith(SHARED_PREFIX):
            continue
        try:
            info = entry.stat(follow_symlinks=False)
            if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.geteuid():
                continue
            # Non-blocking: a FIFO planted under the name must not hold evalctl.
            lock = os.open(os.path.join(entry.path, ALIVE_NAME),
                           os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        except FileNotFoundError:
            if time.time() - info.st_mtime > UNLOCKED_STALE_SECONDS:
                shutil.rmtree(entry.path, ignore_errors=True)
            continue
        except OSError:
            continue
        try:
            if not stat.S_ISREG(os.fstat(lock).st_mode):
                continue  # not a lock file of evalctl's: left alone
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            continue  # held: its process lives
        finally:
            os.close(lock)
        shutil.rmtree(entry.path, ignore_errors=True)


def _hold_alive(directory: Path) -> None:
    """Take the lock that says `directory` is in use, under its final name only once it
    is held (a sweep must never find it unheld)."""
    import fcntl

    making = directory / f"{ALIVE_NAME}.new"
    lock = os.open(making, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    fcntl.flock(lock, fcntl.LOCK_EX)
    os.rename(making, directory / ALIVE_NAME)
    _ALIVE.append(lock)


@_once
def _shared_dir() -> Path:
    """A directory of this process's for what every jail shares (never mounted itself):
    in /dev/shm when it has room, else in the system's temporary directory. Removed at
    exit; one left by an evalctl that was killed is removed by the next."""
    temporary = Path(tempfile.gettempdir())
    for parent in (MEMORY_SCRATCH, temporary, *DEVICE_FALLBACKS):  # any may hold one left
        _remove_abandoned(parent)
    return _new_shared_dir(([MEMORY_SCRATCH] if _roomy(MEMORY_SCRATCH) else []) + [temporary])


@_once
def _fallback_dir() -> Path:
    """A second shared directory, in the temporary directory, for when /dev/shm was
    filled after it was found roomy (by anyone: it is shared)."""
    return _new_shared_dir([Path(tempfile.gettempdir())])


def _new_shared_dir(parents: list[Path]) -> Path:
    """A new shared directory, held, in the first of `parents` where one can be made."""
    failure: OSError | None = None
    for parent in parents:
        try:
            directory = Path(tempfile.mkdtemp(prefix=SHARED_PREFIX, dir=parent))
        except OSError as exc:  # not ours to write, or full
            failure = exc
            continue
        atexit.register(_remove_if_creator, directory, os.getpid())
        try:
            _hold_alive(directory)
        except OSError as exc:
            shutil.rmtree(directory, ignore_errors=True)
            failure = exc
            continue
        return directory
    raise SandboxError(f"cannot make a directory for the sandbox's shared files: {failure}")


@_once
def _empty_file() -> Path:
    """An empty, read-only file of this process's, laid over what the sandbox must not
    read."""
    for where in (_shared_dir, _fallback_dir):
        try:
            descriptor, name = tempfile.mkstemp(prefix="empty-", dir=where())
        except OSError:
            continue
        os.close(descriptor)
        os.chmod(name, 0o444)
        return Path(name)
    raise SandboxError("cannot make the sandbox's empty file")


@_once
def _shared_etc() -> tuple[Path, tuple[_Mount, ...]]:
    """The sandbox's /etc, assembled once per process (it is the same for every jail, and
    creating ~40 files costs ~15 ms here), and the binds over it. Built in a directory of
    its own, removed if it cannot be finished: a half-made /etc is never used, and the
    next try starts clean. Where the shared directory is in /dev/shm and that filled up
    since, it is built in the temporary directory instead."""
    failure: OSError | None = None
    for where in (_shared_dir, _fallback_dir):
        try:
            target = Path(tempfile.mkdtemp(prefix="etc-", dir=where()))
        except OSError as exc:
            failure = exc
            continue
        try:
            return target, tuple(_assemble_etc(target))
        except OSError as exc:
            shutil.rmtree(target, ignore_errors=True)
            failure = exc
            if target.parent.parent != MEMORY_SCRATCH:
                break  # the temporary directory was the fallback: nowhere else to try
    raise SandboxError(f"cannot make the sandbox's /etc: "
                       f"{getattr(failure, 'strerror', None) or failure}")


# bwrap's --dev binds the host's own device nodes. When evalctl runs as root the
# sandbox's uid is root's on the host, so code inside could chmod them for the whole
# machine (found by an attacker: `chmod 000 /dev/null` breaks every other user's
# programs). Nodes of this process's own, owned by an id no sandbox runs as, are bound
# over them: reading and writing work as before, a chmod inside fails.
DEVICE_NODES = ("null", "zero", "full", "random", "urandom", "tty")
DEVICE_OWNER = 65534  # nobody: never the sandbox's host uid when evalctl is root


def _device_directory() -> Path:
    """A new directory for device nodes, on a file system that honours them (not
    mounted nodev): in the shared directory if it can, else a held directory of its own
    (as the shared one is: removed at exit, or by the next evalctl if this one is killed)
    under /var/tmp, else under /dev (a devtmpfs)."""
    shared = _shared_dir()
    for parent in (shared, *DEVICE_FALLBACKS):
        try:
            if os.statvfs(parent).f_flag & os.ST_NODEV:
                continue
            if parent == shared:
                return Path(tempfile.mkdtemp(prefix=".evalctl-dev-", dir=parent))
            return _new_shared_dir([parent])
        except (OSError, SandboxError):
            continue
    raise SandboxError("no file system here allows device nodes for the sandbox")


@_once
def _private_device_nodes() -> tuple[tuple[str, str], ...]:
    """(node of ours, /dev path) for each device bwrap's --dev binds from the host, when
    the sandbox's host uid (this process's) owns any of them, as root does; none
    otherwise (a chmod inside then fails on the host's own). SandboxError when they are
    needed and cannot be made (no CAP_MKNOD): the sandbox is then refused, not run
    with the machine's devices at its mercy."""
    import stat

    owned = [name for name in DEVICE_NODES
             if os.path.exists(f"/dev/{name}") and os.stat(f"/dev/{name}").st_uid == os.geteuid()]
    if not owned:
        return ()
    directory = _device_directory()
    made = []
    try:
        for name in DEVICE_NODES:
            try:
                host = os.stat(f"/dev/{name}")
            except OSError:
                continue  # bwrap's --dev binds what exists
            if not stat.S_ISCHR(host.st_mode):
                continue
            node = directory / name
            os.mknod(node, stat.S_IFCHR | 0o666, host.st_rdev)
            os.chmod(node, 0o666)  # past the umask
            os.chown(node, DEVICE_OWNER, DEVICE_OWNER)
            made.append((str(node), f"/dev/{name}"))
        if made:
            os.close(os.open(made[0][0], os.O_WRONLY | os.O_CLOEXEC))  # usable, not nodev
    except OSError as exc:
        raise SandboxError(
            f"cannot make the sandbox's own device nodes in {directory} "
            f"({exc.strerror or exc}): this process owns /dev/{owned[0]}, which the "
            "sandbox could otherwise chmod for the whole machine; run evalctl as an "
            "ordinary user, or where it may create device nodes") from exc
    return tuple(made)


# The kernel's keyrings are not namespaced: with the sandbox's uid the harness's own, code
# inside could add keys to, read from and unlink keys in the harness user's keyrings by
# serial number (an attacker did: a channel between attempts, and deletion of the host's
# keys).  Nothing a task needs uses them; Docker's default profile refuses them too.
# Also refused: taking another process's descriptor (pidfd_getfd) and opening a file by its
# handle (open_by_handle_at, which needs a capability the sandbox lacks on every file
# system but pidfs: there, from 6.13, a handle made from the sandbox's own pidfd, its inode
# number counted down, opened a pidfd of pid 1).  With pid 1's eventfd, code inside could
# report any exit status for the command (an attacker did); nothing a task runs needs them.
BLOCKED_SYSCALLS = ("add_key", "request_key", "keyctl", "pidfd_getfd", "open_by_handle_at")

# Calls refused when they name pid 1, bubblewrap's init: (system call, the argument that is
# the pid).  Traced, it could be made to outlive evalctl (its parent-death signal cleared)
# or to report another exit status for the command; its limits are evalctl's to set.
# /proc/1/mem cannot be opened for writing: /proc is read-only.
PID_1_CALLS = (("ptrace", 1), ("process_vm_writev", 0), ("process_vm_readv", 0),
               ("pidfd_open", 0), ("prlimit64", 0))


def _environment_size(pid: int) -> int:
    """How many bytes of environment process `pid` was started with (0 if it is gone)."""
    try:
        fd = os.open(f"/proc/{pid}/environ", os.O_RDONLY | os.O_CLOEXEC)
    except OSError:  # gone, or a /proc that does not show it: nothing to check
        return 0
    try:
        return len(os.read(fd, 1 << 16))
    finally:
        os.close(fd)


@_once
def _become_subreaper() -> None:
    """Orphans of this process's descendants come to it, not to the host's init: the
    sandboxes' pid 1s, once bwrap's outer process has exited (see Launch.end)."""
    import ctypes

    pr_set_child_subreaper = 36  # <linux/prctl.h>
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(pr_set_child_subreaper, 1, 0, 0, 0) != 0:
        log.warning("cannot become a subreaper (errno %d): the host's init reaps the "
                    "sandboxes' pid 1s", ctypes.get_errno())


class SeccompUnavailable(SandboxError):
    """libseccomp cannot be loaded, so the filter cannot be built."""


# Refused outright when commands may not touch each other (BwrapOptions.tracing False:
# the graders' sandbox).  A check such as `python3 solution.py | grep -qx 42` runs the
# agent's code beside the verifying command: traced (gdb -p $PPID, "call _exit(0)") or
# with its memory written, the shell reported success for a wrong answer (an attacker
# did).  The agent's own sandbox keeps them, for gdb and strace.
TRACING_SYSCALLS = ("ptrace", "process_vm_writev", "process_vm_readv")


@_once
def seccomp_filter(tracing: bool = True) -> Path:
    """The BPF program bwrap loads (--seccomp): BLOCKED_SYSCALLS fail with EPERM (and,
    without `tracing`, TRACING_SYSCALLS), calls of another architecture's ABI kill the
    caller (libseccomp's default), all else is allowed. Built once per process with
    libseccomp, which knows each architecture's numbers."""
    try:
        import pyseccomp
    except (ImportError, RuntimeError, OSError) as exc:  # RuntimeError: no libseccomp
        raise SeccompUnavailable(
            f"libseccomp cannot be loaded ({exc}); install it (Debian/Ubuntu: apt-get "
            "install libseccomp2; Fedora: dnf install libseccomp)") from exc
    program = pyseccomp.SyscallFilter(pyseccomp.ALLOW)
    refused = BLOCKED_SYSCALLS if tracing else (*BLOCKED_SYSCALLS, *TRACING_SYSCALLS)
    for name in refused:
        program.add_rule(pyseccomp.ERRNO(errno.EPERM), name)
    for name, argument in PID_1_CALLS:
        if name in refused:
            continue
        # The kernel reads a pid as 32 bits: 1 + 2**32 is pid 1 too.
        program.add_rule(pyseccomp.ERRNO(errno.EPERM), name,
                         pyseccomp.Arg(argument, pyseccomp.MASKED_EQ, 0xFFFFFFFF, 1))
    path = _shared_dir() / ("seccomp.bpf" if tracing else "seccomp-no-tracing.bpf")
    try:
        with open(path, "wb") as out:
            program.export_bpf(out)
    except OSError as exc:  # pyseccomp's own errors are OSErrors too
        raise SandboxError(f"cannot write the sandbox's seccomp filter to {path}: "
                           f"{exc.strerror or exc}") from exc
    return path


def _within(path: str, ancestor: str) -> bool:
    """`path` is `ancestor` or below it (both absolute and normalised): string work only,
    since every attempt orders its mounts and pathlib's comparisons cost milliseconds."""
    if path == ancestor:
        return True
    return path.startswith(ancestor if ancestor.endswith("/") else ancestor + "/")


def _is_within(path: Path, ancestor: Path) -> bool:
    return _within(str(path), str(ancestor))


def _depth(path: str) -> int:
    return 0 if path == "/" else path.rstrip("/").count("/")


def _identity_ro(mount: _Mount) -> bool:
    return mount.kind == "ro" and mount.source == str(mount.dest)


def _kept_mounts(mounts: list[_Mount]) -> list[_Mount]:
    """`mounts` in their order, without read-only binds already covered by a read-only
    parent, and without a second mount on the same place.

    A read-only bind of a path inside another read-only bind of the same host tree adds
    nothing, unless a read-write bind sits between the two (then it re-protects a subtree).
    """
    identity_ro = [str(m.dest) for m in mounts if _identity_ro(m)]
    others = [str(m.dest) for m in mounts if not _identity_ro(m)]
    kept: list[_Mount] = []
    seen: set[str] = set()
    for mount in mounts:
        dest = str(mount.dest)
        if _identity_ro(mount) and any(
            parent != dest and _within(dest, parent)
            and not any(o != parent and _within(o, parent) and _within(dest, o)
                        for o in others)
            for parent in identity_ro
        ):
            continue
        if dest not in seen:
            seen.add(dest)
            kept.append(mount)
    return kept


def _by_depth(mounts: list[_Mount]) -> list[_Mount]:
    return sorted(mounts, key=lambda m: _depth(str(m.dest)))  # stable: siblings keep order


def _order_mounts(mounts: list[_Mount]) -> list[_Mount]:
    """Parents before children, dropping read-only binds already covered by a read-only
    parent (see _kept_mounts)."""
    return _by_depth(_kept_mounts(mounts))


def _order_with_base(base: _BasePlan, own: list[_Mount]) -> list[_Mount]:
    """_order_mounts([*base.system, *base.code, *own]), with the base's share worked out
    once per plan: an attempt's own read-write binds (and links) only join the order when none of
    them is a place the base mounts, or lies above a read-only bind of the base (then
    it could change what the base keeps, and everything is ordered anew)."""
    dests = [str(m.dest) for m in own]
    if any(m.kind not in ("rw", "symlink") for m in own) or len(set(dests)) != len(dests) or any(
            dest in base.places or any(_within(ro, dest) for ro in base.identity_ro)
            for dest in dests):
        return _order_mounts([*base.system, *base.code, *own])
    return _by_depth([*base.kept, *own])


@_once
def _leading_args(bwrap: str, network: bool) -> tuple[str, ...]:
    """Namespaces, /proc and /dev: the same for every jail of a process."""
    args = _namespace_args(bwrap, network)
    args += ["--proc", "/proc", *PROC_COVERS]
    if os.path.exists(KEYS_LIST):  # the kernel has keyrings (see KEYS_LIST)
        args += ["--ro-bind", str(_empty_file()), KEYS_LIST]
    args += ["--dev", "/dev"]
    for node, dest in _private_device_nodes():  # over the host's (see DEVICE_NODES)
        args += ["--dev-bind", node, dest]
    return tuple(args)


@dataclass(frozen=True)
class _BasePlan:
    """The mounts every jail with the same options shares: the system, /etc, the Python
    installation, plugin code and extra read-only paths (`code`, checked against each
    attempt's run directory), and the hidden directories that need a cover."""

    system: tuple[_Mount, ...]
    code: tuple[_Mount, ...]
    covers: tuple[str, ...]
    kept: tuple[_Mount, ...] = ()  # _kept_mounts of system and code
    places: frozenset[str] = frozenset()  # where system and code mount something
    identity_ro: tuple[str, ...] = ()  # where they bind a host path read-only on itself


@_once
def _base_plan(ro_paths: tuple[str, ...], hidden: tuple[Path, ...]) -> _BasePlan:
    """Worked out once per process and option set: globbing /etc, resolving paths and
    checking they exist would otherwise be repeated for every sandbox of every attempt."""
    system = _system_mounts()
    etc, etc_binds = _shared_etc()
    system.append(_Mount("ro", str(etc), Path("/etc")))
    system += etc_binds

    code: list[_Mount] = []
    extra = [Path(os.path.realpath(p)) for p in ro_paths]
    for path in [*_python_paths(), *extra]:
        if any(_is_within(path, cover) for cover in hidden):
            continue  # not mounted at all
        if not path.exists():
            raise SandboxError(f"read-only path {path} does not exist")
        code.append(_Mount("ro", str(path), path))
    read_only = [str(m.dest) for m in (*system, *code) if m.kind == "ro"]
    covers = tuple(str(path) for path in hidden
                   if path.is_dir() and any(_within(str(path), ro) for ro in read_only))
    both = [*system, *code]
    return _BasePlan(tuple(system), tuple(code), covers, kept=tuple(_kept_mounts(both)),
                     places=frozenset(str(m.dest) for m in both),
                     identity_ro=tuple(str(m.dest) for m in both if _identity_ro(m)))


# --------------------------------------------------------------------------- the jail


def _through_a_link(top: str, path: str) -> bool:
    """Whether a directory between `top` and `path` (below it) is a link, or missing."""
    here = top
    for part in path[len(top) + 1:].split("/")[:-1]:
        here = os.path.join(here, part)
        if not os.path.isdir(here) or os.path.islink(here):
            return True
    return False


def _make_mount_point(root: Path, parts: list[str], *, directory: bool) -> None:
    """root/parts..., each directory on the way made when missing and never followed
    when it is a link (a SandboxError then): the last a directory, or an empty file."""
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        for index, part in enumerate(parts):
            last = index == len(parts) - 1
            try:
                if last and not directory:
                    os.close(os.open(part, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW |
                                     os.O_CLOEXEC, 0o644, dir_fd=fd))
                    return
                with contextlib.suppress(FileExistsError):
                    os.mkdir(part, 0o755, dir_fd=fd)
                below = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW |
                                os.O_CLOEXEC, dir_fd=fd)
            except OSError as exc:
                raise SandboxError(
                    f"cannot make the mount point {root.joinpath(*parts)}: "
                    f"{root.joinpath(*parts[:index + 1])} is not a directory of its own "
                    f"({exc.strerror or exc})") from None
            os.close(fd)
            fd = below
    finally:
        os.close(fd)


def _real_path(path: str | os.PathLike[str]) -> Path:
    """Path(path).resolve(strict=True), as the kernel resolves it: one open and one
    readlink, where Python's realpath looks at every component of a deep run directory
    (three paths for each of an attempt's two jails)."""
    try:
        fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
    except OSError:
        return Path(path).resolve(strict=True)  # its error, in its words
    try:
        real = os.readlink(f"/proc/self/fd/{fd}")
    except OSError:  # no /proc here
        return Path(path).resolve(strict=True)
    finally:
        os.close(fd)
    return Path(real) if real.startswith("/") else Path(path).resolve(strict=True)


@functools.lru_cache(maxsize=16)
def _real_paths(paths: tuple[str | os.PathLike[str], ...]) -> tuple[Path, ...]:
    """The hidden directories, the same for every jail of a process, resolved once."""
    return tuple(Path(os.path.realpath(p)) for p in paths)


# close_quickly() clears setid bits on the event loop in trees of at most this many
# entries each; a larger one is walked in a thread.
QUICK_CLOSE_ENTRIES = 256

# Mount sets (read-only paths, hidden paths) a jail of this process has been opened
# with: their probe, /etc and plan are made, so open_quickly() may open another.
_PLANNED: set[tuple[tuple[str, ...], tuple[Path, ...]]] = set()


@dataclass
class BwrapOptions:
    network: bool = False
    ro_paths: tuple[str, ...] = ()  # extra read-only binds, each at its own path
    max_processes: int = 512  # whole attempt (bwrap's init takes 1 per running command)
    memory_mb: int = 4096  # whole attempt with a cgroup; per process with RLIMIT_AS
    file_size_mb: int = 1024  # largest single file any process may write
    tracing: bool = True  # commands may trace other processes (see TRACING_SYSCALLS)


class BwrapJail:
    """One per task attempt, over one workspace.

    open() once, wrap() for every command, close() at the end (or use it as a context manager).
    Commands of one attempt share its cgroup, hence its process and memory budget.
    """

    def __init__(
        self,
        workspace: Path,
        home: Path,
        tmp: Path,
        options: BwrapOptions,
        *,
        cgroups: CgroupSetup | None = None,  # None: what this machine offers (tests override)
        hidden: tuple[Path, ...] = (),  # directories under a read-only mount shown empty
        read_only: tuple[str, ...] = (),  # in the workspace, relative ("." is all of it)
    ) -> None:
        self.workspace = _real_path(workspace)
        self.home = _real_path(home)
        self.tmp = _real_path(tmp)
        self.read_only = read_only
        self.options = options
        self.hidden = _real_paths(tuple(hidden))
        self._cgroups = _machine_cgroups() if cgroups is None else cgroups
        self._bwrap = _find_bwrap()
        self._cgroup_dirs: dict[str, Path] = {}
        self._static_args: list[str] | None = None
        self._running: set[Launch] = set()  # launches whose sandbox's pid 1 is not reaped

    # -- lifecycle

    def open(self) -> None:
        """Create the attempt's cgroups (if this machine allows) and precompute the mounts."""
        if self._static_args is not None:
            raise SandboxError("BwrapJail.open() called twice")
        reason = probe()
        if reason is not None or self._bwrap is None:
            raise SandboxError(f"bubblewrap is unusable here: {reason}")
        try:
            self._create_cgroups()
            self._static_args = self._build_static_args()
        except BaseException:
            self.close()
            raise
        _PLANNED.add((tuple(self.options.ro_paths), self.hidden))

    def _strip_setid_bits(self) -> None:
        """No setuid or setgid file the sandbox made stays behind: the attempt's files are
        kept after the run, and one owned by root would be a way to root for anyone."""
        for top in self._writable():
            strip_setid_bits(top)

    def _writable(self) -> tuple[Path, ...]:
        """The directories the sandbox writes to, each once: the graders' HOME and TMPDIR
        are one directory."""
        return tuple(dict.fromkeys((self.workspace, self.home, self.tmp)))

    def close(self) -> None:
        """Kill whatever still runs: every command's sandbox not yet ended (through its pid 1,
        with or without cgroups) and anything else in the attempt's cgroups; give those,
        empty, to the next jail of this process (or remove them if anything survived).
        Idempotent."""
        for launch in list(self._running):  # a command still running ends here
            launch.end()
        self._release_cgroups()
        if self._static_args is not None:
            self._strip_setid_bits()
        self._static_args = None

    def _release_cgroups(self) -> None:
        if self._cgroup_dirs:
            if self._kill_cgroup_members() and self._charged_bytes() <= POOL_MAX_CHARGE:
                _CGROUP_POOL.give(self._pool_key(), self._cgroup_dirs)
            else:
                for path in self._cgroup_dirs.values():
                    _rmdir_cgroup(path)
            self._cgroup_dirs = {}

    def open_quickly(self) -> bool:
        """open(), when it is only work of bounded time: this process has opened a jail
        with the same mounts before (the probe, /etc and the mount plan are made) and an
        empty cgroup set with these limits waits in the pool. False, and nothing done,
        otherwise: open() it off the event loop."""
        key = (tuple(self.options.ro_paths), self.hidden)
        if key not in _PLANNED or (self._cgroups.version != 0
                                   and not _CGROUP_POOL.has(self._pool_key())):
            return False
        self.open()
        return True

    def close_quickly(self, entries: int = QUICK_CLOSE_ENTRIES) -> bool:
        """close(), when it is only reads of bounded time: nothing runs in the attempt's
        cgroups, they are not charged with memory that would keep them from the pool,
        and the workspace, HOME and TMPDIR hold at most `entries` entries each and no
        setid bit to clear. False otherwise, with nothing changed but a sandbox still
        running killed: close() it off the event loop."""
        if not all(launch.end(wait=False) for launch in list(self._running)):
            return False
        if self._cgroup_dirs and (self._members() or self._charged_bytes() > POOL_MAX_CHARGE):
            return False
        if self._static_args is not None and not all(
                strip_setid_bits(top, budget=entries)
                for top in self._writable()):
            return False
        if self._cgroup_dirs:  # seen empty and not over-charged above: back to the pool
            _CGROUP_POOL.give(self._pool_key(), self._cgroup_dirs)
            self._cgroup_dirs = {}
        self._static_args = None
        return True

    def __enter__(self) -> BwrapJail:
        self.open()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    @property
    def limits(self) -> dict[str, str]:
        """enforced_limits() for this jail's cgroup setup."""
        return _describe_limits(self._cgroups)

    @property
    def cgroup_dirs(self) -> dict[str, Path]:
        """Controller ("pids", "memory", "freezer" or "unified") -> this attempt's cgroup."""
        return dict(self._cgroup_dirs)

    # -- the command line

    def launch(self, argv: list[str], env: Mapping[str, str], cwd: Path) -> Launch:
        """How to run `argv` in the sandbox with exactly `env` (plus HOME/TMPDIR), in `cwd`
        (inside the workspace): exec `launch.argv` with env={} and `launch.pass_fds` open,
        call `launch.started(pid)` as soon as it runs, and `launch.close()` at the end.

        bwrap is started directly, with nothing of the harness's environment (the
        sandbox's is built from nothing by --clearenv). It stops before running anything
        in the sandbox until started() has put the sandbox into the attempt's cgroups and
        given it the rlimits no cgroup enforces: no shell on the host does that, and so a
        command costs one process fewer.
        """
        if self._static_args is None or self._bwrap is None:
            raise SandboxError("BwrapJail.launch() before open()")
        if not argv:
            raise ValueError("empty argv")
        if cwd != self.workspace:  # the common case needs no walk of the path
            cwd = Path(cwd).resolve()
        if not _is_within(cwd, self.workspace):
            raise ValueError(f"cwd {cwd} is not inside the workspace {self.workspace}")
        full_env = dict(env)
        full_env["HOME"] = str(SANDBOX_HOME)
        full_env["TMPDIR"] = str(SANDBOX_TMP)
        env_args = ["--clearenv"]
        for name, value in full_env.items():
            if not name or "=" in name or "\0" in name or "\0" in value:
                raise ValueError(f"invalid environment variable {name!r}")
            env_args += ["--setenv", name, value]
        launch = Launch(self)
        launch.argv = [
            self._bwrap,
            *self._static_args,
            "--seccomp", str(launch.seccomp_fd),
            "--info-fd", str(launch.info_write),
            "--block-fd", str(launch.block_read),
            *env_args,
            "--chdir",
            str(cwd),
            "--",
            *argv,
        ]
        return launch

    def _enter(self, pid: int) -> None:
        """Put the sandbox's first process (`pid`, not yet running anything of the
        command's) into the attempt's cgroups, and give it the rlimits that stand in for
        a missing cgroup controller; everything it starts inherits both."""
        import resource  # here: `evalctl list-plugins` discovers this module, never runs it

        for path in self._cgroup_dirs.values():
            procs = os.open(f"{path}/cgroup.procs", os.O_WRONLY | os.O_CLOEXEC)
            try:
                os.write(procs, str(pid).encode())
            finally:
                os.close(procs)
        # No core files; a file may grow to file_size_mb (a write beyond it: EFBIG when
        # the writer ignores SIGXFSZ, else that signal ends it).  Hard limits too: nothing
        # inside has CAP_SYS_RESOURCE to raise them again.
        resource.prlimit(pid, resource.RLIMIT_CORE, (0, 0))
        size = self.options.file_size_mb * 1024 * 1024
        hard = resource.getrlimit(resource.RLIMIT_FSIZE)[1]  # what bwrap inherited from us
        if hard != resource.RLIM_INFINITY:
            size = min(size, hard)  # a lower limit of the user's own stays
        resource.prlimit(pid, resource.RLIMIT_FSIZE, (size, size))
        enforced = self._cgroups.controllers if self._cgroup_dirs else frozenset()
        if "pids" not in enforced:
            limit = self.options.max_processes
            resource.prlimit(pid, resource.RLIMIT_NPROC, (limit, limit))
        if "memory" not in enforced:
            limit = self.options.memory_mb * 1024 * 1024
            resource.prlimit(pid, resource.RLIMIT_AS, (limit, limit))

    def _build_static_args(self) -> list[str]:
        assert self._bwrap is not None
        base = _base_plan(tuple(self.options.ro_paths), self.hidden)
        run_dir = str(self.workspace.parent)
        for mount in base.code:
            if _within(run_dir, mount.source):
                raise SandboxError(
                    f"refusing to mount {mount.source} read-only: it contains {run_dir}, "
                    "so every workspace, ledger and seed of the run would be visible"
                )
        # Read-only all of it, when every file in it is protected (read_only ".").
        workspace = _Mount("ro" if "." in self.read_only else "rw", str(self.workspace),
                           self.workspace)
        own = [
            _Mount("rw", str(self.tmp), SANDBOX_TMP),
            # The graders' HOME is their TMPDIR: a link, where a second bind of the same
            # directory would cost bubblewrap another pass over the mount table.
            _Mount("symlink", str(SANDBOX_TMP), SANDBOX_HOME) if self.home == self.tmp
            else _Mount("rw", str(self.home), SANDBOX_HOME),
            workspace,
            *self._read_only_mounts(),
            *self._guards([*base.code, workspace]),
        ]
        args = list(_leading_args(self._bwrap, self.options.network))
        for mount in _order_with_base(base, own):
            args += mount.args()
        for path in base.covers:  # an empty tmpfs laid over it, read-only with the root
            args += ["--tmpfs", path, "--remount-ro", path]
        # bwrap's root is a tmpfs; without this the sandbox could write anywhere outside the
        # binds (into RAM).  Not recursive: the binds above keep their own flags.
        args += ["--remount-ro", "/"]
        return args

    def _guards(self, mounts: list[_Mount]) -> list[_Mount]:
        """Read-only binds over the directories that lead, inside the attempt's TMPDIR
        (at /tmp) or HOME, to where `mounts` are mounted, and those directories made on
        the host beforehand. bubblewrap makes a missing mount point itself, following
        links, while the host's root is still reachable from where it works (found by an
        attacker round: with the run directory under /tmp, the workspace's mount point
        was made inside the agent's own /tmp; a command replaced a directory on the way
        with a link to /oldroot/root, and the next command's bubblewrap made the rest of
        the path under the host's /root, as root). Read-only, and a mount point in every
        sandbox of the attempt, no directory on the way can be renamed or replaced."""
        roots = [(self.tmp, SANDBOX_TMP)]
        if self.home != self.tmp:
            roots.append((self.home, SANDBOX_HOME))
        dests = [str(m.dest) for m in mounts]
        guards: dict[str, _Mount] = {}
        for mount, dest in zip(mounts, dests, strict=True):
            for source_root, dest_root in roots:
                if dest == str(dest_root) or not _within(dest, str(dest_root)) or any(
                        other != dest and _within(dest, other) for other in dests):
                    continue  # mounted inside another of `mounts`, which holds its place
                parts = dest[len(str(dest_root)) + 1:].split("/")
                _make_mount_point(source_root, parts, directory=not os.path.isfile(
                    mount.source))
                if len(parts) > 1:
                    first = str(dest_root / parts[0])
                    guards[first] = _Mount("ro", str(source_root / parts[0]), Path(first))
        return list(guards.values())

    def _read_only_mounts(self) -> list[_Mount]:
        """The workspace's read-only paths, bound read-only over its own bind: a bound file
        can be neither written nor removed nor replaced, a bound directory gains nothing.
        Each directory above one is bound to itself (writable): a mount point cannot be
        renamed, so a protected file's directory cannot be moved aside with the file in
        it and a forged one put in its place. Beside a read-only file, `__pycache__` is an
        empty read-only directory: no bytecode cache forged while the commands run can
        stand in for it (the graders remove the caches before each check). Only what is
        there, as a directory or a regular file, and inside the workspace (a link is not
        followed: its directory is bound where the whole of it is)."""
        import stat

        pinned: dict[str, None] = {}
        no_caches: dict[str, None] = {}
        mounts = []
        for relative in self.read_only:
            path = os.path.normpath(os.path.join(self.workspace, relative))
            if not path.startswith(f"{self.workspace}/") or _through_a_link(
                    str(self.workspace), path):
                # The workspace itself is its own bind's, outside is not ours; and a
                # path through a link would be mounted where the link leads, leaving
                # the link free to be pointed elsewhere before the next command.
                continue
            try:
                mode = os.lstat(path).st_mode
            except OSError:
                continue
            if stat.S_ISDIR(mode) or stat.S_ISREG(mode):
                mounts.append(_Mount("ro", path, Path(path)))
                if stat.S_ISREG(mode):
                    no_caches[os.path.join(os.path.dirname(path), "__pycache__")] = None
                above = os.path.dirname(path)
                while above.startswith(f"{self.workspace}/"):
                    pinned[above] = None
                    above = os.path.dirname(above)
        return [*(_Mount("rw", d, Path(d)) for d in pinned), *mounts,
                *(_Mount("empty", "", Path(d)) for d in no_caches)]

    # -- cgroups

    def _pool_key(self) -> tuple[object, ...]:
        return (tuple(sorted(self._cgroups.parents.items())), self.options.max_processes,
                self.options.memory_mb)

    def _create_cgroups(self) -> None:
        setup = self._cgroups
        if setup.version == 0:
            return
        _remove_stale_cgroups_once(tuple(setup.parents.values()))
        pooled = _CGROUP_POOL.take(self._pool_key())
        while pooled is not None:  # empty, with this jail's limits already written
            if all(path.is_dir() for path in pooled.values()):
                self._cgroup_dirs = pooled
                return
            # Removed under this process (by another evalctl's stale-cgroup sweep that
            # could not see this process, from another PID namespace): made anew.
            for path in pooled.values():
                with contextlib.suppress(OSError):
                    _rmdir_cgroup(path)
            pooled = _CGROUP_POOL.take(self._pool_key())
        name = f"evalctl-{os.getpid()}-{uuid.uuid4().hex[:12]}"
        memory = self.options.memory_mb * 1024 * 1024
        try:
            for controller, parent in setup.parents.items():
                path = parent / name
                path.mkdir()
                self._cgroup_dirs[controller] = path
                if setup.version == 1 and controller == "pids":
                    _write(path / "pids.max", str(self.options.max_processes))
                elif setup.version == 1 and controller == "memory":
                    _write(path / "memory.limit_in_bytes", str(memory))
                    # With swap accounting, also cap memory+swap so swap is no way out.
                    if (path / "memory.memsw.limit_in_bytes").exists():
                        _write(path / "memory.memsw.limit_in_bytes", str(memory))
                elif setup.version == 2:
                    if "pids" in setup.controllers:
                        _write(path / "pids.max", str(self.options.max_processes))
                    if "memory" in setup.controllers:
                        _write(path / "memory.max", str(memory))
                        if (path / "memory.swap.max").exists():
                            _write(path / "memory.swap.max", "0")
        except OSError as exc:
            raise SandboxError(f"cannot set up the attempt's cgroups: {exc}") from exc

    def _charged_bytes(self) -> int:
        """Memory still charged to the attempt's memory cgroup once its processes are
        gone: page cache of the files it wrote, and memory that lives on in another
        process (a memfd handed over a socket, say). A cgroup carrying much of it is not
        given to the next attempt, whose limit it would eat into."""
        for controller, name in (("memory", "memory.usage_in_bytes"),
                                 ("unified", "memory.current")):
            path = self._cgroup_dirs.get(controller)
            if path is None:
                continue
            try:
                fd = os.open(f"{path}/{name}", os.O_RDONLY | os.O_CLOEXEC)
            except FileNotFoundError:
                continue  # no memory controller here
            except OSError:
                return POOL_MAX_CHARGE + 1  # unknown: not reused
            try:
                return int(os.read(fd, 64))
            except (OSError, ValueError):
                return POOL_MAX_CHARGE + 1
            finally:
                os.close(fd)
        return 0

    def _members(self) -> set[int]:
        pids: set[int] = set()
        for path in self._cgroup_dirs.values():
            pids.update(int(p) for p in _read(f"{path}/cgroup.procs").split())
        return pids

    def _kill_cgroup_members(self, timeout: float = 5.0) -> bool:
        """SIGKILL everything in the attempt's cgroups and wait until they are empty.
        True if they are."""
        unified = self._cgroup_dirs.get("unified")
        if unified is not None and (unified / "cgroup.kill").exists():
            with contextlib.suppress(OSError):
                _write(unified / "cgroup.kill", "1")  # atomic, including racing forks
        deadline = time.monotonic() + timeout
        members = self._members()  # usually empty: every command has ended with its pid 1
        while members and time.monotonic() < deadline:
            # Freeze first so nothing forks between reading cgroup.procs and the kill.
            with self._frozen():
                for pid in members:
                    with contextlib.suppress(ProcessLookupError, PermissionError):
                        os.kill(pid, signal.SIGKILL)
            time.sleep(0.01)
            members = self._members()
        if members:
            log.warning("processes survive in %s", ", ".join(map(str, self._cgroup_dirs.values())))
        return not members

    @contextlib.contextmanager
    def _frozen(self) -> Iterator[None]:
        freezer = self._cgroup_dirs.get("freezer")
        unified = self._cgroup_dirs.get("unified")
        state: Path | None = None
        if freezer is not None:
            state, frozen, thawed = freezer / "freezer.state", "FROZEN", "THAWED"
        elif unified is not None and (unified / "cgroup.freeze").exists():
            state, frozen, thawed = unified / "cgroup.freeze", "1", "0"
        if state is None:
            yield
            return
        try:
            _write(state, frozen)
            deadline = time.monotonic() + 1.0
            while time.monotonic() < deadline:
                if freezer is not None and _read(state).strip() == "FROZEN":
                    break
                if unified is not None and "frozen 1" in _read(unified / "cgroup.events"):
                    break
                time.sleep(0.002)
        except OSError:
            pass
        try:
            yield
        finally:
            with contextlib.suppress(OSError):
                _write(state, thawed)


class Launch:
    """One command's start in a jail (BwrapJail.launch): bwrap's argv, the descriptors it
    must inherit, and what to do the moment it runs.

    bwrap gets three descriptors: the seccomp filter to load (--seccomp), a pipe on which
    it reports the sandbox's pid (--info-fd) and a pipe it waits on before it runs the
    command (--block-fd). started() reads the pid, puts that process into the attempt's
    cgroups, then lets it go on: nothing in the sandbox runs before it is counted and
    limited. If that fails, the sandbox is killed while it still waits.
    """

    def __init__(self, jail: BwrapJail):
        self.jail = jail
        self.argv: list[str] = []  # set by BwrapJail.launch(), which names the descriptors
        self.child_pid: int | None = None
        self.init_fd: int | None = None  # a pidfd of the sandbox's pid 1 (see end())
        self._ending = threading.Lock()
        self._fds: list[int] = []
        try:
            # A descriptor of its own per command: bwrap reads the filter from its offset.
            self.seccomp_fd = self._keep(os.open(seccomp_filter(jail.options.tracing),
                                                 os.O_RDONLY | os.O_CLOEXEC))
            self.info_read, self.info_write = (self._keep(fd) for fd in os.pipe())
            self.block_read, self.block_write = (self._keep(fd) for fd in os.pipe())
        except BaseException:
            self.close()
            raise

    def _keep(self, fd: int) -> int:
        self._fds.append(fd)
        return fd

    @property
    def pass_fds(self) -> tuple[int, ...]:
        """The descriptors bwrap inherits (all others are closed in it)."""
        return (self.seccomp_fd, self.info_write, self.block_read)

    def started(self, pid: int) -> None:
        """bwrap runs as `pid`: wait for it to report the sandbox, put the sandbox into
        the attempt's cgroups, then let it run the command. Blocking (up to
        START_SECONDS): call it where a process start may wait. SandboxError if the
        sandbox cannot be limited; it is then dead. If bwrap ended before making the
        sandbox, this returns and its exit status and message say why."""
        import json  # here: `evalctl list-plugins` discovers this module, never runs it

        for fd in self.pass_fds:  # bwrap has its own copies: ours would hold the pipes open
            self._close(fd)
        report = self._read_report()
        if report is None:
            return
        try:
            self.child_pid = int(json.loads(report)["child-pid"])
        except (ValueError, KeyError, TypeError) as exc:
            raise SandboxError(f"bubblewrap reported no sandbox pid: {report[:200]!r}") from exc
        _become_subreaper()
        try:
            # It waits on --block-fd, so this pidfd is of the sandbox's pid 1, no other.
            self.init_fd = os.pidfd_open(self.child_pid)
        except ProcessLookupError:
            return  # it died setting up (a mount that failed): bwrap's message says why
        self.jail._running.add(self)
        # Read once bwrap has reported: when Popen returns, its exec may not have laid out
        # the new environment yet (the file then reads empty).
        outer_environment = _environment_size(pid)
        if outer_environment:
            # The sandbox's pid 1 is a fork of bwrap: /proc/1/environ inside would show
            # whatever bwrap was started with (a secret of the harness, say).
            with contextlib.suppress(OSError):
                signal.pidfd_send_signal(self.init_fd, signal.SIGKILL)  # still waiting
            raise SandboxError(f"bubblewrap was started with {outer_environment} bytes of "
                               "environment: it must get none (env={})")
        try:
            self.jail._enter(self.child_pid)
        except ProcessLookupError:
            return
        except OSError as exc:
            with contextlib.suppress(OSError):
                signal.pidfd_send_signal(self.init_fd, signal.SIGKILL)  # still waiting
            raise SandboxError(f"cannot limit the sandbox (pid {self.child_pid}): "
                               f"{exc.strerror or exc}") from exc
        with contextlib.suppress(BrokenPipeError):  # it died since: bwrap says why
            os.write(self.block_write, b"1")
        self._close(self.block_write)

    def _read_report(self) -> str | None:
        """What bwrap wrote on --info-fd, up to the end of its JSON object; None if bwrap
        closed it without a word (it failed before making the sandbox)."""
        import select

        data = b""
        deadline = time.monotonic() + START_SECONDS
        while not data.endswith(b"}\n"):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise SandboxError(f"bubblewrap did not start a sandbox within "
                                   f"{START_SECONDS:g} s")
            readable, _, _ = select.select([self.info_read], [], [], remaining)
            if not readable:
                continue
            chunk = os.read(self.info_read, 4096)
            if not chunk:
                break
            data += chunk
        return data.decode("utf-8", "replace") if data.strip() else None

    def _close(self, fd: int) -> None:
        if fd in self._fds:
            self._fds.remove(fd)
            with contextlib.suppress(OSError):
                os.close(fd)

    def end(self, wait: bool = True) -> bool:
        """The command has ended (bwrap has been reaped): kill what it left running in its
        sandbox, by killing the sandbox's pid 1 (the kernel then kills every process of
        its PID namespace), and reap that pid 1. True once it is reaped (or was never
        made); False when `wait` is False and it is still dying: then wait until
        `init_fd` is readable and call this again. Idempotent."""
        with self._ending:  # the loop and a closing thread may both end it: one closes fd
            fd = self.init_fd
            if fd is None:
                return True
            with contextlib.suppress(ProcessLookupError):
                signal.pidfd_send_signal(fd, signal.SIGKILL)
            try:
                done = os.waitid(os.P_PIDFD, fd, os.WEXITED | (0 if wait else os.WNOHANG))
            except ChildProcessError:
                # Not ours to reap: bwrap's outer process reaped it (it died first), or
                # this process could not become a subreaper. Gone, or the host's init's.
                done = True  # type: ignore[assignment]
            if done is None:
                return False
            self.init_fd = None
            self.jail._running.discard(self)
            os.close(fd)
            return True

    def watchable(self) -> int | None:
        """A descriptor of its own (the caller closes it) that turns readable once the
        sandbox's pid 1 has exited; None once end() is done."""
        with self._ending:
            return None if self.init_fd is None else os.dup(self.init_fd)

    def close(self) -> None:
        """Close whatever descriptor is still open: call it once the process has been
        reaped. (A sandbox still waiting would read the end of --block-fd as its go: a
        failed started() kills it first, and a process is reaped before this.)"""
        for fd in list(self._fds):
            self._close(fd)


def strip_setid_bits(root: Path, *, budget: int | None = None) -> bool:
    """Clear the setuid and setgid bits of every regular file and directory under `root`
    (and of `root`), however deep or long-named its directories: the walk holds one
    directory descriptor at a time, descends by name and climbs back by "..", never by
    path and never recursively. Run it only once nothing can change the tree (the
    attempt's processes are dead). A setgid directory would give everything later made
    in it the directory's group.

    With a `budget` it only looks, and returns False (having changed nothing) at the
    first bit to clear, past that many entries or at a directory too large to list
    quickly: changing a mode can wait on the file system's journal, which the event
    loop must not. True: the whole tree was seen (and cleared, without a budget)."""
    import stat

    setid = stat.S_ISUID | stat.S_ISGID
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        current = os.open(root, flags)
    except OSError:
        return True
    left = budget
    if budget is not None and _listing_is_large(current):
        os.close(current)
        return False
    with contextlib.suppress(OSError):
        mode = os.fstat(current).st_mode
        if mode & setid:
            if budget is not None:
                os.close(current)
                return False
            os.fchmod(current, mode & 0o7777 & ~setid)
    pending: list[list[str]] = []  # per level, the subdirectories still to visit
    try:
        while True:
            subdirs: list[str] = []
            with contextlib.suppress(OSError), os.scandir(current) as entries:
                for entry in entries:
                    if left is not None:
                        left -= 1
                        if left < 0:
                            return False
                    with contextlib.suppress(OSError):
                        is_dir = entry.is_dir(follow_symlinks=False)
                        if is_dir:
                            subdirs.append(entry.name)
                        if (is_dir or entry.is_file(follow_symlinks=False)) and \
                                entry.stat(follow_symlinks=False).st_mode & setid:
                            if budget is not None:
                                return False
                            _clear_setid(current, entry.name, setid)
            pending.append(subdirs)
            while pending and not pending[-1]:
                pending.pop()
                if not pending:
                    return True
                parent = os.open("..", flags, dir_fd=current)
                os.close(current)
                current = parent
            child = os.open(pending[-1].pop(), flags, dir_fd=current)
            os.close(current)
            current = child
            if budget is not None and _listing_is_large(current):
                return False
    except OSError:
        log.warning("could not finish clearing setuid bits under %s", root)
        return True  # as far as it can go: walking again would stop at the same place
    finally:
        with contextlib.suppress(OSError):
            os.close(current)


# A directory larger than this is not listed within a budget: an emptied one keeps its
# size on ext4, and listing it reads all of it.
QUICK_DIRECTORY_BYTES = 64 * 1024


def _listing_is_large(directory: int) -> bool:
    try:
        return os.fstat(directory).st_size > QUICK_DIRECTORY_BYTES
    except OSError:
        return True


def _clear_setid(directory: int, name: str, setid: int) -> None:
    fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC,
                 dir_fd=directory)
    try:
        mode = os.fstat(fd).st_mode
        os.fchmod(fd, mode & 0o7777 & ~setid)
    finally:
        os.close(fd)


# An emptied attempt cgroup still charged with more memory than this is removed, not kept.
POOL_MAX_CHARGE = 64 * 1024 * 1024


class _CgroupPool:
    """Empty attempt cgroups, kept for the next attempt of this process with the same
    limits: creating and removing a memory and a pids cgroup costs about a millisecond per
    sandbox, two sandboxes an attempt. Only cgroups whose every member was killed and
    reaped come back here, and nothing inside a sandbox can join one (the cgroup file
    system is not mounted there). Removed when the process exits (or, if it is killed, by
    the next evalctl's stale-cgroup sweep)."""

    LIMIT = 64  # sets kept at most: more than any run's concurrency

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._free: dict[tuple[object, ...], list[dict[str, Path]]] = {}
        self._creator = os.getpid()

    def has(self, key: tuple[object, ...]) -> bool:
        """Whether take(key) would find a set now (another thread may take it first)."""
        with self._lock:
            return bool(self._free.get(key)) and os.getpid() == self._creator

    def take(self, key: tuple[object, ...]) -> dict[str, Path] | None:
        if os.getpid() != self._creator:  # a forked child shares none of its parent's
            return None
        with self._lock:
            free = self._free.get(key)
            return free.pop() if free else None

    def give(self, key: tuple[object, ...], dirs: dict[str, Path]) -> None:
        with self._lock:
            free = self._free.setdefault(key, [])
            if len(free) < self.LIMIT and os.getpid() == self._creator:
                free.append(dict(dirs))
                return
        for path in dirs.values():
            _rmdir_cgroup(path)

    def drain(self) -> None:
        """Remove every kept cgroup (at exit, in the process that made them)."""
        if os.getpid() != self._creator:
            return
        with self._lock:
            kept = [path for free in self._free.values() for dirs in free
                    for path in dirs.values()]
            self._free.clear()
        for path in kept:
            _rmdir_cgroup(path)


_CGROUP_POOL = _CgroupPool()
atexit.register(_CGROUP_POOL.drain)


@_once
def _remove_stale_cgroups_once(parents: tuple[Path, ...]) -> None:
    """Once per process: a listing of the parent cgroups per attempt would cost more as
    they fill up."""
    for parent in parents:
        _remove_stale_cgroups(parent)


def _remove_stale_cgroups(parent: Path) -> None:
    """Remove the empty cgroups of evalctl processes that no longer exist (a run that was
    SIGKILLed could not remove its own): they would otherwise pile up."""
    for path in parent.glob("evalctl-*-*"):
        owner = path.name.split("-")[1]
        if owner.isdigit() and not Path(f"/proc/{owner}").exists():
            with contextlib.suppress(OSError):
                path.rmdir()


def _rmdir_cgroup(path: Path, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            path.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError as exc:
            if time.monotonic() >= deadline:
                log.warning("cannot remove cgroup %s: %s", path, exc)
                return
            time.sleep(0.01)
