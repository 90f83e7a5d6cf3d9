"""Hot-vertex embedding tables computed by CPU threads from weight snapshots,
pipelined by super-batch under a strict staleness bound."""
import collections
import threading
import time
from concurrent.futures import CancelledError, Future
from dataclasses import dataclass
from typing import Any, Dict, List, Optional

import torch
from torch import Tensor

from pyg_orch.offload.bottom_layer import BottomLayerComputer, snapshot_state
from pyg_orch.offload.workers import WorkerPool


class OffloadWorkerError(RuntimeError):
    r"""Raised in the training loop when a CPU worker of
    :class:`~pyg_orch.offload.BottomLayerOffload` failed; the worker's
    exception (with its traceback) is chained as :obj:`__cause__`."""


@dataclass
class EmbeddingTable:
    r"""Bottom-layer outputs of all hot vertices (rows in the order of the
    hot set), computed with the weights of version :obj:`version` (the
    number of optimizer steps taken before the snapshot).

    Args:
        version (int): The weight version used.
        seq (int): The sequence number of the table.
        emb (torch.Tensor): The outputs, on the training device.
        event (torch.cuda.Event, optional): Marks the end of the copy to the
            device.
    """
    version: int
    seq: int
    emb: Tensor
    event: Optional[Any] = None
    ready_on_main: bool = False


class _Job:
    def __init__(self, seq: int, version: int, snapshot: Dict[str, Tensor],
                 event: Optional[Any], num_chunks: int):
        self.seq = seq
        self.version = version
        self.snapshot: Optional[Dict[str, Tensor]] = snapshot
        self.event = event
        self.cpu_state: Optional[Dict[str, Tensor]] = None
        self.buffer: Optional[Tensor] = None
        self.remaining = num_chunks
        self.lock = threading.Lock()
        self.cancelled = threading.Event()
        self.future: Future = Future()
        self.chunk_futures: List[Future] = []

    def fail(self, exc: BaseException) -> None:
        with self.lock:
            if not self.future.done():
                self.future.set_exception(exc)
        self.cancel()

    def cancel(self) -> None:
        self.cancelled.set()
        for f in self.chunk_futures:
            f.cancel()
        self.future.cancel()


def default_super_batch_size(max_staleness: int) -> int:
    r"""The super-batch size :math:`S = \max(1, \lfloor (s + 1) / 2
    \rfloor)` for a staleness bound :math:`s`: a table computed from the
    snapshot taken at the start of super-batch :math:`i` serves super-batch
    :math:`i + 1`, that is up to :math:`2S - 1 \le s` steps later."""
    return max(1, (int(max_staleness) + 1) // 2)


class EmbeddingPipeline:
    r"""Computes tables of hot-vertex embeddings on CPU threads and hands
    them to the training loop with a strictly bounded staleness.

    Weight versions count optimizer steps. At a training step of version
    :math:`t` the caller first calls :meth:`maybe_submit`: every
    :obj:`super_batch_size` versions (the start of a super-batch), a
    snapshot of the layer's weights is taken (an asynchronous device-side
    copy) and the table for it is queued on the worker threads. Then
    :meth:`acquire` returns the newest finished table whose version
    :math:`v` satisfies :math:`t - v \le` :obj:`max_staleness`, and waits
    for one (the oldest queued one that qualifies) if none has finished;
    the wait is timed. With :obj:`max_staleness=0`, each step waits for the
    table computed from its own weights.

    Args:
        computer (BottomLayerComputer): Computes the layer on the CPU.
        layer (torch.nn.Module): The layer on the training device (read for
            snapshots only).
        hot_nodes (torch.Tensor): Global ids of the hot vertices.
        device (torch.device): Where tables are used.
        max_staleness (int): The staleness bound, in optimizer steps.
        num_threads (int): Worker threads.
        super_batch_size (int, optional): Versions per super-batch; see
            :func:`default_super_batch_size`.
        chunk_size (int, optional): Hot vertices per work item; by default
            the hot set is split into :obj:`num_threads` pieces of at most
            65,536 vertices.
        idle_timeout (float): Seconds before an idle worker thread exits.
            (default: :obj:`2.0`)
    """
    def __init__(
        self,
        computer: BottomLayerComputer,
        layer: torch.nn.Module,
        hot_nodes: Tensor,
        device: torch.device,
        max_staleness: int,
        num_threads: int,
        super_batch_size: Optional[int] = None,
        chunk_size: Optional[int] = None,
        idle_timeout: float = 2.0,
    ):
        self.computer = computer
        self.layer = layer
        self.hot_nodes = hot_nodes.to('cpu', torch.int64)
        self.device = torch.device(device)
        self.max_staleness = int(max_staleness)
        if self.max_staleness < 0:
            raise ValueError(f"'max_staleness' must be >= 0 (got "
                             f"{max_staleness})")
        self.super_batch_size = int(
            super_batch_size or default_super_batch_size(max_staleness))
        if self.super_batch_size < 1:
            raise ValueError(f"'super_batch_size' must be >= 1 (got "
                             f"{super_batch_size})")
        self.num_threads = int(num_threads)
        self.idle_timeout = idle_timeout
        n = self.hot_nodes.numel()
        if chunk_size is None:
            chunk_size = min(max(-(-n // self.num_threads), 1), 65536)
        bounds = list(range(0, n, max(int(chunk_size), 1))) + [n]
        self.chunks = [(lo, hi) for lo, hi in zip(bounds[:-1], bounds[1:])]
        self.cuda = self.device.type == 'cuda'
        self.pin = self.cuda and torch.cuda.is_available()
        self._d2h_stream = None  # Created when a snapshot is on CUDA.
        self._h2d_stream = torch.cuda.Stream(self.device) if self.cuda \
            else None

        self.cpu_delay = 0.0  # Test knob: seconds each work item sleeps.
        self._pool: Optional[WorkerPool] = None
        self._jobs: collections.deque = collections.deque()
        self._current: Optional[EmbeddingTable] = None
        self._last_submit: Optional[int] = None
        self._seq = 0
        self._stats_lock = threading.Lock()
        self.reset_stats()

    # Statistics ##############################################################

    def reset_stats(self) -> None:
        r"""Forgets the statistics gathered so far."""
        with self._stats_lock:
            self.cpu_seconds = 0.0
            self.tables_computed = 0
        self.tables_submitted = 0
        self.tables_discarded = 0
        self.wait_seconds = 0.0
        self.num_waits = 0
        self.staleness_hist: Dict[int, int] = {}

    def stats(self) -> Dict[str, Any]:
        r"""Counters of the pipeline (see
        :meth:`pyg_orch.offload.BottomLayerOffload.stats`)."""
        hist = dict(sorted(self.staleness_hist.items()))
        return {
            'max_staleness': self.max_staleness,
            'super_batch_size': self.super_batch_size,
            'num_threads': self.num_threads,
            'staleness_hist': hist,
            'max_staleness_seen': max(hist) if hist else None,
            'wait_s': self.wait_seconds,
            'num_waits': self.num_waits,
            'cpu_compute_s': self.cpu_seconds,
            'tables_submitted': self.tables_submitted,
            'tables_computed': self.tables_computed,
            'tables_discarded': self.tables_discarded,
        }

    @property
    def threads(self) -> list:
        r"""The worker threads alive now."""
        return [] if self._pool is None else self._pool.threads

    # Main thread #############################################################

    def _get_pool(self) -> WorkerPool:
        if self._pool is None or self._pool.closed:
            self._pool = WorkerPool(self.num_threads, self.idle_timeout)
        return self._pool

    def maybe_submit(self, version: int) -> None:
        r"""Takes a snapshot and queues its table at the start of every
        super-batch (or when nothing usable is queued)."""
        if not self.chunks:
            return
        last = self._last_submit
        if last is None or version - last >= self.super_batch_size:
            self.submit(version)

    def submit(self, version: int) -> None:
        r"""Snapshots the layer's weights (of version :obj:`version`) and
        queues the computation of their table."""
        snapshot = snapshot_state(self.layer)
        event = None
        cuda = [v.device for v in snapshot.values() if v.is_cuda]
        if cuda:
            event = torch.cuda.Event()
            event.record(torch.cuda.current_stream(cuda[0]))
        job = _Job(self._seq, version, snapshot, event, len(self.chunks))
        self._seq += 1
        pool = self._get_pool()
        for lo, hi in self.chunks:
            job.chunk_futures.append(pool.submit(self._run_chunk, job, lo,
                                                 hi))
        self._jobs.append(job)
        self._last_submit = version
        self.tables_submitted += 1

    def _raise_failures(self) -> None:
        for job in list(self._jobs):
            f = job.future
            if f.done() and not f.cancelled() and f.exception() is not None:
                self._jobs.remove(job)
                job.cancel()
                exc = f.exception()
                raise OffloadWorkerError(
                    f'BottomLayerOffload: a CPU worker failed while '
                    f'computing hot-vertex embeddings (table {job.seq}, '
                    f'weights of step {job.version}): '
                    f'{type(exc).__name__}: {exc}') from exc

    def _discard(self, job: _Job) -> None:
        job.cancel()
        self.tables_discarded += 1

    def acquire(self, version: int, timer=None) -> EmbeddingTable:
        r"""Returns a table usable at weight version :obj:`version`, waiting
        for one if needed; raises :class:`OffloadWorkerError` if a worker
        failed."""
        bound = self.max_staleness
        self._raise_failures()
        # Tables that could never be used again:
        while self._jobs and version - self._jobs[0].version > bound:
            self._discard(self._jobs.popleft())
        # The newest finished table supersedes everything before it:
        newest = None
        for i, job in enumerate(self._jobs):
            if job.future.done() and job.future.exception() is None:
                newest = i
        if newest is not None:
            for _ in range(newest):
                self._discard(self._jobs.popleft())
            self._current = self._jobs.popleft().future.result()
        current = self._current
        if current is None or version - current.version > bound:
            if not self._jobs:
                self.submit(version)
            job = self._jobs[0]
            start = time.perf_counter()
            try:
                table = job.future.result()
            except CancelledError:  # pragma: no cover (closed meanwhile)
                raise RuntimeError('BottomLayerOffload was closed while the '
                                   'training loop waited for it') from None
            except BaseException as exc:
                if isinstance(exc, (KeyboardInterrupt, SystemExit)):
                    raise
                self._raise_failures()
                raise  # pragma: no cover
            finally:
                waited = time.perf_counter() - start
                self.wait_seconds += waited
                self.num_waits += 1
                if timer is not None:
                    timer.add('offload_wait', waited)
            self._jobs.popleft()
            self._current = current = table
        staleness = version - current.version
        if not 0 <= staleness <= bound:  # pragma: no cover (invariant)
            raise AssertionError(f'staleness {staleness} outside '
                                 f'[0, {bound}]')
        self.staleness_hist[staleness] = \
            self.staleness_hist.get(staleness, 0) + 1
        if current.event is not None and not current.ready_on_main:
            stream = torch.cuda.current_stream(self.device)
            stream.wait_event(current.event)
            current.emb.record_stream(stream)
            current.ready_on_main = True
        return current

    def pause(self) -> None:
        r"""Cancels queued tables and stops the worker threads (the newest
        finished table is kept; the staleness bound still applies to it)."""
        for job in self._jobs:
            if job.future.done() and not job.future.cancelled() and \
                    job.future.exception() is None:
                self._current = job.future.result()
            else:
                self._discard(job)
        self._jobs.clear()
        self._last_submit = None
        if self._pool is not None:
            self._pool.close(wait=True)
            self._pool = None

    def close(self) -> None:
        r"""Like :meth:`pause`, and drops every table."""
        self.pause()
        self._current = None

    # Worker threads ##########################################################

    def _cpu_state(self, job: _Job) -> Dict[str, Tensor]:
        with job.lock:
            if job.cpu_state is None:
                snapshot = job.snapshot
                if job.event is not None:
                    stream = self._d2h_stream
                    if stream is None:
                        stream = self._d2h_stream = torch.cuda.Stream(
                            next(v.device for v in snapshot.values()
                                 if v.is_cuda))
                    with torch.cuda.stream(stream):
                        stream.wait_event(job.event)
                        state = {}
                        for k, v in snapshot.items():
                            out = torch.empty(v.shape, dtype=v.dtype,
                                              pin_memory=v.is_cuda)
                            out.copy_(v, non_blocking=v.is_cuda)
                            state[k] = out
                    stream.synchronize()
                else:
                    state = snapshot
                job.cpu_state = state
                job.snapshot = None
            return job.cpu_state

    def _run_chunk(self, job: _Job, lo: int, hi: int) -> None:
        if job.cancelled.is_set():
            return
        start = time.perf_counter()
        try:
            delay = self.cpu_delay
            if delay:
                job.cancelled.wait(delay)
                if job.cancelled.is_set():
                    return
            state = self._cpu_state(job)
            layer = self.computer.layer_for(job.seq, state)
            out = self.computer.compute(layer, self.hot_nodes[lo:hi])
            with job.lock:
                if job.buffer is None:
                    job.buffer = torch.empty(
                        (self.hot_nodes.numel(), ) + tuple(out.shape[1:]),
                        dtype=out.dtype, pin_memory=self.pin)
                buffer = job.buffer
            buffer[lo:hi].copy_(out)
            with job.lock:
                job.remaining -= 1
                last = job.remaining == 0
            if last:
                self._finish(job)
        except BaseException as exc:
            job.fail(exc)
        finally:
            with self._stats_lock:
                self.cpu_seconds += time.perf_counter() - start

    def _finish(self, job: _Job) -> None:
        if job.cancelled.is_set():
            return
        event = None
        if self.cuda:
            stream = self._h2d_stream
            with torch.cuda.stream(stream):
                emb = job.buffer.to(self.device, non_blocking=True)
                event = torch.cuda.Event()
                event.record(stream)
        else:
            emb = job.buffer
        job.buffer = None
        table = EmbeddingTable(job.version, job.seq, emb, event)
        with self._stats_lock:
            self.tables_computed += 1
        with job.lock:
            if not job.future.done():
                job.future.set_result(table)
