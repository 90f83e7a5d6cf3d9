"""Graph topology in the CSC layout that every sampler in :mod:`pyg_orch`
reads (:class:`GraphTopology`: one :class:`~pyg_orch.core.csc.CSCTopology`
per edge type), and how it is built from PyG's graph types."""
from __future__ import annotations

from typing import Dict, Optional, Union

import torch
from torch import Tensor

from pyg_orch.core.csc import CSCTopology
from pyg_orch.typing import EdgeType, NodeType


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
        return _time_per_type(node_level, stores, 'node', time_attr,
                              lambda t, store: num_nodes[t]), {}
    return None, _time_per_type(edge_level, edge_stores, 'edge', time_attr,
                                lambda t, store: store.edge_index.size(1))


def _time_per_type(level, stores, kind: str, time_attr: str,
                   length) -> Dict:
    missing = [t for t in stores if t not in level]
    if missing:
        raise ValueError(f"The time attribute 'time_attr'={time_attr!r} is "
                         f"missing on {kind} types {missing}")
    out = {}
    for t, store in level.items():
        where = 'data' if t is None else f'data[{t!r}]'
        out[t] = _check_vector(store[time_attr], length(t, store),
                               f'{where}.{time_attr}', 'time_attr')
    return out


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
