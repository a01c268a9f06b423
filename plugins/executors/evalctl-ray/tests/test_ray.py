"""evalctl-ray on a real Ray cluster: a head and a worker node on this machine, on
127.0.0.1 only (ray.cluster_utils.Cluster, in a scratch directory of the test's own).

`evalctl run` is a separate process (the driver) connecting to the cluster, as a user's
would. The cluster's processes are this test's descendants; at the end every one of them
must be gone.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

RUN_TIMEOUT = 300

# Only whether it is installed: ray reads its settings when first imported, which must be
# after the cluster fixture has set them (ray_environment).
if importlib.util.find_spec("ray") is None:  # pragma: no cover - CI installs it
    if os.environ.get("CI"):
        raise ImportError("ray must be installed in CI: pip install -e "
                          "plugins/executors/evalctl-ray")
    pytest.skip("ray is not installed (pip install -e plugins/executors/evalctl-ray)",
                allow_module_level=True)


def ray_environment(base: Path) -> dict[str, str]:
    """Ray's settings for anything this test starts: its files under `base`, no usage
    statistics sent anywhere, and a node address of 127.0.0.1 taken as it is (Ray
    otherwise swaps a loopback address for the machine's routable one)."""
    return {"RAY_TMPDIR": str(base / "ray"), "RAY_USAGE_STATS_ENABLED": "0",
            "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}


def descendants(pid: int) -> set[int]:
    """Every live process below `pid`: this test's own children and theirs."""
    found: set[int] = set()
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except FileNotFoundError:
        return found
    for thread in tasks:
        try:
            children = Path(f"/proc/{pid}/task/{thread}/children").read_text().split()
        except (FileNotFoundError, ProcessLookupError):
            continue
        for child in map(int, children):
            if not _zombie(child):  # dead, its exit status not yet read
                found.add(child)
            found |= descendants(child)
    return found


def _zombie(pid: int) -> bool:
    """A test process that uses a bwrap sandbox is its descendants' subreaper: what Ray
    orphans comes to it, and one that has exited stays a zombie child until reaped."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except (FileNotFoundError, ProcessLookupError):
        return True


@dataclass
class RayCluster:
    cluster: Any
    address: str
    base: Path
    env: dict[str, str]

    def add_node(self, name: str, cpus: int) -> tuple[Any, Path]:
        """A worker node whose attempts' scratch directories are under base/name."""
        scratch = self.base / name
        scratch.mkdir()
        node = self.cluster.add_node(node_ip_address="127.0.0.1", num_cpus=cpus,
                                     env_vars={"TMPDIR": str(scratch)})
        return node, scratch


@pytest.fixture(scope="module")
def cluster() -> Iterator[RayCluster]:
    # Short: Ray's Unix sockets live under it, and their paths must fit in 107 bytes.
    base = Path(tempfile.mkdtemp(prefix="evray-", dir="/tmp"))
    settings = ray_environment(base)
    saved = {name: os.environ.get(name) for name in settings}
    os.environ.update(settings)
    before = descendants(os.getpid())
    from ray.cluster_utils import Cluster

    (base / "head").mkdir()
    started = Cluster(initialize_head=True, head_node_args={
        "node_ip_address": "127.0.0.1", "num_cpus": 1, "include_dashboard": False,
        "env_vars": {"TMPDIR": str(base / "head")}})
    handle = RayCluster(started, started.address, base, settings)
    try:
        handle.add_node("worker", 2)
        yield handle
    finally:
        started.shutdown()
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        deadline = time.monotonic() + 30
        while (left := descendants(os.getpid()) - before) and time.monotonic() < deadline:
            time.sleep(0.2)
        for pid in left:  # ours, by id: never left running, but a failure all the same
            os.kill(pid, signal.SIGKILL)
        shutil.rmtree(base, ignore_errors=True)
        assert not left, f"Ray processes outlived the cluster: {sorted(left)}"


def run_environment(cluster: RayCluster, where: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("EVALCTL_")}
    env.update(cluster.env)
    env["EVALCTL_CACHE_DIR"] = str(where / "cache")
    return env


def run(cluster: RayCluster, where: Path, name: str, *args: str) -> dict[str, Any]:
    """`evalctl run ARGS --report name.json` from `where`; the JSON report."""
    done = subprocess.run([sys.executable, "-m", "evalctl", "run", *args, "--out",
                           str(where / f"{name}-out"), "--report", str(where / f"{name}.json")],
                          cwd=where, env=run_environment(cluster, where), capture_output=True,
                          text=True, timeout=RUN_TIMEOUT)
    assert done.returncode in (0, 1), done.stdout + done.stderr
    return json.loads((where / f"{name}.json").read_text())


@contextmanager
def driving(cluster: RayCluster, where: Path, *args: str) -> Iterator[subprocess.Popen[str]]:
    """`evalctl run ARGS` from `where`, running while the test acts on it (its output
    together, for the assertion messages); killed if the test leaves it running."""
    driver = subprocess.Popen([sys.executable, "-m", "evalctl", "run", *args], cwd=where,
                              env=run_environment(cluster, where), stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True)
    try:
        yield driver
    finally:
        if driver.poll() is None:
            driver.kill()
            driver.wait(timeout=30)


def wait_while_running(driver: subprocess.Popen[str], ready: Callable[[], bool], what: str,
                       pause: float) -> None:
    """Until `ready()`, checking every `pause` s; the driver must not end first, and
    `what` is the failure when two minutes pass."""
    deadline = time.monotonic() + 120
    while not ready():
        assert driver.poll() is None, driver.stdout.read() if driver.stdout else ""
        assert time.monotonic() < deadline, what
        time.sleep(pause)


def comparable(report: dict[str, Any]) -> dict[str, Any]:
    """The report without what differs by where and when it ran: times, hosts, the run
    directory (paths kept relative to it), and the executor's own record."""
    data = json.loads(json.dumps(report))
    run_dir = data.pop("run_directory")
    for key in ("started_at", "finished_at", "executor"):
        data.pop(key)
    for task in data["tasks"]:
        task.pop("duration")
        task.pop("host", None)
        for key in ("workspace", "ledger"):
            if task[key]:
                task[key] = os.path.relpath(task[key], run_dir)
    return data


def node_id(node: Any) -> str:
    return node.node_id[:12]


@pytest.mark.parametrize("suite", ["harness", "general"])
def test_a_suite_through_ray_reports_what_local_reports(cluster, tmp_path, suite):
    local = run(cluster, tmp_path, "local", suite)
    # Half a CPU and 64 MB an attempt: Ray's resources decide how many run at once.
    remote = run(cluster, tmp_path, "ray", suite, "--executor", "ray",
                 "--executor-option", f"address={cluster.address}",
                 "--executor-option", "num_cpus=0.5", "--executor-option", "memory_mb=64")
    assert comparable(remote) == comparable(local)
    assert local["summary"]["passed"] > 0
    assert remote["executor"] == {
        "name": "ray", "options": {"address": cluster.address, "num_cpus": 0.5,
                                   "memory_mb": 64}, "chosen_by": "--executor"}
    nodes = {node_id(cluster.cluster.head_node),
             *(node_id(n) for n in cluster.cluster.worker_nodes)}
    hosts = {task["host"] for task in remote["tasks"]}
    assert hosts and all(h.split("(node ")[-1].rstrip(")") in nodes for h in hosts), hosts
    assert all("host" not in task for task in local["tasks"])
    # Each attempt's workspace, seed copy and ledger came back into the run directory.
    run_dir = Path(remote["run_directory"])
    for task in remote["tasks"]:
        assert Path(task["workspace"]).is_dir() and Path(task["ledger"]).is_file()
        assert (run_dir / ".seed" / Path(task["workspace"]).name).is_dir()


def test_losing_a_worker_node_mid_run_still_gives_a_complete_report(cluster, tmp_path):
    doomed, scratch = cluster.add_node("doomed", 2)
    local = run(cluster, tmp_path, "local", "general")
    where = tmp_path
    report = where / "ray.json"
    # Each model turn waits, so attempts are still running when the node goes.
    with driving(cluster, where, "general", "--executor", "ray", "--executor-option",
                 f"address={cluster.address}", "--provider-option", "latency=0.5", "--out",
                 str(where / "ray-out"), "--report", str(report)) as driver:
        wait_while_running(driver, lambda: bool(list(scratch.glob("evalctl-attempt-*/run/*"))),
                           "no attempt reached the doomed node", 0.05)
        cluster.cluster.remove_node(doomed, allow_graceful=False)
        output, _ = driver.communicate(timeout=RUN_TIMEOUT)
    assert driver.returncode == 0, output
    remote = json.loads(report.read_text())
    assert comparable(remote) == comparable(local)
    # The attempts the node was running when it died: their scratch directories are
    # still there (killed before cleaning up), and their results came from elsewhere.
    lost = {path.name for path in scratch.glob("evalctl-attempt-*/run/*")
            if not path.name.startswith(".")}
    assert lost, "the node died with no attempt in progress"
    by_id = {task["id"]: task for task in remote["tasks"]}
    for name in lost:
        assert by_id[name]["status"] == "passed"
        assert node_id(doomed) not in by_id[name]["host"]
    # And the journal holds each attempt exactly once: none lost, none doubled.
    journal = [json.loads(line) for line in
               (Path(remote["run_directory"]) / "journal.jsonl").open()]
    ids = [line["result"]["id"] for line in journal if line["kind"] == "attempt"]
    assert sorted(ids) == sorted(by_id) and len(ids) == len(set(ids))


def test_an_unreachable_cluster_stops_the_run_before_any_task(cluster, tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "evalctl", "run", "harness", "--executor", "ray",
         "--executor-option", "address=127.0.0.1:9", "--out", str(tmp_path / "out")],
        cwd=tmp_path, env=run_environment(cluster, tmp_path), capture_output=True, text=True,
        timeout=RUN_TIMEOUT)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "cannot reach the Ray cluster at 127.0.0.1:9" in done.stderr
    assert not (tmp_path / "out").exists() or not list((tmp_path / "out").iterdir())


def test_ray_options_are_checked_before_anything_starts(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("EVALCTL_")}
    env["EVALCTL_CACHE_DIR"] = str(tmp_path / "cache")
    done = subprocess.run(
        [sys.executable, "-m", "evalctl", "run", "harness", "--executor", "ray",
         "--executor-option", "num_cpu=2"], cwd=tmp_path, env=env, capture_output=True,
        text=True, timeout=60)
    assert done.returncode == 2
    assert "executor 'ray' has no option 'num_cpu' (did you mean 'num_cpus'?)" in done.stderr


def test_list_plugins_shows_the_executor_without_importing_ray():
    probe = ("import sys; from click.testing import CliRunner; from evalctl._cli import cli; "
             "out = CliRunner().invoke(cli, ['list-plugins']).output; "
             "CliRunner().invoke(cli, ['--help']); "
             "print('executors: ray' in out, 'ray' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          timeout=60)
    assert done.stdout.split() == ["True", "False"], done.stdout + done.stderr


def test_ctrl_c_stops_a_ray_run_and_keeps_what_finished(cluster, tmp_path):
    report = tmp_path / "ray.json"

    def an_attempt_finished() -> bool:
        return any('"kind":"attempt"' in journal.read_text().replace(" ", "")
                   for journal in (tmp_path / "out").glob("workspaces-*/journal.jsonl"))

    with driving(cluster, tmp_path, "general", "--executor", "ray", "--executor-option",
                 f"address={cluster.address}", "--provider-option", "latency=1",
                 "--concurrency", "2", "--out", str(tmp_path / "out"), "--report",
                 str(report)) as driver:
        wait_while_running(driver, an_attempt_finished, "no attempt finished", 0.1)
        driver.send_signal(signal.SIGINT)
        output, _ = driver.communicate(timeout=RUN_TIMEOUT)
    assert driver.returncode == 130, output
    result = json.loads(report.read_text())
    statuses = [task["status"] for task in result["tasks"]]
    assert "passed" in statuses and "not_run" in statuses, statuses
    assert result["interrupted"] is True


def test_the_model_call_limit_is_one_for_the_cluster_and_frees_a_lost_tries_slots(cluster):
    """The actor every worker asks before a model call: at most `ceiling` calls at once
    across the cluster, halved by a rate limit whoever hit it, and the slots a try lost
    with its node held are given back when the task is tried again."""
    import ray
    from evalctl_ray.worker import ModelCallLimit

    ray.init(address=cluster.address, logging_level="WARNING", log_to_driver=False)
    try:
        # On the head node, as the executor places it: a node an earlier test killed may
        # still count as alive until its heartbeats are missed, and an actor placed there
        # dies with it (seen in CI).
        limit = ModelCallLimit.options(resources={"node:__internal_head__": 0.001}).remote(4)
        lost = [ray.get(limit.acquire.remote("task-1")) for _ in range(3)]  # a try, lost
        assert lost == [0, 0, 0]
        ray.get(limit.acquire.remote("task-2"))
        blocked = limit.acquire.remote("task-3")  # four held: the fifth waits
        ready, _ = ray.wait([blocked], timeout=1.0)
        assert not ready
        assert ray.get(limit.forget.remote("task-1")) == 3  # task-1 tried again
        assert ray.get(blocked, timeout=30) == 0
        # A rate limit anywhere halves the one limit: 4 -> 2, and later calls see it.
        assert ray.get(limit.release.remote("task-2", 0, "rate_limited")) == 2
        assert ray.get(limit.limit.remote()) == 2
        # A late release from the lost try changes nothing: its slots were given back.
        assert ray.get(limit.release.remote("task-1", 0, "ok")) == 2
    finally:
        ray.shutdown()
