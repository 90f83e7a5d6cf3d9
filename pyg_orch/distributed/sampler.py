r"""Collective neighbor sampling over a partitioned graph (DSP-style): every
rank holds one part (:class:`~pyg_orch.distributed.GraphPartition`); each
hop, the frontier vertices are sent to the parts that own them (one
:func:`~pyg_orch.distributed.collective.exchange`), sampled there from
their in-edges, and the sampled neighbors and edge ids are sent back (a
second exchange), then relabeled locally as
:func:`pyg_orch.sampling.multi_hop.sample_multi_hop` does, so that the hop
order, the edge order and the relabeling are those of the single-machine
sampler (with full fan-out, the very same output)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence

import torch
from torch import Tensor

from pyg_orch.distributed.collective import exchange, group_rank, group_size
from pyg_orch.sampling.neighbors import sample_neighbors
from pyg_orch.sampling.relabel import SortRelabeler

__all__ = ['DistributedNeighborSampler', 'SamplingStats']


@dataclass
class SamplingStats:
    r"""Counts of the last :meth:`DistributedNeighborSampler.sample_from_nodes`
    call on this rank.

    Attributes:
        local_requests (int): Frontier vertices this part owns.
        remote_requests (int): Frontier vertices sent to other parts.
        served_requests (int): Vertices this part sampled for other parts.
        bytes_sent (int): Payload bytes sent to other ranks (ids and
            sampled neighbors; the size exchanges not counted).
        bytes_received (int): Payload bytes received from other ranks.
    """
    local_requests: int = 0
    remote_requests: int = 0
    served_requests: int = 0
    bytes_sent: int = 0
    bytes_received: int = 0
    per_hop: List[Dict[str, int]] = field(default_factory=list)


def _nbytes(parts: Sequence[Tensor], skip: int) -> int:
    return sum(t.numel() * t.element_size()
               for r, t in enumerate(parts) if r != skip)


class DistributedNeighborSampler:
    r"""Samples multi-hop neighborhoods of seeds over a graph partitioned
    with :func:`~pyg_orch.distributed.partition_graph`, one part per rank
    of :obj:`group` (part :obj:`k` on rank :obj:`k`).

    :meth:`sample_from_nodes` is a **collective**: every rank calls it once
    per step, with its own seeds (possibly none). Sampling is uniform,
    without replacement, each part drawing from its own :obj:`generator`
    for the vertices it owns.

    Args:
        partition (GraphPartition): This rank's part
            (:func:`~pyg_orch.distributed.load_partition`); homogeneous
            graphs only.
        num_neighbors (List[int]): The fan-out of every hop (:obj:`-1`: all
            in-neighbors).
        group (ProcessGroup, optional): The process group (default: the
            default group); its size must be the number of parts and rank
            :obj:`k` must hold part :obj:`k`.
        generator (torch.Generator, optional): The random number generator
            of this part's draws.
    """
    def __init__(self, partition, num_neighbors: Sequence[int],
                 group: Optional[Any] = None,
                 generator: Optional[torch.Generator] = None,
                 replace: bool = False):
        if getattr(partition, 'is_hetero', False):
            raise NotImplementedError(
                'DistributedNeighborSampler: heterogeneous partitions are '
                'not supported yet (homogeneous graphs only)')
        if replace:
            raise NotImplementedError(
                'DistributedNeighborSampler: sampling with replacement is '
                'not supported yet')
        num_neighbors = list(num_neighbors)
        for k in num_neighbors:
            if isinstance(k, bool) or not isinstance(k, int) or k < -1:
                raise ValueError(f"'num_neighbors' must be integers >= -1 "
                                 f"(got {num_neighbors!r})")
        world_size, rank = group_size(group), group_rank(group)
        if world_size != partition.num_parts:
            raise ValueError(f'the process group has {world_size} ranks but '
                             f'the graph has {partition.num_parts} parts; '
                             f'run one rank per part')
        if rank != partition.part:
            raise ValueError(f'rank {rank} must hold part {rank} (got part '
                             f'{partition.part})')
        self.partition = partition
        self.num_neighbors = num_neighbors
        self.group = group
        self.generator = generator
        self.rank, self.world_size = rank, world_size
        self.num_nodes = int(partition.node_part.numel())
        self.stats = SamplingStats()

    @property
    def num_hops(self) -> int:
        return len(self.num_neighbors)

    def _check_seeds(self, seeds) -> Tensor:
        seeds = torch.as_tensor(seeds)
        if seeds.dim() != 1 or (seeds.numel() and (
                seeds.is_floating_point() or seeds.dtype == torch.bool)):
            raise ValueError(f"'seeds' must be a 1-D tensor of node ids "
                             f"(got shape {tuple(seeds.shape)}, "
                             f"{seeds.dtype})")
        seeds = seeds.to(torch.int64)
        if seeds.numel() and (int(seeds.min()) < 0
                              or int(seeds.max()) >= self.num_nodes):
            raise ValueError(f"'seeds' must be in [0, {self.num_nodes})")
        return seeds

    def _serve(self, requests: List[Tensor], fanout: int) -> List[Tensor]:
        r"""Samples the in-neighbors of the vertices other ranks asked for:
        for each rank, its counts per vertex, then the sources, then the
        edge ids."""
        part = self.partition
        sizes = [int(r.numel()) for r in requests]
        req = torch.cat(requests) if requests else torch.empty(
            0, dtype=torch.int64)
        local = part.local_id[req] if req.numel() else req
        pos, dst_index = sample_neighbors(part.csc.colptr, local, fanout,
                                          False, self.generator)
        src = part.csc.row[pos].to(torch.int64)
        eid = part.csc.edge_id[pos].to(torch.int64)
        counts = torch.bincount(dst_index, minlength=req.numel()) \
            if req.numel() else torch.empty(0, dtype=torch.int64)
        out, start, edge_start = [], 0, 0
        for n in sizes:
            c = counts[start:start + n]
            e = int(c.sum())
            out.append(torch.cat([c, src[edge_start:edge_start + e],
                                  eid[edge_start:edge_start + e]]))
            start += n
            edge_start += e
        self.stats.served_requests += sum(
            n for r, n in enumerate(sizes) if r != self.rank)
        return out

    def _hop(self, frontier: Tensor, fanout: int):
        r"""One collective hop: the sampled (source, edge id, frontier
        index) of every in-edge drawn for :obj:`frontier`, grouped by
        destination in frontier order."""
        owner = self.partition.node_part[frontier].to(torch.int64)
        order = torch.sort(owner, stable=True).indices
        per_rank = torch.bincount(owner, minlength=self.world_size).tolist()
        index = list(torch.split(order, per_rank))
        send = [frontier[i] for i in index]
        self.stats.local_requests += per_rank[self.rank]
        self.stats.remote_requests += frontier.numel() - per_rank[self.rank]
        self.stats.bytes_sent += _nbytes(send, self.rank)
        requests = exchange(send, self.group)
        self.stats.bytes_received += _nbytes(requests, self.rank)
        replies = self._serve(requests, fanout)
        self.stats.bytes_sent += _nbytes(replies, self.rank)
        answers = exchange(replies, self.group)
        self.stats.bytes_received += _nbytes(answers, self.rank)

        srcs, eids, dsts = [], [], []
        for idx, ans in zip(index, answers):
            n = idx.numel()
            counts = ans[:n]
            e = int(counts.sum())
            srcs.append(ans[n:n + e])
            eids.append(ans[n + e:n + 2 * e])
            dsts.append(idx.repeat_interleave(counts))
        src, eid, dst = torch.cat(srcs), torch.cat(eids), torch.cat(dsts)
        # Grouped by destination in frontier order, as sample_neighbors:
        perm = torch.sort(dst, stable=True).indices
        return src[perm], eid[perm], dst[perm]

    def sample_from_nodes(self, seeds):
        r"""Samples the neighborhoods of :obj:`seeds` (global ids; may be
        empty) with the help of every other rank: a collective, every rank
        calls it once per step.

        Returns:
            torch_geometric.sampler.SamplerOutput: :obj:`node` (global ids,
            seeds first, duplicates kept as in PyG), :obj:`row`,
            :obj:`col` (indices into :obj:`node`), :obj:`edge` (global edge
            ids), :obj:`num_sampled_nodes` and :obj:`num_sampled_edges`
            per hop.
        """
        from torch_geometric.sampler import SamplerOutput
        seeds = self._check_seeds(seeds)
        self.stats = SamplingStats()
        relabel = SortRelabeler(torch.device('cpu'))
        relabel.init(seeds)
        nodes, rows, cols, edges = [seeds], [], [], []
        num_sampled_nodes = [seeds.numel()] + [0] * self.num_hops
        num_sampled_edges = [0] * self.num_hops
        f_local, f_global = torch.arange(seeds.numel()), seeds
        try:
            for hop, fanout in enumerate(self.num_neighbors):
                if fanout == 0:  # As sample_multi_hop: nothing more.
                    f_local = f_global = torch.empty(0, dtype=torch.int64)
                    continue
                before = dict(vars(self.stats))
                src, eid, dst = self._hop(f_global, fanout)
                self.stats.per_hop.append({
                    k: getattr(self.stats, k) - before[k]
                    for k in before if k != 'per_hop'})
                if f_global.numel() == 0:
                    f_local = f_global = torch.empty(0, dtype=torch.int64)
                    continue
                start = relabel.num_nodes
                local, new = relabel.add(src)
                rows.append(local)
                cols.append(f_local.index_select(0, dst))
                edges.append(eid)
                num_sampled_edges[hop] = src.numel()
                nodes.append(new)
                num_sampled_nodes[hop + 1] = new.numel()
                f_local = torch.arange(start, start + new.numel())
                f_global = new
        finally:
            relabel.close()

        def _cat(parts):
            return torch.cat(parts) if parts else torch.empty(
                0, dtype=torch.int64)

        return SamplerOutput(node=_cat(nodes), row=_cat(rows),
                             col=_cat(cols), edge=_cat(edges),
                             num_sampled_nodes=num_sampled_nodes,
                             num_sampled_edges=num_sampled_edges)
