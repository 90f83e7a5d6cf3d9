"""One hop of neighbor sampling over a CSC layout with vectorized PyTorch
ops."""
from typing import Optional, Tuple

import torch
from torch import Tensor

from pyg_orch.topology.csc import segment_ids

# Above this fan-out, Floyd's algorithm (quadratic in the fan-out) costs more
# than sorting random keys over all neighbors of the nodes concerned.
FLOYD_MAX_FANOUT = 32

_RAND_HIGH = 2**62


def _randint_below(bound: Tensor, generator: Optional[torch.Generator]):
    # `torch.randint` takes no per-element bound; a 62-bit draw modulo the
    # bound has a bias below bound / 2^62, far below any statistical test.
    draw = torch.randint(_RAND_HIGH, bound.shape, dtype=torch.int64,
                         device=bound.device, generator=generator)
    return draw % bound


def segment_arange(counts: Tensor, total: Optional[int] = None) -> Tensor:
    r"""For :obj:`counts = [2, 0, 3]` returns :obj:`[0, 1, 0, 1, 2]`."""
    if total is None:
        total = int(counts.sum())
    ptr = torch.cumsum(counts, 0) - counts
    return torch.arange(total, device=counts.device) - ptr[segment_ids(
        counts, total)]


def uniform_subsets_floyd(deg: Tensor, k: int,
                          generator: Optional[torch.Generator] = None
                          ) -> Tensor:
    r"""A random :obj:`k`-subset of :obj:`range(d)` per :obj:`d > k`."""
    out = torch.empty(deg.numel(), k, dtype=torch.int64, device=deg.device)
    for i in range(k):
        j = deg - k + i
        t = _randint_below(j + 1, generator)
        if i > 0:
            # `j` itself can not have been picked yet, as earlier picks < j:
            dup = (out[:, :i] == t.unsqueeze(1)).any(dim=1)
            t = torch.where(dup, j, t)
        out[:, i] = t
    return out


def uniform_subsets_sort(deg: Tensor, k: int,
                         generator: Optional[torch.Generator] = None
                         ) -> Tensor:
    r""":func:`uniform_subsets_floyd` by sorting random keys."""
    total = int(deg.sum())
    seg = segment_ids(deg, total)
    offset = segment_arange(deg, total)
    perm = _segment_order(
        torch.rand(total, device=deg.device, generator=generator), seg)
    # Within each segment, the first `k` entries of the random order (the
    # rank within a segment is its offset):
    keep = perm[offset < k]
    return offset[keep].view(-1, k)


def _segment_order(key: Tensor, seg: Tensor) -> Tensor:
    # Positions by segment, and by key within each segment.
    order = torch.argsort(key)
    return order[torch.argsort(seg.index_select(0, order), stable=True)]


def segment_upper_bound(values: Tensor, start: Tensor, end: Tensor,
                        bound: Tensor) -> Tensor:
    r"""The first position of each sorted segment above its bound."""
    lo, hi = start.clone(), end.clone()
    if lo.numel() == 0:
        return lo
    steps = int((end - start).max()).bit_length()
    # Where a segment is done (`lo == hi`), `mid` may be its end: read its
    # last position instead (any readable one: the result is not used).
    last = (end - 1).clamp(min=0)
    for _ in range(steps):
        active = lo < hi
        mid = (lo + hi) // 2
        at = torch.minimum(mid, last)
        right = active & (values.index_select(0, at) <= bound)
        lo = torch.where(right, mid + 1, lo)
        hi = torch.where(active & ~right, mid, hi)
    return lo


def sampled_counts(deg: Tensor, k: int, replace: bool) -> Tensor:
    r"""How many neighbors fan-out :obj:`k` draws per in-degree."""
    if k < 0:
        return deg
    if replace:
        return torch.where(deg > 0, k, 0)
    return deg.clamp(max=k)


def sample_neighbors(
    colptr: Tensor,
    nodes: Tensor,
    num_neighbors: int,
    replace: bool = False,
    generator: Optional[torch.Generator] = None,
    time: Optional[Tensor] = None,
    time_bound: Optional[Tensor] = None,
    temporal_strategy: str = 'uniform',
    weight: Optional[Tensor] = None,
    weight_cumsum: Optional[Tensor] = None,
) -> Tuple[Tensor, Tensor]:
    r"""Samples up to :obj:`k` in-neighbors of every node of :obj:`nodes`
    in a CSC layout (:obj:`-1`: all), never later than the node's time bound
    nor of zero weight.

    Args:
        colptr (torch.Tensor): CSC offsets (int32 or int64).
        nodes (torch.Tensor): Destination node ids.
        num_neighbors (int): The fan-out :obj:`k`.
        replace (bool): Sample with replacement.
        generator (torch.Generator, optional): Random number generator on the
            device of :obj:`colptr`.
        time (torch.Tensor, optional): Time of every CSC position, sorted
            within each neighborhood.
        time_bound (torch.Tensor, optional): Latest admissible time per node.
        temporal_strategy (str): :obj:`'uniform'` or :obj:`'last'`.
        weight (torch.Tensor, optional): Weight of every CSC position.
        weight_cumsum (torch.Tensor, optional): Fixed-point prefix sum of the
            weights (needed with :obj:`replace=True`), see
            :attr:`CSCTopology.weight_cumsum`.

    Returns:
        (positions, dst_index): CSC positions of the sampled edges, grouped by
        node, and the index into :obj:`nodes` of each edge's destination."""
    k = num_neighbors
    nodes = nodes.to(torch.int64)
    start = colptr.index_select(0, nodes).to(torch.int64)
    end = colptr.index_select(0, nodes + 1).to(torch.int64)
    if time is not None:
        end = segment_upper_bound(time, start, end, time_bound)
        if temporal_strategy == 'last' and k >= 0:
            start = torch.maximum(start, end - k)
    if weight is not None:
        if replace and k >= 0:
            return _weighted_with_replacement(start, end, k, weight_cumsum,
                                              generator)
        return _weighted_without_replacement(start, end, k, weight,
                                             generator)
    deg = end - start
    count = sampled_counts(deg, k, replace)

    total = int(count.sum())
    dst_index = segment_ids(count, total)
    if total == 0:
        return dst_index.new_empty(0), dst_index

    start_e = start.index_select(0, dst_index)
    if replace and k >= 0:
        deg_e = deg.index_select(0, dst_index)
        return start_e + _randint_below(deg_e, generator), dst_index

    pos = start_e + segment_arange(count, total)
    if k < 0:
        return pos, dst_index

    big = deg > k  # Nodes that need a random k-subset.
    big_nodes = big.nonzero().view(-1)
    if big_nodes.numel() > 0:
        big_deg = deg.index_select(0, big_nodes)
        if k <= FLOYD_MAX_FANOUT:
            picks = uniform_subsets_floyd(big_deg, k, generator)
        else:
            picks = uniform_subsets_sort(big_deg, k, generator)
        # Each big node owns exactly `k` consecutive output slots:
        pos[big.index_select(0, dst_index)] = (
            start.index_select(0, big_nodes).unsqueeze(1) + picks).view(-1)
    return pos, dst_index


def _weighted_with_replacement(start: Tensor, end: Tensor, k: int,
                               cumsum: Tensor,
                               generator: Optional[torch.Generator]):
    # Exact integer inverse-CDF draws: never a zero-weight neighbor.
    # `cumsum` may be split across processes (read with `index_select`):
    zero = torch.zeros((), dtype=torch.int64, device=start.device)
    base = torch.where(start > 0, cumsum.index_select(
        0, (start - 1).clamp(min=0)), zero)
    top = torch.where(end > start, cumsum.index_select(
        0, (end - 1).clamp(min=0)), base)
    count = torch.where(top > base, k, 0)
    total = int(count.sum())
    dst_index = segment_ids(count, total)
    lo, hi = base.index_select(0, dst_index), top.index_select(0, dst_index)
    draw = lo + _randint_below(hi - lo, generator)
    if isinstance(cumsum, Tensor):
        return torch.searchsorted(cumsum, draw, right=True), dst_index
    # The same position, searched within the destination's neighborhood:
    return segment_upper_bound(cumsum, start.index_select(0, dst_index),
                               end.index_select(0, dst_index),
                               draw), dst_index


def _weighted_without_replacement(start: Tensor, end: Tensor, k: int,
                                  weight: Tensor,
                                  generator: Optional[torch.Generator]):
    deg = end - start
    total = int(deg.sum())
    seg = segment_ids(deg, total)
    pos = start.index_select(0, seg) + segment_arange(deg, total)
    w = weight.index_select(0, pos).to(torch.float64)
    positive = w > 0
    if k < 0:
        return pos[positive], seg[positive]
    num_positive = torch.zeros_like(deg).index_add_(0, seg,
                                                    positive.to(deg.dtype))
    count = num_positive.clamp(max=k)
    # Exponential race: sorting Exp(1) / w and keeping the first `count` is
    # successive sampling proportional to `w`; zero weights race at +inf.
    key = torch.empty(total, dtype=torch.float64, device=start.device)
    order = _segment_order(key.exponential_(generator=generator).div_(w), seg)
    rank = segment_arange(deg, total)  # Rank within node, in race order.
    keep = order[rank < count.index_select(0, seg)]
    return pos.index_select(0, keep), seg.index_select(0, keep)
