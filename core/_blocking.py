"""Short blocking work (a file made, a tree hashed) off the event loop, on a pool of
threads sized to the machine.

asyncio's default pool has cores + 4 threads; on a small machine they mostly wait for
the GIL, and every hand-over is a futex call in the kernel (on two cores, a
1,000-task run spent a third of its kernel time there). A thread per core keeps the
loop free at a lower cost. Long work that waits on something else (a git clone, an
fsync) stays on the default pool, so it never holds these threads.
"""

from __future__ import annotations

import contextvars
import functools
import os
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

T = TypeVar("T")

_pool: ThreadPoolExecutor | None = None
_lock = threading.Lock()


def _blocking_pool() -> ThreadPoolExecutor:
    global _pool
    with _lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(max_workers=max(2, os.cpu_count() or 1),
                                       thread_name_prefix="evalctl-files")
        return _pool


async def off_loop(func: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
    """`func(*args, **kwargs)` on the pool, in the caller's context (as asyncio.to_thread
    runs it)."""
    import asyncio

    loop = asyncio.get_running_loop()
    call = functools.partial(contextvars.copy_context().run, func, *args, **kwargs)
    return await loop.run_in_executor(_blocking_pool(), call)
