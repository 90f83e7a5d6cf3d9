"""The CSC layout of one edge type: for each destination node, the contiguous
list of its in-neighbors. Read by the PyTorch and the Triton sampling paths
alike."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Union

import torch
from torch import Tensor

from pyg_orch.topology.fingerprint import (
    csc_fingerprint,
    edge_index_fingerprint,
)
from pyg_orch.topology.sparse_adj import index_to_ptr, segment_ids

_INT32_MAX = 2**31 - 1


def smallest_index_dtype(*bounds: int) -> torch.dtype:
    r""":obj:`torch.int32` if every bound fits into it, else :obj:`int64`."""
    return torch.int32 if max(bounds, default=0) <= _INT32_MAX else torch.int64


def time_order(segment: Tensor, time: Tensor) -> Tensor:
    r"""The stable permutation that sorts entries by :obj:`segment` (e.g.
    their destination), then by :obj:`time`."""
    perm = torch.sort(time, stable=True)[1]
    return perm[torch.sort(segment[perm], stable=True)[1]]


def check_edge_index(edge_index: Tensor, num_src_nodes: int,
                     num_dst_nodes: int, name: str = 'edge_index') -> None:
    r"""Raises naming :obj:`name` unless :obj:`edge_index` is an
    :obj:`int32` or :obj:`int64` :obj:`[2, num_edges]` tensor of node ids in
    range."""
    if not isinstance(edge_index, Tensor):
        raise TypeError(f"'{name}' must be a torch.Tensor of shape "
                        f"[2, num_edges] (got {type(edge_index)})")
    if edge_index.dim() != 2 or edge_index.size(0) != 2:
        raise ValueError(f"'{name}' must have shape [2, num_edges] "
                         f"(got {list(edge_index.shape)})")
    if edge_index.dtype not in (torch.int32, torch.int64):
        raise ValueError(f"'{name}' must hold int32 or int64 indices "
                         f"(got {edge_index.dtype})")
    if edge_index.size(1) == 0:
        return
    rmax, cmax = edge_index.max(dim=1).values.tolist()
    if int(edge_index.min()) < 0:
        raise ValueError(f"'{name}' holds negative node indices")
    if rmax >= num_src_nodes:
        raise ValueError(
            f"'{name}' refers to source node {rmax}, but the graph "
            f"has only {num_src_nodes} (source) nodes; set "
            f"'num_nodes' or fix '{name}'")
    if cmax >= num_dst_nodes:
        raise ValueError(
            f"'{name}' refers to destination node {cmax}, but the "
            f"graph has only {num_dst_nodes} (destination) nodes; "
            f"set 'num_nodes' or fix '{name}'")


@dataclass
class ShardLayout:
    r"""What the sampling kernels need to read neighbor lists split across GPUs
    (the fields of :class:`pyg_orch.multigpu.ShardedCSC`); :obj:`table`
    holds this rank, the :obj:`num_shards + 1` positions where shards start,
    the address of every shard's :obj:`row`, then of its edge ids."""
    table: Tensor
    num_shards: int
    rep_start: Optional[Tensor] = None
    rep_row: Optional[Tensor] = None
    rep_eid: Optional[Tensor] = None
    reads: Optional[Tensor] = None
    placed_start: Optional[Tensor] = None


@dataclass
class CSCTopology:
    r"""The edges of one edge type in compressed sparse column (CSC) layout.

    Args:
        colptr (torch.Tensor): Offsets of shape :obj:`[num_dst_nodes + 1]`;
            the in-neighbors of destination :obj:`v` are
            :obj:`row[colptr[v]:colptr[v + 1]]`.
        row (torch.Tensor): Source node of every edge, grouped by destination.
        edge_id (torch.Tensor, optional): The original edge id of every CSC
            position, or :obj:`None` if positions are the original ids.
        num_src_nodes (int): The number of source nodes.
        time (torch.Tensor, optional): Timestamp of every CSC position (the
            source node's time for node-level temporal sampling, the edge's
            for edge-level); each neighborhood is sorted by it.
        weight (torch.Tensor, optional): Sampling weight of every CSC
            position.
        fingerprint (str, optional): The
            :func:`~pyg_orch.topology.fingerprint.edge_index_fingerprint` of
            the edges it was built from (:meth:`from_edge_index`), else
            :obj:`None`.
    """
    colptr: Tensor
    row: Tensor
    edge_id: Optional[Tensor]
    num_src_nodes: int
    time: Optional[Tensor] = None
    weight: Optional[Tensor] = None
    _weight_cumsum: Optional[Tensor] = None
    fingerprint: Optional[str] = None

    @property
    def weight_cumsum(self) -> Tensor:
        r"""Inclusive prefix sum of the weights in fixed point (int64): each
        neighborhood's weights scaled to :obj:`2^32` units (a positive weight
        to at least one), so that zero weights add exactly nothing on any
        device."""
        if self._weight_cumsum is None:
            w = self.weight.to(torch.float64)
            deg = (self.colptr[1:] - self.colptr[:-1]).to(torch.int64)
            seg = segment_ids(deg, w.numel())
            total = torch.zeros(deg.numel(), dtype=torch.float64,
                                device=w.device).index_add_(0, seg, w)
            total = total.index_select(0, seg).clamp(min=1e-300)
            units = torch.round(w / total * 2.0**32).to(torch.int64)
            units = torch.where(w > 0, units.clamp(min=1), 0)
            self._weight_cumsum = torch.cumsum(units, 0)
        return self._weight_cumsum

    @property
    def num_dst_nodes(self) -> int:
        return self.colptr.numel() - 1

    @property
    def num_edges(self) -> int:
        return self.row.numel()

    @property
    def device(self) -> torch.device:
        return self.colptr.device

    @classmethod
    def from_edge_index(
        cls,
        edge_index: Tensor,
        num_src_nodes: int,
        num_dst_nodes: int,
        is_sorted: bool = False,
        index_dtype: Optional[torch.dtype] = None,
        device: Optional[Union[str, torch.device]] = None,
        name: str = 'edge_index',
        src_node_time: Optional[Tensor] = None,
        edge_time: Optional[Tensor] = None,
        edge_weight: Optional[Tensor] = None,
    ) -> 'CSCTopology':
        r"""Builds the CSC layout from a COO :obj:`edge_index` of (source,
        destination) pairs, validated (indices in range; edges sorted where
        :obj:`is_sorted`). With :obj:`src_node_time` or :obj:`edge_time`, every
        neighborhood is sorted by time; :obj:`edge_weight` is carried along."""
        check_edge_index(edge_index, num_src_nodes, num_dst_nodes, name)
        device = torch.device(device) if device is not None else \
            edge_index.device
        fingerprint = edge_index_fingerprint(edge_index, num_src_nodes,
                                             num_dst_nodes)
        edge_index = edge_index.to(device)
        row, col = edge_index[0], edge_index[1]
        num_edges = row.numel()

        if index_dtype is None:
            index_dtype = smallest_index_dtype(num_src_nodes, num_dst_nodes,
                                               num_edges)
        time: Optional[Tensor] = None
        if src_node_time is not None:
            time = src_node_time.to(device)[row]
        elif edge_time is not None:
            time = edge_time.to(device)
        edge_id: Optional[Tensor] = None
        if is_sorted:
            if num_edges > 1 and bool((col[1:] < col[:-1]).any()):
                raise ValueError(
                    f"'is_sorted=True' but '{name}' is not sorted by "
                    f"destination (its second row); pass 'is_sorted=False'")
            if time is not None and num_edges > 1 and bool(
                ((col[1:] == col[:-1]) & (time[1:] < time[:-1])).any()):
                raise ValueError(
                    f"'is_sorted=True' but '{name}' is not sorted by time "
                    f"within neighborhoods, as temporal sampling needs; "
                    f"pass 'is_sorted=False'")
        else:
            if time is None:
                col, perm = torch.sort(col, stable=True)
            else:  # Sort by destination, then by time:
                perm = time_order(col, time)
                col = col[perm]
                time = time[perm]
            row = row[perm]
            edge_id = perm.to(index_dtype)
        weight = None if edge_weight is None else edge_weight.to(device)
        if weight is not None and edge_id is not None:
            weight = weight[edge_id.to(torch.int64)]
        colptr = index_to_ptr(col, num_dst_nodes)
        return cls(colptr.to(index_dtype), row.to(index_dtype), edge_id,
                   num_src_nodes, time, weight, fingerprint=fingerprint)

    @classmethod
    def from_csc(cls, colptr: Tensor, row: Tensor, edge_id: Optional[Tensor],
                 num_src_nodes: int) -> 'CSCTopology':
        r"""Wraps an existing CSC layout, e.g. from
        :meth:`torch_geometric.data.GraphStore.csc`."""
        if colptr.dim() != 1 or row.dim() != 1:
            raise ValueError("'colptr' and 'row' must be one-dimensional")
        if colptr.numel() == 0 or int(colptr[-1]) != row.numel():
            raise ValueError("'colptr[-1]' must equal the number of edges")
        return cls(colptr, row, edge_id, num_src_nodes)

    def content_fingerprint(self) -> str:
        r"""The recorded :obj:`fingerprint`, else the
        :func:`~pyg_orch.topology.fingerprint.csc_fingerprint` of the
        layout."""
        if self.fingerprint is not None:
            return self.fingerprint
        return csc_fingerprint(self.colptr, self.row, self.num_src_nodes)

    def degree(self, nodes: Tensor) -> Tensor:
        r"""In-degree of the destination nodes :obj:`nodes` (int64)."""
        nodes = nodes.to(torch.int64)
        return (self.colptr[nodes + 1] - self.colptr[nodes]).to(torch.int64)

    #: Whether :meth:`neighbors` needs the destinations (sharded topologies
    #: with replicated lists do).
    needs_dst = False
    #: Whether the lists are split across processes (see
    #: :class:`pyg_orch.multigpu.ShardedCSC`).
    is_sharded = False
    #: Reads per tier of a sharded topology (own shard, copies, peers).
    reads: Optional[Tensor] = None

    def neighbors(self, pos: Tensor, dst: Optional[Tensor] = None) -> Tensor:
        r"""The source nodes at CSC positions :obj:`pos` (in the dtype of
        :obj:`row`); :obj:`dst`, each position's destination, lets sharded
        topologies find replicated lists."""
        return self.row.index_select(0, pos)

    def kernel_shards(self) -> Optional['ShardLayout']:
        r"""How the Triton kernels find neighbor lists split across GPUs, or
        :obj:`None` if this topology is not split."""
        return None

    def edge_ids(self, pos: Tensor, dst: Optional[Tensor] = None) -> Tensor:
        r"""The edge ids at CSC positions :obj:`pos`."""
        return pos if self.edge_id is None else self.edge_id.index_select(
            0, pos)

    def _map(self, fn) -> 'CSCTopology':
        def apply(x: Optional[Tensor]) -> Optional[Tensor]:
            return None if x is None else fn(x)

        return CSCTopology(apply(self.colptr), apply(self.row),
                           apply(self.edge_id), self.num_src_nodes,
                           apply(self.time), apply(self.weight),
                           fingerprint=self.fingerprint)

    def to(self, device: Union[str, torch.device],
           non_blocking: bool = False) -> 'CSCTopology':
        device = torch.device(device)
        if device == self.device:
            return self
        return self._map(lambda x: x.to(device, non_blocking=non_blocking))

    def pin_memory(self) -> 'CSCTopology':
        r"""A copy in pinned host memory, which GPU kernels read zero-copy."""
        return self._map(lambda x: x.cpu().pin_memory())

    def nbytes(self) -> int:
        r"""Bytes held by this process's tensors of the topology."""
        return sum(x.numel() * x.element_size()
                   for x in (self.colptr, self.row, self.edge_id, self.time,
                             self.weight) if x is not None)

    def share_memory_(self) -> 'CSCTopology':
        if not self.colptr.is_cuda:
            for x in (self.colptr, self.row, self.edge_id, self.time,
                      self.weight):
                if x is not None:
                    x.share_memory_()
        return self
