"""A feature cache split across the GPUs of one machine."""
import hashlib
from typing import Optional, Tuple, Union

import torch
from torch import Tensor

from pyg_orch.core.checks import check_fraction
from pyg_orch.features.tiered import TieredFeatureStore
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
    by every rank at once (their :obj:`hotness` summed).

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
        if hotness is not None:
            hotness = peers.all_reduce_sum(hotness.cpu().to(torch.float64))
        if cache_ratio is not None:  # Per GPU, as the base class counts.
            cache_ratio = check_fraction('cache_ratio', cache_ratio) / \
                peers.world_size
        super().__init__(x, peers.device, hotness=hotness,
                         gpu_memory_budget=gpu_memory_budget,
                         cache_ratio=cache_ratio,
                         gather_blocks=gather_blocks, **kwargs)

    #: A cache spread over the machine's GPUs does not grow (one GPU's
    #: spare memory would unbalance the shards).
    can_grow_cache = False

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

    def _fill_cache(self, nodes: Tensor) -> None:
        peers, C = self.peers, self.capacity
        S = peers.world_size
        self.full = False
        refill = self.shards is not None
        if self._auto_blocks and not refill:  # The base class's 'auto'.
            self._capped_blocks = self.gather_blocks
        elif self.gather_blocks != self._auto_value:
            self._auto_blocks = False  # Set by hand since: kept.
        if self._auto_blocks:
            self.gather_blocks = self._auto_value = sharded_gather_blocks(
                self._capped_blocks, nodes.numel(), self.num_nodes)
        # The i-th hottest row goes to rank i % S, slot i // S there.
        i = torch.arange(nodes.numel())
        code = (i % S) * C + i // S
        dtype = torch.int32 if S * C < 2**31 else torch.int64
        self.row_cache.fill(nodes, slots=code.to(dtype))
        mine = nodes[i % S == peers.rank]
        if refill:  # Gathers queued with the old map finish first.
            self._quiesce()
        else:
            self.shards = peers.allocate((max(C, 1), self.width),
                                         self.dtype)
        self.shards.own[:mine.numel()].copy_(
            self.host.index_select(0, mine))
        self.row_cache.rows = {self.attr_name: self.shards.own}
        self._quiesce()  # Every rank's rows are in place.

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

    def _cache_table(self) -> Tuple:
        return self.shards.pointers, self.capacity, self.peers.rank

    def _read_cache(self, slot: Tensor, out: Tensor, rows: Tensor,
                    source: Tensor) -> None:
        slot = slot.to(torch.int64)
        owner = torch.div(slot, max(self.capacity, 1), rounding_mode='floor')
        local = slot - owner * self.capacity
        out[rows] = self.shards.gather(owner, local)
        source[rows[owner != self.peers.rank]] = 3

    def describe(self) -> str:
        return (super().describe()[:-1] +
                f', shards={self.peers.world_size}, '
                f'rows_per_gpu={self.capacity})')
