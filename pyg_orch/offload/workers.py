"""Worker threads that exit when idle, and their default numbers."""
import atexit
import collections
import itertools
import os
import threading
import time
import weakref
from concurrent.futures import Future
from typing import Any, Callable, Optional

import torch
import torch.distributed as dist

from pyg_orch.parallel.ddp import rank_info

THREAD_NAME_PREFIX = 'pyg_orch-offload'

_pool_ids = itertools.count()
_live_pools: 'weakref.WeakSet[WorkerPool]' = weakref.WeakSet()
_threads_lock = threading.Lock()


def set_thread_intra_op_threads(num: int) -> None:
    r"""Sets the PyTorch intra-op threads of the calling thread only."""
    with _threads_lock:
        before = _in_new_thread(torch.get_num_threads)
        # Take the process-wide value now, before it is set back:
        torch.get_num_threads()
        torch.set_num_threads(int(num))
        if before != int(num):
            _in_new_thread(torch.set_num_threads, before)


def process_intra_op_threads() -> int:
    r"""The PyTorch intra-op threads that a thread started now begins with."""
    with _threads_lock:
        return _in_new_thread(torch.get_num_threads)


def _in_new_thread(fn: Callable, *args: Any) -> Any:
    # Runs `fn(*args)` in a short-lived thread; returns its result.
    out: list = []
    thread = threading.Thread(target=lambda: out.append(fn(*args)),
                              name=f'{THREAD_NAME_PREFIX}-helper')
    thread.start()
    thread.join()
    return out[0]


def local_ranks() -> int:
    r"""The training processes sharing this machine's cores."""
    if not (dist.is_available() and dist.is_initialized()):
        return 1
    return max(1, rank_info().local_world_size)


def cpu_cores_per_rank(local_world_size: Optional[int] = None) -> int:
    r"""The CPU cores of one training process (at least one)."""
    if local_world_size is None:
        local_world_size = local_ranks()
    return max(1, (os.cpu_count() or 1) // max(int(local_world_size), 1))


def _offload_cores(local_world_size: Optional[int] = None) -> int:
    # Half the cores; the rest is left to the loop, loader and OS.
    return max(1, cpu_cores_per_rank(local_world_size) // 2)


def default_num_threads(local_world_size: Optional[int] = None) -> int:
    r"""Worker threads by default: two (one below four cores per rank), each on
    :func:`default_intra_op_threads` threads, so that they take the interpreter
    lock less often."""
    return min(2, _offload_cores(local_world_size))


def default_intra_op_threads(num_threads: int,
                             local_world_size: Optional[int] = None) -> int:
    r"""PyTorch threads per worker by default (half the cores, shared)."""
    return max(1, _offload_cores(local_world_size) // max(int(num_threads),
                                                          1))


class WorkerPool:
    r"""Daemon worker threads, started on demand, exiting after
    :obj:`idle_timeout` seconds without work."""
    def __init__(self, num_threads: int, idle_timeout: float = 2.0,
                 intra_op_threads: Optional[int] = 1):
        if num_threads < 1:
            raise ValueError(f"'num_threads' must be >= 1 (got "
                             f"{num_threads})")
        self.num_threads = int(num_threads)
        self.idle_timeout = float(idle_timeout)
        self.intra_op_threads = intra_op_threads
        self.name = f'{THREAD_NAME_PREFIX}-{next(_pool_ids)}'
        self._queue: collections.deque = collections.deque()
        self._cond = threading.Condition()
        self._threads: set = set()
        self._idle = 0
        self._num_started = 0
        self._closed = False
        _live_pools.add(self)

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def threads(self) -> list:
        r"""The threads alive now."""
        with self._cond:
            return list(self._threads)

    def submit(self, fn: Callable, *args) -> Future:
        r"""Queues :obj:`fn(*args)`; returns its future."""
        future: Future = Future()
        with self._cond:
            if self._closed:
                raise RuntimeError('The offload worker pool is closed')
            self._queue.append((future, fn, args))
            if (self._idle < len(self._queue)
                    and len(self._threads) < self.num_threads):
                thread = threading.Thread(
                    target=self._work,
                    name=f'{self.name}-{self._num_started}', daemon=True)
                self._num_started += 1
                self._threads.add(thread)
                thread.start()
            self._cond.notify()
        return future

    def _work(self) -> None:
        me = threading.current_thread()
        if self.intra_op_threads is not None:
            set_thread_intra_op_threads(self.intra_op_threads)
        try:
            while True:
                with self._cond:
                    deadline = time.monotonic() + self.idle_timeout
                    while not self._queue and not self._closed:
                        remaining = deadline - time.monotonic()
                        if remaining <= 0:
                            break
                        self._idle += 1
                        try:
                            self._cond.wait(remaining)
                        finally:
                            self._idle -= 1
                    if not self._queue:  # Idle for too long, or closed.
                        self._threads.discard(me)
                        return
                    future, fn, args = self._queue.popleft()
                if not future.set_running_or_notify_cancel():
                    continue
                try:
                    result = fn(*args)
                except BaseException as e:  # Handed to the waiting thread.
                    future.set_exception(e)
                else:
                    future.set_result(result)
                del future, fn, args
        finally:
            with self._cond:
                self._threads.discard(me)

    def close(self, wait: bool = True,
              timeout: Optional[float] = None) -> None:
        r"""Cancels queued work and stops the threads."""
        with self._cond:
            self._closed = True
            queued = list(self._queue)
            self._queue.clear()
            threads = list(self._threads)
            self._cond.notify_all()
        for future, _, _ in queued:
            future.cancel()
        if wait:
            me = threading.current_thread()
            for thread in threads:
                if thread is not me:
                    thread.join(timeout)


@atexit.register
def _close_all_pools() -> None:  # pragma: no cover (runs at exit)
    for pool in list(_live_pools):
        pool.close(wait=True, timeout=10.0)
