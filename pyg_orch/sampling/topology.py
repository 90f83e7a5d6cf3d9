"""Graph topology in the CSC layout that every sampler in :mod:`pyg_orch`
reads: for each destination node, the contiguous list of its in-neighbors."""
from __future__ import annotations

import weakref
from dataclasses import dataclass
from typing import Dict, Iterable, Optional, Tuple, Union

import torch
from torch import Tensor

from pyg_orch.typing import EdgeType, NodeType

_INT32_MAX = 2**31 - 1


def smallest_index_dtype(*bounds: int) -> torch.dtype:
    r"""Returns :obj:`torch.int32` if every bound fits into it, else
    :obj:`torch.int64`."""
    return torch.int32 if max(bounds, default=0) <= _INT32_MAX else torch.int64


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
    """
    colptr: Tensor
    row: Tensor
    edge_id: Optional[Tensor]
    num_src_nodes: int
    time: Optional[Tensor] = None
    weight: Optional[Tensor] = None
    _weight_cumsum: Optional[Tensor] = None

    @property
    def weight_cumsum(self) -> Tensor:
        r"""Inclusive prefix sum of the weights in fixed point (int64), for
        inverse-CDF draws within any neighborhood: each neighborhood's
        weights are scaled to :obj:`2^32` units in total (every positive
        weight to at least one unit), so no neighborhood vanishes next to
        heavy ones, and zero weights add exactly nothing on any device (a
        floating-point scan on a GPU does not guarantee that)."""
        if self._weight_cumsum is None:
            w = self.weight.to(torch.float64)
            deg = (self.colptr[1:] - self.colptr[:-1]).to(torch.int64)
            seg = torch.repeat_interleave(
                torch.arange(deg.numel(), device=w.device), deg,
                output_size=w.numel())
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
        r"""Builds the CSC layout from a COO :obj:`edge_index` of shape
        :obj:`[2, num_edges]` holding (source, destination) pairs.

        The input is validated: a node index outside
        :obj:`[0, num_nodes)` raises a :class:`ValueError`, and so does
        :obj:`is_sorted=True` for edges that are not sorted by destination
        (and by time within each neighborhood, for temporal sampling).

        With :obj:`src_node_time` (per source node) or :obj:`edge_time` (per
        edge), every neighborhood is sorted by time, as temporal sampling
        needs; :obj:`edge_weight` (per edge) is carried into CSC order.
        """
        if not isinstance(edge_index, Tensor):
            raise TypeError(f"'{name}' must be a torch.Tensor of shape "
                            f"[2, num_edges] (got {type(edge_index)})")
        if edge_index.dim() != 2 or edge_index.size(0) != 2:
            raise ValueError(f"'{name}' must have shape [2, num_edges] "
                             f"(got {list(edge_index.shape)})")
        if edge_index.dtype not in (torch.int32, torch.int64):
            raise ValueError(f"'{name}' must hold int32 or int64 indices "
                             f"(got {edge_index.dtype})")
        device = torch.device(device) if device is not None else \
            edge_index.device
        edge_index = edge_index.to(device)
        row, col = edge_index[0], edge_index[1]
        num_edges = row.numel()
        if num_edges > 0:
            rmin, rmax = int(row.min()), int(row.max())
            cmin, cmax = int(col.min()), int(col.max())
            if rmin < 0 or cmin < 0:
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
                perm = torch.sort(time, stable=True)[1]
                perm = perm[torch.sort(col[perm], stable=True)[1]]
                col = col[perm]
                time = time[perm]
            row = row[perm]
            edge_id = perm.to(index_dtype)
        weight: Optional[Tensor] = None
        if edge_weight is not None:
            weight = edge_weight.to(device)
            if edge_id is not None:
                weight = weight[edge_id.to(torch.int64)]
        count = torch.bincount(col, minlength=num_dst_nodes)
        colptr = torch.zeros(num_dst_nodes + 1, dtype=torch.int64,
                             device=device)
        torch.cumsum(count, 0, out=colptr[1:])
        return cls(colptr.to(index_dtype), row.to(index_dtype), edge_id,
                   num_src_nodes, time, weight)

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

    def degree(self, nodes: Tensor) -> Tensor:
        r"""In-degree of the destination nodes :obj:`nodes` (int64)."""
        nodes = nodes.to(torch.int64)
        return (self.colptr[nodes + 1] - self.colptr[nodes]).to(torch.int64)

    def to(self, device: Union[str, torch.device],
           non_blocking: bool = False) -> 'CSCTopology':
        device = torch.device(device)
        if device == self.device:
            return self
        def move(x: Optional[Tensor]) -> Optional[Tensor]:
            return None if x is None else x.to(device,
                                               non_blocking=non_blocking)

        return CSCTopology(move(self.colptr), move(self.row),
                           move(self.edge_id), self.num_src_nodes,
                           move(self.time), move(self.weight))

    def pin_memory(self) -> 'CSCTopology':
        r"""A copy in pinned host memory, which GPU kernels read zero-copy."""
        def pin(x: Optional[Tensor]) -> Optional[Tensor]:
            return None if x is None else x.cpu().pin_memory()

        return CSCTopology(pin(self.colptr), pin(self.row), pin(self.edge_id),
                           self.num_src_nodes, pin(self.time),
                           pin(self.weight))

    def share_memory_(self) -> 'CSCTopology':
        if not self.colptr.is_cuda:
            self.colptr.share_memory_()
            for x in (self.row, self.edge_id, self.time, self.weight):
                if x is not None:
                    x.share_memory_()
        return self


class GraphTopology:
    r"""The CSC topology of every edge type of a graph, built once and
    shareable by several loaders (for example train, validation and test):

    .. code-block:: python

        topology = GraphTopology.from_data(data)
        train_loader = HybridNeighborLoader(data, [10, 5], topology=topology)
        val_loader = HybridNeighborLoader(data, [10, 5], topology=topology,
                                          input_nodes=data.val_mask)

    Homogeneous graphs use the node type :obj:`None` and the edge type
    :obj:`None`.

    Args:
        csc (Dict[EdgeType, CSCTopology]): The topology per edge type.
        num_nodes (Dict[NodeType, int]): The number of nodes per node type.
    """
    def __init__(self, csc: Dict[Optional[EdgeType], CSCTopology],
                 num_nodes: Dict[Optional[NodeType], int],
                 node_time: Optional[Dict[Optional[NodeType], Tensor]] = None,
                 time_attr: Optional[str] = None,
                 weight_attr: Optional[str] = None):
        self.csc = csc
        self.num_nodes = num_nodes
        self.node_time = node_time
        self.time_attr = time_attr
        self.weight_attr = weight_attr

    @property
    def is_temporal(self) -> bool:
        return any(t.time is not None for t in self.csc.values())

    @property
    def is_weighted(self) -> bool:
        return any(t.weight is not None for t in self.csc.values())

    @property
    def is_hetero(self) -> bool:
        return None not in self.num_nodes

    @property
    def edge_types(self) -> list:
        return list(self.csc.keys())

    @property
    def node_types(self) -> list:
        return list(self.num_nodes.keys())

    @property
    def device(self) -> torch.device:
        for topo in self.csc.values():
            return topo.device
        return torch.device('cpu')

    @property
    def num_edges(self) -> int:
        return sum(t.num_edges for t in self.csc.values())

    def nbytes(self) -> int:
        r"""Bytes held by the topology tensors."""
        total = 0
        for t in self.csc.values():
            for x in (t.colptr, t.row, t.edge_id, t.time, t.weight):
                if x is not None:
                    total += x.numel() * x.element_size()
        return total

    def to(self, device: Union[str, torch.device]) -> 'GraphTopology':
        if torch.device(device) == self.device:
            return self
        node_time = None if self.node_time is None else {
            k: v.to(device)
            for k, v in self.node_time.items()
        }
        return GraphTopology({k: v.to(device)
                              for k, v in self.csc.items()}, self.num_nodes,
                             node_time, self.time_attr, self.weight_attr)

    def pin_memory(self) -> 'GraphTopology':
        r"""A copy in pinned host memory (see :meth:`CSCTopology.pin_memory`).
        """
        node_time = None if self.node_time is None else {
            k: v.cpu()
            for k, v in self.node_time.items()
        }
        return GraphTopology({k: v.pin_memory()
                              for k, v in self.csc.items()}, self.num_nodes,
                             node_time, self.time_attr, self.weight_attr)

    @property
    def is_pinned(self) -> bool:
        return all(t.colptr.is_pinned() for t in self.csc.values())

    def share_memory_(self) -> 'GraphTopology':
        for topo in self.csc.values():
            topo.share_memory_()
        return self

    @classmethod
    def from_data(
        cls,
        data,
        is_sorted: bool = False,
        device: Optional[Union[str, torch.device]] = None,
        time_attr: Optional[str] = None,
        weight_attr: Optional[str] = None,
    ) -> 'GraphTopology':
        r"""Builds the topology of a :class:`~torch_geometric.data.Data`, a
        :class:`~torch_geometric.data.HeteroData` or a
        (:class:`~torch_geometric.data.FeatureStore`,
        :class:`~torch_geometric.data.GraphStore`) pair.

        Args:
            data: The graph.
            is_sorted (bool): Edges are sorted by destination (and by time
                within neighborhoods if :obj:`time_attr` is set); checked.
            device (torch.device, optional): Where the topology lives.
            time_attr (str, optional): A node-level or edge-level time
                attribute for temporal sampling.
            weight_attr (str, optional): An edge-level attribute of
                non-negative sampling weights.
        """
        from torch_geometric.data import Data, HeteroData

        if isinstance(data, Data):
            stores = {None: data}
            edge_stores = {None: data}
        elif isinstance(data, HeteroData):
            stores = {t: data[t] for t in data.node_types}
            edge_stores = {t: data[t] for t in data.edge_types}
        elif isinstance(data, (tuple, list)) and len(data) == 2:
            if time_attr is not None or weight_attr is not None:
                raise NotImplementedError(
                    "'time_attr' and 'weight_attr' are not supported for "
                    "(FeatureStore, GraphStore) inputs yet")
            return cls._from_stores(*data, device=device)
        else:
            raise TypeError(f"'data' must be a Data, HeteroData or a "
                            f"(FeatureStore, GraphStore) tuple "
                            f"(got {type(data)})")

        num_nodes = {}
        for node_type, store in stores.items():
            n = store.num_nodes
            if n is None:
                where = 'data' if node_type is None else \
                    f'data[{node_type!r}]'
                raise ValueError(f"Could not infer the number of nodes of "
                                 f"{where}; set {where}.num_nodes")
            num_nodes[node_type] = n

        node_time, edge_time = _collect_time(stores, edge_stores, num_nodes,
                                             time_attr)
        edge_weight = _collect_weight(edge_stores, weight_attr)

        csc = {}
        for edge_type, store in edge_stores.items():
            src, dst = (None, None) if edge_type is None else \
                (edge_type[0], edge_type[-1])
            name = 'edge_index' if edge_type is None else \
                f"data[{edge_type!r}].edge_index"
            edge_index = store.edge_index if 'edge_index' in store else None
            if edge_index is None:
                if edge_type is not None:
                    raise ValueError(f"Edge type {edge_type} has no "
                                     f"'edge_index'")
                edge_index = torch.empty(2, 0, dtype=torch.long)
            csc[edge_type] = CSCTopology.from_edge_index(
                edge_index, num_nodes[src], num_nodes[dst], is_sorted,
                device=device, name=name,
                src_node_time=None if node_time is None else node_time.get(
                    src), edge_time=edge_time.get(edge_type),
                edge_weight=edge_weight.get(edge_type))
        if node_time is not None and device is not None:
            node_time = {k: v.to(device) for k, v in node_time.items()}
        return cls(csc, num_nodes, node_time, time_attr, weight_attr)

    @classmethod
    def _from_stores(cls, feature_store, graph_store,
                     device=None) -> 'GraphTopology':
        from torch_geometric.data import remote_backend_utils

        edge_attrs = graph_store.get_all_edge_attrs()
        if len(edge_attrs) == 0:
            raise ValueError("The graph store holds no edges")
        is_hetero = all(attr.edge_type is not None for attr in edge_attrs)
        row, colptr, perm = graph_store.csc()
        if not is_hetero:
            num_nodes = max(edge_attrs[0].size) if edge_attrs[0].size \
                else remote_backend_utils.size(feature_store, graph_store,
                                               None)
            csc = CSCTopology.from_csc(colptr, row, perm, num_nodes)
            return cls({None: csc.to(device or colptr.device)},
                       {None: num_nodes})
        node_types = set()
        for attr in edge_attrs:
            node_types.add(attr.edge_type[0])
            node_types.add(attr.edge_type[-1])
        for attr in feature_store.get_all_tensor_attrs():
            if isinstance(attr.group_name, str):
                node_types.add(attr.group_name)
        num_nodes = {
            t: remote_backend_utils.size(feature_store, graph_store, t)
            for t in sorted(node_types)
        }
        csc = {
            et: CSCTopology.from_csc(colptr[et], row[et], perm.get(et),
                                     num_nodes[et[0]])
            for et in colptr
        }
        if device is not None:
            csc = {k: v.to(device) for k, v in csc.items()}
        return cls(csc, num_nodes)


def _check_vector(value, length: int, what: str, arg: str) -> Tensor:
    if not isinstance(value, Tensor):
        raise ValueError(f"'{arg}' must name a tensor attribute ({what} is a "
                         f"{type(value).__name__})")
    if value.dim() != 1 or value.numel() != length:
        raise ValueError(f"'{arg}': {what} must have shape [{length}] "
                         f"(got {list(value.shape)})")
    if value.dtype == torch.bool or value.is_complex():
        raise ValueError(f"'{arg}': {what} must be integer or floating point "
                         f"(got {value.dtype})")
    return value


def _collect_time(stores, edge_stores, num_nodes, time_attr):
    if time_attr is None:
        return None, {}
    node_level = {
        t: s
        for t, s in stores.items()
        if time_attr in s and s.is_node_attr(time_attr)
    }
    edge_level = {
        t: s
        for t, s in edge_stores.items()
        if time_attr in s and s.is_edge_attr(time_attr)
        and not (t is None and node_level)
    }
    if node_level and edge_level:
        raise ValueError(f"The time attribute 'time_attr'={time_attr!r} holds "
                         f"both node-level and edge-level information")
    if not node_level and not edge_level:
        raise ValueError(f"The time attribute 'time_attr'={time_attr!r} is "
                         f"neither a node-level nor an edge-level attribute")
    if node_level:
        missing = [t for t in stores if t not in node_level]
        if missing:
            raise ValueError(f"The time attribute 'time_attr'={time_attr!r} "
                             f"is missing on node types {missing}")
        node_time = {}
        for t, store in node_level.items():
            where = 'data' if t is None else f'data[{t!r}]'
            node_time[t] = _check_vector(store[time_attr], num_nodes[t],
                                         f'{where}.{time_attr}', 'time_attr')
        return node_time, {}
    missing = [t for t in edge_stores if t not in edge_level]
    if missing:
        raise ValueError(f"The time attribute 'time_attr'={time_attr!r} is "
                         f"missing on edge types {missing}")
    edge_time = {}
    for t, store in edge_level.items():
        where = 'data' if t is None else f'data[{t!r}]'
        edge_time[t] = _check_vector(store[time_attr],
                                     store.edge_index.size(1),
                                     f'{where}.{time_attr}', 'time_attr')
    return None, edge_time


def _collect_weight(edge_stores, weight_attr) -> Dict:
    if weight_attr is None:
        return {}
    out = {}
    for t, store in edge_stores.items():
        if weight_attr not in store:
            continue
        where = 'data' if t is None else f'data[{t!r}]'
        w = _check_vector(store[weight_attr], store.edge_index.size(1),
                          f'{where}.{weight_attr}', 'weight_attr')
        if w.numel() > 0:
            if not bool(torch.isfinite(w.to(torch.float64)).all()):
                raise ValueError(f"'weight_attr': {where}.{weight_attr} "
                                 f"holds non-finite weights")
            if bool((w < 0).any()):
                raise ValueError(f"'weight_attr': {where}.{weight_attr} "
                                 f"holds negative weights; weights must be "
                                 f">= 0")
        out[t] = w
    if not out:
        raise ValueError(f"The weight attribute 'weight_attr'={weight_attr!r}"
                         f" is not an edge attribute of the graph")
    return out


class _TopologyCache:
    r"""Reuses the topology of the same :obj:`edge_index` tensors across
    loaders, invalidated when a tensor is modified in place."""
    def __init__(self):
        self._entries: Dict[tuple, Tuple[list, int, GraphTopology]] = {}

    @staticmethod
    def _tensors(data) -> Iterable[Tensor]:
        from torch_geometric.data import Data, HeteroData
        if isinstance(data, Data):
            return [data.edge_index] if data.edge_index is not None else []
        if isinstance(data, HeteroData):
            return [s.edge_index for s in data.edge_stores
                    if 'edge_index' in s]
        return []

    def get_or_build(self, data, is_sorted: bool, device: torch.device,
                     time_attr: Optional[str] = None,
                     weight_attr: Optional[str] = None) -> GraphTopology:
        tensors = list(self._tensors(data))
        if not tensors or time_attr is not None or weight_attr is not None:
            # Time and weight tensors may change without notice: no caching.
            return GraphTopology.from_data(data, is_sorted, device, time_attr,
                                           weight_attr)
        key = (tuple(id(t) for t in tensors), str(device), bool(is_sorted),
               repr(data.num_nodes) if hasattr(data, 'num_nodes') else '')
        version = sum(t._version for t in tensors)
        entry = self._entries.get(key)
        if entry is not None:
            refs, ver, topo = entry
            if ver == version and all(r() is t
                                      for r, t in zip(refs, tensors)):
                return topo
        topo = GraphTopology.from_data(data, is_sorted, device)
        # Drop entries whose tensors are gone:
        self._entries = {
            k: v
            for k, v in self._entries.items()
            if all(r() is not None for r in v[0])
        }
        self._entries[key] = ([weakref.ref(t) for t in tensors], version,
                              topo)
        return topo


topology_cache = _TopologyCache()
