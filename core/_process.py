"""Child processes that cannot take the run down: each runs in its own session, its
output is capped to head and tail, it is killed on timeout, and when it ends every
process it left behind in its session's group is killed too.

This is the supervision every sandbox builds on: the `local` sandbox runs commands
through it directly, `bwrap` runs bubblewrap through it.
"""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # asyncio is imported where a process runs: `import evalctl` stays quick
    import asyncio

OUTPUT_LIMIT = 30_000


@dataclass(frozen=True)
class CommandResult:
    """What a command run in a sandbox did.

    `exit_code` is None when the command was killed for its timeout (`timed_out`).
    `stdout` and `stderr` keep the head and the tail of what was written, with the
    number of bytes elided between them; with `merge_stderr` both went to `stdout`.
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
                      output_limit: int | None = None) -> CommandResult:
    """Run `argv` in a new session with exactly `env`, in `cwd`, and wait for it.

    Output is captured head and tail (`output_limit` bytes per stream, 30,000 by
    default). On timeout the
    whole process group is killed, and it is killed when the command ends too, so a
    backgrounded child of the same group cannot linger (one that starts its own session
    can: only a sandbox with a PID namespace stops that). `stdin` is written and closed;
    without it the command reads /dev/null.
    """
    import asyncio

    # The output pipes are ours, not the transport's: asyncio's wait() would otherwise
    # also wait for every holder of a pipe, and a backgrounded child holds it.
    pipes = [os.pipe() for _ in range(1 if merge_stderr else 2)]
    out_write = pipes[0][1]
    err_write = out_write if merge_stderr else pipes[1][1]
    data = stdin.encode() if isinstance(stdin, str) else stdin
    try:
        process = await asyncio.create_subprocess_exec(
            *argv, cwd=str(cwd), env=dict(env),
            stdin=asyncio.subprocess.DEVNULL if data is None else asyncio.subprocess.PIPE,
            stdout=out_write, stderr=err_write, start_new_session=True,
        )
    except BaseException:
        for read_fd, write_fd in pipes:
            os.close(read_fd)
            os.close(write_fd)
        raise
    finally:
        for _, write_fd in pipes:
            with contextlib.suppress(OSError):
                os.close(write_fd)
    if data is not None and process.stdin is not None:
        feeder: asyncio.Task[None] | None = asyncio.create_task(_feed(process.stdin, data))
    else:
        feeder = None
    collectors = [_HeadTail(output_limit or OUTPUT_LIMIT) for _ in pipes]
    readers = [await _start_reader(read_fd, collector)
               for (read_fd, _), collector in zip(pipes, collectors, strict=True)]
    timed_out = False
    waiter = asyncio.ensure_future(process.wait())
    try:
        await asyncio.wait_for(asyncio.shield(waiter), timeout)
    except TimeoutError:
        timed_out = True
    finally:
        kill_process_group(process.pid)
        code = await waiter
        for reader, transport in readers:
            try:
                await asyncio.wait_for(reader, 5)
            except TimeoutError:
                reader.cancel()
            transport.close()
        if feeder is not None:
            feeder.cancel()
            with contextlib.suppress(BaseException):
                await feeder
    texts = [collector.text() for collector in collectors]
    return CommandResult(None if timed_out else code, texts[0],
                         "" if merge_stderr else texts[1], timed_out)


async def _feed(writer: asyncio.StreamWriter, data: bytes) -> None:
    with contextlib.suppress(ConnectionError, BrokenPipeError):
        writer.write(data)
        await writer.drain()
        writer.close()


async def _start_reader(read_fd: int, collector: _HeadTail
                        ) -> tuple[asyncio.Task[None], asyncio.BaseTransport]:
    import asyncio

    stream = asyncio.StreamReader()
    transport, _ = await asyncio.get_running_loop().connect_read_pipe(
        lambda: asyncio.StreamReaderProtocol(stream), os.fdopen(read_fd, "rb", buffering=0))
    return asyncio.create_task(collector.drain(stream)), transport


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
