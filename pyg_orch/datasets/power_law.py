"""Synthetic directed graphs with a power-law in-degree distribution."""

from __future__ import annotations

import math
import os
from typing import Tuple

import torch
from torch import Tensor
from torch_geometric.data import Data

from pyg_orch.core.checks import (check_fraction, check_int, check_real,
                                  resolve_device)

__all__ = ['power_law_graph']


def _available_bytes(device: torch.device) -> int | None:
    # Free memory where the graph is generated (None if not known).
    if device.type == 'cuda':
        return torch.cuda.mem_get_info(device)[0]
    try:
        with open('/proc/meminfo') as f:
            for line in f:
                if line.startswith('MemAvailable:'):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return os.sysconf('SC_PAGE_SIZE') * os.sysconf('SC_PHYS_PAGES')
    except (ValueError, OSError, AttributeError):
        return None


def estimate_bytes(num_nodes: int, num_edges: int, num_features: int,
                   num_classes: int, index_dtype: torch.dtype,
                   feature_dtype: torch.dtype) -> int:
    r"""The peak memory (in bytes) of :func:`power_law_graph`: the graph and
    the largest temporaries of its steps."""
    N, E, F, C = num_nodes, num_edges, num_features, num_classes
    idx = torch.empty((), dtype=index_dtype).element_size()
    feat = torch.empty((), dtype=feature_dtype).element_size()
    it = 4 if 2 * N < 2**31 else 8
    # `edge_index`, `y`, the masks and the split's permutation:
    base = 2 * E * idx + N * (8 + 3 + 8)
    steps = (
        3 * N * idx + E * (17 + it),  # Ranks by inverse CDF, node lists.
        2 * N * idx + E * (9 + 2 * it),  # Sources within classes.
        (2 * N + C) * F * feat,  # `x` and its centroid rows.
    )
    return base + max(steps) + C * 24


def _check_fits(device: torch.device, sizes: dict, needed: int) -> None:
    free = _available_bytes(device)
    if free is not None and needed > free:
        given = ', '.join(f'{k}={v}' for k, v in sizes.items())
        raise MemoryError(
            f"power_law_graph({given}) needs about {needed / 2**30:.3g} GiB "
            f"on '{device}', but only {free / 2**30:.3g} GiB are free; "
            f"reduce the sizes")


# Number of most popular ranks whose probabilities are tabulated exactly; the
# remaining ranks use the closed-form inverse CDF of the continuous power law,
# which matches `rank^-a` up to a relative error of about
# `a * (a + 1) / (24 * rank^2)` (< 4e-6 for `a <= 2`, i.e. exponent >= 1.5).
_NUM_HEAD_RANKS = 256


def _sample_zipf_ranks(
    num_nodes: int,
    num_samples: int,
    a: float,
    gen: torch.Generator,
    device: torch.device,
    dtype: torch.dtype,
) -> Tensor:
    r"""Samples 0-based ranks :math:`r - 1` with :math:`P(r) \propto r^{-a}`
    for :math:`r \in \{1, \ldots, N\}` by inverse-CDF sampling: exact
    :func:`torch.searchsorted` for the :obj:`K` most popular ranks, the
    closed-form inverse CDF of the continuous power law for the others."""
    N, K = num_nodes, min(num_nodes, _NUM_HEAD_RANKS)
    # Tiny table, built on the CPU (no device sync, identical on all devices):
    head_cdf = torch.arange(1, K + 1, dtype=torch.float64)
    head_cdf = head_cdf.pow_(-a).cumsum_(0)
    head_mass = float(head_cdf[-1])
    head_cdf = head_cdf.to(device)

    # Tail mass `int_{K+1/2}^{N+1/2} x^-a dx`, in a form stable for `b -> 0`
    # (none if `K == N`, or if it underflows: then every rank is a head one):
    b, x0 = 1.0 - a, K + 0.5
    log_ratio = math.log((N + 0.5) / x0)
    x0_b = x0**b
    tail_mass = x0_b * math.expm1(b * log_ratio) / b if b != 0.0 \
        else log_ratio
    tail_mass = tail_mass if K < N and tail_mass > 0.0 else 0.0

    u = torch.rand(num_samples, dtype=torch.float64, generator=gen,
                   device=device).mul_(head_mass + tail_mass)
    head_idx = (u < head_mass).nonzero().view(-1)
    head_u = u.index_select(0, head_idx)

    # Tail: solve `int_{x0}^{x} t^-a dt = u - head_mass` for `x`, then round:
    t = u.sub_(head_mass).clamp_(min=0.0)
    if b != 0.0:
        t.mul_(b / x0_b).clamp_(min=-1.0).log1p_().div_(b)
    x = t.exp_().mul_(x0)
    rank = x.add_(0.5).clamp_(K + 1, N).sub_(1.0).to(dtype)
    del u, t, x

    head_rank = torch.searchsorted(head_cdf, head_u, right=True,
                                   out_int32=dtype == torch.int32)
    return rank.index_copy_(0, head_idx, head_rank.clamp_(max=K - 1))


def split_masks(perm: Tensor, num_train: int,
                num_val: int) -> Tuple[Tensor, Tensor, Tensor]:
    r"""Training, validation and test masks: the first :obj:`num_train`
    nodes of :obj:`perm`, the next :obj:`num_val`, and the others."""
    position = torch.empty_like(perm)
    position[perm] = torch.arange(perm.numel(), device=perm.device)
    return (position < num_train, (position >= num_train) &
            (position < num_train + num_val), position >= num_train + num_val)


def power_law_graph(
    num_nodes: int,
    num_edges: int,
    num_features: int = 100,
    num_classes: int = 47,
    exponent: float = 2.1,
    homophily: float = 0.5,
    feature_snr: float = 3.0,
    device: torch.device | str = 'cpu',
    seed: int | None = 0,
    index_dtype: torch.dtype = torch.int64,
    feature_dtype: torch.dtype = torch.float32,
) -> Data:
    r"""Generates a random directed node-classification graph whose in-degree
    distribution follows a power law.

    Destinations are drawn with probability :math:`p_v \propto r_v^{-1 /
    (\gamma - 1)}` for a popularity rank :math:`r_v` from a random permutation,
    so in-degrees follow :math:`P(k) \propto k^{-\gamma}`. With probability
    :obj:`homophily` an edge's source is drawn among the nodes of the
    destination's class, else among all nodes. Labels are uniform; features are
    a class centroid plus unit Gaussian noise, the centroids :obj:`feature_snr`
    noise standard deviations apart in expectation. Nodes are split 60/20/20
    into training, validation and test nodes. Duplicate edges and self-loops
    are kept. The result is reproducible for a fixed :obj:`seed` on one device
    type; the topology, labels and splits do not depend on :obj:`num_features`.

    Args:
        num_nodes (int): The number of nodes (:obj:`>= 1`).
        num_edges (int): The number of directed edges (:obj:`>= 0`).
        num_features (int, optional): The number of node features; :obj:`0` for
            no :obj:`x`. (default: :obj:`100`)
        num_classes (int, optional): The number of classes. (default:
            :obj:`47`)
        exponent (float, optional): The power-law exponent :math:`\gamma > 1`
            of the in-degree distribution. (default: :obj:`2.1`)
        homophily (float, optional): The probability in :math:`[0, 1]` that an
            edge's source is drawn from the destination's class. (default:
            :obj:`0.5`)
        feature_snr (float, optional): The expected distance between two class
            centroids in units of the noise's standard deviation (:obj:`>= 0`).
            (default: :obj:`3.0`)
        device (torch.device or str, optional): The device on which the data is
            generated and returned. (default: :obj:`"cpu"`)
        seed (int, optional): The random seed; :obj:`None` for a
            non-deterministic one. (default: :obj:`0`)
        index_dtype (torch.dtype, optional): The dtype of :obj:`edge_index`,
            :obj:`torch.int64` or :obj:`torch.int32`. (default:
            :obj:`torch.int64`)
        feature_dtype (torch.dtype, optional): The floating-point dtype of
            :obj:`x`. (default: :obj:`torch.float32`)

    Raises:
        ValueError: If an argument is out of range or of the wrong type.
        MemoryError: If the graph would not fit in the free memory of
            :obj:`device` (estimated before anything is allocated)."""
    num_nodes = check_int('num_nodes', num_nodes, 1)
    num_edges = check_int('num_edges', num_edges, 0)
    num_features = check_int('num_features', num_features, 0)
    num_classes = check_int('num_classes', num_classes, 1)
    exponent = check_real('exponent', exponent, 1.0, exclusive=True)
    homophily = check_fraction('homophily', homophily)
    feature_snr = check_real('feature_snr', feature_snr, 0.0)
    seed = check_int('seed', seed, -2**63, optional=True)
    if index_dtype not in (torch.int64, torch.int32):
        raise ValueError(f"'index_dtype' must be torch.int64 or torch.int32 "
                         f"(got {index_dtype})")
    if index_dtype == torch.int32 and num_nodes > 2**31 - 1:
        raise ValueError(f"'index_dtype' torch.int32 cannot index "
                         f"{num_nodes} nodes")
    if not isinstance(feature_dtype, torch.dtype) or \
            not feature_dtype.is_floating_point:
        raise ValueError(f"'feature_dtype' must be a floating-point dtype "
                         f"(got {feature_dtype})")

    device = resolve_device(device, default='cpu')
    _check_fits(device, dict(num_nodes=num_nodes, num_edges=num_edges,
                             num_features=num_features,
                             num_classes=num_classes),
                estimate_bytes(num_nodes, num_edges, num_features,
                               num_classes, index_dtype, feature_dtype))
    gen = torch.Generator(device=device)
    if seed is None:
        gen.seed()
    else:
        gen.manual_seed(seed)
    N, E, C = num_nodes, num_edges, num_classes

    # Internal index dtype: int32 halves the memory traffic where possible
    # (`lookup` below has `2 * N` entries).
    it = torch.int32 if 2 * N < 2**31 else torch.int64

    # Labels and per-class node lists ########################################
    y = torch.randint(C, (N, ), generator=gen, device=device)
    y_it = y.to(it)
    # Nodes grouped by class: the nodes of class `c` are
    # `lookup[ptr[c]:ptr[c] + count[c]]`. An extra pseudo-class `C` holds all
    # nodes and is used for the non-homophilous edges.
    class_count = torch.bincount(y, minlength=C)
    lookup = torch.cat([
        torch.argsort(y, stable=True).to(index_dtype),
        torch.arange(N, dtype=index_dtype, device=device),
    ])
    count = torch.cat([class_count, class_count.new_full((1, ), N)])
    ptr = (count.cumsum(0) - count).to(it)
    # `floor(w * span)` with `w in [0, 1)` is always `< count`:
    span = count.to(torch.float64) * (1.0 - 2.0**-50)
    del class_count

    # The final gathers write straight into `edge_index` (`out=`), which saves
    # a copy of `2 * num_edges` indices.
    edge_index = torch.empty((2, E), dtype=index_dtype, device=device)

    # Destinations: power-law popularity, ranks from a random permutation ####
    rank_to_node = torch.randperm(N, generator=gen, device=device,
                                  dtype=index_dtype)
    rank = _sample_zipf_ranks(N, E, 1.0 / (exponent - 1.0), gen, device, it)
    torch.index_select(rank_to_node, 0, rank, out=edge_index[1])
    del rank, rank_to_node

    # Sources: with probability `homophily` uniform over the destination's
    # class, otherwise uniform over all nodes (pseudo-class `C`) #############
    if homophily > 0.0:
        cls = y_it.index_select(0, edge_index[1])
        if homophily < 1.0:
            other = torch.rand(E, generator=gen, device=device) >= homophily
            cls.masked_fill_(other, C)
            del other
    else:
        cls = torch.full((E, ), C, dtype=it, device=device)
    w = torch.rand(E, dtype=torch.float64, generator=gen, device=device)
    offset = w.mul_(span.index_select(0, cls)).to(it)
    del w
    pos = ptr.index_select(0, cls).add_(offset)
    del cls, offset
    torch.index_select(lookup, 0, pos, out=edge_index[0])
    del pos, lookup, y_it

    # Random 60/20/20 node split #############################################
    perm = torch.randperm(N, generator=gen, device=device)
    train_mask, val_mask, test_mask = split_masks(perm, int(0.6 * N),
                                                  int(0.2 * N))
    del perm

    data = Data(edge_index=edge_index, y=y, train_mask=train_mask,
                val_mask=val_mask, test_mask=test_mask, num_nodes=N)

    # Node features: class centroid + unit Gaussian noise ####################
    if num_features > 0:
        # Centroid entries with variance `snr^2 / (2 F)`: two centroids are
        # `snr` apart in expectation, whatever the number of features.
        centroids = torch.randn(C, num_features, generator=gen, device=device,
                                dtype=feature_dtype)
        centroids.mul_(feature_snr / math.sqrt(2.0 * num_features))
        x: Tensor = torch.randn(N, num_features, generator=gen, device=device,
                                dtype=feature_dtype)
        x.add_(centroids.index_select(0, y))
        data.x = x

    return data
