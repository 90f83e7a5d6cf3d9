"""A drop-in replacement for PyG's
:class:`~torch_geometric.loader.LinkNeighborLoader`."""
from typing import Any, Callable, Dict, Optional, Union

import torch
from torch_geometric.data import Data
from torch_geometric.loader.link_loader import LinkLoader
from torch_geometric.sampler import BaseSampler, NegativeSampling
from torch_geometric.sampler.base import SubgraphType
from torch_geometric.typing import InputEdges

from pyg_orch.topology.sparse_adj import edge_index_of
from pyg_orch.topology.graph import GraphTopology
from pyg_orch.loader.assemble import link_metadata
from pyg_orch.loader.features import Counts
from pyg_orch.loader.hybrid import (
    LOADER_ARGS_DOC,
    HybridLoaderMixin,
    check_common_args,
)
from pyg_orch.loader.options import (
    CacheOptions,
    PlacementOptions,
    in_memory_cache,
    resolve_options,
)
from pyg_orch.loader.validation import (
    check_edge_label,
    check_edge_label_index,
    check_edge_label_time,
    check_neg_sampling,
    num_label_edges,
)
from pyg_orch.sampling.contract import presample_batches
from pyg_orch.sampling.presample import count_link_access
from pyg_orch.typing import (
    DeviceLike,
    GraphData,
    NumNeighborsType,
    OptTensor,
    SeedLike,
)


class HybridLinkNeighborLoader(HybridLoaderMixin, LinkLoader):
    r"""A drop-in replacement for PyG's
    :class:`~torch_geometric.loader.LinkNeighborLoader`: same arguments,
    same mini-batches, with neighbor and negative sampling by vectorized
    PyTorch ops on the CPU or the GPU.

    .. code-block:: python

        from torch_geometric.sampler import NegativeSampling
        from pyg_orch import HybridLinkNeighborLoader

        loader = HybridLinkNeighborLoader(
            data, num_neighbors=[10, 5], edge_label_index=train_edges,
            neg_sampling=NegativeSampling('binary', amount=1),
            batch_size=512, shuffle=True)
        for batch in loader:
            z = model(batch.x, batch.edge_index)
            src, dst = batch.edge_label_index
            pred = (z[src] * z[dst]).sum(-1)
            loss = F.binary_cross_entropy_with_logits(pred, batch.edge_label)

    Args:
        data (Data or HeteroData or Tuple[FeatureStore, GraphStore] or
            str): The graph, or a partition folder (or its
            :func:`~pyg_orch.distributed.open_stores` pair), one part per
            rank (label edges: this rank's, in global ids).
        num_neighbors (List[int] or Dict[Tuple[str, str, str], List[int]]):
            The number of neighbors to sample per hop (:obj:`-1` for all), or
            per edge type.
        edge_label_index (torch.Tensor or EdgeType or tuple): The label
            edges, :obj:`[2, num_edges]`;
            :obj:`None` for all edges of a homogeneous graph; for
            heterogeneous graphs an edge type or an (edge type, edges)
            tuple.
        edge_label (torch.Tensor, optional): A label per label edge.
        edge_label_time (torch.Tensor, optional): A time per label edge for
            temporal sampling (needs :obj:`time_attr`): sampled nodes and
            edges are never later than it.
        replace (bool): Sample with replacement. (default: :obj:`False`)
        subgraph_type (str): :obj:`'directional'`, :obj:`'bidirectional'` or
            :obj:`'induced'`. (default: :obj:`'directional'`)
        disjoint (bool): Give every label edge its own subgraph.
            (default: :obj:`False`)
        temporal_strategy (str): :obj:`'uniform'` or :obj:`'last'`.
            (default: :obj:`'uniform'`)
        neg_sampling (NegativeSampling, optional): :obj:`'binary'` (random
            node pairs, :obj:`amount` per positive, labeled :obj:`0`) or
            :obj:`'triplet'` (:obj:`amount` random destinations per
            positive); a mode string or a dict of the arguments works too.
        neg_sampling_ratio (int or float, optional): Deprecated in PyG;
            binary negative sampling with this :obj:`amount`.
        time_attr (str, optional): A node-level or edge-level time attribute
            (temporal sampling, which implies :obj:`disjoint=True`).
    """
    def __init__(
        self,
        data: GraphData,
        num_neighbors: NumNeighborsType,
        edge_label_index: InputEdges = None,
        edge_label: OptTensor = None,
        edge_label_time: OptTensor = None,
        replace: bool = False,
        subgraph_type: Union[SubgraphType, str] = 'directional',
        disjoint: bool = False,
        temporal_strategy: str = 'uniform',
        neg_sampling: Optional[NegativeSampling] = None,
        neg_sampling_ratio: Optional[Union[int, float]] = None,
        time_attr: Optional[str] = None,
        weight_attr: Optional[str] = None,
        transform: Optional[Callable] = None,
        transform_sampler_output: Optional[Callable] = None,
        is_sorted: bool = False,
        filter_per_worker: Optional[bool] = None,
        neighbor_sampler: Optional[BaseSampler] = None,
        directed: bool = True,
        device: DeviceLike = None,
        seed: SeedLike = None,
        topology: Optional[GraphTopology] = None,
        placement: Optional[PlacementOptions] = None,
        cache: Optional[CacheOptions] = None,
        lookahead: Optional[bool] = None,
        prefetch: int = 0,
        **kwargs,
    ):
        placement, cache = resolve_options(kwargs, placement, cache)
        if self._partitioned(data, locals()):
            return
        cache = in_memory_cache(cache)
        check_edge_label_time(edge_label_time, time_attr, None)
        device = check_common_args(data, device, kwargs, prefetch, lookahead,
                                   None, time_attr, temporal_strategy,
                                   weight_attr)
        edge_label_index = check_edge_label_index(data, edge_label_index)
        if edge_label_index is None and isinstance(data, Data) and \
                'adj_t' in data:
            # All edges, as in PyG; of `adj_t` in its storage order.
            edge_label_index = edge_index_of(data._store)
        num = num_label_edges(edge_label_index, data)
        check_edge_label(edge_label, num)
        check_edge_label_time(edge_label_time, time_attr, num)
        neg_sampling = check_neg_sampling(neg_sampling, neg_sampling_ratio,
                                          edge_label, data, edge_label_index)

        super().__init__(
            data=data, link_sampler=self._in_memory_sampler(locals(), device),
            edge_label_index=edge_label_index, edge_label=edge_label,
            edge_label_time=edge_label_time, neg_sampling=neg_sampling,
            transform=None,  # Applied after the move to `device`.
            transform_sampler_output=transform_sampler_output,
            filter_per_worker=filter_per_worker, **kwargs)
        self._init_batches(transform, cache)
        # A link batch is sampled synchronously (the negatives and the
        # seeds' deduplication need their sizes), so the look-ahead overlaps
        # the gathering of the next batch with the training step.
        self._init_lookahead(lookahead)

    def _partition_inputs(self, batches: Any) -> Dict[str, Any]:
        inputs = batches.inputs
        return {'link_sampler': batches.sampler,
                'edge_label_index': (inputs.input_type, torch.stack(
                    [inputs.row, inputs.col])),
                'edge_label': inputs.label, 'edge_label_time': inputs.time,
                'neg_sampling': batches.neg_sampling}

    # `HybridLoaderMixin` #####################################################

    @property
    def _sampler(self) -> Any:
        return self.link_sampler

    def _sample_batch(self, input_data: Any) -> Any:
        return self.link_sampler.sample_from_edges(
            input_data, neg_sampling=self.neg_sampling)

    def _count_access(self) -> Counts:
        # Link batches as the loader draws them: both endpoints of every
        # label edge (of two node types for heterogeneous graphs) and the
        # negatives are seeds.
        batch_size = self.batch_size or 1
        num = self.input_data.row.numel()
        return count_link_access(
            self.link_sampler, self.input_data, batch_size,
            num_batches=self.cache_options.num_presample_batches
            or presample_batches(num, batch_size),
            neg_sampling=self.neg_sampling)

    def _add_metadata(self, data: Any, out: Any) -> Any:
        return link_metadata(data, out, self.neg_sampling,
                             self.input_data.input_type)


HybridLinkNeighborLoader.__doc__ += LOADER_ARGS_DOC
