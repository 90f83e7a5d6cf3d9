"""Hot-vertex embeddings computed by CPU threads from weight snapshots, handed
to the training loop under a strict staleness bound: whole tables pipelined
by super-batch (:class:`EmbeddingPipeline`), or the rows each mini-batch needs
(:class:`BatchEmbeddingCache`)."""
import collections
import threading
import time
from concurrent.futures import CancelledError, Future
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional

import torch
from torch import Tensor

from pyg_orch.offload.aggregate_split import OUTPUT
from pyg_orch.offload.bottom_layer import BottomLayerComputer, snapshot_state
from pyg_orch.offload.workers import WorkerPool

_NEVER = -(2**62)  # Version of rows never computed.


class OffloadWorkerError(RuntimeError):
    r"""Raised in the training loop when a CPU worker of
    :class:`~pyg_orch.offload.BottomLayerOffload` failed; the worker's
    exception (with its traceback) is chained as :obj:`__cause__`."""


def default_super_batch_size(max_staleness: int) -> int:
    r"""The super-batch size :math:`S = \max(1, \lfloor (s + 1) / 2
    \rfloor)` for a staleness bound :math:`s`: a table computed from the
    snapshot taken at the start of super-batch :math:`i` serves super-batch
    :math:`i + 1`, that is up to :math:`2S - 1 \le s` steps later."""
    return max(1, (int(max_staleness) + 1) // 2)


@dataclass
class EmbeddingTable:
    r"""Bottom-layer outputs of hot vertices, computed with the weights of
    version :obj:`version` (the number of optimizer steps taken before the
    snapshot).

    Args:
        version (int): The weight version used.
        seq (int): The sequence number of the table.
        emb (torch.Tensor): The outputs, on the training device (rows in the
            order of the hot set, or of :obj:`rows`).
        event (torch.cuda.Event, optional): Marks the end of the copy to the
            device.
        rows (torch.Tensor, optional): For partial tables, the positions in
            the hot set of the rows of :obj:`emb` (on the device).
        compute_s (float, optional): Seconds from queueing the table to its
            last row.
    """
    version: int
    seq: int
    emb: Tensor
    event: Optional[Any] = None
    rows: Optional[Tensor] = None
    ready_on_main: bool = False
    compute_s: Optional[float] = None

    def wait_on_main(self, device: torch.device) -> None:
        r"""Makes the current stream wait for the copy to the device."""
        if self.event is not None and not self.ready_on_main:
            stream = torch.cuda.current_stream(device)
            stream.wait_event(self.event)
            self.emb.record_stream(stream)
            if self.rows is not None:
                self.rows.record_stream(stream)
            self.ready_on_main = True


class _Snapshot:
    r"""The state of a layer at one version, cloned where it lives; copied to
    the CPU once, by the first worker that needs it."""
    def __init__(self, version: int, layer: torch.nn.Module):
        self.version = version
        self.state: Optional[Dict[str, Tensor]] = snapshot_state(layer)
        self.event = None
        cuda = [v.device for v in self.state.values() if v.is_cuda]
        if cuda:
            self.event = torch.cuda.Event()
            self.event.record(torch.cuda.current_stream(cuda[0]))
            self.device = cuda[0]
        self.cpu_state: Optional[Dict[str, Tensor]] = None
        self.lock = threading.Lock()

    def cpu(self, get_stream: Callable) -> Dict[str, Tensor]:
        with self.lock:
            if self.cpu_state is None:
                if self.event is not None:
                    stream = get_stream(self.device)
                    out = {}
                    with torch.cuda.stream(stream):
                        stream.wait_event(self.event)
                        for k, v in self.state.items():
                            cpu = torch.empty(v.shape, dtype=v.dtype,
                                              pin_memory=v.is_cuda)
                            cpu.copy_(v, non_blocking=v.is_cuda)
                            out[k] = cpu
                    stream.synchronize()
                else:
                    out = self.state
                self.cpu_state = out
                self.state = None
            return self.cpu_state


class _Job:
    r"""The embeddings of :obj:`nodes` from one snapshot, computed in chunks
    by the worker threads; :obj:`future` gets an :class:`EmbeddingTable`."""
    def __init__(self, seq: int, snapshot: _Snapshot, nodes: Tensor,
                 chunks: List[tuple], rows: Optional[Tensor] = None):
        self.seq = seq
        self.snapshot = snapshot
        self.version = snapshot.version
        self.nodes = nodes
        self.rows = rows
        self.chunks = chunks
        self.buffer: Optional[Tensor] = None
        self.remaining = len(chunks)
        self.lock = threading.Lock()
        self.cancelled = threading.Event()
        self.future: Future = Future()
        self.chunk_futures: List[Future] = []
        self.launched = time.perf_counter()

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

    def failed(self) -> bool:
        f = self.future
        return f.done() and not f.cancelled() and f.exception() is not None

    def succeeded(self) -> bool:
        f = self.future
        return f.done() and not f.cancelled() and f.exception() is None


# Feature bytes a work item gathers, by default. On 2 cores, a few MB per
# item was 1.5 to 2x faster (600-dim features) than one item of tens of MB
# per thread, whose fresh allocations each page-fault (free returns them to
# the operating system); on 16 cores it made no difference. Far smaller
# items pay Python overhead per item, under the interpreter lock that the
# training loop needs too.
_ITEM_BYTES = 8 * 2**20


def default_chunk_size(computer: BottomLayerComputer) -> int:
    r"""Hot vertices per work item by default: about 8 MB of gathered
    features (the vertices' and their sampled neighbors' rows), between
    256 and 16,384 vertices."""
    k = computer.num_neighbors
    rows_per_vertex = 1 + (k if k >= 0 else 32)
    size = _ITEM_BYTES // max(rows_per_vertex * computer.row_bytes, 1)
    return int(min(max(size, 256), 16384))


def _split(n: int, num_threads: int, chunk_size: int) -> List[tuple]:
    # At most `chunk_size` rows per item, and at least one item per thread
    # where there are enough rows (256 at least per item).
    if n == 0:
        return []
    size = min(chunk_size, max(-(-n // num_threads), 256))
    bounds = list(range(0, n, max(int(size), 1))) + [n]
    return [(lo, hi) for lo, hi in zip(bounds[:-1], bounds[1:])]


class _PipelineBase:
    def __init__(self, computer: BottomLayerComputer, layer: torch.nn.Module,
                 hot_nodes: Tensor, device: torch.device, max_staleness: int,
                 num_threads: int, chunk_size: Optional[int],
                 idle_timeout: float, intra_op_threads: int = 1):
        self.computer = computer
        self.layer = layer
        self.hot_nodes = hot_nodes.to('cpu', torch.int64)
        self.device = torch.device(device)
        if isinstance(max_staleness, bool) or int(max_staleness) < 0:
            raise ValueError(f"'max_staleness' must be >= 0 (got "
                             f"{max_staleness})")
        self.max_staleness = int(max_staleness)
        # split='aggregate': tables hold weight-free aggregations, finished
        # with the current weights on the device, so any table is usable.
        self.weight_free = computer.split != OUTPUT
        self.num_threads = int(num_threads)
        self.intra_op_threads = int(intra_op_threads)
        if chunk_size is None:
            chunk_size = default_chunk_size(computer)
        elif int(chunk_size) < 1:
            raise ValueError(f"'chunk_size' must be >= 1 (got {chunk_size})")
        self.chunk_size = int(chunk_size)
        self.idle_timeout = idle_timeout
        self.cuda = self.device.type == 'cuda'
        self.pin = self.cuda and torch.cuda.is_available()
        self._streams: Dict[Any, Any] = {}
        self._streams_lock = threading.Lock()
        self.cpu_delay = 0.0  # Test knob: seconds each work item sleeps.
        self._pool: Optional[WorkerPool] = None
        self._jobs: collections.deque = collections.deque()
        self._seq = 0
        self._stats_lock = threading.Lock()
        self.reset_stats()

    # Statistics ##############################################################

    def reset_stats(self) -> None:
        r"""Forgets the statistics gathered so far."""
        with self._stats_lock:
            self.cpu_seconds = 0.0
            self.tables_computed = 0
            self.rows_computed = 0
        self.tables_submitted = 0
        self.tables_discarded = 0
        self.wait_seconds = 0.0
        self.num_waits = 0
        self.staleness_hist: Dict[int, int] = {}
        self.max_table_age: Optional[int] = None

    def _record_staleness(self, age: int) -> None:
        # `age`: steps since the table's snapshot. Its weights' staleness
        # is that, or 0 for weight-free tables.
        self.max_table_age = age if self.max_table_age is None else max(
            self.max_table_age, age)
        staleness = 0 if self.weight_free else age
        if not 0 <= staleness <= self.max_staleness:  # pragma: no cover
            raise AssertionError(f'staleness {staleness} outside '
                                 f'[0, {self.max_staleness}]')
        self.staleness_hist[staleness] = \
            self.staleness_hist.get(staleness, 0) + 1

    def stats(self) -> Dict[str, Any]:
        r"""Counters of the pipeline (see
        :meth:`pyg_orch.offload.BottomLayerOffload.stats`)."""
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
            'wait_s': self.wait_seconds,
            'num_waits': self.num_waits,
            'cpu_compute_s': self.cpu_seconds,
            'tables_submitted': self.tables_submitted,
            'tables_computed': self.tables_computed,
            'tables_discarded': self.tables_discarded,
            'rows_computed': self.rows_computed,
        }

    @property
    def threads(self) -> list:
        r"""The worker threads alive now."""
        return [] if self._pool is None else self._pool.threads

    # Main thread #############################################################

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

    def _launch(self, snapshot: _Snapshot, nodes: Tensor, chunks: List,
                rows: Optional[Tensor] = None) -> _Job:
        job = _Job(self._seq, snapshot, nodes, chunks, rows)
        self._seq += 1
        pool = self._get_pool()
        for lo, hi in chunks:
            job.chunk_futures.append(pool.submit(self._run_chunk, job, lo,
                                                 hi))
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

    def _on_dropped(self, job: _Job) -> None:
        pass

    def _discard(self, job: _Job) -> None:
        job.cancel()
        self._on_dropped(job)
        self.tables_discarded += 1

    def _wait(self, job: _Job, timer=None) -> EmbeddingTable:
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

    # Worker threads ##########################################################

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
            state = job.snapshot.cpu(
                lambda device: self._stream('d2h', device))
            layer = self.computer.layer_for(job.snapshot, state)
            out = self.computer.compute(layer, job.nodes[lo:hi])
            with job.lock:
                if job.buffer is None:
                    job.buffer = torch.empty(
                        (job.nodes.numel(), ) + tuple(out.shape[1:]),
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
        event, rows = None, job.rows
        if self.cuda:
            stream = self._stream('h2d', self.device)
            with torch.cuda.stream(stream):
                emb = job.buffer.to(self.device, non_blocking=True)
                if rows is not None:
                    rows = rows.to(self.device)
                event = torch.cuda.Event()
                event.record(stream)
        else:
            emb = job.buffer
        job.buffer = None
        table = EmbeddingTable(job.version, job.seq, emb, event, rows,
                               compute_s=time.perf_counter() - job.launched)
        with self._stats_lock:
            self.tables_computed += 1
            self.rows_computed += job.nodes.numel()
        with job.lock:
            if not job.future.done():
                job.future.set_result(table)


class EmbeddingPipeline(_PipelineBase):
    r"""Computes tables of the embeddings of *all* hot vertices on CPU
    threads, pipelined by super-batch, and hands them to the training loop
    with a strictly bounded staleness.

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
        chunk_size (int, optional): Hot vertices per work item; see
            :func:`default_chunk_size`.
        idle_timeout (float): Seconds before an idle worker thread exits.
            (default: :obj:`2.0`)
        intra_op_threads (int): PyTorch threads of each worker thread.
            (default: :obj:`1`)
        candidates (torch.Tensor, optional): Sizes the hot set by measured
            throughput (:obj:`hot_ratio='auto'`): :obj:`hot_nodes` must be
            the first rows of :obj:`candidates` (vertices by decreasing
            access count), and the hot set grows along them while the CPU
            keeps up with room to spare; see :meth:`maybe_grow`.
        on_grow (callable, optional): Called with the new number of rows
            when a larger table becomes the one in use (before it is
            returned by :meth:`acquire`).
    """
    # hot_ratio='auto': grow when a table took at most 1 / _GROW_ROOM of the
    # time until it is needed, aiming at _GROW_TARGET of that time, by at
    # most _GROW_MAX at once.
    _GROW_ROOM = 1.6
    _GROW_TARGET = 0.7
    _GROW_MAX = 2.0

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
        intra_op_threads: int = 1,
        candidates: Optional[Tensor] = None,
        on_grow: Optional[Callable[[int], None]] = None,
    ):
        super().__init__(computer, layer, hot_nodes, device, max_staleness,
                         num_threads, chunk_size, idle_timeout,
                         intra_op_threads)
        self.super_batch_size = int(
            super_batch_size or default_super_batch_size(max_staleness))
        if self.super_batch_size < 1:
            raise ValueError(f"'super_batch_size' must be >= 1 (got "
                             f"{super_batch_size})")
        self.chunks = _split(self.hot_nodes.numel(), self.num_threads,
                             self.chunk_size)
        self._current: Optional[EmbeddingTable] = None
        self._last_submit: Optional[int] = None
        self.candidates = None
        if candidates is not None:
            self.candidates = candidates.to('cpu', torch.int64)
            n = self.hot_nodes.numel()
            if n > self.candidates.numel() or not torch.equal(
                    self.candidates[:n], self.hot_nodes):
                raise ValueError("'hot_nodes' must be the first rows of "
                                 "'candidates'")
        self.on_grow = on_grow
        self.rows_in_use = self.hot_nodes.numel()
        self._submitted_at: Optional[tuple] = None  # (version, time)
        self.step_seconds: Optional[float] = None
        self._waits_seen = 0
        self.hot_sizes: List[int] = [self.hot_nodes.numel()]

    def stats(self) -> Dict[str, Any]:
        out = super().stats()
        out['refresh'] = 'super_batch'
        out['super_batch_size'] = self.super_batch_size
        out['hot_sizes'] = list(self.hot_sizes)
        return out

    def maybe_submit(self, version: int) -> None:
        r"""Takes a snapshot and queues its table at the start of every
        super-batch (first growing the hot set, see :meth:`maybe_grow`)."""
        if not self.chunks:
            return
        if self.weight_free and any(not j.future.done() for j in self._jobs):
            return  # Any table serves: one at a time, as fast as it comes.
        last = self._last_submit
        if last is None or version - last >= self.super_batch_size:
            if last is not None:
                self.maybe_grow()
            self.submit(version)

    def maybe_grow(self) -> bool:
        r"""With :obj:`candidates`: if the newest table in use has as many
        rows as the hot set, took at most :math:`1 / 1.6` of the time
        until the next table is needed (:math:`S` training steps, timed
        between snapshots) and the loop has not waited for a table since
        the last check, grows the hot set so that a table would take about
        70% of that time (at most twice as many rows at once). Tables are
        queued with the new size from now on; the sampler is told only once
        such a table is in use (:obj:`on_grow`), so that every batch pruned
        with the larger set finds its rows. The hot set never shrinks.
        Returns whether it grew."""
        waited = self.num_waits > self._waits_seen
        self._waits_seen = self.num_waits
        table, n = self._current, self.hot_nodes.numel()
        if (self.candidates is None or waited or table is None
                or table.compute_s is None or self.step_seconds is None
                or table.emb.size(0) < n or n >= self.candidates.numel()):
            return False
        budget = self.super_batch_size * self.step_seconds
        room = budget / max(table.compute_s, 1e-9)
        if room < self._GROW_ROOM:
            return False
        factor = min(self._GROW_MAX, self._GROW_TARGET * room)
        size = min(int(n * factor), self.candidates.numel())
        if size <= n:
            return False
        self.hot_nodes = self.candidates[:size]
        self.chunks = _split(size, self.num_threads, self.chunk_size)
        self.hot_sizes.append(size)
        return True

    def submit(self, version: int) -> None:
        r"""Snapshots the layer's weights (of version :obj:`version`) and
        queues the computation of their table."""
        now = time.perf_counter()
        if self._submitted_at is not None and version > \
                self._submitted_at[0]:
            self.step_seconds = (now - self._submitted_at[1]) / (
                version - self._submitted_at[0])
        self._submitted_at = (version, now)
        self._launch(_Snapshot(version, self.layer), self.hot_nodes,
                     self.chunks)
        self._last_submit = version

    def acquire(self, version: int, timer=None) -> EmbeddingTable:
        r"""Returns a table usable at weight version :obj:`version`, waiting
        for one if needed; raises :class:`OffloadWorkerError` if a worker
        failed."""
        bound = self.max_staleness
        if self.weight_free:
            bound = 2**62  # Any table: weights are applied on the device.
        self._raise_failures()
        # Tables that could never be used again:
        while self._jobs and version - self._jobs[0].version > bound:
            self._discard(self._jobs.popleft())
        # The newest finished table supersedes everything before it:
        newest = None
        for i, job in enumerate(self._jobs):
            if job.succeeded():
                newest = i
        if newest is not None:
            for _ in range(newest):
                self._discard(self._jobs.popleft())
            self._current = self._jobs.popleft().future.result()
        current = self._current
        if current is None or version - current.version > bound:
            if not self._jobs:
                self.submit(version)
            table = self._wait(self._jobs[0], timer)
            self._jobs.popleft()
            self._current = current = table
        self._record_staleness(version - current.version)
        current.wait_on_main(self.device)
        rows = current.emb.size(0)
        if rows > self.rows_in_use:
            self.rows_in_use = rows
            if self.on_grow is not None:
                self.on_grow(rows)
        return current

    def pause(self) -> None:
        r"""Cancels queued tables and stops the worker threads (the newest
        finished table is kept; the staleness bound still applies to it)."""
        for job in self._jobs:
            if job.succeeded():
                self._current = job.future.result()
        super().pause()
        self._last_submit = None
        self._submitted_at = None

    def close(self) -> None:
        r"""Like :meth:`pause`, and drops every table."""
        self.pause()
        self._current = None


class BatchEmbeddingCache(_PipelineBase):
    r"""Keeps the embeddings of hot vertices on the device, row by row, each
    with the weight version it was computed with, and computes on CPU
    threads only the rows that mini-batches need.

    When a mini-batch is drawn, :meth:`request` queues the computation of
    its hot rows that are neither fresh enough nor already queued, with a
    snapshot of the current weights; the workers compute them while the
    batch goes through the training loop's forward pass until the first
    layer. :meth:`gather` then waits for the queued rows (timed), writes them
    into the cache and returns the batch's rows; a row of version :math:`v`
    is used at version :math:`t` only if :math:`t - v \le`
    :obj:`max_staleness` (else it is recomputed synchronously). With a
    bound :math:`s`, a hot vertex needed by several batches within
    :math:`s` steps is computed once.

    Args:
        computer (BottomLayerComputer): Computes the layer on the CPU.
        layer (torch.nn.Module): The layer on the training device (read for
            snapshots only).
        hot_nodes (torch.Tensor): Global ids of the hot vertices.
        device (torch.device): Where embeddings are used.
        max_staleness (int): The staleness bound, in optimizer steps.
        num_threads (int): Worker threads.
        chunk_size (int, optional): The most rows per work item; see
            :func:`default_chunk_size`. A request is split into at least
            :obj:`num_threads` items where it has enough rows.
        idle_timeout (float): Seconds before an idle worker thread exits.
            (default: :obj:`2.0`)
        intra_op_threads (int): PyTorch threads of each worker thread.
            (default: :obj:`1`)
    """
    def __init__(
        self,
        computer: BottomLayerComputer,
        layer: torch.nn.Module,
        hot_nodes: Tensor,
        device: torch.device,
        max_staleness: int,
        num_threads: int,
        chunk_size: Optional[int] = None,
        idle_timeout: float = 2.0,
        intra_op_threads: int = 1,
    ):
        super().__init__(computer, layer, hot_nodes, device, max_staleness,
                         num_threads, chunk_size, idle_timeout,
                         intra_op_threads)
        n = self.hot_nodes.numel()
        self.row_version = torch.full((n, ), _NEVER, dtype=torch.int64)
        self.queued_version = self.row_version.clone()
        self.emb: Optional[Tensor] = None
        self._snapshot: Optional[_Snapshot] = None

    def stats(self) -> Dict[str, Any]:
        out = super().stats()
        out['refresh'] = 'batch'
        out['super_batch_size'] = 1
        return out

    def _snapshot_at(self, version: int) -> _Snapshot:
        snap = self._snapshot
        if snap is None or snap.version != version:
            snap = self._snapshot = _Snapshot(version, self.layer)
        return snap

    def request(self, pos: Tensor, version: int,
                weights_version: Optional[int] = None) -> None:
        r"""Queues the rows :obj:`pos` (positions in the hot set, CPU) that
        will not be fresh enough at version :obj:`version`, to be computed
        with the current weights, of version :obj:`weights_version`
        (:obj:`version` if not given; a batch requested ahead of its use
        has an older one)."""
        if pos.numel() == 0:
            return
        if weights_version is None:
            weights_version = version
        needed = torch.unique(pos)
        covered = torch.maximum(self.row_version[needed],
                                self.queued_version[needed])
        stale = needed[covered < version - self.max_staleness]
        if stale.numel() == 0:
            return
        self.queued_version[stale] = weights_version
        chunks = _split(stale.numel(), self.num_threads, self.chunk_size)
        self._launch(self._snapshot_at(weights_version),
                     self.hot_nodes[stale], chunks, rows=stale)

    def _on_dropped(self, job: _Job) -> None:
        rows = job.rows
        self.queued_version[rows] = self.row_version[rows]

    def _apply(self, table: EmbeddingTable, rows_cpu: Tensor) -> None:
        table.wait_on_main(self.device)
        if self.emb is None:
            self.emb = torch.zeros((self.hot_nodes.numel(), ) +
                                   tuple(table.emb.shape[1:]),
                                   dtype=table.emb.dtype, device=self.device)
        rows = table.rows if table.rows is not None else rows_cpu.to(
            self.device)
        self.emb.index_copy_(0, rows, table.emb.to(self.device))
        newer = torch.maximum(self.row_version[rows_cpu],
                              torch.full_like(rows_cpu, table.version))
        self.row_version[rows_cpu] = newer

    def gather(self, pos: Tensor, pos_cpu: Tensor, version: int,
               timer=None) -> Tensor:
        r"""The embeddings of the rows :obj:`pos` (on the device; the same
        positions on the CPU as :obj:`pos_cpu`) usable at version
        :obj:`version`."""
        bound = self.max_staleness
        self._raise_failures()
        # Queued rows, oldest first. All of them, also those requested for
        # later batches: letting them run on while the loop trains was 2.6x
        # slower on an H100 (worker threads contend with the loop for the
        # interpreter lock; see benchmarks/bench_offload.py).
        while self._jobs:
            job = self._jobs.popleft()
            if job.succeeded():
                table = job.future.result()
            else:
                self._jobs.appendleft(job)
                table = self._wait(job, timer)
                self._jobs.popleft()
            self._apply(table, job.rows)
        if pos_cpu.numel() == 0:
            return self.emb.new_empty((0, ) + tuple(self.emb.shape[1:])) \
                if self.emb is not None else torch.empty(0)
        versions = self.row_version[pos_cpu]
        if int(versions.min()) < version - bound:  # Not fresh enough.
            self.request(pos_cpu, version)
            while self._jobs:
                job = self._jobs.popleft()
                self._apply(self._wait(job, timer), job.rows)
            versions = self.row_version[pos_cpu]
        self._record_staleness(version - int(versions.min()))
        return self.emb.index_select(0, pos)

    def pause(self) -> None:
        r"""Cancels queued rows and stops the worker threads (the cached
        rows are kept, with their versions)."""
        super().pause()
        self.queued_version = self.row_version.clone()

    def close(self) -> None:
        r"""Like :meth:`pause`, and drops every row."""
        self.pause()
        self.emb = None
        self.row_version.fill_(_NEVER)
        self.queued_version.fill_(_NEVER)
