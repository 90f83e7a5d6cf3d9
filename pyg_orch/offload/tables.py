"""What the embedding strategies share: tables, snapshots, work items."""
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional

import torch
from torch import Tensor

from pyg_orch.offload.bottom_layer import BottomLayerComputer, snapshot_state


class OffloadWorkerError(RuntimeError):
    r"""Raised in the training loop when a CPU worker failed."""


def default_super_batch_size(max_staleness: int) -> int:
    r"""The super-batch size :math:`\max(1, \lfloor (s + 1) / 2 \rfloor)` for a
    staleness bound :math:`s`."""
    return max(1, (int(max_staleness) + 1) // 2)


@dataclass
class EmbeddingTable:
    r"""Rows :obj:`emb` from the weights of :obj:`version`; :obj:`event`
    marks the end of their copy to the device."""
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


class Snapshot:
    r"""The state of a layer at one version."""
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
        r"""The state on the CPU, copied once."""
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


class PinnedStaging:
    r"""Copies work items' rows to the device through two small pinned buffers
    per thread (a table-sized one stalls CUDA calls while pinned)."""
    def __init__(self):
        self._local = threading.local()

    def copy(self, src: Tensor, dst: Tensor, stream: Any) -> None:
        r"""Copies :obj:`src` into :obj:`dst` on :obj:`stream`."""
        local = self._local
        if not hasattr(local, 'slots'):
            local.slots, local.turn = [[None, None], [None, None]], 0
        slot = local.slots[local.turn]
        local.turn ^= 1
        buf, event = slot
        if event is not None:  # The copy that used it last.
            event.synchronize()
        n = src.numel()
        if buf is None or buf.numel() < n or buf.dtype != src.dtype:
            buf = slot[0] = torch.empty(n, dtype=src.dtype, pin_memory=True)
        view = buf[:n].view(src.shape)
        view.copy_(src)
        with torch.cuda.stream(stream):
            dst.copy_(view, non_blocking=True)
            slot[1] = torch.cuda.Event()
            slot[1].record(stream)


class Job:
    r"""The rows of :obj:`nodes` from one snapshot, in chunks."""
    def __init__(self, seq: int, snapshot: Snapshot, nodes: Tensor,
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


# Feature bytes a work item gathers by default (page faults vs. GIL).
_ITEM_BYTES = 8 * 2**20


def default_chunk_size(computer: BottomLayerComputer) -> int:
    r"""Hot vertices per work item: about 8 MB of features."""
    k = computer.num_neighbors
    rows_per_vertex = 1 + (k if k >= 0 else 32)
    if computer.cpu_aggregation == 'embedding_bag':
        rows_per_vertex = 1
    size = _ITEM_BYTES // max(rows_per_vertex * computer.row_bytes, 1)
    return int(min(max(size, 256), 16384))


def split_chunks(n: int, num_threads: int, chunk_size: int) -> List[tuple]:
    r"""Splits :obj:`n` rows into work items of :obj:`chunk_size` rows."""
    if n == 0:
        return []
    size = min(chunk_size, max(-(-n // num_threads), 256))
    bounds = list(range(0, n, max(int(size), 1))) + [n]
    return [(lo, hi) for lo, hi in zip(bounds[:-1], bounds[1:])]
