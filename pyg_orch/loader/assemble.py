"""Assembles mini-batches like PyG's `filter_fn`, attributes classified
once instead of per batch."""
import copy
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple, Union

import numpy as np
import torch
from torch import Tensor
from torch_geometric.data import Data, HeteroData
from torch_geometric.data.storage import recursive_apply
from torch_geometric.loader.utils import index_select
from torch_geometric.sampler import HeteroSamplerOutput, SamplerOutput
from torch_geometric.typing import TensorFrame

from pyg_orch.core.devices import with_index
from pyg_orch.loader.prefetch import SCALAR_TYPES
from pyg_orch.topology.sparse_adj import adj_t_values, is_sparse, sampled_adj_t


def node_metadata(data: Any, out: Any, input_type: Any = None) -> Any:
    r"""Adds what PyG's :meth:`NodeLoader.filter_fn` adds from
    :obj:`out.metadata`."""
    store = data if input_type is None else data[input_type]
    store.input_id = out.metadata[0]
    store.seed_time = out.metadata[1]
    store.batch_size = out.metadata[0].size(0)
    return data


def link_metadata(data: Any, out: Any, neg_sampling: Any,
                  input_type: Any = None) -> Any:
    r"""Adds what PyG's :meth:`LinkLoader.filter_fn` adds from
    :obj:`out.metadata`."""
    hetero = input_type is not None
    store = data[input_type] if hetero else data
    store.input_id = out.metadata[0]
    if neg_sampling is None or neg_sampling.is_binary():
        store.edge_label_index = out.metadata[1]
        store.edge_label = out.metadata[2]
        store.edge_label_time = out.metadata[3]
        return data
    src = data[input_type[0]] if hetero else data
    dst = data[input_type[-1]] if hetero else data
    src.src_index = out.metadata[1]
    dst.dst_pos_index = out.metadata[2]
    dst.dst_neg_index = out.metadata[3]
    src.seed_time = dst.seed_time = out.metadata[4]
    # As PyG, in case `data` held them:
    del store.edge_label_index
    del store.edge_label_time
    return data


class DataAssembler:
    r"""Slices :obj:`data` (on :obj:`device`) by a :class:`SamplerOutput`,
    :obj:`x` gathered by :obj:`features(node_ids)` if given."""
    def __init__(self, data: Data, device: torch.device,
                 features: Optional[Callable[[Tensor], Tensor]] = None):
        self.features = features
        store = data._store
        self.node_attrs: List[Tuple[str, Any, int]] = []
        self.edge_attrs: List[Tuple[str, Any, int]] = []
        self.set_num_nodes = 'num_nodes' in store
        self.template = copy.copy(data)
        # `(adj_t, its values on device)`, sliced per batch as in PyG.
        self.adj_t = _adj_t_entry(store, device)
        self.has_edge_index = 'edge_index' in store or self.adj_t is None
        for key, value in store.items():
            if key in ('num_nodes', 'edge_index', 'adj_t'):
                continue
            if not isinstance(value, Tensor) or is_sparse(value):
                if store.is_edge_attr(key) or is_sparse(value):
                    self.edge_attrs.append(
                        _sliceable('data', key, value, data, store))
                elif isinstance(value, (np.ndarray, TensorFrame)) and \
                        store.is_node_attr(key):
                    self.node_attrs.append(
                        (key, value, data.__cat_dim__(key, value, store)))
                else:
                    continue
            elif store.is_node_attr(key):
                if key == 'x' and features is not None:
                    self.node_attrs.append((key, None, 0))
                else:
                    self.node_attrs.append(
                        (key, value.to(device),
                         data.__cat_dim__(key, value, store)))
            elif store.is_edge_attr(key):
                self.edge_attrs.append((key, value.to(device),
                                        data.__cat_dim__(key, value, store)))
            else:
                continue
            del self.template[key]
        for key in ('edge_index', 'adj_t'):
            if key in store:
                del self.template[key]

    def __call__(self, out: SamplerOutput) -> Data:
        r"""The mini-batch of a node-level loader (:func:`node_metadata`)."""
        return node_metadata(self.subgraph(out), out)

    def subgraph(self, out: SamplerOutput) -> Data:
        r"""The sampled subgraph with its attributes and PyG's bookkeeping,
        without the loader-specific :obj:`metadata`."""
        data = copy.copy(self.template)
        node = out.node
        for key, value, dim in self.node_attrs:
            if value is None:
                data[key] = self.features(node)
            else:
                data[key] = _select(value, node, dim)
        if self.set_num_nodes:
            data.num_nodes = node.numel()
        if self.has_edge_index:
            data.edge_index = stack_edges(out.row, out.col)
        edge = None if out.edge is None else out.edge.to(torch.int64)
        if self.adj_t is not None:
            data.adj_t = _slice_adj_t(self.adj_t, out.row, out.col, edge,
                                      node.numel(), node.numel())
        for key, value, dim in self.edge_attrs:
            data[key] = None if edge is None else _select(value, edge, dim)
        # The same bookkeeping as PyG's `NodeLoader.filter_fn` and
        # `LinkLoader.filter_fn`:
        data.n_id = node
        if edge is not None:
            data.e_id = edge
        data.batch = out.batch
        data.num_sampled_nodes = out.num_sampled_nodes
        data.num_sampled_edges = out.num_sampled_edges
        if out.orig_row is not None and out.orig_col is not None:
            data._orig_edge_index = torch.stack([out.orig_row, out.orig_col])
        return data


class HeteroDataAssembler:
    r"""Slices :obj:`data` (on :obj:`device`) by a
    :class:`HeteroSamplerOutput`, :obj:`x` per node type gathered by
    :obj:`features[node_type](node_ids)` if given."""
    def __init__(self, data: HeteroData, device: torch.device,
                 features: Optional[Mapping[str, Callable[[Tensor], Tensor]]]
                 = None, edge_permutation: Optional[Dict] = None):
        features = dict(features or {})
        self.features = features
        self.perm = {
            k: v.to(device)
            for k, v in (edge_permutation or {}).items() if v is not None
        }
        # Key by key, as PyG's `filter_node_store_` / `filter_edge_store_`
        # visit them; tensors moved to `device` once.
        self.node_attrs: Dict[str, List[Tuple[str, object, int]]] = {}
        self.num_nodes_key: Dict[str, bool] = {}
        for node_type in data.node_types:
            store = data[node_type]
            attrs = []
            for key, value in store.items():
                if key == 'num_nodes' or not store.is_node_attr(key):
                    continue
                dim = data.__cat_dim__(key, value, store)
                if key == 'x' and node_type in features:
                    attrs.append((key, None, 0))
                else:
                    attrs.append((key, _to(value, device), dim))
            self.node_attrs[node_type] = attrs
            self.num_nodes_key[node_type] = 'num_nodes' in store
        self.edge_attrs: Dict[Tuple, List[Tuple[str, object, int]]] = {}
        self.adj_t: Dict[Tuple, Tuple[Any, Optional[Tensor]]] = {}
        self.has_edge_index: Dict[Tuple, bool] = {}
        for edge_type in data.edge_types:
            store = data[edge_type]
            adj_t = _adj_t_entry(store, device)
            if adj_t is not None:
                self.adj_t[edge_type] = adj_t
            self.has_edge_index[edge_type] = ('edge_index' in store
                                              or adj_t is None)
            attrs = []
            for key, value in store.items():
                if key in ('edge_index', 'adj_t'):
                    continue
                if is_sparse(value) or (store.is_edge_attr(key) and
                                        not isinstance(value, Tensor)):
                    attrs.append(_sliceable(f'data[{edge_type!r}]', key,
                                            value, data, store))
                elif store.is_edge_attr(key):
                    attrs.append((key, _to(value, device),
                                  data.__cat_dim__(key, value, store)))
            self.edge_attrs[edge_type] = attrs
        # Overwritten key by key: same keys in the same order as PyG's.
        self.template = copy.copy(data)

    def subgraph(self, out: HeteroSamplerOutput) -> HeteroData:
        r"""The sampled subgraph with its attributes and PyG's bookkeeping,
        without the loader-specific :obj:`metadata`."""
        data = copy.copy(self.template)
        nodes = dict(out.node)
        # Each store looked up once (a lookup by type costs as much as
        # setting an attribute).
        stores: Dict[Any, Any] = {}
        for node_type, attrs in self.node_attrs.items():
            node = nodes.get(node_type)
            if node is None:  # Disconnected: none sampled, as in PyG.
                node = nodes[node_type] = torch.empty(0, dtype=torch.long)
            store = stores[node_type] = data[node_type]
            if self.num_nodes_key[node_type]:
                store.num_nodes = node.numel()
            for key, value, dim in attrs:
                if value is None:
                    store[key] = self.features[node_type](node)
                else:
                    store[key] = _select(value, node, dim)
        rows, cols = out.row, out.col
        edges = dict(out.edge) if out.edge is not None else {}
        for edge_type, attrs in self.edge_attrs.items():
            empty = torch.empty(0, dtype=torch.long)
            row, col = rows.get(edge_type, empty), cols.get(edge_type, empty)
            edge = edges.get(edge_type)
            if edge is None and edge_type not in edges:
                edge = edges[edge_type] = torch.empty(0, dtype=torch.long)
            store = stores[edge_type] = data[edge_type]
            if self.has_edge_index[edge_type]:
                store.edge_index = stack_edges(row, col)
            perm = self.perm.get(edge_type)
            index = None if edge is None else edge.to(torch.int64)
            if index is not None and perm is not None:
                index = perm[index.to(perm.device)]
            adj_t = self.adj_t.get(edge_type)
            if adj_t is not None:
                store.adj_t = _slice_adj_t(
                    adj_t, row, col, index,
                    nodes[edge_type[0]].numel(),
                    nodes[edge_type[-1]].numel())
            for key, value, dim in attrs:
                store[key] = None if index is None else _select(value, index,
                                                                dim)

        def store_of(key):
            store = stores.get(key)
            if store is None:
                store = stores[key] = data[key]
            return store

        # The same bookkeeping as PyG's `NodeLoader.filter_fn`:
        for node_type, node in nodes.items():
            store = store_of(node_type)
            if 'n_id' not in store:
                store.n_id = node
        for edge_type, edge in edges.items():
            store = store_of(edge_type)
            if edge is not None and 'e_id' not in store:
                edge = edge.to(torch.long)
                perm = self.perm.get(edge_type)
                if perm is not None:
                    edge = perm[edge.to(perm.device)]
                store.e_id = edge
        # As `data.set_value_dict(key, values)`:
        for key, values in (('batch', out.batch),
                            ('num_sampled_nodes', out.num_sampled_nodes),
                            ('num_sampled_edges', out.num_sampled_edges)):
            for k, v in (values or {}).items():
                store_of(k)[key] = v
        if out.orig_row is not None and out.orig_col is not None:
            for key in out.orig_row.keys():
                data[key]._orig_edge_index = torch.stack(
                    [out.orig_row[key], out.orig_col[key]], dim=0)
        return data


def stack_edges(row: Tensor, col: Tensor) -> Tensor:
    r""":obj:`torch.stack([row, col])`, a view where :obj:`col` follows
    :obj:`row` in one buffer."""
    n = row.numel()
    if (row.dim() == 1 and col.dim() == 1 and col.numel() == n
            and row.dtype == col.dtype and row.device == col.device
            and row.stride() == (1, ) and col.stride() == (1, ) and n > 0
            and col.data_ptr() == row.data_ptr() + n * row.element_size()
            and row.untyped_storage().data_ptr() ==
            col.untyped_storage().data_ptr()):
        return row.as_strided((2, n), (n, 1))
    return torch.stack([row, col], dim=0)


def move_to_device(data: Union[Data, HeteroData],
                   device: torch.device) -> Union[Data, HeteroData]:
    r""":obj:`data.to(device, non_blocking=True)`, in place, copying only
    the tensors not on :obj:`device` yet."""
    device = with_index(device)

    def move(x):
        return x.to(device, non_blocking=True)

    for store in data.stores:
        for key, value in list(store.items()):
            if isinstance(value, Tensor):
                if value.device != device:
                    store[key] = move(value)
            elif value is not None and not isinstance(value, SCALAR_TYPES):
                store[key] = recursive_apply(value, move)  # As PyG does.
    return data


def check_edge_attrs(data: Any) -> None:
    r"""Raises a :class:`ValueError` naming an edge-level attribute of
    :obj:`data` that batches cannot slice."""
    if isinstance(data, Data):
        stores = [('data', data._store)]
    elif isinstance(data, HeteroData):
        stores = [(f'data[{t!r}]', data[t]) for t in data.edge_types]
    else:
        return
    for where, store in stores:
        for key, value in store.items():
            if key in ('edge_index', 'adj_t') or isinstance(
                    value, (np.ndarray, TensorFrame)):
                continue
            if is_sparse(value) or (not isinstance(value, Tensor)
                                    and store.is_edge_attr(key)):
                _sliceable(where, key, value, data, store)


def _adj_t_entry(store, device: torch.device
                 ) -> Optional[Tuple[Any, Optional[Tensor]]]:
    # An `adj_t` to slice per batch: the tensor (for its type and layout)
    # and its values on `device` (edge ids are positions in its storage).
    if 'adj_t' not in store:
        return None
    value = adj_t_values(store.adj_t)
    return store.adj_t, None if value is None else value.to(device)


def _slice_adj_t(adj_t: Tuple[Any, Optional[Tensor]], row: Tensor,
                 col: Tensor, edge: Optional[Tensor], num_src: int,
                 num_dst: int) -> Any:
    # As PyG's `filter_edge_store_`: the sampled edges, transposed, with
    # the values of the sampled edge ids (none without edge ids).
    like, value = adj_t
    if value is not None:
        value = None if edge is None else value.index_select(
            0, edge.to(value.device, torch.int64))
    return sampled_adj_t(like, row, col, value, num_src, num_dst)


def _sliceable(where: str, key: str, value: Any, data: Any,
               store: Any) -> Tuple[str, Any, int]:
    # An edge-level attribute that is not a dense tensor: NumPy arrays and
    # TensorFrames are sliced per batch (as PyG does); anything else would
    # reach the batch whole, so it is refused.
    if isinstance(value, (np.ndarray, TensorFrame)):
        return key, value, data.__cat_dim__(key, value, store)
    what = 'a sparse matrix' if is_sparse(value) else \
        f'a {type(value).__name__} with one entry per edge'
    raise ValueError(
        f"{where}.{key} is {what}, which the loader cannot slice per batch "
        f"(edge-level attributes must be tensors or NumPy arrays with one "
        f"row per edge, and the sampled adjacency must be 'edge_index' or "
        f"'adj_t'); convert it, or remove it from the graph")


def _to(value, device: torch.device):
    return value.to(device) if isinstance(value, Tensor) else value


def _select(value, index: Tensor, dim: int):
    if isinstance(value, Tensor):
        return value.index_select(dim, index.to(value.device, torch.int64))
    return index_select(value, index.cpu(), dim=dim)  # NumPy, TensorFrame.
