"""A drop-in replacement for PyG's
:class:`~torch_geometric.loader.NeighborLoader`."""
import warnings
from typing import Any, Callable, Dict, Optional, Union

from torch import Tensor
from torch_geometric.loader.node_loader import NodeLoader
from torch_geometric.sampler import BaseSampler
from torch_geometric.sampler.base import SubgraphType

from pyg_orch.topology.graph import GraphTopology
from pyg_orch.loader.assemble import node_metadata
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
from pyg_orch.loader.seed_batches import slice_node_input
from pyg_orch.loader.validation import check_input_nodes, check_input_time
from pyg_orch.sampling.contract import LaunchingSampler, presample_batches
from pyg_orch.sampling.pending import PendingSample
from pyg_orch.sampling.presample import count_node_access
from pyg_orch.typing import (
    DeviceLike,
    GraphData,
    InputNodes,
    NumNeighborsType,
    OptTensor,
    SeedLike,
)


class HybridNeighborLoader(HybridLoaderMixin, NodeLoader):
    r"""A drop-in replacement for PyG's
    :class:`~torch_geometric.loader.NeighborLoader`: same arguments, same
    mini-batches, with neighbor sampling by vectorized PyTorch ops on the CPU
    or the GPU (no :obj:`pyg-lib` or :obj:`torch-sparse` needed).

    .. code-block:: python

        from pyg_orch import HybridNeighborLoader

        loader = HybridNeighborLoader(data, num_neighbors=[15, 10, 5],
                                      batch_size=1024, shuffle=True,
                                      input_nodes=data.train_mask)
        for batch in loader:
            out = model(batch.x, batch.edge_index)[:batch.batch_size]

    Args:
        data (Data or HeteroData or Tuple[FeatureStore, GraphStore] or
            str): The graph, or a partition folder (or its
            :func:`~pyg_orch.distributed.open_stores` pair), one part per
            rank (see :doc:`/distributed`).
        num_neighbors (List[int] or Dict[Tuple[str, str, str], List[int]]):
            The number of neighbors to sample per hop (:obj:`-1` for all), or
            per edge type.
        input_nodes (torch.Tensor or str or Tuple[str, torch.Tensor]): Seed
            nodes as indices or a boolean mask; :obj:`None` for all nodes; for
            heterogeneous graphs a node type or a (node type, indices) tuple.
        input_time (torch.Tensor, optional): Time of every seed for temporal
            sampling; defaults to the seeds' own node times.
        replace (bool): Sample with replacement. (default: :obj:`False`)
        subgraph_type (str): :obj:`'directional'`, :obj:`'bidirectional'` or
            :obj:`'induced'`. (default: :obj:`'directional'`)
        disjoint (bool): Give every seed its own subgraph.
            (default: :obj:`False`)
        temporal_strategy (str): :obj:`'uniform'` or :obj:`'last'` (the most
            recent neighbors). (default: :obj:`'uniform'`)
        time_attr (str, optional): A node-level or edge-level time attribute:
            neighbors are never later than their seed (temporal sampling,
            which implies :obj:`disjoint=True`, as in PyG).
    """
    def __init__(
        self,
        data: GraphData,
        num_neighbors: NumNeighborsType,
        input_nodes: InputNodes = None,
        input_time: OptTensor = None,
        replace: bool = False,
        subgraph_type: Union[SubgraphType, str] = 'directional',
        disjoint: bool = False,
        temporal_strategy: str = 'uniform',
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
        device = check_common_args(data, device, kwargs, prefetch,
                                   lookahead, input_time, time_attr,
                                   temporal_strategy, weight_attr)
        input_nodes = check_input_nodes(data, input_nodes)
        input_time = check_input_time(input_time, input_nodes, data)

        super().__init__(
            data=data, node_sampler=self._in_memory_sampler(locals(), device),
            input_nodes=input_nodes,
            input_time=input_time,
            transform=None,  # Applied after the move to `device`.
            transform_sampler_output=transform_sampler_output,
            filter_per_worker=filter_per_worker, **kwargs)
        self._init_batches(transform, cache)
        launching = isinstance(self.node_sampler, LaunchingSampler)
        if lookahead and not launching:
            raise ValueError("'lookahead=True' needs a sampler with "
                             "'launch_from_nodes', such as a "
                             "HybridNeighborSampler (see "
                             "pyg_orch.sampling.LaunchingSampler)")
        self._init_lookahead(lookahead, pays=launching and
                             self.node_sampler.launches_async)

    def _partition_inputs(self, batches: Any) -> Dict[str, Any]:
        seeds = batches.input_nodes
        return {'node_sampler': batches.sampler,
                'input_nodes': seeds if batches.input_type is None else
                (batches.input_type, seeds)}

    @classmethod
    def _from_batches(cls, batches: Any) -> 'HybridNeighborLoader':
        r"""The loader that delivers :obj:`batches` (a
        :class:`~pyg_orch.loader.partition_pipeline.PartitionBatches`)."""
        loader = cls.__new__(cls)
        cls._init_partitioned(loader, batches)
        return loader

    # `HybridLoaderMixin` #####################################################

    @property
    def _sampler(self) -> Any:
        return self.node_sampler

    def _sample_batch(self, input_data: Any) -> Any:
        return self.node_sampler.sample_from_nodes(input_data)

    def _count_access(self) -> Counts:
        # Batches of `batch_size` seeds, as the loader draws them:
        inputs = self.input_data
        batch_size = self.batch_size or 1
        return count_node_access(
            self.node_sampler, inputs.node, batch_size,
            num_batches=self.cache_options.num_presample_batches
            or presample_batches(inputs.node.numel(), batch_size),
            input_time=inputs.time, input_type=inputs.input_type)

    def _add_metadata(self, data: Any, out: Any) -> Any:
        return node_metadata(data, out, self.input_data.input_type)

    # Look-ahead ############################################################

    def _slice_input(self, index: Tensor) -> Any:
        return slice_node_input(self.input_data, index)

    def _launch_sample(self, input_data: Any) -> PendingSample:
        return self.node_sampler.launch_from_nodes(input_data)


HybridNeighborLoader.__doc__ += LOADER_ARGS_DOC


def DistributedNeighborLoader(
    partition: Any,
    num_neighbors: NumNeighborsType,
    batch_size: int,
    input_nodes: Any = None,
    *,
    group: Optional[Any] = None,
    expected_fingerprint: Optional[str] = None,
    device: DeviceLike = None,
    sampling_device: DeviceLike = None,
    feature_device: DeviceLike = None,
    topology_placement: Any = 'auto',
    feature_placement: str = 'auto',
    cache_size: int = 0,
    edge_cache_size: int = 0,
    cache_policy: str = 'static',
    layout: Optional[Any] = None,
    **options: Any,
) -> HybridNeighborLoader:
    r"""Deprecated: pass the folder to :obj:`HybridNeighborLoader('parts/',
    ...)`. Builds that loader over this rank's part with the old argument
    semantics (:obj:`input_nodes`: this rank's seeds; batches on the CPU);
    :obj:`options` go to
    :class:`~pyg_orch.loader.partition_pipeline.PartitionBatches`."""
    from pyg_orch.loader.partition_pipeline import PartitionBatches
    from pyg_orch.features.partition_stores import open_stores
    warnings.warn("'DistributedNeighborLoader' is deprecated; pass the folder "
                  "to HybridNeighborLoader('parts/', ...) (or the stores of "
                  "open_stores())", DeprecationWarning, stacklevel=2)
    device = 'cpu' if device is None else device
    feature_store, graph_store = open_stores(
        partition, group, expected_fingerprint, device=device,
        sampling_device=sampling_device or 'cpu',
        feature_device=feature_device, topology_placement=topology_placement,
        feature_placement=feature_placement, cache_size=cache_size,
        edge_cache_size=edge_cache_size, policy=cache_policy, layout=layout)
    return HybridNeighborLoader._from_batches(PartitionBatches(
        feature_store, graph_store, num_neighbors, batch_size, input_nodes,
        device=device, **options))
