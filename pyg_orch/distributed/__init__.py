"""Multi-machine training, first piece: offline partitioning of a graph into
parts that machines load one each (:func:`partition_graph`,
:func:`load_partition`). Sampling across machines is not built yet."""

from .build import PartitionInfo, partition_graph
from .storage import GraphPartition, graph_fingerprint, load_partition

__all__ = [
    'GraphPartition',
    'PartitionInfo',
    'graph_fingerprint',
    'load_partition',
    'partition_graph',
]
