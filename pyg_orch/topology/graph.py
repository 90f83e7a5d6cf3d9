"""Graph topology in the CSC layout that every sampler in :mod:`pyg_orch`
reads (:class:`GraphTopology`: one :class:`~pyg_orch.topology.csc.CSCTopology`
per edge type), and how it is built from PyG's graph types."""
from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any, Dict, Optional, Tuple, Union

import torch
from torch import Tensor

from pyg_orch.core.checks import check_bool, resolve_device
from pyg_orch.topology.csc import CSCTopology, segment_ids
from pyg_orch.core.errors import GraphTypeError, graph_type_message
from pyg_orch.topology.fingerprint import graph_fingerprint
from pyg_orch.topology.sparse_adj import (
    adj_t_edge_index,
    adj_t_num_edges,
    check_adj_t,
    is_sparse,
)
from pyg_orch.typing import EdgeType, NodeType


@dataclass(eq=False, repr=False)
class GraphTopology:
    r"""The CSC topology of every edge type of a graph, built once and
    shareable by several loaders (e.g. train, validation and test), which
    check its recorded graph fingerprint against their graph. Homogeneous
    graphs use the node type and edge type :obj:`None`.

    .. code-block:: python

        topology = GraphTopology.from_data(data)
        loader = HybridNeighborLoader(data, [10, 5], topology=topology)

    Args:
        csc (Dict[EdgeType, CSCTopology]): The topology per edge type.
        num_nodes (Dict[NodeType, int]): The number of nodes per node type.
        fingerprint (str, optional): The fingerprint of the graph it was
            built from (set by :meth:`from_data`)."""
    csc: Dict[Optional[EdgeType], CSCTopology]
    num_nodes: Dict[Optional[NodeType], int]
    node_time: Optional[Dict[Optional[NodeType], Tensor]] = None
    time_attr: Optional[str] = None
    weight_attr: Optional[str] = None
    fingerprint: Optional[str] = None

    def content_fingerprint(self) -> str:
        r"""The recorded :obj:`fingerprint`, else a hash of the counts and
        every edge type's content fingerprint: equal for topologies built
        alike."""
        if self.fingerprint is not None:
            return self.fingerprint
        h = hashlib.sha256(repr(sorted(
            (str(k), int(v)) for k, v in self.num_nodes.items())).encode())
        for et, t in self.csc.items():
            h.update(f'{et}={t.content_fingerprint()};'.encode())
        return h.hexdigest()[:16]

    def check_graph(self, data: Any, arg: str = 'topology') -> None:
        r"""Raises a :class:`ValueError` if this topology was built from
        another graph than :obj:`data` (unchecked without a recorded
        fingerprint)."""
        from torch_geometric.data import Data, HeteroData
        if self.fingerprint is None or not isinstance(data,
                                                      (Data, HeteroData)):
            return
        given = graph_fingerprint(data)
        if given != self.fingerprint:
            raise ValueError(
                f"'{arg}' was built from another graph than the one given "
                f"(graph fingerprint {self.fingerprint!r}, the given "
                f"graph's is {given!r}: their numbers of nodes or edges, or "
                f"their edges, differ); build it from this graph with "
                f"GraphTopology.from_data(data)")

    @property
    def is_temporal(self) -> bool:
        # Node-level time on node types that are never a source still makes
        # sampling temporal (disjoint, bounded by the seeds' times), as in PyG.
        return self.node_time is not None or any(
            t.time is not None for t in self.csc.values())

    @property
    def is_weighted(self) -> bool:
        return any(t.weight is not None for t in self.csc.values())

    @property
    def is_sharded(self) -> bool:
        r"""Whether the neighbor lists are split across the machine's
        processes (:obj:`PlacementOptions(topology='sharded')`)."""
        return any(t.is_sharded for t in self.csc.values())

    def read_counts(self) -> Dict[str, int]:
        r"""For a sharded topology: neighbors read from this rank's shard
        (:obj:`'local'`), from copies (:obj:`'replicated'`) and from other
        ranks' shards (:obj:`'peer'`), over all edge types."""
        total = {'local': 0, 'replicated': 0, 'peer': 0}
        for t in self.csc.values():
            if t.reads is not None:
                for key, value in zip(total, t.reads.tolist()):
                    total[key] += value
        return total

    def reset_read_counts(self) -> None:
        for t in self.csc.values():
            if t.reads is not None:
                t.reads.zero_()

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
        return sum(t.nbytes() for t in self.csc.values())

    def _map(self, csc_fn, time_fn) -> 'GraphTopology':
        node_time = None if self.node_time is None else {
            k: time_fn(v) for k, v in self.node_time.items()}
        return GraphTopology({k: csc_fn(v) for k, v in self.csc.items()},
                             self.num_nodes, node_time, self.time_attr,
                             self.weight_attr, self.fingerprint)

    def to(self, device: Union[str, torch.device]) -> 'GraphTopology':
        if torch.device(device) == self.device:
            return self
        return self._map(lambda t: t.to(device), lambda t: t.to(device))

    def pin_memory(self) -> 'GraphTopology':
        r"""A copy in pinned host memory (see :meth:`CSCTopology.pin_memory`).
        """
        return self._map(lambda t: t.pin_memory(), lambda t: t.cpu())

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
                attribute for temporal sampling (types without it are not
                filtered by time).
            weight_attr (str, optional): An edge-level attribute of
                non-negative sampling weights (not for store pairs)."""
        from torch_geometric.data import Data, HeteroData

        is_sorted = check_bool('is_sorted', is_sorted)
        if device is not None:
            device = resolve_device(device)
        if isinstance(data, Data):
            stores = {None: data}
            edge_stores = {None: data}
        elif isinstance(data, HeteroData):
            stores = {t: data[t] for t in data.node_types}
            edge_stores = {t: data[t] for t in data.edge_types}
        elif isinstance(data, (tuple, list)) and len(data) == 2:
            if weight_attr is not None:
                raise NotImplementedError(
                    "'weight_attr' argument not yet supported for "
                    "'(FeatureStore, GraphStore)' inputs (as in PyG): "
                    "weighted sampling needs a Data or HeteroData")
            return cls._from_stores(*data, device=device,
                                    time_attr=time_attr)
        else:
            raise GraphTypeError(graph_type_message(data))

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
            edge_index, sorted_ = _store_edges(store, edge_type,
                                               num_nodes[src], num_nodes[dst])
            if 'adj_t' in store:
                name = name.replace('edge_index', 'adj_t')
                # Sorted by destination: time still sorts neighborhoods.
                sorted_ = sorted_ and (node_time is None or node_time.get(
                    src) is None) and edge_time.get(edge_type) is None
            csc[edge_type] = CSCTopology.from_edge_index(
                edge_index, num_nodes[src], num_nodes[dst],
                is_sorted or sorted_,
                device=device, name=name,
                src_node_time=None if node_time is None else node_time.get(
                    src), edge_time=edge_time.get(edge_type),
                edge_weight=edge_weight.get(edge_type))
        if node_time is not None and device is not None:
            node_time = {k: v.to(device) for k, v in node_time.items()}
        return cls(csc, num_nodes, node_time, time_attr, weight_attr,
                   graph_fingerprint(data))

    @classmethod
    def _from_stores(cls, feature_store, graph_store, device=None,
                     time_attr: Optional[str] = None) -> 'GraphTopology':
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
            row, colptr, perm = {None: row}, {None: colptr}, {None: perm}
            num_nodes = {None: num_nodes}
        else:
            node_types = {t for attr in edge_attrs for t in (
                attr.edge_type[0], attr.edge_type[-1])} | {
                    attr.group_name
                    for attr in feature_store.get_all_tensor_attrs()
                    if isinstance(attr.group_name, str)}
            num_nodes = {
                t: remote_backend_utils.size(feature_store, graph_store, t)
                for t in sorted(node_types)
            }
        if time_attr is None:
            csc = {
                et: CSCTopology.from_csc(
                    colptr[et], row[et], perm.get(et),
                    num_nodes[None if et is None else et[0]])
                for et in colptr
            }
            if device is not None:
                csc = {k: v.to(device) for k, v in csc.items()}
            return cls(csc, num_nodes)

        node_time, edge_time = _store_time(feature_store, time_attr,
                                           num_nodes, colptr, row)
        csc = {}
        for et in colptr:
            # Back to the stored edge order (the edge ids), then sorted by
            # destination and time within neighborhoods as for a `Data`, so
            # that the same graph samples the same batches either way.
            src, dst = (None, None) if et is None else (et[0], et[-1])
            edge_index = _stored_edge_index(colptr[et], row[et], perm.get(et))
            name = 'the edges' if et is None else f'the edges of {et}'
            csc[et] = CSCTopology.from_edge_index(
                edge_index, num_nodes[src],
                max(num_nodes[dst], colptr[et].numel() - 1),
                device=device, name=f'{name} in the graph store',
                src_node_time=None if node_time is None else node_time.get(
                    src), edge_time=edge_time.get(et))
        if node_time is not None and device is not None:
            node_time = {k: v.to(device) for k, v in node_time.items()}
        return cls(csc, num_nodes, node_time, time_attr)


def _store_edges(store, edge_type: Optional[EdgeType], num_src: int,
                 num_dst: int) -> Tuple[Tensor, bool]:
    # The edges of one edge store as COO pairs in edge-id order, and whether
    # they are sorted by destination already. As PyG's `to_csc`, `adj_t`
    # comes first (edge ids are its storage positions), then `edge_index`.
    where = 'data' if edge_type is None else f'data[{edge_type!r}]'
    if 'adj_t' in store:
        check_adj_t(store.adj_t, num_src, num_dst, f'{where}.adj_t')
        return adj_t_edge_index(store.adj_t)
    if 'edge_index' in store and store.edge_index is not None:
        return store.edge_index, False
    if 'adj' in store and is_sparse(store.adj):
        raise NotImplementedError(
            f"{where}.adj: a non-transposed sparse adjacency is not sampled "
            f"yet; store its transpose as 'adj_t' (T.ToSparseTensor()) or "
            f"pass 'edge_index'")
    if edge_type is not None:
        raise ValueError(f"Edge type {edge_type} has neither 'edge_index' "
                         f"nor 'adj_t'")
    return torch.empty(2, 0, dtype=torch.long), False


def num_store_edges(store) -> int:
    r"""The number of edges of an edge store given by :obj:`edge_index` or
    :obj:`adj_t`."""
    if 'adj_t' in store:
        return adj_t_num_edges(store.adj_t)
    return store.edge_index.size(1)


def _stored_edge_index(colptr: Tensor, row: Tensor,
                       perm: Optional[Tensor]) -> Tensor:
    # The COO edge index, in the graph store's edge order, of a CSC layout
    # whose position `i` holds the edge `perm[i]` (`i` itself without perm).
    deg = (colptr[1:] - colptr[:-1]).to(torch.int64)
    col = segment_ids(deg, row.numel())
    edge_index = torch.stack([row.to(torch.int64), col])
    if perm is None:
        return edge_index
    out = torch.empty_like(edge_index)
    out[:, perm.to(torch.int64)] = edge_index
    return out


def _store_time(feature_store, time_attr: str, num_nodes: Dict,
                colptr: Dict, row: Dict):
    r"""Node- or edge-level times of a remote backend, read from the feature
    store as PyG does (see :meth:`GraphTopology.from_data`)."""
    import copy

    is_hetero = None not in num_nodes
    attrs = [
        copy.copy(attr) for attr in feature_store.get_all_tensor_attrs()
        if attr.attr_name == time_attr and (
            attr.group_name is not None) == is_hetero
    ]
    if not attrs:
        raise ValueError(
            f"Temporal sampling specified but did not find any temporal data: "
            f"the feature store holds no tensor named "
            f"'time_attr'={time_attr!r}")
    for attr in attrs:
        attr.index = None  # The whole tensor.
    tensors = feature_store.multi_get_tensor(attrs)
    num_edges = {et: int(r.numel()) for et, r in row.items()}

    if not is_hetero:
        if len(attrs) != 1:
            raise ValueError(
                f"Temporal sampling specified but did not find any temporal "
                f"data: the feature store holds {len(attrs)} tensors named "
                f"'time_attr'={time_attr!r}, but needs exactly one")
        time = tensors[0]
        n, e = num_nodes[None], num_edges[None]
        size = time.numel() if isinstance(time, Tensor) else -1
        node_level = time_attr == 'time'
        if size != (n if node_level else e) and size == (e if node_level
                                                         else n):
            node_level = not node_level
        where = f"the feature store's {time_attr!r}"
        if node_level:
            return {None: _check_time(time, n, where)}, {}
        return None, {None: _check_time(time, e, where)}

    node_time, edge_time = {}, {}
    for attr, time in zip(attrs, tensors):
        group = attr.group_name
        where = f'the feature store\'s {time_attr!r} of {group!r}'
        node_level = isinstance(group, str)
        key = group if node_level else tuple(group)
        counts = num_nodes if node_level else num_edges
        if key not in counts:
            raise ValueError(f"'time_attr': {where} names no "
                             f"{'node' if node_level else 'edge'} type of "
                             f"the graph store")
        out = node_time if node_level else edge_time
        out[key] = _check_time(time, counts[key], where)
    if node_time and edge_time:
        raise ValueError(
            f"Found time attribute 'time_attr'={time_attr!r} for both "
            f"node-level and edge-level types in the feature store; it must "
            f"be one or the other")
    return (node_time, {}) if node_time else (None, edge_time)


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


def _check_time(value, length: int, what: str) -> Tensor:
    value = _check_vector(value, length, what, 'time_attr')
    check_not_nan(value, f"'time_attr': {what}", 'node or edge')
    return value


def check_not_nan(value: Tensor, what: str, per: str) -> None:
    r"""Raises naming :obj:`what` if the times hold NaN (which would
    silently drop neighbors); :obj:`per` says what needs a time."""
    if not value.is_floating_point():
        return
    nan = torch.isnan(value)
    if bool(nan.any()):
        first = int(nan.nonzero()[0, 0])
        raise ValueError(f"{what} holds NaN at {int(nan.sum())} of "
                         f"{value.numel()} entries (the first at index "
                         f"{first}); every {per} needs a time")


def check_time_level(time_attr: str, node_level: bool, edge_level: bool,
                     what: str = 'the graph') -> None:
    r"""Raises PyG's errors where :obj:`time_attr` is both a node-level and
    an edge-level attribute of :obj:`what`, or neither."""
    if node_level and edge_level:
        raise ValueError(f"The time attribute 'time_attr'={time_attr!r} holds "
                         f"both node-level and edge-level information")
    if not node_level and not edge_level:
        raise ValueError(f"The time attribute 'time_attr'={time_attr!r} is "
                         f"neither a node-level or edge-level attribute of "
                         f"{what}")


def _collect_time(stores, edge_stores, num_nodes, time_attr):
    # As PyG: in a `Data`, `time_attr` is node-level or edge-level by its
    # shape; in a `HeteroData`, node-level if a node type has it, edge-level
    # if an edge type has it (not both). Node and edge types without it are
    # sampled without time filter (the seeds still need a time).
    if time_attr is None:
        return None, {}
    hetero = None not in stores
    node_level = {t: s for t, s in stores.items() if time_attr in s
                  and (hetero or s.is_node_attr(time_attr))}
    edge_level = {t: s for t, s in edge_stores.items() if time_attr in s
                  and (hetero or s.is_edge_attr(time_attr))
                  and not (t is None and node_level)}
    check_time_level(time_attr, bool(node_level), bool(edge_level))
    out = {
        t: _check_time(s[time_attr],
                       num_nodes[t] if node_level else num_store_edges(s),
                       f"{'data' if t is None else f'data[{t!r}]'}."
                       f"{time_attr}")
        for t, s in (node_level or edge_level).items()
    }
    return (out, {}) if node_level else (None, out)


#: What :func:`weight_problem` finds wrong with sampling weights, by code.
WEIGHT_PROBLEMS = ('must be one real number per edge',
                   'holds non-finite weights',
                   'holds negative weights; weights must be >= 0')


def weight_problem(weight: Tensor) -> int:
    r""":obj:`0` if :obj:`weight` can be sampling weights, else the code
    (from :obj:`1`) of the first of :obj:`WEIGHT_PROBLEMS` it has."""
    if weight.dim() != 1 or weight.is_complex() or \
            weight.dtype == torch.bool:
        return 1
    if weight.numel() == 0:
        return 0
    w64 = weight.to(torch.float64)
    if not bool(torch.isfinite(w64).all()):
        return 2
    return 3 if bool((w64 < 0).any()) else 0


def _collect_weight(edge_stores, weight_attr) -> Dict:
    if weight_attr is None:
        return {}
    out = {}
    for t, store in edge_stores.items():
        if weight_attr not in store:
            continue
        where = 'data' if t is None else f'data[{t!r}]'
        w = _check_vector(store[weight_attr], num_store_edges(store),
                          f'{where}.{weight_attr}', 'weight_attr')
        problem = weight_problem(w)
        if problem:
            raise ValueError(f"'weight_attr': {where}.{weight_attr} "
                             f"{WEIGHT_PROBLEMS[problem - 1]}")
        out[t] = w
    if not out:
        raise ValueError(f"The weight attribute 'weight_attr'={weight_attr!r}"
                         f" is not an edge attribute of the graph")
    return out
