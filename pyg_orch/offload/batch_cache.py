""":obj:`refresh='batch'`: only the hot rows mini-batches need."""
import time
from typing import Any, Optional, Tuple

import torch
from torch import Tensor

from pyg_orch.offload.replacement import BatchInfo
from pyg_orch.offload.strategy import UNBOUNDED, EmbeddingStrategy
from pyg_orch.offload.tables import (
    EmbeddingTable,
    Job,
    Snapshot,
    split_chunks,
)

_NEVER = -(2**62)  # Version of rows never computed.


class BatchEmbeddingCache(EmbeddingStrategy):
    r"""Keeps hot rows on the device, each with its weight version, and
    computes only the rows that drawn mini-batches need."""
    per_batch = True
    refresh = 'batch'
    #: Steps between two checks of whether a growing hot set may grow.
    GROW_WINDOW = 8
    #: The largest share of a window the loop may wait while the set grows.
    GROW_MAX_WAIT = 0.05

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        # (version, time, CPU seconds, wait seconds) at the window's start:
        self._grow_mark: Optional[Tuple[int, float, float, float]] = None
        # Rows for all candidates, so that the set in use may change size:
        n = self.hot.candidates.numel()
        self.row_version = torch.full((n, ), _NEVER, dtype=torch.int64)
        self.queued_version = self.row_version.clone()
        self.emb: Optional[Tensor] = None
        self._snapshot: Optional[Snapshot] = None

    @property
    def age_bound(self) -> int:
        r"""The most versions a row may be old."""
        if self.static:  # Below -_NEVER: rows never computed are stale.
            return UNBOUNDED // 2
        if self.max_sample_age is None:
            return self.max_staleness
        return min(self.max_staleness, self.max_sample_age)

    def replan(self) -> None:
        r"""The planned hot set changed; it is in use at once."""
        self.hot.use(self.hot.planned)

    def on_batch_sampled(self, pos: Tensor, version: int,
                         weights_version: Optional[int] = None) -> None:
        self.request(pos, version, weights_version)

    def request(self, pos: Tensor, version: int,
                weights_version: Optional[int] = None) -> None:
        r"""Queues the rows :obj:`pos` not fresh enough at :obj:`version`."""
        if pos.numel() == 0:
            return
        if weights_version is None:
            weights_version = version
        needed = torch.unique(pos)
        covered = torch.maximum(self.row_version[needed],
                                self.queued_version[needed])
        stale = needed[covered < version - self.age_bound]
        if stale.numel() == 0:
            return
        self.queued_version[stale] = weights_version
        chunks = split_chunks(stale.numel(), self.num_threads,
                              self.chunk_size)
        snap = self._snapshot  # One snapshot per weight version.
        if snap is None or snap.version != weights_version:
            snap = self._snapshot = Snapshot(weights_version, self.layer)
        self._launch(snap, self.hot.candidates[stale], chunks, rows=stale)

    def _on_dropped(self, job: Job) -> None:
        rows = job.rows
        self.queued_version[rows] = self.row_version[rows]

    def _apply(self, table: EmbeddingTable, rows_cpu: Tensor) -> None:
        table.wait_on_main(self.device)
        if self.emb is None:
            self.emb = torch.zeros((self.row_version.numel(), ) +
                                   tuple(table.emb.shape[1:]),
                                   dtype=table.emb.dtype, device=self.device)
        rows = table.rows if table.rows is not None else rows_cpu.to(
            self.device)
        self.emb.index_copy_(0, rows, table.emb.to(self.device))
        newer = torch.maximum(self.row_version[rows_cpu],
                              torch.full_like(rows_cpu, table.version))
        self.row_version[rows_cpu] = newer

    def rows_for(self, info: BatchInfo, version: int,
                 timer: Any = None) -> Optional[Tensor]:
        info.hot_rows()
        if info.pos_cpu is None:  # Drawn before training mode.
            info.pos_cpu = info.pos.cpu()
        return self.refresh_rows(info.pos_cpu, version, timer)

    def refresh_rows(self, pos_cpu: Tensor, version: int,
                     timer: Any = None) -> Optional[Tensor]:
        r"""Makes rows :obj:`pos_cpu` usable at :obj:`version`."""
        bound = self.age_bound
        self._raise_failures()
        if self.hot.auto:
            self._maybe_grow(version)
        # All queued rows, oldest first (letting them run on was slower).
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
            return None
        versions = self.row_version[pos_cpu]
        if int(versions.min()) < version - bound:  # Not fresh enough.
            self.request(pos_cpu, version)
            while self._jobs:
                job = self._jobs.popleft()
                self._apply(self._wait(job, timer), job.rows)
            versions = self.row_version[pos_cpu]
        ages = version - versions
        self._record_staleness(int(ages.max()), float(ages.double().mean()))
        return self.emb

    def _maybe_grow(self, version: int) -> None:
        # See the class description; called once per training step.
        now = time.perf_counter()
        with self._stats_lock:
            cpu = self.cpu_seconds
        mark = (version, now, cpu, self.wait_seconds)
        if self._grow_mark is None or version < self._grow_mark[0]:
            self._grow_mark = mark
            return
        start, then, cpu_then, wait_then = self._grow_mark
        if version - start < self.GROW_WINDOW:
            return
        self._grow_mark = mark
        span = now - then
        waited = self.wait_seconds - wait_then > self.GROW_MAX_WAIT * span
        busy = (cpu - cpu_then) / self.num_threads
        if self.hot.maybe_grow(self.hot.planned, busy, span, waited):
            self.replan()

    def pause(self) -> None:
        r"""Cancels queued rows and stops the worker threads."""
        super().pause()
        self.queued_version = self.row_version.clone()
        self._grow_mark = None  # Evaluation steps are not timed.

    def close(self) -> None:
        r"""Like :meth:`pause`, and drops every row."""
        self.pause()
        self.emb = None
        self.row_version.fill_(_NEVER)
        self.queued_version.fill_(_NEVER)
