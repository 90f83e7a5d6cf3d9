r"""Multi-hop neighbor sampling with vectorized PyTorch ops: the reference
sampling backend of :class:`pyg_orch.HybridNeighborSampler`."""
from typing import Any, Callable, Dict, List, Optional, Tuple

import torch
from torch import Tensor

from pyg_orch.core.buffers import DenseBufferPool
from pyg_orch.sampling.output import MultiHopOutput
from pyg_orch.topology.csc import CSCTopology
from pyg_orch.topology.graph import GraphTopology
from pyg_orch.sampling.neighbors import sample_neighbors
from pyg_orch.sampling.relabel import (
    DenseRelabeler,
    Relabeler,
    SortRelabeler,
)

#: A frontier per node type: (local ids, global ids, subgraph ids or None).
Frontier = Dict[Any, Tuple[Tensor, Tensor, Optional[Tensor]]]


def sample_multi_hop(
    topology: GraphTopology,
    num_neighbors: Dict,
    seeds: Dict,
    replace: bool = False,
    disjoint: bool = False,
    induced: bool = False,
    generator: Optional[torch.Generator] = None,
    buffers: Optional[DenseBufferPool] = None,
    seed_time: Optional[Dict] = None,
    temporal_strategy: str = 'uniform',
    prune_last_hop: Optional[Dict] = None,
    draw: Optional[Callable[..., Optional[Tuple[Tensor, Tensor]]]] = None,
    relabeler: Optional[Callable[[torch.device], Relabeler]] = None,
) -> MultiHopOutput:
    r"""Samples :obj:`len(num_neighbors[edge_type])` hops from :obj:`seeds`.

    Args:
        topology (GraphTopology): The graph.
        num_neighbors (dict): Fan-out per hop for every edge type.
        seeds (dict): Seed node ids per node type (duplicates are kept).
        replace (bool): Sample with replacement.
        disjoint (bool): Give every seed its own subgraph.
        induced (bool): Return all edges between sampled nodes.
        generator (torch.Generator, optional): Random number generator.
        buffers (DenseBufferPool, optional): Dense relabel arrays; without,
            relabeling sorts.
        seed_time (dict, optional): Time of every seed per node type, for
            temporal sampling (requires :obj:`disjoint=True`).
        temporal_strategy (str): :obj:`'uniform'` or :obj:`'last'`.
        prune_last_hop (dict, optional): Boolean masks per node type of nodes
            the last hop does not expand.
        draw (callable, optional): A faster draw for a hop with the arguments
            and result of
            :func:`~pyg_orch.sampling.neighbors.sample_neighbors`, or returning
            :obj:`None` where it does not apply.
        relabeler (callable, optional): Makes a node type's relabeler (given
            the device) where the dense one does not apply (default:
            :class:`~pyg_orch.sampling.relabel.SortRelabeler`)."""
    device = topology.device
    num_hops = max((len(v) for v in num_neighbors.values()), default=0)
    batch_time: Optional[Tensor] = None  # Time bound per subgraph.
    if topology.is_temporal:
        if not disjoint or seed_time is None:
            raise ValueError("Temporal sampling needs 'disjoint=True' and "
                             "a time per seed")
        batch_time = subgraph_times(seed_time, device)
    out = HopBatch(topology.node_types, topology.edge_types, num_hops,
                   topology.num_nodes, disjoint, device, buffers, relabeler)
    try:
        frontier = out.add_seeds(seeds)
        for hop in range(num_hops):
            sampled = {}
            for et in topology.edge_types:
                fanout, dst_t = num_neighbors[et][hop], dst_type(et)
                if fanout == 0 or dst_t not in frontier:
                    continue
                hot = None if prune_last_hop is None or hop < num_hops - 1 \
                    else prune_last_hop.get(dst_t)
                keep, f_global, f_batch = prune(frontier[dst_t], hot)
                if f_global.numel() == 0:
                    continue
                topo = topology.csc[et]
                bound = None if topo.time is None else \
                    batch_time.index_select(0, f_batch)
                src, eid, dst = draw_edges(topo, f_global, fanout, replace,
                                           generator, bound,
                                           temporal_strategy, draw)
                sampled[et] = (src, eid, dst if keep is None else
                               keep.index_select(0, dst))
            frontier = out.add_hop(hop, frontier, sampled)
        return out.output(_induced_edges(topology, out) if induced else None)
    finally:
        out.close()


def draw_edges(csc: CSCTopology, nodes: Tensor, fanout: int,
               replace: bool = False,
               generator: Optional[torch.Generator] = None,
               time_bound: Optional[Tensor] = None,
               temporal_strategy: str = 'uniform',
               draw: Optional[Callable] = None, all_edges: bool = False
               ) -> Tuple[Tensor, Tensor, Tensor]:
    r"""Sources, edge ids and destination indices of sampled in-edges."""
    if all_edges:
        pos, dst_index = sample_neighbors(csc.colptr, nodes, -1)
    else:
        args = (csc.colptr, nodes, fanout, replace, generator)
        kwargs = dict(time=csc.time, time_bound=time_bound,
                      temporal_strategy=temporal_strategy, weight=csc.weight)
        drawn = None if draw is None else draw(*args, **kwargs)
        pos, dst_index = drawn if drawn is not None else sample_neighbors(
            *args, **kwargs, weight_cumsum=csc.weight_cumsum
            if csc.weight is not None and replace else None)
    # A sharded topology finds copied lists by destination:
    dst = nodes.index_select(0, dst_index) if csc.needs_dst else None
    return (csc.neighbors(pos, dst).to(torch.int64),
            csc.edge_ids(pos, dst).to(torch.int64), dst_index)


def prune(entry: Tuple[Tensor, Tensor, Optional[Tensor]],
          hot: Optional[Tensor]
          ) -> Tuple[Optional[Tensor], Tensor, Optional[Tensor]]:
    r"""A frontier entry's kept positions, ids and subgraphs."""
    _, ids, batch = entry
    if hot is None:
        return None, ids, batch
    keep = (~hot.index_select(0, ids)).nonzero().view(-1)
    return keep, ids.index_select(0, keep), \
        None if batch is None else batch.index_select(0, keep)


def src_type(et: Any) -> Any:
    r"""The source node type of :obj:`et`."""
    return None if et is None else et[0]


def dst_type(et: Any) -> Any:
    r"""The destination node type of :obj:`et`."""
    return None if et is None else et[-1]


def subgraph_times(seed_time: Dict[Any, Tensor],
                   device: torch.device) -> Tensor:
    r"""The time bound of every subgraph (seed position) on :obj:`device`."""
    size = max(v.numel() for v in seed_time.values())
    out = next(iter(seed_time.values())).new_zeros(size, device=device)
    for v in seed_time.values():
        out[:v.numel()] = v.to(device)
    return out


class HopBatch:
    r"""A batch built hop by hop, relabeled in order of first appearance."""
    def __init__(self, node_types: List, edge_types: List, num_hops: int,
                 num_nodes: Dict[Any, int], disjoint: bool,
                 device: torch.device,
                 buffers: Optional[DenseBufferPool] = None,
                 relabeler: Optional[Callable[[torch.device],
                                              Relabeler]] = None):
        self.num_nodes, self.disjoint = num_nodes, disjoint
        self.device, self.edge_types = device, edge_types
        dense = buffers is not None and not disjoint
        self.relabel: Dict[Any, Relabeler] = {
            t: DenseRelabeler(buffers.get(t, num_nodes[t], device))
            if dense else (relabeler or SortRelabeler)(device)
            for t in node_types}
        self.nodes: Dict[Any, List[Tensor]] = {t: [] for t in node_types}
        self.batches: Dict[Any, List[Tensor]] = {t: [] for t in node_types}
        self.rows: Dict[Any, List[Tensor]] = {et: [] for et in edge_types}
        self.cols: Dict[Any, List[Tensor]] = {et: [] for et in edge_types}
        self.edges: Dict[Any, List[Tensor]] = {et: [] for et in edge_types}
        self.num_sampled_nodes = {t: [0] * (num_hops + 1)
                                  for t in node_types}
        self.num_sampled_edges = {et: [0] * num_hops for et in edge_types}

    def _keys(self, node_type: Any, ids: Tensor,
              batch: Optional[Tensor]) -> Tensor:
        # Relabeling keys: ids, or (subgraph, id) pairs with `disjoint`.
        if batch is None:
            return ids
        return batch * self.num_nodes[node_type] + ids

    def _append(self, node_type: Any, hop: int, ids: Tensor,
                batch: Optional[Tensor], start: int) -> tuple:
        self.nodes[node_type].append(ids)
        if batch is not None:
            self.batches[node_type].append(batch)
        self.num_sampled_nodes[node_type][hop] = ids.numel()
        return (torch.arange(start, start + ids.numel(), device=self.device),
                ids, batch)

    def add_seeds(self, seeds: Dict[Any, Tensor]) -> Frontier:
        r"""Adds the seeds per node type; returns the first frontier."""
        frontier = {}
        for t, ids in seeds.items():
            ids = ids.to(self.device, torch.int64)
            batch = torch.arange(ids.numel(), device=self.device) \
                if self.disjoint else None
            self.relabel[t].init(self._keys(t, ids, batch))
            frontier[t] = self._append(t, 0, ids, batch, 0)
        return frontier

    def add_hop(self, hop: int, frontier: Frontier,
                sampled: Dict[Any, Tuple[Tensor, Tensor, Tensor]]
                ) -> Frontier:
        r"""Adds a hop's edges per edge type; returns the next frontier."""
        cand: Dict[Any, list] = {}  # Per source node type.
        for et, (src, eid, dst) in sampled.items():
            f_local, _, f_batch = frontier[dst_type(et)]
            cand.setdefault(src_type(et), []).append(
                (et, src, f_local.index_select(0, dst), eid,
                 None if f_batch is None else f_batch.index_select(0, dst)))
        frontier = {}
        for t, parts in cand.items():
            src = torch.cat([p[1] for p in parts])
            batch = torch.cat([p[4] for p in parts]) if self.disjoint \
                else None
            start = self.relabel[t].num_nodes
            local, new = self.relabel[t].add(self._keys(t, src, batch))
            offset = 0
            for et, _, col, eid, _ in parts:
                n = col.numel()
                self.rows[et].append(local[offset:offset + n])
                self.cols[et].append(col)
                self.edges[et].append(eid)
                self.num_sampled_edges[et][hop] = n
                offset += n
            new_batch = None
            if self.disjoint:  # Keys back to (subgraph, id):
                n = self.num_nodes[t]
                new, new_batch = new % n, new // n
            frontier[t] = self._append(t, hop + 1, new, new_batch, start)
        return frontier

    def induced_edges(self, sampled: Dict[Any, Tuple[Tensor, Tensor, Tensor]]
                      ) -> Tuple[Dict, Dict, Dict]:
        r"""The edges among the batch's nodes from all their in-edges."""
        empty = torch.empty(0, dtype=torch.int64, device=self.device)
        rows = {et: empty for et in self.edge_types}
        cols, edges = dict(rows), dict(rows)
        for et, (src, eid, dst) in sampled.items():
            local = self.relabel[src_type(et)].lookup(src)
            keep = local >= 0
            rows[et], cols[et], edges[et] = local[keep], dst[keep], eid[keep]
        return rows, cols, edges

    def node(self) -> Dict[Any, Tensor]:
        r"""The batch's nodes per node type, in order."""
        return {t: self._cat(v) for t, v in self.nodes.items()}

    def output(self, induced: Optional[Tuple[Dict, Dict, Dict]] = None
               ) -> MultiHopOutput:
        r"""The batch (with the edges :obj:`induced` instead, if given)."""
        edges = induced or tuple(
            {et: self._cat(v[et]) for et in self.edge_types}
            for v in (self.rows, self.cols, self.edges))
        batch = {t: self._cat(v) for t, v in self.batches.items()} \
            if self.disjoint else None
        return MultiHopOutput(self.node(), *edges, batch,
                              self.num_sampled_nodes,
                              None if induced else self.num_sampled_edges)

    def close(self) -> None:
        for r in self.relabel.values():
            r.close()

    def _cat(self, parts: List[Tensor]) -> Tensor:
        if len(parts) == 0:
            return torch.empty(0, dtype=torch.int64, device=self.device)
        return parts[0] if len(parts) == 1 else torch.cat(parts)


def _induced_edges(topology: GraphTopology, batch: HopBatch):
    # All edges whose both endpoints were sampled, grouped by destination in
    # local order, then in CSC order (as PyG's induced sampling).
    node = batch.node()
    return batch.induced_edges({
        et: draw_edges(topo, node[dst_type(et)], -1, all_edges=True)
        for et, topo in topology.csc.items()})
