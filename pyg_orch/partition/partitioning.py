"""How vertices are assigned to parts (:obj:`'metis'`, :obj:`'random'`,
:obj:`'contiguous'`, :obj:`'auto'`) and the quality of an assignment (edge
cut and balance)."""
from __future__ import annotations

from typing import Any, Optional, Tuple

import numpy as np
import torch
from torch import Tensor

from pyg_orch.core.checks import check_int
from pyg_orch.topology.csc import check_edge_index
from pyg_orch.topology.sparse_adj import index_to_ptr

__all__ = [
    'METHODS',
    'assign_parts',
    'balance',
    'edge_cut',
    'metis_available',
    'resolve_method',
]

#: The partitioning methods :func:`assign_parts` accepts.
METHODS = ('auto', 'metis', 'random', 'contiguous')

_METIS_MISSING = ("method='metis' needs the optional package 'pymetis', "
                  "which is not installed: pip install pymetis (or pip "
                  "install 'pyg_orch[distributed]'), or use "
                  "method='contiguous' or 'random'")


def metis_available() -> bool:
    r"""Whether :obj:`pymetis` can be imported."""
    try:
        import pymetis  # noqa: F401
    except ImportError:
        return False
    return True


def resolve_method(method: str) -> str:
    r"""The method that runs for :obj:`method` (:obj:`'auto'`: :obj:`'metis'`
    where :obj:`pymetis` is importable, else :obj:`'contiguous'`)."""
    if not isinstance(method, str) or method not in METHODS:
        raise ValueError(f"'method' must be one of {list(METHODS)} "
                         f"(got {method!r})")
    if method == 'auto':
        return 'metis' if metis_available() else 'contiguous'
    return method


def edge_cut(edge_index: Tensor, node_part: Tensor,
             src_node_part: Optional[Tensor] = None) -> float:
    r"""The fraction of edges between parts (:obj:`src_node_part`: the sources'
    part map, where it differs)."""
    if edge_index.size(1) == 0:
        return 0.0
    if src_node_part is None:
        src_node_part = node_part
    src_part = src_node_part[edge_index[0]]
    dst_part = node_part[edge_index[1]]
    return float((src_part != dst_part).sum()) / edge_index.size(1)


def balance(node_part: Tensor, num_parts: int) -> float:
    r"""The largest part's vertices over the mean (:obj:`1.0`: balanced)."""
    num_nodes = node_part.numel()
    if num_nodes == 0:
        return 1.0
    sizes = torch.bincount(node_part.to(torch.int64), minlength=num_parts)
    return float(sizes.max()) * num_parts / num_nodes


def check_num_parts(num_parts: Any, num_nodes: int,
                    allow_empty: bool = True) -> int:
    r"""Returns :obj:`num_parts` checked to lie in :obj:`[1, num_nodes]`
    (:obj:`1` for a graph without vertices, if :obj:`allow_empty`)."""
    num_parts = check_int('num_parts', num_parts, 1)
    if num_parts > max(num_nodes, 1) or (num_nodes == 0 and not allow_empty):
        raise ValueError(f"'num_parts' must be in [1, num_nodes] = [1, "
                         f"{num_nodes}] (got {num_parts})")
    return num_parts


def _contiguous(num_nodes: int, num_parts: int) -> Tensor:
    # Ranges of ids whose sizes differ by at most one.
    return torch.arange(num_nodes, dtype=torch.int64) * num_parts // num_nodes


def metis_adjacency(edge_index: Tensor,
                    num_nodes: int) -> Tuple[Tensor, Tensor]:
    r"""METIS's undirected CSR (:obj:`xadj`, :obj:`adjncy`): every edge
    both ways, without self-loops or duplicates."""
    src, dst = edge_index[0].to(torch.int64), edge_index[1].to(torch.int64)
    keep = src != dst
    src, dst = src[keep], dst[keep]
    both = torch.cat([src * num_nodes + dst, dst * num_nodes + src])
    both = torch.unique(both)  # Sorted: by source, then neighbor.
    row = torch.div(both, num_nodes, rounding_mode='floor')
    col = both - row * num_nodes
    return index_to_ptr(row, num_nodes), col


def _metis(edge_index: Tensor, num_nodes: int, num_parts: int,
           seed: int) -> Tensor:
    try:
        import pymetis
    except ImportError as e:
        raise ImportError(_METIS_MISSING) from e
    xadj, adjncy = metis_adjacency(edge_index, num_nodes)
    xadj, adjncy = xadj.numpy(), adjncy.numpy()
    options = pymetis.Options(seed=int(seed))
    if hasattr(pymetis, 'CSRAdjacency'):
        result = pymetis.part_graph(num_parts,
                                    pymetis.CSRAdjacency(xadj, adjncy),
                                    options=options)
    else:  # pragma: no cover (pymetis < 2025)
        result = pymetis.part_graph(num_parts, xadj=xadj, adjncy=adjncy,
                                    options=options)
    membership = np.asarray(result[1])
    return torch.from_numpy(membership.astype(np.int64, copy=True))


def assign_parts(edge_index: Tensor, num_nodes: int, num_parts: int,
                 method: str = 'auto', seed: int = 0) -> Tensor:
    r"""The part of every vertex (:obj:`int64`, :obj:`[num_nodes]`).

    Args:
        edge_index (torch.Tensor): The edges (:obj:`[2, num_edges]`).
        num_nodes (int): The number of vertices.
        num_parts (int): The number of parts, in :obj:`[1, num_nodes]`.
        method (str): As in :func:`resolve_method`: :obj:`'metis'`,
            :obj:`'random'`, :obj:`'contiguous'` or :obj:`'auto'`.
        seed (int): The seed of :obj:`'random'` and :obj:`'metis'`."""
    method = resolve_method(method)
    num_nodes = check_int('num_nodes', num_nodes, 0)
    num_parts = check_num_parts(num_parts, num_nodes)
    check_edge_index(edge_index, num_nodes, num_nodes)
    if num_parts == 1:
        return torch.zeros(num_nodes, dtype=torch.int64)
    if method == 'contiguous':
        return _contiguous(num_nodes, num_parts)
    if method == 'random':  # A seeded permutation cut into the ranges.
        gen = torch.Generator().manual_seed(int(seed))
        node_part = torch.empty(num_nodes, dtype=torch.int64)
        node_part[torch.randperm(num_nodes, generator=gen)] = _contiguous(
            num_nodes, num_parts)
        return node_part
    return _metis(edge_index.cpu(), num_nodes, num_parts, seed)
