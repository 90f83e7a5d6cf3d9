"""Multi-machine training, as a public namespace: partitioning a graph into
parts that machines load one each (:func:`partition_graph`,
:func:`load_partition`); collective sampling across the parts
(:class:`DistributedNeighborSampler`); a part as PyG's remote backend
(:class:`PartitionFeatureStore`, which fetches remote rows collectively
and caches hot ones, :class:`PartitionGraphStore`, :func:`open_stores`,
where placement lives), the :obj:`data` of the hybrid loaders."""

from pyg_orch.partition.build import PartitionInfo, partition_graph
from pyg_orch.features.partition_gather import GatherStats
from pyg_orch.sampling.collective import (
    DistributedNeighborSampler,
    SamplingStats,
)
from pyg_orch.partition.storage import (
    GraphPartition,
    PartitionFileError,
    graph_fingerprint,
    load_partition,
    verify_partition,
)
from pyg_orch.features.partition_stores import (
    PartitionFeatureStore,
    PartitionGraphStore,
    open_stores,
)

__all__ = [
    'DistributedNeighborSampler',
    'GatherStats',
    'GraphPartition',
    'PartitionFeatureStore',
    'PartitionFileError',
    'PartitionGraphStore',
    'PartitionInfo',
    'SamplingStats',
    'graph_fingerprint',
    'load_partition',
    'open_stores',
    'partition_graph',
    'verify_partition',
]


def __getattr__(name: str):
    # Retired names, kept for one release (each access warns).
    if name == 'DistributedNeighborLoader':
        from pyg_orch.loader.neighbor_loader import DistributedNeighborLoader
        return DistributedNeighborLoader  # Warns when called.
    if name == 'DistributedFeatureGather':
        import warnings

        from pyg_orch.features.partition_gather import \
            DistributedFeatureGather
        warnings.warn(
            "pyg_orch.distributed.DistributedFeatureGather is deprecated: it "
            "is internal to PartitionFeatureStore (open_stores('parts/'), "
            "feature_store.feature_gather)", DeprecationWarning,
            stacklevel=2)
        return DistributedFeatureGather
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
