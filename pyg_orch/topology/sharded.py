r"""A CSC topology whose neighbor lists are split across the GPUs of one
machine: offsets replicated, the lists one shard per rank (ranges of
destinations, or a partition of them), and the most read lists copied to
every GPU within a memory budget. A batch equals the one-GPU loader's."""
import dataclasses
import threading
import weakref
from itertools import accumulate
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Union

import torch
from torch import Tensor

from pyg_orch.core.checks import check_choice
from pyg_orch.core.devices import on_gpu_or_cpu
from pyg_orch.topology.csc import (
    CSCTopology,
    ShardLayout,
    smallest_index_dtype,
)
from pyg_orch.topology.fingerprint import differing_ranks
from pyg_orch.topology.graph import GraphTopology
from pyg_orch.parallel.peer_memory import PeerBuffers, PeerGroup

# Guards the read counters of CPU topologies (worker threads add at once).
_READS_LOCK = threading.Lock()

#: Where a neighbor read was served: own shard, replicated copy, peer shard.
READ_TIERS = ('local', 'replicated', 'peer')


def shard_positions(edge_bounds: Tensor, pos: Tensor):
    r"""The shard of every CSC position and the position within it."""
    owner = torch.bucketize(pos, edge_bounds[1:-1], right=True)
    return owner, pos - edge_bounds.index_select(0, owner)


class PositionMap:
    r"""Where the CSC positions of lists split by a partition of the
    destinations lie: destination :obj:`v`'s list starts at :obj:`start[v]`
    among the placed positions (:obj:`colptr`: the topology's offsets)."""
    def __init__(self, colptr: Tensor, start: Tensor):
        self.colptr = colptr
        self.start = start

    def __call__(self, pos: Tensor, dst: Optional[Tensor] = None) -> Tensor:
        r"""The placed positions of CSC positions :obj:`pos`."""
        if dst is None:
            dst = torch.searchsorted(self.colptr, pos, right=True) - 1
        return self.start.index_select(0, dst).to(torch.int64) + (
            pos - self.colptr.index_select(0, dst))


class ShardedValues:
    r"""A value per CSC position (edge times, sampling weights or their prefix
    sums) split like the neighbor lists of a :class:`ShardedCSC`;
    :meth:`index_select` reads any position from the shard that holds it.

    Args:
        shards (PeerBuffers): Every rank's shard.
        edge_bounds (torch.Tensor): The CSC positions where the shards
            start, and the number of positions.
        own_size (int): The positions of this rank's shard.
        placed (PositionMap, optional): Where positions lie, for lists
            split by a partition."""
    def __init__(self, shards: PeerBuffers, edge_bounds: Tensor,
                 own_size: int, placed: Optional[PositionMap] = None):
        self.shards = shards
        self.edge_bounds = edge_bounds
        self.own_size = int(own_size)
        self.placed = placed

    @property
    def own(self) -> Tensor:
        r"""This rank's shard."""
        return self.shards.own[:self.own_size]

    @property
    def dtype(self) -> torch.dtype:
        return self.shards.own.dtype

    @property
    def device(self) -> torch.device:
        return self.edge_bounds.device

    @property
    def nbytes(self) -> int:
        r"""Bytes of this rank's shard."""
        return self.own.numel() * self.own.element_size()

    def index_select(self, dim: int, index: Tensor) -> Tensor:
        r"""The values at CSC positions :obj:`index` (:obj:`dim=0`)."""
        if dim != 0:
            raise ValueError(f"ShardedValues has one dimension (got "
                             f"dim={dim})")
        if self.placed is not None:
            index = self.placed(index)
        owner, local = shard_positions(self.edge_bounds, index)
        return self.shards.gather(owner, local)

    def __repr__(self) -> str:
        return (f'{type(self).__name__}(shards={len(self.shards.buffers)}, '
                f'dtype={self.dtype}, own_size={self.own_size})')


@dataclass(eq=False)
class ShardedCSC(CSCTopology):
    r"""A :class:`~pyg_orch.topology.csc.CSCTopology` sharded over a
    :class:`~pyg_orch.multigpu.PeerGroup` (see :func:`shard_topology`):
    :obj:`row` and :obj:`edge_id` hold this rank's shard only;
    :meth:`neighbors` and :meth:`edge_ids` read any position. Edge times and
    weights are split the same way (:class:`ShardedValues`).

    Attributes:
        node_bounds (List[int]): Rank :obj:`r` holds the lists of
            destinations :obj:`[node_bounds[r], node_bounds[r + 1])`
            (empty where the lists are split by a partition).
        edge_bounds (torch.Tensor): The CSC (or placed) positions where the
            shards start, on the topology's device.
        placed (PositionMap, optional): Where each list lies, for lists
            split by a partition.
        rank (int): This process's shard.
        row_shards (PeerBuffers): Every rank's :obj:`row` shard.
        eid_shards (PeerBuffers, optional): The same for edge ids.
        rep_start (torch.Tensor, optional): Per destination, where its
            replicated list starts in :obj:`rep_row`, or :obj:`-1`.
        rep_row (torch.Tensor, optional): The replicated lists.
        rep_eid (torch.Tensor, optional): Their edge ids.
        reads (torch.Tensor): Neighbors read per tier (:obj:`READ_TIERS`)."""
    node_bounds: List[int] = field(default_factory=list)
    edge_bounds: Optional[Tensor] = None
    rank: int = 0
    row_shards: Optional[PeerBuffers] = None
    eid_shards: Optional[PeerBuffers] = None
    rep_start: Optional[Tensor] = None
    rep_row: Optional[Tensor] = None
    rep_eid: Optional[Tensor] = None
    total_edges: int = 0
    reads: Optional[Tensor] = None
    placed: Optional[PositionMap] = None
    _layout: Optional[ShardLayout] = None

    is_sharded = True

    @property
    def needs_dst(self) -> bool:
        return self.rep_start is not None or self.placed is not None

    @property
    def num_shards(self) -> int:
        return self.edge_bounds.numel() - 1

    @property
    def num_edges(self) -> int:
        return self.total_edges

    @property
    def num_replicated(self) -> int:
        r"""Destinations whose lists are copied to this rank."""
        if self.rep_start is None:
            return 0
        return int((self.rep_start >= 0).sum())

    def memory(self) -> Dict[str, int]:
        r"""Bytes this rank holds: replicated offsets, own shard (with its
        edge times and weights), copies."""
        def nbytes(x):
            if isinstance(x, ShardedValues):
                return x.nbytes
            return 0 if x is None else x.numel() * x.element_size()
        return {
            'offsets': nbytes(self.colptr) + nbytes(self.rep_start) + (
                0 if self.placed is None else nbytes(self.placed.start)),
            'shard': sum(nbytes(x) for x in (
                self.row, self.edge_id, self.time, self.weight,
                self._weight_cumsum)),
            'replicated': nbytes(self.rep_row) + nbytes(self.rep_eid),
        }

    def nbytes(self) -> int:
        return sum(self.memory().values())

    def _locate(self, pos: Tensor, dst: Optional[Tensor], count: bool):
        placed = pos if self.placed is None else self.placed(pos, dst)
        shard, local = shard_positions(self.edge_bounds, placed)
        rep = None
        if self.rep_start is not None:
            if dst is None:
                raise ValueError("a ShardedCSC with replicated lists needs "
                                 "'dst', the destination of every position")
            start = self.rep_start.index_select(0, dst)
            rep = start >= 0
            rep_pos = start + (pos - self.colptr.index_select(0, dst))
            rep = (rep, rep_pos)
        if count and self.reads is not None:
            is_rep = rep[0] if rep is not None else torch.zeros_like(
                pos, dtype=torch.bool)
            mine = ~is_rep & (shard == self.rank)
            peer = ~is_rep & (shard != self.rank)
            counts = torch.stack([mine.sum(), is_rep.sum(), peer.sum()])
            if self.reads.is_cuda:  # Atomic: threads add on their streams.
                self.reads.index_add_(0, torch.arange(
                    3, device=self.reads.device), counts)
            else:
                with _READS_LOCK:
                    self.reads += counts
        return shard, local, rep

    def _read(self, pos: Tensor, dst: Optional[Tensor], shards: PeerBuffers,
              replica: Optional[Tensor], count: bool = False) -> Tensor:
        shard, local, rep = self._locate(pos, dst, count)
        out = torch.empty(pos.shape, dtype=shards.own.dtype,
                          device=pos.device)
        todo = torch.ones_like(pos, dtype=torch.bool)
        if rep is not None:
            is_rep, rep_pos = rep
            idx = is_rep.nonzero().view(-1)
            out[idx] = replica.index_select(0, rep_pos[idx])
            todo = ~is_rep
        idx = todo.nonzero().view(-1)
        out[idx] = shards.gather(shard.index_select(0, idx),
                                 local.index_select(0, idx))
        return out

    def kernel_shards(self) -> ShardLayout:
        if self._layout is None:
            ptrs = [b.data_ptr() for b in self.row_shards.buffers]
            if self.eid_shards is not None:
                ptrs += [b.data_ptr() for b in self.eid_shards.buffers]
            else:
                ptrs += [0] * self.num_shards
            table = torch.tensor([self.rank] + self.edge_bounds.tolist() +
                                 ptrs, dtype=torch.int64)
            self._layout = ShardLayout(
                table.to(self.device), self.num_shards, self.rep_start,
                self.rep_row, self.rep_eid, self.reads,
                None if self.placed is None else self.placed.start)
        return self._layout

    def neighbors(self, pos: Tensor, dst: Optional[Tensor] = None) -> Tensor:
        return self._read(pos, dst, self.row_shards, self.rep_row, True)

    def edge_ids(self, pos: Tensor, dst: Optional[Tensor] = None) -> Tensor:
        if self.eid_shards is None:
            return pos
        return self._read(pos, dst, self.eid_shards, self.rep_eid)

    def to(self, device, non_blocking: bool = False) -> 'ShardedCSC':
        if torch.device(device) != self.device:
            raise NotImplementedError(
                "a ShardedCSC lives where it was sharded; shard the "
                "topology again for another device")
        return self

    def pin_memory(self) -> 'ShardedCSC':
        return self

    def share_memory_(self) -> 'ShardedCSC':
        return self  # Already in memory every local process reads.


def shard_bounds(colptr: Tensor, num_shards: int) -> List[int]:
    r"""Destination ranges with about the same number of edges each: rank
    :obj:`r` gets destinations :obj:`[b[r], b[r + 1])`."""
    n = colptr.numel() - 1
    total = int(colptr[-1])
    targets = torch.tensor([total * r // num_shards
                            for r in range(1, num_shards)],
                           dtype=colptr.dtype)
    inner = torch.searchsorted(colptr.cpu(), targets).clamp(0, n).tolist()
    return list(accumulate([0] + inner + [n], max))  # Monotone if empty.


def choose_replicated(colptr: Tensor, budget_bytes: int, bytes_per_edge: int,
                      score: Optional[Tensor] = None,
                      exclude: Optional[Union[range, Tensor]] = None,
                      max_fanout: Optional[int] = None,
                      device: Optional[torch.device] = None) -> Tensor:
    r"""The destinations whose lists to copy within :obj:`budget_bytes`,
    greedily by reads saved per byte (:obj:`score`: expected expansions, the
    in-degree if not given), skipping those in :obj:`exclude` (ranked on
    :obj:`device` if it is a GPU)."""
    n = colptr.numel() - 1
    if budget_bytes <= 0 or n <= 0:
        return torch.empty(0, dtype=torch.int64)
    if score is not None and score.numel() != n:
        raise ValueError(f"'replicate_score' must have one entry per node "
                         f"({n}), got {score.numel()}")
    return on_gpu_or_cpu(lambda on: _rank_lists(
        colptr, budget_bytes, bytes_per_edge, score, exclude, max_fanout,
        on), device).cpu()


def _rank_lists(colptr: Tensor, budget_bytes: int, bytes_per_edge: int,
                score: Optional[Tensor], exclude: Optional[Union[range,
                                                                 Tensor]],
                max_fanout: Optional[int], on: torch.device) -> Tensor:
    # `choose_replicated`, computed on `on`.
    colptr = colptr.to(on)
    deg = (colptr[1:] - colptr[:-1]).to(torch.int64)
    degf = deg.to(torch.float64)
    weight = degf if score is None else score.to(on, torch.float64)
    reads = degf if max_fanout is None or max_fanout < 0 else \
        degf.clamp(max=max_fanout)
    value = torch.where(deg > 0, weight * reads / degf.clamp(min=1),
                        float('-inf'))
    if isinstance(exclude, Tensor):
        value[exclude.to(on)] = float('-inf')
    elif exclude is not None and len(exclude) > 0:
        value[exclude.start:exclude.stop] = float('-inf')
    order = torch.argsort(value, descending=True, stable=True)
    ranked = value[order]
    order = order[torch.isfinite(ranked) & (ranked > 0)]
    cost = torch.cumsum(deg[order] * bytes_per_edge, 0)
    return order[cost <= budget_bytes]


def list_positions(offset: Tensor, deg: Tensor,
                   device: torch.device) -> Tensor:
    r"""For lists of :obj:`deg[i]` slots laid end to end, position
    :obj:`offset[i] + k` of every slot :obj:`k` of list :obj:`i`, on
    :obj:`device` (computed there; on the CPU where the GPU has no room)."""
    total = int(deg.sum())
    return on_gpu_or_cpu(lambda on: torch.repeat_interleave(
        offset.to(on), deg.to(on), output_size=total) + torch.arange(
            total, device=on), device).to(device)


def check_node_parts(node_parts: Tensor, num_nodes: int,
                     num_shards: int) -> Tensor:
    r"""The parts on the CPU, checked to hold a rank per vertex."""
    if node_parts.dim() != 1 or node_parts.numel() != num_nodes:
        raise ValueError(f"'split_by' must hold one part per vertex "
                         f"({num_nodes}), got shape "
                         f"{tuple(node_parts.shape)}")
    parts = node_parts.cpu().to(torch.int64)
    if num_nodes > 0 and (int(parts.min()) < 0
                          or int(parts.max()) >= num_shards):
        raise ValueError(f"'split_by' must hold parts in [0, {num_shards}) "
                         f"(one per rank of the machine), got values in "
                         f"[{int(parts.min())}, {int(parts.max())}]")
    return parts


def split_by_parts(colptr: Tensor, node_parts: Tensor, rank: int,
                   num_shards: int):
    r"""The shards' bounds, every destination's placed start, and the CSC
    positions of :obj:`rank`'s shard, for lists split by :obj:`node_parts`."""
    n = colptr.numel() - 1
    parts = check_node_parts(node_parts, n, num_shards)
    colptr = colptr.cpu().to(torch.int64)
    deg = colptr[1:] - colptr[:-1]
    order = torch.sort(parts, stable=True)[1]  # By part, then by id.
    placed = torch.cumsum(deg[order], 0) - deg[order]
    start = torch.empty(n, dtype=torch.int64)
    start[order] = placed
    sizes = torch.zeros(num_shards, dtype=torch.int64).scatter_add_(
        0, parts, deg)
    edge_bounds = torch.zeros(num_shards + 1, dtype=torch.int64)
    edge_bounds[1:] = torch.cumsum(sizes, 0)
    mine = order[parts[order] == rank]
    local = start[mine] - edge_bounds[rank]
    pos = torch.repeat_interleave(colptr[mine] - local, deg[mine]) + \
        torch.arange(int(sizes[rank]))
    return edge_bounds, start, pos


def check_same_graph(peers: PeerGroup, fingerprint: str,
                     what: str = 'graph') -> None:
    r"""Raises on every rank (a collective) where fingerprints differ."""
    seen = peers.all_gather_object(fingerprint)
    differ = differing_ranks(seen)
    if differ:
        raise ValueError(
            f"Every rank must shard the same {what}, but rank(s) {differ} "
            f"of {len(seen)} hold another one (graph fingerprints by rank: "
            f"{seen}); build the graph alike on every rank (e.g. on the "
            f"CPU from one seed: CUDA generators need not agree across "
            f"devices), or load it from one file")


def shard_topology(csc: CSCTopology, peers: PeerGroup,
                   replicate_bytes: int = 0,
                   replicate_score: Optional[Tensor] = None,
                   count_reads: bool = True,
                   max_fanout: Optional[int] = None,
                   node_parts: Optional[Tensor] = None) -> ShardedCSC:
    r"""Splits :obj:`csc` (the whole topology, as every rank has it) across
    the ranks of :obj:`peers` (a collective call); raises a
    :class:`ValueError` on every rank where the ranks' topologies differ.

    Args:
        csc (CSCTopology): The whole topology (in host or GPU memory).
        peers (PeerGroup): The machine's processes.
        replicate_bytes (int): Bytes per rank for copies of other ranks'
            lists. (default: :obj:`0`)
        replicate_score (torch.Tensor, optional): How often each
            destination is expected to be expanded (identical on every rank);
            see :func:`choose_replicated`.
        max_fanout (int, optional): The largest fan-out sampled.
        count_reads (bool): Count reads per tier (see :meth:`stats`).
        node_parts (torch.Tensor, optional): The rank that holds each
            destination's list (default: ranges from :func:`shard_bounds`)."""
    check_same_graph(peers, csc.content_fingerprint(), 'topology')
    device = peers.device
    colptr = csc.colptr.cpu()
    src_device = csc.row.device  # Sliced where it lies (e.g. built on GPU).
    r = peers.rank
    placed = own_pos = None
    if node_parts is None:
        bounds = shard_bounds(colptr, peers.world_size)
        edge_bounds = colptr.index_select(0, torch.tensor(bounds)).to(
            torch.int64)
        exclude = range(bounds[r], bounds[r + 1])
    else:
        bounds = []
        edge_bounds, start, own_pos = split_by_parts(
            colptr, node_parts, r, peers.world_size)
        exclude = node_parts.cpu() == r
        start = start.to(smallest_index_dtype(int(edge_bounds[-1])))
        placed = PositionMap(colptr.to(device), start.to(device))
        own_pos = own_pos.to(src_device)
    sizes = (edge_bounds[1:] - edge_bounds[:-1]).tolist()
    a, b = int(edge_bounds[r]), int(edge_bounds[r + 1])

    def split(values: Tensor) -> PeerBuffers:
        buffers = peers.allocate((max(max(sizes), 1), ), values.dtype)
        own = values[a:b] if own_pos is None else \
            values.index_select(0, own_pos.to(values.device))
        buffers.own[:b - a].copy_(own)
        return buffers

    row_shards = split(csc.row)
    eid_shards = split(csc.edge_id) if csc.edge_id is not None else None
    device_bounds = edge_bounds.to(device)

    def split_values(values: Optional[Tensor]) -> Optional[ShardedValues]:
        if values is None:
            return None
        return ShardedValues(split(values), device_bounds, b - a, placed)

    time = split_values(csc.time)
    weight = split_values(csc.weight)
    # The prefix sums over all positions (computed on a copy, so that
    # `csc` keeps no cache of them), split like the weights:
    cumsum = None if csc.weight is None else split_values(
        dataclasses.replace(csc, _weight_cumsum=None).weight_cumsum)
    peers.barrier()  # Every shard is written before anyone reads it.

    rep_start = rep_row = rep_eid = None
    bytes_per_edge = csc.row.element_size() + (
        csc.edge_id.element_size() if csc.edge_id is not None else 0)
    chosen = choose_replicated(colptr, replicate_bytes, bytes_per_edge,
                               replicate_score, exclude=exclude,
                               max_fanout=max_fanout, device=device)
    if chosen.numel() > 0:
        chosen = chosen.sort().values
        deg = (colptr[chosen + 1] - colptr[chosen]).to(torch.int64)
        starts = torch.cumsum(deg, 0) - deg
        dtype = smallest_index_dtype(int(deg.sum()))
        rep_start = torch.full((colptr.numel() - 1, ), -1, dtype=dtype)
        rep_start[chosen] = starts.to(dtype)
        pos = list_positions(colptr[chosen].to(torch.int64) - starts, deg,
                             src_device)
        rep_row = csc.row.index_select(0, pos).to(device)
        if csc.edge_id is not None:
            rep_eid = csc.edge_id.index_select(0, pos).to(device)
        rep_start = rep_start.to(device)

    own_row = row_shards.own[:b - a]
    own_eid = eid_shards.own[:b - a] if eid_shards is not None else None
    return ShardedCSC(
        colptr=colptr.to(device), row=own_row, edge_id=own_eid,
        num_src_nodes=csc.num_src_nodes, time=time, weight=weight,
        _weight_cumsum=cumsum, node_bounds=bounds,
        edge_bounds=device_bounds, rank=r, row_shards=row_shards,
        eid_shards=eid_shards, rep_start=rep_start, rep_row=rep_row,
        rep_eid=rep_eid, total_edges=csc.num_edges,
        reads=torch.zeros(3, dtype=torch.int64, device=device)
        if count_reads else None, placed=placed,
        fingerprint=csc.fingerprint)


@dataclass
class TopologySharding:
    r"""How :obj:`PlacementOptions(topology='sharded')` splits the topology;
    pass an instance as :obj:`PlacementOptions(topology=...)` to change the
    defaults.

    Args:
        replicate_bytes (int or float): Bytes per rank for copies of other
            ranks' neighbor lists, or a fraction of all neighbor lists.
            (default: :obj:`0.1`)
        replicate_by (str): Which lists to copy: :obj:`'reads'` (most reads
            saved per byte) or :obj:`'degree'` (highest in-degree first).
            (default: :obj:`'reads'`)
        split_by (str or torch.Tensor or dict): Which rank holds which
            lists: :obj:`'ranges'` (destination ranges of about equal edge
            counts), :obj:`'metis'` (one METIS part per rank; needs
            :obj:`pymetis`, homogeneous graphs), :obj:`'random'` (a seeded
            balanced partition), or the rank of every destination (a tensor,
            or a dict per node type). (default: :obj:`'ranges'`)"""
    replicate_bytes: Union[int, float] = 0.1
    replicate_by: str = 'reads'
    split_by: Any = 'ranges'

    def __post_init__(self):
        check_choice('replicate_by', self.replicate_by, ('reads', 'degree'))
        split = self.split_by
        if not (split in ('ranges', 'metis', 'random') if isinstance(
                split, str) else isinstance(split, Tensor) or (
                    isinstance(split, dict)
                    and all(isinstance(v, Tensor) for v in split.values()))):
            got = repr(split) if isinstance(split, str) else \
                type(split).__name__
            raise ValueError(f"'split_by' must be 'ranges', 'metis', "
                             f"'random', a tensor or a dictionary of tensors "
                             f"per node type (got {got})")
        value = self.replicate_bytes
        if isinstance(value, bool) or not isinstance(value, (int, float)) or \
                value < 0 or (isinstance(value, float) and value > 1.0):
            raise ValueError(f"'replicate_bytes' must be a number of bytes "
                             f"(int >= 0) or a fraction in [0, 1] (got "
                             f"{value!r})")

    def node_parts(self, topology: GraphTopology, num_shards: int,
                   node_type: Any = None) -> Optional[Tensor]:
        r"""The rank that holds each :obj:`node_type` vertex's lists
        (:obj:`None` for :obj:`'ranges'`), the same on every rank."""
        split = self.split_by
        if isinstance(split, str):
            return None if split == 'ranges' else _partition(
                topology, node_type, num_shards, split)
        if isinstance(split, dict):
            if node_type not in split:
                raise ValueError(f"'split_by' has no parts for node type "
                                 f"{node_type!r}")
            split = split[node_type]
        elif node_type is not None:
            raise ValueError("'split_by' must be a dictionary of tensors "
                             "per node type for a heterogeneous graph")
        return check_node_parts(split, topology.num_nodes[node_type],
                                num_shards)

    def shard(self, csc: Dict[Any, CSCTopology], peers: PeerGroup,
              max_fanout: Optional[int] = None,
              node_parts: Optional[Dict[Any, Optional[Tensor]]] = None,
              counted: Optional[Callable[[Tensor, Any], Tensor]] = None
              ) -> Dict[Any, 'ShardedCSC']:
        r"""Every edge type of :obj:`csc` split by :func:`shard_topology`,
        with :obj:`node_parts` per destination type (ranges if not set)."""
        reads = self.replicate_by == 'reads'
        out = {}
        for et, topo in csc.items():
            dst_t = None if et is None else et[-1]
            score = expansion_weight(csc, dst_t, topo.colptr.numel() - 1,
                                     counted) if reads else None
            out[et] = shard_topology(
                topo, peers, self.budget(topo), score,
                max_fanout=max_fanout if reads else None,
                node_parts=(node_parts or {}).get(dst_t))
        return out

    def budget(self, csc: CSCTopology) -> int:
        if isinstance(self.replicate_bytes, float):
            per_edge = csc.row.element_size() + (
                0 if csc.edge_id is None else csc.edge_id.element_size())
            return int(self.replicate_bytes * csc.num_edges * per_edge)
        return int(self.replicate_bytes)


_SHARDED: 'weakref.WeakKeyDictionary' = weakref.WeakKeyDictionary()


def _agreed(peers: PeerGroup,
            make: Callable[[], Optional[Tensor]]) -> Optional[Tensor]:
    # `make()`'s parts, the same on every rank; where it fails on a rank, or
    # the ranks' parts differ, an error on every rank (no rank left
    # waiting in a later collective).
    parts = error = None
    try:
        parts = make()
        digest = None if parts is None else (
            parts.numel(), int(parts.sum()),
            int((parts * (torch.arange(parts.numel()) % 65521)).sum()))
    except (ValueError, ImportError, NotImplementedError) as e:
        error, digest = e, None
    views = peers.all_gather_object(
        ('error', f'{type(error).__name__}: {error}')
        if error is not None else ('parts', digest))
    if error is not None:
        raise error
    failed = [v[1] for v in views if v[0] == 'error']
    if failed:
        raise ValueError(f"'split_by': another rank failed: {failed[0]}")
    if len(set(views)) > 1:
        raise ValueError("'split_by' must give every rank the same parts "
                         "(the rank of every vertex), but the ranks differ")
    return parts


def _partition(topology: GraphTopology, node_type: Any, num_parts: int,
               method: str) -> Tensor:
    # A partition of `node_type`'s vertices, computed alike on every rank
    # (METIS and the random split are deterministic for a seed).
    from pyg_orch.partition.partitioning import assign_parts
    n = topology.num_nodes[node_type]
    if method == 'random':
        return assign_parts(torch.empty(2, 0, dtype=torch.int64), n,
                            num_parts, 'random', seed=0)
    if topology.is_hetero:
        raise NotImplementedError(
            "split_by='metis' is for homogeneous graphs; for a "
            "heterogeneous graph give the rank of every vertex per node "
            "type (a dictionary of tensors), e.g. from a METIS partition of "
            "its homogeneous form")
    csc = topology.csc[None]
    colptr = csc.colptr.cpu().to(torch.int64)
    dst = torch.repeat_interleave(torch.arange(n), colptr[1:] - colptr[:-1])
    edge_index = torch.stack([csc.row.cpu().to(torch.int64), dst])
    return assign_parts(edge_index, n, num_parts, 'metis', seed=0)


def expansion_weight(csc: Dict[Any, CSCTopology], dst_type: Any,
                     num_nodes: int,
                     counted: Optional[Callable[[Tensor, Any], Tensor]] = None
                     ) -> Tensor:
    r"""How often each vertex of :obj:`dst_type` is expected in a frontier:
    once as a seed, plus once per list of :obj:`csc` that holds it (of the
    source ids :obj:`counted(src, dst_type)` keeps, if given)."""
    weight = torch.ones(num_nodes, dtype=torch.float64)
    for et, c in csc.items():
        if (None if et is None else et[0]) != dst_type:
            continue
        src = c.row.to(torch.int64)
        if counted is not None:
            src = counted(src, dst_type)
        weight += torch.bincount(src, minlength=num_nodes).cpu().to(
            torch.float64)
    return weight


def shard_graph_topology(topology: GraphTopology, device: torch.device,
                         sharding: Optional[TopologySharding] = None,
                         max_fanout: Optional[int] = None) -> GraphTopology:
    r"""Every edge type of :obj:`topology` sharded across this machine's
    processes (a collective; see :func:`shard_topology`), cached per
    topology."""
    sharding = sharding or TopologySharding()
    split = sharding.split_by
    key = (str(device), sharding.replicate_bytes, sharding.replicate_by,
           max_fanout, split if isinstance(split, str) else id(split))
    cached = _SHARDED.get(topology, {}).get(key)
    if cached is not None:
        return cached
    peers = PeerGroup(device=device)
    check_same_graph(peers, topology.content_fingerprint())
    parts = {t: _agreed(peers, lambda t=t: sharding.node_parts(
        topology, peers.world_size, t)) for t in dict.fromkeys(
            None if et is None else et[-1] for et in topology.csc)}
    csc = sharding.shard(topology.csc, peers, max_fanout, parts)
    node_time = None if topology.node_time is None else {
        t: v.to(device) for t, v in topology.node_time.items()}
    out = GraphTopology(csc, topology.num_nodes, node_time,
                        topology.time_attr, topology.weight_attr,
                        topology.fingerprint)
    _SHARDED.setdefault(topology, {})[key] = out
    return out
