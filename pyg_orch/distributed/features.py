r"""Rows of node attributes (features, labels) of vertices owned by other
parts, fetched with the same collective exchange as the sampler, with a
per-machine static cache of the remote rows read most often (counted by
pre-sampling), so that repeated remote reads are served locally."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, Iterable, Optional, Union

import torch
from torch import Tensor

from pyg_orch.distributed.collective import exchange, group_rank, group_size

__all__ = ['DistributedFeatureGather', 'GatherStats']


@dataclass
class GatherStats:
    r"""Where the rows of the last :meth:`DistributedFeatureGather.gather`
    call came from, on this rank.

    Attributes:
        local_rows (int): Rows of vertices this part owns.
        cached_rows (int): Rows of remote vertices served by the cache.
        remote_rows (int): Rows fetched from other parts.
        remote_bytes (int): Bytes of the rows fetched from other parts.
        cached_bytes (int): Bytes of the rows served by the cache.
        served_rows (int): Rows this part sent to other parts.
        local_edge_rows (int): Edge attribute rows of in-edges of this
            part's vertices (:meth:`DistributedFeatureGather.gather_edges`).
        remote_edge_rows (int): Edge attribute rows fetched from other
            parts.
    """
    local_rows: int = 0
    cached_rows: int = 0
    remote_rows: int = 0
    remote_bytes: int = 0
    cached_bytes: int = 0
    served_rows: int = 0
    local_edge_rows: int = 0
    remote_edge_rows: int = 0

    def as_dict(self) -> Dict[str, int]:
        return dict(vars(self))


class DistributedFeatureGather:
    r"""Gathers rows of the node attributes :obj:`keys` (default
    :obj:`'x'` and, where present, :obj:`'y'`) for any global vertex ids:
    rows of owned vertices from this part, rows of cached remote vertices
    from the cache, the others from their owners by
    :func:`~pyg_orch.distributed.collective.exchange`.

    :meth:`gather` and :meth:`build_cache` are **collectives**: every rank
    calls them, in the same order (with its own ids, possibly none).

    With :obj:`policy='static'` (default), the cache is filled once:
    :meth:`build_cache` takes access counts of the global vertices (e.g.
    :meth:`count_accesses` over pre-sampled batches) and keeps the rows of
    the :obj:`cache_size` remote vertices counted most often. With
    :obj:`policy='lru'`, every row fetched from another part is kept, the
    least recently read rows evicted beyond :obj:`cache_size` rows
    (:meth:`build_cache` may still warm it).

    Args:
        partition (GraphPartition): This rank's part (homogeneous).
        keys (Iterable[str], optional): The node attributes to gather.
        group (ProcessGroup, optional): The process group (rank :obj:`k`
            holds part :obj:`k`).
        policy (str): :obj:`'static'` or :obj:`'lru'`.
        edge_keys (Iterable[str], optional): The edge attributes that
            :meth:`gather_edges` gathers (default: all of the part's).
        cache_size (int): The capacity of the :obj:`'lru'` cache in rows.
        device (torch.device or str, optional): Where the gathered rows
            and the cache live (default: the CPU). Rows fetched from other
            parts come straight there from the exchange (under NCCL, without
            a trip through host memory); the part's own rows are read from
            its (memory-mapped) files and copied.
    """
    def __init__(self, partition, keys: Optional[Iterable[str]] = None,
                 group: Optional[Any] = None, policy: str = 'static',
                 cache_size: int = 0,
                 edge_keys: Optional[Iterable[str]] = None,
                 device: Optional[Union[str, torch.device]] = None):
        if policy not in ('static', 'lru'):
            raise ValueError(f"'policy' must be 'static' or 'lru' "
                             f"(got {policy!r})")
        if isinstance(cache_size, bool) or not isinstance(cache_size, int) \
                or cache_size < 0:
            raise ValueError(f"'cache_size' must be a non-negative integer "
                             f"(got {cache_size!r})")
        if getattr(partition, 'is_hetero', False):
            raise NotImplementedError(
                'DistributedFeatureGather: heterogeneous partitions are not '
                'supported yet (homogeneous graphs only)')
        attrs = partition.node_attrs
        if keys is None:
            keys = [k for k in ('x', 'y') if k in attrs]
        keys = list(keys)
        for k in keys:
            if k not in attrs:
                raise ValueError(f'the partition has no node attribute '
                                 f'{k!r} (has {sorted(attrs)})')
        if group_size(group) != partition.num_parts \
                or group_rank(group) != partition.part:
            raise ValueError('rank k of the process group must hold part k '
                             'of a graph with one part per rank')
        edge_keys = list(partition.edge_attrs if edge_keys is None
                         else edge_keys)
        for k in edge_keys:
            if k not in partition.edge_attrs:
                raise ValueError(f'the partition has no edge attribute '
                                 f'{k!r} (has {sorted(partition.edge_attrs)})')
        self.edge_keys = edge_keys
        self._eid_sorted: Optional[Tensor] = None
        self.partition = partition
        self.keys = keys
        self.group = group
        self.rank = partition.part
        self.world_size = partition.num_parts
        self.num_nodes = int(partition.node_part.numel())
        # Global id -> cache slot (-1: not cached).
        self.cache_slot = torch.full((self.num_nodes, ), -1,
                                     dtype=torch.int64)
        self.policy = policy
        self.device = torch.device('cpu') if device is None else \
            torch.device(device)
        self.capacity = cache_size if policy == 'lru' else 0
        self.cache: Dict[str, Tensor] = {
            k: attrs[k].new_empty((self.capacity, ) + tuple(
                attrs[k].shape[1:]), device=self.device) for k in keys}
        # LRU bookkeeping: the global id in every slot (-1: free) and the
        # step it was last read.
        self.slot_id = torch.full((self.capacity, ), -1, dtype=torch.int64)
        self.last_used = torch.full((self.capacity, ), -1,
                                    dtype=torch.int64)
        self._step = 0
        self.stats = GatherStats()

    # Helpers ################################################################
    def _rows(self, key: str, local: Tensor) -> Tensor:
        return self.partition.node_attrs[key].index_select(0, local)

    def _dev(self, t: Tensor) -> Tensor:
        return t.to(self.device, non_blocking=True)

    def _row_bytes(self) -> int:
        total = 0
        for k in self.keys:
            t = self.partition.node_attrs[k]
            total += t[:1].numel() * t.element_size() if t.dim() > 1 \
                else t.element_size()
        return total

    def _fetch(self, ids: Tensor) -> Dict[str, Tensor]:
        r"""Rows of :obj:`ids` (none owned by this part) from their owners:
        a collective."""
        owner = self.partition.node_part[ids].to(torch.int64)
        order = torch.sort(owner, stable=True).indices
        per_rank = torch.bincount(owner, minlength=self.world_size).tolist()
        index = list(torch.split(order, per_rank))
        requests = exchange([ids[i] for i in index], self.group)
        self.stats.served_rows += sum(int(r.numel()) for i, r in
                                      enumerate(requests) if i != self.rank)
        out = {}
        dest = self._dev(order)
        for key in self.keys:
            replies = [self._rows(key, self.partition.local_id[r])
                       for r in requests]
            answers = exchange(replies, self.group, out_device=self.device)
            ref = self.partition.node_attrs[key]
            rows = ref.new_empty((ids.numel(), ) + tuple(ref.shape[1:]),
                                 device=self.device)
            rows[dest] = torch.cat(answers)  # Answers in `order`.
            out[key] = rows
        return out

    # API ####################################################################
    def gather(self, n_id) -> Dict[str, Tensor]:
        r"""The rows of :obj:`n_id` (global ids) of every key, in the order
        of :obj:`n_id`; a collective. :attr:`stats` then says where they
        came from."""
        n_id = torch.as_tensor(n_id, dtype=torch.int64)
        self.stats = GatherStats()
        owner = self.partition.node_part[n_id].to(torch.int64)
        is_local = owner == self.rank
        slot = self.cache_slot[n_id]
        is_cached = ~is_local & (slot >= 0)
        is_remote = ~is_local & ~is_cached
        local_pos = is_local.nonzero().view(-1)
        cached_pos = is_cached.nonzero().view(-1)
        remote_pos = is_remote.nonzero().view(-1)
        fetched = self._fetch(n_id[remote_pos])
        out = {}
        local_dst, cached_dst, remote_dst = (self._dev(p) for p in (
            local_pos, cached_pos, remote_pos))
        cached_slot = self._dev(slot[cached_pos])
        for key in self.keys:
            ref = self.partition.node_attrs[key]
            rows = ref.new_empty((n_id.numel(), ) + tuple(ref.shape[1:]),
                                 device=self.device)
            rows[local_dst] = self._dev(self._rows(
                key, self.partition.local_id[n_id[local_pos]]))
            rows[cached_dst] = self.cache[key][cached_slot]
            rows[remote_dst] = fetched[key]
            out[key] = rows
        row_bytes = self._row_bytes()
        self.stats.local_rows = int(local_pos.numel())
        self.stats.cached_rows = int(cached_pos.numel())
        self.stats.remote_rows = int(remote_pos.numel())
        self.stats.remote_bytes = self.stats.remote_rows * row_bytes
        self.stats.cached_bytes = self.stats.cached_rows * row_bytes
        if self.policy == 'lru' and self.capacity:
            self._step += 1
            self.last_used[slot[cached_pos]] = self._step
            self._admit(n_id[remote_pos], fetched)
        return out

    def _admit(self, ids: Tensor, rows: Dict[str, Tensor]) -> None:
        r"""LRU: keeps the rows of :obj:`ids` just fetched, evicting the
        least recently read (free slots first)."""
        if ids.numel() == 0:
            return
        uniq, inverse = torch.unique(ids, return_inverse=True)
        first = torch.full((uniq.numel(), ), ids.numel(), dtype=torch.int64)
        first.scatter_reduce_(0, inverse, torch.arange(ids.numel()), 'amin')
        m = min(uniq.numel(), self.capacity)
        uniq, first = uniq[:m], first[:m]
        victims = torch.sort(self.last_used, stable=True).indices[:m]
        old = self.slot_id[victims]
        self.cache_slot[old[old >= 0]] = -1
        self.slot_id[victims] = uniq
        self.cache_slot[uniq] = victims
        self.last_used[victims] = self._step
        victims, first = self._dev(victims), self._dev(first)
        for key in self.keys:
            self.cache[key][victims] = rows[key][first]

    def gather_edges(self, e_id, dst) -> Dict[str, Tensor]:
        r"""The rows of the edge attributes :obj:`edge_keys` of the edges
        :obj:`e_id` (global edge ids) whose destinations are :obj:`dst`
        (global vertex ids; an edge is stored with the part owning its
        destination), in the order of :obj:`e_id`; a collective. Not
        cached."""
        e_id = torch.as_tensor(e_id, dtype=torch.int64)
        dst = torch.as_tensor(dst, dtype=torch.int64)
        if e_id.shape != dst.shape or e_id.dim() != 1:
            raise ValueError("'e_id' and 'dst' must be 1-D and of the same "
                             "length")
        if not self.edge_keys:
            return {}
        if self._eid_sorted is None:
            self._eid_sorted, self._eid_pos = torch.sort(
                self.partition.csc.edge_id.to(torch.int64))
        owner = self.partition.node_part[dst].to(torch.int64)
        order = torch.sort(owner, stable=True).indices
        per_rank = torch.bincount(owner, minlength=self.world_size).tolist()
        index = list(torch.split(order, per_rank))
        requests = exchange([e_id[i] for i in index], self.group)
        positions = []
        for r in requests:
            idx = torch.searchsorted(self._eid_sorted, r)
            if r.numel() and not bool(
                    (self._eid_sorted[idx.clamp(
                        max=max(self._eid_sorted.numel() - 1, 0))]
                     == r).all()):
                raise RuntimeError('gather_edges: an edge id is not an '
                                   'in-edge of its destination\'s part')
            positions.append(self._eid_pos[idx] if r.numel() else idx)
        out = {}
        dest = self._dev(order)
        for key in self.edge_keys:
            ref = self.partition.edge_attrs[key]
            answers = exchange([ref.index_select(0, p) for p in positions],
                               self.group, out_device=self.device)
            rows = ref.new_empty((e_id.numel(), ) + tuple(ref.shape[1:]),
                                 device=self.device)
            rows[dest] = torch.cat(answers)  # Answers in `order`.
            out[key] = rows
        self.stats.local_edge_rows = per_rank[self.rank]
        self.stats.remote_edge_rows = e_id.numel() - per_rank[self.rank]
        return out

    @staticmethod
    def count_accesses(n_ids: Iterable[Tensor], num_nodes: int) -> Tensor:
        r"""How often every global vertex appears in :obj:`n_ids` (e.g. the
        :obj:`node` of pre-sampled batches)."""
        counts = torch.zeros(num_nodes, dtype=torch.int64)
        for n_id in n_ids:
            counts += torch.bincount(torch.as_tensor(n_id, dtype=torch.int64),
                                     minlength=num_nodes)
        return counts

    def build_cache(self, counts: Tensor, cache_size: int) -> int:
        r"""Caches the rows of the :obj:`cache_size` remote vertices with
        the highest :obj:`counts` (vertices never counted are not cached),
        fetched from their owners: a collective. Returns the number of
        cached rows."""
        if isinstance(cache_size, bool) or not isinstance(cache_size, int) \
                or cache_size < 0:
            raise ValueError(f"'cache_size' must be a non-negative integer "
                             f"(got {cache_size!r})")
        counts = torch.as_tensor(counts, dtype=torch.int64).clone()
        if counts.numel() != self.num_nodes:
            raise ValueError(f"'counts' must have one entry per global "
                             f"vertex ({self.num_nodes})")
        counts[self.partition.node_part == self.rank] = 0
        if self.policy == 'lru':
            cache_size = min(cache_size, self.capacity)
        k = min(cache_size, int((counts > 0).sum()))
        ids = torch.topk(counts, k).indices if k else \
            torch.empty(0, dtype=torch.int64)
        ids = torch.sort(ids).values
        saved = self.stats
        fetched = self._fetch(ids)
        self.stats = saved
        if self.policy == 'lru':
            self._admit(ids, fetched)
            return int((self.cache_slot >= 0).sum())
        self.cache_slot.fill_(-1)
        self.cache_slot[ids] = torch.arange(ids.numel())
        self.cache = fetched
        return int(ids.numel())

    @property
    def cache_bytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in self.cache.values())
