"""Bottom-layer offload over a partitioned graph
(:class:`~pyg_orch.distributed.DistributedNeighborLoader`, e.g.
:obj:`HybridNeighborLoader('parts/', ...)`), per machine: each rank's hot
vertices are vertices its own part holds, chosen from its own pre-sampled
batches (a collective: every rank pre-samples as many). Their in-edges are
in the part; the features of their in-neighbors owned by other parts are
fetched once, when the offload is built (one
:meth:`~pyg_orch.distributed.DistributedFeatureGather.gather`), into a
table of at most as many rows as the part owns vertices (:class:`HaloTable`).
The sampler then skips the hot vertices' last hop, as on one machine."""
from typing import Any, Optional, Tuple

import torch
import torch.distributed as dist
from torch import Tensor

from pyg_orch.core.csc import CSCTopology
from pyg_orch.offload.bottom_layer import BottomLayerComputer
from pyg_orch.offload.ddp import MachineRanks, process_group_active
from pyg_orch.offload.hotness import HotSet
from pyg_orch.offload.options import OffloadOptions
from pyg_orch.sampling.contract import DEFAULT_PRESAMPLE_BATCHES


def is_partition_loader(loader: Any) -> bool:
    r"""Whether :obj:`loader` samples a partitioned graph."""
    from pyg_orch.distributed.loader import DistributedNeighborLoader
    return isinstance(loader, DistributedNeighborLoader)


def check_partition_loader(loader: Any) -> Any:
    r"""Returns the sampler of a partitioned :obj:`loader`; raises if
    offload cannot work with it."""
    part = loader.partition
    if part.is_hetero:
        raise NotImplementedError(
            "BottomLayerOffload on a partitioned graph supports homogeneous "
            "partitions only (this one was cut from a HeteroData)")
    if not isinstance(part.x, Tensor):
        raise ValueError("BottomLayerOffload needs node features: the "
                         "partition has no node attribute 'x'")
    sampler = loader.node_sampler
    if sampler.num_hops == 0:
        raise ValueError("BottomLayerOffload needs at least one hop")
    return sampler


class HaloTable:
    r"""The feature rows the CPU side of offload reads on a partition: those
    of a set of vertices (the hot candidates and their in-neighbors, owned
    by any part), in ascending global id order, and the in-edges of the
    candidates over these rows.

    Args:
        ids (torch.Tensor): Global ids of the rows, ascending.
        x (torch.Tensor): Their features.
        csc (CSCTopology): In-edges over row numbers (columns: rows).
    """
    def __init__(self, ids: Tensor, x: Tensor, csc: CSCTopology):
        self.ids, self.x, self.csc = ids, x, csc

    def rows(self, global_ids: Tensor) -> Tensor:
        r"""The rows of :obj:`global_ids`, which must be in the table."""
        global_ids = global_ids.to(torch.int64)
        pos = torch.searchsorted(self.ids, global_ids).clamp_(
            max=max(self.ids.numel() - 1, 0))
        if global_ids.numel() and (self.ids.numel() == 0 or not bool(
                torch.equal(self.ids[pos], global_ids))):
            raise KeyError('some vertices have no row in the halo table')
        return pos

    def known(self, global_ids: Tensor) -> Tensor:
        r"""Whether each of :obj:`global_ids` has a row."""
        global_ids = global_ids.to(torch.int64)
        if self.ids.numel() == 0:
            return torch.zeros(global_ids.shape, dtype=torch.bool)
        pos = torch.searchsorted(self.ids, global_ids).clamp_(
            max=self.ids.numel() - 1)
        return self.ids[pos] == global_ids

    def index_select(self, dim: int, global_ids: Tensor) -> Tensor:
        r"""The features of :obj:`global_ids` (as :obj:`x[global_ids]` of
        the whole graph)."""
        return self.x.index_select(dim, self.rows(global_ids))


class PartBottomLayerComputer(BottomLayerComputer):
    r"""A :class:`~pyg_orch.offload.bottom_layer.BottomLayerComputer` over
    a :class:`HaloTable`: vertices are named by their global ids, sampled
    and read in the table."""
    def __init__(self, layer: torch.nn.Module, table: HaloTable,
                 num_neighbors: int, seed: Optional[int] = None,
                 autocast_dtype: Optional[torch.dtype] = None):
        super().__init__(layer, table.x, table.csc, num_neighbors,
                         replace=False, seed=seed, dedup=False,
                         autocast_dtype=autocast_dtype)
        self.table = table

    def subgraph(self, nodes: Tensor, generator: Optional[torch.Generator]
                 ) -> Tuple[Tensor, Tensor]:
        return super().subgraph(self.table.rows(nodes), generator)


def count_part_accesses(loader: Any, num_batches: int, seed: Optional[int]
                        ) -> Tuple[Tensor, int]:
    r"""How often every vertex (global ids) lands in hops :obj:`0, ...,
    L - 1` of :obj:`num_batches` batches of this rank's seeds (at most an
    epoch), drawn without pruning, the sampler's state restored after; a
    collective (every rank draws the same number of batches)."""
    sampler = loader.node_sampler
    num_nodes = sampler.num_nodes[None]
    num = max(1, min(int(num_batches), len(loader)))
    seeds = loader.input_nodes
    gen = torch.Generator().manual_seed(0 if seed is None else int(seed))
    seeds = seeds[torch.randperm(seeds.numel(), generator=gen)]
    batches = list(torch.split(seeds, loader.batch_size))[:num]
    batches += [seeds[:0]] * (num - len(batches))
    counts = torch.zeros(num_nodes, dtype=torch.int64)
    hops = sampler.num_hops
    with sampler.presampling():
        for batch in batches:
            out = sampler.sample_from_nodes(batch)
            upper = out.node[:sum(out.num_sampled_nodes[:hops])].cpu()
            counts += torch.bincount(upper, minlength=num_nodes)
    return counts, num


def select_part_hot_nodes(loader: Any, hot_ratio: float, num_batches: int,
                          seed: Optional[int]) -> HotSet:
    r"""The hot candidates of this rank: the :obj:`hot_ratio` fraction of
    its part's vertices accessed most often in pre-sampled batches
    (:func:`count_part_accesses`); a collective."""
    part = loader.partition
    counts, num = count_part_accesses(loader, num_batches, seed)
    owned = counts.new_zeros(counts.numel(), dtype=torch.bool)
    owned[part.node_ids.to(torch.int64)] = True
    mine = torch.where(owned, counts, 0)
    order = torch.sort(mine, descending=True, stable=True).indices
    num_hot = min(int(round(hot_ratio * part.num_nodes)),
                  int((mine > 0).sum()))
    return HotSet(order[:num_hot].clone(), torch.empty(0, dtype=torch.int64),
                  counts, num)


def build_halo(loader: Any, candidates: Tensor, max_rows: int
               ) -> Tuple[HaloTable, Tensor]:
    r"""The :class:`HaloTable` of the longest prefix of :obj:`candidates`
    (owned by this rank's part) whose vertices and in-neighbors take at
    most :obj:`max_rows` rows, and that prefix; a collective (the rows owned
    by other parts are fetched with the loader's feature gather)."""
    part = loader.partition
    csc = part.csc
    k = candidates.numel()
    local = part.to_local(candidates) if k else candidates
    start, end = csc.colptr[local].to(torch.int64), \
        csc.colptr[local + 1].to(torch.int64)
    deg = end - start
    owner = torch.repeat_interleave(torch.arange(k), deg)
    offset = torch.arange(owner.numel()) - torch.repeat_interleave(
        torch.cumsum(deg, 0) - deg, deg)
    nbr = csc.row.index_select(0, start[owner] + offset).to(torch.int64)
    ids, inv = torch.unique(torch.cat([candidates, nbr]),
                            return_inverse=True)
    # The candidate that first needs each row, and the rows each one adds:
    first = torch.full((ids.numel(), ), k, dtype=torch.int64).scatter_reduce(
        0, inv, torch.cat([torch.arange(k), owner]), 'amin')
    added = torch.cumsum(torch.bincount(first, minlength=k)[:k], 0)
    keep = int((added <= max_rows).sum())
    ids = ids[first < keep]
    # Every rank gathers once (rows of other parts come over):
    x = loader.gather.gather(ids)['x'].cpu()
    # The kept candidates' in-edges over the table's rows, column by row:
    col = torch.searchsorted(ids, candidates[:keep])
    kept = owner < keep
    row = torch.searchsorted(ids, nbr[kept])
    order = torch.sort(col[owner[kept]], stable=True).indices
    counts = torch.zeros(ids.numel(), dtype=torch.int64)
    counts[col] = deg[:keep]
    colptr = torch.cat([counts.new_zeros(1), torch.cumsum(counts, 0)])
    table = HaloTable(ids, x, CSCTopology(colptr, row[order], None,
                                          ids.numel()))
    return table, candidates[:keep]


def part_runtime_inputs(loader: Any, first: torch.nn.Module, ratio: float,
                        options: OffloadOptions
                        ) -> Tuple[HotSet, PartBottomLayerComputer,
                                   HaloTable]:
    r"""What :func:`~pyg_orch.offload.build.build_homo_runtime` needs on a
    partition: the hot candidates (at most the :obj:`ratio` fraction of
    the part's vertices, fewer where their halo would exceed the part's own
    number of vertices), the computer and its table; a collective."""
    # The same number on every rank (an epoch has as many batches on all):
    num_batches = options.num_presample_batches or min(
        len(loader), DEFAULT_PRESAMPLE_BATCHES)
    selection = select_part_hot_nodes(loader, ratio, num_batches,
                                      options.seed)
    table, candidates = build_halo(loader, selection.hot_nodes,
                                   max(loader.partition.num_nodes, 1))
    selection.hot_nodes = candidates
    fanout = -1 if options.full_neighbors else \
        loader.node_sampler.bottom_fanout()
    computer = PartBottomLayerComputer(first, table, fanout,
                                       seed=options.seed,
                                       autocast_dtype=options.cpu_autocast)
    return selection, computer, table


def partition_ranks(loader: Any) -> Optional[MachineRanks]:
    r"""The ranks that sample the partitioned graph of :obj:`loader`
    together (its process group), where there are several: they agree on
    the decision by measurement, as the ranks of one machine do under
    :class:`~torch.nn.parallel.DistributedDataParallel`."""
    if not process_group_active():
        return None
    group = loader.group if loader.group is not None else dist.group.WORLD
    ranks = MachineRanks(group)
    return ranks if ranks.size > 1 else None


def build_key(options: OffloadOptions) -> Tuple[Any, ...]:
    r"""The options whose values decide the collectives of building and
    measuring an offload on a partition: every rank must pass the same."""
    return (options.hot_ratio, options.measure,
            repr(options.autotune), options.num_presample_batches)


def agree_on_build(ranks: Optional[MachineRanks],
                   error: Optional[BaseException], key: Any) -> None:
    r"""Before the first collective of building an offload on a partition:
    every rank learns whether another one could not build its own (then
    raises a :class:`ValueError` naming the rank and why; the failing rank
    raises its own error), or passed other options (:func:`build_key`),
    instead of waiting for it in a collective; one
    :func:`torch.distributed.all_gather_object`."""
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
