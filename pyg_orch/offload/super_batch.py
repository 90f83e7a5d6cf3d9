""":obj:`refresh='super_batch'`: tables of all hot vertices."""
import time
from typing import Any, Optional

from torch import Tensor

from pyg_orch.offload.replacement import BatchInfo
from pyg_orch.offload.strategy import EmbeddingStrategy
from pyg_orch.offload.tables import (
    EmbeddingTable,
    Snapshot,
    default_super_batch_size,
    split_chunks,
)


class EmbeddingPipeline(EmbeddingStrategy):
    r"""Queues a table of *all* hot vertices every :obj:`super_batch_size`
    steps; :meth:`acquire` uses the newest one within the staleness bound."""
    refresh = 'super_batch'

    def __init__(self, *args: Any, super_batch_size: Optional[int] = None,
                 **kwargs: Any):
        super().__init__(*args, **kwargs)
        bound = self.max_staleness
        if self.max_sample_age is not None:
            bound = min(bound, self.max_sample_age)
        if self.scheduled and self.weight_free and \
                self.max_sample_age is not None:
            bound = self.max_sample_age  # Weights do not age in them.
        self.super_batch_size = int(
            super_batch_size or default_super_batch_size(bound))
        self.chunks = split_chunks(self.hot.planned, self.num_threads,
                                   self.chunk_size)
        self._current: Optional[EmbeddingTable] = None
        self._last_submit: Optional[int] = None
        self._submitted_at: Optional[tuple] = None  # (version, time)
        self.step_seconds: Optional[float] = None
        self._waits_seen = 0

    @property
    def lag(self) -> int:
        r"""Steps between a scheduled table's queueing and its use."""
        size = self.super_batch_size
        return max(0, min(size, self.age_bound - size + 1))

    def on_forward(self, version: int) -> None:
        self.maybe_submit(version)

    def rows_for(self, info: Optional[BatchInfo], version: int,
                 timer: Any = None) -> Optional[Tensor]:
        min_rows = 0 if info is None or info.num_rows is None else \
            info.num_rows
        table = self.acquire(version, timer, min_rows)
        return None if table is None else table.emb

    def replan(self) -> None:
        r"""The planned hot set changed."""
        self.chunks = split_chunks(self.hot.planned, self.num_threads,
                                   self.chunk_size)
        self._last_submit = None
        self._plan_changed()

    def maybe_submit(self, version: int) -> None:
        r"""Queues a table at the start of a super-batch."""
        self._version = version
        if not self.chunks:
            return
        if self.weight_free and self.pending > 0 and not self.scheduled:
            return  # Any table serves: one at a time, as fast as it comes.
        last = self._last_submit
        if last is None or version - last >= self.super_batch_size:
            if last is not None:
                self._maybe_grow()
            if self.static and self._covers_plan():
                self._mark(version)  # Its rows never age.
                return
            self.submit(version)

    def _covers_plan(self) -> bool:
        # Whether a current or finished table holds the whole planned set.
        planned = self.hot.planned
        if self._current is not None and \
                self._current.emb.size(0) >= planned:
            return True
        return any(job.succeeded() and job.nodes.numel() >= planned
                   for job in self._jobs)

    def _maybe_grow(self) -> None:
        waited = self.num_waits > self._waits_seen
        self._waits_seen = self.num_waits
        table = self._current
        if table is None or self.step_seconds is None:
            return
        if self.hot.maybe_grow(table.emb.size(0), table.compute_s,
                               self.super_batch_size * self.step_seconds,
                               waited):
            self.chunks = split_chunks(self.hot.planned, self.num_threads,
                                       self.chunk_size)

    def submit(self, version: int) -> None:
        r"""Snapshots the weights and queues their table."""
        self._mark(version)
        self._launch(Snapshot(version, self.layer), self.hot.planned_nodes,
                     self.chunks)

    def _mark(self, version: int) -> None:
        # A super-batch starts at `version`: times the steps since the last.
        now = time.perf_counter()
        if self._submitted_at is not None and version > \
                self._submitted_at[0]:
            self.step_seconds = (now - self._submitted_at[1]) / (
                version - self._submitted_at[0])
        self._submitted_at = (version, now)
        self._last_submit = version

    def acquire(self, version: int, timer=None,
                min_rows: int = 0) -> Optional[EmbeddingTable]:
        r"""A table usable at :obj:`version` with :obj:`min_rows` rows."""
        bound = self.age_bound
        self._raise_failures()
        if self.scheduled and (self.hot.size > 0 or min_rows > 0):
            # (With nothing pruned yet, a table is taken when it comes.)
            return self._acquire_scheduled(version, timer, min_rows)
        # Tables that could never be used again:
        while self._jobs and version - self._jobs[0].version > bound:
            self._expire(self._jobs.popleft())
        previous = self._current
        # The newest finished table supersedes everything before it:
        newest = None
        for i, job in enumerate(self._jobs):
            if job.succeeded():
                newest = i
        if newest is not None:
            for _ in range(newest):
                self._discard(self._jobs.popleft())
            self._current = self._jobs.popleft().future.result()
        table = self._current
        if not self._usable(table, version, min_rows):
            if self._usable(previous, version, min_rows):
                table = previous  # For this batch only.
            elif self.hot.size == 0 and min_rows == 0:
                return None  # Nothing to replace yet: no waiting.
            else:
                table = self._current = self._wait_for(version, min_rows,
                                                       timer)
        if table.emb.size(0) < min_rows:  # pragma: no cover
            raise AssertionError(f'a table of {table.emb.size(0)} rows for '
                                 f'a slot map of {min_rows}')
        return self._use(table, version)

    def _use(self, table: EmbeddingTable, version: int) -> EmbeddingTable:
        self._record_staleness(version - table.version)
        table.wait_on_main(self.device)
        if table is self._current:
            # Batches may be pruned with all rows of this table from now on:
            self.hot.use(table.emb.size(0))
        return table

    def _acquire_scheduled(self, version: int, timer=None,
                           min_rows: int = 0) -> Optional[EmbeddingTable]:
        # :meth:`acquire` by step (see `lag`).
        due = version - self.lag
        index = None
        for i, job in enumerate(self._jobs):
            if job.version <= due:
                index = i
        if index is None and self._current is None and self._jobs:
            index = 0  # The first table: waited for.
        if index is not None:
            for _ in range(index):
                self._discard(self._jobs.popleft())
            job = self._jobs[0]
            self._current = job.future.result() if job.succeeded() else \
                self._wait(job, timer)
            self._jobs.popleft()
        table = self._current
        if not self._usable(table, version, min_rows):
            table = self._current = self._wait_for(version, min_rows, timer)
        return self._use(table, version)

    def _usable(self, table: Optional[EmbeddingTable], version: int,
                min_rows: int) -> bool:
        return table is not None and version - table.version <= \
            self.age_bound and table.emb.size(0) >= min_rows

    def _wait_for(self, version: int, min_rows: int,
                  timer=None) -> EmbeddingTable:
        # Waits for the oldest queued table of `min_rows` rows, queued if none.
        index = next((i for i, job in enumerate(self._jobs)
                      if job.nodes.numel() >= min_rows), None)
        if index is None:
            if self.hot.planned >= min_rows:
                self.submit(version)
            else:
                self._launch(Snapshot(version, self.layer),
                             self.hot.candidates[:min_rows],
                             split_chunks(min_rows, self.num_threads,
                                          self.chunk_size))
            index = len(self._jobs) - 1
        for _ in range(index):
            self._discard(self._jobs.popleft())
        table = self._wait(self._jobs[0], timer)
        self._jobs.popleft()
        return table

    def pause(self) -> None:
        r"""Cancels queued tables and stops the workers."""
        for job in self._jobs:
            if job.succeeded() and not self.scheduled:
                self._current = job.future.result()
        super().pause()
        self._last_submit = None
        self._submitted_at = None

    def close(self) -> None:
        r"""Like :meth:`pause`, and drops every table."""
        self.pause()
        self._current = None
