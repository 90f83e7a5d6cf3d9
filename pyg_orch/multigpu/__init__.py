"""Training on the GPUs of one machine, as a public namespace: topology
sharded across the GPUs, peer memory, DDP set-up and rank failures, with
DistributedDataParallel and unchanged PyG models. This package holds no module
of its own; :class:`~pyg_orch.features.sharded.ShardedFeatureStore` is imported
from its module."""
from pyg_orch.parallel.ddp import (
    DistributedSeedSplit,
    RankInfo,
    all_ranks_stats,
    destroy_distributed,
    equal_batch_count,
    init_distributed,
    rank_info,
    rank_input_nodes,
    split_positions,
)
from pyg_orch.parallel.peer_memory import (
    MULTICAST_OFF_ENV,
    PeerBuffers,
    PeerGroup,
    disable_multicast_env,
)
from pyg_orch.topology.sharded import (
    ShardedCSC,
    ShardedValues,
    TopologySharding,
    shard_bounds,
    shard_graph_topology,
    shard_topology,
)
from pyg_orch.parallel.watchdog import RankFailedError, RankGuard, rank_guard

__all__ = [
    'DistributedSeedSplit',
    'MULTICAST_OFF_ENV',
    'RankFailedError',
    'RankGuard',
    'RankInfo',
    'all_ranks_stats',
    'destroy_distributed',
    'disable_multicast_env',
    'equal_batch_count',
    'init_distributed',
    'rank_guard',
    'rank_info',
    'rank_input_nodes',
    'split_positions',
    'PeerBuffers',
    'PeerGroup',
    'ShardedCSC',
    'ShardedValues',
    'TopologySharding',
    'shard_bounds',
    'shard_graph_topology',
    'shard_topology',
]
