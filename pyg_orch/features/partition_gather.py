r"""The collective row and edge-attribute gather of a partitioned graph."""
from __future__ import annotations

import contextlib
import copy
import dataclasses
import threading
from dataclasses import dataclass
from typing import (Any, Callable, Dict, Iterable, List, Optional,
                    Sequence, Tuple, Union)

import torch
from torch import Tensor

from pyg_orch.core.checks import check_choice, check_int
from pyg_orch.features.gpu_cache import (
    POLICIES,
    RowCache,
    most_counted,
    most_counted_split,
)
from pyg_orch.parallel.exchange import (
    exchange,
    exchange_stacked_rows,
    group_rank,
    group_size,
    split_by_value,
)
from pyg_orch.parallel.peer_memory import PeerBuffers, PeerGroup
from pyg_orch.sampling.arguments import resolve_device

__all__ = ['DistributedFeatureGather', 'GatherStats', 'ShardedRows']


@dataclass
class GatherStats:
    r"""Where this rank's rows of the last gather came from.

    Attributes:
        local_rows (int): Rows of vertices this part owns.
        cached_rows (int): Rows of remote vertices served by the cache.
        remote_rows (int): Rows fetched from other parts.
        remote_bytes (int): Bytes of the rows fetched from other parts.
        cached_bytes (int): Bytes of the rows served by the cache.
        served_rows (int): Rows this part sent to other parts.
        local_edge_rows (int): Edge attribute rows of this part's edges.
        cached_edge_rows (int): Edge attribute rows from the edge cache.
        remote_edge_rows (int): Edge attribute rows from other parts.
        peer_rows (int): Rows read from another rank's shard of this part
            (with :obj:`peers`; counted per key).
    """
    local_rows: int = 0
    cached_rows: int = 0
    remote_rows: int = 0
    remote_bytes: int = 0
    cached_bytes: int = 0
    served_rows: int = 0
    local_edge_rows: int = 0
    cached_edge_rows: int = 0
    remote_edge_rows: int = 0
    peer_rows: int = 0

    def as_dict(self) -> Dict[str, int]:
        return dict(vars(self))


def _check_keys(keys: Optional[Sequence[str]], attrs: Dict[Any, Dict],
                kind: str) -> Optional[List[str]]:
    # Each of `keys` must be an attribute of some node / edge type.
    if keys is not None:
        keys = list(keys)
        _check_present(keys, {k for a in attrs.values() for k in a},
                       f'{kind} type with a {kind}')
    return keys


def _check_present(keys: List[str], attrs: Dict[str, Any], kind: str) -> None:
    for k in keys:
        if k not in attrs:
            raise ValueError(f'the partition has no {kind} attribute {k!r} '
                             f'(has {sorted(attrs)})')


def _check_typed(kind: str, **values: Any) -> None:
    # Each of `values` must be a dictionary per node or edge type (`kind`).
    for name, value in values.items():
        if not isinstance(value, dict):
            raise ValueError(f"'{name}' must be a dictionary per {kind} type "
                             f"for a heterogeneous partition (got "
                             f"{type(value).__name__})")


def _find_sorted(sorted_ids: Tensor, ids: Tensor) -> Tuple[Tensor, Tensor]:
    # Where every id of `ids` is in `sorted_ids`, and whether it is there.
    pos = torch.searchsorted(sorted_ids, ids)
    if sorted_ids.numel() == 0:
        return pos, torch.zeros_like(ids, dtype=torch.bool)
    return pos, sorted_ids[pos.clamp(max=sorted_ids.numel() - 1)] == ids


def _positions(category: Tensor, num: int) -> List[Tensor]:
    # The positions of every value in [0, num): on a GPU one sort, the host
    # waiting once (for the counts) instead of once per value.
    if category.device.type == 'cpu':
        return [(category == c).nonzero().view(-1) for c in range(num)]
    return split_by_value(category, num)[0]


class DistributedFeatureGather:
    r"""Gathers the rows of node attributes :obj:`keys` (default:
    :obj:`'x'` and :obj:`'y'`) and edge attributes :obj:`edge_keys` of any
    global ids: own rows from this part, cached remote rows from a
    :class:`~pyg_orch.features.gpu_cache.RowCache`, the others from their
    owners, in collectives. On a heterogeneous partition, ids, counts and
    results are dictionaries per node or edge type.

    Args:
        cache_size (int): The capacity of an :obj:`'lru'` cache in rows
            (per node type).
        feature_device (torch.device, optional): Where the part's rows and
            index maps are read (default: the CPU).
        peers (PeerGroup, optional): The ranks of this machine sharing the
            part, to split its rows across.
    """
    def __init__(self, partition, keys: Optional[Iterable[str]] = None,
                 group: Optional[Any] = None, policy: str = 'static',
                 cache_size: int = 0,
                 edge_keys: Optional[Iterable[str]] = None,
                 device: Optional[Union[str, torch.device]] = None,
                 feature_device: Optional[Union[str, torch.device]] = None,
                 peers: Optional[Any] = None):
        check_choice('policy', policy, POLICIES)
        check_int('cache_size', cache_size)
        self.feature_device = resolve_device(feature_device,
                                             'feature_device', default='cpu')
        self.is_hetero = bool(getattr(partition, 'is_hetero', False))
        if peers is not None and torch.device(peers.device) != \
                self.feature_device:
            raise ValueError(f"'peers' must be a PeerGroup on "
                             f"'feature_device' ({self.feature_device}), "
                             f"got one on {peers.device}")
        self.peers = peers
        self.partition, self.group, self.policy = partition, group, policy
        self.rank, self.world_size = partition.part, partition.num_parts
        self.device = torch.device(device or 'cpu')
        self.stats = GatherStats()
        if self.is_hetero:
            self._init_hetero(keys, cache_size, edge_keys)
            return
        attrs = partition.node_attrs
        if keys is None:
            keys = [k for k in ('x', 'y') if k in attrs]
        keys = list(keys)
        _check_present(keys, attrs, 'node')
        if group_size(group) != partition.num_parts \
                or group_rank(group) != partition.part:
            raise ValueError('rank k of the process group must hold part k '
                             'of a graph with one part per rank')
        edge_keys = list(partition.edge_attrs if edge_keys is None
                         else edge_keys)
        _check_present(edge_keys, partition.edge_attrs, 'edge')
        self.edge_keys = edge_keys
        self._eid_sorted: Optional[Tensor] = None
        # The edge cache: sorted ids on the feature device, rows on device.
        self.edge_cache_ids = torch.empty(0, dtype=torch.int64,
                                          device=self.feature_device)
        self.edge_cache: Dict[str, Tensor] = {}
        self.keys = keys
        self.num_nodes = int(partition.node_part.numel())
        # What is read, on the feature device (on a GPU: copies made once).
        self._node_part = self._on_feature(partition.node_part)
        self._local_id = self._on_feature(partition.local_id)
        self._attrs = {k: self._part_rows(attrs[k]) for k in keys}
        self._edge_attrs = {k: self._on_feature(partition.edge_attrs[k])
                            for k in edge_keys}
        if edge_keys and self.feature_device.type != 'cpu':
            self._sort_edge_ids()  # Now, not at the first batch.
        #: The cache of remote rows (its slot map on the feature device).
        self.row_cache = RowCache(self.num_nodes, policy, cache_size,
                                  self.device, self.feature_device)
        for k in keys:
            self.row_cache.allocate(k, attrs[k])

    def _init_hetero(self, keys, cache_size, edge_keys) -> None:
        # One gather per node type and per edge type with edge attributes,
        # each over a homogeneous view of the part.
        partition, group, device = self.partition, self.group, self.device
        keys = _check_keys(keys, partition.node_attrs, 'node')
        edge_keys = _check_keys(edge_keys, partition.edge_attrs, 'edge')
        self.node_types = list(partition.node_ids)
        self.edge_types = list(partition.csc)
        fdev = self.feature_device
        # Every node type's maps on the feature device, once, shared by the
        # gathers of the node type and of the edge types ending there.
        maps = {nt: (self._on_feature(partition.node_part[nt]),
                     self._on_feature(partition.local_id[nt]))
                for nt in self.node_types}

        def view(node_type, edge_type=None):
            v = partition.type_view(node_type, edge_type)
            if fdev.type == 'cpu':
                return v
            nt = node_type if edge_type is None else edge_type[-1]
            return dataclasses.replace(v, node_part=maps[nt][0],
                                       local_id=maps[nt][1])

        self.by_node_type: Dict[str, DistributedFeatureGather] = {}
        for nt in self.node_types:
            attrs = partition.node_attrs[nt]
            self.by_node_type[nt] = DistributedFeatureGather(
                view(nt),
                keys=[k for k in (keys or ('x', 'y')) if k in attrs],
                group=group, policy=self.policy, cache_size=cache_size,
                edge_keys=[], device=device, feature_device=fdev,
                peers=self.peers)
        self.by_edge_type: Dict[tuple, DistributedFeatureGather] = {}
        for et in self.edge_types:
            attrs = partition.edge_attrs[et]
            names = [k for k in attrs if edge_keys is None or k in edge_keys]
            if names:
                self.by_edge_type[et] = DistributedFeatureGather(
                    view(None, et), keys=[], group=group,
                    edge_keys=names, device=device, feature_device=fdev)
        self.keys = {nt: g.keys for nt, g in self.by_node_type.items()}
        self.edge_keys = {et: g.edge_keys
                          for et, g in self.by_edge_type.items()}
        self.num_nodes = {nt: g.num_nodes
                          for nt, g in self.by_node_type.items()}

    def _sum_stats(self, gathers) -> GatherStats:
        total = GatherStats()
        for g in gathers:
            for k, v in vars(g.stats).items():
                setattr(total, k, getattr(total, k) + v)
        return total

    def _gather_hetero(self, n_id) -> Dict[str, Dict[str, Tensor]]:
        _check_typed('node', n_id=n_id)
        empty = torch.empty(0, dtype=torch.int64, device=self.feature_device)
        out = {nt: g.gather(n_id.get(nt, empty))  # Every type, every rank.
               for nt, g in self.by_node_type.items()}
        self.stats = self._sum_stats(self.by_node_type.values())
        return out

    def _gather_edges_hetero(self, e_id, dst) -> Dict[tuple, Dict]:
        _check_typed('edge', e_id=e_id, dst=dst)
        empty = torch.empty(0, dtype=torch.int64, device=self.feature_device)
        out = {et: g.gather_edges(e_id.get(et, empty), dst.get(et, empty))
               for et, g in self.by_edge_type.items()}
        for k, v in vars(self._sum_stats(self.by_edge_type.values())).items():
            if k.endswith('_edge_rows'):
                setattr(self.stats, k, v)
        return out

    def _build_edge_cache_hetero(self, e_id, dst, edge_cache_size: int,
                                 counts) -> int:
        _check_typed('edge', e_id=e_id, dst=dst,
                     counts={} if counts is None else counts)
        unknown = [et for et in {**e_id, **dst, **(counts or {})}
                   if tuple(et) not in self.edge_types]
        if unknown:
            raise ValueError(f'{unknown} are not edge types of the '
                             f'partition ({self.edge_types})')
        e_id, dst = ({tuple(k): v for k, v in d.items()} for d in (e_id, dst))
        counts = {tuple(k): v for k, v in (counts or {}).items()}
        empty = torch.empty(0, dtype=torch.int64, device=self.feature_device)
        # One ranking over the remote edges of all types with attributes:
        candidates = {et: g._edge_candidates(
            e_id.get(et, empty), dst.get(et, empty), counts.get(et))
            for et, g in self.by_edge_type.items()}
        masks = most_counted_split([c for _, _, c in candidates.values()],
                                   edge_cache_size, self.feature_device)
        return sum(self.by_edge_type[et]._fill_edge_cache(ids[m], ids_dst[m])
                   for (et, (ids, ids_dst, _)), m in zip(candidates.items(),
                                                         masks))

    def _build_cache_hetero(self, counts, cache_size: int) -> int:
        _check_typed('node', counts=counts)
        gathers = self.by_node_type  # One ranking over all types:
        flat = [g._remote_counts(counts.get(nt), f'counts[{nt!r}]')
                for nt, g in gathers.items()]
        masks = most_counted_split(flat, cache_size, self.feature_device)
        return sum(g.build_cache(torch.where(m, c, torch.zeros_like(c)),
                                 int(m.sum()))
                   for g, c, m in zip(gathers.values(), flat, masks))

    def _remote_counts(self, counts: Optional[Tensor],
                       name: str = 'counts') -> Tensor:
        # As int64 on the feature device, 0 for this part's own vertices.
        counts = torch.zeros(self.num_nodes, dtype=torch.int64) \
            if counts is None else counts
        counts = torch.as_tensor(counts, dtype=torch.int64).to(
            self.feature_device, copy=True)
        if counts.numel() != self.num_nodes:
            raise ValueError(f"'{name}' must have one entry per global "
                             f"vertex ({self.num_nodes})")
        counts[self._node_part == self.rank] = 0
        return counts

    def row_reads(self) -> Optional[Dict[str, int]]:
        r"""Rows read from this rank's shard (:obj:`'local'`) and its peers'
        (:obj:`'peer'`); :obj:`None` without :obj:`peers`."""
        if self.peers is None:
            return None
        if self.is_hetero:
            reads = [g.row_reads() for g in self.by_node_type.values()]
            return {k: sum(r[k] for r in reads) for k in ('local', 'peer')}
        rows = self._attrs.values()
        return {'local': sum(r.own_rows for r in rows),
                'peer': sum(r.peer_rows for r in rows)}

    def _total(self, name: str, own: Callable[[], int]) -> int:
        # `name` summed over the gathers per type, or this gather's `own()`.
        if not self.is_hetero:
            return own()
        by_type = self.by_edge_type if 'edge' in name else self.by_node_type
        return sum(getattr(g, name) for g in by_type.values())

    @property
    def num_cached_rows(self) -> int:
        r"""The remote rows in the cache (of all node types)."""
        return self._total('num_cached_rows',
                           lambda: self.row_cache.num_cached)

    @property
    def num_cached_edge_rows(self) -> int:
        r"""The remote edges in the edge cache (of all edge types)."""
        return self._total('num_cached_edge_rows',
                           lambda: int(self.edge_cache_ids.numel()))

    def worker_view(self, group: Optional[Any]
                    ) -> 'DistributedFeatureGather':
        r"""A gather of the same part and caches for another thread,
        exchanging over :obj:`group`, with its own :attr:`stats`."""
        if group_size(group) != self.world_size:
            raise ValueError(f"'group' must have the gather's "
                             f"{self.world_size} ranks (got "
                             f"{group_size(group)})")
        view = copy.copy(self)
        view.group = group
        view.stats = GatherStats()
        if self.is_hetero:
            view.by_node_type = {nt: g.worker_view(group)
                                 for nt, g in self.by_node_type.items()}
            view.by_edge_type = {et: g.worker_view(group)
                                 for et, g in self.by_edge_type.items()}
        elif self.edge_keys and self._eid_sorted is None:
            self._sort_edge_ids()  # Once, shared with the view.
            view._eid_sorted, view._eid_pos = self._eid_sorted, self._eid_pos
        return view

    # Helpers ################################################################
    def _part_rows(self, t: Tensor) -> Any:
        # Split across the machine's ranks, or whole on the feature device.
        if self.peers is None:
            return self._on_feature(t)
        return ShardedRows(t, self.peers)

    def _peer_rows(self) -> int:
        # Read by this thread (other worker threads read at the same time);
        # only a homogeneous gather over peers' shards reads any.
        if self.peers is None or self.is_hetero:
            return 0
        return sum(rows.thread_peer_rows() for rows in self._attrs.values())

    def _on_feature(self, t: Tensor) -> Tensor:
        return t if t.device == self.feature_device else \
            t.to(self.feature_device)

    def _dev(self, t: Tensor) -> Tensor:
        # To where the rows are delivered; a copy to the host is waited for.
        return t.to(self.device, non_blocking=self.device.type != 'cpu')

    def _sort_edge_ids(self) -> None:
        # The part's in-edges by global edge id, for gather_edges.
        self._eid_sorted, self._eid_pos = torch.sort(self._on_feature(
            self.partition.csc.edge_id).to(torch.int64))

    def _row_bytes(self) -> int:
        total = 0
        for k in self.keys:
            t = self.partition.node_attrs[k]
            total += t[:1].numel() * t.element_size() if t.dim() > 1 \
                else t.element_size()
        return total

    def _fetch(self, ids: Tensor) -> Dict[str, Tensor]:
        r"""Rows of :obj:`ids` (none owned here) from their owners."""
        if not self.keys:  # The same on every rank: no exchange at all.
            return {}
        owner = self._node_part[ids].to(torch.int64)
        index, per_rank, order = split_by_value(owner, self.world_size)
        requests = exchange([ids[i] for i in index], self.group)
        self.stats.served_rows += sum(int(r.numel()) for i, r in
                                      enumerate(requests) if i != self.rank)
        local = [self._local_id[r] for r in requests]
        return self._reply(self._attrs, self.keys, local, per_rank, order)

    def _reply(self, refs: Dict[str, Any], keys: List[str],
               picks: List[Tensor], per_rank: List[int], order: Tensor
               ) -> Dict[str, Tensor]:
        r"""Answers rank :obj:`r`'s request with rows :obj:`picks[r]` (one
        exchange); returns this rank's answers in request :obj:`order`."""
        pick = torch.cat(picks)
        fields = exchange_stacked_rows(
            [refs[key].index_select(0, pick) for key in keys],
            [int(p.numel()) for p in picks], per_rank, self.group,
            out_device=self.device)
        dest = self._dev(order)
        out = {}
        for key, got in zip(keys, fields):
            # `index_copy_`: faster than advanced indexing on the CPU.
            out[key] = torch.empty_like(got).index_copy_(0, dest, got)
        return out

    # API ####################################################################
    def gather(self, n_id) -> Dict[str, Tensor]:
        r"""The rows of :obj:`n_id` (global ids) of every key."""
        if self.is_hetero:
            return self._gather_hetero(n_id)
        n_id = torch.as_tensor(n_id, dtype=torch.int64).to(
            self.feature_device)
        self.stats = GatherStats()
        peer_before = self._peer_rows()
        owner = self._node_part[n_id].to(torch.int64)
        is_local = owner == self.rank
        cache = self.row_cache
        # Slots looked up and rows read at once (other threads admit).
        with cache.section(cache.cuda) if cache.lru else \
                contextlib.nullcontext():
            slot = cache.lookup(n_id)
            # 0: owned, 1: cached, 2: fetched from its owner.
            category = torch.where(is_local, 0, torch.where(slot >= 0, 1, 2))
            local_pos, cached_pos, remote_pos = _positions(category, 3)
            cached, step = cache.read(slot[cached_pos])
        fetched = self._fetch(n_id[remote_pos])
        out = {}
        local_dst, cached_dst, remote_dst = (self._dev(p) for p in (
            local_pos, cached_pos, remote_pos))
        local = self._local_id[n_id[local_pos]]
        for key in self.keys:
            ref = self._attrs[key]
            rows = ref.new_empty((n_id.numel(), ) + tuple(ref.shape[1:]),
                                 device=self.device)
            rows.index_copy_(0, local_dst,
                             self._dev(ref.index_select(0, local)))
            rows.index_copy_(0, cached_dst, cached[key])
            rows.index_copy_(0, remote_dst, fetched[key])
            out[key] = rows
        row_bytes = self._row_bytes()
        self.stats.local_rows = int(local_pos.numel())
        self.stats.cached_rows = int(cached_pos.numel())
        self.stats.remote_rows = int(remote_pos.numel())
        self.stats.remote_bytes = self.stats.remote_rows * row_bytes
        self.stats.cached_bytes = self.stats.cached_rows * row_bytes
        self.stats.peer_rows = self._peer_rows() - peer_before
        if cache.lru:
            with cache.section(cache.cuda):
                cache.admit(n_id[remote_pos], fetched, step)
        return out

    def _fetch_edges(self, e_id: Tensor, owner: Tensor
                     ) -> Tuple[Dict[str, Tensor], List[int]]:
        r"""Rows of the edges :obj:`e_id` from the parts :obj:`owner`, and
        how many each part served."""
        if self._eid_sorted is None:
            self._sort_edge_ids()
        index, per_rank, order = split_by_value(owner, self.world_size)
        requests = exchange([e_id[i] for i in index], self.group)
        wanted = torch.cat(requests)
        idx, found = _find_sorted(self._eid_sorted, wanted)
        if wanted.numel() and not bool(found.all()):
            raise RuntimeError('gather_edges: an edge id is not an '
                               'in-edge of its destination\'s part')
        positions = torch.split(self._eid_pos[idx] if wanted.numel() else
                                idx, [int(r.numel()) for r in requests])
        return self._reply(self._edge_attrs, self.edge_keys,
                           list(positions), per_rank, order), per_rank

    def gather_edges(self, e_id, dst) -> Dict[str, Tensor]:
        r"""The rows of :obj:`edge_keys` of the edges :obj:`e_id` into
        :obj:`dst` (global ids; an edge lives with its destination's part)."""
        if self.is_hetero:
            return self._gather_edges_hetero(e_id, dst)
        e_id, dst = self._edges_here(e_id, dst)
        if not self.edge_keys:
            return {}
        owner = self._node_part[dst].to(torch.int64)
        num_cached = 0
        if self.edge_cache_ids.numel() == 0:
            out, per_rank = self._fetch_edges(e_id, owner)
        else:
            slot, hit = _find_sorted(self.edge_cache_ids, e_id)
            hit &= owner != self.rank
            fetch_pos, cached_pos = _positions(hit.to(torch.int64), 2)
            num_cached = int(cached_pos.numel())
            fetched, per_rank = self._fetch_edges(e_id[fetch_pos],
                                                  owner[fetch_pos])
            fetch_dst, cached_dst = self._dev(fetch_pos), self._dev(
                cached_pos)
            cached_slot = self._dev(slot[cached_pos])
            out = {}
            for key in self.edge_keys:
                ref = fetched[key]
                rows = ref.new_empty((e_id.numel(), ) + tuple(ref.shape[1:]))
                rows[fetch_dst] = ref
                rows[cached_dst] = self.edge_cache[key][cached_slot]
                out[key] = rows
        self.stats.local_edge_rows = per_rank[self.rank]
        self.stats.cached_edge_rows = num_cached
        self.stats.remote_edge_rows = sum(per_rank) - per_rank[self.rank]
        return out

    def _edges_here(self, e_id, dst) -> Tuple[Tensor, Tensor]:
        # Checked, as int64 on the feature device.
        e_id = torch.as_tensor(e_id, dtype=torch.int64).to(
            self.feature_device)
        dst = torch.as_tensor(dst, dtype=torch.int64).to(self.feature_device)
        if e_id.shape != dst.shape or e_id.dim() != 1:
            raise ValueError("'e_id' and 'dst' must be 1-D and of the same "
                             "length")
        return e_id, dst

    def _edge_candidates(self, e_id, dst, counts=None
                         ) -> Tuple[Tensor, Tensor, Tensor]:
        # The distinct edges (sorted), their destinations and summed
        # counts (0 for this part's edges).
        fdev = self.feature_device
        e_id, dst = self._edges_here(e_id, dst)
        if counts is None:
            counts = torch.ones_like(e_id)
        else:
            counts = torch.as_tensor(counts, dtype=torch.int64).to(fdev)
            if counts.shape != e_id.shape:
                raise ValueError("'counts' must hold one count per entry of "
                                 "'e_id'")
            if counts.numel() and int(counts.min()) < 0:
                raise ValueError("'counts' must be non-negative")
        ids, inverse = torch.unique(e_id, return_inverse=True)
        total = torch.zeros_like(ids).scatter_add_(0, inverse, counts)
        ids_dst = torch.empty_like(ids).scatter_(0, inverse, dst)
        if ids.numel():
            total[self._node_part[ids_dst] == self.rank] = 0
        return ids, ids_dst, total

    def _fill_edge_cache(self, ids: Tensor, dst: Tensor) -> int:
        # Caches the remote edges `ids` (sorted) into `dst`; a collective.
        owner = self._node_part[dst].to(torch.int64)
        self.edge_cache, _ = self._fetch_edges(ids, owner)
        self.edge_cache_ids = ids
        return int(ids.numel())

    def build_edge_cache(self, e_id, dst, edge_cache_size: int,
                         counts=None) -> int:
        r"""Caches the :obj:`edge_cache_size` remote edges of :obj:`e_id`
        (into :obj:`dst`) counted most often; returns how many."""
        check_int('edge_cache_size', edge_cache_size)
        if self.is_hetero:
            return self._build_edge_cache_hetero(e_id, dst, edge_cache_size,
                                                 counts)
        ids, ids_dst, total = self._edge_candidates(e_id, dst, counts)
        if not self.edge_keys:  # The same on every rank: nothing to keep.
            return 0
        chosen = most_counted(total, edge_cache_size)
        return self._fill_edge_cache(ids[chosen], ids_dst[chosen])

    @staticmethod
    def count_accesses(n_ids: Iterable[Tensor], num_nodes: int) -> Tensor:
        r"""How often every global vertex appears in :obj:`n_ids`."""
        counts = torch.zeros(num_nodes, dtype=torch.int64)
        for n_id in n_ids:
            counts += torch.bincount(
                torch.as_tensor(n_id, dtype=torch.int64).cpu(),
                minlength=num_nodes)
        return counts

    def build_cache(self, counts: Tensor, cache_size: int) -> int:
        r"""Caches the rows of the :obj:`cache_size` remote vertices
        counted most often (over all node types); returns how many."""
        check_int('cache_size', cache_size)
        if self.is_hetero:
            return self._build_cache_hetero(counts, cache_size)
        counts = self._remote_counts(counts)
        cache = self.row_cache
        if self.policy == 'lru':
            cache_size = min(cache_size, cache.capacity)
        ids = most_counted(counts, cache_size)
        saved = self.stats
        fetched = self._fetch(ids)
        self.stats = saved
        if self.policy == 'lru':
            cache.admit(ids, fetched, cache.clock[0])
            return cache.num_cached
        cache.fill(ids, fetched)
        return int(ids.numel())

    @property
    def cache_slot(self) -> Tensor:
        r"""The cache slot of every global vertex (:obj:`-1`: not cached)."""
        return self.row_cache.slot

    @property
    def slot_id(self) -> Tensor:
        r"""The vertex in every :obj:`'lru'` slot (:obj:`-1`: free)."""
        return self.row_cache.slot_id

    @property
    def last_used(self) -> Tensor:
        r"""The step every :obj:`'lru'` slot was last read."""
        return self.row_cache.last_used

    @property
    def cache_bytes(self) -> int:
        r"""The bytes of the cached rows of remote vertices."""
        return self._total('cache_bytes', lambda: self.row_cache.nbytes)

    @property
    def edge_cache_bytes(self) -> int:
        r"""The bytes of the edge cache: rows and sorted ids."""
        return self._total('edge_cache_bytes', lambda: (
            self.edge_cache_ids.numel() * 8 + sum(
                t.numel() * t.element_size()
                for t in self.edge_cache.values())))


class ShardedRows:
    r"""The rows of :obj:`rows` split across :obj:`peers` (row :obj:`i` on
    rank :obj:`i % S`; a collective)."""
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
