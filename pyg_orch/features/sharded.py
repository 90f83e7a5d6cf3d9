"""A feature cache split across the GPUs of one machine."""
import hashlib
from typing import Optional, Tuple, Union

import torch
from torch import Tensor

from pyg_orch.core.checks import check_fraction, check_int
from pyg_orch.features.tiered import TieredFeatureStore, copy_rows
from pyg_orch.parallel.peer_memory import PeerBuffers, PeerGroup


def sharded_gather_blocks(capped: Optional[int], num_cached: int,
                          num_nodes: int) -> Optional[int]:
    r"""The gather grid's cap of a sharded cache under :obj:`'auto'`: none
    while the GPUs hold all :obj:`num_nodes` rows, else :obj:`capped`."""
    return None if num_cached >= num_nodes else capped


class ShardedFeatureStore(TieredFeatureStore):
    r"""A :class:`~pyg_orch.gpu.TieredFeatureStore` whose cache is split
    across the ranks of a :class:`~pyg_orch.multigpu.PeerGroup` (hottest
    rows dealt round-robin, the others in shared pinned host memory); built
    by every rank at once (their :obj:`hotness` summed). :meth:`grow_cache`
    adds copies of further rows to one GPU (read there instead of from a
    peer or from host memory).

    Args:
        x (torch.Tensor): The features on the CPU (local rank 0's copied
            to shared memory, unless every rank's is pinned).
        peers (PeerGroup): The machine's processes.
        hotness (torch.Tensor, optional): This rank's score per node (e.g.
            access counts from pre-sampling).
        gpu_memory_budget (int or float or str, optional): Bytes of cache
            per GPU (or a fraction of free memory, or :obj:`'auto'`).
        cache_ratio (float, optional): Cache this fraction of all rows on
            the machine (capped by the budgets).
        gather_blocks (int or str, optional): Thread blocks of the gather
            kernel: :obj:`'auto'` (no cap while the GPUs hold every row,
            else the one-GPU store's cap), an integer, or :obj:`None`.
            (default: :obj:`'auto'`)
        **kwargs: Further arguments of
            :class:`~pyg_orch.gpu.TieredFeatureStore`.
    """
    def __init__(self, x: Tensor, peers: PeerGroup,
                 hotness: Optional[Tensor] = None,
                 gpu_memory_budget: Union[None, int, float, str] = 'auto',
                 cache_ratio: Optional[float] = None,
                 gather_blocks: Union[None, int, str] = 'auto', **kwargs):
        self.peers = peers
        self._auto_blocks = gather_blocks == 'auto'
        self._capped_blocks: Optional[int] = None
        self._auto_value: Optional[int] = None  # What 'auto' chose last.
        self.shards: Optional[PeerBuffers] = None  # Allocated by the fill.
        #: The machine cache's rows, hottest first (the i-th on rank i % S).
        self._shard_nodes = torch.empty(0, dtype=torch.int64)
        #: This GPU's copies of rows it does not hold in its shard.
        self._copy_nodes = torch.empty(0, dtype=torch.int64)
        self._copies: Optional[Tensor] = None
        self._table: Optional[Tensor] = None
        if hotness is not None:
            hotness = peers.all_reduce_sum(hotness.cpu().to(torch.float64))
        if cache_ratio is not None:  # Per GPU, as the base class counts.
            cache_ratio = check_fraction('cache_ratio', cache_ratio) / \
                peers.world_size
        super().__init__(x, peers.device, hotness=hotness,
                         gpu_memory_budget=gpu_memory_budget,
                         cache_ratio=cache_ratio,
                         gather_blocks=gather_blocks, **kwargs)

    @property
    def _num_shards(self) -> int:
        return self.peers.world_size

    def _host_rows(self, x: Tensor) -> Tensor:
        # Rows every rank holds pinned already are read in place.
        pinned = self.peers.device.type == 'cuda' and not x.is_cuda \
            and x.is_pinned()
        if all(self.peers.all_gather_object(pinned)):
            return x
        return self.peers.share_host(x if self.peers.rank == 0 else None,
                                     x.shape, x.dtype)

    def _cached_order(self, order: Tensor, num_cached: int) -> Tensor:
        # The same count per GPU on every rank (the smallest budget).
        per_rank = min(self.peers.all_gather_object(num_cached))
        self.capacity = int(per_rank)
        return order[:self.capacity * self.peers.world_size]

    @property
    def _stride(self) -> int:
        # Slot codes: owner * stride + row.
        return max(self.capacity, 1)

    def _fill_cache(self, nodes: Tensor) -> None:
        peers, C = self.peers, self.capacity
        self.full = False
        refill = self.shards is not None
        if self._auto_blocks and not refill:  # The base class's 'auto'.
            self._capped_blocks = self.gather_blocks
        else:
            self._keep_hand_set_blocks()
        self._shard_nodes = nodes
        mine = self._own_nodes()
        if refill:  # Gathers queued with the old map finish first.
            self._quiesce()
        else:
            self.shards = peers.allocate((max(C, 1), self.width),
                                         self.dtype)
        # In chunks through pinned staging: no pageable copy of the shard.
        copy_rows(self.host, mine, self.shards.own[:mine.numel()],
                  self.FILL_CHUNK_ROWS)
        self._map()
        self._quiesce()  # Every rank's rows are in place.

    def _keep_hand_set_blocks(self) -> None:
        if self.gather_blocks != self._auto_value:
            self._auto_blocks = False  # Set by hand since 'auto': kept.

    def _own_nodes(self) -> Tensor:
        i = torch.arange(self._shard_nodes.numel())
        return self._shard_nodes[i % self.peers.world_size == self.peers.rank]

    def _map(self) -> None:
        # This rank's slot map: the i-th hottest row on rank i % S, slot
        # i // S there; this GPU's copies over them.
        S, stride = self.peers.world_size, self._stride
        nodes = self._shard_nodes
        i = torch.arange(nodes.numel())
        code = (i % S) * stride + i // S
        copies = self._copy_nodes
        if copies.numel() > 0:
            copied = torch.zeros(self.num_nodes, dtype=torch.bool)
            copied[copies] = True
            keep = ~copied[nodes]
            nodes = torch.cat([nodes[keep], copies])
            code = torch.cat([code[keep], S * stride + torch.arange(
                copies.numel())])
        top = S * stride + copies.numel()
        dtype = torch.int32 if top < 2**31 else torch.int64
        self.row_cache.fill(nodes, slots=code.to(dtype))
        self.row_cache.rows = {self.attr_name: self.shards.own}
        copy_ptr = (self._copies if self._copies is not None else
                    self.shards.own).data_ptr()
        self._table = torch.cat([
            self.shards.pointers,
            torch.tensor([copy_ptr], dtype=torch.int64,
                         device=self.shards.pointers.device)])
        if self._auto_blocks:
            self.gather_blocks = self._auto_value = sharded_gather_blocks(
                self._capped_blocks, nodes.numel(), self.num_nodes)

    def _quiesce(self) -> None:
        if self.device.type == 'cuda':
            torch.cuda.synchronize(self.device)
        self.peers.barrier()

    def _max_cached_rows(self) -> int:
        return self.capacity * self.peers.world_size

    def set_cached_nodes(self, nodes: Tensor) -> None:
        r"""Caches the rows :obj:`nodes` on the machine's GPUs; a
        collective, every rank with the same :obj:`nodes`."""
        nodes = torch.as_tensor(nodes).view(-1).cpu().to(torch.int64)
        mine = (nodes.numel(),
                hashlib.sha1(nodes.numpy().tobytes()).hexdigest())
        seen = self.peers.all_gather_object(mine)
        if any(other != mine for other in seen):
            raise ValueError(
                f"ShardedFeatureStore.set_cached_nodes: every rank must "
                f"pass the same 'nodes' (rank {self.peers.rank} of "
                f"{self.peers.world_size} got {nodes.numel()} nodes; the "
                f"ranks' counts are {[n for n, _ in seen]})")
        super().set_cached_nodes(nodes)

    @property
    def num_local(self) -> int:
        r"""The rows in this GPU's memory: its shard and its copies."""
        return self._own_nodes().numel() + self._copy_nodes.numel()

    def grow_cache(self, num_bytes: int) -> int:
        r"""Copies up to :obj:`num_bytes` of rows to this GPU, the hottest it
        does not hold first (rows of peers' shards, then rows cached
        nowhere), and returns the rows added. Not a collective: each rank
        grows by its own GPU's room. Where the rows can not be allocated,
        the copies stay as they were and the
        :class:`torch.OutOfMemoryError` is raised."""
        check_int('num_bytes', num_bytes, 0)
        row_bytes = max(self.width * self.host.element_size(), 1)
        with self._lock:
            fresh = self._hottest_not_in(
                torch.cat([self._own_nodes(), self._copy_nodes]),
                int(num_bytes) // row_bytes)
            if fresh.numel() == 0:
                return 0
            self._keep_hand_set_blocks()
            old = self._copy_nodes.numel()
            rows = torch.empty(old + fresh.numel(), self.width,
                               dtype=self.dtype, device=self.device)
            if self._copies is not None:
                rows[:old].copy_(self._copies)
            copy_rows(self.host, fresh, rows[old:], self.FILL_CHUNK_ROWS)
            if self.device.type == 'cuda':
                # Gathers queued on other streams read the old copies first.
                torch.cuda.synchronize(self.device)
            self._copies = rows
            self._copy_nodes = torch.cat([self._copy_nodes, fresh])
            self._map()
        return fresh.numel()

    def gpu_bytes(self) -> int:
        copies = 0 if self._copies is None else \
            self._copies.numel() * self._copies.element_size()
        return super().gpu_bytes() + copies

    def _cache_table(self) -> Tuple:
        return self._table, self._stride, self.peers.rank

    def _read_cache(self, slot: Tensor, out: Tensor, rows: Tensor,
                    source: Tensor) -> None:
        S, stride = self.peers.world_size, self._stride
        slot = slot.to(torch.int64)
        owner = torch.div(slot, stride, rounding_mode='floor').clamp_(max=S)
        local = slot - owner * stride
        copy = owner == S
        at = copy.nonzero().view(-1)
        if at.numel() > 0:
            out[rows[at]] = self._copies.index_select(0, local[at])
        at = (~copy).nonzero().view(-1)
        out[rows[at]] = self.shards.gather(owner[at], local[at])
        source[rows[(owner != self.peers.rank) & ~copy]] = 3

    def describe(self) -> str:
        return (super().describe()[:-1] +
                f', shards={self.peers.world_size}, '
                f'rows_per_gpu={self.capacity}, '
                f'copies={self._copy_nodes.numel()})')
