"""Hot vertices by pre-sampled bottom-layer access frequency."""
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Tuple, Union

import torch
from torch import Tensor

from pyg_orch.sampling.presample import count_node_access

#: Turns this process's access counts into those the choice is made from.
ReduceCounts = Callable[[Tensor], Tensor]


@dataclass
class HotSet:
    r"""The vertices chosen by :func:`select_hot_nodes`.

    Args:
        hot_nodes (torch.Tensor): Global ids of the hot vertices, most
            frequently accessed first.
        cache_nodes (torch.Tensor): Global ids of the GPU-cache candidates.
        counts (torch.Tensor): How often every vertex was accessed during
            pre-sampling.
        num_batches (int): The number of pre-sampled mini-batches.
        num_ranks (int): The processes whose counts were added up in
            :obj:`counts`.
    """
    hot_nodes: Tensor
    cache_nodes: Tensor
    counts: Tensor
    num_batches: int
    num_ranks: int = 1

    @property
    def num_nodes(self) -> int:
        return self.counts.numel()

    def hot_mask(self) -> Tensor:
        r"""A boolean mask over all vertices, :obj:`True` for hot ones."""
        mask = torch.zeros(self.num_nodes, dtype=torch.bool)
        mask[self.hot_nodes] = True
        return mask

    def coverage(self, nodes: Optional[Tensor] = None) -> float:
        r"""The share of pre-sampled accesses that hit :obj:`nodes`."""
        total = int(self.counts.sum())
        if total == 0:
            return 0.0
        nodes = self.hot_nodes if nodes is None else nodes
        return float(self.counts[nodes].sum()) / total


def count_bottom_accesses(
    sampler,
    seeds: Tensor,
    batch_size: int,
    num_batches: Optional[int] = None,
    seed: Optional[int] = 0,
) -> Tuple[Tensor, int]:
    r"""Counts how often every vertex lands in hops :obj:`0, ..., L - 1` of
    the mini-batches that :obj:`sampler` draws from :obj:`seeds`, without
    pruning and with the sampler's random state restored after.

    Args:
        sampler (HybridNeighborSampler): The sampler of the training loader.
        seeds (torch.Tensor): The training seed vertices (global ids).
        batch_size (int): Seeds per mini-batch.
        num_batches (int, optional): How many mini-batches to draw; an
            epoch's worth if not set.
        seed (int, optional): Seeds the order in which the seeds are drawn.
            (default: :obj:`0`)

    Returns:
        (counts, num_batches): the access count of every vertex and the
        number of mini-batches drawn.
    """
    return _presample(sampler, seeds, batch_size, num_batches, seed,
                      hops=sampler.num_hops, prune_hot=False)


def _presample(sampler, seeds: Tensor, batch_size: int,
               num_batches: Optional[int], seed: Optional[int],
               hops: Optional[int], prune_hot: bool,
               input_type: Optional[str] = None) -> Tuple[Any, int]:
    seeds = seeds.view(-1).to(torch.int64).cpu()
    gen = torch.Generator()
    if seed is not None:
        gen.manual_seed(seed)
    else:
        gen.seed()
    batch_size = max(int(batch_size), 1)
    epoch = -(-seeds.numel() // batch_size)
    num = epoch if num_batches is None else min(max(int(num_batches), 1),
                                                epoch)
    counts = count_node_access(sampler, seeds, batch_size, num_batches=num,
                               hops=hops, generator=gen, prune_hot=prune_hot,
                               input_type=input_type)
    return counts, num


def split_by_frequency(counts: Tensor, hot_ratio: float, cache_ratio: float,
                       num_nodes: Optional[int] = None
                       ) -> Tuple[Tensor, Tensor]:
    r"""The most accessed :obj:`hot_ratio` and the next :obj:`cache_ratio`
    of :obj:`num_nodes` (by default all) vertices."""
    num_nodes = counts.numel() if num_nodes is None else num_nodes
    num_hot = int(round(hot_ratio * num_nodes))
    num_cache = int(round(cache_ratio * num_nodes))
    accessed = int((counts > 0).sum())
    order = torch.sort(counts, descending=True, stable=True)[1]
    num_hot = min(num_hot, accessed)
    num_cache = min(num_cache, accessed - num_hot)
    hot = order[:num_hot].clone()
    cache = order[num_hot:num_hot + num_cache].clone()
    return hot, cache


def select_hot_nodes(
    sampler,
    seeds: Tensor,
    batch_size: int,
    hot_ratio: float = 0.05,
    cache_ratio: float = 0.15,
    num_batches: Optional[int] = None,
    seed: Optional[int] = 0,
    reduce_counts: Optional[ReduceCounts] = None,
    num_ranks: int = 1,
) -> HotSet:
    r"""Chooses hot vertices by pre-sampling (see
    :func:`count_bottom_accesses`): the top :obj:`hot_ratio` fraction of all
    vertices by access count are hot, the next :obj:`cache_ratio` fraction
    are GPU-cache candidates.

    Args:
        sampler (HybridNeighborSampler): The sampler of the training loader.
        seeds (torch.Tensor): The training seed vertices.
        batch_size (int): Seeds per mini-batch.
        hot_ratio (float): Fraction of all vertices that are hot.
            (default: :obj:`0.05`)
        cache_ratio (float): Fraction of all vertices that are GPU-cache
            candidates. (default: :obj:`0.15`)
        num_batches (int, optional): Mini-batches to pre-sample; an epoch's
            worth if not set.
        seed (int, optional): Seeds the order of the seeds.
            (default: :obj:`0`)
        reduce_counts (callable, optional): Applied to the access counts
            before choosing (e.g. their sum over a machine's ranks, a
            collective).
        num_ranks (int): The ranks :obj:`reduce_counts` adds up.
            (default: :obj:`1`)
    """
    counts, n = count_bottom_accesses(sampler, seeds, batch_size,
                                      num_batches, seed)
    if reduce_counts is not None:
        counts = reduce_counts(counts)
    hot, cache = split_by_frequency(counts, hot_ratio, cache_ratio)
    return HotSet(hot, cache, counts, n, num_ranks)


def select_cache_nodes(
    sampler,
    hot_mask: Tensor,
    seeds: Tensor,
    batch_size: int,
    cache_ratio: float,
    num_batches: Optional[int] = None,
    seed: Optional[int] = 0,
    reduce_counts: Optional[ReduceCounts] = None,
) -> Tensor:
    r"""The GPU-cache candidates under offload: the top :obj:`cache_ratio`
    fraction of all vertices by feature fetches (all hops) in mini-batches
    drawn with hot-vertex pruning on (hot vertices included).

    Args:
        sampler (HybridNeighborSampler): The sampler of the training loader.
        hot_mask (torch.Tensor): Boolean mask of the hot vertices.
        seeds (torch.Tensor): The training seed vertices.
        batch_size (int): Seeds per mini-batch.
        cache_ratio (float): Fraction of all vertices to choose.
        num_batches (int, optional): Mini-batches to pre-sample; an epoch's
            worth if not set.
        seed (int, optional): Seeds the order of the seeds.
            (default: :obj:`0`)
        reduce_counts (callable, optional): Applied to the counts before
            choosing.
    """
    num_cache = int(round(cache_ratio * hot_mask.numel()))
    if num_cache == 0:
        return torch.empty(0, dtype=torch.int64)
    with sampler.presampling(prune_hot=True):
        sampler.set_hot_nodes(hot_mask)
        counts, _ = _presample(sampler, seeds, batch_size, num_batches, seed,
                               hops=None, prune_hot=True)
    if reduce_counts is not None:
        counts = reduce_counts(counts)
    return split_by_frequency(counts, 0.0, cache_ratio)[1]


def select_hetero_hot_nodes(
    sampler,
    seeds: Union[Tensor, Dict[str, Tensor]],
    input_type: Optional[str],
    node_types: List[str],
    batch_size: int,
    hot_ratio: float = 0.05,
    num_batches: Optional[int] = None,
    seed: Optional[int] = 0,
    reduce_counts: Optional[ReduceCounts] = None,
    num_ranks: int = 1,
) -> HotSet:
    r"""The heterogeneous :func:`select_hot_nodes` over :obj:`node_types`
    (combined ids), from seeds of :obj:`input_type` or a dictionary of seeds;
    no GPU-cache candidates."""
    if not isinstance(seeds, dict):
        seeds = {input_type: seeds}
    total: Dict[str, Tensor] = {}
    n = 0
    for t, type_seeds in seeds.items():
        counts, num = _presample(sampler, type_seeds, batch_size,
                                 num_batches, seed, hops=sampler.num_hops,
                                 prune_hot=False, input_type=t)
        n += num
        for k, c in counts.items():
            total[k] = c if k not in total else total[k] + c
    counts = torch.cat([total[t] for t in node_types])
    if reduce_counts is not None:
        counts = reduce_counts(counts)
    hot, cache = split_by_frequency(counts, hot_ratio, 0.0)
    return HotSet(hot, cache, counts, n, num_ranks)
