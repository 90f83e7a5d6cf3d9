"""One hop of neighbor sampling over a CSC layout, written with vectorized
PyTorch ops only, so that the same code runs on CPU and CUDA tensors."""
from typing import Optional, Tuple

import torch
from torch import Tensor

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
    seg = torch.repeat_interleave(
        torch.arange(counts.numel(), device=counts.device), counts,
        output_size=total)
    return torch.arange(total, device=counts.device) - ptr[seg]


def uniform_subsets_floyd(deg: Tensor, k: int,
                          generator: Optional[torch.Generator] = None
                          ) -> Tensor:
    r"""Draws, for every entry of :obj:`deg` (all :obj:`> k`), a uniformly
    random :obj:`k`-subset of :obj:`range(deg)` with Floyd's algorithm,
    vectorized over nodes. Returns a :obj:`[len(deg), k]` tensor."""
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
    r"""Same contract as :func:`uniform_subsets_floyd`, by sorting random keys
    over all :obj:`deg` positions of every node (cost linear in
    :obj:`deg.sum()`, independent of :obj:`k`)."""
    total = int(deg.sum())
    seg = torch.repeat_interleave(torch.arange(deg.numel(),
                                               device=deg.device), deg,
                                  output_size=total)
    offset = segment_arange(deg, total)
    key = torch.rand(total, device=deg.device, generator=generator)
    perm = torch.argsort(key)
    perm = perm[torch.argsort(seg[perm], stable=True)]
    # Within each segment, the first `k` entries of the random order:
    rank = segment_arange(deg, total)
    keep = perm[rank < k]
    return offset[keep].view(-1, k)


def sample_neighbors(
    colptr: Tensor,
    nodes: Tensor,
    num_neighbors: int,
    replace: bool = False,
    generator: Optional[torch.Generator] = None,
) -> Tuple[Tensor, Tensor]:
    r"""Samples in-neighbors of :obj:`nodes` in a CSC layout.

    Without replacement, every node with degree :obj:`d` gets a uniformly
    random :obj:`min(k, d)`-subset of its neighbors; with replacement, :obj:`k`
    independent uniform draws (none for :obj:`d = 0`). :obj:`k = -1` takes all
    neighbors.

    Args:
        colptr (torch.Tensor): CSC offsets (int32 or int64).
        nodes (torch.Tensor): Destination node ids.
        num_neighbors (int): The fan-out :obj:`k`.
        replace (bool): Sample with replacement.
        generator (torch.Generator, optional): Random number generator on the
            device of :obj:`colptr`.

    Returns:
        (positions, dst_index): CSC positions of the sampled edges, grouped by
        node in the order of :obj:`nodes`, and for each sampled edge the
        index into :obj:`nodes` of its destination.
    """
    k = num_neighbors
    nodes = nodes.to(torch.int64)
    start = colptr[nodes].to(torch.int64)
    deg = colptr[nodes + 1].to(torch.int64) - start
    if k < 0:
        count = deg
    elif replace:
        count = torch.where(deg > 0, k, 0)
    else:
        count = deg.clamp(max=k)

    total = int(count.sum())
    dst_index = torch.repeat_interleave(
        torch.arange(nodes.numel(), device=nodes.device), count,
        output_size=total)
    if total == 0:
        return dst_index.new_empty(0), dst_index

    if replace and k >= 0:
        pos = start[dst_index] + _randint_below(deg[dst_index], generator)
        return pos, dst_index

    pos = start[dst_index] + segment_arange(count, total)
    if k < 0:
        return pos, dst_index

    big = deg > k  # Nodes that need a random k-subset.
    big_nodes = big.nonzero().view(-1)
    if big_nodes.numel() > 0:
        big_deg = deg[big_nodes]
        if k <= FLOYD_MAX_FANOUT:
            picks = uniform_subsets_floyd(big_deg, k, generator)
        else:
            picks = uniform_subsets_sort(big_deg, k, generator)
        # Each big node owns exactly `k` consecutive output slots:
        pos[big[dst_index]] = (start[big_nodes].unsqueeze(1) + picks).view(-1)
    return pos, dst_index
