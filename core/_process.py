"""Child processes that cannot take the run down: each runs in its own session, its
output is capped to head and tail, it is killed on timeout, and when it ends every
process it left behind in its group is killed too."""

from __future__ import annotations

import asyncio
import contextlib
import io
import os
import signal
import sys
import traceback
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path

OUTPUT_LIMIT = 30_000


async def run_command(command: str, cwd: Path, env: Mapping[str, str], timeout: float,
                      limit: int = OUTPUT_LIMIT) -> tuple[int | None, str, bool]:
    """Run `command` with bash in its own process group.

    Returns (exit code, head+tail of combined output, timed out).
    """
    # The output pipe is ours, not the transport's: asyncio's wait() would otherwise
    # also wait for every holder of the pipe, and a backgrounded child holds it.
    read_fd, write_fd = os.pipe()
    try:
        process = await asyncio.create_subprocess_exec(
            "bash", "-c", command, cwd=str(cwd), env=dict(env),
            stdin=asyncio.subprocess.DEVNULL, stdout=write_fd, stderr=write_fd,
            start_new_session=True,
        )
    except BaseException:
        os.close(read_fd)
        raise
    finally:
        os.close(write_fd)
    return await _supervise(process.pid, process.wait, read_fd, timeout, limit)


def can_fork() -> bool:
    return hasattr(os, "fork") and hasattr(os, "pidfd_open")


async def run_forked(child: Callable[[], None], cwd: Path, env: Mapping[str, str],
                     timeout: float, limit: int = OUTPUT_LIMIT) -> tuple[int | None, str, bool]:
    """Run `child()` in a forked copy of this process, in its own session, with `cwd`,
    `env`, and its stdout and stderr captured. Exit code 0 when it returns, 1 when it
    raises (the traceback is in the output). Starting a check this way costs a fork, not
    an interpreter start. Linux only: see can_fork()."""
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child's outcome is reported through its exit code
        code = 70
        try:
            _become_isolated(write_fd, cwd, env)
            code = _call(child)
        finally:
            os._exit(code)
    os.close(write_fd)
    loop = asyncio.get_running_loop()
    pidfd = os.pidfd_open(pid)
    exited: asyncio.Future[None] = loop.create_future()
    loop.add_reader(pidfd, lambda: exited.done() or exited.set_result(None))

    async def wait() -> int:
        try:
            await exited
        finally:
            loop.remove_reader(pidfd)
            os.close(pidfd)
        return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])

    return await _supervise(pid, wait, read_fd, timeout, limit)


def _become_isolated(out_fd: int, cwd: Path, env: Mapping[str, str]) -> None:
    signal.set_wakeup_fd(-1)
    for number in (signal.SIGINT, signal.SIGTERM, signal.SIGPIPE):
        signal.signal(number, signal.SIG_DFL)
    os.setsid()
    os.dup2(out_fd, 1)
    os.dup2(out_fd, 2)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    for fd in _open_fds():
        if fd > 2:
            with contextlib.suppress(OSError):
                os.close(fd)
    os.chdir(cwd)
    os.environ.clear()
    os.environ.update(env)
    sys.stdin = io.TextIOWrapper(io.FileIO(0, "r", closefd=False))
    sys.stdout = io.TextIOWrapper(io.FileIO(1, "w", closefd=False), line_buffering=True)
    sys.stderr = io.TextIOWrapper(io.FileIO(2, "w", closefd=False), line_buffering=True)


def _open_fds() -> list[int]:
    try:
        return [int(name) for name in os.listdir("/proc/self/fd")]
    except OSError:
        return list(range(3, 256))


def _call(child: Callable[[], None]) -> int:
    try:
        child()
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        if exc.code is not None and not isinstance(exc.code, int):
            print(exc.code, file=sys.stderr)
    except BaseException:
        traceback.print_exc()
        code = 1
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    return code


async def _supervise(pid: int, wait: Callable[[], Awaitable[int]], read_fd: int,
                     timeout: float, limit: int) -> tuple[int | None, str, bool]:
    stream = asyncio.StreamReader()
    transport, _ = await asyncio.get_running_loop().connect_read_pipe(
        lambda: asyncio.StreamReaderProtocol(stream), os.fdopen(read_fd, "rb", buffering=0))
    collector = _HeadTail(limit)
    reader = asyncio.create_task(collector.drain(stream))
    waiter = asyncio.ensure_future(wait())
    timed_out = False
    try:
        await asyncio.wait_for(asyncio.shield(waiter), timeout)
    except TimeoutError:
        timed_out = True
    finally:
        kill_process_group(pid)
        code = await waiter
        try:
            await asyncio.wait_for(reader, 5)
        except TimeoutError:
            reader.cancel()
        transport.close()
    return (None if timed_out else code), collector.text(), timed_out


def kill_process_group(pgid: int) -> None:
    """SIGKILL every process in the group: the command and anything it left behind."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


class _HeadTail:
    """Keeps the first and last `limit/2` bytes of a stream of any size."""

    def __init__(self, limit: int):
        self.half = limit // 2
        self.head = bytearray()
        self.tail = bytearray()
        self.total = 0

    async def drain(self, stream: asyncio.StreamReader) -> None:
        while chunk := await stream.read(65536):
            self.total += len(chunk)
            room = self.half - len(self.head)
            if room > 0:
                self.head += chunk[:room]
                chunk = chunk[room:]
            if chunk:
                self.tail += chunk
                if len(self.tail) > self.half:
                    del self.tail[: len(self.tail) - self.half]

    def text(self) -> str:
        head = self.head.decode("utf-8", errors="replace")
        tail = self.tail.decode("utf-8", errors="replace")
        elided = self.total - len(self.head) - len(self.tail)
        if elided > 0:
            return f"{head}\n[... {elided} bytes elided ...]\n{tail}"
        return head + tail
