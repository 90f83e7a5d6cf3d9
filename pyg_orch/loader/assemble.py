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
    r"""Slices :obj:`data` (on :obj:`device`) by a sampler output, :obj:`x`
    gathered by :obj:`features(node_ids)` (:obj:`features[node_type]` for
    a :class:`HeteroData`) if given. A :class:`Data` is one node and one
    edge type (:obj:`None`); its sliced attributes are set anew on a
    template without them, those of a :class:`HeteroData` are overwritten
    key by key (the same keys in the same order as PyG's)."""
    def __init__(self, data: Union[Data, HeteroData], device: torch.device,
                 features: Union[None, Callable[[Tensor], Tensor],
                                 Mapping[str, Callable[[Tensor], Tensor]]]
                 = None, edge_permutation: Optional[Dict] = None):
        self.hetero = hetero = isinstance(data, HeteroData)
        if not hetero:
            features = None if features is None else {None: features}
        self.features = dict(features or {})
        self.perm = {
            k: v.to(device)
            for k, v in (edge_permutation or {}).items() if v is not None
        }
        self.template = copy.copy(data)
        # Per type, key by key as PyG's `filter_node_store_` /
        # `filter_edge_store_` visit them; tensors moved to `device` once.
        self.node_attrs: Dict[Any, List[Tuple[str, Any, int]]] = {}
        self.num_nodes_key: Dict[Any, bool] = {}
        for t in data.node_types if hetero else [None]:
            store = data[t] if hetero else data._store
            self.node_attrs[t] = self._attrs(data, store, device, t, None)
            self.num_nodes_key[t] = 'num_nodes' in store
        self.edge_attrs: Dict[Any, List[Tuple[str, Any, int]]] = {}
        self.adj_t: Dict[Any, Tuple[Any, Optional[Tensor]]] = {}
        self.has_edge_index: Dict[Any, bool] = {}
        for et in data.edge_types if hetero else [None]:
            store = data[et] if hetero else data._store
            adj_t = _adj_t_entry(store, device)
            if adj_t is not None:
                self.adj_t[et] = adj_t
            self.has_edge_index[et] = 'edge_index' in store or adj_t is None
            self.edge_attrs[et] = self._attrs(
                data, store, device, None,
                f'data[{et!r}]' if hetero else 'data')
            if not hetero:
                for key in ('edge_index', 'adj_t'):
                    if key in store:
                        del self.template[key]

    def _attrs(self, data: Any, store: Any, device: torch.device,
               node_type: Any, edges: Optional[str]
               ) -> List[Tuple[str, Any, int]]:
        # The node (`edges` is None) or edge attributes of `store` to slice:
        # (key, value or None where `features` gives it, dimension).
        attrs = []
        for key, value in store.items():
            if key in ('num_nodes', 'edge_index', 'adj_t'):
                continue
            tensor = isinstance(value, Tensor) and not is_sparse(value)
            array = isinstance(value, (np.ndarray, TensorFrame))
            # Of a `Data`, a node attribute where it is both; not a tensor,
            # an edge attribute:
            node = store.is_node_attr(key) and (self.hetero or tensor or (
                array and not store.is_edge_attr(key)))
            if edges is not None:
                if not (is_sparse(value) or (not node
                                             and store.is_edge_attr(key))):
                    continue
                if not tensor:
                    _check_sliceable(edges, key, value)
            elif not node:
                continue
            if edges is None and key == 'x' and node_type in self.features:
                attrs.append((key, None, 0))
            else:
                dim = data.__cat_dim__(key, value, store)
                if isinstance(value, Tensor):
                    value = value.to(device)
                attrs.append((key, value, dim))
            if not self.hetero:
                del self.template[key]
        return attrs

    def __call__(self, out: SamplerOutput) -> Data:
        r"""The mini-batch of a node-level loader (:func:`node_metadata`)."""
        return node_metadata(self.subgraph(out), out)

    def subgraph(self, out: Union[SamplerOutput, HeteroSamplerOutput]
                 ) -> Union[Data, HeteroData]:
        r"""The sampled subgraph with its attributes and PyG's bookkeeping,
        without the loader-specific :obj:`metadata`."""
        hetero = self.hetero
        data = copy.copy(self.template)

        def typed(value):
            return value if hetero else {None: value}

        nodes = dict(typed(out.node))
        # Each store looked up once (a lookup by type costs as much as
        # setting an attribute).
        stores: Dict[Any, Any] = {}

        def store_of(key):
            store = stores.get(key) if hetero else data
            if store is None:
                store = stores[key] = data[key]
            return store

        for node_type, attrs in self.node_attrs.items():
            node = nodes.get(node_type)
            if node is None:  # Disconnected: none sampled, as in PyG.
                node = nodes[node_type] = torch.empty(0, dtype=torch.long)
            store = store_of(node_type)
            if self.num_nodes_key[node_type]:
                store.num_nodes = node.numel()
            for key, value, dim in attrs:
                if value is None:
                    store[key] = self.features[node_type](node)
                else:
                    store[key] = _select(value, node, dim)
        rows, cols = typed(out.row), typed(out.col)
        edges = dict(typed(out.edge) or {})
        for edge_type, attrs in self.edge_attrs.items():
            empty = torch.empty(0, dtype=torch.long)
            row, col = rows.get(edge_type, empty), cols.get(edge_type, empty)
            edge = edges.get(edge_type)
            if edge is None and edge_type not in edges:
                edge = edges[edge_type] = torch.empty(0, dtype=torch.long)
            store = store_of(edge_type)
            if self.has_edge_index[edge_type]:
                store.edge_index = stack_edges(row, col)
            perm = self.perm.get(edge_type)
            index = None if edge is None else edge.to(torch.int64)
            if index is not None and perm is not None:
                index = perm[index.to(perm.device)]
            adj_t = self.adj_t.get(edge_type)
            if adj_t is not None:
                src, dst = (edge_type[0], edge_type[-1]) if hetero else \
                    (None, None)
                store.adj_t = _slice_adj_t(adj_t, row, col, index,
                                           nodes[src].numel(),
                                           nodes[dst].numel())
            for key, value, dim in attrs:
                store[key] = None if index is None else _select(value, index,
                                                                dim)
        # The same bookkeeping as PyG's `NodeLoader.filter_fn` (of a `Data`,
        # ids set over sliced ones):
        for node_type, node in nodes.items():
            store = store_of(node_type)
            if not hetero or 'n_id' not in store:
                store.n_id = node
        for edge_type, edge in edges.items():
            store = store_of(edge_type)
            if edge is not None and (not hetero or 'e_id' not in store):
                edge = edge.to(torch.long)
                perm = self.perm.get(edge_type)
                if perm is not None:
                    edge = perm[edge.to(perm.device)]
                store.e_id = edge
        # As `data.set_value_dict(key, values)`:
        for key, values in (('batch', out.batch),
                            ('num_sampled_nodes', out.num_sampled_nodes),
                            ('num_sampled_edges', out.num_sampled_edges)):
            for k, v in (typed(values) or {}).items():
                store_of(k)[key] = v
        if out.orig_row is not None and out.orig_col is not None:
            orig_row, orig_col = typed(out.orig_row), typed(out.orig_col)
            for key in orig_row.keys():
                store_of(key)._orig_edge_index = torch.stack(
                    [orig_row[key], orig_col[key]], dim=0)
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
            if key not in ('edge_index', 'adj_t') and (is_sparse(value) or (
                    not isinstance(value, Tensor)
                    and store.is_edge_attr(key))):
                _check_sliceable(where, key, value)


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


def _check_sliceable(where: str, key: str, value: Any) -> None:
    # An edge-level attribute that is not a dense tensor: NumPy arrays and
    # TensorFrames are sliced per batch (as PyG does); anything else would
    # reach the batch whole, so it is refused.
    if isinstance(value, (np.ndarray, TensorFrame)):
        return
    what = 'a sparse matrix' if is_sparse(value) else \
        f'a {type(value).__name__} with one entry per edge'
    raise ValueError(
        f"{where}.{key} is {what}, which the loader cannot slice per batch "
        f"(edge-level attributes must be tensors or NumPy arrays with one "
        f"row per edge, and the sampled adjacency must be 'edge_index' or "
        f"'adj_t'); convert it, or remove it from the graph")


def _select(value, index: Tensor, dim: int):
    if isinstance(value, Tensor):
        return value.index_select(dim, index.to(value.device, torch.int64))
    return index_select(value, index.cpu(), dim=dim)  # NumPy, TensorFrame.
