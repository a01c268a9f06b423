"""Blocking work (a file made, a tree hashed, a child started, an fsync, a synchronous
grader) off the event loop, on one pool of threads sized to the machine.

Each thread that waits for the GIL makes every hand-over of it a futex call in the
kernel; on two cores a run spent a third of its own CPU there when it had three pools
(files, spawns and asyncio's default, up to twelve threads). One pool of a thread per
core, shared by all of evalctl's blocking work, costs a quarter less CPU a task.

The price of one small pool is that slow work (a grader's plugin code, a git clone, an
fsync on a busy disk) could hold every thread while quick work waits. So the pool grows:
when work has waited `patience` behind threads busy with slow work, one more thread
starts (up to `most`). Threads stay until the pool is shut down, idle or not: a child
process may be bound to the thread that started it (bwrap's --die-with-parent is
PR_SET_PDEATHSIG, which follows the thread, not the process), so a thread that left
would kill the sandboxes it started.
"""

from __future__ import annotations

import atexit
import contextlib
import contextvars
import functools
import itertools
import os
import queue
import threading
import time
from collections.abc import Callable
from concurrent.futures import Executor, Future
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    import asyncio  # at run time only where a loop is used: `import evalctl` stays quick

T = TypeVar("T")

# How long work may wait behind busy threads before the pool grows, and how long the
# watchdog stays with nothing to watch.
PATIENCE_SECONDS = 0.05
WATCHDOG_IDLE_SECONDS = 1.0
# Items a thread takes in one `patience` when its work is quick (at most 12.5 ms each).
SLOW_TAKES = 4


class WorkPool(Executor):
    """`threads` threads, started as work first comes, and more when work waits (above)."""

    def __init__(self, threads: int, *, most: int = 64, patience: float = PATIENCE_SECONDS,
                 name: str = "evalctl-work"):
        self.threads, self.most, self.patience, self.name = threads, most, patience, name
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._threads: set[threading.Thread] = set()  # alive, the watchdog apart
        # Items submitted and taken, numbered in order (next() is atomic under the GIL;
        # += is not): only ever compared, so a store racing another is off by one for a
        # moment, never wrong for long.
        self._submitted = self._taken = 0
        self._submit_numbers, self._take_numbers = itertools.count(1), itertools.count(1)
        self._closed = False
        self._watchdog: threading.Thread | None = None

    @property
    def size(self) -> int:
        """Threads alive now (the watchdog apart)."""
        return len(self._threads)

    def submit(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> Future[T]:
        future: Future[T] = Future()
        self._put((future, fn, args, kwargs))
        return future

    def to_loop(self, loop: asyncio.AbstractEventLoop, fn: Callable[[], T]) -> asyncio.Future[T]:
        """`fn()` on the pool, its outcome set on a future of `loop`'s directly: a third
        less CPU a trip than run_in_executor, which chains a concurrent Future (its
        lock, its callbacks) to the loop's."""
        future = loop.create_future()
        self._put((_ToLoop(loop, future), fn, (), {}))
        return future

    def _put(self, item: tuple[Any, ...]) -> None:
        if self._closed:
            raise RuntimeError("cannot schedule new work after shutdown")
        self._queue.put(item)
        self._submitted = next(self._submit_numbers)
        if len(self._threads) < self.threads:
            self._start(extra=False)
        if self._watchdog is None:  # it leaves when idle: back with the next work
            self._start_watchdog()

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        with self._lock:
            self._closed = True
            threads = list(self._threads)
        if cancel_futures:
            while True:
                try:
                    item = self._queue.get_nowait()
                except queue.Empty:
                    break
                if item is not None:
                    item[0].cancel()
        for _ in threads:
            self._queue.put(None)
        if wait:
            for thread in threads:
                thread.join()

    def _start(self, *, extra: bool) -> None:
        with self._lock:
            if self._closed or len(self._threads) >= (self.most if extra else self.threads):
                return
            thread = threading.Thread(target=self._work, daemon=True,
                                      name=f"{self.name}-{len(self._threads) + 1}")
            self._threads.add(thread)
            thread.start()

    def _start_watchdog(self) -> None:
        with self._lock:
            if self._closed or self._watchdog is not None:
                return
            self._watchdog = threading.Thread(target=self._watch, daemon=True,
                                              name=f"{self.name}-watchdog")
            self._watchdog.start()

    def _work(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:  # the pool was shut down
                with self._lock:
                    self._threads.discard(threading.current_thread())
                return
            self._taken = next(self._take_numbers)
            future, fn, args, kwargs = item
            del item
            if not future.set_running_or_notify_cancel():
                continue
            try:
                result = fn(*args, **kwargs)
            except BaseException as exc:
                future.set_exception(exc)
            else:
                future.set_result(result)
            del future, fn, args, kwargs  # no reference kept while waiting for the next

    def _watch(self) -> None:
        """Add a thread whenever work submitted before the last look is still waiting
        (it has waited at least `patience`) and the threads took few items meanwhile
        (fewer than SLOW_TAKES each: their work is slow). A backlog of quick work, a
        burst of attempts starting together, is taken fast and grows nothing: more
        threads would only wait for the GIL."""
        mark = taken_then = 0
        idle = 0
        while not self._closed:
            time.sleep(self.patience)
            taken = self._taken
            if taken < mark and taken - taken_then < SLOW_TAKES * len(self._threads):
                self._start(extra=True)
            idle = idle + 1 if self._submitted == mark and self._queue.empty() else 0
            if idle * self.patience >= WATCHDOG_IDLE_SECONDS:
                with self._lock:  # submit() puts its work in the queue before it looks
                    if self._queue.empty():
                        self._watchdog = None
                        return
            mark, taken_then = self._submitted, taken
        with self._lock:
            self._watchdog = None


class _ToLoop:
    """Where work submitted from an event loop reports: straight to the loop's future,
    with the part of concurrent.futures.Future's interface the pool's threads use."""

    __slots__ = ("loop", "future")

    def __init__(self, loop: asyncio.AbstractEventLoop, future: asyncio.Future[Any]):
        self.loop, self.future = loop, future

    def set_running_or_notify_cancel(self) -> bool:
        # Read from a pool thread: a cancellation it has not seen yet only runs work
        # whose outcome is then dropped, as run_in_executor's would be.
        return not self.future.cancelled()

    def set_result(self, result: Any) -> None:
        self._send(_settle_result, result)

    def set_exception(self, exc: BaseException) -> None:
        if isinstance(exc, StopIteration):  # an asyncio future refuses it, and would hang
            exc = RuntimeError(f"StopIteration raised in blocking work: {exc}")
        self._send(_settle_exception, exc)

    def cancel(self) -> None:
        self._send(_settle_cancel, None)

    def _send(self, settle: Callable[[asyncio.Future[Any], Any], None], value: Any) -> None:
        with contextlib.suppress(RuntimeError):  # a closed loop: nothing waits for it
            self.loop.call_soon_threadsafe(settle, self.future, value)


def _settle_result(future: asyncio.Future[Any], result: Any) -> None:
    if not future.done():
        future.set_result(result)


def _settle_exception(future: asyncio.Future[Any], exc: BaseException) -> None:
    if not future.done():
        future.set_exception(exc)


def _settle_cancel(future: asyncio.Future[Any], _: None) -> None:
    future.cancel()


_pool: WorkPool | None = None
_lock = threading.Lock()


def _forget_after_fork() -> None:
    # A forked child has none of its parent's threads: the pool would queue for ever.
    global _pool, _lock
    _pool, _lock = None, threading.Lock()


os.register_at_fork(after_in_child=_forget_after_fork)


def _finish_at_exit() -> None:
    """Let what the pool runs finish before the interpreter goes, as ThreadPoolExecutor's
    threads do: a daemon thread still inside C or C++ code (RE2 matching a grep) when
    Python finalizes aborts the process ("terminate called without an active exception").
    The tools' work is bounded, so this wait is too."""
    if _pool is not None:
        _pool.shutdown(wait=True)


atexit.register(_finish_at_exit)


def work_pool() -> WorkPool:
    """The process's pool, made when first used; it lives as long as the process."""
    global _pool
    with _lock:
        if _pool is None:
            _pool = WorkPool(max(2, os.cpu_count() or 1))
        return _pool


async def off_loop(func: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
    """`func(*args, **kwargs)` on the pool, in the caller's context (as asyncio.to_thread
    runs it)."""
    import asyncio

    call = functools.partial(contextvars.copy_context().run, func, *args, **kwargs)
    return await work_pool().to_loop(asyncio.get_running_loop(), call)
