r"""Negative sampling for link-level loading (PyG's
:class:`~torch_geometric.sampler.NegativeSampling`) on the sampler's device."""
import math
from typing import Optional

import torch
from torch import Tensor
from torch_geometric.sampler import NegativeSampling

#: Candidates drawn per temporal negative: PyG draws once and redraws the
#: invalid ones up to five times, then falls back to the earliest node.
TEMPORAL_TRIES = 6


def num_negatives(num_pos: int, neg_sampling: NegativeSampling) -> int:
    r"""The number of negatives for :obj:`num_pos` positives, as in PyG."""
    return math.ceil(num_pos * neg_sampling.amount)


def draw_nodes(
    num: int,
    num_nodes: int,
    weight: Optional[Tensor],
    device: torch.device,
    generator: Optional[torch.Generator] = None,
) -> Tensor:
    r"""Draws :obj:`num` node indices in :obj:`[0, num_nodes)` on
    :obj:`device`: uniformly, or with replacement with probabilities
    proportional to :obj:`weight`."""
    if weight is None:
        return torch.randint(num_nodes, (num, ), device=device,
                             generator=generator)
    if num == 0:
        return torch.empty(0, dtype=torch.int64, device=device)
    return torch.multinomial(weight, num, replacement=True,
                             generator=generator)


def sample_negatives(
    seed: Tensor,
    neg_sampling: NegativeSampling,
    num_nodes: int,
    weight: Optional[Tensor] = None,
    seed_time: Optional[Tensor] = None,
    node_time: Optional[Tensor] = None,
    generator: Optional[torch.Generator] = None,
) -> Tensor:
    r""":obj:`ceil(seed.numel() * amount)` negative endpoints for the
    positives :obj:`seed`, as PyG's
    :func:`~torch_geometric.sampler.neighbor_sampler.neg_sample`.

    Args:
        seed (torch.Tensor): The positive endpoints.
        neg_sampling (NegativeSampling): The configuration (:obj:`amount`).
        num_nodes (int): The number of nodes of the endpoint's node type.
        weight (torch.Tensor, optional): Node sampling weights.
        seed_time (torch.Tensor, optional): The time of every positive.
        node_time (torch.Tensor, optional): The time of every node.
        generator (torch.Generator, optional): On :obj:`seed`'s device."""
    device = seed.device
    num_pos = seed.numel()
    num_neg = num_negatives(num_pos, neg_sampling)
    if node_time is None:
        return draw_nodes(num_neg, num_nodes, weight, device, generator)
    if seed_time is None:
        raise ValueError("Temporal negative sampling needs the time of every "
                         "positive ('edge_label_time')")
    per_seed = math.ceil(neg_sampling.amount)
    cand = draw_nodes(TEMPORAL_TRIES * per_seed * num_pos, num_nodes, weight,
                      device, generator)
    cand = cand.view(TEMPORAL_TRIES, per_seed, num_pos)
    valid = node_time[cand] <= seed_time.view(1, 1, -1)
    first = valid.to(torch.uint8).argmax(dim=0, keepdim=True)
    out = cand.gather(0, first).squeeze(0)
    fallback = node_time.argmin().to(out.dtype)
    out = torch.where(valid.any(dim=0), out, fallback)
    return out.view(-1)[:num_neg]
