"""Supervised child processes (`evalctl.run_process`): watched through pidfds where Linux
has them (no thread per child), reaped, killed with their group on timeout and on
cancellation, fed their standard input; and the same without pidfds."""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
import time
from pathlib import Path

import pytest

from evalctl import run_process
from evalctl._blocking import work_pool

ENV = {"PATH": os.environ.get("PATH", os.defpath), "LANG": "C.UTF-8"}


def run(coroutine):
    return asyncio.run(coroutine)


def bash(script: str, tmp_path: Path, timeout: float = 30, **kwargs):
    return run_process(["bash", "-c", script], cwd=tmp_path, env=ENV, timeout=timeout,
                       **kwargs)


def assert_reaped(pid: int) -> None:
    """`pid` was a child of this process and is no longer: waited for, not a zombie."""
    with pytest.raises(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)


def reap_adopted(pgid: int) -> None:
    """Reap the dead of process group `pgid` that came to this process as orphans, as
    init would: once a bwrap sandbox has run here, this process is its descendants'
    subreaper."""
    with contextlib.suppress(ChildProcessError):
        while os.waitid(os.P_PGID, pgid, os.WEXITED | os.WNOHANG) is not None:
            pass


@pytest.fixture(params=["pidfd", "thread"])
def watcher(request, monkeypatch):
    """Each test runs with pidfds, and once more as on a platform without them."""
    if request.param == "pidfd" and not hasattr(os, "pidfd_open"):
        pytest.skip("this platform has no pidfds")
    if request.param == "thread":
        def no_pidfds(pid, flags=0):
            raise OSError(38, "Function not implemented")

        monkeypatch.setattr(os, "pidfd_open", no_pidfds, raising=False)
    return request.param


def test_every_child_is_reaped_with_its_exit_code(tmp_path, watcher):
    async def main():
        return await asyncio.gather(*(bash(f"echo $$; exit {n % 4}", tmp_path)
                                      for n in range(40)))

    results = run(main())
    assert [r.exit_code for r in results] == [n % 4 for n in range(40)]
    for result in results:
        assert_reaped(int(result.stdout))


def test_a_child_killed_by_a_signal_reports_the_signal(tmp_path, watcher):
    result = run(bash("kill -TERM $$", tmp_path))
    assert (result.exit_code, result.timed_out) == (-15, False)


def test_no_thread_is_started_per_child(tmp_path):
    """With pidfds, sixty children at once cost no thread each: the only threads are
    the few that start processes (the pool of blocking work, a thread per core, and its
    watchdog)."""
    if not hasattr(os, "pidfd_open"):
        pytest.skip("this platform has no pidfds")
    before = threading.active_count()
    most = 0

    async def sample(stop: asyncio.Event) -> None:
        nonlocal most
        while not stop.is_set():
            most = max(most, threading.active_count())
            await asyncio.sleep(0.01)

    async def main():
        stop = asyncio.Event()
        sampler = asyncio.create_task(sample(stop))
        results = await asyncio.gather(*(bash("sleep 0.5", tmp_path) for _ in range(60)))
        stop.set()
        await sampler
        return results

    results = run(main())
    assert all(r.exit_code == 0 for r in results)
    assert most - before <= work_pool().threads + 1, (before, most)


def test_a_timeout_kills_the_group_and_reaps_the_child(tmp_path, watcher):
    marker = tmp_path / "survivor"
    started = time.monotonic()
    result = run(bash(f"echo $$ > pid; (sleep 2; touch {marker}) & sleep 30", tmp_path,
                      timeout=0.5))
    assert result.timed_out and result.exit_code is None
    assert time.monotonic() - started < 10
    assert_reaped(int((tmp_path / "pid").read_text()))
    time.sleep(2.5)
    assert not marker.exists(), "a child of the group outlived the timeout"


def test_a_cancelled_command_is_killed_and_reaped(tmp_path, watcher):
    marker = tmp_path / "survivor"

    async def main():
        running = asyncio.create_task(bash(f"echo $$ > pid; (sleep 2; touch {marker}) & "
                                           "sleep 30", tmp_path))
        deadline = time.monotonic() + 10
        while not (tmp_path / "pid").exists() or not (tmp_path / "pid").read_text():
            assert time.monotonic() < deadline, "the command never started"
            await asyncio.sleep(0.02)
        running.cancel()
        with pytest.raises(asyncio.CancelledError):
            await running

    started = time.monotonic()
    run(main())
    assert time.monotonic() - started < 10
    assert_reaped(int((tmp_path / "pid").read_text()))
    time.sleep(2.5)
    assert not marker.exists(), "a child of the group outlived the cancellation"


def test_a_command_cancelled_twice_while_starting_returns_after_its_start(tmp_path, watcher):
    """Found by an attacker: a second cancellation while `started` was still at work in
    its thread let run_process return at once, and the caller's cleanup (bwrap's: close
    the descriptor its sandbox waits on) raced that work. However often it is cancelled,
    run_process returns only once `started` has returned and the command is reaped."""
    events: list[str] = []
    pids: list[int] = []

    def started(pid: int) -> None:
        pids.append(pid)
        events.append("started began")
        time.sleep(0.5)
        events.append("started returned")

    async def main():
        running = asyncio.create_task(bash("sleep 30", tmp_path, started=started))
        while not events:
            await asyncio.sleep(0.01)
        for _ in range(3):
            running.cancel()
            await asyncio.sleep(0.05)
        with pytest.raises(asyncio.CancelledError):
            await running
        events.append("run_process returned")

    run(main())
    assert events == ["started began", "started returned", "run_process returned"]
    assert_reaped(pids[0])


def test_standard_input_is_fed_whole_and_an_unread_one_does_not_hang(tmp_path, watcher):
    data = "x" * 1_000_000  # far more than a pipe holds
    counted = run(bash("wc -c", tmp_path, stdin=data))
    assert (counted.exit_code, counted.stdout.strip()) == (0, str(len(data)))
    ignored = run(bash("exit 0", tmp_path, stdin=data, timeout=10))
    assert (ignored.exit_code, ignored.timed_out) == (0, False)


def test_output_and_errors_are_kept_apart_or_merged(tmp_path, watcher):
    apart = run(bash("echo out; echo err >&2", tmp_path))
    assert (apart.stdout, apart.stderr) == ("out\n", "err\n")
    merged = run(bash("echo out; echo err >&2", tmp_path, merge_stderr=True))
    assert (merged.stdout, merged.stderr) == ("out\nerr\n", "")


def test_a_command_that_cannot_start_raises_and_leaks_no_descriptor(tmp_path, watcher):
    before = len(os.listdir("/proc/self/fd")) if Path("/proc/self/fd").is_dir() else None
    for _ in range(5):
        with pytest.raises(FileNotFoundError):
            run(run_process(["/no/such/program"], cwd=tmp_path, env=ENV, timeout=5))
    if before is not None:
        assert len(os.listdir("/proc/self/fd")) <= before


def test_started_sees_the_running_child_and_passed_descriptors_reach_it(tmp_path, watcher):
    """`started(pid)` is called with the child's pid, off the event loop's thread, while
    the child runs; descriptors in `pass_fds` stay open in it."""
    read_end, write_end = os.pipe()
    seen: list[tuple[int, bool]] = []

    def started(pid: int) -> None:
        seen.append((pid, threading.current_thread() is threading.main_thread()))
        assert Path(f"/proc/{pid}").exists()
        os.close(write_end)  # the child has its own copy

    try:
        result = run(bash(f"echo $$; echo through >&{write_end}", tmp_path,
                          pass_fds=(write_end,), started=started))
        assert result.exit_code == 0, result.stderr
        assert os.read(read_end, 100) == b"through\n"
    finally:
        os.close(read_end)
        with pytest.raises(OSError):
            os.close(write_end)  # closed by started()
    assert seen == [(int(result.stdout), False)]
    assert_reaped(seen[0][0])


def test_a_failing_started_kills_the_command_and_raises(tmp_path, watcher):
    """If `started` raises, the command's whole group is killed and reaped before the
    error reaches the caller, and no descriptor is left open."""
    pids: list[int] = []
    before = len(os.listdir("/proc/self/fd"))

    def started(pid: int) -> None:
        pids.append(pid)
        raise RuntimeError("cannot limit it")

    for _ in range(3):
        with pytest.raises(RuntimeError, match="cannot limit it"):
            run(bash("sleep 30 & sleep 30; touch ran", tmp_path, started=started))
    assert len(pids) == 3
    for pid in pids:
        assert_reaped(pid)
        deadline = time.monotonic() + 5  # the group's orphans are reaped by init
        with pytest.raises(ProcessLookupError):
            while time.monotonic() < deadline:
                reap_adopted(pid)
                os.killpg(pid, 0)  # nothing of its group is left
                time.sleep(0.02)
    assert not (tmp_path / "ran").exists()
    assert len(os.listdir("/proc/self/fd")) <= before


def test_a_bare_command_name_is_found_on_its_own_path_as_the_child_would(tmp_path):
    """A bare name is looked up once on the command's PATH (not in the child, an execve
    per directory); $0 stays the name given; a file found before and gone since is looked
    up again; a relative PATH entry is left to the child, which reads it from its own
    directory."""
    first, second, work = tmp_path / "first", tmp_path / "second", tmp_path / "work"
    for directory, says in ((first, "first"), (second, "second")):
        directory.mkdir()
        tool = directory / "evalctl-test-tool"
        tool.write_text(f'#!/bin/sh\necho "$0 {says}"\n')
        tool.chmod(0o755)
    work.mkdir()
    env = {"PATH": f"{first}:{second}:/usr/bin:/bin"}

    def tool_run(environment):  # a script's $0 is the file the kernel was given
        return run(run_process(["evalctl-test-tool"], cwd=work, env=environment,
                               timeout=30)).stdout.split()

    assert tool_run(env) == [str(first / "evalctl-test-tool"), "first"]
    from evalctl._process import _FOUND  # looked up by the parent, once

    assert _FOUND[("evalctl-test-tool", env["PATH"])] == str(first / "evalctl-test-tool")
    (first / "evalctl-test-tool").unlink()
    assert tool_run(env) == [str(second / "evalctl-test-tool"), "second"]
    relative = work / "bin"
    relative.mkdir()
    (second / "evalctl-test-tool").rename(relative / "evalctl-test-tool")
    assert tool_run({"PATH": "bin:/usr/bin:/bin"}) == ["bin/evalctl-test-tool", "second"]
    with pytest.raises(FileNotFoundError):
        tool_run({"PATH": f"{first}:/usr/bin:/bin"})
    # A program's own argv[0] is the name given, as Popen's search leaves it.
    shell = run(run_process(["sh", "-c", 'echo "$0"'], cwd=work, env=env, timeout=30))
    assert shell.stdout.split() == ["sh"]
