r"""Cheap fingerprints of a graph (its counts and a hash of evenly spaced
edges), to tell whether a topology or partition was built from the graph it is
used with, and whether every rank holds the same graph."""
from __future__ import annotations

import hashlib
from collections import Counter
from typing import Any, List, Optional, Sequence

import torch
from torch import Tensor

from pyg_orch.topology.sparse_adj import edge_index_of

__all__ = [
    'FINGERPRINT_SAMPLE',
    'csc_fingerprint',
    'differing_ranks',
    'edge_index_fingerprint',
    'graph_fingerprint',
]

#: Edge columns hashed into a fingerprint (evenly spaced, ends included).
FINGERPRINT_SAMPLE = 4096


def _spaced(num: int, device: torch.device) -> Tensor:
    # Evenly spaced positions, ends included (float64: float32 rounds the
    # last one past the end from 2**24 on).
    count = min(num, FINGERPRINT_SAMPLE)
    return torch.linspace(0, num - 1, count, dtype=torch.float64,
                          device=device).round().long()


def _hash_sample(h, values: Tensor) -> None:
    h.update(values.to(torch.int64).cpu().contiguous().numpy().tobytes())


def _update(h, edge_index: Optional[Tensor], label: str) -> None:
    num_edges = 0 if edge_index is None else int(edge_index.size(1))
    h.update(f'{label}:{num_edges}:'.encode())
    if num_edges:
        _hash_sample(h, edge_index[:, _spaced(num_edges, edge_index.device)])


def edge_index_fingerprint(edge_index: Tensor, num_src_nodes: int,
                           num_dst_nodes: Optional[int] = None) -> str:
    r"""The fingerprint of one edge type's :obj:`edge_index`: equal to
    :func:`graph_fingerprint` of a graph of :obj:`num_src_nodes` vertices
    where :obj:`num_dst_nodes` is not given or the same."""
    label = str(int(num_src_nodes))
    if num_dst_nodes is not None and int(num_dst_nodes) != int(num_src_nodes):
        label += f'x{int(num_dst_nodes)}'
    h = hashlib.sha256()
    _update(h, edge_index, label)
    return h.hexdigest()[:16]


def graph_fingerprint(data: Any, num_nodes: Optional[int] = None) -> str:
    r"""A short hash of a graph: its numbers of vertices and edges and up to
    4,096 evenly spaced columns of :obj:`edge_index` (per node and edge type);
    a different edge between two sampled ones goes unseen.

    Args:
        data: A :class:`~torch_geometric.data.Data`, a
            :class:`~torch_geometric.data.HeteroData`, or an :obj:`edge_index`
            tensor (then with :obj:`num_nodes`).
        num_nodes (int, optional): The number of vertices, for an
            :obj:`edge_index`."""
    if isinstance(data, Tensor):
        if num_nodes is None:
            raise ValueError("'num_nodes' is needed with an edge_index")
        return edge_index_fingerprint(data, int(num_nodes))
    from torch_geometric.data import HeteroData
    h = hashlib.sha256()
    if isinstance(data, HeteroData):
        h.update(b'hetero:')
        for node_type in data.node_types:
            h.update(f'{node_type}={int(data[node_type].num_nodes or 0)};'
                     .encode())
        for edge_type in data.edge_types:
            h.update(f"{'__'.join(edge_type)}:".encode())
            _update(h, edge_index_of(data[edge_type]), '')
        return h.hexdigest()[:16]
    num = data.num_nodes
    _update(h, edge_index_of(data), '' if num is None else str(int(num)))
    return h.hexdigest()[:16]


def csc_fingerprint(colptr: Tensor, row: Tensor, num_src_nodes: int) -> str:
    r"""A short hash of a CSC layout (its counts and up to 4,096 evenly
    spaced entries of :obj:`colptr` and of :obj:`row`), for topologies
    built from a CSC layout rather than from a graph."""
    h = hashlib.sha256()
    h.update(f'csc:{int(num_src_nodes)}:{colptr.numel()}:{row.numel()}:'
             .encode())
    for values in (colptr, row):
        if values.numel():
            _hash_sample(h, values[_spaced(values.numel(), values.device)])
    return h.hexdigest()[:16]


def differing_ranks(values: Sequence[Any]) -> List[int]:
    r"""The ranks whose entry of :obj:`values` differs from the most common
    one (rank 0's where several are as common)."""
    counts = Counter(values)
    common = max(values, key=lambda v: (counts[v], v == values[0]))
    return [r for r, v in enumerate(values) if v != common]
