r"""Multi-hop neighbor sampling with vectorized PyTorch ops: the reference
sampling backend of :class:`pyg_orch.HybridNeighborSampler`."""
from typing import Callable, Dict, List, Optional, Tuple

import torch
from torch import Tensor

from pyg_orch.core.buffers import DenseBufferPool
from pyg_orch.sampling.output import MultiHopOutput
from pyg_orch.topology.graph import GraphTopology
from pyg_orch.sampling.neighbors import sample_neighbors
from pyg_orch.sampling.relabel import (
    DenseRelabeler,
    Relabeler,
    SortRelabeler,
)


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
    edge_types = topology.edge_types
    node_types = topology.node_types
    num_hops = max((len(v) for v in num_neighbors.values()), default=0)

    relabel: Dict[object, Relabeler] = {}
    nodes: Dict[object, List[Tensor]] = {t: [] for t in node_types}
    batches: Dict[object, List[Tensor]] = {t: [] for t in node_types}
    num_sampled_nodes = {t: [0] * (num_hops + 1) for t in node_types}
    # Frontier per node type: (local ids, global ids, batch ids or None).
    frontier: Dict[object, tuple] = {}

    for t in node_types:
        if buffers is not None and not disjoint:
            relabel[t] = DenseRelabeler(
                buffers.get(t, topology.num_nodes[t], device))
        else:
            relabel[t] = (relabeler or SortRelabeler)(device)

    # Time bound per subgraph (batch id), for temporal sampling:
    batch_time: Optional[Tensor] = None
    if topology.is_temporal:
        if not disjoint or seed_time is None:
            raise ValueError("Temporal sampling needs 'disjoint=True' and "
                             "a time per seed")
        size = max(s.numel() for s in seeds.values())
        for t, time in seed_time.items():
            if batch_time is None:
                batch_time = time.new_zeros(size).to(device)
            batch_time[:time.numel()] = time.to(device)

    try:
        for t, seed in seeds.items():
            seed = seed.to(device, torch.int64)
            batch = None
            if disjoint:
                batch = torch.arange(seed.numel(), device=device)
                relabel[t].init(batch * topology.num_nodes[t] + seed)
            else:
                relabel[t].init(seed)
            nodes[t].append(seed)
            if batch is not None:
                batches[t].append(batch)
            num_sampled_nodes[t][0] = seed.numel()
            frontier[t] = (torch.arange(seed.numel(), device=device), seed,
                           batch)

        rows = {et: [] for et in edge_types}
        cols = {et: [] for et in edge_types}
        edges = {et: [] for et in edge_types}
        num_sampled_edges = {et: [0] * num_hops for et in edge_types}

        for hop in range(num_hops):
            # Candidates per source node type, in edge type order:
            cand: Dict[object, list] = {}
            for et in edge_types:
                fanout = num_neighbors[et][hop]
                src_t, dst_t = (None, None) if et is None else (et[0], et[-1])
                if fanout == 0 or dst_t not in frontier:
                    continue
                f_local, f_global, f_batch = frontier[dst_t]
                if (prune_last_hop is not None and hop == num_hops - 1
                        and prune_last_hop.get(dst_t) is not None):
                    keep = ~prune_last_hop[dst_t].index_select(0, f_global)
                    f_local, f_global = f_local[keep], f_global[keep]
                    f_batch = None if f_batch is None else f_batch[keep]
                if f_global.numel() == 0:
                    continue
                topo = topology.csc[et]
                bound = None
                if topo.time is not None:
                    bound = batch_time.index_select(0, f_batch)
                args = (topo.colptr, f_global, fanout, replace, generator)
                kwargs = dict(time=topo.time, time_bound=bound,
                              temporal_strategy=temporal_strategy,
                              weight=topo.weight)
                drawn = None if draw is None else draw(*args, **kwargs)
                if drawn is None:
                    drawn = sample_neighbors(
                        *args, **kwargs, weight_cumsum=topo.weight_cumsum
                        if topo.weight is not None and replace else None)
                pos, dst_index = drawn
                dst = f_global.index_select(0, dst_index) \
                    if topo.needs_dst else None
                src = topo.neighbors(pos, dst).to(torch.int64)
                eid = topo.edge_ids(pos, dst).to(torch.int64)
                batch = None if f_batch is None else f_batch.index_select(
                    0, dst_index)
                cand.setdefault(src_t, []).append(
                    (et, src, batch, f_local.index_select(0, dst_index), eid))

            next_frontier = {}
            for src_t, parts in cand.items():
                src = torch.cat([p[1] for p in parts])
                batch = None
                if disjoint:
                    batch = torch.cat([p[2] for p in parts])
                    keys = batch * topology.num_nodes[src_t] + src
                else:
                    keys = src
                before = relabel[src_t].num_nodes
                local, new_keys = relabel[src_t].add(keys)
                append_hop_edges(
                    ((et, col_local, eid) for et, _, _, col_local, eid
                     in parts), local, hop, rows, cols, edges,
                    num_sampled_edges)
                new_batch = None
                if disjoint:
                    n_src = topology.num_nodes[src_t]
                    new_batch = new_keys // n_src
                    new_global = new_keys % n_src
                    batches[src_t].append(new_batch)
                else:
                    new_global = new_keys
                nodes[src_t].append(new_global)
                num_sampled_nodes[src_t][hop + 1] = new_global.numel()
                next_frontier[src_t] = (
                    torch.arange(before, before + new_global.numel(),
                                 device=device), new_global, new_batch)
            frontier = next_frontier

        def _cat(parts: List[Tensor]) -> Tensor:
            if len(parts) == 0:
                return torch.empty(0, dtype=torch.int64, device=device)
            return parts[0] if len(parts) == 1 else torch.cat(parts)

        out_node = {t: _cat(nodes[t]) for t in node_types}
        out_batch = {t: _cat(batches[t])
                     for t in node_types} if disjoint else None

        if induced:
            out_row, out_col, out_edge = _induced_edges(topology, out_node,
                                                        relabel)
            num_sampled_edges = None
        else:
            out_row = {et: _cat(rows[et]) for et in edge_types}
            out_col = {et: _cat(cols[et]) for et in edge_types}
            out_edge = {et: _cat(edges[et]) for et in edge_types}
    finally:
        for r in relabel.values():
            r.close()

    return MultiHopOutput(out_node, out_row, out_col, out_edge, out_batch,
                          num_sampled_nodes, num_sampled_edges)


def append_hop_edges(parts, local: Tensor, hop: int, rows: Dict,
                     cols: Dict, edges: Dict,
                     num_sampled_edges: Dict) -> None:
    r"""Appends one hop's sampled edges to the batch's lists: :obj:`parts`
    yields :obj:`(edge_type, col, edge_id)` and :obj:`local` holds the sources'
    batch-local ids."""
    offset = 0
    for et, col, eid in parts:
        n = col.numel()
        rows[et].append(local[offset:offset + n])
        cols[et].append(col)
        edges[et].append(eid)
        num_sampled_edges[et][hop] = n
        offset += n


def _induced_edges(topology: GraphTopology, node: Dict,
                   relabel: Dict[object, Relabeler]):
    # All edges whose both endpoints were sampled, grouped by destination in
    # local order, then in CSC order (as PyG's induced sampling).
    rows, cols, edges = {}, {}, {}
    for et, topo in topology.csc.items():
        src_t, dst_t = (None, None) if et is None else (et[0], et[-1])
        dst = node[dst_t]
        pos, dst_index = sample_neighbors(topo.colptr, dst, -1)
        src_local = relabel[src_t].lookup(
            topo.neighbors(pos, dst.index_select(0, dst_index)).to(
                torch.int64))
        keep = src_local >= 0
        pos = pos[keep]
        rows[et] = src_local[keep]
        cols[et] = dst_index[keep]
        edges[et] = topo.edge_ids(pos, dst.index_select(
            0, dst_index[keep])).to(torch.int64)
    return rows, cols, edges
