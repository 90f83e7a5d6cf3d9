"""Multi-machine training, as a public namespace: partitioning a graph into
parts that machines load one each (:func:`partition_graph`,
:func:`load_partition`, from :mod:`pyg_orch.partition`); collective sampling
across the parts (:class:`DistributedNeighborSampler`, from
:mod:`pyg_orch.sampling.collective`) and gathering of remote node features
with a cache of hot remote rows (:class:`DistributedFeatureGather`), one part
per rank of a process group; a part as PyG's remote backend
(:class:`PartitionFeatureStore`, :class:`PartitionGraphStore`,
:func:`open_stores`, from :mod:`pyg_orch.features`), the :obj:`data` of the
hybrid loaders. This package holds no module of its own."""

from pyg_orch.partition.build import PartitionInfo, partition_graph
from pyg_orch.features.partition_gather import (
    DistributedFeatureGather,
    GatherStats,
)
from pyg_orch.loader.distributed import DistributedNeighborLoader
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
    'DistributedFeatureGather',
    'DistributedNeighborLoader',
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
