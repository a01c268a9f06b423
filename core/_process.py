"""Child processes that cannot take the run down: each runs in its own session, its
output is capped to head and tail, it is killed on timeout, and when it ends every
process it left behind in its session's group is killed too.

This is the supervision every sandbox builds on: the `local` sandbox runs commands
through it directly, `bwrap` runs bubblewrap through it.
"""

from __future__ import annotations

import collections
import contextlib
import functools
import os
import signal
import threading
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

from evalctl._text import escape_surrogates

if TYPE_CHECKING:  # imported where a process runs: `import evalctl` stays quick
    import asyncio
    import subprocess

OUTPUT_LIMIT = 30_000

_T = TypeVar("_T")


@dataclass(frozen=True)
class CommandResult:
    """What a command run in a sandbox did.

    `exit_code` is None when the command was killed for its timeout (`timed_out`).
    `stdout` and `stderr` keep the head and the tail of what was written, with the
    number of bytes elided between them; with `merge_stderr` both went to `stdout`.
    Bytes that are not UTF-8 are kept as `\\xNN` escapes.
    """

    exit_code: int | None
    stdout: str
    stderr: str = ""
    timed_out: bool = False

    @property
    def output(self) -> str:
        """stdout and stderr together, for a detail or a tool result."""
        if self.stdout and self.stderr:
            return self.stdout.rstrip("\n") + "\n" + self.stderr
        return self.stdout or self.stderr


async def run_process(argv: Sequence[str], *, cwd: str | os.PathLike[str],
                      env: Mapping[str, str], timeout: float,
                      stdin: bytes | str | None = None, merge_stderr: bool = False,
                      output_limit: int | None = None, pass_fds: Collection[int] = (),
                      started: Callable[[int], None] | None = None) -> CommandResult:
    """Run `argv` in a new session with exactly `env`, in `cwd`, and wait for it.

    Output is captured head and tail (`output_limit` bytes per stream, 30,000 by
    default). On timeout the
    whole process group is killed, and it is killed when the command ends too, so a
    backgrounded child of the same group cannot linger (one that starts its own session
    can: only a sandbox with a PID namespace stops that). `stdin` is written and closed;
    without it the command reads /dev/null.

    `pass_fds` stay open in the command (every other descriptor is closed there).
    `started(pid)`, if given, is called as soon as the command runs, in the thread that
    started it (it may block briefly: a sandbox uses it to put the process into its
    cgroups). If it raises, the command's process group is killed and reaped and the
    exception is raised here. A program that cannot be executed (not found, no
    permission) raises the OSError, its `filename` the program: a sandbox whose `run`
    starts the command's program directly returns exit 127 or 126 for it instead, as
    a shell does (the Sandbox contract; `local` does). Cancelled while the command
    starts, this returns (raising CancelledError) only once `started` has returned and
    the command is reaped, however often it is cancelled meanwhile: the caller may then
    clean up what `started` used.
    """
    import asyncio

    from evalctl._blocking import work_pool  # here: `import evalctl` stays quick

    if not 0 < timeout < float("inf"):  # NaN too: it would disorder every timer of the loop
        raise ValueError(f"timeout must be a finite number of seconds above 0, not {timeout!r}")
    loop = asyncio.get_running_loop()
    # The output pipes are ours, not a transport's: waiting for the process must not
    # also wait for every holder of a pipe, and a backgrounded child holds it.
    pipes = [os.pipe() for _ in range(1 if merge_stderr else 2)]
    out_write = pipes[0][1]
    err_write = out_write if merge_stderr else pipes[1][1]
    data = stdin.encode() if isinstance(stdin, str) else stdin
    stdin_pipe = os.pipe() if data is not None else None
    child_ends = [write_fd for _, write_fd in pipes] + ([stdin_pipe[0]] if stdin_pipe else [])
    # Spawned on the pool of blocking work: exec() takes about a millisecond of kernel
    # time (Python drops the GIL around vfork), which the event loop spends on other tasks.
    spawning = work_pool().to_loop(loop, functools.partial(
        _spawn, list(argv), str(cwd), dict(env),
        stdin_pipe[0] if stdin_pipe else None, out_write, err_write, tuple(pass_fds), started))
    try:
        process = await asyncio.shield(spawning)
    except asyncio.CancelledError:
        # The child may have started all the same: it must not outlive the cancellation.
        # Waited for to the end however often the task is cancelled meanwhile: `started`
        # may still be at work in its thread, and the caller cleans up after it when this
        # returns (a sandbox closes the descriptor its process waits on).
        started = await _despite_cancellation(spawning)
        if started is not None:
            kill_process_group(started.pid)
            await _despite_cancellation(asyncio.ensure_future(_exited(started)))
        _close_all([fd for pair in pipes for fd in pair] + list(stdin_pipe or ()))
        raise
    except BaseException:
        _close_all([fd for pair in pipes for fd in pair] + list(stdin_pipe or ()))
        raise
    finally:
        _close_all(child_ends)  # the child has its own copies; ours would hold the pipes open
    collectors = [_HeadTail(output_limit or OUTPUT_LIMIT) for _ in pipes]
    unread = [read_fd for read_fd, _ in pipes]  # not yet handed to a reader
    readers: list[_PipeReader] = []
    feeder: asyncio.WriteTransport | None = None
    timed_out = False
    exited = asyncio.ensure_future(_exited(process))
    try:
        if stdin_pipe is not None and data is not None:
            feeder = await _start_feeder(stdin_pipe[1], data)
        for collector in collectors:
            read_fd = unread.pop(0)  # the reader owns it now, whatever happens next
            readers.append(_PipeReader(read_fd, collector))
        def expire() -> None:  # a timer, not wait_for: a coroutine and a task fewer
            nonlocal timed_out
            timed_out = True
            kill_process_group(process.pid)

        timer = loop.call_later(timeout, expire)
        try:
            await asyncio.shield(exited)
        finally:
            timer.cancel()
    finally:
        # Whatever happened (the end, the timeout, a cancellation), the whole group dies
        # and the process is reaped before this returns.
        kill_process_group(process.pid)
        code = await exited
        _close_all(unread)
        for reader in readers:
            try:
                if not reader.done.done():
                    await asyncio.wait_for(asyncio.shield(reader.done), 5)
            except TimeoutError:
                pass  # a holder of the pipe outlived the group: what was read is kept
            finally:
                reader.close()
        if feeder is not None and feeder.get_write_buffer_size():
            feeder.abort()  # what the command did not read is dropped with the pipe
    texts = [collector.text() for collector in collectors]
    return CommandResult(None if timed_out else code, texts[0],
                         "" if merge_stderr else texts[1], timed_out)


async def _despite_cancellation(future: asyncio.Future[_T]) -> _T | None:
    """`future`'s result, None if it failed: awaited until it is done, however often the
    task is cancelled meanwhile (the caller re-raises its own cancellation after)."""
    import asyncio

    while True:
        try:
            return await asyncio.shield(future)
        except asyncio.CancelledError:
            if not future.done():
                continue
            if future.cancelled() or future.exception() is not None:
                return None
            return future.result()
        except Exception:
            return None


_DEVNULL: list[int] = []
_DEVNULL_LOCK = threading.Lock()


def _devnull() -> int:
    """/dev/null for reading, opened once: Popen's DEVNULL opens and closes it again for
    every child, two system calls more in the thread that starts it."""
    with _DEVNULL_LOCK:
        if not _DEVNULL:
            _DEVNULL.append(os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC))
        return _DEVNULL[0]


# (a command's name, the PATH it is looked up in) -> the file found there. Popen looks a
# bare name up in the child, with an execve for every directory of PATH before the one
# that holds it (eight for bash on a usual PATH), while the thread that started it waits
# holding the GIL; looked up here once, a start is one execve.
_FOUND: dict[tuple[str, str], str] = {}
_FOUND_LOCK = threading.Lock()


def _found_key(name: str, env: Mapping[str, str]) -> tuple[str, str]:
    return name, env.get("PATH", os.defpath)  # what Popen searches without a PATH


def _executable(name: str, env: Mapping[str, str]) -> str | None:
    """Where `name` is on `env`'s PATH, as the child would find it; None when it names
    a path itself, is not found, or PATH has a relative entry (found from the child's
    directory, not this process's)."""
    if "/" in name or not name:
        return None
    key = _found_key(name, env)
    path = key[1]
    found = _FOUND.get(key)
    if found is None:
        if not all(os.path.isabs(entry) for entry in path.split(os.pathsep)):
            return None
        import shutil

        found = shutil.which(name, path=path)
        if found is None:
            return None
        with _FOUND_LOCK:
            _FOUND[key] = found
    return found


def _spawn(argv: list[str], cwd: str, env: dict[str, str], stdin_fd: int | None,
           out_fd: int, err_fd: int, pass_fds: tuple[int, ...] = (),
           started: Callable[[int], None] | None = None) -> subprocess.Popen[bytes]:
    import subprocess

    def popen(executable: str | None) -> subprocess.Popen[bytes]:
        return subprocess.Popen(argv, executable=executable, cwd=cwd, env=env,
                                stdin=_devnull() if stdin_fd is None else stdin_fd,
                                stdout=out_fd, stderr=err_fd, start_new_session=True,
                                pass_fds=pass_fds)

    executable = _executable(argv[0], env)
    try:
        process = popen(executable)
    except OSError:
        if executable is None:
            raise
        # The file found before is gone or changed: look the name up as Popen does.
        with _FOUND_LOCK:
            _FOUND.pop(_found_key(argv[0], env), None)
        process = popen(None)
    if started is not None:
        try:
            started(process.pid)
        except BaseException:
            kill_process_group(process.pid)
            process.wait()
            raise
    return process


async def _exited(process: subprocess.Popen[bytes]) -> int:
    """Wait for `process` to exit and reap it; its exit code (negative: the signal).

    Where Linux has pidfds (5.3+), the event loop polls the process's descriptor: no
    thread and no signal handler per child. Elsewhere a thread waits for it, as
    asyncio's own child watcher would."""
    import asyncio

    loop = asyncio.get_running_loop()
    try:
        pidfd = os.pidfd_open(process.pid)
    except (AttributeError, OSError):  # no pidfds here (not Linux, an old kernel, seccomp)
        return await _exited_in_thread(process)
    try:
        done = loop.create_future()

        def readable() -> None:
            if not done.done():
                done.set_result(None)

        loop.add_reader(pidfd, readable)
        try:
            await done
        finally:
            loop.remove_reader(pidfd)
    finally:
        os.close(pidfd)
    # Readable means it has exited: this reaps it without blocking.
    code = process.poll()
    return code if code is not None else process.wait()


async def _exited_in_thread(process: subprocess.Popen[bytes]) -> int:
    import asyncio

    loop = asyncio.get_running_loop()
    done: asyncio.Future[int] = loop.create_future()

    def wait() -> None:
        code = process.wait()
        loop.call_soon_threadsafe(lambda: done.done() or done.set_result(code))

    threading.Thread(target=wait, name=f"evalctl-wait-{process.pid}", daemon=True).start()
    return await asyncio.shield(done)


def _close_all(fds: list[int]) -> None:
    for fd in fds:
        with contextlib.suppress(OSError):
            os.close(fd)


async def _start_feeder(write_fd: int, data: bytes) -> asyncio.WriteTransport:
    """Write `data` to the command's standard input as it reads, then close it; a command
    that exits without reading it all ends the writing (a broken pipe is not an error)."""
    import asyncio

    transport, _ = await asyncio.get_running_loop().connect_write_pipe(
        asyncio.Protocol, os.fdopen(write_fd, "wb", buffering=0))
    transport.write(data)
    transport.close()  # after what is buffered has been written
    return transport


class _PipeReader:
    """Reads one of the command's output pipes into a collector as data arrives, straight
    from the event loop's selector (no transport, protocol or task per pipe: a command
    is two of these, and they were a third of the loop's cost of running one). `done`
    is set at the end of the stream."""

    def __init__(self, read_fd: int, collector: _HeadTail):
        import asyncio

        self.fd = read_fd
        self.collector = collector
        self.loop = asyncio.get_running_loop()
        self.done: asyncio.Future[None] = self.loop.create_future()
        self.closed = False
        os.set_blocking(read_fd, False)
        self.loop.add_reader(read_fd, self._readable)

    def _readable(self) -> None:
        try:
            chunk = os.read(self.fd, 65536)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            chunk = b""
        if chunk:
            self.collector.feed(chunk)
            return
        self.close()

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        self.loop.remove_reader(self.fd)
        with contextlib.suppress(OSError):
            os.close(self.fd)
        if not self.done.done():
            self.done.set_result(None)


def kill_process_group(pgid: int) -> None:
    """SIGKILL every process in the group: the command and anything it left behind."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


class _HeadTail:
    """Keeps the first and last `limit/2` bytes of a stream of any size."""

    def __init__(self, limit: int):
        self.half = limit // 2
        self.head = bytearray()
        # The tail as the chunks it came in, whole ones dropped from the left as more
        # come: cutting one buffer from the front for every chunk moved the whole tail
        # each time, which a limit of megabytes (tests_pass's) made quadratic.
        self.tail: collections.deque[bytes] = collections.deque()
        self.tail_bytes = 0
        self.total = 0

    def feed(self, chunk: bytes) -> None:
        self.total += len(chunk)
        room = self.half - len(self.head)
        if room > 0:
            self.head += chunk[:room]
            chunk = chunk[room:]
        if chunk:
            self.tail.append(bytes(chunk))
            self.tail_bytes += len(chunk)
            while self.tail and self.tail_bytes - len(self.tail[0]) >= self.half:
                self.tail_bytes -= len(self.tail.popleft())

    def text(self) -> str:
        """What was kept, as text that is always UTF-8: a byte that is not UTF-8 is kept
        as a `\\xNN` escape (as a file name that is not UTF-8 is), never lost to U+FFFD."""
        kept = b"".join(self.tail)
        kept = kept[max(0, len(kept) - self.half):]
        head = escape_surrogates(self.head.decode("utf-8", errors="surrogateescape"))
        tail = escape_surrogates(kept.decode("utf-8", errors="surrogateescape"))
        elided = self.total - len(self.head) - len(kept)
        if elided > 0:
            return f"{head}\n[... {elided} bytes elided ...]\n{tail}"
        return head + tail


def command_path() -> str:
    """The PATH every sandboxed command gets: the directory of evalctl's own interpreter
    first (so `python` and `pytest` mean the ones evalctl runs on), then the user's. A
    plugin that looks a program up before any task (a preflight) looks where the
    commands will."""
    import sys

    return f"{os.path.dirname(sys.executable)}{os.pathsep}{os.environ.get('PATH') or os.defpath}"
