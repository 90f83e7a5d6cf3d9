"""Bottom-layer offload over a partitioned graph."""
from typing import Any, Dict, List, Optional, Tuple

import torch
import torch.distributed as dist
from torch import Tensor

from pyg_orch.topology.csc import CSCTopology
from pyg_orch.offload.bottom_layer import BottomLayerComputer
from pyg_orch.offload.ddp import MachineRanks, process_group_active
from pyg_orch.offload.hetero_layer import (
    HeteroBottomLayerComputer,
    combined_ids,
)
from pyg_orch.offload.hotness import HotSet, split_by_frequency
from pyg_orch.offload.options import OffloadOptions
from pyg_orch.offload.protocol import OffloadableLoader
from pyg_orch.sampling.contract import DEFAULT_PRESAMPLE_BATCHES


def is_partition_loader(loader: Any) -> bool:
    r"""Whether :obj:`loader` samples a partition folder."""
    return isinstance(loader, OffloadableLoader) and \
        loader.partition_batches is not None


def check_partition_loader(loader: Any) -> Any:
    r"""The sampler of a partitioned :obj:`loader`, checked."""
    part = loader.partition_batches.partition
    if not part.is_hetero and not isinstance(part.x, Tensor):
        raise ValueError("BottomLayerOffload needs node features: the "
                         "partition has no node attribute 'x'")
    if loader.partition_batches.input_nodes is None:  # Label edges.
        raise NotImplementedError(
            "BottomLayerOffload over a HybridLinkNeighborLoader of a "
            "partitioned graph is not supported yet; use a "
            "HybridNeighborLoader over the partition, or an in-memory graph")
    sampler = loader.node_sampler
    if sampler.num_hops == 0:
        raise ValueError("BottomLayerOffload needs at least one hop")
    modes = [name for name, on in (
        ('temporal sampling (time_attr)', sampler.is_temporal),
        (f"subgraph_type='{sampler.subgraph_type.value}'",
         sampler.subgraph_type.value != 'directional'))
        if on]
    if modes:
        raise NotImplementedError(
            f"BottomLayerOffload on a partition folder's loader does not "
            f"support {', '.join(modes)} yet: its CPU side samples the hot "
            f"vertices' in-neighbors regardless of time, as directional "
            f"subgraphs")
    return sampler


class HaloTable:
    r"""The feature rows the CPU side reads on a partition (ascending global
    :obj:`ids`), and the hot candidates' in-edges :obj:`csc` over them."""
    def __init__(self, ids: Tensor, x: Tensor,
                 csc: Optional[CSCTopology] = None):
        self.ids, self.x, self.csc = ids, x, csc

    def _find(self, global_ids: Tensor) -> Tuple[Tensor, Tensor]:
        # The row of each id (clamped where it has none) and whether it has.
        global_ids = global_ids.to(torch.int64)
        if self.ids.numel() == 0:
            return (torch.zeros_like(global_ids),
                    torch.zeros(global_ids.shape, dtype=torch.bool))
        pos = torch.searchsorted(self.ids, global_ids).clamp_(
            max=self.ids.numel() - 1)
        return pos, self.ids[pos] == global_ids

    def rows(self, global_ids: Tensor) -> Tensor:
        r"""The rows of :obj:`global_ids`, which must be in the table."""
        pos, found = self._find(global_ids)
        if not bool(found.all()):
            raise KeyError('some vertices have no row in the halo table')
        return pos

    def known(self, global_ids: Tensor) -> Tensor:
        r"""Whether each of :obj:`global_ids` has a row."""
        return self._find(global_ids)[1]

    def index_select(self, dim: int, global_ids: Tensor) -> Tensor:
        r"""The features of :obj:`global_ids`."""
        return self.x.index_select(dim, self.rows(global_ids))


def _of_type(value: Any, node_type: Any) -> Any:
    # A partition's per-node-type value (the value itself when homogeneous).
    return value if node_type is None else value[node_type]


def count_part_accesses(loader: Any, num_batches: int, seed: Optional[int]
                        ) -> Tuple[Dict[Any, Tensor], int]:
    r"""Bottom-hop access counts of this rank's seeds; a collective."""
    sampler = loader.node_sampler
    num = max(1, min(int(num_batches), len(loader)))
    seeds = loader.partition_batches.input_nodes
    gen = torch.Generator().manual_seed(0 if seed is None else int(seed))
    seeds = seeds[torch.randperm(seeds.numel(), generator=gen)]
    batches = list(torch.split(seeds, loader.batch_size))[:num]
    batches += [seeds[:0]] * (num - len(batches))
    counts = {t: torch.zeros(n, dtype=torch.int64)
              for t, n in sampler.num_nodes.items()}
    hops = sampler.num_hops
    batches_of = loader.partition_batches
    hetero = batches_of.partition.is_hetero
    with sampler.presampling():
        for batch in batches:
            out = sampler.sample_from_nodes(
                {batches_of.input_type: batch} if hetero else batch)
            node, nums = out.node, out.num_sampled_nodes
            if not hetero:
                node, nums = {None: node}, {None: nums}
            for t, ids in node.items():
                upper = ids[:sum(nums[t][:hops])].cpu()
                counts[t] += torch.bincount(upper, minlength=counts[t].numel())
    return counts, num


def select_part_hot_nodes(loader: Any, node_types: List[Any],
                          hot_ratio: float, num_batches: int,
                          seed: Optional[int]) -> HotSet:
    r"""This rank's hot candidates among its part's; a collective."""
    part = loader.partition_batches.partition
    counts, num = count_part_accesses(loader, num_batches, seed)
    mine, total = [], 0
    for t in node_types:
        owned = torch.zeros(counts[t].numel(), dtype=torch.bool)
        ids = _of_type(part.node_ids, t).to(torch.int64)
        owned[ids] = True
        mine.append(torch.where(owned, counts[t], 0))
        total += ids.numel()
    hot, cache = split_by_frequency(torch.cat(mine), hot_ratio, 0.0, total)
    return HotSet(hot, cache, torch.cat([counts[t] for t in node_types]), num)


def _in_edges(part: Any, edge_type: Any, nodes: Tensor
              ) -> Tuple[Tensor, Tensor, Tensor]:
    # The in-edges of `nodes`: sources, destinations and CSC positions.
    csc = _of_type(part.csc, edge_type)
    dst_type = None if edge_type is None else edge_type[-1]
    local = part.to_local(nodes, dst_type) if nodes.numel() else nodes
    start = csc.colptr[local].to(torch.int64)
    deg = csc.colptr[local + 1].to(torch.int64) - start
    owner = torch.repeat_interleave(torch.arange(nodes.numel()), deg)
    offset = torch.arange(owner.numel()) - torch.repeat_interleave(
        torch.cumsum(deg, 0) - deg, deg)
    pos = start[owner] + offset
    return csc.row.index_select(0, pos).to(torch.int64), owner, pos


def build_halo_tables(loader: Any, candidates: Tensor, node_types: List[Any],
                      offsets: Dict[Any, int], edge_types: List[Any],
                      max_rows: int
                      ) -> Tuple[Dict[Any, HaloTable], Dict[Any, HaloTable],
                                 Tensor]:
    r"""The tables of the longest prefix of :obj:`candidates` within
    :obj:`max_rows` rows: per node type, per edge type; a collective."""
    part = loader.partition_batches.partition
    weight_attr = loader.node_sampler.weight_attr
    k = candidates.numel()
    starts = torch.tensor([offsets[t] for t in node_types])
    kind = torch.bucketize(candidates, starts, right=True) - 1
    mine = {t: (kind == i).nonzero().view(-1)
            for i, t in enumerate(node_types)}  # Positions per type.
    local_ids = {t: candidates[pos] - offsets[t] for t, pos in mine.items()}
    # Source and destination type per edge type (homogeneous: None, None):
    ends = {et: (None, None) if et is None else (et[0], et[-1])
            for et in edge_types}
    # Every row a candidate needs, with the candidate's position:
    edges, need = {}, {}
    for t, pos in mine.items():
        need.setdefault(t, []).append((local_ids[t], pos))
    for et in edge_types:
        s, d = ends[et]
        src, owner, pos = _in_edges(part, et, local_ids[d])
        attrs = part.edge_attrs if et is None else \
            part.edge_attrs.get(et, {})
        weight = None if weight_attr is None else attrs.get(weight_attr)
        edges[et] = (src, owner,
                     None if weight is None else weight.index_select(0, pos))
        need.setdefault(s, []).append((src, mine[d][owner]))
    added = torch.zeros(k + 1, dtype=torch.int64)
    found = {}
    for t, pieces in need.items():
        ids, inv = torch.unique(torch.cat([p[0] for p in pieces]),
                                return_inverse=True)
        first = torch.full((ids.numel(), ), k,
                           dtype=torch.int64).scatter_reduce(
            0, inv, torch.cat([p[1] for p in pieces]), 'amin')
        added += torch.bincount(first, minlength=k + 1)
        found[t] = (ids, first)
    keep = int((torch.cumsum(added[:k], 0) <= max_rows).sum())
    ids = {t: ids[first < keep] for t, (ids, first) in found.items()}
    # Every rank gathers once (rows of other parts come over):
    gather = loader.partition_batches.gather
    if part.is_hetero:
        got = gather.gather(ids)
        rows = {t: got[t]['x'].cpu() for t in ids}
    else:
        rows = {None: gather.gather(ids[None])['x'].cpu()}
    tables = {t: HaloTable(ids[t], rows[t], None) for t in ids}
    by_edge = {}
    for et in edge_types:
        s, d = ends[et]
        src, owner, weight = edges[et]
        kept = mine[d] < keep
        num_kept = int(kept.sum())
        # The kept candidates' in-edges over the tables' rows, by column:
        col = torch.searchsorted(ids[d], local_ids[d][:num_kept])
        on = kept[owner]
        row = torch.searchsorted(ids[s], src[on])
        order = torch.sort(col[owner[on]], stable=True).indices
        degree = torch.bincount(owner[on], minlength=num_kept)
        counts = torch.zeros(ids[d].numel(), dtype=torch.int64)
        counts[col] = degree[:num_kept]
        colptr = torch.cat([counts.new_zeros(1), torch.cumsum(counts, 0)])
        by_edge[et] = HaloTable(ids[d], rows[d], CSCTopology(
            colptr, row[order], None, ids[s].numel(),
            weight=None if weight is None else weight[on][order]))
    return tables, by_edge, candidates[:keep]


def build_halo(loader: Any, candidates: Tensor, max_rows: int
               ) -> Tuple[HaloTable, Tensor]:
    r"""The homogeneous :func:`build_halo_tables`; a collective."""
    _, by_edge, kept = build_halo_tables(loader, candidates, [None],
                                         {None: 0}, [None], max_rows)
    return by_edge[None], kept


def part_runtime_inputs(loader: Any, first: Any, ratio: float,
                        options: OffloadOptions
                        ) -> Tuple[HotSet, Any, Any, int]:
    r"""Candidates, computer, tables and the part's vertices on a partition
    (:obj:`first`: the first layer, per edge type if a dictionary)."""
    sampler = loader.node_sampler
    part = loader.partition_batches.partition
    hetero = isinstance(first, dict)
    edge_types = list(first) if hetero else [None]
    node_types, offsets = combined_ids(edge_types, sampler.num_nodes) \
        if hetero else ([None], {None: 0})
    # The same number on every rank (an epoch has as many batches on all):
    num_batches = options.num_presample_batches or min(
        len(loader), DEFAULT_PRESAMPLE_BATCHES)
    selection = select_part_hot_nodes(loader, node_types, ratio, num_batches,
                                      options.seed)
    num_nodes = sum(int(part.node_ids[t].numel()) for t in node_types) \
        if hetero else part.num_nodes
    tables, by_edge, selection.hot_nodes = build_halo_tables(
        loader, selection.hot_nodes, node_types, offsets, edge_types,
        max(num_nodes, 1))
    fanouts = {et: -1 if options.full_neighbors is True else
               sampler.bottom_fanout(et) for et in edge_types}

    def make_part(et, conv, k, seed):
        table = by_edge[et]
        return BottomLayerComputer(
            conv, table.x, table.csc, k, replace=sampler.replace, seed=seed,
            autocast_dtype=options.cpu_autocast, table=table,
            x_src=None if et is None or et[0] == et[-1] else tables[et[0]].x)

    if not hetero:
        return selection, make_part(None, first, fanouts[None],
                                    options.seed), by_edge[None], num_nodes
    computer = HeteroBottomLayerComputer(
        first, {}, {}, fanouts, {t: sampler.num_nodes[t] for t in node_types},
        seed=options.seed, autocast_dtype=options.cpu_autocast,
        make_part=make_part)
    return selection, computer, tables, num_nodes


def partition_ranks(loader: Any) -> Optional[MachineRanks]:
    r"""The ranks that sample the partitioned graph together."""
    if not process_group_active():
        return None
    group = loader.partition_batches.group
    if group is None:
        group = dist.group.WORLD
    ranks = MachineRanks(group)
    return ranks if ranks.size > 1 else None


def build_key(options: OffloadOptions) -> Tuple[Any, ...]:
    r"""The options every rank must pass alike on a partition."""
    return (options.hot_ratio, options.measure,
            repr(options.autotune), options.num_presample_batches)


def agree_on_build(ranks: Optional[MachineRanks],
                   error: Optional[BaseException], key: Any) -> None:
    r"""Raises on every rank where another one failed; a collective."""
    if ranks is None:
        if error is not None:
            raise error
        return
    mine = (None if error is None else
            f'{type(error).__name__}: {error}', key)
    everything: list = [None] * ranks.size
    dist.all_gather_object(everything, mine, group=ranks.group)
    if error is not None:
        raise error
    for r, (err, _) in enumerate(everything):
        if err is not None:
            raise ValueError(
                f"BottomLayerOffload: rank {r} could not build its offload, "
                f"so no rank can (building it is a collective over the "
                f"ranks of the partitioned loader): {err}")
    for r, (_, other) in enumerate(everything):
        if other != key:
            raise ValueError(
                f"BottomLayerOffload: rank {r} passed other options than "
                f"this rank (hot_ratio, measurement, autotune, "
                f"num_presample_batches: {other} against {key}); every rank "
                f"must build the offload with the same options")
