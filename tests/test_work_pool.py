"""The one pool of blocking work: a thread per core, and more only when work waits."""

from __future__ import annotations

import asyncio
import contextvars
import threading
import time

import pytest

import evalctl._blocking as blocking
from evalctl._blocking import WorkPool, off_loop


def wait_until(condition, seconds: float = 5.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.01)
    return condition()


@pytest.fixture
def pool():
    made = WorkPool(1, most=3, patience=0.05, name="test-pool")
    yield made
    made.shutdown(wait=True, cancel_futures=True)


def test_results_and_exceptions_come_back(pool):
    assert pool.submit(lambda a, b: a + b, 2, b=3).result(5) == 5
    with pytest.raises(ZeroDivisionError):
        pool.submit(lambda: 1 / 0).result(5)


def test_a_backlog_of_quick_work_never_grows_the_pool():
    # Many times the pool's patience of work, each item quick (a burst of attempts
    # starting together): more threads would only wait for the GIL. A patience of
    # 200 ms, so that a busy machine's scheduling cannot pass for slow work.
    pool = WorkPool(1, most=3, patience=0.2, name="test-backlog")
    try:
        started = time.monotonic()
        futures = [pool.submit(sum, range(300)) for _ in range(80_000)]
        sizes = {pool.size}
        for future in futures:
            assert future.result(30) == 44850
        assert time.monotonic() - started > 3 * pool.patience  # it outlasted the patience
        sizes.add(pool.size)  # an extra thread would still be here: they never leave
        assert sizes == {1}
    finally:
        pool.shutdown(wait=True)


def test_work_that_waits_behind_slow_work_gets_a_thread_of_its_own(pool):
    release = threading.Event()
    slow = pool.submit(release.wait, 30)
    quick = pool.submit(lambda: "done")
    # The one thread is held: only the pool's growth can run the quick work.
    assert quick.result(5) == "done"
    assert not slow.done() and pool.size == 2
    release.set()
    assert slow.result(5) is True


def test_a_queue_of_slow_work_grows_the_pool_though_some_finishes(pool):
    # One thread taking a 30 ms item at a time keeps finishing work, but what waits
    # behind it waits longer than the pool's patience: that is what grows it.
    def slow() -> int:
        time.sleep(0.03)
        return pool.size

    sizes = [f.result(10) for f in [pool.submit(slow) for _ in range(12)]]
    assert max(sizes) > 1, sizes


def test_work_waiting_on_work_of_the_same_pool_does_not_deadlock(pool):
    # A synchronous grader that runs a coroutine of its own, say, whose blocking work
    # comes back to this pool while the grader holds its only thread.
    def outer() -> str:
        return pool.submit(lambda: "inner").result(10)

    assert pool.submit(outer).result(10) == "inner"


def test_the_pool_grows_no_further_than_most(pool):
    release = threading.Event()
    held = [pool.submit(release.wait, 30) for _ in range(5)]
    assert wait_until(lambda: pool.size == 3)
    time.sleep(0.3)  # six more rounds: still at the bound
    assert pool.size == 3
    release.set()
    assert all(f.result(5) for f in held)


def test_a_child_started_by_an_extra_thread_outlives_the_idle_time(pool):
    """A child bound to the thread that started it (bwrap's --die-with-parent is
    PR_SET_PDEATHSIG, which follows the thread) must live as long as it runs: pool
    threads, extra ones too, never leave while the pool lives."""
    import subprocess
    import sys

    release = threading.Event()
    slow = pool.submit(release.wait, 30)  # holds the one thread: the next runs on an extra

    def start_bound_child() -> subprocess.Popen:
        return subprocess.Popen([sys.executable, "-c",
                                 "import ctypes, signal, time\n"
                                 "ctypes.CDLL(None).prctl(1, signal.SIGKILL)\n"  # PR_SET_PDEATHSIG
                                 "print('bound', flush=True)\n"
                                 "time.sleep(30)"], stdout=subprocess.PIPE)

    child = pool.submit(start_bound_child).result(10)
    try:
        assert pool.size == 2
        assert child.stdout.readline() == b"bound\n"  # its death signal is set
        release.set()
        assert slow.result(5) is True
        time.sleep(1.5)  # idle, every thread; the third round's pool let extras go after 1 s
        assert child.poll() is None, "the child was killed with the thread that started it"
        assert pool.size == 2
    finally:
        child.kill()
        child.wait()


def test_shutdown_cancels_what_waits_and_refuses_more():
    pool = WorkPool(1, most=1, patience=0.05, name="test-shutdown")
    release = threading.Event()
    running = pool.submit(release.wait, 30)
    queued = pool.submit(lambda: "never")
    assert wait_until(running.running)
    pool.shutdown(wait=False, cancel_futures=True)
    assert queued.cancelled()
    release.set()
    assert running.result(5) is True  # what had started is finished
    assert wait_until(lambda: pool.size == 0)
    with pytest.raises(RuntimeError, match="after shutdown"):
        pool.submit(lambda: 1)


def test_off_loop_runs_in_the_callers_context():
    which = contextvars.ContextVar("which", default="unset")

    async def main() -> tuple[str, bool]:
        which.set("the caller's")
        return await off_loop(lambda: (which.get(),
                                       threading.current_thread() is threading.main_thread()))

    assert asyncio.run(main()) == ("the caller's", False)


def test_work_for_a_loop_reports_to_its_future_directly(pool, monkeypatch):
    """to_loop: the outcome is set on the loop's own future; work cancelled before it
    starts never runs; an exception (StopIteration too, which an asyncio future refuses)
    comes back; an outcome for a loop already closed is dropped, not raised."""
    ran: list[str] = []
    release = threading.Event()

    def stop() -> None:
        raise StopIteration("done early")

    async def main() -> None:
        loop = asyncio.get_running_loop()
        assert await pool.to_loop(loop, lambda: 42) == 42
        with pytest.raises(ValueError, match="bad"):
            await pool.to_loop(loop, lambda: int("bad"))
        with pytest.raises(RuntimeError, match="StopIteration.*done early"):
            await asyncio.wait_for(pool.to_loop(loop, stop), 5)
        blocker = pool.to_loop(loop, lambda: release.wait(30))  # the pool's one thread
        waiting = pool.to_loop(loop, lambda: ran.append("cancelled work"))
        waiting.cancel()
        release.set()
        assert await blocker is True
        assert await pool.to_loop(loop, lambda: ran.append("later work")) is None

    asyncio.run(main())
    assert ran == ["later work"]
    escaped: list[BaseException | None] = []
    monkeypatch.setattr(threading, "excepthook", lambda args: escaped.append(args.exc_value))
    closed = asyncio.new_event_loop()
    gate = threading.Event()
    pool.submit(gate.wait, 30)
    late = pool.to_loop(closed, lambda: "too late")
    closed.close()
    gate.set()
    assert pool.submit(lambda: "after").result(5) == "after"
    assert not late.done() and escaped == []


def test_a_forked_child_gets_a_pool_of_its_own():
    import os

    parent = blocking.work_pool()
    futures = [parent.submit(lambda: 1) for _ in range(parent.threads)]
    assert [f.result(5) for f in futures] == [1] * parent.threads
    assert parent.size >= parent.threads  # no thread would be started for more work
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: its parent's threads are not here
        try:
            answer = blocking.work_pool().submit(lambda: b"ran").result(5)
        except BaseException:
            answer = b"hung"
        os.write(write, answer)
        os._exit(0)
    os.close(write)
    try:
        assert os.read(read, 16) == b"ran"
    finally:
        os.close(read)
        os.waitpid(pid, 0)


def test_the_watchdog_leaves_when_idle_and_comes_back_with_work(pool, monkeypatch):
    monkeypatch.setattr(blocking, "WATCHDOG_IDLE_SECONDS", 0.1)
    assert pool.submit(lambda: 1).result(5) == 1
    assert wait_until(lambda: pool._watchdog is None)  # no thread waking an idle process
    release = threading.Event()
    slow = pool.submit(release.wait, 30)
    # Back with the work: what waits behind the slow item still gets a thread.
    assert pool.submit(lambda: "quick").result(5) == "quick"
    release.set()
    assert slow.result(5) is True


def test_work_still_running_when_the_interpreter_exits_is_finished_first(tmp_path):
    """As with ThreadPoolExecutor: no pool thread is cut off mid-call by the interpreter's
    exit (one inside C++ code, RE2's, would abort the whole process)."""
    import subprocess
    import sys

    marker = tmp_path / "finished"
    code = ("import time, evalctl._blocking as b\n"
            "def work():\n"
            "    time.sleep(0.5)\n"
            f"    open({str(marker)!r}, 'w').write('yes')\n"
            "b.work_pool().submit(work)\n")  # and the script ends at once
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    assert marker.read_text() == "yes"
