"""Deterministic structural node features for graphs without features."""

from __future__ import annotations

import math

import torch
from torch import Tensor

from pyg_orch.core.checks import check_int

__all__ = ['structural_features']


def structural_features(edge_index: Tensor, num_nodes: int,
                        num_buckets: int = 16) -> Tensor:
    r"""Node features computed from the graph structure alone, for graphs
    without features: with :math:`d_v` the in-degree of :math:`v` and
    :math:`\ell_v = \log(1 + d_v) / \log(1 + \max_u d_u)`, a one-hot
    log2-degree bucket, :math:`\ell_v`, and the mean of :math:`\ell_u` over the
    in-neighbors :math:`u` (:obj:`0` without neighbors).

    Args:
        edge_index (torch.Tensor): The edges, :obj:`[2, num_edges]`.
        num_nodes (int): The number of nodes.
        num_buckets (int, optional): The number of degree buckets. (default:
            :obj:`16`)"""
    if not (isinstance(edge_index, Tensor) and edge_index.dim() == 2
            and edge_index.size(0) == 2 and not edge_index.is_floating_point()
            and not edge_index.is_complex()):
        raise ValueError("'edge_index' must be an integer tensor of shape "
                         "[2, num_edges]")
    num_nodes = check_int('num_nodes', num_nodes, 0)
    num_buckets = check_int('num_buckets', num_buckets, 1)
    edge_index = edge_index.long().cpu()
    if edge_index.numel() > 0 and (int(edge_index.min()) < 0 or
                                   int(edge_index.max()) >= num_nodes):
        raise ValueError(f"'edge_index' must hold node ids in "
                         f"[0, {num_nodes})")
    src, dst = edge_index
    deg = torch.bincount(dst, minlength=num_nodes)
    bucket = torch.floor(torch.log2(deg.double() + 1)).long()
    bucket = bucket.clamp_(max=num_buckets - 1)
    one_hot = torch.zeros(num_nodes, num_buckets)
    one_hot[torch.arange(num_nodes), bucket] = 1.0
    max_deg = int(deg.max()) if num_nodes > 0 else 0
    scale = math.log1p(max_deg) if max_deg > 0 else 1.0
    log_deg = torch.log1p(deg.double()) / scale
    neighbor_sum = torch.zeros(num_nodes, dtype=torch.float64)
    neighbor_sum.index_add_(0, dst, log_deg[src])
    mean_neighbor = neighbor_sum / deg.clamp(min=1).double()
    return torch.cat([one_hot, log_deg.float().view(-1, 1),
                      mean_neighbor.float().view(-1, 1)], dim=1)
