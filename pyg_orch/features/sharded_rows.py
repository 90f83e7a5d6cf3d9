r"""A tensor's rows split across the processes of one machine."""
import threading
from typing import Any, Sequence

import torch
from torch import Tensor

from pyg_orch.parallel.peer_memory import PeerBuffers, PeerGroup

__all__ = ['ShardedRows']


class ShardedRows:
    r"""The rows of :obj:`rows` split across :obj:`peers` (row :obj:`i` on
    rank :obj:`i % S`; a collective), read like the tensor on dimension 0.
    """
    def __init__(self, rows: Tensor, peers: PeerGroup):
        if not isinstance(rows, Tensor) or rows.dim() < 1:
            raise ValueError("'rows' must be a tensor with at least one "
                             "dimension")
        mine = (tuple(rows.shape), str(rows.dtype))
        seen = peers.all_gather_object(mine)
        if any(other != mine for other in seen):
            raise ValueError(
                f"ShardedRows: every rank must pass rows of the same shape "
                f"and dtype (the ranks have {seen})")
        self.peers, self.rank = peers, peers.rank
        self.num_shards = peers.world_size
        self.shape, self.dtype = rows.shape, rows.dtype
        self.device = peers.device
        per_rank = -(-rows.size(0) // self.num_shards)
        self.buffers: PeerBuffers = peers.allocate(
            (per_rank, ) + tuple(rows.shape[1:]), rows.dtype)
        own = rows[self.rank::self.num_shards]
        self.buffers.own[:own.size(0)].copy_(own)
        if self.device.type == 'cuda':
            torch.cuda.synchronize(self.device)
        peers.barrier()  # Every rank's rows are in place.
        #: Rows read from peers' shards so far (by all threads).
        self.peer_rows = 0
        #: Rows read from this rank's own shard so far (by all threads).
        self.own_rows = 0
        self._lock = threading.Lock()
        self._thread = threading.local()

    def thread_peer_rows(self) -> int:
        r"""Rows the calling thread read from peers' shards so far."""
        return getattr(self._thread, 'peer_rows', 0)

    def new_empty(self, size: Sequence[int], device: Any = None) -> Tensor:
        return torch.empty(tuple(size), dtype=self.dtype,
                           device=self.device if device is None else device)

    def index_select(self, dim: int, index: Tensor) -> Tensor:
        r"""The rows :obj:`index`, as :meth:`torch.Tensor.index_select`."""
        if dim != 0:
            raise ValueError(f"ShardedRows.index_select reads rows "
                             f"(dim=0), got dim={dim}")
        index = index.to(self.device, torch.int64)
        if index.numel() and (int(index.min()) < 0 or
                              int(index.max()) >= self.shape[0]):
            raise IndexError(f"ShardedRows: a row index lies outside "
                             f"[0, {self.shape[0]})")
        owner = torch.remainder(index, self.num_shards)
        local = torch.div(index, self.num_shards, rounding_mode='floor')
        out = self.buffers.gather(owner, local)
        own = int((owner == self.rank).sum())
        peer = index.numel() - own
        with self._lock:
            self.own_rows += own
            self.peer_rows += peer
        self._thread.peer_rows = self.thread_peer_rows() + peer
        return out

    def __repr__(self) -> str:
        return (f'{type(self).__name__}(shape={tuple(self.shape)}, '
                f'dtype={self.dtype}, shards={self.num_shards}, '
                f'device={self.device})')
