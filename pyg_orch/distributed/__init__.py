"""Multi-machine training, first piece: offline partitioning of a graph into
parts that machines load one each (:func:`partition_graph`,
:func:`load_partition`); collective sampling across the parts
(:class:`DistributedNeighborSampler`); a part as PyG's remote backend
(:class:`PartitionFeatureStore`, which fetches remote rows collectively
and caches hot ones, :class:`PartitionGraphStore`, :func:`open_stores`,
where placement lives), the :obj:`data` of the hybrid loaders."""

from .build import PartitionInfo, partition_graph
from .features import GatherStats
from .sampler import DistributedNeighborSampler, SamplingStats
from .storage import (GraphPartition, PartitionFileError, graph_fingerprint,
                      load_partition, verify_partition)
from .stores import PartitionFeatureStore, PartitionGraphStore, open_stores

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
    if name == 'DistributedNeighborLoader':  # Said by `from ... import`:
        raise ImportError(
            "pyg_orch.distributed.DistributedNeighborLoader was retired: use "
            "HybridNeighborLoader('parts/', ...) (placement via "
            "open_stores() or the loader's keywords); a deprecated alias "
            "stays for one release as pyg_orch.DistributedNeighborLoader")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
