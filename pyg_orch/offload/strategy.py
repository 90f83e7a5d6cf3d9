"""The interface of the ways hot rows are computed on CPU threads."""
import collections
import threading
import time
from concurrent.futures import CancelledError
from typing import Any, Dict, List, Optional, Union

import torch
from torch import Tensor

from pyg_orch.offload.aggregate_split import OUTPUT
from pyg_orch.offload.bottom_layer import BottomLayerComputer
from pyg_orch.offload.hot_set import HotSetSizer
from pyg_orch.offload.options import WorkHook
from pyg_orch.offload.replacement import BatchInfo
from pyg_orch.offload.tables import (
    EmbeddingTable,
    Job,
    OffloadWorkerError,
    PinnedStaging,
    Snapshot,
    default_chunk_size,
)
from pyg_orch.offload.workers import WorkerPool

#: The age bound of rows that may be reused for ever.
UNBOUNDED = 2**62


class EmbeddingStrategy:
    r"""Computes the first layer's rows of hot vertices on CPU worker
    threads from weight snapshots.

    Args:
        hot (HotSetSizer or torch.Tensor): The hot set (a tensor: fixed).
        max_sample_age (int, optional): The most steps a row's neighbor
            sample may be reused.
        static (bool): Whether weight-free rows aggregate all in-neighbors, so
            that a row computed once is exact at every later step.
        scheduled (bool): Whether the rows a step uses depend on the step
            only, not on when the CPU finishes them.
    """
    #: Whether it computes the rows each batch needs.
    per_batch = False
    #: The :obj:`refresh` option it implements.
    refresh = ''
    #: Steps per table of all hot vertices (one: rows by batch).
    super_batch_size = 1

    def __init__(self, computer: BottomLayerComputer, layer: torch.nn.Module,
                 hot: Union[HotSetSizer, Tensor], device: torch.device,
                 max_staleness: int, num_threads: int,
                 chunk_size: Optional[int] = None, idle_timeout: float = 2.0,
                 intra_op_threads: int = 1,
                 work_hook: Optional[WorkHook] = None,
                 max_sample_age: Optional[int] = None, static: bool = False,
                 scheduled: bool = False):
        self.computer = computer
        self.layer = layer
        self.hot = hot if isinstance(hot, HotSetSizer) else HotSetSizer(hot)
        self.device = torch.device(device)
        self.max_staleness = int(max_staleness)
        self.max_sample_age = None if max_sample_age is None else int(
            max_sample_age)
        # Weight-free rows are finished with the current weights on the device:
        self.weight_free = computer.split != OUTPUT
        self.static = bool(static) and self.weight_free
        #: Whether rows are used by step, not by arrival.
        self.scheduled = bool(scheduled) and not self.static
        self.num_threads = int(num_threads)
        self.intra_op_threads = int(intra_op_threads)
        self.chunk_size = int(default_chunk_size(computer)
                              if chunk_size is None else chunk_size)
        self.idle_timeout = idle_timeout
        self.work_hook = work_hook
        self.cuda = self.device.type == 'cuda'
        # Rows go to the device through small pinned buffers:
        self.staging = PinnedStaging() if self.cuda else None
        self._streams: Dict[Any, Any] = {}
        self._streams_lock = threading.Lock()
        self._pool: Optional[WorkerPool] = None
        self._jobs: collections.deque = collections.deque()
        self._seq = 0
        self._stats_lock = threading.Lock()
        self._plan_expired = 0  # Tables expired since the last `replan`.
        self._plan_version = 0  # The step of the last `replan`.
        self._version = 0  # The latest training step's.
        self.reset_stats()

    def on_forward(self, version: int) -> None:
        r"""A training forward pass of weight version :obj:`version` starts."""

    def on_batch_sampled(self, pos: Tensor, version: int,
                         weights_version: Optional[int] = None) -> None:
        r"""A batch with hot rows :obj:`pos` was drawn."""

    def rows_for(self, info: BatchInfo, version: int,
                 timer: Any = None) -> Optional[Tensor]:
        r"""The rows that replace the batch's hot rows, or :obj:`None`."""
        raise NotImplementedError

    def replan(self) -> None:
        r"""The planned hot set changed."""

    @property
    def age_bound(self) -> int:
        r"""The most steps between a row's version and its use."""
        if self.static:
            return UNBOUNDED
        return self._sample_age_bound

    @property
    def _sample_age_bound(self) -> int:
        # The bound without `static`, also the CPU's deadline for a table.
        bound = UNBOUNDED if self.weight_free else self.max_staleness
        if self.max_sample_age is not None:
            bound = min(bound, self.max_sample_age)
        return bound

    @property
    def pending(self) -> int:
        r"""The work queued and not finished yet (tables or row sets)."""
        return sum(not job.future.done() for job in self._jobs)

    @property
    def threads(self) -> list:
        r"""The worker threads alive now."""
        return [] if self._pool is None else self._pool.threads

    def reset_stats(self) -> None:
        r"""Forgets the statistics gathered so far."""
        with self._stats_lock:
            self.cpu_seconds = 0.0
            self.tables_computed = 0
            self.rows_computed = 0
        self.tables_submitted = 0
        self.tables_discarded = 0
        self.tables_expired = 0
        self.wait_seconds = 0.0
        self.num_waits = 0
        self.staleness_hist: Dict[int, int] = {}
        self.max_table_age: Optional[int] = None
        self.sample_age_sum = 0.0
        self.sample_age_uses = 0

    def _record_staleness(self, age: int,
                          mean_age: Optional[float] = None) -> None:
        # `age`/`mean_age`: steps since the rows' snapshot (static: 0).
        if self.static:
            age, mean_age = 0, 0.0
        self.max_table_age = age if self.max_table_age is None else max(
            self.max_table_age, age)
        if not 0 <= age <= self.age_bound:  # pragma: no cover
            raise AssertionError(f'sample age {age} outside '
                                 f'[0, {self.age_bound}]')
        self.sample_age_sum += age if mean_age is None else mean_age
        self.sample_age_uses += 1
        staleness = 0 if self.weight_free else age
        if not 0 <= staleness <= self.max_staleness:  # pragma: no cover
            raise AssertionError(f'staleness {staleness} outside '
                                 f'[0, {self.max_staleness}]')
        self.staleness_hist[staleness] = \
            self.staleness_hist.get(staleness, 0) + 1

    def stats(self) -> Dict[str, Any]:
        r"""Counters (see :meth:`BottomLayerOffload.stats`)."""
        hist = dict(sorted(self.staleness_hist.items()))
        return {
            'max_staleness': self.max_staleness,
            'num_threads': self.num_threads,
            'intra_op_threads': self.intra_op_threads,
            'cpu_autocast': None if self.computer.autocast_dtype is None else
            str(self.computer.autocast_dtype).replace('torch.', ''),
            'chunk_size': self.chunk_size,
            'staleness_hist': hist,
            'max_staleness_seen': max(hist) if hist else None,
            'max_table_age': self.max_table_age,
            'max_sample_age': self.max_sample_age,
            'sample_age_max': self.max_table_age,
            'sample_age_mean': self.sample_age_sum / self.sample_age_uses
            if self.sample_age_uses else None,
            'wait_s': self.wait_seconds,
            'num_waits': self.num_waits,
            'cpu_compute_s': self.cpu_seconds,
            'tables_submitted': self.tables_submitted,
            'tables_computed': self.tables_computed,
            'tables_discarded': self.tables_discarded,
            'tables_expired': self.tables_expired,
            'rows_computed': self.rows_computed,
            'refresh': self.refresh,
            'static_tables': self.static,
            'hot_sizes': list(self.hot.sizes),
            'super_batch_size': self.super_batch_size,
        }

    def _get_pool(self) -> WorkerPool:
        if self._pool is None or self._pool.closed:
            self._pool = WorkerPool(self.num_threads, self.idle_timeout,
                                    self.intra_op_threads)
        return self._pool

    def _stream(self, key, device) -> Any:
        with self._streams_lock:
            stream = self._streams.get(key)
            if stream is None:
                stream = self._streams[key] = torch.cuda.Stream(device)
            return stream

    def _launch(self, snapshot: Snapshot, nodes: Tensor, chunks: List,
                rows: Optional[Tensor] = None) -> Job:
        job = Job(self._seq, snapshot, nodes, chunks, rows)
        self._seq += 1
        pool = self._get_pool()
        for lo, hi in chunks:
            job.chunk_futures.append(pool.submit(self.run_item, job, lo, hi))
        self._jobs.append(job)
        self.tables_submitted += 1
        return job

    def _raise_failures(self) -> None:
        for job in list(self._jobs):
            if job.failed():
                self._jobs.remove(job)
                self._on_dropped(job)
                job.cancel()
                exc = job.future.exception()
                raise OffloadWorkerError(
                    f'BottomLayerOffload: a CPU worker failed while '
                    f'computing hot-vertex embeddings (table {job.seq}, '
                    f'weights of step {job.version}): '
                    f'{type(exc).__name__}: {exc}') from exc

    def _on_dropped(self, job: Job) -> None:
        pass

    def _discard(self, job: Job) -> None:
        job.cancel()
        self._on_dropped(job)
        self.tables_discarded += 1

    def _expire(self, job: Job) -> None:
        # Counts a job older than the age bound as expired if unfinished.
        if not job.future.done():
            self.tables_expired += 1
            self._plan_expired += 1
        self._discard(job)

    #: See :meth:`cannot_keep_up`.
    LATE_FACTOR = 2.0
    #: See :meth:`cannot_keep_up`.
    MAX_EXPIRED = 2
    #: See :meth:`cannot_keep_up` (seconds, for static rows).
    STATIC_DEADLINE_S = 120.0

    def cannot_keep_up(self) -> bool:
        r"""Whether the CPU cannot keep up with the planned hot set."""
        if not self.static and (
                self._plan_expired >= self.MAX_EXPIRED
                and self._version - self._plan_version > self.LATE_FACTOR *
                (self._sample_age_bound + 1)):
            return True
        job = next((j for j in self._jobs if not j.future.done()), None)
        if job is None or not job.chunks:
            return False
        if self.static:
            seconds = time.perf_counter() - job.launched
            return self._projected(job, seconds) > self.STATIC_DEADLINE_S
        age = self._version - job.version
        if age < 2:
            return False
        return self._projected(job, age) > self.LATE_FACTOR * (
            self._sample_age_bound + 1)

    def _projected(self, job: Any, spent: float) -> float:
        # The whole time a `job` is projected to take, `spent` so far.
        total = len(job.chunks)
        done = total - job.remaining
        return spent * total / done if done > 0 else spent * -(
            -total // self.num_threads)

    def _plan_changed(self) -> None:
        # Counts expired tables of the new plan from now on.
        self._plan_expired = 0
        self._plan_version = self._version

    def _wait(self, job: Job, timer=None) -> EmbeddingTable:
        start = time.perf_counter()
        try:
            return job.future.result()
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

    def pause(self) -> None:
        r"""Cancels queued work and stops the worker threads."""
        for job in self._jobs:
            self._discard(job)
        self._jobs.clear()
        if self._pool is not None:
            self._pool.close(wait=True)
            self._pool = None

    def close(self) -> None:
        r"""Like :meth:`pause`."""
        self.pause()

    def run_item(self, job: Job, lo: int, hi: int) -> None:
        r"""Computes the rows :obj:`lo:hi` of :obj:`job`."""
        if job.cancelled.is_set():
            return
        start = time.perf_counter()
        try:
            if self.work_hook is not None:
                self.work_hook(job.cancelled)
                if job.cancelled.is_set():
                    return
            state = job.snapshot.cpu(
                lambda device: self._stream('d2h', device))
            layer = self.computer.layer_for(job.snapshot, state)
            # Drawn by item, not by thread: reproducible with a seed.
            out = self.computer.compute(
                layer, job.nodes[lo:hi],
                self.computer.item_generator(job.seq, lo))
            stream = self._stream('h2d', self.device) if self.cuda else None
            with job.lock:
                if job.buffer is None:
                    shape = (job.nodes.numel(), ) + tuple(out.shape[1:])
                    if stream is None:
                        job.buffer = torch.empty(shape, dtype=out.dtype)
                    else:
                        with torch.cuda.stream(stream):
                            job.buffer = torch.empty(shape, dtype=out.dtype,
                                                     device=self.device)
                buffer = job.buffer
            if stream is None:
                buffer[lo:hi].copy_(out)
            else:
                self.staging.copy(out, buffer[lo:hi], stream)
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

    def _finish(self, job: Job) -> None:
        if job.cancelled.is_set():
            return
        event, rows = None, job.rows
        emb = job.buffer
        if self.cuda:
            # Every item's copy is queued on the stream by now:
            stream = self._stream('h2d', self.device)
            with torch.cuda.stream(stream):
                if rows is not None:
                    rows = rows.to(self.device)
                event = torch.cuda.Event()
                event.record(stream)
        job.buffer = None
        table = EmbeddingTable(job.version, job.seq, emb, event, rows,
                               compute_s=time.perf_counter() - job.launched)
        with self._stats_lock:
            self.tables_computed += 1
            self.rows_computed += job.nodes.numel()
        with job.lock:
            if not job.future.done():
                job.future.set_result(table)
