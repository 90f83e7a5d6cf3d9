"""Pipelined prefetch: upcoming batches are sampled and gathered by a
background thread on its own CUDA stream while the current batch trains."""
import contextlib
import dataclasses
import functools
import queue
import threading
from typing import Any, Callable, Iterator, Optional

import torch

from pyg_orch.core.devices import with_index

_DONE = object()


class Failure:
    r"""An exception raised while preparing a batch, kept to be raised when
    the training loop asks for that batch."""
    def __init__(self, exc: BaseException):
        self.exc = exc


def hand_over(batch: Any, event, device: torch.device) -> Any:
    r"""Makes the consumer's stream wait for :obj:`event` and use
    :obj:`batch`'s tensors."""
    if event is not None:
        consumer = torch.cuda.current_stream(device)
        consumer.wait_event(event)
        record_stream(batch, consumer)
    return batch


def _strided_parts(t: torch.Tensor) -> tuple:
    # A sparse tensor's memory is its index and value tensors (PyTorch has
    # no `record_stream` for sparse layouts).
    if t.layout in (torch.sparse_csr, torch.sparse_bsr):
        return t.crow_indices(), t.col_indices(), t.values()
    if t.layout in (torch.sparse_csc, torch.sparse_bsc):
        return t.ccol_indices(), t.row_indices(), t.values()
    if t.layout == torch.sparse_coo:
        return t._indices(), t._values()  # Coalesced or not.
    return (t, )


def record_stream(obj: Any, stream) -> None:
    # Tensors made on the prefetch stream are used on the consumer's stream;
    # the allocator must not recycle them before that stream is done.
    if isinstance(obj, torch.Tensor):
        if obj.is_cuda:
            for part in _strided_parts(obj):
                part.record_stream(stream)
    elif obj is None or isinstance(obj, SCALAR_TYPES):
        return
    elif isinstance(obj, (list, tuple)):
        for value in obj:
            record_stream(value, stream)
    elif isinstance(obj, dict):
        for value in obj.values():
            record_stream(value, stream)
    elif hasattr(obj, 'stores'):
        for store in obj.stores:
            for value in store.values():
                record_stream(value, stream)
    elif not isinstance(obj, type):  # E.g. a `SamplerOutput`.
        for name in _dataclass_fields(type(obj)):
            record_stream(getattr(obj, name), stream)


@functools.lru_cache(maxsize=None)
def _dataclass_fields(cls: type) -> tuple:
    # The field names of a dataclass (none for other types), looked up once
    # per type: a loader walks a few objects per batch.
    if not dataclasses.is_dataclass(cls):
        return ()
    return tuple(field.name for field in dataclasses.fields(cls))


#: Batch values that hold no tensor (skipped by walks over a batch).
SCALAR_TYPES = (int, float, bool, str)


def _put(q: queue.Queue, stop: threading.Event, item) -> bool:
    while not stop.is_set():
        try:
            q.put(item, timeout=0.1)
            return True
        except queue.Full:
            continue
    return False


def _produce(iterator: Iterator, q: queue.Queue, stop: threading.Event,
             device: torch.device, stream,
             agree: Optional[Callable[[bool], bool]] = None) -> None:
    try:
        if stream is not None:
            torch.cuda.set_device(device.index or 0)
        while True:
            # With `agree`, all ranks stop at the same batch: none is left
            # inside a batch's collectives that the others never join.
            if not (agree(not stop.is_set()) if agree is not None
                    else not stop.is_set()):
                break
            with torch.cuda.stream(stream) if stream is not None else \
                    contextlib.nullcontext():
                try:
                    batch = next(iterator)
                except StopIteration:
                    break
                event = None
                if stream is not None:
                    event = torch.cuda.Event()
                    event.record(stream)
            if not _put(q, stop, (batch, event)):
                if agree is None:
                    return
                # Stopped: the next agreement tells the other ranks.
    except BaseException as e:  # Re-raised in the consumer.
        _put(q, stop, Failure(e))
        return
    _put(q, stop, _DONE)


class PrefetchIterator:
    r"""Runs :obj:`iterator` :obj:`depth` batches ahead in a thread (on a
    side CUDA stream); with :obj:`agree`, stops where
    :obj:`agree(goes_on)` says so."""
    def __init__(self, iterator: Iterator, depth: int, device: torch.device,
                 agree: Optional[Callable[[bool], bool]] = None):
        if depth < 1:
            raise ValueError(f"'prefetch' must be >= 1 (got {depth})")
        self.iterator = iterator
        self.device = device = with_index(torch.device(device))
        self.queue: queue.Queue = queue.Queue(maxsize=depth)
        self.stop = threading.Event()
        self.cuda = device.type == 'cuda'
        self.stream = torch.cuda.Stream(device) if self.cuda else None
        if self.stream is not None:
            # What the consumer queued before (e.g. filling a cache the
            # thread reads) is done before the thread's kernels run:
            self.stream.wait_stream(torch.cuda.current_stream(device))
        # The thread must not reference `self`, so that dropping the iterator
        # (e.g. breaking out of the loop) collects it and stops the thread.
        self.thread = threading.Thread(
            target=_produce, daemon=True, name='pyg_orch-prefetch',
            args=(iterator, self.queue, self.stop, device, self.stream,
                  agree))
        self.thread.start()
        self._finished = False

    def __iter__(self) -> 'PrefetchIterator':
        return self

    def __next__(self) -> Any:
        if self._finished:
            raise StopIteration
        while True:
            try:
                item = self.queue.get(timeout=0.1)
                break
            except queue.Empty:
                if not self.thread.is_alive() and self.queue.empty():
                    self._finished = True
                    raise RuntimeError('the prefetch thread died')
        if item is _DONE:
            self.close()
            raise StopIteration
        if isinstance(item, Failure):
            self.close()
            raise item.exc
        return hand_over(*item, self.device)

    def __len__(self) -> int:
        return len(self.iterator)

    def _reset(self, loader: Any, first_iter: bool = False):
        raise RuntimeError('persistent workers are not supported with '
                           'prefetch; set prefetch=0')

    def close(self) -> None:
        self._finished = True
        self.stop.set()
        if self.thread.is_alive() and \
                self.thread is not threading.current_thread():
            self.thread.join(timeout=10)
        if self.stream is not None and not self.thread.is_alive():
            # Kernels the thread queued for batches never taken (e.g. a
            # cache update) are done before the consumer's next ones:
            torch.cuda.current_stream(self.device).wait_stream(self.stream)
            self.stream = None

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass
