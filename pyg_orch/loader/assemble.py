"""Assembles homogeneous mini-batches like PyG's
:func:`~torch_geometric.loader.utils.filter_data` and
:meth:`~torch_geometric.loader.NodeLoader.filter_fn`, with the attributes
classified once instead of per batch: less Python work per batch, which
matters when a prefetch thread shares the interpreter with training."""
import copy
from typing import Callable, List, Optional, Tuple

import torch
from torch import Tensor
from torch_geometric.data import Data
from torch_geometric.sampler import SamplerOutput


class DataAssembler:
    r"""Slices :obj:`data` by a :class:`~torch_geometric.sampler.SamplerOutput`.

    Args:
        data (Data): The graph; its tensors are read where they are, or from
            a copy on :obj:`device` (made once).
        device (torch.device): Where batches are built.
        features (callable, optional): Gathers :obj:`x` rows for node ids
            (e.g. :meth:`pyg_orch.gpu.TieredFeatureStore.gather`) instead of
            slicing :obj:`data.x`.
    """
    def __init__(self, data: Data, device: torch.device,
                 features: Optional[Callable[[Tensor], Tensor]] = None):
        self.features = features
        store = data._store
        self.node_attrs: List[Tuple[str, Tensor, int]] = []
        self.edge_attrs: List[Tuple[str, Tensor, int]] = []
        self.set_num_nodes = 'num_nodes' in store
        self.template = copy.copy(data)
        for key, value in store.items():
            if key in ('num_nodes', 'edge_index'):
                continue
            if not isinstance(value, Tensor):
                continue
            if store.is_node_attr(key):
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
        if 'edge_index' in store:
            del self.template['edge_index']

    def __call__(self, out: SamplerOutput) -> Data:
        r"""The mini-batch of a node-level loader: :meth:`subgraph` with
        :obj:`input_id`, :obj:`seed_time` and :obj:`batch_size` from
        :obj:`out.metadata`, as in PyG's
        :meth:`~torch_geometric.loader.NodeLoader.filter_fn`."""
        data = self.subgraph(out)
        data.input_id = out.metadata[0]
        data.seed_time = out.metadata[1]
        data.batch_size = out.metadata[0].size(0)
        return data

    def subgraph(self, out: SamplerOutput) -> Data:
        r"""The sampled subgraph with its node and edge attributes and the
        bookkeeping every PyG loader adds (:obj:`n_id`, :obj:`e_id`,
        :obj:`batch`, :obj:`num_sampled_nodes`, :obj:`num_sampled_edges`),
        without the loader-specific :obj:`metadata`."""
        data = copy.copy(self.template)
        node = out.node
        for key, value, dim in self.node_attrs:
            if value is None:
                data[key] = self.features(node)
            else:
                data[key] = value.index_select(dim,
                                               node.to(value.device,
                                                       torch.int64))
        if self.set_num_nodes:
            data.num_nodes = node.numel()
        data.edge_index = torch.stack([out.row, out.col], dim=0)
        edge = None if out.edge is None else out.edge.to(torch.int64)
        for key, value, dim in self.edge_attrs:
            data[key] = None if edge is None else value.index_select(
                dim, edge.to(value.device))
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
