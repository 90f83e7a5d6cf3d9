"""Training on the GPUs of one machine (HyDRA's half of the mission):
topology and hot feature rows sharded across the GPUs and read over peer
access, with DistributedDataParallel and unchanged PyG models.

:class:`~pyg_orch.multigpu.sharded_features.ShardedFeatureStore` lives in
its own module, not imported here: the sampler imports this package, and
must not import the GPU feature store."""
from pyg_orch.multigpu.peer_memory import PeerBuffers, PeerGroup
from pyg_orch.multigpu.sharded_topology import (
    ShardedCSC,
    TopologySharding,
    shard_bounds,
    shard_graph_topology,
    shard_topology,
)

__all__ = [
    'PeerBuffers',
    'PeerGroup',
    'ShardedCSC',
    'TopologySharding',
    'shard_bounds',
    'shard_graph_topology',
    'shard_topology',
]
