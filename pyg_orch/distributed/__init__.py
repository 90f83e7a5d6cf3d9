"""Multi-machine training, first piece: offline partitioning of a graph into
parts that machines load one each (:func:`partition_graph`,
:func:`load_partition`); collective sampling across the parts
(:class:`DistributedNeighborSampler`) and gathering of remote node features
with a cache of hot remote rows (:class:`DistributedFeatureGather`), one part
per rank of a process group."""

from .build import PartitionInfo, partition_graph
from .features import DistributedFeatureGather, GatherStats
from .loader import DistributedNeighborLoader
from .sampler import DistributedNeighborSampler, SamplingStats
from .storage import (GraphPartition, PartitionFileError, graph_fingerprint,
                      load_partition, verify_partition)

__all__ = [
    'DistributedFeatureGather',
    'DistributedNeighborLoader',
    'DistributedNeighborSampler',
    'GatherStats',
    'GraphPartition',
    'PartitionFileError',
    'PartitionInfo',
    'SamplingStats',
    'graph_fingerprint',
    'load_partition',
    'partition_graph',
    'verify_partition',
]
